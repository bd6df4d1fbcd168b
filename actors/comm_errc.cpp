#include "actors/comm_errc.hpp"

#include <string>

namespace vessel::actors {
namespace {

class comm_error_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "vessel.comm"; }

  std::string message(int value) const override {
    switch (static_cast<comm_errc>(value)) {
      case comm_errc::source_out_of_range: return "rank is not in the world";
      case comm_errc::tag_reserved: return "tag is reserved for vessel itself";
      case comm_errc::receive_timeout: return "no matching message arrived before the timeout";
      case comm_errc::receive_cancelled: return "the receive was cancelled";
      case comm_errc::peer_down: return "the peer is down for good";
      case comm_errc::not_initialized: return "vessel::comm is not initialized";
      case comm_errc::message_too_large: return "message larger than the maximum message size";
      case comm_errc::buffer_too_small: return "message larger than the receive buffer";
      case comm_errc::shutting_down: return "the runtime is shutting down";
    }
    return "unknown comm error " + std::to_string(value);
  }
};

}  // namespace

const std::error_category& comm_category() noexcept {
  static const comm_error_category category;
  return category;
}

}  // namespace vessel::actors
