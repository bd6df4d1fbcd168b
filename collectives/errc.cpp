#include "collectives/errc.hpp"

#include <string>

namespace vessel::collectives {
namespace {

class collectives_error_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "vessel.collectives"; }

  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::unsupported_op: return "reduction operator not defined on this element type";
      case errc::unsupported_type: return "unknown element type";
      case errc::size_mismatch: return "buffer sizes differ or are not a multiple of the element";
      case errc::protocol_violation: return "peer sent a chunk the collective cannot accept";
      case errc::invalid_argument: return "invalid collective parameter";
      case errc::unknown_algorithm: return "unknown algorithm for this collective operation";
      case errc::unsupported_isa: return "instruction set not supported by this CPU";
      case errc::timed_out: return "collective timed out waiting for peers";
      case errc::transport_failed: return "a send or receive of the collective failed";
      case errc::rank_failed: return "a rank of the communicator is gone (link down)";
      case errc::communicators_exhausted: return "no communicator id left";
      case errc::rejoin_mismatch:
        return "the survivors disagree on the collective a restarted rank rejoins";
    }
    return "unknown vessel.collectives error";
  }
};

}  // namespace

const std::error_category& collectives_category() noexcept {
  static const collectives_error_category category;
  return category;
}

}  // namespace vessel::collectives
