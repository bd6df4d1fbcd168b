#pragma once
// A rendezvous address as a person writes it: `host:port`, `[v6 literal]:port`. Resolution (DNS)
// happens later, on a set-up thread (io::resolve), so parsing never blocks.

#include <cstdint>
#include <string>
#include <string_view>

#include "actors/detailed_error.hpp"

namespace vessel::actors {

/// An unresolved host and port.
struct endpoint {
  std::string host;        ///< name, IPv4 literal or IPv6 literal (without brackets)
  std::uint16_t port = 0;  ///< 1..65535

  /// `host:port`, with brackets around an IPv6 literal (`[::1]:29500`).
  std::string to_string() const;
  bool operator==(const endpoint&) const = default;
};

/// Parses `host:port` or `[v6]:port`. A bare IPv6 literal without brackets is refused: its last
/// `:` is ambiguous. `variable` names where the text came from, for the error line.
detailed_result<endpoint> parse_endpoint(std::string_view text, std::string_view variable);

/// Parses a TCP port (1..65535, decimal, nothing else). `variable` names its source.
detailed_result<std::uint16_t> parse_port(std::string_view text, std::string_view variable);

}  // namespace vessel::actors
