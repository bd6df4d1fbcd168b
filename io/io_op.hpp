#pragma once
// The owner side of an io_uring operation: completions are dispatched to the object whose address
// the SQE carried as user_data.

#include <cstdint>
#include <utility>

namespace vessel::io {

class reactor;

/// Something with an SQE in flight on a reactor. The SQE's user_data is the op's address, so the op
/// must stay alive and in place from arming until its final completion (the first one without
/// IORING_CQE_F_MORE). An op has at most one SQE in flight: a transport holds one op per direction.
class io_op {
 public:
  io_op() = default;
  io_op(const io_op&) = delete;
  io_op& operator=(const io_op&) = delete;
  virtual ~io_op() = default;

  /// Runs on the reactor thread for each CQE of this op. `res` is the result or -errno (-ECANCELED
  /// after cancel or stop); `flags` are the CQE flags. IORING_CQE_F_MORE means more CQEs of this SQE
  /// follow (multishot, or a SEND_ZC whose buffer is still pinned until its IORING_CQE_F_NOTIF CQE).
  /// The op may be armed again (or destroyed) from here once a CQE without F_MORE has arrived.
  virtual void complete(int res, std::uint32_t flags) = 0;

  /// True from arming until the final completion has been delivered.
  bool in_flight() const noexcept { return in_flight_; }

 private:
  friend class reactor;
  // Intrusive list of in-flight ops: lets stop() cancel op by op where CANCEL_ANY is missing,
  // without an allocation per arm.
  io_op* prev_ = nullptr;
  io_op* next_ = nullptr;
  bool in_flight_ = false;
};

/// An io_op that forwards each completion to a callable `f(int res, std::uint32_t flags)`.
template <class F>
class callback_op final : public io_op {
 public:
  explicit callback_op(F f) : f_(std::move(f)) {}
  void complete(int res, std::uint32_t flags) override { f_(res, flags); }

 private:
  F f_;
};

}  // namespace vessel::io
