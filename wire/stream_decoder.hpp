#pragma once
// Incremental frame decoder for a byte stream: bytes arrive in any split, complete frames come out
// with their payload viewed in place in the decoder's one receive buffer.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <system_error>

#include "wire/frame_codec.hpp"
#include "wire/frame_header.hpp"
#include "wire/result.hpp"

namespace vessel::wire {

/// A decoded frame; `payload` points into the decoder's receive buffer.
struct frame_view {
  frame_header header;
  std::span<const std::byte> payload;  ///< valid until the next prepare() or feed()
  /// A payload received into a two-part destination (redirect_payload with a head): its first
  /// bytes, in the head part, and `payload` is the rest, in the body part. Empty otherwise.
  std::span<const std::byte> head;
};

/// Splits a byte stream into frames. All memory is allocated by the constructor (receive buffer,
/// aligned header scratch); decoding allocates nothing. The first bad frame poisons the decoder:
/// the stream is out of sync and the connection must go, so every later next() repeats the error.
/// One thread at a time (it belongs to the reactor that owns the connection).
class stream_decoder {
 public:
  explicit stream_decoder(decoder_limits limits = {});

  stream_decoder(const stream_decoder&) = delete;
  stream_decoder& operator=(const stream_decoder&) = delete;
  /// Moving hands over the buffer; a moved-from decoder may only be destroyed or assigned to.
  stream_decoder(stream_decoder&&) noexcept = default;
  stream_decoder& operator=(stream_decoder&&) noexcept = default;

  /// The free tail of the receive buffer, to receive into. May move the unconsumed bytes to the
  /// front, so it ends the life of every payload view handed out before. Empty only when the
  /// buffer is full of bytes next() has not consumed yet (call next() until it yields nothing).
  /// While a payload is redirected: the part of its destination still to fill.
  std::span<std::byte> prepare() noexcept;

  /// Declares that `n` bytes were written at the start of the last prepare()'s span.
  void commit(std::size_t n) noexcept;

  /// Copies as much of `bytes` as fits (prepare + memcpy + commit) and returns how much it took;
  /// call next() until it yields nothing, then feed the rest.
  std::size_t feed(std::span<const std::byte> bytes) noexcept;

  /// The next complete frame; nullopt while more bytes are needed; an error when the stream is bad
  /// (and from then on, the same error).
  result<std::optional<frame_view>> next() noexcept;

  /// The header of the frame next() is waiting for the payload of (next() returned nothing), if
  /// its payload is not redirected already.
  const frame_header* awaiting_payload() const noexcept {
    return pending_ && !direct_ ? &*pending_ : nullptr;
  }
  /// Bytes of awaiting_payload()'s payload already received.
  std::size_t payload_buffered() const noexcept;
  /// Those bytes, in the receive buffer (valid until the next prepare() or redirect); empty
  /// when nothing awaits a payload.
  std::span<const std::byte> payload_arrived() const noexcept;
  /// Receives the rest of awaiting_payload()'s payload straight into `dst` (exactly payload_len
  /// bytes, valid until next() returns the frame or the decoder goes): what is buffered already
  /// is copied there, and prepare() offers the rest of `dst` until it is full; next() then
  /// returns the frame with `dst` as its payload. Saves the pass from the receive buffer into
  /// the caller's memory for large payloads. False (nothing changes) when nothing awaits a
  /// payload or the size differs.
  bool redirect_payload(std::span<std::byte> dst) noexcept { return redirect_payload({}, dst); }
  /// As above, into two parts: the payload's first head.size() bytes into `head`, the rest into
  /// `body` (together exactly payload_len). next() returns the frame with `body` as its payload
  /// and `head` as its head (a message whose first bytes are a header kept apart from the
  /// memory its body lands in).
  bool redirect_payload(std::span<std::byte> head, std::span<std::byte> body) noexcept;

  /// Nothing buffered and no frame begun: the next byte received starts a frame.
  bool between_frames() const noexcept { return !pending_ && begin_ == end_; }
  /// No header decoded yet: the next bytes received start or continue a frame's header (what
  /// is buffered is less than one whole frame once next() has yielded nothing).
  bool awaiting_header() const noexcept { return !pending_; }

  /// Bytes received but not yet consumed as frames (a redirected payload's not counted).
  std::size_t buffered() const noexcept { return end_ - begin_; }

  /// The error that poisoned this decoder, or an empty error_code.
  std::error_code error() const noexcept { return error_; }

  const decoder_limits& limits() const noexcept { return limits_; }

 private:
  result<std::optional<frame_view>> fail(std::error_code ec) noexcept;

  decoder_limits limits_;
  std::size_t capacity_ = 0;
  std::unique_ptr<std::byte[]> buffer_;
  std::unique_ptr<std::uint64_t[]> header_scratch_;  // 8-byte aligned copy of one header
  std::size_t begin_ = 0;  // first unconsumed byte
  std::size_t end_ = 0;    // one past the last received byte
  // A header already decoded whose payload has not fully arrived, so it is not parsed twice.
  std::optional<frame_header> pending_;
  std::size_t pending_header_len_ = 0;
  // A redirected payload (redirect_payload): its head and body parts, and how much of the two
  // together has arrived.
  std::optional<std::span<std::byte>> direct_;
  std::span<std::byte> direct_head_;
  std::size_t direct_filled_ = 0;
  std::error_code error_;
};

}  // namespace vessel::wire
