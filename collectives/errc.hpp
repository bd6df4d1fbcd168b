#pragma once
// Typed errors of the collectives (kernels, algorithms, selection), usable as std::error_code.

#include <system_error>

namespace vessel::collectives {

enum class errc {
  unsupported_op = 1,  ///< the operator is not defined on the type (bitwise op on floats).
  unsupported_type,    ///< a dtype value outside the enumeration (e.g. read off the wire).
  size_mismatch,       ///< buffers of different lengths, or a length not a multiple of the type.
  protocol_violation,  ///< a chunk the algorithm can never accept (unknown step, wrong peer,
                       ///< wrong size, duplicate): the peer is broken or malicious.
  invalid_argument,    ///< a parameter outside its domain (rank >= size, zero contributors).
  unknown_algorithm,   ///< an algorithm name (per call or VESSEL_ALGO_<OP>) that is not known
                       ///< or does not implement the operation.
  unsupported_isa,     ///< a reduction kernel instruction set this CPU does not have.
  timed_out,           ///< a collective over real ranks saw no progress within its timeout.
  transport_failed,    ///< a send or receive of a collective failed (link down, shutdown).
  rank_failed,         ///< a member rank is gone for good (its link is down); the request's
                       ///< detail() names it; communicator::shrink() continues without it.
  communicators_exhausted,  ///< no communicator id left (14 bits, per runtime).
  rejoin_mismatch,          ///< a restarted rank's survivors named different collectives to rejoin.
};

const std::error_category& collectives_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), collectives_category()};
}

}  // namespace vessel::collectives

template <>
struct std::is_error_code_enum<vessel::collectives::errc> : std::true_type {};
