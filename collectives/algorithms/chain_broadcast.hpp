#pragma once
// Pipelined chain broadcast: chunks flow root -> root+1 -> ... -> root-1 (mod p). Each link
// carries the message once, so for large messages the time tends to count * beta, independent
// of p: ~ (p - 2 + chunks) * (alpha + chunk * beta). Best for large messages.

#include <string_view>

#include "collectives/algorithms/tree_broadcast.hpp"

namespace vessel::collectives {

class chain_broadcast final : public tree_broadcast {
 public:
  explicit chain_broadcast(const algorithm_params& params) noexcept;
  std::string_view name() const noexcept override { return "chain_broadcast"; }
};

}  // namespace vessel::collectives
