/* clio_fsx: a randomized file operation checker in the style of fsx.
 *
 * One file, a mirror of its content in memory, and a seeded random mix of pwrite, pread,
 * ftruncate (shrink and grow), fallocate (default, KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE;
 * ZERO_RANGE and ZERO_RANGE|KEEP_SIZE with -Z), mmap reads and writes (MAP_SHARED, msync MS_SYNC),
 * (ZERO_RANGE with -Z), fsync, close/reopen and "drop cache" (fsync + POSIX_FADV_DONTNEED, so that the next reads
 * reach the filesystem rather than the kernel page cache). After every operation the touched
 * range and the size are checked; every -N operations, and at the end, the whole file is.
 *
 * The same seed gives the same operations on any filesystem (fallocate modes that return
 * EOPNOTSUPP are skipped and counted, without changing the random stream), and -n N runs
 * exactly the first N operations of that stream, so a failure can be reduced by bisecting -n.
 *
 *   clio_fsx [-s SEED] [-n OPS] [-l MAXLEN] [-c CHUNK] [-N FULL_EVERY] [-x OP,OP] [-Z] [-S] [-v] FILE
 *
 * Exit status: 0 all checks passed, 1 a check failed (the report names seed, op number, the
 * last 20 ops, the first differing offset, expected and got bytes), 2 bad usage.
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
#include <unistd.h>

enum op_kind {
  OP_WRITE, OP_READ, OP_TRUNCATE, OP_FALLOC, OP_MAPREAD, OP_MAPWRITE, OP_FSYNC, OP_REOPEN,
  OP_DROPCACHE, OP_COUNT
};
static const char *const op_names[OP_COUNT] = {"write",   "read",  "truncate", "fallocate",
                                               "mapread", "mapwrite", "fsync", "reopen",
                                               "dropcache"};
/* Relative frequencies. */
static unsigned op_weight[OP_COUNT] = {26, 14, 9, 12, 8, 8, 4, 3, 5};

enum falloc_kind { FA_DEFAULT, FA_KEEP, FA_PUNCH, FA_ZERO, FA_ZERO_KEEP, FA_COUNT };
static const char *const fa_names[FA_COUNT] = {"default", "keep_size", "punch_hole",
                                               "zero_range", "zero_range|keep"};
static const int fa_modes[FA_COUNT] = {0, FALLOC_FL_KEEP_SIZE,
                                       FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                       FALLOC_FL_ZERO_RANGE,
                                       FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE};
/* ZERO_RANGE is opt-in (-Z): where a filesystem lacks it, skipping it leaves the mirror
 * different from a filesystem that has it, and the op streams of one seed would part. */
static unsigned fa_weight[FA_COUNT] = {4, 3, 5, 0, 0};

struct op_rec {
  uint64_t num;            /* 1-based op number */
  int kind;
  int fa;                  /* fallocate kind */
  uint64_t off, len;
  uint64_t size_before, size_after;
  uint8_t tag;             /* data tag of write/mapwrite */
  int skipped;             /* fallocate EOPNOTSUPP, or mmap on an empty file */
};

/* ---- configuration and state ------------------------------------------------------------- */
static uint64_t seed = 1, nops = 1000, maxlen = 4u << 20, chunk = 1u << 20, full_every = 100;
static int verbose, sync_verify;
static const char *path;
static int fd = -1;
static uint8_t *mirror;    /* maxlen bytes; bytes at and beyond `size` are always zero */
static uint8_t *rbuf, *wbuf;
static uint64_t size;      /* the file size the mirror says */
static uint64_t pagesz;
static struct op_rec *hist;
static uint64_t cur;       /* number of the op being run (1-based), 0 before the first */
static unsigned long counts[OP_COUNT], fa_counts[FA_COUNT], fa_skipped[FA_COUNT];
static unsigned long full_verifies, map_skipped;
static const char *phase = "";
static char excluded[256];      /* the -x argument, for the reproduce line */   /* what the running check is, for the report */

/* ---- PRNG: splitmix64 -------------------------------------------------------------------- */
static uint64_t rng_state;
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static uint64_t next64(void) { return mix64(rng_state += 0x9e3779b97f4a7c15ULL); }
static uint64_t rnd(uint64_t n) { return n ? next64() % n : 0; }
static uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* The byte an op with data tag `tag` writes at file offset p. 253 is prime, so data shifted
 * by any multiple of 256 (a page, a chunk) does not match. */
static uint8_t pattern(uint8_t tag, uint64_t p) { return (uint8_t)(tag + (uint8_t)(p % 253)); }
static uint8_t tag_of(uint64_t opnum) {
  uint8_t t = (uint8_t)mix64(seed * 1000003u + opnum);
  return t ? t : 1;
}

/* ---- reporting --------------------------------------------------------------------------- */
static void fmt_op(char *out, size_t n, const struct op_rec *r) {
  int k = snprintf(out, n, "#%-6" PRIu64 " %-9s", r->num, op_names[r->kind]);
  if (k < 0 || (size_t)k >= n) return;
  out += k; n -= (size_t)k;
  switch (r->kind) {
  case OP_FSYNC: case OP_REOPEN: case OP_DROPCACHE:
    snprintf(out, n, "                                           size 0x%" PRIx64, r->size_after);
    return;
  default: break;
  }
  k = snprintf(out, n, " off 0x%07" PRIx64 " len 0x%06" PRIx64 " end 0x%07" PRIx64
               " size 0x%07" PRIx64 "->0x%07" PRIx64, r->off, r->len, r->off + r->len,
               r->size_before, r->size_after);
  if (k < 0 || (size_t)k >= n) return;
  out += k; n -= (size_t)k;
  if (r->kind == OP_TRUNCATE) {
    snprintf(out, n, " (%s)", r->size_after < r->size_before ? "shrink"
                              : r->size_after > r->size_before ? "grow" : "same");
  } else if (r->kind == OP_FALLOC) {
    snprintf(out, n, " %s%s", fa_names[r->fa], r->skipped ? " EOPNOTSUPP, skipped" : "");
  } else if (r->kind == OP_WRITE || r->kind == OP_MAPWRITE) {
    snprintf(out, n, " tag 0x%02x%s", r->tag,
             r->kind == OP_MAPWRITE && r->off + r->len > r->size_before ? " (ftruncate first)" : "");
  } else if (r->skipped) {
    snprintf(out, n, " skipped (empty file)");
  }
}

static void print_log(void) {
  fprintf(stderr, "last %d ops (offsets and lengths in hex; chunk size 0x%" PRIx64 "):\n",
          (int)min64(cur, 20), chunk);
  for (uint64_t i = cur > 20 ? cur - 20 : 0; i < cur; i++) {
    char line[256];
    fmt_op(line, sizeof line, &hist[i]);
    fprintf(stderr, "  %s\n", line);
  }
}

static void print_repro(void) {
  fprintf(stderr, "reproduce: clio_fsx -s %" PRIu64 " -n %" PRIu64 " -l %" PRIu64 " -c %" PRIu64
          " -N %" PRIu64 "%s%s%s%s FILE   (fails at op %" PRIu64 "; try -n %" PRIu64 ")\n",
          seed, nops, maxlen, chunk, full_every, fa_weight[FA_ZERO] ? " -Z" : "",
          sync_verify ? " -S" : "", excluded[0] ? " -x " : "", excluded, cur, cur);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...) {
  fprintf(stderr, "\nclio_fsx: FAILURE seed=%" PRIu64 " op=%" PRIu64 " of %" PRIu64 " file=%s\n",
          seed, cur, nops, path);
  if (*phase) fprintf(stderr, "check: %s\n", phase);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  print_log();
  print_repro();
  exit(1);
}

static void hexdump(char *out, size_t n, const uint8_t *b, size_t len) {
  size_t k = 0;
  for (size_t i = 0; i < len && k + 4 < n; i++) k += (size_t)snprintf(out + k, n - k, "%02x ", b[i]);
  if (k) out[k - 1] = 0; else out[0] = 0;
}

/* Which earlier op could have written byte `got` at offset p (its tag and range match)? */
static void explain_byte(uint64_t p, uint8_t got) {
  if (got == 0) {
    fprintf(stderr, "the got byte at 0x%" PRIx64 " is zero (a hole, a lost write or a wrong "
                    "truncate/punch)\n", p);
    return;
  }
  for (uint64_t i = cur; i-- > 0;) {
    const struct op_rec *r = &hist[i];
    if ((r->kind == OP_WRITE || r->kind == OP_MAPWRITE) && p >= r->off && p < r->off + r->len &&
        pattern(r->tag, p) == got) {
      char line[256];
      fmt_op(line, sizeof line, r);
      fprintf(stderr, "the got byte at 0x%" PRIx64 " matches the data of an earlier op "
                      "(stale data?): %s\n", p, line);
      return;
    }
  }
  fprintf(stderr, "the got byte at 0x%" PRIx64 " matches no write to that offset (data from "
                  "another offset, file or freed block?)\n", p);
}

static void fail_mismatch(const char *how, uint64_t off, const uint8_t *got, uint64_t len) {
  uint64_t first = UINT64_MAX, last = 0, ndiff = 0;
  for (uint64_t i = 0; i < len; i++)
    if (got[i] != mirror[off + i]) {
      if (first == UINT64_MAX) first = i;
      last = i;
      ndiff++;
    }
  uint64_t fo = off + first;
  char e[128], g[128];
  uint64_t show = min64(16, len - first);
  hexdump(e, sizeof e, mirror + fo, show);
  hexdump(g, sizeof g, got + first, show);
  fprintf(stderr, "\nclio_fsx: FAILURE seed=%" PRIu64 " op=%" PRIu64 " of %" PRIu64 " file=%s\n",
          seed, cur, nops, path);
  fprintf(stderr, "check: %s (%s of [0x%" PRIx64 ", 0x%" PRIx64 "))\n", phase, how, off, off + len);
  fprintf(stderr, "content mismatch: first differing offset 0x%" PRIx64 " (%" PRIu64 "; chunk %"
                  PRIu64 " + 0x%" PRIx64 ", page offset 0x%" PRIx64 "), %" PRIu64
                  " bytes differ in [0x%" PRIx64 ", 0x%" PRIx64 "), file size 0x%" PRIx64 "\n",
          fo, fo, fo / chunk, fo % chunk, fo % pagesz, ndiff, fo, off + last + 1, size);
  fprintf(stderr, "expected: %s\ngot:      %s\n", e, g);
  explain_byte(fo, got[first]);
  print_log();
  print_repro();
  exit(1);
}

/* ---- I/O helpers ------------------------------------------------------------------------- */
static void check_size(void) {
  struct stat st;
  if (fstat(fd, &st) != 0) fail("fstat: %s", strerror(errno));
  if ((uint64_t)st.st_size != size)
    fail("size mismatch: fstat says 0x%" PRIx64 " (%" PRIu64 "), expected 0x%" PRIx64 " (%" PRIu64 ")",
         (uint64_t)st.st_size, (uint64_t)st.st_size, size, size);
}

/* Reads [off, off+len) (asking for all of it, also beyond EOF) and checks both the count (the
 * bytes up to the mirror's size) and the content. */
static void verify_range(uint64_t off, uint64_t len) {
  if (off > maxlen) return;
  len = min64(len, maxlen + pagesz - off);
  uint64_t want = off < size ? min64(len, size - off) : 0;
  uint64_t got = 0;
  while (got < len) {
    ssize_t r = pread(fd, rbuf + got, len - got, (off_t)(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail("pread(off 0x%" PRIx64 ", len 0x%" PRIx64 "): %s", off + got, len - got, strerror(errno));
    }
    if (r == 0) break;
    got += (uint64_t)r;
  }
  if (got != want)
    fail("pread of [0x%" PRIx64 ", 0x%" PRIx64 ") returned 0x%" PRIx64 " bytes, expected 0x%"
         PRIx64 " (file size 0x%" PRIx64 ")", off, off + len, got, want, size);
  if (memcmp(rbuf, mirror + off, want) != 0) fail_mismatch("pread", off, rbuf, want);
}

static void verify_full(void) {
  full_verifies++;
  check_size();
  verify_range(0, maxlen + pagesz);
}

static void do_reopen(void) {
  if (close(fd) != 0) fail("close: %s", strerror(errno));
  fd = open(path, O_RDWR);
  if (fd < 0) fail("reopen %s: %s", path, strerror(errno));
}

static void xfsync(void) {
  if (fsync(fd) != 0) fail("fsync: %s", strerror(errno));
}

/* ---- mmap with SIGBUS/SIGSEGV caught --------------------------------------------------- */
static sigjmp_buf map_jmp;
static volatile sig_atomic_t in_map;
static volatile int map_sig;
static void on_fault(int sig) {
  if (in_map) {
    map_sig = sig;
    siglongjmp(map_jmp, 1);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

/* ---- choosing offsets and lengths ------------------------------------------------------ */
static uint64_t pick_len(void) {
  switch (rnd(10)) {
  case 0: case 1: case 2: return 1 + rnd(4096);              /* sub-page */
  case 3: case 4: return 1 + rnd(65536);
  case 5: case 6: return 1 + rnd(256 << 10);
  case 7: return pagesz * (1 + rnd(64));                       /* whole pages */
  case 8: return 1 + rnd(chunk + 8192);                        /* up to a chunk and more */
  default: return 1 + rnd(maxlen / 2);
  }
}

static uint64_t pick_off(uint64_t len) {
  uint64_t nchunks = maxlen / chunk;
  switch (rnd(10)) {
  case 0: case 1: case 2: case 3: return rnd(maxlen);
  case 4: case 5: case 6:
    if (nchunks >= 1) {  /* a range that crosses or ends at a chunk boundary */
      uint64_t b = chunk * (1 + rnd(nchunks));
      uint64_t d = 1 + rnd(min64(len, b));
      if (b - d < maxlen) return b - d;
    }
    return rnd(maxlen);
  case 7: return pagesz * rnd(maxlen / pagesz);                /* page aligned */
  case 8: {                                                    /* around EOF */
    uint64_t lo = size > 8192 ? size - 8192 : 0;
    return min64(maxlen - 1, lo + rnd(16384));
  }
  default:                                                     /* beyond EOF: leaves a hole */
    return min64(maxlen - 1, size + rnd(3 * pagesz + 1000));
  }
}

static uint64_t pick_size(void) {
  uint64_t nchunks = maxlen / chunk;
  uint64_t s;
  switch (rnd(10)) {
  case 0: case 1: case 2: s = rnd(maxlen + 1); break;
  case 3: case 4:
    s = chunk * rnd(nchunks + 1) + rnd(2 * pagesz + 1);
    s = s > pagesz ? s - pagesz : s;
    break;
  case 5: s = size / 2 + rnd(pagesz); break;
  case 6: case 7: s = size + rnd(300000); break;               /* grow */
  case 8: s = size > 5000 ? size - rnd(5000) : 0; break;       /* shrink a little */
  default: s = rnd(8) == 0 ? 0 : pagesz * rnd(maxlen / pagesz + 1); break;
  }
  return min64(s, maxlen);
}

static int pick_weighted(const unsigned *w, int n) {
  unsigned total = 0;
  for (int i = 0; i < n; i++) total += w[i];
  unsigned r = (unsigned)rnd(total);
  for (int i = 0; i < n; i++) {
    if (r < w[i]) return i;
    r -= w[i];
  }
  return n - 1;
}

/* ---- the operations ---------------------------------------------------------------------- */
static void op_write(struct op_rec *r) {
  r->len = pick_len();
  r->off = pick_off(r->len);
  r->len = min64(r->len, maxlen - r->off);
  r->tag = tag_of(r->num);
  for (uint64_t i = 0; i < r->len; i++) wbuf[i] = pattern(r->tag, r->off + i);
  uint64_t done = 0;
  while (done < r->len) {
    ssize_t n = pwrite(fd, wbuf + done, r->len - done, (off_t)(r->off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("pwrite(off 0x%" PRIx64 ", len 0x%" PRIx64 "): %s", r->off + done, r->len - done,
           strerror(errno));
    }
    if (n == 0) fail("pwrite returned 0");
    done += (uint64_t)n;
  }
  memcpy(mirror + r->off, wbuf, r->len);
  size = max64(size, r->off + r->len);
}

static void op_read(struct op_rec *r) {
  r->len = pick_len();
  r->off = rnd(10) < 8 && size ? rnd(size) : pick_off(r->len);
  /* the check itself is the op: verify_range reads it */
}

static void op_truncate(struct op_rec *r) {
  uint64_t ns = pick_size();
  r->off = min64(size, ns);
  r->len = max64(size, ns) - r->off;
  if (ftruncate(fd, (off_t)ns) != 0)
    fail("ftruncate(0x%" PRIx64 "): %s", ns, strerror(errno));
  if (ns < size) memset(mirror + ns, 0, size - ns);
  size = ns;
}

static void op_falloc(struct op_rec *r) {
  r->fa = pick_weighted(fa_weight, FA_COUNT);
  r->len = pick_len();
  r->off = pick_off(r->len);
  r->len = min64(r->len, maxlen - r->off);
  fa_counts[r->fa]++;
  if (fallocate(fd, fa_modes[r->fa], (off_t)r->off, (off_t)r->len) != 0) {
    if (errno == EOPNOTSUPP) {
      r->skipped = 1;
      fa_skipped[r->fa]++;
      return;
    }
    fail("fallocate(%s, off 0x%" PRIx64 ", len 0x%" PRIx64 "): %s", fa_names[r->fa], r->off,
         r->len, strerror(errno));
  }
  uint64_t end = r->off + r->len;
  if (r->fa == FA_PUNCH || r->fa == FA_ZERO || r->fa == FA_ZERO_KEEP)
    if (r->off < size) memset(mirror + r->off, 0, min64(end, size) - r->off);
  if ((r->fa == FA_DEFAULT || r->fa == FA_ZERO) && end > size) size = end;
}

static void op_mapread(struct op_rec *r) {
  r->len = pick_len();
  r->off = size ? rnd(size) : 0;
  if (size == 0) {
    r->len = 0;
    r->skipped = 1;
    map_skipped++;
    return;
  }
  r->len = min64(r->len, size - r->off);
  uint64_t pg = r->off & ~(pagesz - 1);
  uint64_t end = r->off + r->len;
  /* If the range reaches EOF, map the rest of the last page too: it must read as zeros. */
  uint64_t map_end = end == size ? (end + pagesz - 1) & ~(pagesz - 1) : end;
  uint64_t maplen = map_end - pg;
  uint8_t *p = mmap(NULL, maplen, PROT_READ, MAP_SHARED, fd, (off_t)pg);
  if (p == MAP_FAILED)
    fail("mmap(PROT_READ, off 0x%" PRIx64 ", len 0x%" PRIx64 "): %s", pg, maplen, strerror(errno));
  if (sigsetjmp(map_jmp, 1)) {
    in_map = 0;
    fail("%s while reading the mapping of [0x%" PRIx64 ", 0x%" PRIx64 ") (file size 0x%" PRIx64 ")",
         map_sig == SIGBUS ? "SIGBUS" : "SIGSEGV", pg, map_end, size);
  }
  in_map = 1;
  memcpy(rbuf, p + (r->off - pg), map_end - r->off);
  in_map = 0;
  munmap(p, maplen);
  phase = "mmap read (MAP_SHARED, PROT_READ) of the op's range";
  if (memcmp(rbuf, mirror + r->off, r->len) != 0) fail_mismatch("mmap read", r->off, rbuf, r->len);
  for (uint64_t i = r->len; i < map_end - r->off; i++)
    if (rbuf[i])
      fail("mmap read beyond EOF: byte at 0x%" PRIx64 " (file size 0x%" PRIx64 ") is 0x%02x, "
           "expected 0 (the rest of the last page must read as zeros)", r->off + i, size, rbuf[i]);
}

static void op_mapwrite(struct op_rec *r) {
  r->len = pick_len();
  r->off = pick_off(r->len);
  r->len = min64(r->len, maxlen - r->off);
  r->tag = tag_of(r->num);
  uint64_t end = r->off + r->len;
  if (end > size) {
    if (ftruncate(fd, (off_t)end) != 0)
      fail("ftruncate(0x%" PRIx64 ") before mmap write: %s", end, strerror(errno));
    size = end;
  }
  uint64_t pg = r->off & ~(pagesz - 1);
  uint64_t maplen = end - pg;
  uint8_t *p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)pg);
  if (p == MAP_FAILED)
    fail("mmap(PROT_READ|PROT_WRITE, off 0x%" PRIx64 ", len 0x%" PRIx64 "): %s", pg, maplen,
         strerror(errno));
  for (uint64_t i = 0; i < r->len; i++) wbuf[i] = pattern(r->tag, r->off + i);
  if (sigsetjmp(map_jmp, 1)) {
    in_map = 0;
    fail("%s while writing the mapping of [0x%" PRIx64 ", 0x%" PRIx64 ") (file size 0x%" PRIx64 ")",
         map_sig == SIGBUS ? "SIGBUS" : "SIGSEGV", pg, end, size);
  }
  in_map = 1;
  memcpy(p + (r->off - pg), wbuf, r->len);
  in_map = 0;
  if (msync(p, maplen, MS_SYNC) != 0) fail("msync(MS_SYNC): %s", strerror(errno));
  if (munmap(p, maplen) != 0) fail("munmap: %s", strerror(errno));
  memcpy(mirror + r->off, wbuf, r->len);
}

static void op_dropcache(struct op_rec *r) {
  (void)r;
  xfsync();
  int e = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  if (e) fail("posix_fadvise(DONTNEED): %s", strerror(e));
}

/* ---- main -------------------------------------------------------------------------------- */
static uint64_t parse_u64(const char *s, const char *what) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  uint64_t mul = 1;
  if (*end == 'k' || *end == 'K') mul = 1024, end++;
  else if (*end == 'm' || *end == 'M') mul = 1024 * 1024, end++;
  if (errno || end == s || *end) {
    fprintf(stderr, "clio_fsx: bad %s: %s\n", what, s);
    exit(2);
  }
  return (uint64_t)v * mul;
}

static void usage(void) {
  fprintf(stderr,
          "usage: clio_fsx [-s SEED] [-n OPS] [-l MAXLEN] [-c CHUNK] [-N FULL_EVERY] [-x OPS] [-Z] [-S] [-v] FILE\n"
          "  -s SEED        random seed (default 1); same seed, same operations\n"
          "  -n OPS         number of operations (default 1000)\n"
          "  -l MAXLEN      largest file size (default 4M; k/m suffixes)\n"
          "  -c CHUNK       filesystem chunk size, for offsets near boundaries (default 1M)\n"
          "  -N FULL_EVERY  verify the whole file every this many ops (default 100, 0: only at the end)\n"
          "  -x OP,OP       exclude ops (write,read,truncate,fallocate,mapread,mapwrite,fsync,\n"
          "                 reopen,dropcache); changes the op stream\n"
          "  -Z             also fallocate ZERO_RANGE (with and without KEEP_SIZE)\n"
          "  -S             fsync + POSIX_FADV_DONTNEED before every check, so that checks read\n"
          "                 from the filesystem, not the page cache (same op stream, slower)\n"
          "  -v             print every op\n"
          "The file is created (truncated) and left in place.\n");
  exit(2);
}

/* The options into the globals; the file's path. */
static void parse_args(int argc, char **argv) {
  int c;
  while ((c = getopt(argc, argv, "s:n:l:c:N:x:vZSh")) != -1) {
    switch (c) {
    case 's': seed = parse_u64(optarg, "seed"); break;
    case 'n': nops = parse_u64(optarg, "op count"); break;
    case 'l': maxlen = parse_u64(optarg, "max length"); break;
    case 'c': chunk = parse_u64(optarg, "chunk size"); break;
    case 'N': full_every = parse_u64(optarg, "full verify interval"); break;
    case 'x': {
      snprintf(excluded, sizeof excluded, "%s", optarg);
      char *s = strdup(optarg), *save = NULL;
      for (char *t = strtok_r(s, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k;
        for (k = 0; k < OP_COUNT && strcmp(t, op_names[k]); k++) {}
        if (k == OP_COUNT) {
          fprintf(stderr, "clio_fsx: unknown op in -x: %s\n", t);
          exit(2);
        }
        op_weight[k] = 0;
      }
      free(s);
      break;
    }
    case 'v': verbose = 1; break;
    case 'Z': fa_weight[FA_ZERO] = fa_weight[FA_ZERO_KEEP] = 1; break;
    case 'S': sync_verify = 1; break;
    default: usage();
    }
  }
  if (optind != argc - 1) usage();
  path = argv[optind];
  pagesz = (uint64_t)sysconf(_SC_PAGESIZE);
  if (maxlen < pagesz || chunk == 0 || op_weight[OP_WRITE] + op_weight[OP_READ] == 0) usage();
}

/* One operation of the stream, then its checks. */
static void run_op(struct op_rec *r) {
  r->num = cur;
  r->kind = pick_weighted(op_weight, OP_COUNT);
  r->size_before = size;
  phase = "";
  switch (r->kind) {
  case OP_WRITE: op_write(r); break;
  case OP_READ: op_read(r); break;
  case OP_TRUNCATE: op_truncate(r); break;
  case OP_FALLOC: op_falloc(r); break;
  case OP_MAPREAD: op_mapread(r); break;
  case OP_MAPWRITE: op_mapwrite(r); break;
  case OP_FSYNC: xfsync(); break;
  case OP_REOPEN: do_reopen(); break;
  case OP_DROPCACHE: op_dropcache(r); break;
  }
  r->size_after = size;
  counts[r->kind]++;
  if (verbose) {
    char line[256];
    fmt_op(line, sizeof line, r);
    printf("%s\n", line);
  }
  /* With -S, every check reads from the filesystem, not from the kernel page cache. */
  if (sync_verify) op_dropcache(NULL);
  /* After every op: the size, and the touched range with a page of margin either side. */
  phase = "size (fstat) after the op";
  check_size();
  phase = "pread of the op's range (with a page either side) after the op";
  if (r->kind == OP_FSYNC || r->kind == OP_REOPEN || r->kind == OP_DROPCACHE) {
    uint64_t o = size ? rnd(size) : 0;
    verify_range(o, 1 + rnd(65536));
  } else {
    uint64_t lo = r->off > pagesz ? r->off - pagesz : 0;
    verify_range(lo, r->off + r->len + pagesz - lo);
  }
  if (full_every && cur % full_every == 0) {
    phase = "whole-file verify (every -N ops)";
    verify_full();
  }
}

int main(int argc, char **argv) {
  parse_args(argc, argv);
  setvbuf(stdout, NULL, _IOLBF, 0);

  mirror = calloc(1, maxlen + pagesz);
  rbuf = malloc(maxlen + 2 * pagesz);
  wbuf = malloc(maxlen + pagesz);
  hist = calloc(nops + 1, sizeof *hist);
  if (!mirror || !rbuf || !wbuf || !hist) {
    fprintf(stderr, "clio_fsx: out of memory\n");
    return 2;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fault;
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGSEGV, &sa, NULL);

  fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    fprintf(stderr, "clio_fsx: open %s: %s\n", path, strerror(errno));
    return 1;
  }
  rng_state = seed;
  size = 0;
  for (cur = 1; cur <= nops; cur++) run_op(&hist[cur - 1]);
  cur = nops;
  phase = "final whole-file verify";
  verify_full();
  phase = "final whole-file verify after fsync + POSIX_FADV_DONTNEED";
  op_dropcache(NULL);
  verify_full();
  phase = "final whole-file verify after close and reopen";
  do_reopen();
  verify_full();
  close(fd);

  printf("clio_fsx: seed=%" PRIu64 " ops=%" PRIu64 " maxlen=%" PRIu64 " PASS:", seed, nops, maxlen);
  for (int k = 0; k < OP_COUNT; k++) printf(" %s=%lu", op_names[k], counts[k]);
  printf(" fullverify=%lu | fallocate", full_verifies);
  for (int k = 0; k < FA_COUNT; k++) printf(" %s=%lu", fa_names[k], fa_counts[k]);
  printf(" | EOPNOTSUPP skipped:");
  int any = 0;
  for (int k = 0; k < FA_COUNT; k++)
    if (fa_skipped[k]) printf(" %s=%lu", fa_names[k], fa_skipped[k]), any = 1;
  if (!any) printf(" none");
  if (map_skipped) printf(" | mapread on empty file skipped=%lu", map_skipped);
  printf("\n");
  return 0;
}
