#include "actors/env.hpp"

#include <charconv>
#include <cstdlib>
#include <memory>

#include "actors/errc.hpp"

namespace vessel::actors {

env_view env_view::process() {
  return env_view{[](std::string_view name) -> std::optional<std::string> {
    // getenv needs a terminated string; variable names are short, so the copy is harmless.
    const char* value = std::getenv(std::string{name}.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string{value};
  }};
}

env_view env_view::from_map(std::map<std::string, std::string, std::less<>> vars) {
  auto shared =
      std::make_shared<const std::map<std::string, std::string, std::less<>>>(std::move(vars));
  return env_view{[shared](std::string_view name) -> std::optional<std::string> {
    auto it = shared->find(name);
    if (it == shared->end()) return std::nullopt;
    return it->second;
  }};
}

detailed_result<long long> env_number(const env_view& env, std::string_view name,
                                      long long fallback) {
  auto v = env.get(name);
  if (!v || v->empty()) return fallback;
  long long n = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc{} || p != v->data() + v->size() || n <= 0) {
    return fail(make_error_code(errc::malformed_number),
                std::string{name} + "='" + *v + "' is not a positive integer");
  }
  return n;
}

detailed_result<std::size_t> env_byte_count(const env_view& env, std::string_view name,
                                            std::size_t fallback) {
  auto v = env.get(name);
  if (!v) return fallback;
  std::size_t n = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (v->empty() || ec != std::errc{} || p != v->data() + v->size()) {
    return fail(make_error_code(errc::malformed_number),
                std::string{name} + "=" + *v + ": not a byte count");
  }
  return n;
}

}  // namespace vessel::actors
