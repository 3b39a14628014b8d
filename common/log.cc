#include "common/log.h"

#include <cstdlib>
#include <spdlog/sinks/stdout_sinks.h>

namespace clio {

void InitLogging(const char* program) {
  std::string name = std::string("clio:") + program;
  auto logger = spdlog::get(name);
  if (!logger) logger = spdlog::stderr_logger_mt(name);
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%n] %v");
  spdlog::set_default_logger(logger);
  const char* lvl = std::getenv("CLIO_LOG_LEVEL");
  spdlog::set_level(lvl ? spdlog::level::from_str(lvl) : spdlog::level::info);
}

}  // namespace clio
