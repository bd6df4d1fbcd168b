#include "actors/endpoint.hpp"

#include <charconv>

#include "actors/errc.hpp"

namespace vessel::actors {
namespace {

std::string quoted(std::string_view variable, std::string_view text) {
  return std::string{variable} + "='" + std::string{text} + "'";
}

}  // namespace

std::string endpoint::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  std::string out = v6 ? "[" + host + "]" : host;
  return out + ":" + std::to_string(port);
}

detailed_result<std::uint16_t> parse_port(std::string_view text, std::string_view variable) {
  unsigned value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (text.empty() || ec != std::errc{} || ptr != last || value == 0 || value > 65535) {
    return fail(errc::malformed_endpoint,
                quoted(variable, text) + " is not a TCP port (a decimal number from 1 to 65535)");
  }
  return static_cast<std::uint16_t>(value);
}

detailed_result<endpoint> parse_endpoint(std::string_view text, std::string_view variable) {
  const auto malformed = [&](std::string_view why) {
    return fail(
        errc::malformed_endpoint,
        quoted(variable, text) + " is not host:port or [ipv6]:port (" + std::string{why} + ")");
  };
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return malformed("no closing ']'");
    host = text.substr(1, close - 1);
    if (close + 1 >= text.size() || text[close + 1] != ':')
      return malformed("no ':port' after ']'");
    port = text.substr(close + 2);
    if (host.find(':') == std::string_view::npos)
      return malformed("brackets around a non-IPv6 host");
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return malformed("no ':port'");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return malformed("an IPv6 address needs brackets, e.g. [::1]:29500");
    }
  }
  if (host.empty()) return malformed("empty host");
  auto p = parse_port(port, variable);
  if (!p) return malformed("bad port '" + std::string{port} + "'");
  return endpoint{std::string{host}, p.value()};
}

}  // namespace vessel::actors
