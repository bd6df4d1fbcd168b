#pragma once
// vessel's logging: one spdlog logger per module ("io", "wire", "actors", ...), its level taken from
// the environment variable VESSEL_LOG once, when the logger is first asked for.
//
//   VESSEL_LOG=info             every module at info
//   VESSEL_LOG=warn,io=debug    io at debug, the rest at warn
//
// Levels: trace, debug, info, warn, error, off. Default: warn, so that tests and benchmarks stay quiet.

#include <string_view>

#include <spdlog/spdlog.h>

namespace vessel::log {

/// The level used when VESSEL_LOG is unset or names no level for a module.
inline constexpr spdlog::level::level_enum default_level = spdlog::level::warn;

/// The name of the environment variable read by `get`.
inline constexpr const char* env_var = "VESSEL_LOG";

/// The level that `spec` (VESSEL_LOG syntax) gives `module`; unknown words are ignored, the last
/// matching entry wins, and a module override beats the global level wherever it appears.
spdlog::level::level_enum level_for(std::string_view spec, std::string_view module) noexcept;

/// The logger of `module` (thread-safe, created on first use, stderr, level from VESSEL_LOG).
spdlog::logger& get(std::string_view module);

}  // namespace vessel::log
