#include "io/reactor.hpp"

#include <cassert>
#include <cerrno>
#include <system_error>

#include <linux/futex.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <thread>
#include <utility>

#include "io/log.hpp"
#include "io/tsan_annotations.hpp"

namespace vessel::io {
namespace {

// state_ layout: bit 0 = the reactor sleeps (or is about to); bits 1.. = items posted so far.
constexpr std::uint64_t sleeping_bit = 1;
constexpr std::uint64_t one_item = 2;
constexpr std::uint64_t count_mask = ~std::uint64_t{0} >> 1;

// While stopping, how often to repeat the cancel for ops that were completing when it came.
constexpr auto cancel_retry = std::chrono::milliseconds{100};
constexpr auto forever = std::chrono::nanoseconds::max();

// A completion to reap: a CQE, or deferred task work or an overflow that reap()'s peek turns into
// CQEs (IORING_SQ_TASKRUN, IORING_SQ_CQ_OVERFLOW), all seen without entering the kernel.
bool completions_waiting(const io_uring& ring) noexcept {
  return io_uring_cq_ready(&ring) != 0 ||
         (IO_URING_READ_ONCE(*ring.sq.kflags) & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) != 0;
}

// Busy-poll: this many fruitless spins in a row switch spinning off (Aeron's BackoffIdleStrategy
// idea: spin while work keeps coming, park when it stops).
constexpr unsigned fruitless_spin_limit = 4;

void do_nothing(void*) noexcept {}

void futex_wait_for(std::atomic<std::uint32_t>* word, std::uint32_t seen,
                    std::chrono::nanoseconds timeout) noexcept {
  timespec ts{static_cast<time_t>(timeout.count() / 1'000'000'000),
              static_cast<long>(timeout.count() % 1'000'000'000)};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, seen, &ts,
            nullptr, 0);
}

void futex_wake_all(std::atomic<std::uint32_t>* word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
            nullptr, 0);
}

void run_function(void* ctx) noexcept {
  auto* fn = static_cast<std::function<void()>*>(ctx);
  (*fn)();
  delete fn;
}

}  // namespace

std::string reactor_config::to_string() const {
  return "queue_depth=" + std::to_string(queue_depth) + " own_thread=" + (own_thread ? "1" : "0") +
         " post_capacity=" + std::to_string(post_capacity) +
         " zero_copy_threshold=" + std::to_string(zero_copy_threshold) +
         " busy_poll_ns=" + std::to_string(busy_poll.count()) +
         " yield_while_polling=" + (yield_while_polling ? "1" : "0") +
         " lendable=" + (lendable ? "1" : "0") +
         " lend_linger_us=" + std::to_string(lend_linger.count()) + " allowed={" + allowed.to_string() +
         "}";
}

reactor::reactor(reactor_config config) : config_(std::move(config)), queue_(config_.post_capacity) {
  // Created here, not in start(), so that producers read an fd that never changes; closed only in
  // the destructor, when no producer can be inside post() any more.
  event_fd_ = ::eventfd(0, EFD_CLOEXEC);  // blocking: io_uring would fail a non-blocking READ with EAGAIN
  if (event_fd_ < 0) throw std::system_error(errno, std::system_category(), "eventfd");
}

reactor::~reactor() {
  stop();
  if (!config_.own_thread) {
    // Driven mode without a run() to the end: finish here (this must be the driving thread).
    while (ring_open_ && !finished_.load(std::memory_order_acquire)) turn(cancel_retry);
  }
  // Items whose post raced with the end of stop(): every accepted item runs exactly once.
  work_item item{};
  while (queue_.pop(item)) item.fn(item.ctx);
  for (auto& local : local_) local.fn(local.ctx);
  ::close(event_fd_);
}

result<void> reactor::start() {
  if (!config_.own_thread) {
    owner_.store(std::this_thread::get_id(), std::memory_order_release);
    return open_ring();
  }
  std::promise<std::error_code> ready;
  auto opened = ready.get_future();
  thread_ = std::thread([this, &ready] { thread_main(&ready); });
  if (auto ec = opened.get()) {
    thread_.join();
    return ec;
  }
  return outcome::success();
}

void reactor::thread_main(std::promise<std::error_code>* ready) {
  owner_.store(std::this_thread::get_id(), std::memory_order_release);
  auto opened = open_ring();  // in this thread: SINGLE_ISSUER binds the ring to its first submitter
  ready->set_value(opened ? std::error_code{} : opened.error());
  if (opened) {
    if (config_.lendable) {
      lent_loop();
    } else {
      while (!finished_.load(std::memory_order_relaxed)) turn(forever);
    }
  }
  owner_.store(std::thread::id{}, std::memory_order_release);
}

namespace {
// liburing 2.3 maps and unmaps a ring with raw syscalls, which TSan does not intercept, so a ring
// mapped where a closed one was keeps the closed ring's access history, and its first SQE writes
// look like races with a thread that is long gone. The kernel orders an unmap before a later map
// of the same pages; a release before every queue_exit and an acquire after every queue_init
// tell TSan so. Test: reactor_stop.a_ring_mapped_where_a_closed_one_was_is_new_memory.
char ring_mappings;
}  // namespace

result<void> reactor::open_ring() {
  // DEFER_TASKRUN: a completion's task work (for a socket recv: the recv itself) runs when the
  // reactor thread asks for events, inside its own wait, instead of interrupting it through
  // task_work wherever it happens to be. It requires SINGLE_ISSUER, which this reactor honours
  // (the ring is created and entered by the reactor thread only). TASKRUN_FLAG makes the kernel
  // flag pending work in the SQ ring, which the busy-poll and liburing's peek (a GETEVENTS enter
  // when set) rely on: without it deferred completions would wait for the next blocking wait.
  // Measured (vessel-bench transport tcp, 8 B ping-pong, medians of 5 interleaved invocations on
  // a 2-core VM under load 10-13 from other builds): advantage over the blocking socket 0.77 with
  // it, 0.74 without, 0.70 before this change: inside the noise of that machine, not a proven
  // gain. Kept: it removes task_work interrupts of the reactor (the recv runs inside its wait)
  // and is what the io_uring authors recommend for a single-threaded ring.
  // A lendable ring is entered by borrowers too (no SINGLE_ISSUER, hence no DEFER_TASKRUN), and
  // the task work of ops the reactor thread armed must wake it while it is parked on a futex
  // (COOP_TASKRUN would leave that work, and the completion a borrower polls for, pending).
  const bool single = config_.allowed.single_issuer && !config_.lendable;
  unsigned flags = IORING_SETUP_TASKRUN_FLAG;
  if (single) flags |= IORING_SETUP_SINGLE_ISSUER;
  if (config_.allowed.coop_taskrun && !config_.lendable) flags |= IORING_SETUP_COOP_TASKRUN;
  if (single && config_.allowed.defer_taskrun) {
    flags |= IORING_SETUP_DEFER_TASKRUN;
  }
  // TASKRUN_FLAG is refused without one of the two.
  if ((flags & (IORING_SETUP_COOP_TASKRUN | IORING_SETUP_DEFER_TASKRUN)) == 0) {
    flags &= ~IORING_SETUP_TASKRUN_FLAG;
  }
  int rc = 0;
  for (;;) {
    io_uring_params params{};
    params.flags = flags;
    rc = io_uring_queue_init_params(config_.queue_depth, &ring_, &params);
    if (rc != -EINVAL || flags == 0) break;
    // An older kernel rejects unknown setup flags: drop the newest first (DEFER_TASKRUN 6.1,
    // SINGLE_ISSUER 6.0), then the rest.
    if ((flags & IORING_SETUP_DEFER_TASKRUN) != 0) {
      flags &= ~IORING_SETUP_DEFER_TASKRUN;
      if ((flags & IORING_SETUP_COOP_TASKRUN) == 0) flags &= ~IORING_SETUP_TASKRUN_FLAG;
    } else {
      flags = (flags & IORING_SETUP_SINGLE_ISSUER) != 0 ? flags & ~IORING_SETUP_SINGLE_ISSUER : 0;
    }
  }
  if (rc < 0) return std::error_code{-rc, std::system_category()};
  tsan_acquire(&ring_mappings);
  ring_open_ = true;
  // Each io_uring_enter then skips the fd table lookup (fdget/fdput); failure only costs that.
  // Not for a lendable ring: a registered ring fd is valid in the registering thread only, and
  // a borrower that must enter the ring (a full SQ, get_sqe) would fail with EINVAL.
  if (!config_.lendable) (void)io_uring_register_ring_fd(&ring_);
  spin_ = config_.busy_poll > std::chrono::nanoseconds::zero();
  features_ = probe_features(ring_) & config_.allowed;
  // liburing picks the timeout path from ring.features; hiding the bit forces the TIMEOUT-SQE path.
  if (!features_.ext_arg) ring_.features &= ~IORING_FEAT_EXT_ARG;

  static std::once_flag logged;
  bool first = false;
  std::call_once(logged, [&first] { first = true; });
  log::get("io").log(first ? spdlog::level::info : spdlog::level::debug, "io_uring reactor: {}",
                     features_.to_string());
  arm_wake();
  return outcome::success();
}

// -- Cross-thread hand-off ---------------------------------------------------------------------
//
// A wake-up must never be lost, yet a producer must not write the eventfd while the reactor is
// awake (each write costs a syscall plus a CQE; DEPENDENCIES.md §2 measured 84k vs 330k+ msg/s).
// All decisions go through RMWs on the one word state_, so they are totally ordered (its
// modification order) with no fence and no reasoning about two locations:
//   producer: push(item); prev = state_.fetch_add(one_item). If prev had sleeping_bit, clear it
//             with fetch_and; the producer whose fetch_and still saw the bit writes the eventfd.
//   reactor:  prev = state_.fetch_or(sleeping_bit); if prev's count differs from the items it has
//             consumed, something is (about to be) queued: clear the bit and do not block.
// Either a producer's fetch_add comes before the reactor's fetch_or, and the reactor sees the count
// and stays awake; or it comes after, sees the bit, and one producer writes the eventfd, whose READ
// is always armed, so the blocked wait returns. The push happens-before the fetch_add that counts
// it, which the reactor's fetch_or reads (acq_rel), so a counted item is visible to pop().
// Extra eventfd writes (a producer that won the bit just as the reactor woke anyway) only cause one
// spurious turn.

bool reactor::post(work_item item) noexcept {
  if (stop_requested_.load(std::memory_order_acquire)) return false;
  if (is_reactor_thread()) {
    local_.push_back(item);  // TODO(perf): may allocate when it grows; cold in practice
    return true;
  }
  while (!queue_.bounded_push(item)) {
    // Full: back-pressure. The reactor is awake (the queued items were counted and woke it).
    if (stop_requested_.load(std::memory_order_acquire)) return false;
    std::this_thread::yield();
  }
  const auto prev = state_.fetch_add(one_item, std::memory_order_acq_rel);
  if ((prev & sleeping_bit) != 0 &&
      (state_.fetch_and(~sleeping_bit, std::memory_order_acq_rel) & sleeping_bit) != 0) {
    wake();
  }
  return true;
}

bool reactor::post(std::function<void()> fn) {
  auto* boxed = new std::function<void()>(std::move(fn));
  if (post(work_item{&run_function, boxed})) return true;
  delete boxed;
  return false;
}

bool reactor::dispatch(std::function<void()> fn) {
  if (is_reactor_thread() && !stop_requested_.load(std::memory_order_acquire)) {
    fn();
    return true;
  }
  return post(std::move(fn));
}

bool reactor::set_busy_poll(std::chrono::nanoseconds window, bool yield_while_polling) {
  return dispatch([this, window, yield_while_polling] {
    config_.busy_poll = window;
    config_.yield_while_polling = yield_while_polling;
    spin_ = window > std::chrono::nanoseconds::zero();
    fruitless_spins_ = 0;
  });
}

bool reactor::is_reactor_thread() const noexcept {
  return owner_.load(std::memory_order_acquire) == std::this_thread::get_id();
}

void reactor::wake() noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(event_fd_, &one, sizeof one);  // cannot block: counter < 2^64-1
}

void reactor::wake_op::complete(int res, std::uint32_t) {
  if (res == -ECANCELED || owner.stopping_) return;  // stop cancelled it; nothing more to wake
  owner.arm_wake();  // the queue itself is drained at the top of every turn
}

void reactor::arm_wake() {
  auto* sqe = prepare(wake_op_);
  io_uring_prep_read(sqe, event_fd_, &wake_op_.value, sizeof wake_op_.value, 0);
}

std::size_t reactor::run_posted() {
  std::size_t ran = 0;
  // The count in state_ says whether anything was posted: one load of a word this thread keeps
  // in cache, where an empty pop reads the queue's head, tail and node (cold after the context
  // switch that precedes most turns). An item pushed but not yet counted waits for the next turn;
  // its producer's fetch_add keeps the reactor from sleeping (see post()).
  if (((state_.load(std::memory_order_acquire) >> 1) & count_mask) != (consumed_ & count_mask)) {
    work_item item{};
    // Bounded so that a flood of posts cannot starve completions; the rest keeps the reactor
    // awake because the count in state_ stays ahead of consumed_.
    while (ran < config_.post_capacity && queue_.pop(item)) {
      ++consumed_;
      ++ran;
      item.fn(item.ctx);
    }
  }
  if (!local_.empty()) {
    // What runs here mostly posts again (a resident actor's next hop, a transport's continuation),
    // so local_ is rarely empty after the batch: two buffers trade places, and once both have grown
    // no turn allocates (one that took local_'s capacity with it cost a malloc and a free a turn).
    auto batch = std::exchange(local_, std::move(spare_));
    for (auto& local : batch) local.fn(local.ctx);
    ran += batch.size();
    batch.clear();
    spare_ = std::move(batch);
  }
  return ran;
}

// -- The loop ----------------------------------------------------------------------------------

void reactor::run() {
  while (!finished_.load(std::memory_order_acquire)) turn(forever);
}

bool reactor::run_once(std::chrono::nanoseconds max_wait) {
  if (finished_.load(std::memory_order_acquire)) return false;
  turn(max_wait);
  return !finished_.load(std::memory_order_acquire);
}

void reactor::turn(std::chrono::nanoseconds max_wait) {
  completed_ = false;
  ++turns_;
  run_posted();
  // A message to an actor resident here is a chain of posts (the transport's drain posts the
  // batch's flush, the rank actor's take posts the app's handler), each of which used to wait for
  // the next turn: its timer check, its submit and its reap sat on the message's critical path
  // twice. What the items posted for themselves runs now, a few passes at most and only while no
  // completion waits, so that neither I/O nor timers wait behind a chain.
  for (unsigned pass = 1;
       pass < max_posted_passes && !local_.empty() && !completions_waiting(ring_); ++pass) {
    run_posted();
  }
  if (!refused_.empty()) {
    std::vector<io_op*> batch;
    batch.swap(refused_);
    for (auto* op : batch) op->complete(-ECANCELED, 0);
  }
  if (!stopping_ && timers_.size() != 0 && timers_may_be_due()) timers_.run_due(clock::now());
  // Stopping (cancelling everything, closing the ring) is the reactor thread's: a borrower gives
  // the loop back as soon as it sees stop_requested().
  if (!stopping_ && !lent_ && stop_requested_.load(std::memory_order_acquire)) begin_stopping();
  if (stopping_) {
    if (in_flight_ == 0 && refused_.empty() && local_.empty()) {
      if (run_posted() == 0 && refused_.empty() && in_flight_ == 0) {
        close_ring();
        finished_.store(true, std::memory_order_release);
      }
      return;
    }
    if (clock::now() - last_cancel_ >= cancel_retry) cancel_all();
    max_wait = std::min<std::chrono::nanoseconds>(max_wait, cancel_retry);
  } else if (timers_.size() == 0 || max_wait <= std::chrono::nanoseconds::zero() ||
             !local_.empty() || !refused_.empty()) {
    // nothing bounds the wait, or there is none (work queued here: this turn does not wait, and
    // a resident actor's hop is a turn, so a second clock read would be on its path)
  } else if (auto deadline = timers_.next_deadline()) {
    const auto until = *deadline - clock::now();
    max_wait = std::min<std::chrono::nanoseconds>(max_wait, std::max(until, clock::duration::zero()));
  }

  // A borrower's request (lend_requests_) arrives with a post; when this turn already ran that
  // post, the request must still keep us awake, or the borrower waits for our next wake-up.
  bool sleep = local_.empty() && refused_.empty() && max_wait > std::chrono::nanoseconds::zero() &&
               lend_requests_.load(std::memory_order_acquire) == 0;
  if (sleep && spin_ && !stopping_ && max_wait >= config_.busy_poll) {
    io_uring_submit(&ring_);  // what this turn armed goes out before we watch for its answers
    if (spin_for_work(config_.busy_poll)) sleep = false;
  } else if (spin_polling_ && !sleep && (++busy_turns_ % spin_poll_turns) == 0) {
    spin_poll_pollers();  // turns busy with posted work do not starve the sockets
  }
  if (sleep && spin_polling_) {
    end_spin_polling();
    sleep = local_.empty();  // what the pollers' last reads posted runs first
  }
  if (sleep) {
    const auto prev = state_.fetch_or(sleeping_bit, std::memory_order_acq_rel);
    if (((prev >> 1) & count_mask) != (consumed_ & count_mask)) {
      state_.fetch_and(~sleeping_bit, std::memory_order_acq_rel);
      sleep = false;
    }
  }
  if (sleep) {
    wait(max_wait);
    waited_ = true;
    state_.fetch_and(~sleeping_bit, std::memory_order_acq_rel);
  } else if (!lent_ && (local_.empty() || ++submits_held_ >= max_submits_held)) {
    // A borrower prepares SQEs but leaves submitting to the reactor thread, which takes the loop
    // back within lend_linger: an op belongs to the thread that submitted it, and a blocking one
    // (the eventfd and timerfd READs run in that thread's io-wq) is cancelled when the thread
    // exits, which a caller's thread may do at any time. What a borrower needs at once, it
    // polls (loop_poller: shm rings, TCP sockets).
    // With work posted for the next turn (a resident actor's next hop) the SQEs wait for it, a
    // few at most: an enter costs ~1 µs on a PVM guest, and the recv re-armed after a reply
    // would otherwise be submitted between the reply's arrival and the actor that answers it.
    submits_held_ = 0;
    io_uring_submit(&ring_);
  }
  reap();
  if (lent_) run_pollers();
}

// A steady_clock read costs ~29 ns here and a resident actor's message takes several turns, while
// the timers are watchdogs, heartbeats and retries, due in milliseconds. A turn whose earliest
// deadline is further off than the coarse clock can trail (1-5 ms measured) reads no clock; near
// it, steady_clock decides on the first turn after a wait (which may have ended at that deadline)
// and on every 8th busy turn, so a timer runs at most 7 turns late. A borrower spins through
// turns (a caller of vessel::comm waiting for its message): it looks at all only on every 64th,
// since even the coarse look cost its 8-byte ping-pong 5% when it looked on every turn.
bool reactor::timers_may_be_due() noexcept {
  if (lent_ && (++lent_turns_ & 63) != 0) return false;
  const auto next = timers_.no_deadline_before();
  if (!next || !coarse_clock_.may_have_passed(*next)) return false;
  return lent_ || std::exchange(waited_, false) || (++near_turns_ & 7) == 0;
}

// While the reactor spin-polls, no poll is armed on its sockets and no completion tells of their
// input: a spinner elsewhere on this thread (an shm transport waiting for its ring) would keep a
// TCP frame waiting until its own budget ran out (shm_config::max_spin, 40 µs), in a rank with
// links of both kinds. So the look reads the pollers itself, every 32nd time: a read that finds
// nothing is a system call, and the shm spin looks between every two pauses.
bool reactor::work_waiting() noexcept {
  if (completions_waiting(ring_) || !local_.empty() ||
      ((state_.load(std::memory_order_acquire) >> 1) & count_mask) != (consumed_ & count_mask)) {
    return true;
  }
  return spin_polling_ && !lent_ && (++waiting_looks_ & 31) == 0 && spin_poll_pollers();
}

// Busy-poll is off by default (reactor_config::busy_poll = 0). Measured on the 2-core VMs with
// vessel-bench transport tcp (8 B ping-pong, both ends spinning): 20 us window, half round trip
// 53.5 us against 12.1 us without (advantage 0.22 vs 0.71); 50 us window, 115 us (0.10). A
// spinning end takes the core its peer needs to produce the reply; it can only pay where each
// end has a core of its own.
//
// Watches for work without entering the kernel: a CQE, deferred task work the kernel flagged
// (IORING_SQ_TASKRUN: reap()'s peek runs it), or a post. True if something came within `budget`.
//
// The pollers (TCP sockets read by readiness) are read by the spin itself: a socket's readiness
// through io_uring costs its receiver an io_uring_enter to run the poll's task work before the
// recv, and its sender the poll's wake-up, on every message (hosted actor 8-byte ping-pong over
// TCP: 6.0-7.0 µs a round trip, against 4.0-4.4 for vessel::comm's caller, which reads the socket).
bool reactor::spin_for_work(std::chrono::nanoseconds budget) {
  const auto deadline = clock::now() + budget;
  const bool read_pollers = !config_.lendable && !pollers_.empty();
  spin_polling_ = spin_polling_ || read_pollers;
  for (unsigned i = 0;; ++i) {
    if (completions_waiting(ring_) ||
        ((state_.load(std::memory_order_acquire) >> 1) & count_mask) != (consumed_ & count_mask) ||
        (read_pollers && spin_poll_pollers())) {
      fruitless_spins_ = 0;
      return true;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();  // yields the core's pipeline to a hyper-thread sibling
#endif
    if ((i & 15) == 15) {
      if (config_.yield_while_polling) sched_yield();
      if (clock::now() >= deadline) break;
    }
  }
  if (++fruitless_spins_ >= fruitless_spin_limit) spin_ = false;
  return false;
}

void reactor::wait(std::chrono::nanoseconds max_wait) {
  const bool timed_spin_check = config_.busy_poll > std::chrono::nanoseconds::zero() && !spin_;
  const auto t0 = timed_spin_check ? clock::now() : clock::time_point{};
  io_uring_cqe* cqe = nullptr;
  if (max_wait == forever) {
    io_uring_submit_and_wait(&ring_, 1);
  } else {
    __kernel_timespec ts{};
    ts.tv_sec = max_wait.count() / 1'000'000'000;
    ts.tv_nsec = max_wait.count() % 1'000'000'000;
    io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);  // -ETIME is a normal end
  }
  // Spinning is off: a wait that work (not its timeout) ended so soon that a spin would have
  // caught it turns it back on.
  if (!timed_spin_check) return;
  const bool work = io_uring_cq_ready(&ring_) != 0 ||
                    (IO_URING_READ_ONCE(*ring_.sq.kflags) & IORING_SQ_TASKRUN) != 0;
  if (work && clock::now() - t0 <= config_.busy_poll) {
    spin_ = true;
    fruitless_spins_ = 0;
  }
}

void reactor::reap() {
  constexpr unsigned batch_size = 64;
  struct completion {
    io_op* op;
    int res;
    std::uint32_t flags;
  };
  io_uring_cqe* cqes[batch_size];
  completion batch[batch_size];
  for (;;) {
    const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, batch_size);
    unsigned m = 0;
    for (unsigned i = 0; i < n; ++i) {
      const auto data = cqes[i]->user_data;
      // 0: a cancel SQE of ours. LIBURING_UDATA_TIMEOUT: liburing's wait timeout without EXT_ARG.
      if (data == 0 || data == LIBURING_UDATA_TIMEOUT) continue;
      batch[m++] = {reinterpret_cast<io_op*>(data), cqes[i]->res, cqes[i]->flags};
    }
    // Hand the CQ slots back before dispatching: handlers may submit, and a full CQ would stall.
    io_uring_cq_advance(&ring_, n);
    for (unsigned i = 0; i < m; ++i) {
      auto& c = batch[i];
      if ((c.flags & IORING_CQE_F_MORE) == 0) unlink(*c.op);  // first: the handler may re-arm it
      c.op->complete(c.res, c.flags);
    }
    if (n < batch_size) break;
  }
}

// -- Lending the loop -------------------------------------------------------------------------
//
// holder_ names who runs turns: the reactor thread, one borrower, or nobody (the reactor thread is
// parked after lending). Every change of holder goes through it with acquire (take) / release
// (let go), so whatever one holder did to the loop's state happens-before the next one's turns.
// The reactor thread lets go when a borrower asks (lend_requests_, then a post that ends its
// wait), and takes the loop back once no borrower held it for lend_linger.

void reactor::lent_loop() {
  while (!finished_.load(std::memory_order_relaxed)) {
    if (lend_requests_.load(std::memory_order_acquire) != 0 &&
        !stop_requested_.load(std::memory_order_acquire)) {
      park_while_lent();
      continue;
    }
    turn(forever);
  }
}

void reactor::park_while_lent() {
  owner_.store(std::thread::id{}, std::memory_order_release);
  holder_.store(loop_free, std::memory_order_release);
  const auto linger = std::chrono::duration_cast<std::chrono::nanoseconds>(config_.lend_linger);
  // The loop comes back after a whole nap with no give_back(linger) in it: one to two lingers
  // after the last one. Counting returns instead of stamping them keeps the clock (~25 ns a
  // read here) out of give_back, which a caller-driven ping-pong runs on every call.
  std::uint64_t returns_seen = returns_.load(std::memory_order_acquire);
  for (;;) {
    const auto seen = park_word_.load(std::memory_order_acquire);
    std::chrono::nanoseconds nap = linger;
    const std::uint64_t returns = returns_.load(std::memory_order_acquire);
    if (holder_.load(std::memory_order_acquire) == loop_free &&
        lend_requests_.load(std::memory_order_acquire) == 0) {
      if (stop_requested_.load(std::memory_order_acquire) || (returns & return_now_bit) != 0 ||
          returns == returns_seen) {
        std::uint32_t expected = loop_free;
        if (holder_.compare_exchange_strong(expected, loop_reactor, std::memory_order_acquire)) {
          break;
        }
        continue;  // a borrower just took it
      }
    } else if (stop_requested_.load(std::memory_order_acquire)) {
      nap = std::chrono::microseconds{100};  // the borrower gives back as soon as it notices
    }
    returns_seen = returns;
    futex_wait_for(&park_word_, seen, nap);
  }
  owner_.store(std::this_thread::get_id(), std::memory_order_release);
  // Back on the reactor thread: pollers return to their sleep protocols (an shm receiver arms
  // its "sleeping" flag again) before this thread blocks in the kernel.
  run_pollers();
}

bool reactor::borrow() noexcept { return take_loop(true); }

bool reactor::try_borrow() noexcept { return take_loop(false); }

bool reactor::take_loop(bool ask_reactor_thread) noexcept {
  if (!config_.lendable || !config_.own_thread || is_reactor_thread() ||
      !lending_allowed_.load(std::memory_order_acquire)) {
    return false;
  }
  if (stop_requested_.load(std::memory_order_acquire)) return false;
  std::uint32_t expected = loop_free;
  if (!holder_.compare_exchange_strong(expected, loop_borrower, std::memory_order_acquire)) {
    if (expected == loop_borrower) return false;  // another caller drives: it completes ours too
    if (!ask_reactor_thread) return false;
    // The reactor thread holds the loop: ask, and end its wait with a post (whose protocol
    // never loses a wake-up), then wait for it to let go.
    lend_requests_.fetch_add(1, std::memory_order_acq_rel);
    if (!post(work_item{&do_nothing, nullptr})) {
      lend_requests_.fetch_sub(1, std::memory_order_acq_rel);
      return false;
    }
    for (unsigned i = 0;; ++i) {
      expected = loop_free;
      if (holder_.compare_exchange_weak(expected, loop_borrower, std::memory_order_acquire)) break;
      if (expected == loop_borrower || stop_requested_.load(std::memory_order_acquire)) {
        lend_requests_.fetch_sub(1, std::memory_order_acq_rel);
        return false;
      }
      if ((i & 63) == 63) {
        std::this_thread::yield();
      } else {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
    }
    lend_requests_.fetch_sub(1, std::memory_order_acq_rel);
  }
  owner_.store(std::this_thread::get_id(), std::memory_order_release);
  lent_ = true;
  return true;
}

void reactor::borrowed_turn() {
  assert(lent_ && is_reactor_thread());
  turn(std::chrono::nanoseconds::zero());
}

void reactor::give_back(bool linger) noexcept {
  assert(lent_ && is_reactor_thread());
  lent_ = false;
  owner_.store(std::thread::id{}, std::memory_order_release);
  // Only the loop's holder writes returns_ (no read-modify-write needed): holders follow one
  // another through holder_.
  const std::uint64_t returns = returns_.load(std::memory_order_relaxed);
  returns_.store(linger ? (returns | return_now_bit) + 1 : returns | return_now_bit,
                 std::memory_order_release);
  holder_.store(loop_free, std::memory_order_release);
  if (!linger) {
    park_word_.fetch_add(1, std::memory_order_release);
    futex_wake_all(&park_word_);
  }
}

void reactor::add_poller(loop_poller& p) {
  pollers_.push_back(&p);
  if (p.readiness_fd() >= 0) readiness_pollers_.push_back(&p);
}

void reactor::remove_poller(loop_poller& p) noexcept {
  pollers_.erase(std::remove(pollers_.begin(), pollers_.end(), &p), pollers_.end());
  readiness_pollers_.erase(std::remove(readiness_pollers_.begin(), readiness_pollers_.end(), &p),
                           readiness_pollers_.end());
}

void reactor::run_pollers() noexcept {
  // With one descriptor or none, each poller's own read is the cheapest look.
  if (lent_ && readiness_pollers_.size() >= 2) return run_pollers_by_readiness();
  // By index: a poller's work may add or remove pollers (a transport that closes).
  for (std::size_t i = 0; i < pollers_.size(); ++i) pollers_[i]->poll();
}

void reactor::run_pollers_by_readiness() noexcept {
  readiness_.clear();
  for (const loop_poller* p : readiness_pollers_) {
    if (const int fd = p->readiness_fd(); fd >= 0) readiness_.push_back({fd, POLLIN, 0});
  }
  ++readiness_checks_;
  if (::poll(readiness_.data(), readiness_.size(), 0) < 0) readiness_.clear();  // EINTR: read all
  // A poller added meanwhile, or one whose descriptor is not in the list, reads as before.
  for (std::size_t i = 0; i < pollers_.size(); ++i) {
    loop_poller& p = *pollers_[i];
    const int fd = p.readiness_fd();
    const auto asked = std::find_if(readiness_.begin(), readiness_.end(),
                                    [fd](const pollfd& e) { return e.fd == fd; });
    if (fd >= 0 && asked != readiness_.end() && asked->revents == 0) {
      p.poll_without_input();
    } else {
      p.poll();
    }
  }
}

bool reactor::spin_poll_pollers() noexcept {
  bool found = false;
  for (std::size_t i = 0; i < pollers_.size(); ++i) found = pollers_[i]->spin_poll() || found;
  return found;
}

void reactor::end_spin_polling() noexcept {
  spin_polling_ = false;
  for (std::size_t i = 0; i < pollers_.size(); ++i) pollers_[i]->spin_poll_ended();
}

// -- Shutdown ----------------------------------------------------------------------------------

void reactor::stop() noexcept {
  stop_requested_.store(true, std::memory_order_release);
  wake();  // unconditional: the reactor may sleep with no producer around to see its bit
  if (config_.lendable) {
    park_word_.fetch_add(1, std::memory_order_release);
    futex_wake_all(&park_word_);
  }
  if (config_.own_thread && !is_reactor_thread()) {
    std::lock_guard lock{join_mutex_};  // two threads may stop at once; only one may join
    if (thread_.joinable()) thread_.join();
  }
}

void reactor::begin_stopping() {
  stopping_ = true;
  timers_.clear();
  cancel_all();
}

void reactor::cancel_all() {
  last_cancel_ = clock::now();
  if (features_.cancel_any) {
    auto* sqe = get_sqe();
    io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
    io_uring_sqe_set_data64(sqe, 0);
    return;
  }
  for (io_op* op = head_; op != nullptr; op = op->next_) {
    auto* sqe = get_sqe();
    io_uring_prep_cancel(sqe, op, 0);
    io_uring_sqe_set_data64(sqe, 0);
  }
}

void reactor::close_ring() noexcept {
  if (!ring_open_) return;
  tsan_release(&ring_mappings);
  io_uring_queue_exit(&ring_);
  ring_open_ = false;
}

// -- Op bookkeeping ----------------------------------------------------------------------------

io_uring_sqe* reactor::get_sqe() {
  for (;;) {
    if (auto* sqe = io_uring_get_sqe(&ring_)) return sqe;
    // SQ full: hand the batch to the kernel now, then there is room again.
    const int rc = io_uring_submit(&ring_);
    if (rc < 0 && rc != -EBUSY && rc != -EAGAIN && rc != -EINTR) {
      throw std::system_error(-rc, std::system_category(), "io_uring_submit");
    }
  }
}

io_uring_sqe* reactor::prepare(io_op& op) {
  assert(!op.in_flight_ && "an io_op has at most one SQE in flight");
  auto* sqe = get_sqe();
  io_uring_sqe_set_data(sqe, &op);
  op.in_flight_ = true;
  op.prev_ = nullptr;
  op.next_ = head_;
  if (head_ != nullptr) head_->prev_ = &op;
  head_ = &op;
  ++in_flight_;
  return sqe;
}

void reactor::unlink(io_op& op) noexcept {
  if (!op.in_flight_) return;
  op.in_flight_ = false;
  if (op.prev_ != nullptr) op.prev_->next_ = op.next_; else head_ = op.next_;
  if (op.next_ != nullptr) op.next_->prev_ = op.prev_;
  op.prev_ = op.next_ = nullptr;
  --in_flight_;
}

bool reactor::refuse_if_stopping(io_op& op) {
  if (!stopping_) return false;
  refused_.push_back(&op);
  return true;
}

// -- Timers ------------------------------------------------------------------------------------

timer_id reactor::add_timer(clock::duration delay, std::function<void()> fn) {
  return timers_.add(clock::now() + delay, std::move(fn));
}

bool reactor::cancel_timer(timer_id id) noexcept { return timers_.cancel(id); }

}  // namespace vessel::io

#if defined(__SANITIZE_THREAD__)
// Boost.Lockfree 1.74's queue validates racy plain reads of its freelist's tagged pointers with a
// later CAS (the classic ABA-tagged Michael-Scott design); TSan reports those reads as races
// although a stale value is always discarded. Suppressed only inside boost::lockfree frames, so a
// race in vessel's own code is still reported. TODO(tsan): a TSan-clean MPSC queue would drop this.
extern "C" const char* __tsan_default_suppressions() {  // NOLINT: name fixed by the TSan runtime
  return "race:boost::lockfree::\n";
}
#endif
