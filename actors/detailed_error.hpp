#pragma once
// An error code plus the line a person needs to fix it ("VESSEL_RANK='x' is not a number").
// Set-up paths (bootstrap, token loading) return it: they run once per process, so carrying a
// string is affordable there, and an operator reading "malformed number" alone cannot tell which
// of a dozen launcher variables is wrong. Hot paths use plain std::error_code.

#include <string>
#include <system_error>
#include <utility>

#include "wire/result.hpp"

namespace vessel::actors {

/// A typed error and the sentence that explains it, naming the variable, file or value involved.
struct detailed_error {
  std::error_code code;
  std::string detail;  ///< complete sentence for a log line; never contains secrets

  /// The sentence for the log line.
  const std::string& message() const noexcept { return detail; }
};

/// Lets Boost.Outcome treat detailed_error as an error code (comparisons, has_error()).
inline const std::error_code& make_error_code(const detailed_error& e) noexcept {
  return e.code;
}

/// What `value()` on a failed detailed_result throws: a system_error whose what() holds the detail.
[[noreturn]] inline void outcome_throw_as_system_error_with_payload(const detailed_error& e) {
  throw std::system_error(e.code, e.detail);
}

/// A value, or a detailed_error. `value()` on an error throws std::system_error.
template <class T>
using detailed_result = outcome::std_result<T, detailed_error>;

/// Builds the failure of a detailed_result.
inline detailed_error fail(std::error_code code, std::string detail) {
  return detailed_error{code, std::move(detail)};
}

}  // namespace vessel::actors
