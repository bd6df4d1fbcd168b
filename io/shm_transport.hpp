#pragma once
// The shared-memory transport: frames between two processes on one host through two SPSC rings
// (one per direction) in memfd segments, set up by io/shm_connector.hpp.
//
// - Small payloads (<= shm_config::inline_max) travel inside the ring record; larger ones are
//   written once by the sender into the direction's payload area and handed to the receiver's
//   on_frame() as a view INTO shared memory: one copy in all, where a socket costs two. The bytes
//   are released to the sender when on_frame() returns, so payload_owner is empty: a receiver
//   that keeps a payload copies it (the interface contract for transports without pooled
//   receive buffers).
// - A receiver polls the word at its next ring position, the first word of the record the sender
//   writes there last, so a frame costs no extra cross-core miss on the ring's head
//   (shm_transport.cpp, the record layout).
// - Wake-ups: after emptying its ring the receiver spins for a bounded, adaptive time, then sets
//   its "sleeping" flag and relies on an eventfd READ that is always armed on its reactor. The
//   sender writes that eventfd only when the flag is set (the no-lost-wake-up argument is in
//   shm_transport.cpp), so a busy link makes no syscall per frame.
// - Lent payloads: a large part of a pooled payload (shm_config::lend_min and up) is not copied at
//   all on the sending side. Its record names it in the sender's memory, the receiver reads it
//   straight into the memory its handler gives (transport_handler::payload_destination) with one
//   process_vm_readv, and the sender holds the block until the peer has consumed the record (or
//   has gone). One copy where the area costs two, and from 64 KiB split between both cores: the
//   sender writes the back half into the receiver's memory while the receiver reads the front.
//   The peer lends only after it proved it can read us (shm_transport.cpp, "Lent records").
// - Peer death: the hand-over socket stays connected and a poll is armed on it. The kernel
//   closes a dead process's socket, so EOF arrives within a reactor turn of the death; the
//   receiver then delivers what the peer had published and ends with errc::connection_reset (or
//   errc::connection_closed when the peer had closed in order first).
// - Backpressure: a full ring or area refuses send() with errc::send_queue_full; the receiver,
//   seeing the sender's "waiting" flag after it frees room, wakes it, and on_writable() follows.
// - Caller-driven progress: while a thread borrows the reactor (reactor::borrow()), the receiver
//   neither spins nor sleeps: the borrower polls the ring on each of its turns, and the
//   "sleeping" flag stays clear, so the peer's sends make no syscall at all. The reactor thread,
//   taking the loop back, polls once more and the receiver returns to the protocol above.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "io/io_op.hpp"
#include "io/reactor.hpp"
#include "io/shm_connector.hpp"
#include "io/shm_ring.hpp"
#include "io/transport.hpp"
#include "wire/frame_codec.hpp"

namespace vessel::io {

/// Counters specific to the shared-memory path (reactor thread).
struct shm_stats {
  std::uint64_t spin_hits = 0;         ///< frames found while spinning (no sleep needed)
  std::uint64_t sleeps = 0;            ///< times the receiver went to sleep on its eventfd
  std::uint64_t wakeups_sent = 0;      ///< eventfd writes to the peer (data or room)
  std::uint64_t wakeups_received = 0;  ///< eventfd READ completions
  /// Times the watchdog found frames (or room) pending while the receiver slept, on two ticks in
  /// a row with no receive run between them: each one is a wake-up the eventfd protocol failed to
  /// deliver (see shm_transport.cpp, on_watchdog). Should stay 0.
  std::uint64_t watchdog_recoveries = 0;
  std::uint64_t payloads_lent = 0;    ///< payloads the peer read from our memory (sent)
  std::uint64_t payloads_pulled = 0;  ///< payloads we read from the peer's memory (received)
  /// Of those, the ones whose back the peer wrote into our memory while we read the front.
  std::uint64_t payloads_pushed = 0;
};

/// A transport over a shared-memory channel. Reactor thread only, except construction.
class shm_transport final : public transport, private loop_poller {
 public:
  /// Takes over `channel` (any thread); nothing happens until start().
  shm_transport(reactor& r, shm_channel channel, transport_handler& handler,
                shm_config config = {});
  /// The transport must be closed and on_closed() seen, or its reactor stopped, before this.
  ~shm_transport() override;

  shm_transport(const shm_transport&) = delete;
  shm_transport& operator=(const shm_transport&) = delete;

  /// Arms the wake-up READ and the peer watch, then delivers whatever is already queued.
  void start();

  /// Copies the payload once into shared memory (`payload` is released before this returns), or
  /// lends it (held until the peer consumed it: see lend_min).
  result<void> send(const wire::frame_header& header, buffer_slice payload) override;
  result<void> send_copy(const wire::frame_header& header,
                         std::span<const std::byte> payload) override;
  /// Copies both parts, one after the other, into shared memory, or lends the second.
  result<void> send_parts(const wire::frame_header& header, buffer_slice first,
                          buffer_slice second) override;
  /// Bytes sent and not yet consumed by the peer (ring records, payload-area bytes, and the
  /// payloads lent).
  std::size_t queued_bytes() const noexcept override;
  void close() noexcept override;
  const transport_stats& stats() const noexcept override { return stats_; }

  /// Spin and wake-up counters.
  const shm_stats& shm_counters() const noexcept { return shm_stats_; }
  /// The spin budget the receiver uses now (adapts between 0 and config.max_spin).
  std::chrono::nanoseconds spin_budget() const noexcept { return spin_budget_; }

 private:
  enum class state : std::uint8_t { idle, open, closing, closed };

  struct wake_op final : io_op {
    explicit wake_op(shm_transport& t) : owner{t} {}
    void complete(int res, std::uint32_t flags) override;
    shm_transport& owner;
    std::uint64_t value = 0;
  };
  struct peer_watch_op final : io_op {
    explicit peer_watch_op(shm_transport& t) : owner{t} {}
    void complete(int res, std::uint32_t flags) override;
    shm_transport& owner;
  };

  /// `lent`: `second`'s block, lent instead of copied (null: copy).
  result<void> write_frame(const wire::frame_header& header, std::span<const std::byte> first,
                           std::span<const std::byte> second, buffer_slice* lent = nullptr);
  /// Whether a part of `n` bytes after an inline part of `inline_n` bytes is lent.
  bool lends(std::size_t inline_n, std::size_t n) const noexcept;
  /// Sets rx's consumer_pulls once a read of the peer's token proves we can read its memory.
  void offer_to_pull();
  /// Reads a lent payload into the handler's memory (the back written by the peer where it
  /// claims it) and delivers it; false after a failure. `fields`: the record's lent words;
  /// `record_end`: the ring position after the record.
  bool deliver_lent(const wire::frame_header& header, std::span<const std::byte> inline_part,
                    std::uint64_t address, std::byte* fields, std::uint64_t record_end);
  /// Waits until the peer that claimed a part's back has written it: pushed or push_failed.
  std::uint64_t await_push(std::byte* fields) noexcept;
  /// True when the peer offers us the back of our oldest loan to write.
  bool push_wanted() const noexcept;
  /// Writes it (or says we could not) if so.
  void serve_push() noexcept;
  /// Gives back the blocks whose records the peer has consumed (all of them: `peer_done`).
  void release_loans(bool peer_done) noexcept;
  /// True when the peer has consumed the oldest loan's record.
  bool loan_returned() const noexcept;
  static void continue_receive(void* self) noexcept;
  // loop_poller: a borrowed loop (reactor_config::lendable) looks at the ring on every turn.
  void poll() noexcept override;

  void arm_wake();
  void on_wake(int res);
  void on_peer_event(int res);
  void receive_loop();
  std::size_t drain(std::size_t budget);
  /// True when the word at our next ring position says a record (or pad) is complete there.
  bool record_ready() const noexcept;
  enum class spin_result : std::uint8_t { frames, other_work, nothing };
  spin_result spin_for_frames();
  bool try_sleep();
  bool has_room() const noexcept;
  void note_queue_high_water() noexcept;  // stats_.send_queue_high_water from queued_bytes()
  void check_writable();
  void wake_peer_consumer();
  void wake_peer_producer();
  void notify_peer() noexcept;
  void begin_close(std::error_code why);
  void maybe_finish();
  void arm_watchdog();
  void on_watchdog();
  void fail(std::error_code why);

  reactor& reactor_;
  shm_channel channel_;
  transport_handler& handler_;
  shm_config config_;

  // Our direction (we produce) and the peer's (we consume).
  shm::ring_control* tx_ctl_ = nullptr;
  shm::ring_control* rx_ctl_ = nullptr;
  shm::ring_producer tx_ring_;
  shm::ring_producer tx_area_;
  shm::ring_consumer rx_ring_;
  shm::ring_consumer rx_area_;

  wire::frame_encoder encoder_;
  wake_op wake_op_{*this};
  peer_watch_op peer_op_{*this};

  state state_ = state::idle;
  std::error_code close_reason_;
  bool continuation_pending_ = false;
  bool in_receive_ = false;
  bool want_writable_ = false;
  std::uint64_t refused_ring_bytes_ = 0;  // the refused send's needs, for on_writable
  std::uint64_t refused_area_bytes_ = 0;

  std::chrono::nanoseconds spin_budget_;
  // Spins in a row that found nothing, and short sleeps left before a woken receiver may spin
  // again: on a machine with fewer free cores than spinning threads a spin only delays the peer.
  std::uint32_t failed_spins_ = 0;
  std::uint32_t spin_cooldown_ = 0;
  std::chrono::steady_clock::time_point slept_at_{};
  bool sleeping_ = false;
  timer_id watchdog_ = 0;
  bool watchdog_armed_ = false;
  std::uint64_t receive_runs_ = 0;  // receive_loop() entries: the watchdog's progress marker
  std::uint64_t suspect_runs_ = 0;  // receive_runs_ when the watchdog first saw work pending
  bool suspect_ = false;

  // Payloads lent and not yet consumed, in record order: a block goes back once the peer's tail
  // passes its record's end.
  struct loan {
    std::uint64_t record_end = 0;
    std::byte* fields = nullptr;      // the record's lent words, in our ring
    std::span<const std::byte> part;  // the bytes lent (block's, after the record's lead)
    buffer_slice block;
    bool served = false;  // its offer taken or lost: not looked at again
  };
  std::deque<loan> loans_;
  std::uint64_t lent_bytes_ = 0;
  std::vector<std::byte> pull_scratch_;  // a lent payload whose handler gave no memory
  bool pulls_offered_ = false;           // we set consumer_pulls: lent records are expected

  transport_stats stats_;
  shm_stats shm_stats_;
};

}  // namespace vessel::io
