// The rank processes of `vessel-bench p2p`: the same ping-pong and stream loops over two vessel
// APIs (the comm facade and the node's rank actor), mirroring bench/peers/mpi_p2p.cpp line for
// line so that the two are measured the same way.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/actor_errc.hpp"
#include "actors/comm.hpp"
#include "actors/driving_scoped_actor.hpp"
#include "actors/node.hpp"
#include "actors/node_launch.hpp"
#include "actors/rank_port.hpp"
#include "actors/reactor_hosted.hpp"
#include "io/errc.hpp"
#include "tools/vessel_bench/p2p.hpp"

namespace vessel::bench {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

constexpr std::uint64_t latency_tag = 1;
constexpr std::uint64_t stream_tag = 2;
constexpr std::uint64_t ack_tag = 3;
constexpr std::uint64_t sync_tag = 4;
constexpr auto exchange_timeout = 120s;  // a peer that died must not hang the bench

class p2p_channel;
void blocking_ping_pong(p2p_channel& ch, std::span<std::byte> msg, std::size_t iters);
void blocking_stream(p2p_channel& ch, std::span<std::byte> msg, std::size_t iters);

/// One vessel API as the loops see it: blocking send and receive into a buffer, and the two
/// loops, which a channel whose API is not blocking runs its own way.
class p2p_channel {
 public:
  virtual ~p2p_channel() = default;
  virtual std::uint32_t rank() const = 0;
  /// Called before each point's loops (untimed) with the message they send.
  virtual void prepare(std::span<const std::byte> /*msg*/) {}
  virtual void send(std::span<const std::byte> data, std::uint64_t tag) = 0;
  virtual void recv(std::span<std::byte> into, std::uint64_t tag) = 0;
  virtual void barrier() = 0;
  virtual void close() = 0;
  virtual void ping_pong(std::span<std::byte> msg, std::size_t iters) {
    blocking_ping_pong(*this, msg, iters);
  }
  virtual void stream(std::span<std::byte> msg, std::size_t iters) {
    blocking_stream(*this, msg, iters);
  }
};

class comm_channel final : public p2p_channel {
 public:
  comm_channel() : comm_{comm::init()} {}
  std::uint32_t rank() const override { return comm_.rank(); }
  void send(std::span<const std::byte> data, std::uint64_t tag) override {
    comm_.send(data, 1 - comm_.rank(), tag);
  }
  void recv(std::span<std::byte> into, std::uint64_t tag) override {
    comm_.recv(into, 1 - comm_.rank(), tag, exchange_timeout);
  }
  void barrier() override { comm_.barrier(exchange_timeout); }
  void close() override { comm_.finalize(); }

 private:
  comm comm_;
};

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what);
}

/// An actor app's message as the actor loops send it. An actor app builds its message in pool
/// blocks (actors::payload), as an MPI app builds its message in the buffer it gives MPI_Send, and
/// reads an arrival where it arrived (the envelope's block, which it now owns), as an MPI app reads
/// MPI_Recv's buffer: either way the transport copies each message once on each side. So the
/// loops send blocks filled once per point and read envelopes in place. With `copies`
/// (VESSEL_BENCH_ACTOR_COPIES=1) they copy every message from the app's buffer into fresh blocks
/// and every arrival out into that buffer, as an app whose data lives elsewhere must (two copies
/// more per message; the only way these rows were measured until 2026-12-05).
class actor_message {
 public:
  actor_message(std::size_t piece, bool copies) : piece_{piece}, copies_{copies} {}

  /// `msg` in blocks of `pool`, one piece each (nothing to do with `copies`).
  void prepare(io::buffer_pool& pool, std::span<const std::byte> msg) {
    pieces_.clear();
    source_ = msg;
    if (copies_) return;
    for (std::size_t offset = 0; offset < msg.size(); offset += piece_) {
      auto p = actors::payload::copy_of(pool,
                                        msg.subspan(offset, std::min(piece_, msg.size() - offset)));
      if (!p) throw std::runtime_error("prepare: " + p.error().message());
      pieces_.push_back(std::move(p).value());
    }
  }

  /// The payload of `msg[offset, offset + n)`: its prepared block when `msg` is the prepared
  /// message and the range one of its pieces; else a copy (io::errc::pool_exhausted when the
  /// pool has no block free right now).
  result<actors::payload> piece(io::buffer_pool& pool, std::span<const std::byte> msg,
                                std::size_t offset, std::size_t n) const {
    if (!pieces_.empty() && msg.data() == source_.data() && msg.size() == source_.size() &&
        offset % piece_ == 0 && n == std::min(piece_, msg.size() - offset)) {
      return pieces_[offset / piece_];  // shares the block: nobody writes it
    }
    return actors::payload::copy_of(pool, msg.subspan(offset, n));
  }

  /// Takes an arrival of `got` bytes into `into` (read in place unless `copies`).
  void take(std::span<std::byte> into, const actors::envelope& e, std::size_t got) const {
    if (copies_) std::memcpy(into.data(), e.data.bytes().data(), got);
  }

  std::size_t piece_bytes() const noexcept { return piece_; }
  /// Gives the blocks back (before the pool goes).
  void clear() noexcept {
    pieces_.clear();
    source_ = {};
  }

 private:
  std::size_t piece_;
  bool copies_;
  std::span<const std::byte> source_;
  std::vector<actors::payload> pieces_;
};

/// The node of an actor rank: the launch defaults, with a payload pool whose largest class also
/// holds the largest message the loops send (address space, touched as the points need it).
node_launch_options actor_launch_options(std::size_t max_message) {
  auto options = node_launch_options::defaults();
  auto& classes = options.node.pool.classes;
  auto largest = std::max_element(classes.begin(), classes.end(), [](const auto& a, const auto& b) {
    return a.block_size < b.block_size;
  });
  if (largest != classes.end()) {
    largest->block_count +=
        static_cast<std::uint32_t>((max_message + largest->block_size - 1) / largest->block_size);
  }
  return options;
}

bool actor_copies_from_env() {
  const char* v = std::getenv("VESSEL_BENCH_ACTOR_COPIES");
  return v != nullptr && std::string{v} == "1";
}

/// The actor API: a launched_node (what an actor app starts: bootstrap, store, mesh, binding),
/// driven through its rank actor with CAF request/response from a scoped actor that runs the
/// node's loop while it waits (actors::driving_scoped_actor: what an app outside the actor system
/// uses; with VESSEL_PROGRESS=thread it sleeps on its mailbox as a caf::scoped_actor does). A
/// message larger than one pool block goes as several rank-actor sends of one block each
/// (actor_message). The pools are those an actor app gets by default (node_launch_options), the
/// payload pool's largest class grown to hold the largest message: neither pre-faulted, so the
/// warm-up round touches what the run uses.
class actor_channel : public p2p_channel {
 public:
  actor_channel(std::size_t max_message, bool copies, bool caller_progress = true) {
    auto options = actor_launch_options(max_message);
    options.node.caller_progress.enabled = caller_progress;
    auto launched = launched_node::start(actors::env_view::process(), std::move(options));
    if (!launched) fail("launch: " + launched.error().message());
    launched_ = std::move(launched).value();
    if (launched_->launch().world_size != 2) fail("needs a world of 2 ranks");
    rank_ = static_cast<std::uint32_t>(launched_->launch().rank);
    node_ = &launched_->node();
    message_.emplace(
        std::min(node_->pool().max_block_size(), launched_->mesh().max_message_bytes()), copies);
    self_ = std::make_unique<actors::driving_scoped_actor>(*node_);
    for (int i = 0; i < 10000 && !rank_actor_; ++i) {
      rank_actor_ = node_->rank_actor();
      if (!rank_actor_) std::this_thread::sleep_for(1ms);
    }
    if (!rank_actor_) fail("the node's rank actor never started");
  }

  ~actor_channel() override { close(); }

  std::uint32_t rank() const override { return rank_; }

  void prepare(std::span<const std::byte> msg) override { message_->prepare(node_->pool(), msg); }

  void send(std::span<const std::byte> data, std::uint64_t tag) override {
    std::size_t offset = 0;
    do {
      const auto n = std::min(message_->piece_bytes(), data.size() - offset);
      auto p = message_->piece(node_->pool(), data, offset, n);
      while (!p && p.error() == io::errc::pool_exhausted) {  // blocks still held by the link
        std::this_thread::yield();
        p = message_->piece(node_->pool(), data, offset, n);
      }
      if (!p) fail("payload: " + p.error().message());
      if (auto e = self_->send(rank_actor_, 1 - rank_, tag, std::move(p).value())) {
        fail("send: " + actors::describe(e));
      }
      offset += n;
    } while (offset < data.size());
  }

  void recv(std::span<std::byte> into, std::uint64_t tag) override {
    do {
      auto e = self_->receive(rank_actor_, 1 - rank_, tag, caf::timespan{exchange_timeout});
      if (!e) fail("recv: " + actors::describe(e.error()));
      const std::size_t got = std::min(e->data.size(), into.size());
      message_->take(into, *e, got);
      if (got == 0 && !into.empty()) fail("recv: an empty piece");
      into = into.subspan(got);
    } while (!into.empty());
  }

  void barrier() override {
    std::byte b{};
    if (rank_ == 0) {
      send({&b, 1}, sync_tag);
      recv({&b, 1}, sync_tag);
    } else {
      recv({&b, 1}, sync_tag);
      send({&b, 1}, sync_tag);
    }
  }

  void close() override {
    if (!launched_) return;
    self_.reset();
    message_->clear();
    rank_actor_ = actors::rank_actor{};
    launched_->stop();
    launched_.reset();
    node_ = nullptr;
  }

 protected:
  vessel::node& node() const noexcept { return *node_; }
  const actors::rank_actor& rank_handle() const noexcept { return rank_actor_; }
  actors::driving_scoped_actor& self() noexcept { return *self_; }
  const actor_message& message() const noexcept { return *message_; }

 private:
  std::unique_ptr<launched_node> launched_;
  vessel::node* node_ = nullptr;  // launched_'s
  std::uint32_t rank_ = 0;
  std::optional<actor_message> message_;
  std::unique_ptr<actors::driving_scoped_actor> self_;
  actors::rank_actor rank_actor_;
};

void blocking_ping_pong(p2p_channel& ch, std::span<std::byte> msg, std::size_t iters) {
  for (std::size_t i = 0; i < iters; ++i) {
    if (ch.rank() == 0) {
      ch.send(msg, latency_tag);
      ch.recv(msg, latency_tag);
    } else {
      ch.recv(msg, latency_tag);
      ch.send(msg, latency_tag);
    }
  }
}

void blocking_stream(p2p_channel& ch, std::span<std::byte> msg, std::size_t iters) {
  for (std::size_t i = 0; i < iters; ++i) {
    if (ch.rank() == 0)
      ch.send(msg, stream_tag);
    else
      ch.recv(msg, stream_tag);
  }
  std::byte ack{};  // the stream ends when the receiver has everything
  if (ch.rank() == 0)
    ch.recv({&ack, 1}, ack_tag);
  else
    ch.send({&ack, 1}, ack_tag);
}

using loop_atom = caf::atom_constant<caf::atom("p2ploop")>;
using prepare_atom = caf::atom_constant<caf::atom("p2pprep")>;

/// The two loops as an event-based app actor on the node's reactor thread, beside the rank actor,
/// as an app written as an actor does it: every send and receive goes through a rank_port, a
/// call into the rank actor when it can answer at once (room on the link, a message already
/// here), else a request continued in its response handler. (prepare_atom, size) makes the
/// message the loops send (actor_message); (loop_atom, streaming, iterations) answers true when
/// the loop is done.
class hosted_loops final : public actors::on_reactor_thread<caf::event_based_actor> {
 public:
  hosted_loops(caf::actor_config& cfg, actors::reactor_execution_unit* unit, vessel::node* n,
               actors::rank_actor rank, std::uint32_t self_rank, actor_message message)
      : on_reactor_thread{cfg, unit},
        node_{n},
        port_{std::move(rank)},
        self_rank_{self_rank},
        message_{std::move(message)} {}

  // The prepared blocks go back to the node's pool here, not whenever the last handle to this
  // actor goes.
  void on_exit() override { message_.clear(); }

  caf::behavior make_behavior() override {
    return {
        [this](prepare_atom, std::uint64_t size) {
          buf_.assign(size, std::byte{0x5a});
          message_.prepare(node_->pool(), buf_);
          return true;
        },
        [this](loop_atom, bool streaming, std::uint64_t iters) -> caf::result<bool> {
          streaming_ = streaming;
          left_ = iters;
          done_ = make_response_promise<bool>();
          next();
          return done_;
        },
        [this](actors::pool_room_atom) {
          auto again = std::move(retry_);
          retry_ = nullptr;
          if (again) again();
        },
    };
  }

 private:
  using continuation = std::function<void()>;

  std::uint32_t peer() const noexcept { return 1 - self_rank_; }

  // Iterations of the loop until one waits for a reply; the stream ends with one byte back.
  // Sends and receives that go as calls (rank_port) complete here, so the loop iterates rather
  // than recursing; the handlers of those that went as requests come back through next().
  void next() {
    const bool is_sender = self_rank_ == 0;
    const std::size_t size = buf_.size();
    auto again = [this] { next(); };
    for (;;) {
      if (left_ == 0) {
        auto finished = [this] { done_.deliver(true); };
        if (!streaming_ ||
            (is_sender ? recv_all(ack_tag, 1, 0, finished) : send_all(ack_tag, 1, 0, finished)))
          finished();
        return;
      }
      --left_;
      if (streaming_) {
        if (!(is_sender ? send_all(stream_tag, size, 0, again)
                        : recv_all(stream_tag, size, 0, again)))
          return;
      } else if (is_sender) {
        auto then_receive = [=, this] {
          if (recv_all(latency_tag, size, 0, again)) next();
        };
        if (!send_all(latency_tag, size, 0, then_receive)) return;
        if (!recv_all(latency_tag, size, 0, again)) return;
      } else {
        auto then_send = [=, this] {
          if (send_all(latency_tag, size, 0, again)) next();
        };
        if (!recv_all(latency_tag, size, 0, then_send)) return;
        if (!send_all(latency_tag, size, 0, again)) return;
      }
    }
  }

  // Sends buf_[offset, size) in pieces of one pool block. True when all of it went now (k is
  // not run); otherwise k runs once the last piece is sent.
  bool send_all(std::uint64_t tag, std::size_t size, std::size_t offset, continuation k) {
    do {
      const auto n = std::min(message_.piece_bytes(), size - offset);
      auto p =
          message_.piece(node_->pool(), std::span<const std::byte>{buf_}.first(size), offset, n);
      if (!p) {
        if (p.error() != io::errc::pool_exhausted) {
          fail("payload: " + p.error().message());
          return false;
        }
        // Blocks still held by the links (until the peer acks them), which run on this thread:
        // wait for one to come back rather than poll on a CAF timer, which runs on a thread of
        // its own and, with this rank bound to one core, fired 0.7-1.7 ms after the 20 µs asked.
        retry_ = [=, this] {
          if (send_all(tag, size, offset, k)) k();
        };
        if (!node_->notify_when_pool_has_room(n, this)) fail("payload: no pool class holds it");
        return false;
      }
      const auto rest = offset + n;
      auto sent = port_.send(
          this, peer(), tag, std::move(p).value(),
          [=, this] {
            if (rest >= size || send_all(tag, size, rest, k)) k();
          },
          [this](caf::error& e) { fail("send: " + actors::describe(e)); });
      if (!sent) {
        fail("send: " + actors::describe(sent.error()));
        return false;
      }
      if (*sent == actors::rank_port::status::requested) return false;
      offset = rest;
    } while (offset < size);
    return true;
  }

  // Receives into buf_[offset, size) piece by piece. True when all of it was here (k is not
  // run); otherwise k runs once the last piece came.
  bool recv_all(std::uint64_t tag, std::size_t size, std::size_t offset, continuation k) {
    do {
      auto got = port_.receive(
          this, peer(), tag, caf::timespan{exchange_timeout},
          [=, this](const actors::envelope& e) {
            const auto rest = offset + take_piece(e, size, offset);
            if (rest != offset && (rest >= size || recv_all(tag, size, rest, k))) k();
          },
          [this](caf::error& e) { fail("recv: " + actors::describe(e)); });
      if (!got) return false;
      const auto rest = offset + take_piece(*got, size, offset);
      if (rest == offset) return false;
      offset = rest;
    } while (offset < size);
    return true;
  }

  // Takes the piece `e` into buf_ at `offset`; its length (0: an empty piece, a failure).
  std::size_t take_piece(const actors::envelope& e, std::size_t size, std::size_t offset) {
    const auto got = std::min(e.data.size(), size - offset);
    if (got == 0 && size != 0) {
      fail("recv: an empty piece");
      return 0;
    }
    message_.take(std::span{buf_}.subspan(offset), e, got);
    return got;
  }

  void fail(const std::string& what) {
    if (done_.pending()) done_.deliver(caf::make_error(caf::sec::runtime_error, what));
  }

  vessel::node* node_;
  actors::rank_port port_;
  std::uint32_t self_rank_;
  actor_message message_;
  std::vector<std::byte> buf_;
  bool streaming_ = false;
  std::uint64_t left_ = 0;
  caf::typed_response_promise<bool> done_;
  continuation retry_;
};

/// The actor API from an app that is itself an actor on the node's reactor thread.
class hosted_channel final : public actor_channel {
 public:
  // Nothing outside the actor system waits on the node here but to start the loops, and a waiter
  // that drove its loop would run them on this thread: the node's caller progress is off.
  hosted_channel(std::size_t max_message, bool copies)
      : actor_channel{max_message, copies, /*caller_progress=*/false} {
    auto* host = node().reactor_host();
    if (host == nullptr) fail("the rank actor is not on the reactor (VESSEL_RANK_ACTOR_THREAD)");
    loops_ = node().system().spawn<hosted_loops>(host, &node(), rank_handle(), rank(), message());
  }
  ~hosted_channel() override { close(); }

  void prepare(std::span<const std::byte> msg) override {
    self()
        ->request(loops_, caf::infinite, prepare_atom::value, std::uint64_t{msg.size()})
        .receive([](bool) {},
                 [](caf::error& e) { fail("hosted prepare: " + actors::describe(e)); });
  }
  void ping_pong(std::span<std::byte>, std::size_t iters) override { run(false, iters); }
  void stream(std::span<std::byte>, std::size_t iters) override { run(true, iters); }
  void close() override {
    if (loops_) {
      self()->monitor(loops_);
      self()->send_exit(loops_, caf::exit_reason::kill);
      self()->receive([](const caf::down_msg&) {});
      loops_ = nullptr;
    }
    actor_channel::close();
  }

 private:
  void run(bool streaming, std::size_t iters) {
    self()
        ->request(loops_, caf::infinite, loop_atom::value, streaming, std::uint64_t{iters})
        .receive([](bool) {}, [](caf::error& e) { fail("hosted loop: " + actors::describe(e)); });
  }

  caf::actor loops_;
};

using p2p_loop = void (p2p_channel::*)(std::span<std::byte>, std::size_t);

double timed(p2p_channel& ch, p2p_loop loop, std::span<std::byte> msg, std::size_t iters) {
  ch.prepare(msg);
  (ch.*loop)(msg, iters / 10 + 1);  // warm-up: pools, page faults, the peer's receive path
  ch.barrier();
  const auto t0 = clock_type::now();
  (ch.*loop)(msg, iters);
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

void write_line(int fd, const char* metric, std::size_t size, double value) {
  char line[96];
  const int n = std::snprintf(line, sizeof line, "%s %zu %.6g\n", metric, size, value);
  if (n <= 0 || ::write(fd, line, static_cast<std::size_t>(n)) != n) fail("cannot report");
}

}  // namespace

void run_p2p_rank(p2p_path path, const p2p_schedule& schedule, int out_fd) {
  std::unique_ptr<p2p_channel> ch;
  const bool copies = actor_copies_from_env();
  if (path == p2p_path::comm)
    ch = std::make_unique<comm_channel>();
  else if (path == p2p_path::actor)
    ch = std::make_unique<actor_channel>(schedule.max_size(), copies);
  else
    ch = std::make_unique<hosted_channel>(schedule.max_size(), copies);
  std::vector<std::byte> buf(schedule.max_size(), std::byte{0x5a});  // touched once, reused
  for (const auto& p : schedule.latency) {
    const double s = timed(*ch, &p2p_channel::ping_pong, {buf.data(), p.size}, p.iters);
    if (ch->rank() == 0) write_line(out_fd, "latency", p.size, p2p_latency_us(s, p.iters));
  }
  for (const auto& p : schedule.bandwidth) {
    const double s = timed(*ch, &p2p_channel::stream, {buf.data(), p.size}, p.iters);
    if (ch->rank() == 0)
      write_line(out_fd, "bandwidth", p.size, p2p_bandwidth_gbs(p.size, p.iters, s));
  }
  ch->barrier();  // nobody closes while the other still waits for a message
  ch->close();
}

}  // namespace vessel::bench
