/* fsbench_meta: the metadata and small-file workloads of bench/fsbench, one phase per run.
 *
 *   fsbench_meta create DIR N        open(O_CREAT|O_EXCL) + close of DIR/fNNNNNNN, N files
 *   fsbench_meta stat   DIR N        stat(2) of each DIR/fNNNNNNN by path
 *   fsbench_meta rename DIR N        rename DIR/fNNNNNNN -> DIR/rNNNNNNN (same directory)
 *   fsbench_meta unlink DIR N        unlink DIR/rNNNNNNN
 *   fsbench_meta write  DIR N SIZE   create, write SIZE bytes in one write(2), close: N files
 *   fsbench_meta read   DIR N SIZE   open, read until EOF (checks SIZE bytes), close: N files
 *   fsbench_meta lsl    DIR N        opendir + readdir + fstatat(AT_SYMLINK_NOFOLLOW) of every
 *                                    entry, what `ls -l` does minus formatting (checks N entries)
 *
 * Prints one JSON object: {"op": ..., "n": N, "seconds": S}; exit status 1 on any failed call,
 * with the call and errno on stderr. Each phase is its own process so that the caller can drop
 * caches between phases. The clock is CLOCK_MONOTONIC around the loop only.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char* call, const char* path) {
  fprintf(stderr, "fsbench_meta: %s %s: %s\n", call, path, strerror(errno));
  exit(1);
}

static void name(char* buf, size_t len, const char* dir, char prefix, long i) {
  snprintf(buf, len, "%s/%c%07ld", dir, prefix, i);
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: fsbench_meta create|stat|rename|unlink|lsl DIR N\n"
                    "       fsbench_meta write|read DIR N SIZE\n");
    return 2;
  }
  const char* op = argv[1];
  const char* dir = argv[2];
  const long n = strtol(argv[3], NULL, 10);
  const long size = argc > 4 ? strtol(argv[4], NULL, 10) : 0;
  if (n <= 0 || size < 0) {
    fprintf(stderr, "fsbench_meta: N must be > 0 and SIZE >= 0\n");
    return 2;
  }
  char path[4096], path2[4096];
  char* buf = NULL;
  if (size > 0) {
    buf = malloc((size_t)size + 1);
    if (!buf) die("malloc", "");
    for (long i = 0; i < size; ++i) buf[i] = (char)(i * 131 + 7);
  }

  double t0 = now();
  if (!strcmp(op, "create")) {
    for (long i = 0; i < n; ++i) {
      name(path, sizeof path, dir, 'f', i);
      int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
      if (fd < 0) die("open", path);
      if (close(fd) != 0) die("close", path);
    }
  } else if (!strcmp(op, "stat")) {
    struct stat st;
    for (long i = 0; i < n; ++i) {
      name(path, sizeof path, dir, 'f', i);
      if (stat(path, &st) != 0) die("stat", path);
    }
  } else if (!strcmp(op, "rename")) {
    for (long i = 0; i < n; ++i) {
      name(path, sizeof path, dir, 'f', i);
      name(path2, sizeof path2, dir, 'r', i);
      if (rename(path, path2) != 0) die("rename", path);
    }
  } else if (!strcmp(op, "unlink")) {
    for (long i = 0; i < n; ++i) {
      name(path, sizeof path, dir, 'r', i);
      if (unlink(path) != 0) die("unlink", path);
    }
  } else if (!strcmp(op, "write") && size > 0) {
    for (long i = 0; i < n; ++i) {
      name(path, sizeof path, dir, 's', i);
      int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) die("open", path);
      if (write(fd, buf, (size_t)size) != size) die("write", path);
      if (close(fd) != 0) die("close", path);
    }
  } else if (!strcmp(op, "read") && size > 0) {
    for (long i = 0; i < n; ++i) {
      name(path, sizeof path, dir, 's', i);
      int fd = open(path, O_RDONLY);
      if (fd < 0) die("open", path);
      long got = 0;
      for (;;) {
        ssize_t r = read(fd, buf, (size_t)size + 1);
        if (r < 0) die("read", path);
        if (r == 0) break;
        got += r;
      }
      if (got != size) {
        fprintf(stderr, "fsbench_meta: %s: read %ld bytes, expected %ld\n", path, got, size);
        return 1;
      }
      if (close(fd) != 0) die("close", path);
    }
  } else if (!strcmp(op, "lsl")) {
    DIR* d = opendir(dir);
    if (!d) die("opendir", dir);
    long entries = 0;
    struct stat st;
    struct dirent* e;
    errno = 0;
    while ((e = readdir(d)) != NULL) {
      if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) die("lstat", e->d_name);
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) ++entries;
      errno = 0;
    }
    if (errno) die("readdir", dir);
    closedir(d);
    if (entries != n) {
      fprintf(stderr, "fsbench_meta: %s holds %ld entries, expected %ld\n", dir, entries, n);
      return 1;
    }
  } else {
    fprintf(stderr, "fsbench_meta: unknown operation %s (or SIZE missing)\n", op);
    return 2;
  }
  double secs = now() - t0;
  printf("{\"op\": \"%s\", \"n\": %ld, \"seconds\": %.6f}\n", op, n, secs);
  free(buf);
  return 0;
}
