#pragma once
// Helpers for the shared-memory transport tests: a handler whose callbacks are set per test, a
// side (reactor + transport + handler), channel pairs over a socketpair, and frame checksums.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <dirent.h>
#include <sys/socket.h>

#include "io/reactor.hpp"
#include "io/shm_connector.hpp"
#include "io/shm_transport.hpp"
#include "wire/crc32c.hpp"

namespace vessel::io::shm_test {

/// Forwards the transport's callbacks to functions set by the test; records on_closed.
class handler final : public transport_handler {
 public:
  std::function<void(const wire::frame_header&, std::span<const std::byte>)> frame;
  std::function<void()> writable;
  /// Where a lent payload is read to (transport_handler::payload_destination); unset: nowhere.
  std::function<wire::fragment_place(const wire::frame_header&, std::span<const std::byte>)>
      destination;

  wire::fragment_place payload_destination(const wire::frame_header& h,
                                           std::span<const std::byte> arrived) override {
    return destination ? destination(h, arrived) : wire::fragment_place{};
  }
  void on_frame(const wire::frame_header& h, std::span<const std::byte> payload,
                const buffer_slice&) override {
    if (frame) frame(h, payload);
  }
  void on_writable() override {
    if (writable) writable();
  }
  void on_closed(std::error_code why) override {
    std::lock_guard lock{mutex_};
    closed_ = why;
    cv_.notify_all();
  }

  /// The reason on_closed gave, once it came within `timeout`.
  std::optional<std::error_code> wait_closed(std::chrono::milliseconds timeout) {
    std::unique_lock lock{mutex_};
    cv_.wait_for(lock, timeout, [&] { return closed_.has_value(); });
    return closed_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::optional<std::error_code> closed_;
};

/// Runs `fn` on `r`'s thread and waits for it.
template <class F>
auto run_on(reactor& r, F fn) -> decltype(fn()) {
  std::packaged_task<decltype(fn())()> task{std::move(fn)};
  auto done = task.get_future();
  r.post(std::function<void()>{[&task] { task(); }});
  return done.get();
}

/// One end of a link: its reactor (own thread), handler and transport.
struct side {
  std::unique_ptr<reactor> r = std::make_unique<reactor>();
  handler h;
  std::unique_ptr<shm_transport> t;

  /// Starts the reactor and builds the transport (not started yet).
  void open(shm_channel ch, const shm_config& config) {
    if (auto started = r->start(); !started) throw std::system_error(started.error());
    t = std::make_unique<shm_transport>(*r, std::move(ch), h, config);
  }
  void start() {
    run_on(*r, [this] { t->start(); });
  }
  /// Stops the reactor first (completing the transport's ops), then frees the transport.
  void shutdown() {
    r->stop();
    t.reset();
    r.reset();
  }
  ~side() {
    if (r) shutdown();
  }
};

/// Both ends of a link in this process: the hand-over runs over a socketpair.
inline std::pair<shm_channel, shm_channel> channel_pair(const shm_config& a, const shm_config& b) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw std::system_error(errno, std::system_category(), "socketpair");
  }
  auto accepted = std::async(std::launch::async, [&b, fd = sv[1]] {
    return shm_handshake(shm_fd{fd}, shm_role::acceptor, b);
  });
  auto connected = shm_handshake(shm_fd{sv[0]}, shm_role::connector, a);
  auto acc = accepted.get();
  if (!connected) throw std::system_error(connected.error());
  if (!acc) throw std::system_error(acc.error());
  return {std::move(connected).value(), std::move(acc).value()};
}

/// A deterministic byte pattern, 64 KiB, that frames take slices of.
inline const std::vector<std::byte>& pattern() {
  static const std::vector<std::byte> bytes = [] {
    std::vector<std::byte> v(65536);
    std::uint64_t x = 0x9e3779b97f4a7c15ull;
    for (auto& b : v) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      b = static_cast<std::byte>(x >> 24);
    }
    return v;
  }();
  return bytes;
}

/// An order-sensitive digest of a frame stream: (seq, CRC32C of payload) folded in order.
struct digest {
  std::uint64_t value = 0xcbf29ce484222325ull;
  std::uint64_t frames = 0;
  std::uint64_t bytes = 0;
  void add(std::uint64_t seq, std::uint32_t crc, std::size_t len) noexcept {
    value = (value ^ crc ^ (seq << 32)) * 0x100000001b3ull;
    ++frames;
    bytes += len;
  }
  void add(std::uint64_t seq, std::span<const std::byte> payload) noexcept {
    add(seq, wire::crc32c(payload), payload.size());
  }
};

/// A data header for frame `seq` carrying `len` payload bytes (and their CRC when given).
inline wire::frame_header data_header(std::uint64_t seq, std::size_t len,
                                      std::optional<std::uint32_t> crc = std::nullopt) {
  wire::frame_header h;
  h.seq = seq;
  h.payload_len = static_cast<std::uint32_t>(len);
  h.crc32c = crc;
  wire::data_fields d;
  d.total_len = len;  // one whole message per frame
  h.body = d;
  return h;
}

/// A heartbeat header: the tests' end-of-stream marker.
inline wire::frame_header end_header(std::uint64_t seq) {
  wire::frame_header h;
  h.seq = seq;
  h.body = wire::heartbeat_fields{};
  return h;
}

/// The entries of /dev/shm named like a vessel segment ("vessel-shm", shm_connector.cpp): our
/// segments are memfds and must never show up there. Only those: Open MPI's vader segments come
/// and go there while the suite runs its mpirun tests beside these.
inline std::set<std::string> dev_shm_entries() {
  std::set<std::string> names;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      if (std::string_view{e->d_name}.find("vessel") != std::string_view::npos) {
        names.insert(e->d_name);
      }
    }
    ::closedir(d);
  }
  return names;
}

}  // namespace vessel::io::shm_test
