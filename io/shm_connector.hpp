#pragma once
// Establishing a shared-memory link between two processes on one host.
//
// The two sides meet on an AF_UNIX stream socket: a listener on an abstract-namespace address
// (no file is ever created, so nothing is left behind when a process dies), or one end of a
// socketpair handed to a child. Each side then creates the segment it will SEND on plus the
// eventfd the peer must write to wake it, and passes both descriptors with SCM_RIGHTS: the
// connecting side first, the accepting side in reply. The socket stays connected afterwards: its
// EOF is how each side learns that the other has gone (io/shm_transport.hpp).
//
// These calls block (bounded by shm_config::handshake_timeout): they run once per link, at
// set-up, off the data path. TODO(perf): drive them on the reactor if links come and go often.

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "io/cross_memory.hpp"
#include "io/shm_segment.hpp"
#include "wire/frame_codec.hpp"
#include "wire/result.hpp"

namespace vessel::io {

/// Sizes and timings of a shared-memory link. Every key with its default; printable.
struct shm_config {
  /// Frame-ring bytes of the direction we send on (power of two): records of small frames and
  /// descriptors of large ones. 128 KiB holds 1,024 records of an 8-byte message (two lines
  /// each), what a mesh link's credit lets in flight anyway (4 MiB window, 4 KiB a message).
  /// Small enough to stay in the core's cache: over a 1 MiB ring an 8-byte p2p took 1.24-1.28 µs
  /// for its first ~10k messages against 0.90-0.97 here (docs/io_performance.md).
  std::size_t ring_bytes = std::size_t{1} << 17;
  /// Payload-area bytes of the direction we send on (power of two): large payloads are written
  /// there once and read in place. A record takes at most half of it, so it must be at least
  /// twice the largest payload we send (a mesh fragment: 256 KiB), rounded to 64 bytes. Small
  /// enough to stay in the last-level cache: the receiver frees each payload as soon as it is
  /// copied out, so a larger area only makes the sender write lines gone cold (16 MiB: a 1 MiB
  /// allreduce over shm at 4.5-4.9 GB/s, 4 MiB: 6.5-9.1; docs/io_performance.md).
  std::size_t area_bytes = std::size_t{4} << 20;
  /// Payloads up to this size travel inside the ring record; larger ones go to the payload area.
  std::size_t inline_max = 2048;
  /// A payload part of at least this many bytes, sent from a pooled block (send, send_parts), is
  /// lent instead of copied into the payload area: the record names it in our memory, the peer
  /// reads it straight into where it lands (process_vm_readv: one copy where the area costs two;
  /// from 64 KiB we write its back half into the peer's memory meanwhile, process_vm_writev),
  /// and the block is held until the peer has consumed the record. 0 lends nothing. The peer
  /// says whether it can read our memory at all (its first read checks our token); where it
  /// cannot, everything goes through the area as before. The mesh sets this where a split copy
  /// pays (io/single_copy_probe.hpp; VESSEL_SHM_LEND_BYTES).
  std::size_t lend_min = 0;
  /// Longest the receiver spins on an empty ring before it sleeps on its eventfd. An eventfd
  /// wake-up costs 5-8 µs on these VMs (DEPENDENCIES.md §7: 10-15 µs per round trip), so waiting
  /// a little longer than that for the next frame is cheaper than sleeping; Aeron's
  /// BackoffIdleStrategy spins for the same reason. Adaptive: see shm_transport.cpp.
  std::chrono::nanoseconds max_spin = std::chrono::microseconds{40};
  /// Largest segment accepted from a peer.
  std::size_t max_peer_segment_bytes = std::size_t{4} << 30;
  /// Bound on each blocking step of the hand-over.
  std::chrono::milliseconds handshake_timeout{5000};
  /// Bounds the receiver enforces on the peer's frames (header size, payload size).
  wire::decoder_limits limits{};

  std::string to_string() const;
};

/// What a completed hand-over yields; shm_transport takes it over.
struct shm_channel {
  shm_fd socket;     ///< stays connected: EOF on it means the peer has gone
  shm_segment tx;    ///< the segment we send on (we created it)
  shm_segment rx;    ///< the segment the peer sends on
  shm_fd wake_in;    ///< our eventfd: the peer writes it, our reactor reads it
  shm_fd wake_out;   ///< the peer's eventfd: we write it when the peer sleeps
  std::size_t tx_ring_bytes = 0;  ///< our frame-ring capacity
  std::size_t tx_area_bytes = 0;  ///< our payload-area capacity
  std::size_t rx_ring_bytes = 0;  ///< the peer's frame-ring capacity, validated at hand-over
  std::size_t rx_area_bytes = 0;  ///< the peer's payload-area capacity, validated at hand-over
  /// The process that created the peer's segment, as its header names it: where the payloads
  /// it lends are read from. Unchecked here: the first read checks the token (shm_transport).
  process_token_offer rx_lender;
};

/// Which side of the hand-over this is: the connector speaks first.
enum class shm_role { connector, acceptor };

/// Runs the hand-over on a connected AF_UNIX stream socket (taking it over). Fails with
/// errc::handshake_failed when the peer's message or segment is malformed, errc::connect_timeout
/// when it does not answer in time, errc::connection_closed when it hangs up.
result<shm_channel> shm_handshake(shm_fd socket, shm_role role, const shm_config& config) noexcept;

/// A listening socket on the abstract AF_UNIX address "\0vessel-shm/<name>".
class shm_listener {
 public:
  /// Binds and listens; fails with std::errc::address_in_use when the name is taken.
  static result<shm_listener> listen(std::string_view name) noexcept;

  /// Accepts one peer and runs the hand-over as the acceptor (blocking, bounded by the config's
  /// handshake_timeout for the wait and for each step).
  result<shm_channel> accept(const shm_config& config) noexcept;

  /// The listening descriptor (e.g. to poll it from a reactor).
  int fd() const noexcept { return fd_.get(); }

 private:
  shm_fd fd_;
};

/// Connects to the listener `name` and runs the hand-over as the connector.
result<shm_channel> shm_connect(std::string_view name, const shm_config& config) noexcept;

}  // namespace vessel::io
