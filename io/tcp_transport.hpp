#pragma once
// io::transport over a connected TCP socket, driven by one reactor.
//
// Send side: a preallocated ring of entries, each holding its encoded header (and, for
// send_copy, the copied payload right after it) plus a buffer_slice of the payload. One send is
// in flight per socket (DEPENDENCIES.md §2: SQEs on one stream socket are not ordered); whatever
// is queued meanwhile goes out in ONE sendmsg of iovecs when it completes, and a partial send is
// resumed from the byte where it stopped. On an idle socket one non-blocking sendmsg(2) goes
// first (a plain send(2) of a gathered copy when the queued bytes are at most 1 KiB) and only the
// rest is handed to the ring (direct_send). The queue is bounded in bytes: send() refuses with
// errc::send_queue_full and on_writable() follows once the queue drains below the low watermark.
//
// Receive side: recv straight into the stream_decoder's free tail (prepare/commit), then every
// complete frame goes to on_frame with its payload viewed in place: one copy (the kernel's).
//
// On a lendable reactor (caller-driven progress) the socket is read by readiness instead: a
// POLL_ADD tells the reactor thread that bytes wait, and whoever holds the loop reads them with
// a non-blocking recv(2). A borrower polls the socket itself on each of its turns (loop_poller),
// as Open MPI's btl tcp does, so a reply reaches it without any thread being scheduled; what
// the socket did not take of a send is retried there too, with direct sends. An
// io_uring RECV could not serve a borrower: it completes in task work of the thread that armed
// it, the reactor thread, parked while the loop is lent. Only the loop's holder ever reads, so
// bytes are never taken by two threads at once.
//
// Threading: everything, construction included, on the reactor thread that owns the socket (a
// borrower of a lendable reactor counts as that thread while it holds the loop).

#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "io/io_op.hpp"
#include "io/reactor.hpp"
#include "io/transport.hpp"
#include "wire/frame_codec.hpp"
#include "wire/stream_decoder.hpp"

namespace vessel::io {

/// True when `fd`'s peer is on this host: AF_UNIX, 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104, or
/// a peer reached through one of this host's own addresses (the connection's two ends have the
/// same IP: its bytes travel over loopback too).
bool peer_is_on_this_host(int fd) noexcept;

/// How a tcp_transport is built. Every key with its default.
struct tcp_transport_options {
  /// Bound on bytes accepted by send() and not yet on the wire (headers included). A frame is
  /// refused when it would cross the bound, except into an empty queue, so that one frame larger
  /// than the bound still goes (the decoder limits bound a frame anyway).
  std::size_t send_queue_bytes = 16u << 20;
  /// Frames the queue holds (the preallocated ring's entries); also bounds the queue.
  std::size_t send_queue_frames = 1024;
  /// on_writable() fires when queued bytes drop to this; 0 means half of send_queue_bytes.
  std::size_t low_watermark_bytes = 0;
  /// Payload bytes send_copy() may copy into an entry; larger payloads need send().
  std::size_t copy_bytes = 512;
  /// iovecs in one sendmsg (two per frame); the rest waits for the next send. <= IOV_MAX.
  std::size_t max_iovecs = 128;
  /// When nothing is in flight, first try a non-blocking sendmsg(2) right away and hand only what
  /// the socket did not take to io_uring. A ping-pong otherwise pays a second io_uring_enter per
  /// message: the wait returns on the send's own CQE before the reply's (measured with strace:
  /// 2 enters per hop without, 1 with). Frames sent from on_frame are still coalesced: the
  /// attempt happens once, after the received batch has been dispatched.
  bool direct_send = true;
  /// SEND_ZC for large frames where the reactor allows it. A peer on this host
  /// (peer_is_on_this_host, checked once) always gets copying sends, whatever this says: the
  /// kernel copies into the receiver anyway, and zero copy halved loopback bandwidth (reactor.hpp).
  zero_copy send_zero_copy = zero_copy::when_large;
  /// TCP_CONGESTION for a connection to a peer on this host; empty keeps the system's. Over
  /// loopback there is no loss or queue to model, and a pacing algorithm only spaces the
  /// segments out: with BBR (the system's choice on the machines we measure on) 4 ranks' 1 MiB
  /// allreduce spent a quarter of its samples arming pacing timers and sending from their
  /// softirq, and took 1.5x as long as with reno (docs/io_performance.md, "Loopback is not a
  /// network"). reno paces nothing and any process may choose it.
  std::string_view local_congestion_control = "reno";
  /// On a lendable reactor, receive by readiness and let a borrower read the socket directly
  /// (see above). false: always an io_uring RECV.
  bool poll_when_lent = true;
  /// Receive by readiness on any reactor (an io_uring POLL, then recv(2) on the loop's thread)
  /// instead of an io_uring RECV into the decoder's buffer. Only so does a large payload come
  /// off the socket straight into the handler's memory (transport_handler::payload_destination):
  /// an io_uring RECV into that memory could still write after a close returned. The mesh sets
  /// it: an actor rank's links (a plain reactor) then take 1 MiB messages at 9.9-10.2 GB/s
  /// instead of 6.4-6.5, with the same 8-byte latency (docs/io_performance.md, "Actor ranks'
  /// links receive large payloads in place").
  bool receive_by_readiness = false;
  /// Frame bounds and receive buffer size (receive_buffer_bytes; 0 = one largest frame).
  wire::decoder_limits limits = default_limits();

  /// The decoder defaults with a 4 MiB receive buffer: several 1 MiB fragments per recv.
  static wire::decoder_limits default_limits() noexcept {
    wire::decoder_limits l;
    l.receive_buffer_bytes = 4u << 20;
    return l;
  }
};

/// A framed transport over a connected stream socket. Destroy it only after on_closed() has been
/// delivered (from on_closed itself is fine), or after its reactor has stopped.
class tcp_transport final : public transport, private loop_poller {
 public:
  /// Takes ownership of `fd` (connected; blocking or not) and allocates every buffer it will
  /// use. Receiving starts with start().
  tcp_transport(reactor& r, int fd, transport_handler& handler, tcp_transport_options options = {});
  tcp_transport(const tcp_transport&) = delete;
  tcp_transport& operator=(const tcp_transport&) = delete;
  /// Closes the socket if still open.
  ~tcp_transport() override;

  /// Arms the first receive. Reactor thread; once.
  void start();

  /// Queues the frame (see transport::send); on an idle socket it is written at once (direct_send).
  result<void> send(const wire::frame_header& header, buffer_slice payload) override;
  /// As send(), gathered from both parts by the same sendmsg(2) (three iovecs a frame).
  result<void> send_parts(const wire::frame_header& header, buffer_slice first,
                          buffer_slice second) override;
  /// As send(), the payload copied into the entry right after its header: at most copy_bytes,
  /// else std::errc::message_size.
  result<void> send_copy(const wire::frame_header& header,
                         std::span<const std::byte> payload) override;
  std::size_t queued_bytes() const noexcept override { return queued_bytes_; }
  /// Direct sends wait for uncork(), which writes them in one sendmsg(2) (transport::cork).
  void cork() noexcept override { corked_ = true; }
  void uncork() noexcept override;
  /// Drops what is queued, cancels what is in flight; on_closed(errc::transport_closed) follows
  /// when the last operation completes: later in the loop, or at once when nothing is in flight
  /// and no callback of this transport is running.
  void close() noexcept override;
  const transport_stats& stats() const noexcept override { return stats_; }

  /// Frames queued and not yet fully sent.
  std::size_t queued_frames() const noexcept { return count_; }
  /// The socket (for getsockopt and tests); -1 once closed.
  int fd() const noexcept { return fd_; }
  /// The zero-copy policy its sends use (options.send_zero_copy, or never for a local peer).
  zero_copy send_zero_copy() const noexcept { return zero_copy_; }
  /// The socket's congestion control (TCP_CONGESTION), "" when it has none (AF_UNIX) or is closed.
  std::string congestion_control() const;
  /// True until the transport has begun closing.
  bool is_open() const noexcept { return state_ == state::open; }
  /// True once it has closed for good (on_closed has run, or is running): from then on its owner
  /// may destroy it. A transport that is closing may still have a finish of its own queued.
  bool has_ended() const noexcept { return state_ == state::closed; }
  /// True when the socket is read by readiness (a lendable reactor and poll_when_lent, or
  /// receive_by_readiness).
  bool receives_by_readiness() const noexcept { return readiness_; }

 private:
  enum class state : std::uint8_t { open, closing, closed };

  // One queued frame: `head_len` bytes (prefix, header, copied payload) at `head`, then
  // `payload`, then `more` (a payload sent in two parts).
  struct entry {
    std::byte* head = nullptr;
    std::uint32_t head_len = 0;
    buffer_slice payload;
    buffer_slice more;
  };

  struct send_op final : io_op {
    explicit send_op(tcp_transport& t) : owner(t) {}
    void complete(int res, std::uint32_t flags) override { owner.on_send(res, flags); }
    tcp_transport& owner;
  };
  struct recv_op final : io_op {
    explicit recv_op(tcp_transport& t) : owner(t) {}
    void complete(int res, std::uint32_t flags) override { owner.on_recv(res, flags); }
    tcp_transport& owner;
  };

  result<entry*> reserve(const wire::frame_header& header, std::span<const std::byte> copied);
  void flush();
  void flush_direct();
  std::size_t build_iovecs() noexcept;  // returns the bytes they hold
  void advance(std::size_t n) noexcept;
  void arm_recv();
  void on_send(int res, std::uint32_t flags);
  void on_recv(int res, std::uint32_t flags);
  void on_readable(int res);
  bool completion_ends(int res, bool eof_at_zero) noexcept;
  bool notify_writable_if_drained();
  void read_ready();
  void dispatch_frames();
  // loop_poller: a borrower reads the socket on each of its turns (beside other sockets, on
  // those whose one poll(2) saw input), the reactor thread on each of its busy-poll spins
  // (readiness_ only).
  void poll() noexcept override;
  int readiness_fd() const noexcept override;
  void poll_without_input() noexcept override;
  void poll_turn(bool may_have_input) noexcept;
  bool spin_poll() noexcept override;
  void spin_poll_ended() noexcept override;
  void fail(std::error_code why) noexcept;
  void maybe_finish() noexcept;
  static void finish_posted(void* self) noexcept;

  reactor& reactor_;
  int fd_;
  transport_handler& handler_;
  tcp_transport_options options_;
  std::size_t low_watermark_;
  std::size_t slot_bytes_;
  bool local_peer_;  // peer_is_on_this_host, once
  zero_copy zero_copy_;
  bool readiness_;
  bool polled_ = false;  // registered as the reactor's loop_poller
  bool corked_ = false;  // cork(): direct sends wait for uncork()

  // Send queue: ring of entries over one preallocated byte slab.
  std::unique_ptr<std::byte[]> slab_;
  std::vector<entry> ring_;
  std::size_t head_ = 0;         // oldest entry
  std::size_t count_ = 0;        // entries queued
  std::size_t head_offset_ = 0;  // bytes of the oldest entry already on the wire
  std::size_t queued_bytes_ = 0;
  bool want_writable_ = false;
  std::vector<iovec> iov_;
  msghdr msg_{};
  // direct_send gathers up to this many bytes of several iovecs into one plain send(2).
  std::array<std::byte, 1024> gather_{};
  int send_result_ = 0;  // a zero-copy send's result, kept until its notification CQE
  wire::frame_encoder encoder_;
  send_op send_op_{*this};

  wire::stream_decoder decoder_;
  recv_op recv_op_{*this};
  const buffer_slice no_owner_;  // on_frame's payload_owner: payloads live in the decoder

  state state_ = state::open;
  int callbacks_running_ = 0;  // >0 while a handler callback runs: finishing waits for it
  // A failure with no op in flight (a send before start(), one while no recv was armed) has no
  // completion to end the close: a posted maybe_finish() does, and finishing waits for it.
  bool finish_pending_ = false;
  // Frames still to come whose headers are read on their own: large frames flow (see
  // header_first_after_large in the .cpp).
  std::uint32_t header_first_frames_ = 0;
  std::error_code reason_;
  transport_stats stats_;
};

}  // namespace vessel::io
