#include "cli/progress.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "common/size.h"

namespace clio {

std::string Count(uint64_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

Status WithProgress(bool show, uint64_t total, const std::string& done_word,
                                 const std::function<std::optional<Progress>()>& poll,
                                 const std::function<Status()>& op) {
  if (!show) return op();
  std::atomic<bool> finished{false};
  std::thread bar([&] {
    const auto start = std::chrono::steady_clock::now();
    bool last = false;
    while (!last) {
      for (int i = 0; i < 10 && !finished.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      last = finished.load();  // one more line once the operation answered: its final figures
      std::optional<Progress> p = poll();
      if (!p) continue;
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const uint64_t gone = total > p->left ? total - p->left : 0;
      const double rate = secs > 0 ? static_cast<double>(gone) / secs : 0;
      constexpr int kWidth = 30;
      const int filled = total ? std::min(kWidth, static_cast<int>(kWidth * static_cast<double>(gone) /
                                                                   static_cast<double>(total)))
                               : kWidth;
      const std::string eta =
          p->left == 0 ? "0 s" : rate > 0 ? std::to_string(static_cast<long long>(static_cast<double>(p->left) / rate)) + " s" : "?";
      std::fprintf(stderr, "\r[%s%s] %s left, %s %s, %s/s, %s left ", std::string(filled, '#').c_str(),
                   std::string(kWidth - filled, ' ').c_str(), FormatSize(p->left).c_str(),
                   FormatSize(p->done).c_str(), done_word.c_str(),
                   FormatSize(static_cast<uint64_t>(rate)).c_str(), eta.c_str());
      std::fflush(stderr);
    }
    std::fprintf(stderr, "\n");
  });
  Status r = op();
  finished.store(true);
  bar.join();
  return r;
}

}  // namespace clio
