#pragma once
// One io_uring per reactor thread. Other threads hand it work through a lock-free queue plus an
// eventfd whose READ is always armed on the ring; the reactor submits SQEs in batches and dispatches
// each completion to the io_op that owns it. Transports (TCP, shm, serial, RDMA) are built on this.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <liburing.h>
#include <poll.h>
#include <sys/socket.h>

#include <boost/lockfree/queue.hpp>

#include "io/coarse_clock.hpp"
#include "io/io_op.hpp"
#include "io/timer_queue.hpp"
#include "io/uring_features.hpp"
#include "wire/result.hpp"

namespace vessel::io {

class buffer_ring;

/// How a reactor is built. Every key with its default, printable with to_string().
struct reactor_config {
  unsigned queue_depth = 256;          ///< SQ entries (the CQ gets twice as many).
  bool own_thread = true;              ///< true: start() spawns the reactor thread. false: the thread
                                       ///< that calls start() drives it with run() or run_once().
  std::size_t post_capacity = 16384;   ///< slots of the cross-thread queue; when full, post() yields.
  std::size_t zero_copy_threshold = 16384;  ///< sends of at least this many bytes use SEND_ZC where
                                            ///< allowed: below ~10 KiB pinning pages costs more than
                                            ///< the copy (kernel io_uring zc docs). TODO(perf): measure.
  uring_features allowed = uring_features::all();  ///< clear features to force the fallback paths.
  /// Before blocking, watch the CQ this long for a completion (and the queue for posts), so that
  /// a reply arriving within it is reaped without the sleep/wake-up of the thread. Adaptive: after
  /// a few spins in a row that found nothing the reactor blocks at once, until a blocking wait
  /// again ends within this window; an idle reactor therefore never burns a core. 0: never.
  std::chrono::nanoseconds busy_poll{0};
  /// busy_poll gives the core away (sched_yield) between its checks. For a reactor bound to the
  /// core that its own process's other threads share (a launched node's CAF workers and app):
  /// a thread woken there runs at once instead of waiting for the spin to end, and the core
  /// never idles into a halt that the peer's next frame must wake it from.
  bool yield_while_polling = false;
  /// Other threads may borrow the loop (borrow()/give_back(): "caller-driven progress"). Needs
  /// own_thread; the ring is then set up without SINGLE_ISSUER, DEFER_TASKRUN and COOP_TASKRUN,
  /// since a borrower submits too and the parked reactor thread must still run its task work.
  bool lendable = false;
  /// After a borrower gives the loop back, the reactor thread stays parked this long before it
  /// takes the loop again, so that a caller that comes back within it (the next send of a
  /// ping-pong, the next round of a collective) finds the loop free without a hand-off. Work
  /// that nobody else drives waits at most about twice this.
  std::chrono::microseconds lend_linger{1000};

  std::string to_string() const;
};

/// Whether a send may take the SEND_ZC path. Zero copy pins the pages and costs a second
/// (notification) CQE; it pays only when the NIC reads the pages itself. Over loopback and AF_UNIX
/// the receiving side copies them anyway: measured with vessel-bench transport tcp, 64 MiB stream
/// over 127.0.0.1, 0.15 GB/s with SEND_ZC against 0.34 GB/s without.
enum class zero_copy : std::uint8_t {
  when_large,  ///< SEND_ZC from reactor_config::zero_copy_threshold bytes, where the kernel has it.
  never,       ///< always a copying send (a local peer, or a caller that reuses the buffer at once).
};

/// Work handed to the reactor without allocating: `fn(ctx)` runs once on the reactor thread.
struct work_item {
  void (*fn)(void* ctx) noexcept;
  void* ctx;
};

/// Memory the kernel does not signal (an shm ring), polled on every turn of a borrowed loop, and
/// once when the reactor thread takes the loop back (so that the owner can return to its
/// eventfd sleep protocol). Registered by its owner on the loop's thread.
class loop_poller {
 public:
  virtual void poll() noexcept = 0;
  /// A descriptor whose readability (poll(2)) says whether poll() has input to read, or -1.
  /// Where several pollers have one, a borrowed turn asks the kernel about all of them in one
  /// poll(2) and calls poll_without_input() on those with nothing to read: on a PVM guest a
  /// system call costs ~1.2 µs, and a borrower that waits for one of three sockets would
  /// otherwise spend three recv(2) per turn, most of them EAGAIN.
  virtual int readiness_fd() const noexcept { return -1; }
  /// As poll(), with nothing to read on readiness_fd() at the start of this turn: the rest of a
  /// turn's work (queued sends) still runs.
  virtual void poll_without_input() noexcept { poll(); }
  /// The reactor thread busy-polls (reactor_config::busy_poll) and reads for itself what a poller
  /// can read without the kernel's readiness events (a socket: recv with MSG_DONTWAIT), while
  /// reactor::pollers_read() holds. True when it found something (its handlers ran).
  virtual bool spin_poll() noexcept { return false; }
  /// The reactor thread stops busy-polling (it is about to sleep): arm what tells it of new input.
  virtual void spin_poll_ended() noexcept {}

 protected:
  ~loop_poller() = default;
};

/// An io_uring event loop. Thread-safe: post(), dispatch(), stop(), is_reactor_thread(). Everything
/// else (arming ops, timers) runs on the reactor thread only; use dispatch() from elsewhere.
class reactor {
 public:
  using clock = std::chrono::steady_clock;

  explicit reactor(reactor_config config = {});
  reactor(const reactor&) = delete;
  reactor& operator=(const reactor&) = delete;
  /// Stops (cancelling every op in flight) and joins the reactor thread.
  ~reactor();

  /// Creates the ring (inside the reactor thread when own_thread, as SINGLE_ISSUER requires) and
  /// probes the kernel. Call once.
  result<void> start();

  /// Asks the reactor to stop; idempotent, any thread. The reactor then cancels every op in flight,
  /// waits until each owner has seen its final completion (-ECANCELED), drops pending timers
  /// unrun, closes the eventfd and exits the ring. Called from another thread with own_thread, it
  /// returns after the thread has been joined.
  void stop() noexcept;

  /// Driven mode: runs the loop until stop() has completed. On the thread that called start().
  void run();
  /// Driven mode: one loop turn, waiting at most `max_wait` for a completion. False once stopped.
  bool run_once(std::chrono::nanoseconds max_wait);

  /// A turn runs its posted items, then what they posted on the reactor thread, up to this many
  /// passes in all, stopping early when a completion is waiting (see turn()).
  static constexpr unsigned max_posted_passes = 4;

  /// Queues `item` to run once on the reactor thread; per producer thread in order. No allocation,
  /// and no syscall unless the reactor sleeps. False once stop() has begun: the item will not run.
  /// Items accepted while stop() completes run in the destructor at the latest.
  bool post(work_item item) noexcept;
  /// post() for a callable (allocates: for cold paths).
  bool post(std::function<void()> fn);
  /// Runs `fn` inline when called on the reactor thread, else posts it.
  bool dispatch(std::function<void()> fn);
  /// Any thread: changes reactor_config::busy_poll and yield_while_polling from the next turn
  /// on (a launched node turns polling on once it knows it has a core of its own).
  bool set_busy_poll(std::chrono::nanoseconds window, bool yield_while_polling);

  /// True on the thread that runs the loop (the reactor thread, or a borrower while it holds it).
  bool is_reactor_thread() const noexcept;

  // -- Caller-driven progress (reactor_config::lendable). MPI gets its latency by never handing
  // -- off: a thread that waits for a reply runs the loop itself instead of sleeping until the
  // -- reactor thread wakes it (a hand-off costs 10-56 us here, DESIGN.md "Where the time goes").
  /// Makes the calling thread the loop's owner: is_reactor_thread() holds for it until
  /// give_back(). Takes the loop from the reactor thread if that one holds it (waking it if it
  /// sleeps: the only hand-off, and rare while a caller keeps coming back within lend_linger).
  /// False, at once, when the reactor is not lendable, is stopping, or another borrower holds
  /// the loop (the caller then waits as it would without borrowing).
  bool borrow() noexcept;
  /// borrow() only if nobody holds the loop now (the reactor thread parked after a lend, no
  /// other borrower): never asks the reactor thread to let go, never waits. For work that is
  /// cheaper run at once than handed over (runtime::submit), and that can be handed over instead.
  bool try_borrow() noexcept;
  /// One turn of a borrowed loop without blocking: posted work, due timers, completions,
  /// pollers. SQEs prepared meanwhile go out when the reactor thread takes the loop back.
  /// Borrower only.
  void borrowed_turn();
  /// Ends a borrow. `linger`: the reactor thread stays parked for lend_linger (the caller will
  /// likely be back soon); false: it takes the loop at once (the caller is about to sleep).
  void give_back(bool linger = true) noexcept;
  /// Turns lending on or off (any thread; lendable reactors only). A borrower submits nothing
  /// (the reactor thread does, when it takes the loop back), so a transport it cannot poll
  /// (not a loop_poller) gains nothing from it.
  void allow_lending(bool on) noexcept { lending_allowed_.store(on, std::memory_order_release); }
  bool lending_allowed() const noexcept {
    return config_.lendable && lending_allowed_.load(std::memory_order_acquire);
  }
  /// True while a borrower drives the loop (loop owner only).
  bool lent() const noexcept { return lent_; }
  /// True while the loop's owner reads its pollers itself on every turn or spin (a borrower, or
  /// the reactor thread while it busy-polls): a poller need not arm a readiness op meanwhile
  /// (loop owner only).
  bool pollers_read() const noexcept { return lent_ || spin_polling_; }
  /// Frames that arrived, as counted by the transports' users (note_arrival(); loop owner only):
  /// a borrower that sees it move keeps driving, since a message is coming in.
  void note_arrival() noexcept { ++arrivals_; }
  std::uint64_t arrivals() const noexcept { return arrivals_; }
  /// A request completed this turn (loop owner only): a poller that drains a busy link for a
  /// borrower stops after the current frame, so the borrower sees its request done at once
  /// instead of after everything the peer sent meanwhile. Cleared when the next turn begins.
  void note_completion() noexcept { completed_ = true; }
  bool completion_noted() const noexcept { return completed_; }
  /// Turns run so far, by anyone (loop owner only).
  std::uint64_t turns() const noexcept { return turns_; }
  /// poll(2) calls a borrowed turn made for its pollers' descriptors (loop owner only).
  std::uint64_t readiness_checks() const noexcept { return readiness_checks_; }
  /// A caller waits to borrow the loop from the reactor thread (any thread): long work on the
  /// reactor thread (a busy link's drain) stops early and leaves the rest to the borrower.
  bool lend_requested() const noexcept {
    return lend_requests_.load(std::memory_order_relaxed) != 0;
  }
  /// True once stop() was called (any thread).
  bool stop_requested() const noexcept { return stop_requested_.load(std::memory_order_acquire); }
  /// Registers / removes a poller (loop owner only; remove before the poller dies).
  void add_poller(loop_poller& p);
  void remove_poller(loop_poller& p) noexcept;
  /// The paths in use: probed & config.allowed. Valid after start().
  const uring_features& features() const noexcept { return features_; }
  /// The configuration this reactor was built with.
  const reactor_config& config() const noexcept { return config_; }

  // -- Operations (reactor thread only). The op receives every CQE; an op armed after stop() has
  // -- begun completes with -ECANCELED on the next loop turn instead.

  /// Accepts connections on `listen_fd` (multishot where available: re-arm whenever a completion
  /// lacks IORING_CQE_F_MORE, which covers both paths). res = the new fd (SOCK_CLOEXEC).
  void accept(io_op& op, int listen_fd);
  /// Connects `fd` to `addr`; `addr` must stay alive until the completion.
  void connect(io_op& op, int fd, const sockaddr* addr, socklen_t len);
  /// Receives into `buf`. res = bytes (0: peer closed).
  void recv(io_op& op, int fd, std::span<std::byte> buf, int flags = 0);
  /// Receives into buffers of `ring` (multishot where available, re-arm when F_MORE is missing).
  /// The buffer id is cqe_flags >> IORING_CQE_BUFFER_SHIFT; hand it back with ring.recycle().
  void recv(io_op& op, int fd, buffer_ring& ring);
  /// Sends `buf` (SEND_ZC when `zc` and the size allow it and the kernel has it; then a first CQE
  /// carries the result with F_MORE and `buf` stays pinned until the final IORING_CQE_F_NOTIF
  /// CQE). One send per stream socket at a time (DEPENDENCIES.md §2); res < size: partial send.
  void send(io_op& op, int fd, std::span<const std::byte> buf, int flags = MSG_NOSIGNAL,
            zero_copy zc = zero_copy::when_large);
  /// Sends the iovecs of `msg` (SENDMSG_ZC under the same conditions, with the same two CQEs).
  /// `msg` and its buffers must stay alive until the final completion.
  void sendmsg(io_op& op, int fd, const msghdr* msg, int flags = MSG_NOSIGNAL,
               zero_copy zc = zero_copy::when_large);
  /// Reads into `buf` at `offset` (-1: the file position).
  void read(io_op& op, int fd, std::span<std::byte> buf, std::uint64_t offset = UINT64_MAX);
  /// Writes `buf` at `offset` (-1: the file position).
  void write(io_op& op, int fd, std::span<const std::byte> buf, std::uint64_t offset = UINT64_MAX);
  /// Waits for `events` (POLLIN, ...) on `fd`. res = the ready mask.
  void poll_add(io_op& op, int fd, unsigned events);
  /// Asks the kernel to cancel `op`; `op` then completes, with -ECANCELED unless it was finishing.
  void cancel(io_op& op);

  /// Runs `fn` once at or after now + `delay` on the reactor thread (reactor thread only).
  timer_id add_timer(clock::duration delay, std::function<void()> fn);
  /// Cancels a timer: its callback never runs. False if it already ran (reactor thread only).
  bool cancel_timer(timer_id id) noexcept;

  /// True when a completion or a post is waiting for this reactor (reactor thread only): a handler
  /// that spins on the reactor thread (the shm receiver) stops for it, since the work it waits
  /// for may be exactly that post (an app thread's send) or completion. While the pollers are
  /// read by spinning, every 32nd call reads them too (and their handlers run in it): true when
  /// one found input.
  bool work_waiting() noexcept;

  /// Number of caller ops with a completion still to come (reactor thread only; tests and stats).
  std::size_t ops_in_flight() const noexcept { return in_flight_ - (wake_op_.in_flight() ? 1 : 0); }

  /// The ring, for helpers such as buffer_ring (reactor thread only).
  io_uring& ring() noexcept { return ring_; }
  /// True between start() and the end of stop() (reactor thread only).
  bool ring_open() const noexcept { return ring_open_; }

 private:
  // The eventfd READ that wakes a sleeping reactor; re-armed after every completion.
  struct wake_op final : io_op {
    explicit wake_op(reactor& r) : owner(r) {}
    void complete(int res, std::uint32_t flags) override;
    reactor& owner;
    std::uint64_t value = 0;
  };

  result<void> open_ring();
  void thread_main(std::promise<std::error_code>* ready);
  io_uring_sqe* prepare(io_op& op);  // an SQE whose user_data is &op, counted in flight
  io_uring_sqe* get_sqe();           // submits to make room when the SQ is full
  void unlink(io_op& op) noexcept;
  bool refuse_if_stopping(io_op& op);
  void arm_wake();
  void turn(std::chrono::nanoseconds max_wait);
  void lent_loop();        // the reactor thread's loop when lendable
  void park_while_lent();  // the reactor thread, between giving the loop away and taking it back
  bool take_loop(bool ask_reactor_thread) noexcept;  // borrow(), try_borrow()
  void run_pollers() noexcept;
  void run_pollers_by_readiness() noexcept;
  bool spin_poll_pollers() noexcept;
  void end_spin_polling() noexcept;
  bool spin_for_work(std::chrono::nanoseconds budget);
  void wait(std::chrono::nanoseconds max_wait);
  std::size_t run_posted();
  /// Whether a turn should read the clock and run due timers (see reactor.cpp).
  bool timers_may_be_due() noexcept;
  void reap();
  void begin_stopping();
  void cancel_all();
  void close_ring() noexcept;
  void wake() noexcept;

  reactor_config config_;
  uring_features features_;
  io_uring ring_{};
  bool ring_open_ = false;
  int event_fd_ = -1;
  wake_op wake_op_{*this};

  // Cross-thread hand-off. state_ = (items counted << 1) | sleeping bit; see post() for the protocol.
  boost::lockfree::queue<work_item> queue_;
  alignas(64) std::atomic<std::uint64_t> state_{0};
  std::uint64_t consumed_ = 0;  // items popped by the reactor
  std::vector<work_item> local_;  // posted from the reactor thread itself

  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> finished_{false};
  std::atomic<std::thread::id> owner_{};
  std::thread thread_;
  std::mutex join_mutex_;

  // Lending. holder_ says who runs turns: the acquire/release pairs on it order everything one
  // holder did before the next one starts. lend_requests_: borrowers waiting for the reactor
  // thread to let go. park_word_: the parked reactor thread's futex, bumped by stop().
  enum holder : std::uint32_t { loop_free = 0, loop_reactor = 1, loop_borrower = 2 };
  alignas(64) std::atomic<std::uint32_t> holder_{loop_reactor};
  std::atomic<std::uint32_t> lend_requests_{0};
  // Changes on every give_back(linger) (the parked reactor thread compares it across naps);
  // return_now_bit: the last give_back was without linger (the loop is taken back at once).
  static constexpr std::uint64_t return_now_bit = 1;
  std::atomic<std::uint64_t> returns_{0};
  std::atomic<std::uint32_t> park_word_{0};
  std::atomic<bool> lending_allowed_{true};
  bool lent_ = false;                 // loop owner only
  unsigned lent_turns_ = 0;           // borrowed turns, to space out their timer checks
  unsigned submits_held_ = 0;         // turns that left their SQEs to the next (posted work)
  static constexpr unsigned max_submits_held = 8;
  std::uint64_t arrivals_ = 0;        // loop owner only (note_arrival)
  bool completed_ = false;            // loop owner only (note_completion)
  std::uint64_t turns_ = 0;           // loop owner only
  std::vector<loop_poller*> pollers_;  // loop owner only

  // Adaptive busy-poll (config_.busy_poll): consecutive spins that found nothing; at the limit
  // spinning is off until a blocking wait proves short again.
  unsigned fruitless_spins_ = 0;
  bool spin_ = false;  // the CQ is watched before blocking: whether it is worth it right now
  // The pollers are read by the spin itself (not lendable reactors), from the first spin until
  // the reactor sleeps; busy turns meanwhile read them every spin_poll_turns-th turn.
  bool spin_polling_ = false;
  unsigned busy_turns_ = 0;
  static constexpr unsigned spin_poll_turns = 16;
  unsigned waiting_looks_ = 0;  // work_waiting() calls while spin-polling: every 32nd reads

  bool stopping_ = false;
  clock::time_point last_cancel_{};
  io_op* head_ = nullptr;  // intrusive list of ops in flight
  std::size_t in_flight_ = 0;
  std::vector<io_op*> refused_;  // armed after stop began: complete with -ECANCELED next turn
  timer_queue timers_;
  // local_'s other buffer (run_posted swaps them). Here, not beside local_: there it moved
  // owner_ and stop_requested_, which post() reads from every thread, off state_'s cache line.
  std::vector<work_item> spare_;
  coarse_clock coarse_clock_;  // whether the earliest timer is near, without a steady_clock read
  bool waited_ = false;        // the last turn blocked: the next one checks its timers (loop owner)
  unsigned near_turns_ = 0;    // turns with a timer near, to space out their clock reads
  // Pollers with a readiness_fd() when registered, and what a borrowed turn asks poll(2) of them
  // (loop owner only). Last: the fields above keep the cache lines they were measured with.
  std::vector<loop_poller*> readiness_pollers_;
  std::vector<pollfd> readiness_;
  std::uint64_t readiness_checks_ = 0;
};

}  // namespace vessel::io
