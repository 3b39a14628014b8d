// Logging: spdlog to stderr (journald under systemd). Level from CLIO_LOG_LEVEL
// (trace, debug, info, warn, error, off); default info.
#pragma once

#include <spdlog/spdlog.h>

#include <string>
#include <vector>

namespace clio {
// Applies CLIO_LOG_LEVEL. Safe to call more than once.
void InitLogging(const char* program);
// The last warnings and errors logged since InitLogging (at most 64), oldest first, each as
// "2026-12-04 13:18:17.870 warning message": the dashboard's "recent errors".
std::vector<std::string> RecentProblems();
// Whether the n-th event of a kind is logged: the 1st, 10th, 100th, ... A warning whose event a
// client can repeat at will (a refused connection) logs a few lines, not one per event.
inline bool LogThisOne(uint64_t n) {
  while (n >= 10 && n % 10 == 0) n /= 10;
  return n == 1;
}
}  // namespace clio

#define CLIO_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define CLIO_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define CLIO_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define CLIO_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
