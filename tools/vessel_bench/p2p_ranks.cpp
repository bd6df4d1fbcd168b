// The rank processes of `vessel-bench p2p`: the same ping-pong and stream loops over two vessel
// APIs (the comm facade and the node's rank actor), mirroring bench/peers/mpi_p2p.cpp line for
// line so that the two are measured the same way.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <caf/scoped_actor.hpp>

#include "actors/actor_errc.hpp"
#include "actors/comm.hpp"
#include "actors/node.hpp"
#include "actors/node_launch.hpp"
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

/// One vessel API as the loops see it: blocking send and receive into a buffer.
class p2p_channel {
 public:
  virtual ~p2p_channel() = default;
  virtual std::uint32_t rank() const = 0;
  virtual void send(std::span<const std::byte> data, std::uint64_t tag) = 0;
  virtual void recv(std::span<std::byte> into, std::uint64_t tag) = 0;
  virtual void barrier() = 0;
  virtual void close() = 0;
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

/// The actor API: a launched_node (what an actor app starts: bootstrap, store, mesh, binding),
/// driven through its rank actor with CAF request/response from a scoped actor (what an app
/// outside the actor system does). A message larger than one pool block goes as several
/// rank-actor sends of one block each. Pools as the comm facade's runtime has them (pre-faulted).
class actor_channel final : public p2p_channel {
 public:
  actor_channel() {
    auto launched = launched_node::start(actors::env_view::process(), node_launch_options{});
    if (!launched) fail("launch: " + launched.error().message());
    launched_ = std::move(launched).value();
    if (launched_->launch().world_size != 2) fail("needs a world of 2 ranks");
    rank_ = static_cast<std::uint32_t>(launched_->launch().rank);
    node_ = &launched_->node();
    piece_ = std::min(node_->pool().max_block_size(), launched_->mesh().max_message_bytes());
    self_ = std::make_unique<caf::scoped_actor>(node_->system());
    for (int i = 0; i < 10000 && !rank_actor_; ++i) {
      rank_actor_ = node_->rank_actor();
      if (!rank_actor_) std::this_thread::sleep_for(1ms);
    }
    if (!rank_actor_) fail("the node's rank actor never started");
  }

  ~actor_channel() override { close(); }

  std::uint32_t rank() const override { return rank_; }

  void send(std::span<const std::byte> data, std::uint64_t tag) override {
    do {
      const auto n = std::min(piece_, data.size());
      auto p = actors::payload::copy_of(node_->pool(), data.first(n));
      while (!p && p.error() == io::errc::pool_exhausted) {  // blocks still held by the link
        std::this_thread::yield();
        p = actors::payload::copy_of(node_->pool(), data.first(n));
      }
      if (!p) fail("payload: " + p.error().message());
      (*self_)
          ->request(rank_actor_, caf::infinite, actors::send_atom::value, 1 - rank_, tag,
                    std::move(p).value())
          .receive([](actors::sent_atom) {},
                   [](caf::error& e) { fail("send: " + actors::describe(e)); });
      data = data.subspan(n);
    } while (!data.empty());
  }

  void recv(std::span<std::byte> into, std::uint64_t tag) override {
    do {
      std::size_t got = 0;
      (*self_)
          ->request(rank_actor_, caf::infinite, actors::recv_atom::value, 1 - rank_, tag,
                    caf::timespan{exchange_timeout})
          .receive(
              [&](const actors::envelope& e) {
                got = std::min(e.data.size(), into.size());
                std::memcpy(into.data(), e.data.bytes().data(), got);
              },
              [](caf::error& e) { fail("recv: " + actors::describe(e)); });
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
    rank_actor_ = actors::rank_actor{};
    launched_->stop();
    launched_.reset();
    node_ = nullptr;
  }

 private:
  std::unique_ptr<launched_node> launched_;
  node* node_ = nullptr;  // launched_'s
  std::uint32_t rank_ = 0;
  std::size_t piece_ = 0;
  std::unique_ptr<caf::scoped_actor> self_;
  actors::rank_actor rank_actor_;
};

void ping_pong(p2p_channel& ch, std::span<std::byte> msg, std::size_t iters) {
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

void stream(p2p_channel& ch, std::span<std::byte> msg, std::size_t iters) {
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

template <class Loop>
double timed(p2p_channel& ch, Loop loop, std::span<std::byte> msg, std::size_t iters) {
  loop(ch, msg, iters / 10 + 1);  // warm-up: pools, page faults, the peer's receive path
  ch.barrier();
  const auto t0 = clock_type::now();
  loop(ch, msg, iters);
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
  if (path == p2p_path::comm)
    ch = std::make_unique<comm_channel>();
  else
    ch = std::make_unique<actor_channel>();
  std::vector<std::byte> buf(schedule.max_size(), std::byte{0x5a});  // touched once, reused
  for (const auto& p : schedule.latency) {
    const double s = timed(*ch, ping_pong, {buf.data(), p.size}, p.iters);
    if (ch->rank() == 0) write_line(out_fd, "latency", p.size, p2p_latency_us(s, p.iters));
  }
  for (const auto& p : schedule.bandwidth) {
    const double s = timed(*ch, stream, {buf.data(), p.size}, p.iters);
    if (ch->rank() == 0)
      write_line(out_fd, "bandwidth", p.size, p2p_bandwidth_gbs(p.size, p.iters, s));
  }
  ch->barrier();  // nobody closes while the other still waits for a message
  ch->close();
}

}  // namespace vessel::bench
