#include "io/log.hpp"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>  // declares the stderr sinks too

namespace vessel::log {
namespace {

std::optional<spdlog::level::level_enum> parse_level(std::string_view word) noexcept {
  // Spelled out instead of spdlog::level::from_str, which maps unknown words to `off` and would
  // silently mute a module after a typo.
  if (word == "trace") return spdlog::level::trace;
  if (word == "debug") return spdlog::level::debug;
  if (word == "info") return spdlog::level::info;
  if (word == "warn" || word == "warning") return spdlog::level::warn;
  if (word == "error") return spdlog::level::err;
  if (word == "off") return spdlog::level::off;
  return std::nullopt;
}

}  // namespace

spdlog::level::level_enum level_for(std::string_view spec, std::string_view module) noexcept {
  std::optional<spdlog::level::level_enum> global;
  std::optional<spdlog::level::level_enum> own;
  while (!spec.empty()) {
    const auto comma = spec.find(',');
    const auto item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) {
      if (auto lvl = parse_level(item)) global = lvl;
    } else if (item.substr(0, eq) == module) {
      if (auto lvl = parse_level(item.substr(eq + 1))) own = lvl;
    }
  }
  return own.value_or(global.value_or(default_level));
}

spdlog::logger& get(std::string_view module) {
  // Our own registry rather than spdlog's: two threads asking for a new module at once must both
  // get the logger, whereas spdlog::stderr_color_mt throws for the second registration.
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<spdlog::logger>, std::less<>> loggers;
  std::lock_guard lock{mutex};
  if (auto it = loggers.find(module); it != loggers.end()) return *it->second;
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>(std::string{module}, std::move(sink));
  const char* spec = std::getenv(env_var);  // NOLINT(concurrency-mt-unsafe): read under the mutex
  logger->set_level(level_for(spec != nullptr ? spec : "", module));
  logger->set_pattern("[%H:%M:%S.%f] [%n] [%l] %v");
  auto& ref = *logger;
  loggers.emplace(std::string{module}, std::move(logger));
  return ref;
}

}  // namespace vessel::log
