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
#include "tools/vessel_bench/driven_end.hpp"
#include "tools/vessel_bench/modes.hpp"
#include "tools/vessel_bench/report.hpp"
#include "tools/vessel_bench/transport_driver.hpp"

namespace vessel::bench {
namespace {

constexpr std::size_t shm_fragment = 1u << 20;  // the decoder's default payload limit

[[noreturn]] void fail(const std::string& what) { bench_fail(what); }

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

/// One end of the vessel link: an shm_transport on a driven reactor. Either side may end the
/// run by closing.
class shm_end final : public driven_end {
 public:
  /// `responder`: answer frames from the start (start() may already deliver the first ping).
  shm_end(io::shm_channel ch, std::size_t max_bytes, bool responder)
      : driven_end{true}, buf_(max_bytes), mode_{responder ? mode::serve : mode::idle} {
    std::memset(buf_.data(), 0x5a, buf_.size());  // touched once, reused by every frame
    transport_ = std::make_unique<io::shm_transport>(reactor_, std::move(ch), *this,
                                                     shm_bench_config());
    transport_->start();
  }
  ~shm_end() override {
    shutdown(*transport_);
    transport_.reset();
    reactor_.stop();
  }

  /// pingpong() with the time of every round trip kept; returns half round trips in us, sorted.
  /// One clock read per reply: for the percentiles only, never for the medians.
  std::vector<double> pingpong_each(std::size_t size, std::size_t iters) {
    stamps_.clear();
    stamps_.reserve(iters + 1);
    stamps_.push_back(clock_type::now());
    record_ = true;
    pingpong(size, iters);
    record_ = false;
    std::vector<double> half_trips;
    for (std::size_t i = 1; i < stamps_.size(); ++i) {
      const std::chrono::duration<double, std::micro> trip = stamps_[i] - stamps_[i - 1];
      half_trips.push_back(trip.count() / 2);
    }
    std::sort(half_trips.begin(), half_trips.end());
    return half_trips;
  }

  double pingpong(std::size_t size, std::size_t iters) {
    begin(mode::ping, size, iters);
    return exchange([&] { send_one(size); });
  }
  double stream(std::size_t size, std::size_t iters) {
    begin(mode::stream_tx, size, iters);
    to_send_ = size * iters;
    return exchange([&] { pump(); });
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
      if (record_) stamps_.push_back(clock_type::now());
      if (++count_ == iters_) done_ = true;
      else send_one(size_);
    } else if (mode_ == mode::stream_tx) {
      done_ = true;  // the ack
    }
  }
  void on_writable() override {
    if (mode_ == mode::stream_tx) pump();
  }

  const io::shm_stats& counters() const { return transport_->shm_counters(); }

 private:
  enum class mode { idle, ping, stream_tx, serve };

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

  // Seconds from `kick` until the initiator has its last reply or ack.
  template <class Kick>
  double exchange(Kick kick) {
    const double secs = timed(kick, [this] { return done_; });
    mode_ = mode::idle;
    return secs;
  }

  std::vector<std::byte> buf_;
  std::vector<clock_type::time_point> stamps_;  // pingpong_each(): the start, then every reply
  bool record_ = false;
  mode mode_ = mode::idle;
  std::unique_ptr<io::shm_transport> transport_;
  std::size_t size_ = 0, iters_ = 0, count_ = 0;
  std::size_t to_send_ = 0;
  bool end_sent_ = false;
  std::uint64_t seq_ = 0;
  bool done_ = false;
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
    return seconds_since(t0);
  }

 private:
  std::vector<std::byte> src_, dst_;
};

void initiate(const transport_plan& p, io::shm_channel ch, const bench_options& opts,
              report& out) {
  shm_end v{std::move(ch), p.max_size(), false};
  memcpy_peer m{p.max_size()};
  const ab_sides latency{
      [&](std::size_t size, std::size_t iters) {
        return half_round_trip_us(v.pingpong(size, iters), iters);
      },
      // Against one copy of the same size, in microseconds.
      [&](std::size_t size, std::size_t iters) {
        return m.copy(size, iters) / static_cast<double>(iters) * 1e6;
      }};
  const ab_sides bandwidth{
      [&](std::size_t size, std::size_t iters) {
        return gigabytes_per_second(size, iters, v.stream(size, iters));
      },
      [&](std::size_t size, std::size_t iters) {
        return gigabytes_per_second(size, iters, m.copy(size, iters));
      }};
  run_schedule(p, latency, bandwidth, {&out, "shm", "memcpy", opts.verbose});
  if (opts.verbose) {
    // The spread of single round trips (the table has medians of whole runs).
    for (auto size : p.latency_sizes) {
      const auto each = v.pingpong_each(size, p.latency_iters(size));
      const auto at = [&](double q) {
        return each[static_cast<std::size_t>(q * static_cast<double>(each.size() - 1))];
      };
      std::fprintf(stderr,
                   "shm pingpong %zu B, single half round trips: p50 %.3f us, p99 %.3f us, "
                   "max %.3f us (%zu)\n",
                   size, at(0.5), at(0.99), each.back(), each.size());
    }
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
  const auto p = transport_plan::from(opts, shm_fragment, 20000);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    std::fprintf(stderr, "vessel-bench: socketpair failed\n");
    return 1;
  }
  // The responder is purely reactive: it needs no copy of the schedule.
  return run_two_processes(
      "shm",
      [&] {
        ::close(sv[0]);
        auto ch = io::shm_handshake(io::shm_fd{sv[1]}, io::shm_role::connector, shm_bench_config());
        if (!ch) fail("handshake: " + ch.error().message());
        shm_end v{std::move(ch).value(), p.max_size(), true};
        v.serve();
      },
      [&] {
        ::close(sv[1]);
        auto ch = io::shm_handshake(io::shm_fd{sv[0]}, io::shm_role::acceptor, shm_bench_config());
        if (!ch) fail("handshake: " + ch.error().message());
        initiate(p, std::move(ch).value(), opts, out);
      });
}

}  // namespace
}  // namespace vessel::bench

VESSEL_BENCH_REGISTER(transport_shm, "transport", "shm",
                      "shared-memory ping-pong latency and streaming bandwidth vs memcpy",
                      &vessel::bench::run_transport_shm);
