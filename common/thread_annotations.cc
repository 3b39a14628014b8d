// The debug check of "no lock across device I/O" (thread_annotations.h).
#include "common/thread_annotations.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace clio {

void CheckNoLockAcrossIo(const char* what) {
#ifndef NDEBUG
  // Held: marked locks other than the exempted one (by name). Past kNamed locks, any is one.
  int others = lock_io::held > lock_io::kNamed ? lock_io::held : 0;
  for (int i = 0; i < lock_io::held && i < lock_io::kNamed; ++i)
    if (lock_io::allowed == nullptr || std::strcmp(lock_io::names[i], lock_io::allowed) != 0) ++others;
  if (others > 0) {
    std::fprintf(stderr, "clio: %s started while this thread holds %d lock(s) marked kNoIo:", what, lock_io::held);
    for (int i = 0; i < lock_io::held && i < lock_io::kNamed; ++i) std::fprintf(stderr, " '%s'", lock_io::names[i]);
    std::fprintf(stderr, " (no lock across device I/O: common/thread_annotations.h)\n");
    std::abort();
  }
#else
  (void)what;
#endif
}

}  // namespace clio
