// vessel-bench transport --transport tcp: two processes (fork) over loopback TCP.
//   pingpong: half round-trip latency, one frame each way, 8 B .. 1 MiB;
//   stream:   one-way bandwidth, back-to-back messages (1 MiB fragments) then one ack, 64 KiB .. 64 MiB.
// vessel = io::tcp_transport on a reactor driven by the bench thread itself (no hand-off, as a link
// runs its hot loop on the reactor: DESIGN.md); peer = plain blocking sockets doing the same
// exchange. Both run in the same invocation, interleaved A B A B, and medians are reported.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
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
#include "tools/vessel_bench/modes.hpp"
#include "tools/vessel_bench/report.hpp"

namespace vessel::bench {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::size_t fragment_bytes = 1u << 20;  // the decoder's default payload limit

[[noreturn]] void die(const std::string& what) { throw std::runtime_error(what); }

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

/// One end of the vessel connection: a reactor driven by this thread and a tcp_transport.
class vessel_end final : public io::transport_handler {
 public:
  explicit vessel_end(int fd)
      : reactor_{config()}, pool_{io::buffer_pool_config{{{fragment_bytes, 4}}, true}} {
    if (auto r = reactor_.start(); !r) die("reactor: " + r.error().message());
    block_ = pool_.try_acquire(fragment_bytes);
    std::memset(block_.data(), 0x5a, block_.size());  // touched once, reused by every frame
    transport_ = std::make_unique<io::tcp_transport>(reactor_, fd, *this);
    transport_->start();
  }
  ~vessel_end() override {
    transport_->close();
    while (!closed_) reactor_.run_once(std::chrono::milliseconds{100});
    transport_.reset();
    block_.reset();
    reactor_.stop();
  }

  /// Initiator: `iters` round trips of `size` bytes; returns seconds.
  double pingpong(std::size_t size, std::size_t iters) {
    begin(mode::ping, size, iters);
    const auto t0 = clock_type::now();
    send_one(size);
    drive();
    return std::chrono::duration<double>(clock_type::now() - t0).count();
  }
  /// Responder: echoes `iters` frames.
  void serve_pingpong(std::size_t size, std::size_t iters) {
    begin(mode::pong, size, iters);
    drive();
  }
  /// Sender: `iters` messages of `size` bytes in 1 MiB fragments, until the receiver's ack.
  double stream(std::size_t size, std::size_t iters) {
    begin(mode::stream_tx, size, iters);
    to_send_ = size * iters;
    const auto t0 = clock_type::now();
    pump();
    drive();
    return std::chrono::duration<double>(clock_type::now() - t0).count();
  }
  /// Receiver: takes size * iters bytes, then acks.
  void serve_stream(std::size_t size, std::size_t iters) {
    begin(mode::stream_rx, size, iters);
    to_receive_ = size * iters;
    drive();
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
  void on_closed(std::error_code why) override {
    // Handlers run inside the reactor's completion loop: record, and let drive() report it.
    closed_ = true;
    if (why != io::make_error_code(io::errc::transport_closed))
      error_ = "vessel connection ended: " + why.message();
  }

 private:
  enum class mode { idle, ping, pong, stream_tx, stream_rx };

  static io::reactor_config config() {
    io::reactor_config c;
    c.own_thread = false;  // this thread drives the loop: no hand-off on the measured path
    // SEND_ZC is left to tcp_transport, which never uses it towards a loopback peer (it halved
    // this bench's bandwidth there). busy_poll stays off (the reactor's default): on these
    // 2-core machines a spinning end steals the core its peer needs to reply.
    return c;
  }

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

  // Runs the loop until the exchange is over and our last frame is on the wire (the peer then
  // switches to the plain-socket phase, where nothing would flush it).
  void drive() {
    while (!done_ || transport_->queued_bytes() > 0) {
      // No deadline: a timed wait arms an hrtimer per turn. A dead peer ends the wait anyway
      // (the recv completes with EOF or a reset).
      reactor_.run_once(std::chrono::nanoseconds::max());
      if (!error_.empty()) die(error_);
      if (closed_) die("vessel connection closed mid-run");
    }
    mode_ = mode::idle;
  }

  io::reactor reactor_;
  io::buffer_pool pool_;
  io::buffer block_;
  std::unique_ptr<io::tcp_transport> transport_;
  mode mode_ = mode::idle;
  std::size_t size_ = 0, iters_ = 0, count_ = 0;
  std::size_t to_send_ = 0, to_receive_ = 0, received_ = 0;
  std::uint64_t seq_ = 0;
  bool done_ = false;
  bool closed_ = false;
  std::string error_;  // set by a handler, thrown by drive()
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
    return std::chrono::duration<double>(clock_type::now() - t0).count();
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
    return std::chrono::duration<double>(clock_type::now() - t0).count();
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

// -- the schedule both processes follow --------------------------------------------------------

struct plan {
  std::vector<std::size_t> latency_sizes;
  std::vector<std::size_t> bandwidth_sizes;
  std::size_t runs = 5;
  std::size_t fixed_iterations = 0;

  std::size_t latency_iters(std::size_t size) const {
    if (fixed_iterations) return fixed_iterations;
    return size <= 4096 ? 5000 : std::max<std::size_t>(64, (64u << 20) / size);
  }
  std::size_t bandwidth_iters(std::size_t size) const {
    if (fixed_iterations) return fixed_iterations;
    return std::max<std::size_t>(4, (256u << 20) / size);  // ~256 MiB per run
  }
  std::size_t max_size() const {
    std::size_t m = 1;
    for (auto s : latency_sizes) m = std::max(m, s);
    for (auto s : bandwidth_sizes) m = std::max(m, s);
    return m;
  }
};

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

// The responder: mirrors the initiator's loop exactly.
void respond(const plan& p, int vessel_fd, int plain_fd) {
  vessel_end v{vessel_fd};
  plain_end s{plain_fd, p.max_size()};
  for (auto size : p.latency_sizes) {
    const auto iters = p.latency_iters(size);
    v.serve_pingpong(size, iters / 10 + 1);  // warm-up
    s.serve_pingpong(size, iters / 10 + 1);
    for (std::size_t r = 0; r < p.runs; ++r) {
      v.serve_pingpong(size, iters);
      s.serve_pingpong(size, iters);
    }
  }
  for (auto size : p.bandwidth_sizes) {
    const auto iters = p.bandwidth_iters(size);
    v.serve_stream(size, 1);  // warm-up
    s.serve_stream(size, 1);
    for (std::size_t r = 0; r < p.runs; ++r) {
      v.serve_stream(size, iters);
      s.serve_stream(size, iters);
    }
  }
}

void initiate(const plan& p, int vessel_fd, int plain_fd, const bench_options& opts, report& out) {
  vessel_end v{vessel_fd};
  plain_end s{plain_fd, p.max_size()};
  const auto add = [&](const char* bench, std::size_t size, const char* metric,
                       std::vector<double>& mine, std::vector<double>& theirs) {
    if (opts.verbose) {
      std::fprintf(stderr, "%s %zu B %s:", bench, size, metric);
      for (std::size_t i = 0; i < mine.size(); ++i)
        std::fprintf(stderr, " %.3f/%.3f", mine[i], theirs[i]);
      std::fprintf(stderr, "  (vessel/socket)\n");
    }
    out.add({bench, "tcp", 2, size, metric, median(mine), "socket", median(theirs)});
  };
  for (auto size : p.latency_sizes) {
    const auto iters = p.latency_iters(size);
    v.pingpong(size, iters / 10 + 1);
    s.pingpong(size, iters / 10 + 1);
    std::vector<double> mine, theirs;
    for (std::size_t r = 0; r < p.runs; ++r) {
      // Half a round trip, in microseconds.
      mine.push_back(v.pingpong(size, iters) / static_cast<double>(iters) / 2 * 1e6);
      theirs.push_back(s.pingpong(size, iters) / static_cast<double>(iters) / 2 * 1e6);
    }
    add("pingpong", size, "latency", mine, theirs);
  }
  for (auto size : p.bandwidth_sizes) {
    const auto iters = p.bandwidth_iters(size);
    v.stream(size, 1);
    s.stream(size, 1);
    std::vector<double> mine, theirs;
    const double bytes = static_cast<double>(size) * static_cast<double>(iters);
    for (std::size_t r = 0; r < p.runs; ++r) {
      mine.push_back(bytes / v.stream(size, iters) / 1e9);
      theirs.push_back(bytes / s.stream(size, iters) / 1e9);
    }
    add("stream", size, "bandwidth", mine, theirs);
  }
}

int run_transport_tcp(const bench_options& opts, report& out) {
  plan p;
  p.runs = opts.runs;
  p.fixed_iterations = opts.iterations;
  if (opts.sizes.empty()) {
    for (std::size_t s = 8; s <= (1u << 20); s *= 8) p.latency_sizes.push_back(s);
    if (p.latency_sizes.back() != (1u << 20)) p.latency_sizes.push_back(1u << 20);
    for (std::size_t s = 64u << 10; s <= (64u << 20); s *= 4) p.bandwidth_sizes.push_back(s);
  } else {
    for (auto s : opts.sizes) {
      if (s <= fragment_bytes) p.latency_sizes.push_back(s);  // one frame each way
      if (s >= (64u << 10)) p.bandwidth_sizes.push_back(s);
    }
  }

  std::uint16_t vessel_port = 0, plain_port = 0;
  const int vessel_lfd = listen_loopback(vessel_port);
  const int plain_lfd = listen_loopback(plain_port);
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) die("fork failed");
  if (child == 0) {
    int rc = 0;
    try {
      ::close(vessel_lfd);
      ::close(plain_lfd);
      respond(p, connect_nodelay(vessel_port), connect_nodelay(plain_port));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "vessel-bench (responder): %s\n", e.what());
      rc = 1;
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  int rc = 0;
  try {
    const int vfd = accept_nodelay(vessel_lfd);
    const int pfd = accept_nodelay(plain_lfd);
    ::close(vessel_lfd);
    ::close(plain_lfd);
    initiate(p, vfd, pfd, opts, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vessel-bench (initiator): %s\n", e.what());
    ::kill(child, SIGKILL);
    rc = 1;
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  return rc;
}

}  // namespace
}  // namespace vessel::bench

VESSEL_BENCH_REGISTER(transport_tcp, "transport", "tcp",
                      "loopback TCP ping-pong latency and streaming bandwidth vs plain sockets",
                      &vessel::bench::run_transport_tcp);
