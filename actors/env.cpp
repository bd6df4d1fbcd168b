#include "actors/env.hpp"

#include <cstdlib>
#include <memory>

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

}  // namespace vessel::actors
