#pragma once
// The bytes of a message as actors pass them around: a copyable handle over a pooled
// io::buffer_slice. Copying it (which CAF does when a message is shared) bumps a reference count;
// the bytes are never copied. Whitelisted as a CAF message type (CAF 0.17 requires inspectable or
// whitelisted types even for local messages, and copy-constructible ones).

#include <cstddef>
#include <cstring>
#include <span>
#include <string_view>
#include <utility>

#include <caf/allowed_unsafe_message_type.hpp>

#include "io/buffer.hpp"
#include "io/buffer_pool.hpp"
#include "io/errc.hpp"
#include "io/tsan_annotations.hpp"
#include "wire/result.hpp"

namespace vessel::actors {

/// A message's bytes, shared with the pool block that holds them.
class payload {
 public:
  payload() noexcept = default;
  /// Wraps bytes that are complete: whoever fills a block does so before wrapping it.
  explicit payload(io::buffer_slice slice) noexcept : slice_{std::move(slice)} {
    io::tsan_release(slice_.data());
  }

  /// The bytes (read-only: other handles may share them).
  std::span<const std::byte> bytes() const noexcept {
    io::tsan_acquire(slice_.data());
    return slice_.bytes();
  }
  std::size_t size() const noexcept { return slice_.size(); }
  bool empty() const noexcept { return slice_.size() == 0; }
  /// The bytes as text (tests, device commands).
  std::string_view view() const noexcept {
    io::tsan_acquire(slice_.data());
    return {reinterpret_cast<const char*>(slice_.data()), slice_.size()};
  }

  /// The slice, for a transport (shares the block).
  const io::buffer_slice& slice() const noexcept {
    io::tsan_acquire(slice_.data());
    return slice_;
  }
  /// Hands the slice over without touching the reference count.
  io::buffer_slice take() && noexcept {
    io::tsan_acquire(slice_.data());
    return std::move(slice_);
  }

  /// A payload holding a copy of `bytes` in a block of `pool` (a cold-path helper: apps on the
  /// hot path fill a pool block themselves). io::errc::pool_exhausted when no block is free,
  /// std::errc::message_size when no size class fits.
  static result<payload> copy_of(io::buffer_pool& pool, std::span<const std::byte> bytes) {
    if (!pool.class_for(bytes.size())) return std::make_error_code(std::errc::message_size);
    auto block = pool.try_acquire(bytes.size());
    if (!block) return io::errc::pool_exhausted;
    if (!bytes.empty()) std::memcpy(block.data(), bytes.data(), bytes.size());
    return payload{std::move(block).slice(0, bytes.size())};
  }
  static result<payload> copy_of(io::buffer_pool& pool, std::string_view text) {
    return copy_of(pool, std::as_bytes(std::span<const char>{text.data(), text.size()}));
  }

 private:
  io::buffer_slice slice_;
};

}  // namespace vessel::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::actors::payload)
