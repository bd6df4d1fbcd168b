// vessel-bench transport --transport tcp: two processes (fork) over loopback TCP.
//   pingpong: half round-trip latency, one frame each way, 8 B .. 1 MiB;
//   stream:   one-way bandwidth, back-to-back messages (1 MiB fragments) then one ack, 64 KiB .. 64 MiB.
// vessel = io::tcp_transport on a reactor driven by the bench thread itself (no hand-off, as a link
// runs its hot loop on the reactor: DESIGN.md); peer = plain blocking sockets doing the same
// exchange. Both run in the same invocation, interleaved A B A B, and medians are reported.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/buffer_pool.hpp"
#include "io/errc.hpp"
#include "io/reactor.hpp"
#include "io/tcp_socket.hpp"
#include "io/tcp_transport.hpp"
#include "tools/vessel_bench/driven_end.hpp"
#include "tools/vessel_bench/modes.hpp"
#include "tools/vessel_bench/report.hpp"
#include "tools/vessel_bench/transport_driver.hpp"

namespace vessel::bench {
namespace {

constexpr std::size_t fragment_bytes = 1u << 20;  // the decoder's default payload limit

[[noreturn]] void die(const std::string& what) { bench_fail(what); }

wire::frame_header header_for(std::uint64_t seq, std::size_t len) {
  wire::frame_header h;
  h.seq = seq;
  h.payload_len = static_cast<std::uint32_t>(len);
  wire::data_fields d;
  d.total_len = len;  // each fragment travels as its own message: the bench measures transport
  h.body = d;
  return h;
}

// -- vessel side -------------------------------------------------------------------------------

/// One end of the vessel connection: a tcp_transport on a driven reactor.
class vessel_end final : public driven_end {
 public:
  explicit vessel_end(int fd)
      : driven_end{false}, pool_{io::buffer_pool_config{{{fragment_bytes, 4}}, true}} {
    block_ = pool_.try_acquire(fragment_bytes);
    std::memset(block_.data(), 0x5a, block_.size());  // touched once, reused by every frame
    transport_ = std::make_unique<io::tcp_transport>(reactor_, fd, *this);
    transport_->start();
  }
  ~vessel_end() override {
    shutdown(*transport_);
    transport_.reset();
    block_.reset();
    reactor_.stop();
  }

  /// Initiator: `iters` round trips of `size` bytes; returns seconds.
  double pingpong(std::size_t size, std::size_t iters) {
    begin(mode::ping, size, iters);
    return exchange([&] { send_one(size); });
  }
  /// Responder: echoes `iters` frames.
  void serve_pingpong(std::size_t size, std::size_t iters) {
    begin(mode::pong, size, iters);
    exchange([] {});
  }
  /// Sender: `iters` messages of `size` bytes in 1 MiB fragments, until the receiver's ack.
  double stream(std::size_t size, std::size_t iters) {
    begin(mode::stream_tx, size, iters);
    to_send_ = size * iters;
    return exchange([&] { pump(); });
  }
  /// Receiver: takes size * iters bytes, then acks.
  void serve_stream(std::size_t size, std::size_t iters) {
    begin(mode::stream_rx, size, iters);
    to_receive_ = size * iters;
    exchange([] {});
  }

  void on_frame(const wire::frame_header&, std::span<const std::byte> payload,
                const io::buffer_slice&) override {
    switch (mode_) {
      case mode::ping:
        if (++count_ == iters_) done_ = true;
        else send_one(size_);
        break;
      case mode::pong:
        send_one(payload.size());
        if (++count_ == iters_) done_ = true;
        break;
      case mode::stream_rx:
        received_ += payload.size();
        if (received_ == to_receive_) {
          if (!transport_->send_copy(header_for(0, 0), {})) error_ = "ack refused";
          done_ = true;
        }
        break;
      case mode::stream_tx:
        done_ = true;  // the ack
        break;
      case mode::idle:
        error_ = "frame while idle";
    }
  }
  void on_writable() override {
    if (mode_ == mode::stream_tx) pump();
  }

 private:
  enum class mode { idle, ping, pong, stream_tx, stream_rx };

  void begin(mode m, std::size_t size, std::size_t iters) {
    mode_ = m;
    size_ = size;
    iters_ = iters;
    count_ = 0;
    done_ = false;
    received_ = 0;
    to_send_ = 0;
    seq_ = 0;
  }

  // Seconds from `kick` until the exchange is over and our last frame is on the wire (the peer
  // then switches to the plain-socket phase, where nothing would flush it).
  template <class Kick>
  double exchange(Kick kick) {
    const double secs = timed(kick, [this] { return done_ && transport_->queued_bytes() == 0; });
    mode_ = mode::idle;
    return secs;
  }

  void send_one(std::size_t size) {
    if (auto r = transport_->send(header_for(seq_++, size), block_.slice(0, size)); !r)
      error_ = "send: " + r.error().message();
  }

  void pump() {
    while (to_send_ > 0) {
      const std::size_t n = std::min(to_send_, fragment_bytes);
      auto r = transport_->send(header_for(seq_, n), block_.slice(0, n));
      if (!r) {
        if (r.error() == io::make_error_code(io::errc::send_queue_full)) return;  // on_writable
        error_ = "send: " + r.error().message();
        return;
      }
      ++seq_;
      to_send_ -= n;
    }
  }

  io::buffer_pool pool_;
  io::buffer block_;
  std::unique_ptr<io::tcp_transport> transport_;
  mode mode_ = mode::idle;
  std::size_t size_ = 0, iters_ = 0, count_ = 0;
  std::size_t to_send_ = 0, to_receive_ = 0, received_ = 0;
  std::uint64_t seq_ = 0;
  bool done_ = false;
};

// -- plain-socket peer -------------------------------------------------------------------------

/// The peer: blocking send/recv on a TCP_NODELAY socket, buffers touched once.
class plain_end {
 public:
  plain_end(int fd, std::size_t max_bytes) : fd_{fd}, buf_(max_bytes, std::byte{0x5a}) {}
  ~plain_end() { ::close(fd_); }

  double pingpong(std::size_t size, std::size_t iters) {
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < iters; ++i) {
      send_all(size);
      recv_all(size);
    }
    return seconds_since(t0);
  }
  void serve_pingpong(std::size_t size, std::size_t iters) {
    for (std::size_t i = 0; i < iters; ++i) {
      recv_all(size);
      send_all(size);
    }
  }
  double stream(std::size_t size, std::size_t iters) {
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < iters; ++i) send_all(size);
    recv_all(1);
    return seconds_since(t0);
  }
  void serve_stream(std::size_t size, std::size_t iters) {
    for (std::size_t i = 0; i < iters; ++i) recv_all(size);
    send_all(1);
  }

 private:
  void send_all(std::size_t n) {
    for (std::size_t off = 0; off < n;) {
      const auto k = ::send(fd_, buf_.data() + off, n - off, MSG_NOSIGNAL);
      if (k <= 0) die("plain send failed");
      off += static_cast<std::size_t>(k);
    }
  }
  void recv_all(std::size_t n) {
    for (std::size_t off = 0; off < n;) {
      const auto k = ::recv(fd_, buf_.data() + off, n - off, 0);
      if (k <= 0) die("plain recv failed");
      off += static_cast<std::size_t>(k);
    }
  }

  int fd_;
  std::vector<std::byte> buf_;
};

// -- the two processes -------------------------------------------------------------------------

int listen_loopback(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  auto a = io::socket_address::loopback_v4(0);
  if (fd < 0 || ::bind(fd, a.data(), a.length) != 0 || ::listen(fd, 4) != 0) die("listen failed");
  port = io::socket_address::local_of(fd).value().port();
  return fd;
}

int accept_nodelay(int lfd) {
  const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) die("accept failed");
  (void)io::apply_socket_options(fd, {});
  return fd;
}

int connect_nodelay(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto a = io::socket_address::loopback_v4(port);
  (void)io::apply_socket_options(fd, {});
  if (::connect(fd, a.data(), a.length) != 0) die("connect failed");
  return fd;
}

// The responder walks the same schedule, serving each exchange the initiator times.
void respond(const transport_plan& p, int vessel_fd, int plain_fd) {
  vessel_end v{vessel_fd};
  plain_end s{plain_fd, p.max_size()};
  const ab_sides latency{
      [&](std::size_t size, std::size_t iters) { return v.serve_pingpong(size, iters), 0.0; },
      [&](std::size_t size, std::size_t iters) { return s.serve_pingpong(size, iters), 0.0; }};
  const ab_sides bandwidth{
      [&](std::size_t size, std::size_t iters) { return v.serve_stream(size, iters), 0.0; },
      [&](std::size_t size, std::size_t iters) { return s.serve_stream(size, iters), 0.0; }};
  run_schedule(p, latency, bandwidth);
}

void initiate(const transport_plan& p, int vessel_fd, int plain_fd, const bench_options& opts,
              report& out) {
  vessel_end v{vessel_fd};
  plain_end s{plain_fd, p.max_size()};
  const ab_sides latency{
      [&](std::size_t size, std::size_t iters) {
        return half_round_trip_us(v.pingpong(size, iters), iters);
      },
      [&](std::size_t size, std::size_t iters) {
        return half_round_trip_us(s.pingpong(size, iters), iters);
      }};
  const ab_sides bandwidth{
      [&](std::size_t size, std::size_t iters) {
        return gigabytes_per_second(size, iters, v.stream(size, iters));
      },
      [&](std::size_t size, std::size_t iters) {
        return gigabytes_per_second(size, iters, s.stream(size, iters));
      }};
  run_schedule(p, latency, bandwidth, {&out, "tcp", "socket", opts.verbose});
}

int run_transport_tcp(const bench_options& opts, report& out) {
  const auto p = transport_plan::from(opts, fragment_bytes, 5000);
  std::uint16_t vessel_port = 0, plain_port = 0;
  const int vessel_lfd = listen_loopback(vessel_port);
  const int plain_lfd = listen_loopback(plain_port);
  return run_two_processes(
      "tcp",
      [&] {
        ::close(vessel_lfd);
        ::close(plain_lfd);
        respond(p, connect_nodelay(vessel_port), connect_nodelay(plain_port));
      },
      [&] {
        const int vfd = accept_nodelay(vessel_lfd);
        const int pfd = accept_nodelay(plain_lfd);
        ::close(vessel_lfd);
        ::close(plain_lfd);
        initiate(p, vfd, pfd, opts, out);
      });
}

}  // namespace
}  // namespace vessel::bench

VESSEL_BENCH_REGISTER(transport_tcp, "transport", "tcp",
                      "loopback TCP ping-pong latency and streaming bandwidth vs plain sockets",
                      &vessel::bench::run_transport_tcp);
