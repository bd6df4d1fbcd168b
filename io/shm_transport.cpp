#include "io/shm_transport.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstring>

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/cpu_relax.hpp"
#include "io/errc.hpp"
#include "io/log.hpp"
#include "wire/copy_bytes.hpp"

namespace vessel::io {
namespace {

// A ring record, cache-line aligned and a whole number of lines, never split across the ring's end:
//   u32 word0   bits 0..29: record bytes including these 8 (a multiple of 64); bits 30..31: kind
//   u32 hlen    the wire prefix: bytes of the Cap'n Proto header message that follows
//   header      hlen bytes (a whole number of words, so it stays 8-byte aligned for decoding)
//   inline:     the payload bytes (header.payload_len), padded to the line
//   area:       u64 payload-area position of the payload
//   lent:       u64 address of the payload's lent part in the sender's memory, u64 its length,
//               u64 hand-over state, u64 where the sender may write the part's back in the
//               receiver's memory, u64 from which offset of the part (the last three written by
//               the receiver: "Lent records"), then the payload's other bytes (its first ones),
//               padded to the line
//   pad:        (word0 only) the rest of the ring up to its end is unused: continue at offset 0
// The header is exactly the stream format's `u32 header_len | header`, so one decoder
// (wire::decode_header) serves TCP and shared memory alike.
//
// The receiver finds a record by its word0, not by the ring's head: word0 is stored last
// (release), and the receiver zeroes the first word of every line it consumes, so the word at its
// next position is 0 until the sender's next record (or pad) is complete there. Polling the head
// instead cost one more cross-core miss per frame before the record's own lines were even asked
// for (an 8-byte ping-pong: head, then line 1, then line 2 as the decoder chased pointers).
constexpr std::uint32_t kind_shift = 30;
constexpr std::uint32_t len_mask = (1u << kind_shift) - 1;
constexpr std::uint32_t kind_inline = 0;
constexpr std::uint32_t kind_area = 1;
constexpr std::uint32_t kind_pad = 2;
constexpr std::uint32_t kind_lent = 3;
constexpr std::uint64_t record_prefix = 8;
constexpr std::uint64_t record_align = shm::cache_line;

// A lent payload's first bytes travel in its record all the same: a link's handler decides where
// a message lands from its first bytes (actors::message_start_bytes), before any is read.
constexpr std::size_t lent_lead_bytes = 64;
constexpr std::uint64_t lent_fields = 40;  // the lent record's words before its first bytes
constexpr std::uint64_t lent_state_at = 16;
constexpr std::uint64_t lent_push_at = 24;
constexpr std::uint64_t lent_push_from_at = 32;

// A lent part's hand-over state (the record's word at lent_state_at). The receiver offers the
// back of the part (offered); whoever moves it from offered first copies the back: the sender
// (claimed, then pushed or push_failed) or the receiver itself (taken).
enum lent_state : std::uint64_t { not_offered = 0, offered, claimed, pushed, push_failed, taken };

// Parts shorter than this are read whole by the receiver: splitting one costs the two sides a
// few cache-line hand-overs and a system call more, worth it once each half copies for longer.
constexpr std::uint64_t min_split_bytes = 64 << 10;
constexpr std::uint64_t page_bytes = 4096;

// Frames delivered per receive turn before the reactor gets to run its other work.
constexpr std::size_t drain_batch = 256;

// Ring bytes a receiver asks for at once when a record arrives: a small data frame's record
// (its header message and an inline payload) spans two to three cache lines.
constexpr std::uint64_t prefetch_bytes = 4 * shm::cache_line;

// How often a sleeping receiver re-checks its ring without being woken: defence in depth only.
// The flag/eventfd protocol (wake_peer_consumer, try_sleep) loses no wake-up; the watchdog exists
// so that a bug there, or a peer that breaks it, costs a bounded stall instead of a hang, and
// watchdog_recoveries makes such a bug visible. 10 ms: ~100 cheap timer runs per second per link.
constexpr auto watchdog_period = std::chrono::milliseconds{10};

// A sleep shorter than this means the link is busy: restore the full spin budget on waking.
constexpr auto busy_sleep_threshold = std::chrono::milliseconds{1};

// Spins in a row that found nothing before the receiver stops spinning, and for how many short
// sleeps (each one a wake-up of a busy link) it then relies on the eventfd alone.
constexpr std::uint32_t max_failed_spins = 3;
constexpr std::uint32_t spin_cooldown_sleeps = 256;

constexpr std::uint64_t align_up(std::uint64_t n, std::uint64_t a) noexcept {
  return (n + a - 1) & ~(a - 1);
}

template <class T>
T load(const std::byte* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
void store(std::byte* p, T v) noexcept {
  std::memcpy(p, &v, sizeof v);
}

/// A record's word0 as the sender publishes it and the receiver polls it (the ring is 64-byte
/// aligned in the mapping, so every line start is a naturally aligned u32).
std::atomic_ref<std::uint32_t> first_word(std::byte* line) noexcept {
  return std::atomic_ref<std::uint32_t>{*reinterpret_cast<std::uint32_t*>(line)};
}

}  // namespace

shm_transport::shm_transport(reactor& r, shm_channel channel, transport_handler& handler,
                             shm_config config)
    : reactor_{r},
      channel_{std::move(channel)},
      handler_{handler},
      config_{config},
      spin_budget_{config.max_spin} {
  std::byte* tx = channel_.tx.data();
  std::byte* rx = channel_.rx.data();
  tx_ctl_ = reinterpret_cast<shm::ring_control*>(tx + shm::cache_line);
  rx_ctl_ = reinterpret_cast<shm::ring_control*>(rx + shm::cache_line);
  const auto tx_ring = channel_.tx_ring_bytes;
  const auto rx_ring = channel_.rx_ring_bytes;
  tx_ring_ = shm::ring_producer{&tx_ctl_->head, &tx_ctl_->tail, tx + shm::ring_offset, tx_ring};
  tx_area_ = shm::ring_producer{&tx_ctl_->area_head, &tx_ctl_->area_tail,
                                tx + shm::ring_offset + tx_ring, channel_.tx_area_bytes};
  rx_ring_ = shm::ring_consumer{&rx_ctl_->head, &rx_ctl_->tail, rx + shm::ring_offset, rx_ring};
  rx_area_ = shm::ring_consumer{&rx_ctl_->area_head, &rx_ctl_->area_tail,
                                rx + shm::ring_offset + rx_ring, channel_.rx_area_bytes};
}

shm_transport::~shm_transport() {
  release_loans(true);  // a reactor stopped under us: whatever the peer reads now, it discards
  // The reactor holds our ops' addresses while they are in flight.
  assert(!wake_op_.in_flight() && !peer_op_.in_flight() && !continuation_pending_ &&
         "destroy an shm_transport after on_closed() or after its reactor stopped");
}

void shm_transport::start() {
  if (state_ != state::idle) return;
  state_ = state::open;
  reactor_.add_poller(*this);
  offer_to_pull();
  arm_wake();
  reactor_.poll_add(peer_op_, channel_.socket.get(), POLLIN | POLLRDHUP);
  arm_watchdog();
  receive_loop();
}

void shm_transport::arm_watchdog() {
  watchdog_ = reactor_.add_timer(watchdog_period, [this] { on_watchdog(); });
  watchdog_armed_ = true;
}

// "Asleep with work pending" seen ONCE is not a lost wake-up: it is the normal window of a
// wake-up in flight, which the watchdog used to count (and "recover") as lost. Measured with
// vessel-bench (release, loaded 2-core VM), every case it counted was one of:
//   - the peer published, then was preempted before (or between) its flag load/exchange and its
//     eventfd write: flag still 1, or flag 0 with the eventfd still at 0;
//   - the peer wrote the eventfd, but our READ had not completed yet: the reactor's timed wait
//     ended on the watchdog's own deadline, and each turn runs due timers BEFORE it reaps (and,
//     with DEFER_TASKRUN, before the kernel even performs the READ), so the timer saw the frame
//     ahead of the completion that was about to deliver it.
// Invariant: a wake-up is lost only if work stays pending while we sleep and no receive run
// happens for a whole watchdog period. So the first sighting is only remembered; a recovery is
// counted and performed when the next tick finds the same sleep (no receive run since) with
// work still pending. A true lost wake-up then costs at most two periods.
void shm_transport::on_watchdog() {
  watchdog_armed_ = false;
  if (state_ == state::closing) {
    // Closed with payloads lent: the peer may still read them until it has consumed their
    // records or gone (begin_close).
    release_loans(false);
    if (loans_.empty()) {
      reactor_.cancel(peer_op_);
      maybe_finish();
    } else {
      arm_watchdog();
    }
    return;
  }
  if (state_ != state::open) return;
  release_loans(false);  // an idle sender's blocks come back within a period
  const bool pending = sleeping_ && !in_receive_ && !continuation_pending_ &&
                       (record_ready() || (want_writable_ && has_room()));
  if (!pending) {
    suspect_ = false;
  } else if (!suspect_ || suspect_runs_ != receive_runs_) {
    suspect_ = true;  // maybe a wake-up in flight: look again one period later
    suspect_runs_ = receive_runs_;
  } else {
    suspect_ = false;
    ++shm_stats_.watchdog_recoveries;
    log::get("io").warn("shm transport: lost wake-up recovered by the watchdog");
    sleeping_ = false;
    rx_ctl_->consumer_sleeping.store(0, std::memory_order_relaxed);
    receive_loop();
  }
  if (state_ == state::open) arm_watchdog();
}

// -- Sending -----------------------------------------------------------------------------------

result<void> shm_transport::send(const wire::frame_header& header, buffer_slice payload) {
  if (lends(0, payload.size())) return write_frame(header, {}, payload.bytes(), &payload);
  return write_frame(header, payload.bytes(), {});
}

result<void> shm_transport::send_parts(const wire::frame_header& header, buffer_slice first,
                                       buffer_slice second) {
  if (lends(first.size(), second.size())) {
    return write_frame(header, first.bytes(), second.bytes(), &second);
  }
  return write_frame(header, first.bytes(), second.bytes());
}

bool shm_transport::lends(std::size_t inline_n, std::size_t n) const noexcept {
  return config_.lend_min != 0 && n >= config_.lend_min && n > lent_lead_bytes &&
         inline_n + lent_lead_bytes <= config_.inline_max &&
         tx_ctl_->consumer_pulls.load(std::memory_order_relaxed) != 0;
}

result<void> shm_transport::send_copy(const wire::frame_header& header,
                                      std::span<const std::byte> payload) {
  return write_frame(header, payload, {});
}

result<void> shm_transport::write_frame(const wire::frame_header& header,
                                        std::span<const std::byte> first,
                                        std::span<const std::byte> second, buffer_slice* lent) {
  if (state_ != state::open) return errc::transport_closed;
  if (!loans_.empty()) release_loans(false);
  const std::size_t payload_len = first.size() + second.size();
  if (header.payload_len != payload_len) return make_error_code(std::errc::invalid_argument);
  VESSEL_TRY(wire_header, encoder_.encode_header(header));  // u32 header_len | header
  const std::uint64_t hlen = wire_header.size() - wire::prefix_bytes;
  // A lent part stays where it is, but for its first bytes, which go in the record.
  std::span<const std::byte> remote;
  if (lent != nullptr) {
    const std::size_t lead = std::min(lent_lead_bytes, second.size());
    remote = second.subspan(lead);
    second = second.first(lead);
  }
  const bool in_area = lent == nullptr && payload_len > config_.inline_max;
  const std::uint64_t body_len =
      in_area ? 8 : (lent != nullptr ? lent_fields : 0) + first.size() + second.size();
  const std::uint64_t rec_len =
      align_up(record_prefix + align_up(hlen, 8) + body_len, record_align);
  const std::uint64_t area_len = in_area ? align_up(payload_len, shm::cache_line) : 0;
  // Half of each ring at most: a reservation that wraps skips the bytes up to the end, so a
  // record longer than half the ring may never fit, even with the ring empty, and the sender
  // would wait for room forever.
  if (area_len > tx_area_.capacity() / 2 || rec_len > tx_ring_.capacity() / 2) {
    return make_error_code(std::errc::message_size);  // could never fit, however long we wait
  }

  std::byte* area = nullptr;
  std::byte* rec = nullptr;
  std::uint64_t area_pos = 0, rec_pos = 0, skipped = 0, area_skipped = 0;
  const auto reserve = [&] {
    if (in_area && (area = tx_area_.reserve(area_len, area_pos, area_skipped)) == nullptr) {
      return false;
    }
    if ((rec = tx_ring_.reserve(rec_len, rec_pos, skipped)) == nullptr) {
      tx_area_.rollback();
      return false;
    }
    return true;
  };
  if (!reserve()) {
    // Dekker with the consumer's wake_peer_producer(): we store "waiting" then load its tail
    // (inside reserve); it stores its tail then loads "waiting". With a seq_cst fence between
    // each pair, at least one side sees the other's store: either our retry finds the room, or
    // the consumer sees the flag and wakes us, so on_writable() cannot be lost.
    tx_ctl_->producer_waiting.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!reserve()) {
      ++stats_.send_queue_full;
      note_queue_high_water();  // full: the mark a sampled one could miss
      want_writable_ = true;
      refused_ring_bytes_ = rec_len + record_prefix;
      refused_area_bytes_ = area_len;
      // Run the receive loop soon: its spin also watches for room, which (on a busy link) comes
      // back sooner than the peer's eventfd wake-up would.
      if (!in_receive_ && !continuation_pending_) {
        continuation_pending_ = reactor_.post(work_item{&shm_transport::continue_receive, this});
      }
      return errc::send_queue_full;
    }
  }

  // Write once: the payload goes straight to where the peer will read it.
  if (in_area) {
    if (!first.empty()) wire::copy_bytes(area, first.data(), first.size());
    if (!second.empty()) wire::copy_bytes(area + first.size(), second.data(), second.size());
  }
  // The record's first line is staged and written last, in one burst ending with word0: the
  // receiver spins on that line, and stores to it spread over the whole write would hand it back
  // and forth between the two cores.
  alignas(record_align) std::byte first_line[record_align]{};
  const auto put = [&](std::uint64_t at, const std::byte* from, std::uint64_t n) {
    if (at < record_align) {
      const std::uint64_t staged = std::min(n, record_align - at);
      std::memcpy(first_line + at, from, staged);
      at += staged;
      from += staged;
      n -= staged;
    }
    if (n != 0) std::memcpy(rec + at, from, n);
  };
  const std::uint32_t kind = in_area ? kind_area : (lent != nullptr ? kind_lent : kind_inline);
  store<std::uint32_t>(first_line + 4, static_cast<std::uint32_t>(hlen));
  put(record_prefix, wire_header.data() + wire::prefix_bytes, hlen);
  const std::uint64_t body = record_prefix + align_up(hlen, 8);
  if (in_area) {
    std::byte where[8];
    store<std::uint64_t>(where, area_pos);
    put(body, where, sizeof where);
  } else {
    std::uint64_t at = body;
    if (lent != nullptr) {
      std::byte where[lent_fields]{};  // the hand-over words start at 0: not_offered
      store<std::uint64_t>(where, reinterpret_cast<std::uintptr_t>(remote.data()));
      store<std::uint64_t>(where + 8, remote.size());
      put(at, where, sizeof where);
      at += sizeof where;
    }
    if (!first.empty()) put(at, first.data(), first.size());
    if (!second.empty()) put(at + first.size(), second.data(), second.size());
  }
  std::memcpy(rec + 4, first_line + 4, record_align - 4);
  if (in_area) tx_area_.publish();
  // release: the record (and the area's payload) happen-before the peer's acquire of its word0.
  if (skipped != 0) {
    first_word(tx_ring_.at(rec_pos - skipped)).store(kind_pad << kind_shift,
                                                     std::memory_order_release);
  }
  first_word(rec).store(static_cast<std::uint32_t>(rec_len) | (kind << kind_shift),
                        std::memory_order_release);
  tx_ring_.publish();  // our own accounting (in_use, rollback); the peer polls word0
  if (lent != nullptr) {
    lent_bytes_ += lent->size();
    // A part too short to split is never offered back: not looked at again.
    loans_.push_back(
        {rec_pos + rec_len, rec + body, remote, std::move(*lent), remote.size() < min_split_bytes});
    ++shm_stats_.payloads_lent;
  }

  // The high-water mark is sampled: queued_bytes() loads the consumer's tail line, which the
  // consumer writes on every frame, and that miss cost an 8-byte ping-pong ~0.05 of its 0.65 us.
  if ((stats_.frames_sent & 63) == 0) note_queue_high_water();
  ++stats_.frames_sent;
  stats_.bytes_sent += wire_header.size() + payload_len;
  wake_peer_consumer();
  return outcome::success();
}

std::size_t shm_transport::queued_bytes() const noexcept {
  return static_cast<std::size_t>(tx_ring_.in_use() + tx_area_.in_use() + lent_bytes_);
}

void shm_transport::note_queue_high_water() noexcept {
  stats_.send_queue_high_water =
      std::max<std::uint64_t>(stats_.send_queue_high_water, queued_bytes());
}

// No lost wake-up (Dekker, both sides seq_cst-fenced):
//   sender:   publish head (release); fence; load consumer_sleeping
//   receiver: store consumer_sleeping = 1; fence; load head          (try_sleep)
// In the single total order of the two fences, whichever comes second sees the other side's
// store: either the receiver finds the frame and does not sleep, or the sender finds the flag
// and writes the eventfd, whose READ is always armed on the receiver's reactor. exchange() makes
// one sender write per sleep; an extra write only causes one spurious wake-up.
void shm_transport::wake_peer_consumer() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (tx_ctl_->consumer_sleeping.load(std::memory_order_relaxed) != 0 &&
      tx_ctl_->consumer_sleeping.exchange(0, std::memory_order_acq_rel) != 0) {
    notify_peer();
  }
}

// The mirror image for room: our consume_to() (release) then fence then load the peer's
// "waiting" flag, against its store of the flag, fence, and load of our tail.
void shm_transport::wake_peer_producer() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (rx_ctl_->producer_waiting.load(std::memory_order_relaxed) != 0 &&
      rx_ctl_->producer_waiting.exchange(0, std::memory_order_acq_rel) != 0) {
    notify_peer();
  }
}

void shm_transport::notify_peer() noexcept {
  const std::uint64_t one = 1;
  // Cannot block: the counter would need 2^64-2 unread wake-ups.
  [[maybe_unused]] const auto n = ::write(channel_.wake_out.get(), &one, sizeof one);
  ++shm_stats_.wakeups_sent;
}

bool shm_transport::has_room() const noexcept {
  return tx_ring_.capacity() - tx_ring_.in_use() >= refused_ring_bytes_ &&
         tx_area_.capacity() - tx_area_.in_use() >= refused_area_bytes_;
}

void shm_transport::check_writable() {
  if (!want_writable_ || state_ != state::open) return;
  if (!has_room()) {
    // Still full: re-announce that we wait (the peer cleared the flag when it woke us).
    tx_ctl_->producer_waiting.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!has_room()) return;
  }
  want_writable_ = false;
  handler_.on_writable();
}

// -- Receiving ---------------------------------------------------------------------------------

void shm_transport::arm_wake() {
  reactor_.read(wake_op_, channel_.wake_in.get(),
                std::as_writable_bytes(std::span{&wake_op_.value, 1}), 0);
}

void shm_transport::wake_op::complete(int res, std::uint32_t) { owner.on_wake(res); }

void shm_transport::on_wake(int res) {
  if (state_ != state::open) {
    maybe_finish();
    return;
  }
  if (res == -ECANCELED) return begin_close(errc::transport_closed);  // the reactor stops
  if (res < 0) return fail(error_from_errno(res));
  ++shm_stats_.wakeups_received;
  if (sleeping_) {
    sleeping_ = false;
    // Woken soon after going to sleep: the link is busy, and the sleep only happened because
    // the peer was itself asleep (each eventfd hop costs tens of µs on a loaded 2-core VM). Spin
    // fully again, so that both sides end up spinning and the eventfd drops out of the path.
    // A link idle for longer keeps its decayed budget (the "adaptive" half of the strategy).
    if (std::chrono::steady_clock::now() - slept_at_ < busy_sleep_threshold) {
      if (spin_cooldown_ > 0)
        --spin_cooldown_;
      else
        spin_budget_ = config_.max_spin;
    }
  }
  rx_ctl_->consumer_sleeping.store(0, std::memory_order_relaxed);
  arm_wake();
  receive_loop();
}

void shm_transport::continue_receive(void* self) noexcept {
  auto* t = static_cast<shm_transport*>(self);
  t->continuation_pending_ = false;
  if (t->state_ == state::open) {
    t->receive_loop();
  } else {
    t->maybe_finish();
  }
}

void shm_transport::receive_loop() {
  if (in_receive_) return;  // a handler's send/close re-entered us: the outer loop carries on
  in_receive_ = true;
  ++receive_runs_;
  std::size_t delivered = 0;
  while (state_ == state::open) {
    serve_push();
    delivered += drain(drain_batch - delivered);
    if (state_ != state::open) break;
    check_writable();
    if (reactor_.lent()) break;  // the borrower polls us on its next turn (poll())
    if (reactor_.lend_requested()) {
      // A caller waits for the loop (its receive may be in this ring): the rest is its to drain.
      continuation_pending_ = reactor_.post(work_item{&shm_transport::continue_receive, this});
      break;
    }
    // A busy link (ping-pong keeps the spin succeeding) must not keep the reactor to itself.
    if (delivered >= drain_batch) {
      // Possibly more: let the reactor's other work run first, then continue.
      continuation_pending_ = reactor_.post(work_item{&shm_transport::continue_receive, this});
      break;
    }
    const auto spun = spin_for_frames();
    if (spun == spin_result::frames) continue;
    if (spun == spin_result::other_work) {
      // The reactor has work (an app thread's post, a completion), often the very reply this
      // spin waits for: run it first, then come back to the ring.
      continuation_pending_ = reactor_.post(work_item{&shm_transport::continue_receive, this});
      break;
    }
    if (try_sleep()) break;
  }
  in_receive_ = false;
}

void shm_transport::poll() noexcept {
  if (state_ != state::open || in_receive_ || continuation_pending_) return;
  serve_push();
  if (!reactor_.lent()) {
    receive_loop();  // the reactor thread is back: drain, then spin or sleep as usual
    return;
  }
  if (sleeping_) {
    // Polled from now on: the peer need not write our eventfd (a syscall per frame). A wake-up
    // already on its way only completes the READ once more (on_wake).
    sleeping_ = false;
    rx_ctl_->consumer_sleeping.store(0, std::memory_order_relaxed);
  }
  if (record_ready() || (want_writable_ && has_room())) receive_loop();
}

// Bounded spin on an empty ring. The budget halves after each spin that found nothing, so an idle
// link stops spinning after a few rounds (no core burnt), and is restored when frames come
// during a spin or soon after a sleep began (on_wake).
// The spin also gives way to the reactor's other work: a post waiting behind it (from an app
// thread that answers what we just delivered) would otherwise wait out the whole budget, and
// every hop of a ping-pong through the runtime or the node cost max_spin. It looks for that work
// between every two pauses, not every 32: a pause takes ~20 ns on the EPYC VMs, and an actor
// resident on the reactor (actors/reactor_hosted.hpp) makes several posts per message, each of
// which waited out the 32 (0.7 µs: alone, this took the hosted actor's 8-byte latency from 8.4
// to 5.2 µs).
shm_transport::spin_result shm_transport::spin_for_frames() {
  if (spin_budget_.count() <= 0) return spin_result::nothing;
  // The clock is first read after 32 pauses: most spins end sooner, and a read costs 30-40 ns.
  std::chrono::steady_clock::time_point deadline{};
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (record_ready() || (want_writable_ && has_room()) || loan_returned() || push_wanted()) {
        ++shm_stats_.spin_hits;
        spin_budget_ = config_.max_spin;
        failed_spins_ = 0;
        return spin_result::frames;
      }
      if (reactor_.work_waiting()) return spin_result::other_work;
      cpu_relax();
    }
    const auto now = std::chrono::steady_clock::now();
    if (deadline == std::chrono::steady_clock::time_point{}) {
      deadline = now + spin_budget_;
    } else if (now >= deadline) {
      break;
    }
  }
  spin_budget_ /= 2;
  if (spin_budget_ < std::chrono::microseconds{1}) spin_budget_ = std::chrono::nanoseconds{0};
  // Full spins that keep failing on a busy link mean the peer cannot run while we spin (more
  // spinning threads than free cores: measured on a loaded 2-core VM, a mesh round trip took
  // 185 us with the 40 us spin against 10 us on eventfd wake-ups alone). Stop restoring the
  // budget for a while; a later probe finds out whether spinning pays again.
  if (++failed_spins_ >= max_failed_spins) {
    failed_spins_ = 0;
    spin_cooldown_ = spin_cooldown_sleeps;
    spin_budget_ = std::chrono::nanoseconds{0};
  }
  return spin_result::nothing;
}

// Dekker, receiver half (see wake_peer_consumer). A sender holding loans asks to be woken when the
// peer consumes (its "waiting" flag, as for room: wake_peer_producer), so that a block lent goes
// back within a wake-up rather than at the watchdog's next tick: a caller may be waiting for it
// (vessel::comm's lent send waits until the link lets go of the caller's buffer).
bool shm_transport::try_sleep() {
  release_loans(false);
  if (!loans_.empty()) {
    tx_ctl_->producer_waiting.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (loan_returned()) return false;
  }
  rx_ctl_->consumer_sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (record_ready()) {
    rx_ctl_->consumer_sleeping.store(0, std::memory_order_relaxed);
    return false;
  }
  sleeping_ = true;
  slept_at_ = std::chrono::steady_clock::now();
  ++shm_stats_.sleeps;
  return true;
}

// The poll also asks for the record's second line. A small message's record spans two (its
// header runs past the first), and the sender writes the second before word0: fetched only once
// word0 is seen, it was a second miss to the sender's core in a row, where decode stalled (2/3
// of its samples on that load). Asked for on every poll, it comes with the first. The line may
// be one the sender is about to write, but ours already: we zeroed it when we consumed the
// record there a lap ago, so its write takes the line from us either way.
bool shm_transport::record_ready() const noexcept {
  const std::uint64_t pos = rx_ring_.position();
  __builtin_prefetch(rx_ring_.at(pos + record_align));
  return first_word(rx_ring_.at(pos)).load(std::memory_order_acquire) != 0;
}

std::size_t shm_transport::drain(std::size_t budget) {
  std::size_t delivered = 0;
  const std::uint64_t area_cap = rx_area_.capacity();
  const auto bad = [&](const char* what) {
    log::get("io").warn("shm transport: bad record at {} ({})", rx_ring_.position(), what);
    fail(errc::bad_frame);
    return delivered;
  };
  while (delivered < budget && state_ == state::open) {
    const std::uint64_t pos = rx_ring_.position();
    std::byte* rec = rx_ring_.at(pos);
    const std::uint32_t word0 = first_word(rec).load(std::memory_order_acquire);
    if (word0 == 0) break;
    const std::uint64_t room = rx_ring_.contiguous(pos);
    // Everything read from the peer's memory is checked before use: a buggy or hostile peer
    // must get a bad_frame, not a read outside our mapping.
    const std::uint32_t kind = word0 >> kind_shift;
    const std::uint64_t len = word0 & len_mask;
    // The record's other lines are in the peer core's cache too, and decoding the header chases
    // pointers from line to line: ask for them all at once so that the misses overlap. Not past
    // the record: a line the sender has yet to write would only cost it a steal back.
    for (std::uint64_t line = record_align; line < std::min({len, room, prefetch_bytes});
         line += record_align) {
      __builtin_prefetch(rec + line);
    }
    if (kind == kind_pad) {
      first_word(rec).store(0, std::memory_order_relaxed);
      rx_ring_.consume_to(pos + room);
      continue;
    }
    const auto hlen = static_cast<std::uint64_t>(load<std::uint32_t>(rec + 4));
    if (len == 0 || len % record_align != 0 || len > room || hlen < wire::min_header_bytes ||
        record_prefix + align_up(hlen, 8) > len) {
      return bad("record length");
    }
    auto header = wire::decode_header({rec + record_prefix, hlen}, config_.limits);
    if (!header) {
      log::get("io").warn("shm transport: header refused: {}", header.error().message());
      return bad("header");
    }
    const std::uint64_t plen = header.value().payload_len;
    const std::byte* body = rec + record_prefix + align_up(hlen, 8);
    const std::byte* payload = body;
    std::uint64_t area_end = 0;
    std::uint64_t lent_address = 0;
    std::uint64_t lead = plen;  // the payload's bytes in the record or the area
    if (kind == kind_inline) {
      if (record_prefix + align_up(hlen, 8) + plen > len) return bad("inline payload length");
    } else if (kind == kind_lent) {
      if (!pulls_offered_) return bad("lent record where no loan was asked for");
      lent_address = load<std::uint64_t>(body);
      const auto lent_len = load<std::uint64_t>(body + 8);
      if (lent_len == 0 || lent_len > plen ||
          align_up(record_prefix + align_up(hlen, 8) + lent_fields + (plen - lent_len),
                   record_align) != len) {
        return bad("lent payload length");
      }
      payload = body + lent_fields;  // the payload's first bytes; the rest is in the peer's memory
      lead = plen - lent_len;
    } else {
      const auto area_pos = load<std::uint64_t>(body);
      // The area head was stored before the word0 we acquired, so relaxed suffices.
      const auto area_head = rx_ctl_->area_head.load(std::memory_order_relaxed);
      if (align_up(record_prefix + align_up(hlen, 8) + 8, record_align) != len ||
          area_pos < rx_area_.position() ||
          area_pos > area_head || plen > area_head - area_pos ||
          plen > rx_area_.contiguous(area_pos) || plen > area_cap) {
        return bad("payload area range");
      }
      payload = rx_area_.at(area_pos);
      area_end = area_pos + align_up(plen, shm::cache_line);
    }
    ++stats_.frames_received;
    stats_.bytes_received += wire::prefix_bytes + hlen + plen;
    const std::span<const std::byte> here{payload, static_cast<std::size_t>(lead)};
    if (kind != kind_lent) {
      handler_.on_frame(header.value(), here, buffer_slice{});
    } else if (!deliver_lent(header.value(), here, lent_address,
                             rec + record_prefix + align_up(hlen, 8), pos + len)) {
      return delivered;
    }
    // The payload view ends here: hand the bytes back to the peer, every line start zeroed
    // first, since the sender's later records may begin at any of them.
    for (std::uint64_t line = 0; line < len; line += record_align)
      first_word(rec + line).store(0, std::memory_order_relaxed);
    rx_ring_.consume_to(pos + len);
    ++delivered;
    if (kind == kind_area) {
      rx_area_.consume_to(area_end);
      // A large payload freed a lot of room: let a waiting sender refill now, not after the
      // batch (keeps both processes copying at once when streaming).
      wake_peer_producer();
    }
    // A borrower's request may be done: give it the loop back now. A sender that runs ahead
    // keeps the ring from ever running empty, and the batch (unexpected messages, each copied
    // into a fresh block) measured 10 ms before a broadcast's receiver saw its message.
    if (reactor_.lent() ? reactor_.completion_noted() : reactor_.lend_requested()) break;
  }
  if (delivered != 0) wake_peer_producer();
  return delivered;
}

// -- Lent records --------------------------------------------------------------------------------
// Through the payload area a large payload is copied twice, by the sender into the area and by
// the receiver out of it, and on a 2-vCPU Intel guest both copies move lines from one core's
// cache to the other's: a 1 MiB stream ran at 11-12 GB/s where Open MPI's vader, which reads the
// sender's buffer once with process_vm_readv, ran at 18-19 (docs/io_performance.md, "Lent
// payloads"). A lent record does what vader does: the receiver reads the sender's pooled block
// straight into where the payload lands (the handler's memory: a reassembly block, a user's
// buffer).
//
// - Who lends: a sender whose lend_min allows it, to a receiver that set consumer_pulls. The
//   receiver sets it at start() after it read the sender's token out of the sender's memory, so
//   a receiver that may not read the sender (another user, Yama, a seccomp filter, another pid
//   namespace) is never lent anything.
// - How long: the sender holds the block until the receiver's tail passes the record: the
//   receiver reads before it consumes, and its release store of the tail orders the read first.
//   Closing does not end a loan: a peer that saw our EOF still delivers what we published, lent
//   records included, so a transport closed with loans out shuts down only its write side, and
//   finishes once the peer has consumed them or its end of the socket is gone (begin_close).
// - A read that fails (the peer's pid gone, the permission withdrawn): the receiver clears
//   consumer_pulls and ends the transport; the payload was not delivered, so whatever resends
//   unacked frames (a mesh link) sends it again over the next connection, which lends nothing
//   where the receiver still cannot read.

void shm_transport::offer_to_pull() {
  if (config_.lend_min == 0) return;
  // Ours to say for our direction: we will write the back of a part we lent if offered.
  tx_ctl_->producer_pushes.store(1, std::memory_order_relaxed);
  const process_token_offer& lender = channel_.rx_lender;
  process_token seen;
  const std::error_code e = pull_from_process(lender, lender.token_address,
                                              std::as_writable_bytes(std::span{seen.words}));
  if (e) {
    log::get("io").debug(
        "shm transport: the peer (pid {}) lends us nothing: reading its memory "
        "failed: {}",
        lender.pid, e.message());
    return;
  }
  pulls_offered_ = true;  // ours: the peer could write the shared word itself
  rx_ctl_->consumer_pulls.store(1, std::memory_order_relaxed);
}

namespace {

std::atomic_ref<std::uint64_t> lent_state_of(std::byte* fields) noexcept {
  return std::atomic_ref<std::uint64_t>{*reinterpret_cast<std::uint64_t*>(fields + lent_state_at)};
}

}  // namespace

bool shm_transport::deliver_lent(const wire::frame_header& header,
                                 std::span<const std::byte> inline_part, std::uint64_t address,
                                 std::byte* fields, std::uint64_t record_end) {
  const std::size_t plen = header.payload_len;
  const std::size_t lead = inline_part.size();
  wire::fragment_place place = handler_.payload_destination(header, inline_part);
  if (place.size() != plen) {
    if (pull_scratch_.size() < plen) pull_scratch_.resize(plen);
    place = {{}, std::span{pull_scratch_}.first(plen)};
  }
  // Payload bytes [from, to) into the place: the record's, then the lender's.
  std::error_code error;
  const auto fill = [&](std::size_t from, std::size_t to) {
    std::size_t at = 0;
    for (std::span<std::byte> part : {place.head, place.body}) {
      const std::size_t lo = std::max(from, at), hi = std::min(to, at + part.size());
      at += part.size();
      if (lo >= hi || error) continue;
      std::span<std::byte> into = part.subspan(lo - (at - part.size()), hi - lo);
      std::size_t cursor = lo;
      if (cursor < lead) {
        const std::size_t n = std::min(into.size(), lead - cursor);
        std::memcpy(into.data(), inline_part.data() + cursor, n);
        into = into.subspan(n);
        cursor += n;
      }
      if (!into.empty())
        error = pull_from_process(channel_.rx_lender, address + (cursor - lead), into);
    }
  };
  // The back of the lent part, from a page boundary of where it lands near its middle, is
  // offered to the sender, which writes it into our memory while we read the front: both cores
  // copy at once (docs/io_performance.md, "Lent payloads"). It must land in one range (the body).
  std::size_t split = plen;  // payload offset where the back begins
  const std::size_t body_from = place.head.size();
  const std::size_t middle = lead + (plen - lead) / 2;
  if (plen - lead >= min_split_bytes && middle > body_from &&
      rx_ctl_->producer_pushes.load(std::memory_order_relaxed) != 0) {
    const auto at = reinterpret_cast<std::uintptr_t>(place.body.data()) + (middle - body_from);
    const std::size_t below = at & (page_bytes - 1);
    if (middle - below > std::max(lead, body_from)) {
      split = middle - below;
      store<std::uint64_t>(fields + lent_push_at, at - below);
      store<std::uint64_t>(fields + lent_push_from_at, split - lead);
      lent_state_of(fields).store(offered, std::memory_order_release);
    }
  }
  fill(0, split);
  bool read_back = split < plen;
  if (split < plen) {
    std::uint64_t seen = offered;
    if (!lent_state_of(fields).compare_exchange_strong(seen, taken, std::memory_order_acq_rel)) {
      if (await_push(fields) == pushed) {
        read_back = false;
        ++shm_stats_.payloads_pushed;
      }
    }
  }
  if (read_back) fill(split, plen);
  // Withdrawn meanwhile: the bytes read may be another payload's (release_loans). The system
  // calls that read them order them before this load.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!error && rx_ctl_->loans_withdrawn.load(std::memory_order_acquire) >= record_end) {
    log::get("io").warn("shm transport: the peer withdrew a lent payload before it was read");
    fail(errc::connection_reset);
    return false;
  }
  if (error) {
    log::get("io").warn(
        "shm transport: reading a lent payload of {} bytes from pid {} failed: "
        "{}; the peer lends no more",
        plen - lead, channel_.rx_lender.pid, error.message());
    pulls_offered_ = false;
    rx_ctl_->consumer_pulls.store(0, std::memory_order_relaxed);
    fail(error == make_error_code(errc::not_that_process) ? make_error_code(errc::bad_frame)
                                                          : error);
    return false;
  }
  ++shm_stats_.payloads_pulled;
  handler_.on_frame(header, place.body, buffer_slice{});
  return true;
}

std::uint64_t shm_transport::await_push(std::byte* fields) noexcept {
  // The sender claimed the back and is copying it now, on its core: usually done within the
  // time we took for the front. Spin, then yield (a descheduled sender needs our core), and
  // give up on a peer whose socket end is gone (it died mid-copy).
  auto word = lent_state_of(fields);
  for (std::uint64_t spins = 0;; ++spins) {
    const std::uint64_t seen = word.load(std::memory_order_acquire);
    if (seen == pushed || seen == push_failed) return seen;
    if (spins < 4096) {
      cpu_relax();
      continue;
    }
    if (spins % 1024 == 0) {
      pollfd watch{channel_.socket.get(), POLLRDHUP, 0};
      if (::poll(&watch, 1, 0) > 0 && (watch.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
        return push_failed;  // its read of the back then fails as the peer is gone
      }
    }
    sched_yield();
  }
}

bool shm_transport::push_wanted() const noexcept {
  return !loans_.empty() && !loans_.front().served &&
         lent_state_of(loans_.front().fields).load(std::memory_order_relaxed) == offered;
}

void shm_transport::serve_push() noexcept {
  release_loans(false);
  if (!push_wanted()) return;
  loan& l = loans_.front();
  l.served = true;
  auto word = lent_state_of(l.fields);
  std::uint64_t seen = offered;
  if (!word.compare_exchange_strong(seen, claimed, std::memory_order_acq_rel)) return;
  // The receiver wrote these before offering (release, our acquire above). It is checked like
  // anything read from the peer: a bad offset would have us write from past our own block.
  const auto at = load<std::uint64_t>(l.fields + lent_push_at);
  const auto from = load<std::uint64_t>(l.fields + lent_push_from_at);
  std::error_code e = make_error_code(errc::bad_frame);
  if (from > 0 && from < l.part.size()) {
    e = push_to_process(channel_.rx_lender, at, l.part.subspan(from));
  }
  if (e) {
    // The receiver reads the back itself; offering us more would only cost it the round trip.
    log::get("io").warn(
        "shm transport: writing the back of a lent payload into pid {} failed: "
        "{}; the peer reads every lent payload whole from now on",
        channel_.rx_lender.pid, e.message());
    tx_ctl_->producer_pushes.store(0, std::memory_order_relaxed);
  }
  word.store(e ? push_failed : pushed, std::memory_order_release);
}

bool shm_transport::loan_returned() const noexcept {
  return !loans_.empty() &&
         loans_.front().record_end <= tx_ctl_->tail.load(std::memory_order_relaxed);
}

void shm_transport::release_loans(bool peer_done) noexcept {
  if (loans_.empty()) return;
  if (peer_done) {
    // The peer may not be done after all (a stopped reactor, a broken protocol): before the
    // blocks can hold anything else, it learns that these records are withdrawn, and a read that
    // raced with their reuse is dropped (deliver_lent checks after it read).
    tx_ctl_->loans_withdrawn.store(loans_.back().record_end, std::memory_order_seq_cst);
    loans_.clear();
    lent_bytes_ = 0;
    return;
  }
  // acquire: the peer's reads of a lent block happen-before we let the block go.
  const std::uint64_t tail = tx_ctl_->tail.load(std::memory_order_acquire);
  while (!loans_.empty() && loans_.front().record_end <= tail) {
    lent_bytes_ -= loans_.front().block.size();
    loans_.pop_front();
  }
}

// -- Peer death and closing --------------------------------------------------------------------

void shm_transport::peer_watch_op::complete(int res, std::uint32_t) { owner.on_peer_event(res); }

void shm_transport::on_peer_event(int res) {
  // From here on nothing tells us what the peer does: its socket end is gone (or the reactor
  // stops, or it broke the protocol), so it reads no more of what we lent.
  release_loans(true);
  if (state_ != state::open) {
    if (watchdog_armed_) reactor_.cancel_timer(watchdog_);
    watchdog_armed_ = false;
    maybe_finish();
    return;
  }
  if (res == -ECANCELED) return begin_close(errc::transport_closed);  // the reactor stops
  // Nothing travels on the socket after the hand-over, so readiness means EOF (the peer closed
  // or died: the kernel closes a dead process's descriptors) or a protocol violation.
  std::error_code why;
  if (res < 0) {
    why = error_from_errno(res);
  } else {
    std::byte probe{};
    const ssize_t n = ::recv(channel_.socket.get(), &probe, 1, MSG_DONTWAIT);
    if (n > 0) {
      why = errc::bad_frame;
    } else if (n < 0 && errno != ECONNRESET && errno != EPIPE) {
      why = error_from_errno(-errno);
    } else {
      // Deliver what the peer published before it went; then say how it went.
      in_receive_ = true;
      while (state_ == state::open && drain(drain_batch) == drain_batch) {
      }
      in_receive_ = false;
      why = rx_ctl_->producer_closed.load(std::memory_order_acquire) != 0
                ? make_error_code(errc::connection_closed)
                : make_error_code(errc::connection_reset);
    }
  }
  if (state_ == state::open) begin_close(why);
}

void shm_transport::fail(std::error_code why) {
  if (state_ == state::open) {
    log::get("io").warn("shm transport closing: {}", why.message());
    begin_close(why);
  }
}

void shm_transport::close() noexcept {
  if (state_ == state::idle) {
    state_ = state::closing;
    close_reason_ = errc::transport_closed;
    maybe_finish();
    return;
  }
  if (state_ == state::open) begin_close(errc::transport_closed);
}

void shm_transport::begin_close(std::error_code why) {
  state_ = state::closing;
  reactor_.remove_poller(*this);
  close_reason_ = why;
  // Tell the peer it was an orderly end before it sees EOF; shutdown() makes the EOF immediate
  // even where another process still holds a copy of our socket (fork).
  tx_ctl_->producer_closed.store(1, std::memory_order_release);
  if (watchdog_armed_) reactor_.cancel_timer(watchdog_);
  watchdog_armed_ = false;
  reactor_.cancel(wake_op_);
  release_loans(false);
  if (loans_.empty() || !peer_op_.in_flight()) {
    release_loans(true);
    ::shutdown(channel_.socket.get(), SHUT_RDWR);
    reactor_.cancel(peer_op_);
  } else {
    // The peer may still read what we lent (it delivers what we published once it sees our
    // EOF): only our write side closes, and the peer's own shutdown, or its tail passing the
    // last loan (the watchdog looks), ends the wait.
    ::shutdown(channel_.socket.get(), SHUT_WR);
    arm_watchdog();
  }
  maybe_finish();
}

void shm_transport::maybe_finish() {
  if (state_ != state::closing || wake_op_.in_flight() || peer_op_.in_flight() ||
      continuation_pending_ || !loans_.empty() || watchdog_armed_) {
    return;
  }
  state_ = state::closed;
  handler_.on_closed(close_reason_);
}

}  // namespace vessel::io
