#pragma once
// Argument checks shared by the algorithms: a bad parameter or a short buffer is an error from
// start(), never an out-of-bounds access later.

#include <cstddef>
#include <span>

#include "collectives/algorithms/algorithm.hpp"
#include "collectives/errc.hpp"

namespace vessel::collectives {

/// The communicator shape and the type are usable: size >= 1, rank and root below size, a known
/// dtype. Constructors call it before deriving any topology (a zero size would divide by zero).
inline bool params_valid(const algorithm_params& p) noexcept {
  return p.size >= 1 && p.rank < p.size && p.root < p.size && size_of(p.type) != 0;
}

inline result<void> check_params(const algorithm_params& p) noexcept {
  if (size_of(p.type) == 0) return errc::unsupported_type;
  if (!params_valid(p)) return errc::invalid_argument;
  return outcome::success();
}

/// `bytes` fit in the buffer (an unused buffer may be empty when `bytes` is 0).
template <class Byte>
result<void> check_buffer(std::span<Byte> buffer, std::size_t bytes) noexcept {
  if (buffer.size() < bytes) return errc::size_mismatch;
  return outcome::success();
}

/// count * size_of(type) without wrapping around.
inline result<std::size_t> checked_bytes(std::size_t count, std::size_t element_bytes,
                                         std::size_t blocks = 1) noexcept {
  const std::size_t max = static_cast<std::size_t>(-1);
  if (count != 0 && element_bytes > max / count) return errc::invalid_argument;
  const std::size_t one = count * element_bytes;
  if (one != 0 && blocks > max / one) return errc::invalid_argument;
  return one * blocks;
}

inline std::error_code protocol_violation() noexcept {
  return make_error_code(errc::protocol_violation);
}

}  // namespace vessel::collectives
