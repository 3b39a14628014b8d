// `clioctl flush [PATH]`: dirty data to persistent tiers and the metadata made durable.
// Without PATH every dirty blob of the node (the runtime's FlushAll, with a progress line);
// with PATH, fsync(2) of the file, or of every file and directory under it, through the mount,
// so what the kernel still caches is written first: the durability fsync gives, on demand.
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/clio_mount.h"
#include "cli/commands.h"
#include "cli/cte_connection.h"
#include "cli/progress.h"
#include "common/size.h"
#include "placement/cte_pool.h"

namespace clio {
namespace {

uint64_t DirtyBytes(const WritebackStats& w) {
  uint64_t n = 0;
  for (const DirtyLedger::TierCounters& d : w.dirty) n += d.dirty;
  return n;
}

int FlushAllBlobs(const CommandContext& ctx) {
  auto c = CteConnection::Open(ctx);
  if (!c.ok()) {
    std::fprintf(stderr, "clioctl: flush: %s\n", c.status().message().c_str());
    return 1;
  }
  auto before = c->Writeback();
  if (!before.ok()) {
    std::fprintf(stderr, "clioctl: flush: %s\n", before.status().ToString().c_str());
    return 1;
  }
  const uint64_t total = DirtyBytes(*before);
  auto r = WithProgress(
      !ctx.json && isatty(STDERR_FILENO), total, "flushed",
      [&]() -> std::optional<Progress> {
        auto w = c->Writeback();
        if (!w.ok()) return std::nullopt;
        const uint64_t left = DirtyBytes(*w);
        return Progress{left, total > left ? total - left : 0};
      },
      [&] { return c->client->Call(c->pool, cteproto::FlushAll{}).status(); });
  if (!r.ok()) {
    std::fprintf(stderr, "clioctl: flush failed (what was flushed stays flushed; run it again): %s\n",
                 r.ToString().c_str());
    return 1;
  }
  auto after = c->Writeback();
  if (!after.ok()) {
    std::fprintf(stderr, "clioctl: flush: %s\n", after.status().ToString().c_str());
    return 1;
  }
  if (ctx.json) {
    std::printf("%s\n", nlohmann::json{{"dirty_bytes_before", total},
                                       {"dirty_blobs_before", before->dirty_blobs},
                                       {"dirty_bytes_after", DirtyBytes(*after)},
                                       {"dirty_blobs_after", after->dirty_blobs}}
                            .dump()
                            .c_str());
  } else {
    std::printf("flushed %s in %s to persistent tiers; the metadata is durable", FormatSize(total).c_str(),
                Count(before->dirty_blobs, "dirty blob", "dirty blobs").c_str());
    if (after->dirty_blobs)
      std::printf(" (%s, %s, written since)", Count(after->dirty_blobs, "blob", "blobs").c_str(),
                  FormatSize(DirtyBytes(*after)).c_str());
    std::printf("\n");
  }
  return 0;
}

struct Entry {
  std::string path;
  bool dir = false;
  uint64_t size = 0;
};
std::vector<Entry>* g_walk = nullptr;  // nftw takes no context pointer

int CollectEntry(const char* path, const struct stat* st, int type, struct FTW*) {
  if (type == FTW_F && S_ISREG(st->st_mode)) g_walk->push_back({path, false, static_cast<uint64_t>(st->st_size)});
  if (type == FTW_D || type == FTW_DP) g_walk->push_back({path, true, 0});
  if (type == FTW_DNR || type == FTW_NS) g_walk->push_back({path, false, 0});  // fails below, named
  return 0;
}

int FlushPath(const CommandContext& ctx, const std::string& path) {
  auto where = OnClioMount(path);
  if (!where.ok()) {
    std::fprintf(stderr, "clioctl: flush: %s\n", where.status().message().c_str());
    return 1;
  }
  if (S_ISLNK(where->st.st_mode)) {
    std::fprintf(stderr, "clioctl: flush: '%s' is a symbolic link: name the file it points to\n", path.c_str());
    return 1;
  }
  std::vector<Entry> entries;
  if (S_ISDIR(where->st.st_mode)) {
    g_walk = &entries;
    // Depth first, directories after their contents; symlinks not followed; this mount only.
    if (nftw(path.c_str(), CollectEntry, 32, FTW_PHYS | FTW_MOUNT | FTW_DEPTH) != 0) {
      std::fprintf(stderr, "clioctl: flush: walking '%s': %s\n", path.c_str(), std::strerror(errno));
      return 1;
    }
    g_walk = nullptr;
  } else if (S_ISREG(where->st.st_mode)) {
    entries.push_back({path, false, static_cast<uint64_t>(where->st.st_size)});
  } else {
    std::fprintf(stderr, "clioctl: flush: '%s' is not a regular file or directory\n", path.c_str());
    return 1;
  }
  uint64_t total = 0, files = 0, dirs = 0;
  for (const Entry& e : entries) total += e.size;
  std::atomic<uint64_t> done{0};
  std::vector<std::string> errors;
  auto r = WithProgress(
      !ctx.json && isatty(STDERR_FILENO) && entries.size() > 1, total, "flushed",
      [&]() -> std::optional<Progress> { return Progress{total - done.load(), done.load()}; },
      [&]() -> Status {
        for (const Entry& e : entries) {
          const int fd = ::open(e.path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (e.dir ? O_DIRECTORY : 0));
          const bool ok = fd >= 0 && ::fsync(fd) == 0;
          const int err = errno;
          if (fd >= 0) ::close(fd);
          if (!ok) {
            errors.push_back("'" + e.path + "': " + (fd < 0 ? "open: " : "fsync: ") + std::strerror(err));
            continue;
          }
          (e.dir ? dirs : files) += 1;
          done += e.size;
        }
        return Status::Ok();
      });
  (void)r;
  for (const std::string& e : errors) std::fprintf(stderr, "clioctl: flush: %s\n", e.c_str());
  if (ctx.json) {
    std::printf("%s\n", nlohmann::json{{"path", path},
                                       {"files", files},
                                       {"directories", dirs},
                                       {"bytes", done.load()},
                                       {"errors", errors}}
                            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                            .c_str());
  } else if (!S_ISDIR(where->st.st_mode) && errors.empty()) {
    std::printf("flushed %s (%s): on persistent tiers, metadata durable\n", path.c_str(),
                FormatSize(done.load()).c_str());
  } else {
    std::printf("flushed %s (%s) and %s under %s: on persistent tiers, metadata durable%s\n",
                Count(files, "file", "files").c_str(), FormatSize(done.load()).c_str(),
                Count(dirs, "directory", "directories").c_str(), path.c_str(),
                errors.empty() ? "" : "; the failures above are not");
  }
  return errors.empty() ? 0 : 1;
}

}  // namespace

int Flush(const CommandContext& ctx, const std::string& path) {
  return path.empty() ? FlushAllBlobs(ctx) : FlushPath(ctx, path);
}

}  // namespace clio
