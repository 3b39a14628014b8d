#include "common/log.h"

#include <cstdlib>
#include <memory>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace clio {
namespace {

std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt>& Recent() {
  static auto* ring = new std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt>();  // never destroyed
  return *ring;
}

}  // namespace

std::vector<std::string> RecentProblems() {
  const auto& ring = Recent();
  if (!ring) return {};
  std::vector<std::string> out = ring->last_formatted();
  for (std::string& line : out)
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return out;
}

void InitLogging(const char* program) {
  std::string name = std::string("clio:") + program;
  auto logger = spdlog::get(name);
  if (!logger) {
    logger = spdlog::stderr_logger_mt(name);
    auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
    ring->set_level(spdlog::level::warn);
    logger->sinks().push_back(ring);
    Recent() = ring;
  }
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%n] %v");
  spdlog::set_default_logger(logger);
  const char* lvl = std::getenv("CLIO_LOG_LEVEL");
  spdlog::set_level(lvl ? spdlog::level::from_str(lvl) : spdlog::level::info);
}

}  // namespace clio
