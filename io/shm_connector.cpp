#include "io/shm_connector.hpp"

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "io/errc.hpp"
#include "io/shm_ring.hpp"

namespace vessel::io {
namespace {

std::error_code last_errno() noexcept { return {errno, std::system_category()}; }

/// The one message each side sends, with [segment memfd, wake eventfd] attached.
struct hello_message {
  std::uint64_t magic = shm::segment_magic;
  std::uint32_t version = shm::layout_version;
  std::uint32_t pid = 0;  ///< for diagnostics only
  std::uint64_t segment_bytes = 0;
};

// Abstract namespace: sun_path[0] == '\0'; the name is the remaining bytes, not NUL-terminated.
result<socklen_t> abstract_address(std::string_view name, sockaddr_un& addr) noexcept {
  constexpr std::string_view prefix = "vessel-shm/";
  addr = {};
  addr.sun_family = AF_UNIX;
  if (1 + prefix.size() + name.size() > sizeof addr.sun_path) {
    return make_error_code(std::errc::filename_too_long);
  }
  std::memcpy(addr.sun_path + 1, prefix.data(), prefix.size());
  std::memcpy(addr.sun_path + 1 + prefix.size(), name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + prefix.size() + name.size());
}

// Under shadow paging (a PVM guest, as these VMs are) the first access to each page of a
// mapping traps to the hypervisor, however the kernel populated it: ~1.3 µs for a read, ~4-5 µs
// for a write, then ~10 ns. The pages of a link are touched here, off the data path.
constexpr std::size_t touch_stride = 4096;

// Reads one byte of every page of [p, p + bytes): for memory this side only reads.
void touch_pages_for_reading(const std::byte* p, std::size_t bytes) noexcept {
  std::uint8_t seen = 0;
  for (std::size_t at = 0; at < bytes; at += touch_stride) {
    seen |= *reinterpret_cast<const volatile std::uint8_t*>(p + at);
  }
  asm volatile("" : : "r"(seen));  // the loads happen even where the compiler could drop them
}

// Writes every page of [p, p + bytes) without changing it: an atomic OR of 0 into its first word,
// since the peer may already be writing records there (p page aligned).
void touch_pages_for_writing(std::byte* p, std::size_t bytes) noexcept {
  for (std::size_t at = 0; at < bytes; at += touch_stride) {
    std::atomic_ref<std::uint64_t>{*reinterpret_cast<std::uint64_t*>(p + at)}.fetch_or(
        0, std::memory_order_relaxed);
  }
}

// Creates the segment we send on and writes its header and zeroed control words.
result<shm_segment> create_tx_segment(const shm_config& config) noexcept {
  if (!std::has_single_bit(config.ring_bytes) || !std::has_single_bit(config.area_bytes) ||
      config.ring_bytes < 4096 || config.area_bytes < 4096) {
    return make_error_code(std::errc::invalid_argument);
  }
  VESSEL_TRY(seg, shm_segment::create("vessel-shm",
                                           shm::segment_bytes(config.ring_bytes, config.area_bytes)));
  auto* header = new (seg.data()) shm::segment_header{};
  header->magic = shm::segment_magic;
  header->version = shm::layout_version;
  header->ring_bytes = config.ring_bytes;
  header->area_bytes = config.area_bytes;
  // Whoever reads a payload we lend checks these first (cross_memory.hpp).
  const process_token_offer self = this_process_token();
  header->creator_pid = static_cast<std::uint32_t>(self.pid);
  header->creator_token_address = self.token_address;
  header->creator_token[0] = self.token.words[0];
  header->creator_token[1] = self.token.words[1];
  new (seg.data() + shm::cache_line) shm::ring_control{};
  // Written once here, before the peer sees it: the ring and the area start in this core's
  // caches and mapped for writing (touch_stride's comment). A cold first pass cost a new link's
  // first ~10k small messages up to 1.7x, and 2 KiB messages 4x, their later cost.
  std::memset(seg.data() + shm::ring_offset, 0, config.ring_bytes + config.area_bytes);
  return seg;
}

// Maps the peer's segment and checks that its geometry is one we can trust. The geometry is
// read once, here, and kept in the channel: the header stays writable by the peer.
result<shm_segment> adopt_rx_segment(shm_fd fd, std::uint64_t announced, const shm_config& config,
                                     shm_channel& ch) noexcept {
  VESSEL_TRY(seg, shm_segment::adopt(std::move(fd), shm::segment_bytes(4096, 4096),
                                          config.max_peer_segment_bytes));
  shm::segment_header h{};
  std::memcpy(&h, seg.data(), sizeof h);  // a snapshot: the peer may scribble on the original
  const bool ok = h.magic == shm::segment_magic && h.version == shm::layout_version &&
                  std::has_single_bit(h.ring_bytes) && std::has_single_bit(h.area_bytes) &&
                  h.ring_bytes >= 4096 && h.area_bytes >= 4096 &&
                  h.ring_bytes <= seg.size() && h.area_bytes <= seg.size() &&
                  shm::segment_bytes(h.ring_bytes, h.area_bytes) <= seg.size() &&
                  announced == seg.size();
  if (!ok) return errc::handshake_failed;
  ch.rx_ring_bytes = h.ring_bytes;
  ch.rx_area_bytes = h.area_bytes;
  ch.rx_lender.pid = static_cast<pid_t>(h.creator_pid);
  ch.rx_lender.token_address = h.creator_token_address;
  ch.rx_lender.token.words = {h.creator_token[0], h.creator_token[1]};
  // The receiver reads the area and clears the ring's lines as it consumes them (a 2 KiB
  // message through an untouched area: 7.3 µs against 1.5; docs/io_performance.md).
  touch_pages_for_writing(seg.data() + shm::ring_offset, h.ring_bytes);
  touch_pages_for_reading(seg.data() + shm::ring_offset + h.ring_bytes, h.area_bytes);
  return seg;
}

result<void> send_hello(int socket, const shm_segment& tx, int wake_in) noexcept {
  hello_message hello;
  hello.pid = static_cast<std::uint32_t>(::getpid());
  hello.segment_bytes = tx.size();
  const int fds[2] = {tx.fd(), wake_in};
  return send_with_fds(socket, std::as_bytes(std::span{&hello, 1}), fds);
}

struct peer_hello {
  shm_fd segment;
  shm_fd wake;
  std::uint64_t segment_bytes = 0;
};

result<peer_hello> recv_hello(int socket, int timeout_ms) noexcept {
  hello_message hello;
  int fds[2] = {-1, -1};
  VESSEL_TRY(nfds, recv_with_fds(socket, std::as_writable_bytes(std::span{&hello, 1}), fds,
                                      timeout_ms));
  peer_hello out{shm_fd{nfds > 0 ? fds[0] : -1}, shm_fd{nfds > 1 ? fds[1] : -1},
                 hello.segment_bytes};
  if (nfds != 2 || hello.magic != shm::segment_magic || hello.version != shm::layout_version) {
    return errc::handshake_failed;
  }
  return out;
}

}  // namespace

std::string shm_config::to_string() const {
  return "ring_bytes=" + std::to_string(ring_bytes) + " area_bytes=" + std::to_string(area_bytes) +
         " inline_max=" + std::to_string(inline_max) + " lend_min=" + std::to_string(lend_min) +
         " max_spin_ns=" + std::to_string(max_spin.count()) +
         " max_peer_segment_bytes=" + std::to_string(max_peer_segment_bytes) +
         " handshake_timeout_ms=" + std::to_string(handshake_timeout.count()) +
         " max_payload_bytes=" + std::to_string(limits.max_payload_bytes);
}

result<shm_channel> shm_handshake(shm_fd socket, shm_role role, const shm_config& config) noexcept {
  if (config.inline_max + 2 * wire::max_encoded_header_bytes > config.ring_bytes / 4) {
    return make_error_code(std::errc::invalid_argument);
  }
  const int timeout_ms = static_cast<int>(config.handshake_timeout.count());
  shm_channel ch;
  {
    auto tx = create_tx_segment(config);
    if (!tx) return tx.error();
    ch.tx = std::move(tx).value();
  }
  ch.tx_ring_bytes = config.ring_bytes;
  ch.tx_area_bytes = config.area_bytes;
  // Blocking: io_uring reads a blocking eventfd through its poll path; a non-blocking one would
  // complete a READ at once with -EAGAIN.
  ch.wake_in = shm_fd{::eventfd(0, EFD_CLOEXEC)};
  if (!ch.wake_in) return last_errno();

  if (role == shm_role::connector) {
    VESSEL_TRY(send_hello(socket.get(), ch.tx, ch.wake_in.get()));
  }
  auto peer = recv_hello(socket.get(), timeout_ms);
  if (!peer) return peer.error();
  if (role == shm_role::acceptor) {
    VESSEL_TRY(send_hello(socket.get(), ch.tx, ch.wake_in.get()));
  }
  auto rx = adopt_rx_segment(std::move(peer.value().segment), peer.value().segment_bytes, config, ch);
  if (!rx) return rx.error();
  ch.rx = std::move(rx).value();
  ch.wake_out = std::move(peer.value().wake);
  // The mappings keep both segments alive; holding the memfds would only cost descriptors.
  ch.tx.close_fd();
  ch.rx.close_fd();
  ch.socket = std::move(socket);
  return ch;
}

result<shm_listener> shm_listener::listen(std::string_view name) noexcept {
  sockaddr_un addr{};
  VESSEL_TRY(len, abstract_address(name, addr));
  shm_fd fd{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (!fd) return last_errno();
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) return last_errno();
  if (::listen(fd.get(), 16) != 0) return last_errno();
  shm_listener l;
  l.fd_ = std::move(fd);
  return l;
}

result<shm_channel> shm_listener::accept(const shm_config& config) noexcept {
  pollfd p{fd_.get(), POLLIN, 0};
  int ready = 0;
  do {
    ready = ::poll(&p, 1, static_cast<int>(config.handshake_timeout.count()));
  } while (ready < 0 && errno == EINTR);
  if (ready < 0) return last_errno();
  if (ready == 0) return errc::connect_timeout;
  shm_fd conn{::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC)};
  if (!conn) return last_errno();
  return shm_handshake(std::move(conn), shm_role::acceptor, config);
}

result<shm_channel> shm_connect(std::string_view name, const shm_config& config) noexcept {
  sockaddr_un addr{};
  VESSEL_TRY(len, abstract_address(name, addr));
  shm_fd fd{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (!fd) return last_errno();
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    return error_from_errno(-errno);
  }
  return shm_handshake(std::move(fd), shm_role::connector, config);
}

}  // namespace vessel::io
