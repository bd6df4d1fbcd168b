#include "actors/runtime.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <future>
#include <random>
#include <thread>
#include <utility>

#include "actors/auth.hpp"
#include "actors/caller_progress.hpp"
#include "actors/comm_errc.hpp"
#include "actors/errc.hpp"
#include "actors/kv_store_client.hpp"
#include "actors/kv_store_server.hpp"
#include "actors/link_credit.hpp"
#include "actors/store_rendezvous.hpp"
#include "io/log.hpp"
#include "io/tcp_socket.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

spdlog::logger& logger() {
  return log::get("actors");
}

// -- futex on p2p_request::state_ (std::atomic::wait has no timeout) ----------------------------

void futex_wake(std::atomic<std::uint32_t>* word, int waiters = 1) noexcept {
  // The waiter may destroy the request as soon as it sees the store; the wake only uses the
  // address (the kernel looks up waiters by it), never the object.
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, waiters,
            nullptr, nullptr, 0);
}

void futex_wait(const std::atomic<std::uint32_t>* word, std::uint32_t expected,
                const timespec* relative) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<const std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected,
            relative, nullptr, 0);
}

/// One sleep while *word == expected, at most until `deadline`; false if it had already passed.
bool futex_wait_until(const std::atomic<std::uint32_t>* word, std::uint32_t expected,
                      clock::time_point deadline) noexcept {
  const auto left = deadline - clock::now();
  if (left <= clock::duration::zero()) return false;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  futex_wait(word, expected, &ts);
  return true;
}

/// Spin this many polls before sleeping: a ping-pong reply takes a few microseconds, a futex
/// sleep/wake round costs 10-15 (DEPENDENCIES.md section 7). Cheap on an idle core, and bounded.
constexpr int spin_polls = 2000;

}  // namespace

// -- p2p_request ---------------------------------------------------------------------------------

void p2p_request::make_send(p2p_request& r, std::uint32_t dst, std::uint64_t tag,
                            io::buffer_slice payload) noexcept {
  r.what = kind::send;
  r.peer = dst;
  r.tag = tag;
  r.payload = std::move(payload);
  r.tail.reset();
  r.error.clear();
  r.message_id = 0;
  r.state_.store(0, std::memory_order_relaxed);
}

void p2p_request::make_split_send(p2p_request& r, std::uint32_t dst, std::uint64_t tag,
                                  io::buffer_slice head, io::buffer_slice tail) noexcept {
  make_send(r, dst, tag, std::move(head));
  r.tail = std::move(tail);
}

void p2p_request::make_receive(p2p_request& r, std::uint32_t source, std::uint64_t tag) noexcept {
  r.what = kind::receive;
  r.peer = source;
  r.tag = tag;
  r.payload.reset();
  r.error.clear();
  r.source = 0;
  r.matched_tag = 0;
  r.message_id = 0;
  r.length = 0;
  r.landed = false;
  r.lands = false;
  r.head_bytes = 0;
  r.into = {};
  r.locate = nullptr;
  r.locate_ctx = nullptr;
  r.state_.store(0, std::memory_order_relaxed);
}

void p2p_request::make_receive_into(p2p_request& r, std::uint32_t source, std::uint64_t tag,
                                    std::size_t head_bytes, std::span<std::byte> into) noexcept {
  make_receive(r, source, tag);
  r.lands = true;
  r.head_bytes = std::min(head_bytes, max_head_bytes);
  r.into = into;
}

void p2p_request::make_receive_located(p2p_request& r, std::uint32_t source, std::uint64_t tag,
                                       std::size_t head_bytes, locate_fn locate,
                                       const void* ctx) noexcept {
  make_receive(r, source, tag);
  r.lands = true;
  r.head_bytes = std::min(head_bytes, max_head_bytes);
  r.locate = locate;
  r.locate_ctx = ctx;
}

void p2p_request::complete(std::error_code ec) noexcept {
  error = ec;
  runtime* const events = events_owner_;  // read first: the owner may reuse us once done
  std::atomic<std::uint32_t>* word = &state_;
  if (word->exchange(1, std::memory_order_acq_rel) == 2) futex_wake(word);
  // After the store, so that a waiter that saw events() unchanged also sees done() (see
  // runtime::wait_events); the runtime outlives every completion it makes.
  if (events != nullptr) events->signal_events();
}

namespace {

/// Announces a sleeper on `state` (0 -> 2); false if the request is done by then.
bool announce_sleeper(std::atomic<std::uint32_t>& state) noexcept {
  std::uint32_t expected = 0;
  return state.compare_exchange_strong(expected, 2, std::memory_order_acq_rel) || expected == 2;
}

}  // namespace

void p2p_request::wait() const noexcept {
  wait_until(clock::time_point::max());
}

bool p2p_request::wait_until(clock::time_point deadline) const noexcept {
  return drive_or_spin(deadline, nullptr, clock::duration::max()) || sleep_until(deadline);
}

bool p2p_request::wait_for(clock::duration timeout) const noexcept {
  // The timeout counts from the drive's first look at the clock, some turns in: a wait that
  // ends sooner (a ping-pong's) reads no clock at all.
  clock::time_point first_look{};
  if (drive_or_spin(clock::time_point::max(), &first_look, timeout)) return true;
  if (first_look == clock::time_point{}) first_look = clock::now();
  return sleep_until(first_look + timeout);
}

bool p2p_request::drive_or_spin(clock::time_point deadline, clock::time_point* first_look,
                                clock::duration timeout) const noexcept {
  if (done()) return true;
  if (runtime_ == nullptr ||
      !runtime_->drive_until([this] { return done(); }, deadline, first_look, timeout)) {
    for (int i = 0; i < spin_polls; ++i) {
      if (done()) return true;
      __builtin_ia32_pause();
    }
  }
  return done();
}

bool p2p_request::sleep_until(clock::time_point deadline) const noexcept {
  while (!done()) {
    if (!announce_sleeper(state_)) break;
    if (deadline == clock::time_point::max()) {
      futex_wait(&state_, 2, nullptr);
    } else if (!futex_wait_until(&state_, 2, deadline)) {
      return done();
    }
  }
  return true;
}

// -- events (one sleep for many requests) ---------------------------------------------------------

void runtime::signal_events() noexcept {
  events_.fetch_add(1, std::memory_order_seq_cst);
  if (event_sleepers_.load(std::memory_order_seq_cst) == 0) return;
  futex_wake(&events_, INT_MAX);
}

bool runtime::wait_events(std::uint32_t seen, clock::time_point deadline) const noexcept {
  auto* self = const_cast<runtime*>(this);
  if (self->drive_until([&] { return events_.load(std::memory_order_seq_cst) != seen; }, deadline) &&
      events_.load(std::memory_order_seq_cst) != seen) {
    return true;
  }
  // Dekker with signal_events(): we count ourselves a sleeper before the kernel compares the
  // word; it bumps the word before it looks for sleepers. One of us sees the other.
  event_sleepers_.fetch_add(1, std::memory_order_seq_cst);
  while (events_.load(std::memory_order_seq_cst) == seen) {
    if (deadline == clock::time_point::max()) {
      futex_wait(&events_, seen, nullptr);
    } else if (!futex_wait_until(&events_, seen, deadline)) {
      break;
    }
  }
  event_sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  return events_.load(std::memory_order_seq_cst) != seen;
}

// -- options -------------------------------------------------------------------------------------

runtime_options runtime_options::defaults() {
  runtime_options o;
  // Reassembly blocks and the unexpected queue share this pool, per size class: each class must
  // hold the queue's bound (64 MiB of blocks held, 1024 messages) plus what a link window (4 MiB
  // of credit) from every peer brings past it, or the link finds no block and must reconnect to
  // shed the message (peer_link). The window is counted in message bytes, so in the 1 MiB class
  // a peer's window is up to 15 blocks (of 256 KiB messages): 128 blocks cover 64 + 15 x 4 peers.
  // The regions are address space, touched only as used (~800 MiB reserved, not resident).
  // Blocks of 2^k + 64 bytes: a power-of-two message plus comm's 16-byte chunk header fits the
  // class of its size instead of the next one (a 1 MiB message would otherwise take 4 MiB).
  o.mesh.pool = io::buffer_pool_config{{{4096 + 64, 8192},
                                        {65536 + 64, 4096},
                                        {(std::size_t{1} << 20) + 64, 128},
                                        {(std::size_t{4} << 20) + 64, 64}},
                                       false};
  o.matcher.max_unexpected_bytes = std::size_t{64} << 20;
  o.matcher.max_unexpected_messages = 1024;
  return o;
}

detailed_result<void> runtime_options::apply_env(const env_view& env) {
  auto timeout = env_number(env, "VESSEL_CONNECT_TIMEOUT_MS", connect_timeout.count());
  if (!timeout) return timeout.error();
  auto unexpected = env_number(env, "VESSEL_UNEXPECTED_BYTES",
                               static_cast<long long>(matcher.max_unexpected_bytes));
  if (!unexpected) return unexpected.error();
  connect_timeout = std::chrono::milliseconds{timeout.value()};
  matcher.max_unexpected_bytes = static_cast<std::size_t>(unexpected.value());
  if (auto read = progress.apply_env(env); !read) return read.error();
  auto binding = cpu_binding_from_env(env, bind);
  if (!binding) return binding.error();
  bind = binding.value();
  return mesh.apply_env(env);
}

// -- start-up ------------------------------------------------------------------------------------

runtime::runtime(runtime_options options) : options_{std::move(options)} {}

detailed_result<std::unique_ptr<runtime>> runtime::start(const env_view& env,
                                                         runtime_options options) {
  std::unique_ptr<runtime> rt{new runtime{std::move(options)}};
  auto booted = rt->boot(env);
  if (!booted) {
    rt->shutdown();
    return booted.error();
  }
  return rt;
}

detailed_result<void> runtime::boot(const env_view& env) {
  auto launched = detect_launch_and_log(env);
  if (!launched) return launched.error();
  launch_ = std::move(launched).value();
  rank_ = static_cast<std::uint32_t>(launch_.rank);
  world_ = static_cast<std::uint32_t>(launch_.world_size);
  if (auto applied = options_.apply_env(env); !applied) return applied.error();

  auto token = load_token(env);
  if (!token) {
    if (world_ > 1) return token.error();
    // A singleton talks to nobody: any secret will do.
    std::array<std::byte, 32> random{};
    std::random_device rd;
    for (auto& b : random) b = static_cast<std::byte>(rd());
    token = cluster_token::from_bytes(random, "random (single process)");
    if (!token) return token.error();
  }
  token_.emplace(std::move(token).value());

  options_.reactor.lendable = options_.progress.enabled;
  reactor_ = std::make_unique<io::reactor>(options_.reactor);
  if (auto started = reactor_->start(); !started) {
    return fail(started.error(), "cannot start the reactor: " + started.error().message());
  }

  // The store: VESSEL_STORE (or torchrun's MASTER_ADDR/PORT); else a file rank 0 writes.
  const auto deadline = clock::now() + options_.connect_timeout;
  auto found = find_store(env, *reactor_, rank_, world_, launch_.store, deadline);
  if (!found) return found.error();
  store_server_ = std::move(found.value().server);
  store_file_ = std::move(found.value().published_in);
  const endpoint store_at = found.value().address;
  const auto left = [&] {
    return std::max(1ms,
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()));
  };
  auto client = kv_store_client::connect(*reactor_, store_at, left());
  if (!client) return client.error();
  store_client_ = std::move(client).value();

  // Pools, matcher, mesh.
  send_pool_ = std::make_unique<io::buffer_pool>(options_.send_pool);
  send_pool_->set_available_callback([this](std::size_t) {
    blocks_returned_.fetch_add(1, std::memory_order_release);
    std::lock_guard lock{block_mutex_};
    block_cv_.notify_all();
  });
  matcher_config mc = options_.matcher;
  mc.world_size = world_;
  matcher_ = std::make_unique<message_matcher>(mc, static_cast<credit_sink&>(*this));
  backlog_.resize(world_);
  sent_ids_.assign(world_, 0);
  down_.assign(world_, false);
  claimed_.assign(world_, nullptr);
  peer_states_ = std::make_unique<std::atomic<std::uint8_t>[]>(world_);
  peer_restarts_ = std::make_unique<std::atomic<std::uint64_t>[]>(world_);
  for (std::uint32_t p = 0; p < world_; ++p) {
    peer_states_[p].store(static_cast<std::uint8_t>(p == rank_ ? peer_state::up
                                                                : peer_state::connecting));
  }
  incoming_.reserve(1024);
  draining_.reserve(1024);

  mesh_config m = options_.mesh;
  m.self_rank = rank_;
  m.world_size = world_;
  m.token = &*token_;
  std::random_device rd;
  m.incarnation = (std::uint64_t{rd()} << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid());
  mesh_ = std::make_unique<mesh>(*reactor_, std::move(m), static_cast<mesh_observer&>(*this));
  max_message_ = std::min(mesh_->max_message_bytes(), send_pool_->max_block_size());
  fragment_bytes_ = mesh_->fragment_bytes();
  logger().info("rank {}: connecting {} peers (transport {}), deadline {} ms", rank_, world_ - 1,
                env.get("VESSEL_TRANSPORT").value_or("auto"), left().count());
  if (auto connected = mesh_->connect(*store_client_, left()); !connected) {
    return connected.error();
  }
  const std::uint32_t on_host = mesh_->ranks_on_this_host();
  const unsigned cpus = usable_cpus();  // before binding: what the host's ranks share
  yield_when_idle_.store(options_.progress.waiters_yield(on_host, cpus), std::memory_order_relaxed);
  if (auto bound = bind_rank_process(options_.bind, rank_, mesh_->rank_on_this_host(), on_host);
      !bound) {
    return bound.error();
  }
  logger().info(
      "rank {}: every peer link is up (progress: {}; {} rank(s) on this host, {} CPU(s): "
      "waiters {})",
      rank_,
      options_.progress.enabled && world_ > 1 && reactor_->lending_allowed() ? "caller-driven"
                                                                             : "reactor thread",
      on_host, cpus,
      yield_when_idle_.load(std::memory_order_relaxed) ? "yield between turns" : "spin");
  return outcome::success();
}

runtime::~runtime() {
  shutdown();
}

void runtime::finish() {
  if (mesh_ && !shut_down_.load()) {
    const mesh_config& c = mesh_->config();
    mesh_->drain(c.reconnect_deadline +
                 std::chrono::duration_cast<std::chrono::milliseconds>(c.liveness.peer_deadline));
  }
  shutdown();
}

void runtime::shutdown() {
  if (shut_down_.exchange(true)) return;
  if (mesh_) mesh_->close();
  if (reactor_) {
    on_reactor([this] {
      closing_ = true;
      fail_everything(comm_errc::shutting_down);
      // Unexpected messages hold blocks of the mesh's pool: drop them before the mesh goes.
      matcher_.reset();
    });
  }
  store_client_.reset();
  if (store_server_) store_server_->stop();
  if (!store_file_.empty()) std::remove(store_file_.c_str());
  mesh_.reset();  // after close(), before the reactor stops (mesh.hpp)
  if (reactor_) reactor_->stop();
  // Requests that raced with the stop were run (and failed) by the reactor's drain at the latest.
  store_server_.reset();
}

template <class Done>
bool runtime::drive_until(Done&& done, clock::time_point deadline, clock::time_point* first_look,
                          clock::duration timeout) noexcept {
  if (!options_.progress.enabled || !reactor_ || !reactor_->borrow()) return false;
  drive_budget budget{options_.progress.spin, deadline, timeout};
  const bool finished =
      drive_held_loop(*reactor_, budget, yield_when_idle_.load(std::memory_order_relaxed), done);
  if (first_look != nullptr && budget.started()) *first_look = budget.first_look();
  // Done: stay parked-lent for a moment (the caller's next call is likely near). Still waiting:
  // the reactor thread takes the loop at once, and its completion wakes our sleep.
  reactor_->give_back(finished);
  return true;
}

bool runtime::drive(bool (*done)(const void* ctx), const void* ctx,
                    clock::time_point deadline) noexcept {
  return drive_until([done, ctx] { return done(ctx); }, deadline);
}

void runtime::await_returned(io::borrowed_memory& memory, std::uint32_t slot) noexcept {
  struct loan {
    const io::borrowed_memory* memory;
    std::uint32_t slot;
  } pending{&memory, slot};
  drive(
      [](const void* p) {
        const auto* l = static_cast<const loan*>(p);
        return l->memory->returned(l->slot);
      },
      &pending, clock::time_point::max());
  memory.wait_returned(slot);
}

template <class F>
auto runtime::on_reactor(F&& fn) -> decltype(fn()) {
  using R = decltype(fn());
  if (reactor_->borrow()) {
    // The loop is ours: run it here, no hand-off (and no wait for a parked reactor thread).
    struct giver {
      io::reactor& r;
      ~giver() { r.give_back(); }
    } give{*reactor_};
    return fn();
  }
  std::promise<R> done;
  auto future = done.get_future();
  const bool posted = reactor_->post([&] {
    if constexpr (std::is_void_v<R>) {
      fn();
      done.set_value();
    } else {
      done.set_value(fn());
    }
  });
  if (!posted) {
    if constexpr (std::is_void_v<R>)
      return;
    else
      return R{};
  }
  return future.get();
}

// -- submission (any thread) ---------------------------------------------------------------------

bool runtime::enqueue(p2p_request& r, bool cancel) noexcept {
  bool wake = false;
  {
    std::lock_guard lock{queue_mutex_};
    incoming_.push_back({&r, cancel});
    queued_.store(true, std::memory_order_relaxed);
    if (!flush_posted_) flush_posted_ = wake = true;
  }
  if (!wake || reactor_->post(io::work_item{&runtime::flush_thunk, this})) return true;
  // The reactor is gone: nothing will run what is queued.
  std::lock_guard lock{queue_mutex_};
  for (queued& q : incoming_) {
    if (!q.cancel && !q.request->done()) q.request->complete(comm_errc::shutting_down);
  }
  incoming_.clear();
  queued_.store(false, std::memory_order_relaxed);
  flush_posted_ = false;
  return false;
}

void runtime::submit(p2p_request& r) noexcept {
  r.events_owner_ = r.signal_events_ ? this : nullptr;
  r.runtime_ = this;
  // Nobody holds the loop (its reactor thread parked after a caller's borrow): start the request
  // here, behind what other threads queued, instead of posting it and running a whole turn of
  // completions and pollers for it; a send is then done when submit returns. Given back
  // lingering, so that the wait that usually follows borrows it again at once.
  if (options_.progress.enabled && reactor_ && reactor_->try_borrow()) {
    // The borrow ordered us after the last holder's flush, so a clear flag means that what
    // this thread queued before has run; another thread's concurrent submit has no order
    // with ours to keep.
    if (!queued_.load(std::memory_order_relaxed)) {
      start_queued({&r, false});
    } else {
      {
        std::lock_guard lock{queue_mutex_};
        incoming_.push_back({&r, false});
      }
      flush();
    }
    // A caller that only sends (a stream, a broadcast's root) must still take in what comes
    // back, and nobody else would: the reactor thread stays parked while callers keep borrowing.
    // Acks release its send blocks (else it cycles through the whole pool, cold), and the room
    // a full transport waits for (the peer consumed the shm area) is seen by the loop's pollers:
    // a frame queued behind a full area went out only once the pool ran dry. Only for a caller
    // that does nothing else: one that also waits runs the loop anyway, and a turn here would
    // take in the peer's payloads before its next send (a 16 MiB ring allreduce measured 30 %
    // slower with a turn every 8 submits).
    if (reactor_->turns() != turns_seen_) {  // the loop ran since: what came back was taken in
      turns_seen_ = reactor_->turns();
      sends_since_turn_ = 0;
    }
    if (++sends_since_turn_ >= sends_per_turn || reactor_->work_waiting()) {
      sends_since_turn_ = 0;
      reactor_->borrowed_turn();
      turns_seen_ = reactor_->turns();
    }
    reactor_->give_back();
    return;
  }
  enqueue(r, false);
}

void runtime::cancel(p2p_request& r) noexcept {
  r.cancel_seen_.store(0, std::memory_order_relaxed);
  if (!enqueue(r, true)) {
    if (!r.done()) r.complete(comm_errc::shutting_down);
    return;
  }
  // The queued entry points at `r`: wait until the reactor has run it (a timeout path: rare).
  drive_until([&r] { return r.cancel_seen_.load(std::memory_order_acquire) != 0; },
              clock::time_point::max());
  while (r.cancel_seen_.load(std::memory_order_acquire) == 0) {
    futex_wait(&r.cancel_seen_, 0, nullptr);
  }
}

void runtime::ack_cancel(p2p_request& r) noexcept {
  std::atomic<std::uint32_t>* word = &r.cancel_seen_;
  word->store(1, std::memory_order_release);
  futex_wake(word);
}

io::buffer runtime::acquire_send_block(std::size_t bytes) {
  if (bytes > send_pool_->max_block_size()) return {};
  for (;;) {
    const std::uint32_t seen = blocks_returned_.load(std::memory_order_acquire);
    if (io::buffer b = send_pool_->try_acquire(bytes == 0 ? 1 : bytes)) return b;
    // Exhausted: the try armed the pool's callback. Blocks come back with the peer's acks, which
    // this thread may have to take in itself: with caller-driven progress the reactor thread is
    // parked, and would take the loop back only a linger (1 ms) later.
    const auto returned = [&] { return blocks_returned_.load(std::memory_order_acquire) != seen; };
    if (drive_until(returned, clock::time_point::max()) && returned()) continue;
    // Nobody to drive, or the budget ran out: the reactor thread has the loop. The timed wait
    // covers a block returned between the try and the wait (the callback may fire first).
    std::unique_lock lock{block_mutex_};
    block_cv_.wait_for(lock, 1ms, returned);
  }
}

// -- the reactor side
// ------------------------------------------------------------------------------

void runtime::flush_thunk(void* self) noexcept {
  static_cast<runtime*>(self)->flush();
}

void runtime::flush() noexcept {
  {
    std::lock_guard lock{queue_mutex_};
    draining_.swap(incoming_);
    queued_.store(false, std::memory_order_relaxed);
    flush_posted_ = false;
  }
  for (const queued& q : draining_) start_queued(q);
  draining_.clear();
}

void runtime::start_queued(const queued& q) noexcept {
  p2p_request& r = *q.request;
  if (closing_) {
    if (!q.cancel && !r.done()) r.complete(comm_errc::shutting_down);
    if (q.cancel) ack_cancel(r);
    return;
  }
  if (q.cancel) {
    if (cancel_receive(r)) ack_cancel(r);
  } else if (r.what == p2p_request::kind::send) {
    start_send(r);
  } else {
    start_receive(r);
  }
}

void runtime::start_send(p2p_request& r) {
  if (r.peer >= world_) {
    r.complete(comm_errc::source_out_of_range);
    return;
  }
  r.message_id = ++sent_ids_[r.peer];
  std::deque<p2p_request*>& waiting = backlog_[r.peer];
  if (!waiting.empty()) {  // keep the per-peer order behind what was pushed back
    waiting.push_back(&r);
    return;
  }
  auto sent = mesh_->send(r.peer, r.tag, r.payload, r.tail);
  if (sent) {
    r.payload.reset();
    r.tail.reset();
    r.complete({});
  } else if (sent.error() == errc::link_would_block) {
    waiting.push_back(&r);
  } else {
    r.complete(sent.error());
  }
}

void runtime::drain_backlog(std::uint32_t peer) {
  std::deque<p2p_request*>& waiting = backlog_[peer];
  while (!waiting.empty()) {
    p2p_request& r = *waiting.front();
    auto sent = mesh_->send(peer, r.tag, r.payload, r.tail);
    if (!sent && sent.error() == errc::link_would_block) return;  // on_writable again later
    waiting.pop_front();
    if (sent) {
      r.payload.reset();
      r.tail.reset();
    }
    r.complete(sent ? std::error_code{} : sent.error());
  }
}

void runtime::start_receive(p2p_request& r) {
  auto posted = matcher_->post_receive(r.peer, r.tag, reinterpret_cast<std::uintptr_t>(&r));
  if (!posted) {
    r.complete(posted.error());
    return;
  }
  if (posted.value().message) {
    p2p_message& m = *posted.value().message;
    r.source = m.source;
    r.matched_tag = m.tag;
    r.message_id = m.message_id;
    r.length = m.payload.size();
    r.payload = std::move(m.payload);
    r.complete({});
    reactor_->note_completion();
    return;
  }
  r.receive_ = posted.value().id;
  if (r.peer != any_source && down_[r.peer]) {
    matcher_->cancel(r.receive_);
    r.complete(comm_errc::peer_down);
    return;
  }
  if (land_in_progress(r)) return;
  link_pending(r);
}

bool runtime::land_in_progress(p2p_request& r) {
  // A receive posted while its message is arriving (a sender that runs ahead): the rest of the
  // message lands in the receive's buffer, and only what arrived so far is copied there.
  // Specific sources only: a wildcard would have to look at every link.
  // Not for a located receive: where it goes depends on the message's first bytes, gone by now.
  if (!r.lands || r.locate != nullptr || r.peer == any_source || claimed_[r.peer] != nullptr) {
    return false;
  }
  const std::optional<message_start> m = mesh_->in_progress(r.peer);
  if (!m || m->length > r.head_bytes + r.into.size()) return false;
  // Only if this receive is the one the message would complete.
  const auto fit = matcher_->oldest_fit(m->src, m->tag);
  if (!fit || fit->id != r.receive_) return false;
  if (!mesh_->divert(m->src, m->message_id, {std::span{r.head}.first(r.head_bytes), r.into, {}})) {
    return false;
  }
  matcher_->claim(fit->id);
  r.claimed_ = true;
  claimed_[m->src] = &r;
  return true;
}

bool runtime::cancel_receive(p2p_request& r) {
  if (r.claimed_) {
    // Its message is landing in the caller's memory, which must stay untouched once cancel()
    // returns: the cancel waits for the message (it then completes with it) or its abandonment.
    r.cancel_deferred_ = true;
    return false;
  }
  if (!r.pending_) return true;  // already completed: its waiter sees the result
  if (matcher_->cancel(r.receive_)) {
    unlink_pending(r);
    r.complete(comm_errc::receive_cancelled);
  }
  return true;
}

void runtime::settle_claimed(p2p_request& r, std::error_code ec) noexcept {
  r.claimed_ = false;
  const bool cancelled = std::exchange(r.cancel_deferred_, false);
  runtime* const owner = r.runtime_;  // `r` may be gone once complete() woke its waiter
  r.complete(ec);
  if (owner != nullptr) owner->reactor_->note_completion();
  if (cancelled) ack_cancel(r);  // its canceller owns `r` and waits for this
}

void runtime::link_pending(p2p_request& r) noexcept {
  r.pending_ = true;
  r.prev_ = nullptr;
  r.next_ = pending_head_;
  if (pending_head_ != nullptr) pending_head_->prev_ = &r;
  pending_head_ = &r;
}

void runtime::unlink_pending(p2p_request& r) noexcept {
  if (r.prev_ != nullptr)
    r.prev_->next_ = r.next_;
  else
    pending_head_ = r.next_;
  if (r.next_ != nullptr) r.next_->prev_ = r.prev_;
  r.prev_ = r.next_ = nullptr;
  r.pending_ = false;
}

void runtime::fail_everything(std::error_code ec) {
  for (p2p_request*& claimed : claimed_) {
    if (claimed != nullptr) settle_claimed(*std::exchange(claimed, nullptr), ec);
  }
  while (pending_head_ != nullptr && matcher_) {
    p2p_request& r = *pending_head_;
    matcher_->cancel(r.receive_);
    unlink_pending(r);
    r.complete(ec);
  }
  for (auto& waiting : backlog_) {
    while (!waiting.empty()) {
      p2p_request* r = waiting.front();
      waiting.pop_front();
      r->complete(ec);
    }
  }
}

message_destination runtime::on_message_begin(const message_start& m) {
  if (!matcher_ || closing_) return {};
  const auto fit = matcher_->oldest_fit(m.src, m.tag);
  if (!fit) return {};
  auto& r = *reinterpret_cast<p2p_request*>(static_cast<std::uintptr_t>(fit->cookie));
  if (!r.lands || claimed_[m.src] != nullptr) return {};
  std::span<std::byte> into = r.into;
  wire::body_combiner combine;
  if (r.locate != nullptr) {
    if (m.first_fragment.size() < r.head_bytes) return {};
    const p2p_request::location where =
        r.locate(r.locate_ctx, m.src, m.first_fragment.first(r.head_bytes));
    into = where.into;
    combine = where.combine;
    if (into.data() == nullptr || m.length != r.head_bytes + into.size()) return {};
  } else if (m.length > r.head_bytes + into.size()) {
    return {};
  }
  if (!matcher_->claim(fit->id)) return {};
  r.into = into;  // only once the receive is this message's
  unlink_pending(r);
  r.claimed_ = true;
  claimed_[m.src] = &r;
  return {std::span{r.head}.first(r.head_bytes), r.into, combine};
}

void runtime::on_message_abandoned(std::uint32_t src, std::uint64_t message_id, bool final) {
  if (src >= world_ || claimed_[src] == nullptr) return;
  p2p_request& r = *std::exchange(claimed_[src], nullptr);
  logger().debug("rank {}: message {} from rank {} abandoned while landing{}", rank_, message_id,
                 src, final ? " (link down)" : "");
  if (closing_ || shut_down_.load(std::memory_order_relaxed) || !matcher_) {
    settle_claimed(r, comm_errc::shutting_down);
  } else if (r.cancel_deferred_) {
    settle_claimed(r, comm_errc::receive_cancelled);
  } else if (final && r.peer == src) {
    settle_claimed(r, comm_errc::peer_down);
  } else {
    // Lost with the peer's old incarnation (or, for any source, with a dead peer): wait again,
    // behind the receives posted since.
    r.claimed_ = false;
    start_receive(r);
  }
}

void runtime::on_message(inbound_message&& m) {
  const std::uint32_t src = m.src;
  const std::size_t bytes = m.payload.size();
  if (m.landed) {
    p2p_request* r = src < world_ ? std::exchange(claimed_[src], nullptr) : nullptr;
    if (r == nullptr) {  // settled already (shutdown); else a bug: begin claims every landing
      if (!closing_) logger().error("rank {}: message {} from rank {} landed for no receive", rank_,
                     m.message_id, src);
      return;
    }
    mesh_->release(src, message_credit(m.length));  // its bytes are the app's now
    r->source = src;
    r->matched_tag = m.tag;
    r->message_id = m.message_id;
    r->length = static_cast<std::size_t>(m.length);
    r->landed = true;
    settle_claimed(*r, {});
    return;
  }
  if (!matcher_) return;  // shutting down: the message dies with its block
  auto arrived = matcher_->arrive(p2p_message{m.src, m.tag, m.message_id, std::move(m.payload)});
  if (!arrived) {
    logger().error("rank {}: message from rank {} dropped: {}", rank_, src,
                   arrived.error().message());
    mesh_->release(src, message_credit(bytes));
    return;
  }
  if (!arrived.value()) return;
  message_matcher::completion& done = *arrived.value();
  auto& r = *reinterpret_cast<p2p_request*>(static_cast<std::uintptr_t>(done.cookie));
  unlink_pending(r);
  r.source = done.message.source;
  r.matched_tag = done.message.tag;
  r.message_id = done.message.message_id;
  r.length = done.message.payload.size();
  r.payload = std::move(done.message.payload);
  r.complete({});
  reactor_->note_completion();
}

void runtime::on_peer_state(std::uint32_t peer, peer_state s, std::error_code why) {
  if (peer < world_ && peer_states_) {
    if (s == peer_state::restarted) peer_restarts_[peer].fetch_add(1, std::memory_order_relaxed);
    peer_states_[peer].store(static_cast<std::uint8_t>(s), std::memory_order_release);
    signal_events();  // a collective waiting on a member that went down fails now, not later
  }
  if (s == peer_state::up || s == peer_state::connecting) {
    logger().debug("rank {}: link to rank {} {}", rank_, peer, to_string(s));
    if (peer < world_ && s == peer_state::up) down_[peer] = false;
    return;
  }
  // A link that drops during shutdown, or reconnects, is routine; one going down is not.
  const bool routine = shut_down_.load(std::memory_order_relaxed) || s != peer_state::down;
  logger().log(routine ? spdlog::level::info : spdlog::level::warn,
               "rank {}: link to rank {} {}{}{}", rank_, peer, to_string(s), why ? ": " : "",
               why ? why.message() : "");
  if (s != peer_state::down || peer >= world_) return;
  down_[peer] = true;
  // Nothing more will come from it: fail the receives that wait for it alone, and its sends.
  for (p2p_request* r = pending_head_; r != nullptr;) {
    p2p_request* next = r->next_;
    if (r->peer == peer && matcher_->cancel(r->receive_)) {
      unlink_pending(*r);
      r->complete(comm_errc::peer_down);
    }
    r = next;
  }
  std::deque<p2p_request*>& waiting = backlog_[peer];
  while (!waiting.empty()) {
    p2p_request* r = waiting.front();
    waiting.pop_front();
    r->complete(comm_errc::peer_down);
  }
}

void runtime::on_writable(std::uint32_t peer) {
  if (peer < world_) drain_backlog(peer);
}

void runtime::release(std::uint32_t source, std::size_t bytes) {
  mesh_->release(source, bytes);
}

void runtime::on_backpressure(bool over_bound) {
  const matcher_stats& s = matcher_->stats();
  logger().info("rank {}: unexpected queue {} ({} messages, {} bytes): credit {}", rank_,
                over_bound ? "over its bound" : "drained", s.unexpected_messages,
                s.unexpected_bytes, over_bound ? "withheld" : "flows again");
}

// -- introspection -------------------------------------------------------------------------------

bool runtime::reaches_by_shm(std::uint32_t peer) const noexcept {
  return mesh_ && mesh_->reaches_by_shm(peer);
}

bool runtime::reaches_any_by_shm() const noexcept {
  for (std::uint32_t peer = 0; peer < world_; ++peer) {
    if (peer != rank_ && reaches_by_shm(peer)) return true;
  }
  return false;
}

peer_link_stats runtime::link_stats(std::uint32_t peer) {
  return on_reactor([&] { return mesh_->stats(peer); });
}

matcher_stats runtime::matching_stats() {
  return on_reactor([&] { return matcher_->stats(); });
}

void runtime::drop_connection(std::uint32_t peer) {
  on_reactor([&] { mesh_->drop_connection(peer); });
}

peer_state runtime::peer_status(std::uint32_t peer) const noexcept {
  if (peer >= world_ || !peer_states_) return peer_state::down;
  return static_cast<peer_state>(peer_states_[peer].load(std::memory_order_acquire));
}

std::uint64_t runtime::peer_restarts(std::uint32_t peer) const noexcept {
  if (peer >= world_ || !peer_restarts_) return 0;
  return peer_restarts_[peer].load(std::memory_order_acquire);
}

}  // namespace vessel::actors
