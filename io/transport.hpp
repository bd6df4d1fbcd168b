#pragma once
// The one interface every transport (TCP, shared memory, serial, RDMA) offers to the layers above:
// send frames, receive frames, close, learn why it ended. Establishing a transport (dial, accept,
// open a tty, exchange a shm segment) is transport-specific and lives beside each implementation.
// Everything here runs on the reactor thread that owns the transport.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>
#include <system_error>

#include "io/buffer.hpp"
#include "wire/frame_header.hpp"
#include "wire/reassembler.hpp"
#include "wire/result.hpp"

namespace vessel::io {

/// Receives what a transport delivers; called on the owning reactor thread.
class transport_handler {
 public:
  virtual ~transport_handler() = default;
  /// One complete frame. `payload` is valid only during the call: copy it, or (transports that
  /// receive into pooled buffers) keep `payload_owner`, which shares the block without a copy.
  virtual void on_frame(const wire::frame_header& header, std::span<const std::byte> payload,
                        const buffer_slice& payload_owner) = 0;
  /// A stream transport (TCP) decoded the header of a frame whose payload has not all arrived
  /// (`arrived`: its first bytes, valid during the call): memory of exactly header.payload_len
  /// bytes to receive the payload into directly, in two parts (its first place.head.size() bytes
  /// into head, the rest into body; either may be empty), or an empty place to take it from the
  /// transport's buffer as usual. The memory must stay valid until on_frame delivers the frame
  /// (or the transport ends); what it holds before then is undefined. on_frame's `payload` is
  /// then the body part: the whole payload when the head part is empty, else its bytes after
  /// the head. Saves a copy of large payloads (a link's fragments).
  virtual wire::fragment_place payload_destination(const wire::frame_header& /*header*/,
                                                   std::span<const std::byte> /*arrived*/) {
    return {};
  }
  /// The send queue, after refusing a frame with errc::send_queue_full, has room again.
  virtual void on_writable() {}
  /// The transport ended (peer closed, reset, unplugged, bad input, closed locally). Final: no
  /// callback follows. The owner decides whether to reconnect.
  virtual void on_closed(std::error_code why) = 0;
};

/// Counters every transport keeps; read on the reactor thread.
struct transport_stats {
  std::uint64_t frames_sent = 0;
  std::uint64_t frames_received = 0;
  std::uint64_t bytes_sent = 0;      ///< on the wire: headers and payloads
  std::uint64_t bytes_received = 0;  ///< on the wire: headers and payloads
  std::uint64_t send_queue_full = 0; ///< times send() pushed back
  std::uint64_t send_queue_high_water = 0;  ///< most bytes ever queued for sending (shm: sampled)
};

/// A connected, framed, ordered byte channel to one peer.
class transport {
 public:
  virtual ~transport() = default;

  /// Queues one frame for sending. The payload is not copied: `payload` keeps its block alive
  /// until the bytes are on the wire. header.payload_len must equal payload.size(). Fails with
  /// errc::send_queue_full when the bounded queue is full (on_writable() follows), or with
  /// errc::transport_closed after the transport ended.
  virtual result<void> send(const wire::frame_header& header, buffer_slice payload) = 0;

  /// As send(), the payload in two parts: `first` then `second` (header.payload_len bytes in
  /// all), neither copied where the transport can gather them (TCP, shared memory): a frame
  /// that starts with a small header block and goes on in memory lent by the caller. Elsewhere
  /// both are copied into one frame (send_copy).
  virtual result<void> send_parts(const wire::frame_header& header, buffer_slice first,
                                  buffer_slice second) {
    if (second.empty()) return send(header, std::move(first));
    std::vector<std::byte> joined(first.size() + second.size());
    if (!first.empty()) std::memcpy(joined.data(), first.data(), first.size());
    std::memcpy(joined.data() + first.size(), second.data(), second.size());
    return send_copy(header, joined);
  }

  /// Queues one frame whose payload is copied into the send queue's own storage: for small
  /// payloads (control frames, tests), where a copy costs less than a pooled block.
  virtual result<void> send_copy(const wire::frame_header& header,
                                 std::span<const std::byte> payload) = 0;

  /// Bytes accepted by send() but not yet on the wire.
  virtual std::size_t queued_bytes() const noexcept = 0;

  /// Between cork() and uncork(), a transport that writes each send at once (TCP from the loop's
  /// thread) queues them instead, and uncork() writes them together: a message's fragments then
  /// cost one write, not one each (loop owner only; others send as always).
  virtual void cork() noexcept {}
  virtual void uncork() noexcept {}

  /// Ends the transport: pending sends are dropped, in-flight operations cancelled; on_closed
  /// (errc::transport_closed) follows once the last operation has completed. Idempotent.
  virtual void close() noexcept = 0;

  virtual const transport_stats& stats() const noexcept = 0;
};

}  // namespace vessel::io
