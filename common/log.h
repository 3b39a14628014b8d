// Logging: spdlog to stderr (journald under systemd). Level from CLIO_LOG_LEVEL
// (trace, debug, info, warn, error, off); default info.
#pragma once

#include <spdlog/spdlog.h>

namespace clio {
// Applies CLIO_LOG_LEVEL. Safe to call more than once.
void InitLogging(const char* program);
}  // namespace clio

#define CLIO_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define CLIO_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define CLIO_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define CLIO_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
