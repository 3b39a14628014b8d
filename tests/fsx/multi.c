/* clio_fsx_multi: concurrency checks on files shared by several processes.
 *
 *   clio_fsx_multi [-s SEED] [-k PROCS] [-n OPS] [-t a,b,c,d] DIR
 *
 * (a) shared   K writers own disjoint 4 KiB regions of one 2.5 MiB file (regions of different
 *              writers side by side in every 1 MiB chunk) and write generation-stamped words:
 *              each 8-byte word is (0xC0|writer, generation, offset/8). Two readers (and the
 *              writers themselves) read random ranges, with pread and mmap, and check that
 *              every byte is zero (never-written region) or belongs to a stamp of the region's
 *              owner for that very offset. Each writer also checks its own regions exactly, in
 *              the page cache and after fsync + POSIX_FADV_DONTNEED (from the filesystem).
 * (b) append   K appenders write self-describing records with O_APPEND (magic, length, writer,
 *              seq, checksum, payload derived from writer and seq) while a reader follows the
 *              tail; at the end the whole file (after fsync + DONTNEED) must parse into exactly
 *              K*OPS intact records with each writer's seqs in order and no gap.
 * (c) grow     one writer extends a file with sequential writes of varied sizes while two
 *              readers read up to the current size (pread and mmap): the size never shrinks and
 *              every byte below it is the one written there (never zero, never stale).
 * (d) twofiles two files, each with one writer (writes, truncates, punches, fsync, DONTNEED,
 *              checked exactly against its own mirror) and one reader; the stamps carry the
 *              file id, so a byte of the other file (or of a freed block) is detected.
 *
 * Every violation is reported with scenario, process, op, offset, expected and got, and the
 * exit status is 1; 0 when everything passed; 2 on bad usage. Bounded by op counts: writers
 * run OPS operations; readers run until their writers are done (at most a fixed multiple of
 * OPS reads). The interleaving is up to the scheduler; the seed fixes each process's choices.
 * Plain C, no project libraries.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB ((uint64_t)1024)
#define MiB ((uint64_t)1024 * 1024)

static uint64_t seed = 1, nops = 400;
static int nprocs = 4;
static const char *dir;
static char who[96] = "main";     /* the process, for messages */
static uint64_t pagesz;

/* ---- PRNG (splitmix64), one state per process --------------------------------------------- */
static uint64_t rng_state;
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static uint64_t next64(void) { return mix64(rng_state += 0x9e3779b97f4a7c15ULL); }
static uint64_t rnd(uint64_t n) { return n ? next64() % n : 0; }
static uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static void seed_proc(int scenario, int proc) {
  rng_state = mix64(seed ^ mix64((uint64_t)scenario * 1000 + (uint64_t)proc + 1));
}

/* ---- reporting ---------------------------------------------------------------------------- */
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "clio_fsx_multi: FAILURE seed=%" PRIu64 " %s: %s\n", seed, who, msg);
  fflush(stderr);
  _exit(1);
}

static void hex(char *out, size_t n, const uint8_t *b, size_t len) {
  size_t k = 0;
  out[0] = 0;
  for (size_t i = 0; i < len && k + 4 < n; i++) k += (size_t)snprintf(out + k, n - k, "%02x ", b[i]);
  if (k) out[k - 1] = 0;
}

/* Stamps: 8 little-endian bytes. byte 7 = magic (which writer / file), bytes 4..6 =
 * generation, bytes 0..3 = offset / 8. */
static uint64_t stamp(uint8_t magic, uint32_t gen, uint64_t off) {
  return ((uint64_t)magic << 56) | ((uint64_t)(gen & 0xffffff) << 32) | (uint32_t)(off >> 3);
}
static uint8_t stamp_byte(uint64_t w, unsigned i) { return (uint8_t)(w >> (8 * i)); }
static void fill_stamps(uint8_t *buf, uint64_t off, uint64_t len, uint8_t magic, uint32_t gen) {
  for (uint64_t i = 0; i < len; i++) {
    uint64_t p = off + i;
    buf[i] = stamp_byte(stamp(magic, gen, p & ~(uint64_t)7), (unsigned)(p & 7));
  }
}
static uint64_t word_at(const uint8_t *b) {
  uint64_t w = 0;
  for (int i = 7; i >= 0; i--) w = (w << 8) | b[i];
  return w;
}
static void describe_word(char *out, size_t n, const uint8_t *b) {
  uint64_t w = word_at(b);
  snprintf(out, n, "word 0x%016" PRIx64 " = magic 0x%02x gen %" PRIu64 " offset 0x%" PRIx64, w,
           (unsigned)(w >> 56), (w >> 32) & 0xffffff, (w & 0xffffffffu) << 3);
}

/* ---- I/O helpers -------------------------------------------------------------------------- */
static void full_pwrite(int fd, const void *buf, uint64_t len, uint64_t off, const char *what) {
  uint64_t done = 0;
  while (done < len) {
    ssize_t r = pwrite(fd, (const uint8_t *)buf + done, len - done, (off_t)(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      die("%s: pwrite(off 0x%" PRIx64 ", len 0x%" PRIx64 "): %s", what, off + done, len - done,
          r < 0 ? strerror(errno) : "returned 0");
    done += (uint64_t)r;
  }
}
static uint64_t full_pread(int fd, void *buf, uint64_t len, uint64_t off, const char *what) {
  uint64_t done = 0;
  while (done < len) {
    ssize_t r = pread(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      die("%s: pread(off 0x%" PRIx64 ", len 0x%" PRIx64 "): %s", what, off + done, len - done,
          strerror(errno));
    if (r == 0) break;
    done += (uint64_t)r;
  }
  return done;
}
static uint64_t fsize(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) die("fstat: %s", strerror(errno));
  return (uint64_t)st.st_size;
}
static void drop_cache(int fd, uint64_t off, uint64_t len) {
  if (fsync(fd) != 0) die("fsync: %s", strerror(errno));
  int e = posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
  if (e) die("posix_fadvise(DONTNEED): %s", strerror(e));
}
static int xopen(const char *p, int flags) {
  int fd = open(p, flags, 0644);
  if (fd < 0) die("open %s: %s", p, strerror(errno));
  return fd;
}
static void *xmalloc(size_t n) {
  void *p = calloc(1, n);
  if (!p) die("out of memory");
  return p;
}

/* mmap reads with SIGBUS caught. */
static sigjmp_buf map_jmp;
static volatile sig_atomic_t in_map;
static void on_fault(int sig) {
  if (in_map) siglongjmp(map_jmp, sig);
  signal(sig, SIG_DFL);
  raise(sig);
}
/* Copies [off, off+len) through a MAP_SHARED PROT_READ mapping into buf. */
static void map_read(int fd, uint8_t *buf, uint64_t off, uint64_t len, const char *what) {
  uint64_t pg = off & ~(pagesz - 1);
  uint64_t maplen = off + len - pg;
  uint8_t *p = mmap(NULL, maplen, PROT_READ, MAP_SHARED, fd, (off_t)pg);
  if (p == MAP_FAILED)
    die("%s: mmap(off 0x%" PRIx64 ", len 0x%" PRIx64 "): %s", what, pg, maplen, strerror(errno));
  int sig = sigsetjmp(map_jmp, 1);
  if (sig) {
    in_map = 0;
    die("%s: %s reading the mapping of [0x%" PRIx64 ", 0x%" PRIx64 ")", what,
        sig == SIGBUS ? "SIGBUS" : "SIGSEGV", off, off + len);
  }
  in_map = 1;
  memcpy(buf, p + (off - pg), len);
  in_map = 0;
  munmap(p, maplen);
}

/* Shared between the processes of a scenario. */
struct shared {
  volatile int writers_done;
  volatile int writers_finished_checks;
  volatile uint64_t grow_size;     /* (c) bytes the grower has written so far */
};
static struct shared *sh;

static void spin_until(volatile int *v, int target) {
  while (__atomic_load_n(v, __ATOMIC_ACQUIRE) < target) usleep(1000);
}

/* Forks fn(i) for i in [0, n); each child exits with fn's status. */
typedef int (*proc_fn)(int i);
static int nchildren;
static pid_t children[256];
static void spawn(proc_fn fn, int i) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) _exit(fn(i));
  children[nchildren++] = pid;
}
static int reap(void) {
  int failed = 0;
  for (int i = 0; i < nchildren; i++) {
    int st;
    while (waitpid(children[i], &st, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      failed++;
      if (WIFSIGNALED(st))
        fprintf(stderr, "clio_fsx_multi: %s: child %d killed by signal %d\n", who, (int)children[i],
                WTERMSIG(st));
    }
  }
  nchildren = 0;
  return failed;
}

static char path_a[4096], path_b[4096], path_c[4096], path_d[2][4096];

/* ==== (a) many writers, one file, disjoint regions ======================================== */
#define A_REG ((uint64_t)4096)
#define A_NREG ((uint64_t)640)                      /* 2.5 MiB */
#define A_SIZE (A_REG * A_NREG)
static int a_nwriters;
static uint32_t a_gen_bound;               /* every generation is below this */

static int a_owner(uint64_t r) { return (int)(r % (uint64_t)a_nwriters); }
static int a_prefilled(uint64_t r) { return r % 3 != 2; }

/* Checks bytes [off, off+len) of the shared file as read by anyone. */
static void a_check(const uint8_t *b, uint64_t off, uint64_t len, const char *how) {
  for (uint64_t i = 0; i < len; i++) {
    uint64_t p = off + i;
    uint64_t r = p / A_REG;
    unsigned bi = (unsigned)(p & 7);
    uint8_t owner_magic = (uint8_t)(0xC0 | a_owner(r));
    uint64_t want = stamp(owner_magic, 0, p & ~(uint64_t)7);
    uint8_t g = b[i];
    int ok;
    if (bi >= 4 && bi <= 6) {
      ok = 1;  /* generation byte; checked per whole word below */
    } else if (a_prefilled(r)) {
      ok = g == stamp_byte(want, bi);
    } else {
      ok = g == 0 || g == stamp_byte(want, bi);
    }
    /* a whole word in the buffer: its generation must be one a writer can have written */
    if (ok && bi == 7 && i >= 7) {
      uint64_t w = word_at(b + i - 7);
      if ((w >> 56) != 0 && ((w >> 32) & 0xffffff) >= a_gen_bound) ok = 0;
    }
    if (!ok) {
      uint64_t wo = p & ~(uint64_t)7;
      uint8_t ctx[8] = {0};
      for (unsigned k = 0; k < 8; k++)
        if (wo + k >= off && wo + k < off + len) ctx[k] = b[wo + k - off];
      char d[160], h[64];
      describe_word(d, sizeof d, ctx);
      hex(h, sizeof h, ctx, 8);
      die("(a) %s of [0x%" PRIx64 ", 0x%" PRIx64 "): bad byte at offset 0x%" PRIx64
          " (region %" PRIu64 ", owner writer %d, %s, chunk %" PRIu64 "): got 0x%02x, expected %s"
          "0x%02x (byte %u of stamp (writer %d, gen, offset 0x%" PRIx64 "), gen < %u); "
          "the word there: %s = %s%s",
          how, off, off + len, p, r, a_owner(r), a_prefilled(r) ? "prefilled" : "not prefilled",
          p / MiB, g, a_prefilled(r) ? "" : "0x00 or ", stamp_byte(want, bi), bi, a_owner(r),
          p & ~(uint64_t)7, a_gen_bound, h, d,
          (g && bi == 7 && (g & 0xE0) == 0xC0 && g != owner_magic) ? " (another writer's stamp)"
          : (g && bi == 7 && (g & 0xF0) == 0xE0) ? " (a stamp of scenario (d)'s files)" : "");
    }
  }
}

static void a_read_check(int fd, uint8_t *buf, const char *tag) {
  uint64_t len = rnd(4) == 0 ? 1 + rnd(A_SIZE) : 1 + rnd(64 * KiB);
  uint64_t off = rnd(A_SIZE - len + 1);
  if (rnd(4) == 0) {
    map_read(fd, buf, off, len, "(a) mmap read");
    a_check(buf, off, len, tag[0] == 'w' ? "writer's mmap read" : "mmap read");
  } else {
    uint64_t got = full_pread(fd, buf, len, off, "(a) read");
    if (got != len)
      die("(a) pread of [0x%" PRIx64 ", 0x%" PRIx64 ") returned 0x%" PRIx64 " bytes; the file "
          "is 0x%" PRIx64 " bytes for the whole run", off, off + len, got, A_SIZE);
    a_check(buf, off, len, tag[0] == 'w' ? "writer's pread" : "pread");
  }
}

static int a_writer(int w) {
  snprintf(who, sizeof who, "(a) writer %d", w);
  seed_proc(1, w);
  int fd = xopen(path_a, O_RDWR);
  uint8_t *mirror = xmalloc(A_SIZE);   /* exact expected content of this writer's regions */
  uint8_t *buf = xmalloc(A_SIZE), *rb = xmalloc(A_SIZE);
  uint64_t nown = 0, own[A_NREG];
  for (uint64_t r = 0; r < A_NREG; r++)
    if (a_owner(r) == w) {
      own[nown++] = r;
      if (a_prefilled(r)) fill_stamps(mirror + r * A_REG, r * A_REG, A_REG, (uint8_t)(0xC0 | w), 0);
    }
  for (uint64_t op = 1; op <= nops; op++) {
    uint64_t r = own[rnd(nown)];
    uint64_t s = 0, e = A_REG;
    switch (rnd(4)) {
    case 0: break;                                       /* the whole region */
    case 1: s = 8 * rnd(A_REG / 8); e = s + 8 * (1 + rnd((A_REG - s) / 8)); break;
    default: s = rnd(A_REG); e = s + 1 + rnd(A_REG - s); break; /* any bytes */
    }
    uint64_t off = r * A_REG + s, len = e - s;
    fill_stamps(buf, off, len, (uint8_t)(0xC0 | w), (uint32_t)op);
    full_pwrite(fd, buf, len, off, "(a) write");
    memcpy(mirror + off, buf, len);
    uint64_t k = rnd(16);
    if (k < 3 || k == 15) {  /* check own region exactly (page cache; k == 15: after a drop) */
      if (k == 15) drop_cache(fd, r * A_REG, A_REG);
      uint64_t got = full_pread(fd, rb, A_REG, r * A_REG, "(a) read own region");
      for (uint64_t i = 0; i < A_REG; i++)
        if (got != A_REG || rb[i] != mirror[r * A_REG + i]) {
          char e8[64], g8[64], d[160];
          uint64_t wo = i & ~(uint64_t)7;
          hex(e8, sizeof e8, mirror + r * A_REG + wo, 8);
          hex(g8, sizeof g8, rb + wo, 8);
          describe_word(d, sizeof d, rb + wo);
          die("(a) op %" PRIu64 ": own region %" PRIu64 " read back%s after writing [0x%" PRIx64
              ", 0x%" PRIx64 "): first difference at offset 0x%" PRIx64 " (read returned 0x%"
              PRIx64 " bytes): expected word %s, got %s (%s)", op, r,
              k == 15 ? " after fsync + DONTNEED" : "", off, off + len, r * A_REG + i, got, e8, g8, d);
        }
    } else if (k < 7) {
      a_read_check(fd, rb, "writer");
    }
  }
  __atomic_add_fetch(&sh->writers_done, 1, __ATOMIC_RELEASE);
  spin_until(&sh->writers_done, a_nwriters);
  /* Everyone is done: every owned region must now be exactly as this writer left it, from the
   * filesystem (not the page cache). */
  drop_cache(fd, 0, 0);
  uint64_t got = full_pread(fd, rb, A_SIZE, 0, "(a) final read");
  if (got != A_SIZE) die("(a) final read returned 0x%" PRIx64 " bytes, expected 0x%" PRIx64, got, A_SIZE);
  for (uint64_t j = 0; j < nown; j++) {
    uint64_t o = own[j] * A_REG;
    if (memcmp(rb + o, mirror + o, A_REG) == 0) continue;
    uint64_t i = 0;
    while (rb[o + i] == mirror[o + i]) i++;
    char e8[64], g8[64], d[160];
    uint64_t wo = i & ~(uint64_t)7;
    hex(e8, sizeof e8, mirror + o + wo, 8);
    hex(g8, sizeof g8, rb + o + wo, 8);
    describe_word(d, sizeof d, rb + o + wo);
    die("(a) final check (all writers done, fsync + DONTNEED): own region %" PRIu64 " differs at "
        "offset 0x%" PRIx64 " (chunk %" PRIu64 "): expected %s, got %s (%s)",
        own[j], o + i, (o + i) / MiB, e8, g8, d);
  }
  a_check(rb, 0, A_SIZE, "final whole-file read");
  close(fd);
  return 0;
}

static int a_reader(int i) {
  snprintf(who, sizeof who, "(a) reader %d", i);
  seed_proc(1, 100 + i);
  int fd = xopen(path_a, O_RDONLY);
  uint8_t *buf = xmalloc(A_SIZE);
  uint64_t reads = 0, cap = 8 * nops;
  while (reads < cap && __atomic_load_n(&sh->writers_done, __ATOMIC_ACQUIRE) < a_nwriters) {
    if (rnd(32) == 0) {
      int e = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  /* clean pages only */
      if (e) die("posix_fadvise: %s", strerror(e));
    }
    a_read_check(fd, buf, "reader");
    reads++;
  }
  close(fd);
  return 0;
}

static int scenario_a(void) {
  snprintf(who, sizeof who, "(a) setup");
  a_nwriters = nprocs;
  a_gen_bound = 1;
  while (a_gen_bound <= nops) a_gen_bound <<= 1;  /* a torn word mixes bytes of two gens */
  int fd = xopen(path_a, O_RDWR | O_CREAT | O_TRUNC);
  uint8_t *buf = xmalloc(A_REG);
  for (uint64_t r = 0; r < A_NREG; r++)
    if (a_prefilled(r)) {
      fill_stamps(buf, r * A_REG, A_REG, (uint8_t)(0xC0 | a_owner(r)), 0);
      full_pwrite(fd, buf, A_REG, r * A_REG, "(a) prefill");
    }
  if (ftruncate(fd, (off_t)A_SIZE) != 0) die("ftruncate: %s", strerror(errno));
  drop_cache(fd, 0, 0);
  close(fd);
  free(buf);
  memset(sh, 0, sizeof *sh);
  for (int w = 0; w < a_nwriters; w++) spawn(a_writer, w);
  for (int i = 0; i < 2; i++) spawn(a_reader, i);
  snprintf(who, sizeof who, "(a)");
  return reap();
}

/* ==== (b) appenders ======================================================================== */
#define B_MAGIC 0x444e5041u  /* "APND" */
#define B_HDR 32u
struct b_hdr {
  uint32_t magic, len, writer, seq;
  uint64_t cksum, pad;
};
static uint8_t b_payload_byte(uint32_t writer, uint32_t seq, uint64_t i) {
  return (uint8_t)(mix64(((uint64_t)writer << 40) ^ ((uint64_t)seq << 20) ^ (i / 8) ^ 0xb0b) >> (8 * (i % 8)));
}
static uint64_t b_cksum(const struct b_hdr *h, const uint8_t *payload) {
  uint64_t x = 0xcbf29ce484222325ull;
  uint32_t f[4] = {h->magic, h->len, h->writer, h->seq};
  for (int i = 0; i < 4; i++) x = (x ^ f[i]) * 0x100000001b3ull;
  for (uint64_t i = 0; i < h->len - B_HDR; i++) x = (x ^ payload[i]) * 0x100000001b3ull;
  return x;
}
static uint32_t b_len_for(void) {
  switch (rnd(8)) {
  case 0: return B_HDR;                                 /* header only */
  case 1: case 2: return B_HDR + 1 + (uint32_t)rnd(200);
  case 3: case 4: return B_HDR + (uint32_t)rnd(8192);
  case 5: case 6: return B_HDR + (uint32_t)rnd(64 * 1024);
  default: return B_HDR + (uint32_t)rnd(300 * 1024);
  }
}
#define B_MAXREC (B_HDR + 300 * 1024)

static int b_appender(int w) {
  snprintf(who, sizeof who, "(b) appender %d", w);
  seed_proc(2, w);
  int fd = xopen(path_b, O_WRONLY | O_APPEND);
  uint8_t *rec = xmalloc(B_MAXREC);
  for (uint32_t seq = 0; seq < nops; seq++) {
    struct b_hdr h = {B_MAGIC, b_len_for(), (uint32_t)w, seq, 0, ~(uint64_t)seq};
    for (uint64_t i = 0; i < h.len - B_HDR; i++) rec[B_HDR + i] = b_payload_byte(h.writer, seq, i);
    h.cksum = b_cksum(&h, rec + B_HDR);
    memcpy(rec, &h, B_HDR);
    ssize_t n;
    do n = write(fd, rec, h.len); while (n < 0 && errno == EINTR);
    if (n != (ssize_t)h.len)
      die("(b) append of record seq %u (%u bytes) with O_APPEND: %s", seq, h.len,
          n < 0 ? strerror(errno) : "short write (the record is no longer one write)");
    if (rnd(32) == 0 && fsync(fd) != 0) die("fsync: %s", strerror(errno));
  }
  close(fd);
  __atomic_add_fetch(&sh->writers_done, 1, __ATOMIC_RELEASE);
  return 0;
}

/* Parses records from buf[0, len) (file offset base). Returns the bytes of complete records
 * consumed; a trailing partial record is checked as far as it goes. next_seq[w] is the seq
 * expected next from writer w; *nrec counts complete records. */
static uint64_t b_parse(const uint8_t *buf, uint64_t len, uint64_t base, uint32_t *next_seq,
                        uint64_t *nrec, int final, const char *how) {
  uint64_t pos = 0;
  while (pos < len) {
    uint64_t avail = len - pos;
    struct b_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(&h, buf + pos, min64(avail, B_HDR));
    char hx[128];
    hex(hx, sizeof hx, buf + pos, min64(avail, 32));
    if (avail >= 4 && h.magic != B_MAGIC)
      die("(b) %s: no record magic at offset 0x%" PRIx64 " (chunk %" PRIu64 "); bytes there: %s",
          how, base + pos, (base + pos) / MiB, hx);
    if (avail >= 16) {
      if (h.len < B_HDR || h.len > B_MAXREC || h.writer >= (uint32_t)nprocs)
        die("(b) %s: corrupt record header at offset 0x%" PRIx64 ": len %u writer %u seq %u; bytes: %s",
            how, base + pos, h.len, h.writer, h.seq, hx);
      if (h.seq != next_seq[h.writer])
        die("(b) %s: record at offset 0x%" PRIx64 " is writer %u seq %u, expected seq %u from "
            "that writer (%s)", how, base + pos, h.writer, h.seq, next_seq[h.writer],
            h.seq < next_seq[h.writer] ? "duplicate or reordered" : "a record is missing");
    }
    if (avail < B_HDR || avail < h.len) {
      if (final)
        die("(b) %s: file ends inside a record at offset 0x%" PRIx64 " (%" PRIu64 " of its %u "
            "bytes present)", how, base + pos, avail, avail >= 8 ? h.len : 0);
      /* partial: the bytes present must be this record's */
      for (uint64_t i = B_HDR; i < avail; i++)
        if (buf[pos + i] != b_payload_byte(h.writer, h.seq, i - B_HDR))
          die("(b) %s: record writer %u seq %u at 0x%" PRIx64 " (partly visible, 0x%" PRIx64
              " of %u bytes): payload byte at offset 0x%" PRIx64 " is 0x%02x, expected 0x%02x%s",
              how, h.writer, h.seq, base + pos, avail, h.len, base + pos + i, buf[pos + i],
              b_payload_byte(h.writer, h.seq, i - B_HDR),
              buf[pos + i] == 0 ? " (zero below EOF while an append is in flight)" : "");
      return pos;
    }
    if (b_cksum(&h, buf + pos + B_HDR) != h.cksum) {
      uint64_t i = 0;
      while (i < h.len - B_HDR && buf[pos + B_HDR + i] == b_payload_byte(h.writer, h.seq, i)) i++;
      die("(b) %s: checksum of record writer %u seq %u len %u at offset 0x%" PRIx64 " is wrong; "
          "first bad payload byte at offset 0x%" PRIx64 " (chunk %" PRIu64 "): got 0x%02x, expected 0x%02x",
          how, h.writer, h.seq, h.len, base + pos, base + pos + B_HDR + i,
          (base + pos + B_HDR + i) / MiB, buf[pos + B_HDR + i], b_payload_byte(h.writer, h.seq, i));
    }
    next_seq[h.writer]++;
    (*nrec)++;
    pos += h.len;
  }
  return pos;
}

static int b_reader(int i) {
  snprintf(who, sizeof who, "(b) tail reader %d", i);
  seed_proc(2, 100 + i);
  int fd = xopen(path_b, O_RDONLY);
  uint32_t next_seq[256] = {0};
  uint64_t nrec = 0, pos = 0, reads = 0, cap = 40 * nops * (uint64_t)nprocs;
  size_t bufsz = 4 * MiB;
  uint8_t *buf = xmalloc(bufsz);
  for (;;) {
    int done = __atomic_load_n(&sh->writers_done, __ATOMIC_ACQUIRE) >= nprocs;
    uint64_t got = full_pread(fd, buf, bufsz, pos, "(b) tail read");
    reads++;
    pos += b_parse(buf, got, pos, next_seq, &nrec, 0, "tail read while appending");
    if (done && got < bufsz) {        /* read to EOF after every appender finished */
      if (nrec != nops * (uint64_t)nprocs || pos != fsize(fd))
        die("(b) after all appends, the tail reader parsed %" PRIu64 " records up to 0x%" PRIx64
            ", expected %" PRIu64 " records up to EOF 0x%" PRIx64, nrec, pos,
            nops * (uint64_t)nprocs, fsize(fd));
      break;
    }
    if (reads >= cap) break;
    if (got < bufsz) usleep(200);
  }
  close(fd);
  return 0;
}

static int scenario_b(void) {
  snprintf(who, sizeof who, "(b) setup");
  int fd = xopen(path_b, O_RDWR | O_CREAT | O_TRUNC);
  close(fd);
  memset(sh, 0, sizeof *sh);
  for (int w = 0; w < nprocs; w++) spawn(b_appender, w);
  spawn(b_reader, 0);
  snprintf(who, sizeof who, "(b)");
  int failed = reap();
  if (failed) return failed;
  /* The whole file, from the filesystem. */
  snprintf(who, sizeof who, "(b) final parse");
  fd = xopen(path_b, O_RDONLY);
  drop_cache(fd, 0, 0);
  uint64_t sz = fsize(fd);
  uint8_t *buf = xmalloc(sz + 1);
  uint64_t got = full_pread(fd, buf, sz + 1, 0, "(b) final read");
  if (got != sz) die("(b) read of the whole file returned 0x%" PRIx64 " bytes, fstat says 0x%" PRIx64, got, sz);
  uint32_t next_seq[256] = {0};
  uint64_t nrec = 0;
  b_parse(buf, sz, 0, next_seq, &nrec, 1, "final parse after fsync + DONTNEED");
  for (int w = 0; w < nprocs; w++)
    if (next_seq[w] != nops)
      die("(b) writer %d has %u records in the file, expected %" PRIu64, w, next_seq[w], nops);
  close(fd);
  free(buf);
  return 0;
}

/* ==== (c) one writer grows a file while readers read ====================================== */
#define C_MAGIC 0xB7
static uint8_t c_byte(uint64_t p) {
  uint64_t w = stamp(C_MAGIC, (uint32_t)mix64(p >> 3), p & ~(uint64_t)7);
  return stamp_byte(w, (unsigned)(p & 7));
}
static uint64_t c_limit(void) { return min64(12 * MiB, nops * 24 * KiB); }

static int c_writer(int unused) {
  (void)unused;
  snprintf(who, sizeof who, "(c) grower");
  seed_proc(3, 0);
  int fd = xopen(path_c, O_WRONLY);
  uint8_t *buf = xmalloc(256 * KiB + 4096);
  uint64_t size = 0, limit = c_limit();
  for (uint64_t op = 0; op < nops && size < limit; op++) {
    uint64_t len;
    switch (rnd(6)) {
    case 0: len = 1 + rnd(100); break;
    case 1: len = 1 + rnd(4096); break;
    case 2: len = pagesz - (size % pagesz) + (rnd(2) ? 0 : pagesz); break;  /* to a page end */
    case 3: {                                              /* to a chunk boundary (+0..2) */
      uint64_t dist = MiB - (size % MiB);
      len = dist > 256 * KiB ? (dist - 1) % (256 * KiB) + 1 : dist + rnd(3);
      break;
    }
    default: len = 1 + rnd(256 * KiB); break;
    }
    len = min64(len, 256 * KiB + 8);
    for (uint64_t i = 0; i < len; i++) buf[i] = c_byte(size + i);
    full_pwrite(fd, buf, len, size, "(c) grow");
    size += len;
    __atomic_store_n(&sh->grow_size, size, __ATOMIC_RELEASE);
    if (rnd(16) == 0 && fsync(fd) != 0) die("fsync: %s", strerror(errno));
  }
  close(fd);
  __atomic_add_fetch(&sh->writers_done, 1, __ATOMIC_RELEASE);
  return 0;
}

static void c_check(const uint8_t *b, uint64_t off, uint64_t len, const char *how, uint64_t sz) {
  for (uint64_t i = 0; i < len; i++)
    if (b[i] != c_byte(off + i)) {
      uint64_t p = off + i;
      char e[64], g[64];
      uint8_t exp[16];
      uint64_t n = min64(16, len - i);
      for (uint64_t k = 0; k < n; k++) exp[k] = c_byte(p + k);
      hex(e, sizeof e, exp, n);
      hex(g, sizeof g, b + i, n);
      die("(c) %s of [0x%" PRIx64 ", 0x%" PRIx64 ") (size seen 0x%" PRIx64 "): byte at offset 0x%"
          PRIx64 " (chunk %" PRIu64 ", page offset 0x%" PRIx64 ") differs\n  expected: %s\n  got:      %s%s",
          how, off, off + len, sz, p, p / MiB, p % pagesz, e, g,
          b[i] == 0 ? "\n  (zeros below the size the reader saw)" : "");
    }
}

static int c_reader(int i) {
  snprintf(who, sizeof who, "(c) reader %d", i);
  seed_proc(3, 100 + i);
  int fd = xopen(path_c, O_RDONLY);
  uint8_t *buf = xmalloc(1 * MiB + 8192);
  uint64_t last = 0, reads = 0, cap = 20 * nops;
  while (reads < cap) {
    int done = __atomic_load_n(&sh->writers_done, __ATOMIC_ACQUIRE) >= 1;
    uint64_t sz = fsize(fd);
    if (sz < last)
      die("(c) the size went backwards: fstat says 0x%" PRIx64 " after 0x%" PRIx64, sz, last);
    last = sz;
    if (sz) {
      uint64_t off = rnd(3) ? (sz > 65536 ? sz - 1 - rnd(65536) : rnd(sz)) : rnd(sz);
      uint64_t len = min64(1 + rnd(MiB), sz - off);
      if (rnd(5) == 0) {
        map_read(fd, buf, off, len, "(c) mmap read");
        c_check(buf, off, len, "mmap read", sz);
      } else {
        /* ask for more than the size: the file may have grown meanwhile */
        uint64_t got = full_pread(fd, buf, len + 4096, off, "(c) read");
        if (got < len)
          die("(c) pread at 0x%" PRIx64 " returned 0x%" PRIx64 " bytes, but fstat said the file "
              "has 0x%" PRIx64 " (size went backwards?)", off, got, sz);
        c_check(buf, off, got, "pread", sz);
      }
    }
    if (rnd(16) == 0) {
      int e = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      if (e) die("posix_fadvise: %s", strerror(e));
    }
    reads++;
    if (done) break;
  }
  close(fd);
  return 0;
}

static int scenario_c(void) {
  snprintf(who, sizeof who, "(c) setup");
  int fd = xopen(path_c, O_RDWR | O_CREAT | O_TRUNC);
  close(fd);
  memset(sh, 0, sizeof *sh);
  spawn(c_writer, 0);
  for (int i = 0; i < 2; i++) spawn(c_reader, i);
  snprintf(who, sizeof who, "(c)");
  int failed = reap();
  if (failed) return failed;
  snprintf(who, sizeof who, "(c) final check");
  fd = xopen(path_c, O_RDONLY);
  drop_cache(fd, 0, 0);
  uint64_t sz = fsize(fd), want = sh->grow_size;
  if (sz != want) die("(c) final size 0x%" PRIx64 ", the grower wrote 0x%" PRIx64, sz, want);
  uint8_t *buf = xmalloc(sz + 1);
  uint64_t got = full_pread(fd, buf, sz + 1, 0, "(c) final read");
  if (got != sz) die("(c) final read returned 0x%" PRIx64 " bytes, size 0x%" PRIx64, got, sz);
  c_check(buf, 0, sz, "final read after fsync + DONTNEED", sz);
  close(fd);
  free(buf);
  return 0;
}

/* ==== (d) two files, never the other's bytes ============================================== */
#define D_MAX (3 * MiB)
static uint8_t d_magic(int f) { return (uint8_t)(0xE0 | f); }

static void d_check(int f, const uint8_t *b, uint64_t off, uint64_t len, const char *how) {
  for (uint64_t i = 0; i < len; i++) {
    uint64_t p = off + i;
    unsigned bi = (unsigned)(p & 7);
    if (bi >= 4 && bi <= 6) continue;  /* generation */
    uint8_t want = stamp_byte(stamp(d_magic(f), 0, p & ~(uint64_t)7), bi);
    if (b[i] == 0 || b[i] == want) continue;
    uint64_t wo = p & ~(uint64_t)7;
    uint8_t ctx[8] = {0};
    for (unsigned k = 0; k < 8; k++)
      if (wo + k >= off && wo + k < off + len) ctx[k] = b[wo + k - off];
    char d[160], h[64];
    describe_word(d, sizeof d, ctx);
    hex(h, sizeof h, ctx, 8);
    die("(d) file %d: %s of [0x%" PRIx64 ", 0x%" PRIx64 "): byte %u of the word at 0x%" PRIx64
        " (chunk %" PRIu64 ") is 0x%02x, expected 0x00 or 0x%02x; the word: %s = %s%s",
        f, how, off, off + len, bi, wo, wo / MiB, b[i], want, h, d,
        ctx[7] == d_magic(1 - f) ? " -- A STAMP OF THE OTHER FILE" : "");
  }
}

static int d_writer(int f) {
  snprintf(who, sizeof who, "(d) file %d writer", f);
  seed_proc(4, f);
  int fd = xopen(path_d[f], O_RDWR);
  uint8_t *mirror = xmalloc(D_MAX + 8192), *buf = xmalloc(D_MAX + 8192), *rb = xmalloc(D_MAX + 8192);
  uint64_t size = 0;
  int punch_ok = 1;
  for (uint64_t op = 1; op <= nops; op++) {
    uint64_t off = 0, len = 0;
    const char *what;
    uint64_t k = rnd(20);
    if (k < 11) {
      what = "write";
      len = rnd(3) ? 1 + rnd(64 * KiB) : 1 + rnd(MiB + 4096);
      off = rnd(2) ? rnd(D_MAX) : MiB * (1 + rnd(2)) - rnd(min64(len, MiB));
      len = min64(len, D_MAX - off);
      fill_stamps(buf, off, len, d_magic(f), (uint32_t)op);
      full_pwrite(fd, buf, len, off, "(d) write");
      memcpy(mirror + off, buf, len);
      if (off + len > size) size = off + len;
    } else if (k < 14) {
      what = "truncate";
      uint64_t ns = rnd(2) ? rnd(D_MAX + 1) : size / 2;
      if (ftruncate(fd, (off_t)ns) != 0) die("ftruncate: %s", strerror(errno));
      if (ns < size) memset(mirror + ns, 0, size - ns);
      off = min64(ns, size);
      len = (ns > size ? ns : size) - off;
      size = ns;
    } else if (k < 17) {
      what = "punch hole";
      len = 1 + rnd(MiB);
      off = rnd(D_MAX);
      len = min64(len, D_MAX - off);
      if (punch_ok) {
        if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) != 0) {
          if (errno != EOPNOTSUPP) die("fallocate(PUNCH_HOLE): %s", strerror(errno));
          punch_ok = 0;
        } else if (off < size) {
          memset(mirror + off, 0, min64(off + len, size) - off);
        }
      }
    } else if (k < 19) {
      what = "fsync + DONTNEED";
      drop_cache(fd, 0, 0);
      off = rnd(size + 1);
      len = min64(64 * KiB, size - off);
    } else {
      what = "fsync";
      if (fsync(fd) != 0) die("fsync: %s", strerror(errno));
    }
    /* exact check of the touched range (a page either side) and of the size */
    uint64_t lo = off > 4096 ? off - 4096 : 0, hi = min64(off + len + 4096, D_MAX + 4096);
    uint64_t sz = fsize(fd);
    if (sz != size) die("(d) op %" PRIu64 " (%s): fstat size 0x%" PRIx64 ", expected 0x%" PRIx64, op, what, sz, size);
    uint64_t want = lo < size ? min64(hi, size) - lo : 0;
    uint64_t got = full_pread(fd, rb, hi - lo, lo, "(d) verify");
    if (got != want)
      die("(d) op %" PRIu64 " (%s [0x%" PRIx64 ", 0x%" PRIx64 ")): pread of [0x%" PRIx64 ", 0x%" PRIx64
          ") returned 0x%" PRIx64 " bytes, expected 0x%" PRIx64, op, what, off, off + len, lo, hi, got, want);
    d_check(f, rb, lo, got, "writer's read-back");
    if (memcmp(rb, mirror + lo, want) != 0) {
      uint64_t i = 0;
      while (rb[i] == mirror[lo + i]) i++;
      char e[64], g[64], d[160];
      uint64_t wo = (lo + i) & ~(uint64_t)7;
      hex(e, sizeof e, mirror + wo, 8);
      hex(g, sizeof g, rb + (wo - lo), 8);
      describe_word(d, sizeof d, rb + (wo - lo));
      die("(d) op %" PRIu64 " (%s [0x%" PRIx64 ", 0x%" PRIx64 ")): content differs at 0x%" PRIx64
          " (chunk %" PRIu64 "): expected word %s, got %s (%s)", op, what, off, off + len, lo + i,
          (lo + i) / MiB, e, g, d);
    }
  }
  /* final whole-file check from the filesystem */
  drop_cache(fd, 0, 0);
  uint64_t got = full_pread(fd, rb, D_MAX + 4096, 0, "(d) final read");
  if (got != size) die("(d) final read returned 0x%" PRIx64 " bytes, size 0x%" PRIx64, got, size);
  d_check(f, rb, 0, got, "final read");
  if (memcmp(rb, mirror, size) != 0) {
    uint64_t i = 0;
    while (rb[i] == mirror[i]) i++;
    die("(d) final read after fsync + DONTNEED differs at 0x%" PRIx64 ": expected 0x%02x, got 0x%02x",
        i, mirror[i], rb[i]);
  }
  close(fd);
  __atomic_add_fetch(&sh->writers_done, 1, __ATOMIC_RELEASE);
  return 0;
}

static int d_reader(int f) {
  snprintf(who, sizeof who, "(d) file %d reader", f);
  seed_proc(4, 100 + f);
  int fd = xopen(path_d[f], O_RDONLY);
  uint8_t *buf = xmalloc(D_MAX + 8192);
  uint64_t reads = 0, cap = 8 * nops;
  while (reads < cap && __atomic_load_n(&sh->writers_done, __ATOMIC_ACQUIRE) < 2) {
    uint64_t len = rnd(4) ? 1 + rnd(64 * KiB) : 1 + rnd(D_MAX);
    uint64_t off = rnd(D_MAX);
    uint64_t got = full_pread(fd, buf, len, off, "(d) read");
    d_check(f, buf, off, got, "concurrent pread");
    if (rnd(16) == 0) {
      int e = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      if (e) die("posix_fadvise: %s", strerror(e));
    }
    reads++;
  }
  close(fd);
  return 0;
}

static int scenario_d(void) {
  snprintf(who, sizeof who, "(d) setup");
  for (int f = 0; f < 2; f++) close(xopen(path_d[f], O_RDWR | O_CREAT | O_TRUNC));
  memset(sh, 0, sizeof *sh);
  for (int f = 0; f < 2; f++) spawn(d_writer, f);
  for (int f = 0; f < 2; f++) spawn(d_reader, f);
  snprintf(who, sizeof who, "(d)");
  return reap();
}

/* ==== main ================================================================================ */
static void usage(void) {
  fprintf(stderr,
          "usage: clio_fsx_multi [-s SEED] [-k PROCS] [-n OPS] [-t a,b,c,d] DIR\n"
          "  -s SEED   random seed (default 1)\n"
          "  -k PROCS  writers in (a), appenders in (b) (default 4, at most 32)\n"
          "  -n OPS    operations per writer/appender (default 400)\n"
          "  -t LIST   scenarios to run (default a,b,c,d): a shared-file writers, b O_APPEND,\n"
          "            c growing file read concurrently, d two files never mixing\n"
          "Files multi_*.dat are created in DIR and left there.\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *which = "a,b,c,d";
  int c;
  while ((c = getopt(argc, argv, "s:k:n:t:h")) != -1) {
    switch (c) {
    case 's': seed = strtoull(optarg, NULL, 0); break;
    case 'k': nprocs = atoi(optarg); break;
    case 'n': nops = strtoull(optarg, NULL, 0); break;
    case 't': which = optarg; break;
    default: usage();
    }
  }
  if (optind != argc - 1 || nprocs < 1 || nprocs > 32 || nops < 1 || nops >= (1u << 23)) usage();
  for (const char *p = which; *p; p++)
    if (!strchr("abcd,", *p)) usage();
  dir = argv[optind];
  pagesz = (uint64_t)sysconf(_SC_PAGESIZE);
  setvbuf(stdout, NULL, _IOLBF, 0);
  snprintf(path_a, sizeof path_a, "%s/multi_a.dat", dir);
  snprintf(path_b, sizeof path_b, "%s/multi_b.dat", dir);
  snprintf(path_c, sizeof path_c, "%s/multi_c.dat", dir);
  snprintf(path_d[0], sizeof path_d[0], "%s/multi_d0.dat", dir);
  snprintf(path_d[1], sizeof path_d[1], "%s/multi_d1.dat", dir);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fault;
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGSEGV, &sa, NULL);
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) die("mmap: %s", strerror(errno));

  static const struct { char id; const char *name; int (*fn)(void); } sc[] = {
      {'a', "shared-file writers + readers", scenario_a},
      {'b', "O_APPEND appenders + tail reader", scenario_b},
      {'c', "growing file + readers", scenario_c},
      {'d', "two files, never the other's bytes", scenario_d},
  };
  int failed = 0;
  for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
    if (!strchr(which, sc[i].id)) continue;
    /* Each scenario runs in its own process, so that a failure (die) ends only it. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) _exit(sc[i].fn() ? 1 : 0);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    printf("clio_fsx_multi: (%c) %s: %s (seed %" PRIu64 ", %d procs, %" PRIu64 " ops)\n", sc[i].id,
           sc[i].name, ok ? "PASS" : "FAIL", seed, nprocs, nops);
    if (!ok) failed++;
  }
  return failed ? 1 : 0;
}
