// vessel-bench transport --transport shm: two processes (fork) over io::shm_transport.
//   pingpong: half round-trip latency, one frame each way, 8 B .. 1 MiB;
//   stream:   one-way bandwidth, back-to-back messages in 1 MiB fragments, then one ack,
//             64 KiB .. 64 MiB. The receiver copies every payload out of shared memory into its
//             own (touched) buffer, as a receive into a user buffer does: the data really ends
//             up in the other process's private memory.
// peer = a single-thread memcpy of the same sizes in the initiating process (touched buffers):
// latency rows compare with one memcpy of `size` bytes, bandwidth rows with memcpy bandwidth.
// Both run in the same invocation, interleaved A B A B, and medians are reported.
// vessel runs on a reactor driven by the bench thread itself (no hand-off, as a link runs its hot
// loop on the reactor: DESIGN.md).

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "io/errc.hpp"
#include "io/reactor.hpp"
#include "io/shm_connector.hpp"
#include "io/shm_transport.hpp"
#include "tools/vessel_bench/modes.hpp"
#include "tools/vessel_bench/report.hpp"

namespace vessel::bench {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::size_t shm_fragment = 1u << 20;  // the decoder's default payload limit

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

// What a frame asks of the responder. The responder is purely reactive (it needs no copy of the
// schedule): the transport may deliver the first frame of the next phase in the same receive
// turn as the last frame of this one, so phase boundaries must travel in the frames.
enum tag : std::uint64_t { tag_ping = 1, tag_stream = 2, tag_stream_end = 3, tag_reply = 4 };

wire::frame_header shm_header(std::uint64_t seq, std::size_t len, tag t) {
  wire::frame_header h;
  h.seq = seq;
  h.payload_len = static_cast<std::uint32_t>(len);
  wire::data_fields d;
  d.total_len = len;
  d.tag = t;
  h.body = d;
  return h;
}

io::shm_config shm_bench_config() {
  io::shm_config c;
  c.ring_bytes = std::size_t{1} << 20;
  c.area_bytes = std::size_t{16} << 20;  // 16 fragments in flight
  return c;
}

/// One end of the vessel link: a reactor driven by this thread and an shm_transport.
class shm_end final : public io::transport_handler {
 public:
  /// `responder`: answer frames from the start (start() may already deliver the first ping).
  shm_end(io::shm_channel ch, std::size_t max_bytes, bool responder)
      : reactor_{config()}, buf_(max_bytes), mode_{responder ? mode::serve : mode::idle} {
    if (auto r = reactor_.start(); !r) fail("reactor: " + r.error().message());
    std::memset(buf_.data(), 0x5a, buf_.size());  // touched once, reused by every frame
    transport_ = std::make_unique<io::shm_transport>(reactor_, std::move(ch), *this,
                                                     shm_bench_config());
    transport_->start();
  }
  ~shm_end() override {
    transport_->close();
    while (!closed_) reactor_.run_once(std::chrono::milliseconds{100});
    transport_.reset();
    reactor_.stop();
  }

  double pingpong(std::size_t size, std::size_t iters) {
    begin(mode::ping, size, iters);
    const auto t0 = clock_type::now();
    send_one(size);
    drive();
    return std::chrono::duration<double>(clock_type::now() - t0).count();
  }
  double stream(std::size_t size, std::size_t iters) {
    begin(mode::stream_tx, size, iters);
    to_send_ = size * iters;
    const auto t0 = clock_type::now();
    pump();
    drive();
    return std::chrono::duration<double>(clock_type::now() - t0).count();
  }
  /// Responder: answers whatever the initiator sends until it closes the link.
  void serve() {
    while (!closed_) {
      reactor_.run_once(std::chrono::nanoseconds::max());
      if (!error_.empty()) fail(error_);
    }
  }

  void on_frame(const wire::frame_header& h, std::span<const std::byte> payload,
                const io::buffer_slice&) override {
    const auto* d = std::get_if<wire::data_fields>(&h.body);
    const std::uint64_t t = d != nullptr ? d->tag : 0;
    if (mode_ == mode::serve) {
      if (t == tag_ping) {
        reply(payload.size());
      } else if (t == tag_stream) {
        // Copy out of shared memory into the receiver's own buffer, at the fragment's offset
        // within its message (fragment_offset travels in the header).
        const std::size_t at = std::min<std::size_t>(d->fragment_offset, buf_.size() - payload.size());
        std::memcpy(buf_.data() + at, payload.data(), payload.size());
      } else if (t == tag_stream_end) {
        reply(0);  // the ack: everything before it has been copied out
      } else {
        error_ = "unexpected frame: kind " + std::to_string(static_cast<int>(h.kind())) + " tag " +
                 std::to_string(t) + " seq " + std::to_string(h.seq) + " len " +
                 std::to_string(payload.size());
      }
      return;
    }
    if (t != tag_reply) {
      error_ = "unexpected frame";
    } else if (mode_ == mode::ping) {
      if (++count_ == iters_) done_ = true;
      else send_one(size_);
    } else if (mode_ == mode::stream_tx) {
      done_ = true;  // the ack
    }
  }
  void on_writable() override {
    if (mode_ == mode::stream_tx) pump();
  }
  void on_closed(std::error_code why) override {
    closed_ = true;
    if (why != io::make_error_code(io::errc::transport_closed) &&
        why != io::make_error_code(io::errc::connection_closed)) {
      error_ = "vessel link ended: " + why.message();
    }
  }

  const io::shm_stats& counters() const { return transport_->shm_counters(); }

 private:
  enum class mode { idle, ping, stream_tx, serve };

  static io::reactor_config config() {
    io::reactor_config c;
    c.own_thread = false;  // this thread drives the loop: no hand-off on the measured path
    return c;
  }

  void begin(mode m, std::size_t size, std::size_t iters) {
    mode_ = m;
    size_ = size;
    iters_ = iters;
    count_ = 0;
    done_ = false;
    to_send_ = 0;
    end_sent_ = false;
  }

  void send_one(std::size_t size) {
    if (auto r = transport_->send_copy(shm_header(seq_++, size, tag_ping), {buf_.data(), size});
        !r) {
      error_ = "send: " + r.error().message();
    }
  }
  void reply(std::size_t size) {
    if (auto r = transport_->send_copy(shm_header(seq_++, size, tag_reply), {buf_.data(), size});
        !r) {
      error_ = "reply: " + r.error().message();
    }
  }

  // Each message goes as frames of at most 1 MiB that never straddle two messages.
  void pump() {
    while (to_send_ > 0 || !end_sent_) {
      result<void> r = outcome::success();
      if (to_send_ == 0) {
        r = transport_->send_copy(shm_header(seq_, 0, tag_stream_end), {});
        if (r) end_sent_ = true;
      } else {
        const std::size_t offset = (size_ * iters_ - to_send_) % size_;
        const std::size_t n = std::min(size_ - offset, shm_fragment);
        auto h = shm_header(seq_, n, tag_stream);
        std::get<wire::data_fields>(h.body).total_len = size_;
        std::get<wire::data_fields>(h.body).fragment_offset = offset;
        r = transport_->send_copy(h, {buf_.data() + offset, n});
        if (r) to_send_ -= n;
      }
      if (!r) {
        if (r.error() == io::make_error_code(io::errc::send_queue_full)) return;  // on_writable
        error_ = "send: " + r.error().message();
        return;
      }
      ++seq_;
    }
  }

  void drive() {
    while (!done_) {
      reactor_.run_once(std::chrono::nanoseconds::max());
      if (!error_.empty()) fail(error_);
      if (closed_) fail("vessel link closed mid-run");
    }
    mode_ = mode::idle;
  }

  io::reactor reactor_;
  std::vector<std::byte> buf_;
  mode mode_ = mode::idle;
  std::unique_ptr<io::shm_transport> transport_;
  std::size_t size_ = 0, iters_ = 0, count_ = 0;
  std::size_t to_send_ = 0;
  bool end_sent_ = false;
  std::uint64_t seq_ = 0;
  bool done_ = false;
  bool closed_ = false;
  std::string error_;
};

/// The peer: one thread copying between two touched buffers.
class memcpy_peer {
 public:
  explicit memcpy_peer(std::size_t max_bytes) : src_(max_bytes), dst_(max_bytes) {
    std::memset(src_.data(), 0x5a, src_.size());
    std::memset(dst_.data(), 0xa5, dst_.size());
  }
  /// Seconds for `iters` copies of `size` bytes.
  double copy(std::size_t size, std::size_t iters) {
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < iters; ++i) {
      std::memcpy(dst_.data(), src_.data(), size);
      // Keep the compiler from merging or dropping the copies.
      asm volatile("" : : "r"(dst_.data()) : "memory");
    }
    return std::chrono::duration<double>(clock_type::now() - t0).count();
  }

 private:
  std::vector<std::byte> src_, dst_;
};

struct shm_plan {
  std::vector<std::size_t> latency_sizes;
  std::vector<std::size_t> bandwidth_sizes;
  std::size_t runs = 5;
  std::size_t fixed_iterations = 0;

  std::size_t latency_iters(std::size_t size) const {
    if (fixed_iterations) return fixed_iterations;
    return size <= 4096 ? 20000 : std::max<std::size_t>(64, (64u << 20) / size);
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

void respond(const shm_plan& p, io::shm_channel ch) {
  shm_end v{std::move(ch), p.max_size(), true};
  v.serve();
}

void initiate(const shm_plan& p, io::shm_channel ch, const bench_options& opts, report& out) {
  shm_end v{std::move(ch), p.max_size(), false};
  memcpy_peer m{p.max_size()};
  const auto add = [&](const char* bench, std::size_t size, const char* metric,
                       std::vector<double>& mine, std::vector<double>& theirs) {
    if (opts.verbose) {
      std::fprintf(stderr, "shm %s %zu B %s:", bench, size, metric);
      for (std::size_t i = 0; i < mine.size(); ++i)
        std::fprintf(stderr, " %.3f/%.3f", mine[i], theirs[i]);
      std::fprintf(stderr, "  (vessel/memcpy)\n");
    }
    out.add({bench, "shm", 2, size, metric, median(mine), "memcpy", median(theirs)});
  };
  for (auto size : p.latency_sizes) {
    const auto iters = p.latency_iters(size);
    v.pingpong(size, iters / 10 + 1);
    m.copy(size, iters / 10 + 1);
    std::vector<double> mine, theirs;
    for (std::size_t r = 0; r < p.runs; ++r) {
      // Half a round trip against one copy of the same size, in microseconds.
      mine.push_back(v.pingpong(size, iters) / static_cast<double>(iters) / 2 * 1e6);
      theirs.push_back(m.copy(size, iters) / static_cast<double>(iters) * 1e6);
    }
    add("pingpong", size, "latency", mine, theirs);
  }
  for (auto size : p.bandwidth_sizes) {
    const auto iters = p.bandwidth_iters(size);
    v.stream(size, 1);
    m.copy(size, 1);
    std::vector<double> mine, theirs;
    const double bytes = static_cast<double>(size) * static_cast<double>(iters);
    for (std::size_t r = 0; r < p.runs; ++r) {
      mine.push_back(bytes / v.stream(size, iters) / 1e9);
      theirs.push_back(bytes / m.copy(size, iters) / 1e9);
    }
    add("stream", size, "bandwidth", mine, theirs);
  }
  if (opts.verbose) {
    const auto& c = v.counters();
    std::fprintf(stderr,
                 "shm initiator: spin hits %llu, sleeps %llu, wake-ups sent %llu, watchdog %llu\n",
                 static_cast<unsigned long long>(c.spin_hits),
                 static_cast<unsigned long long>(c.sleeps),
                 static_cast<unsigned long long>(c.wakeups_sent),
                 static_cast<unsigned long long>(c.watchdog_recoveries));
  }
}

int run_transport_shm(const bench_options& opts, report& out) {
  shm_plan p;
  p.runs = opts.runs;
  p.fixed_iterations = opts.iterations;
  if (opts.sizes.empty()) {
    for (std::size_t s = 8; s <= (1u << 20); s *= 8) p.latency_sizes.push_back(s);
    if (p.latency_sizes.back() != (1u << 20)) p.latency_sizes.push_back(1u << 20);
    for (std::size_t s = 64u << 10; s <= (64u << 20); s *= 4) p.bandwidth_sizes.push_back(s);
  } else {
    for (auto s : opts.sizes) {
      if (s <= shm_fragment) p.latency_sizes.push_back(s);  // one frame each way
      if (s >= (64u << 10)) p.bandwidth_sizes.push_back(s);
    }
  }

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    std::fprintf(stderr, "vessel-bench: socketpair failed\n");
    return 1;
  }
  std::fflush(nullptr);
  const pid_t child = ::fork();  // before any reactor thread exists
  if (child < 0) return 1;
  if (child == 0) {
    int rc = 0;
    try {
      ::close(sv[0]);
      auto ch = io::shm_handshake(io::shm_fd{sv[1]}, io::shm_role::connector, shm_bench_config());
      if (!ch) fail("handshake: " + ch.error().message());
      respond(p, std::move(ch).value());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "vessel-bench shm (responder): %s\n", e.what());
      rc = 1;
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  ::close(sv[1]);
  int rc = 0;
  try {
    auto ch = io::shm_handshake(io::shm_fd{sv[0]}, io::shm_role::acceptor, shm_bench_config());
    if (!ch) fail("handshake: " + ch.error().message());
    initiate(p, std::move(ch).value(), opts, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vessel-bench shm (initiator): %s\n", e.what());
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

VESSEL_BENCH_REGISTER(transport_shm, "transport", "shm",
                      "shared-memory ping-pong latency and streaming bandwidth vs memcpy",
                      &vessel::bench::run_transport_shm);
