#pragma once
// An injectable view of the process environment, so that bootstrap and authentication can be
// tested without mutating the real environment (setenv is not thread-safe, and tests run in
// parallel under ctest).

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "actors/detailed_error.hpp"

namespace vessel::actors {

/// Looks up one environment variable: its value, or nullopt when it is unset. A variable set to
/// the empty string is present (and usually malformed), not absent.
class env_view {
 public:
  using lookup_fn = std::function<std::optional<std::string>(std::string_view name)>;

  explicit env_view(lookup_fn lookup) : lookup_{std::move(lookup)} {}

  /// The real environment (::getenv).
  static env_view process();
  /// A fixed map, for tests and for tools that read variables from a file.
  static env_view from_map(std::map<std::string, std::string, std::less<>> vars);

  std::optional<std::string> get(std::string_view name) const { return lookup_(name); }
  bool has(std::string_view name) const { return get(name).has_value(); }

 private:
  lookup_fn lookup_;
};

/// A positive integer variable: its value, `fallback` when unset or empty, else an error that
/// names the variable and what it held.
detailed_result<long long> env_number(const env_view& env, std::string_view name,
                                      long long fallback);

/// A byte count variable, 0 included: its value, `fallback` when unset, else an error whose
/// detail reads "NAME=VALUE: not a byte count".
detailed_result<std::size_t> env_byte_count(const env_view& env, std::string_view name,
                                            std::size_t fallback);

/// VESSEL_PULL_BYTES unset: a same-host transfer of this many bytes or more (a vessel::comm send,
/// a collective's chunk) is read by the receiver from the sender's memory, in one copy
/// (docs/io_performance.md, "One copy: the receiver reads the sender's memory").
inline constexpr std::size_t default_pull_bytes = std::size_t{256} << 10;

/// The largest broadcast pulled where a single copy pays (io/single_copy_probe.hpp). The pull
/// moves the copy the two ranks' cores shared onto the receiver's alone, and the kernel's copy of
/// data out of cache is slower than memcpy's, so past this it loses (Intel Xeon KVM guest,
/// 2026-12-06: a 64 MiB broadcast took 13.3 against 7.5 ms through the ring). Exchanges in which
/// every rank sends and receives at once (the rings) pull at any size, and so do vessel::comm's
/// blocking sends, whose sender writes half of the message itself while the receiver reads the
/// other half.
inline constexpr std::size_t max_one_way_pull_bytes = std::size_t{1} << 20;

}  // namespace vessel::actors
