#pragma once
// A provided-buffer ring (io_uring_register_buf_ring, kernel 5.19): the kernel picks a buffer for
// each receive, so a socket waiting for data pins no memory of its own. liburing 2.3 has no
// io_uring_setup_buf_ring, so the ring memory is mapped and registered by hand (DEPENDENCIES.md §2).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <liburing.h>

#include "wire/result.hpp"

namespace vessel::io {

class reactor;

/// `count` buffers of `size` bytes lent to the kernel as buffer group `group`. Reactor thread only;
/// destroy it before the reactor stops, or after (then the ring's exit has unregistered it).
class buffer_ring {
 public:
  /// Registers the ring on `r` (which must be started and have features().buffer_ring).
  /// `count` must be a power of two, at most 32768.
  static result<std::unique_ptr<buffer_ring>> create(reactor& r, std::uint16_t group,
                                                     std::uint32_t count, std::uint32_t size);
  buffer_ring(const buffer_ring&) = delete;
  buffer_ring& operator=(const buffer_ring&) = delete;
  ~buffer_ring();

  /// The buffer group id to put in an SQE's buf_group.
  std::uint16_t group() const noexcept { return group_; }
  /// Buffer `id` (from cqe flags >> IORING_CQE_BUFFER_SHIFT), the first `len` bytes of it.
  std::span<std::byte> data(std::uint16_t id, std::size_t len) noexcept;
  /// Gives buffer `id` back to the kernel once its bytes have been consumed.
  void recycle(std::uint16_t id) noexcept;

 private:
  buffer_ring(reactor& r, std::uint16_t group, std::uint32_t count, std::uint32_t size);

  reactor& reactor_;
  std::uint16_t group_;
  std::uint32_t count_;
  std::uint32_t size_;
  io_uring_buf_ring* ring_ = nullptr;  // mmap'ed, page aligned as the kernel requires
  std::size_t ring_bytes_ = 0;
  bool registered_ = false;
  std::vector<std::byte> storage_;
};

}  // namespace vessel::io
