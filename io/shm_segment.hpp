#pragma once
// Shared-memory segments for peers on one host: anonymous memory files (memfd_create) mapped
// MAP_SHARED and handed to the peer as file descriptors over an AF_UNIX socket (SCM_RIGHTS).
//
// Why memfd and not shm_open: a memfd has no name in /dev/shm, so a process that dies (SIGKILL
// included) leaves nothing behind; the kernel frees the memory when the last fd and the last
// mapping are gone. The size is sealed (F_SEAL_SHRINK | F_SEAL_GROW) before the hand-over, so a
// peer can never truncate the file under our mapping and turn our reads into SIGBUS.

#include <cstddef>
#include <span>
#include <utility>

#include "wire/result.hpp"

namespace vessel::io {

/// An owned file descriptor: closed when the handle goes. Move-only.
class shm_fd {
 public:
  shm_fd() noexcept = default;
  /// Adopts `fd` (-1: empty).
  explicit shm_fd(int fd) noexcept : fd_{fd} {}
  shm_fd(shm_fd&& other) noexcept : fd_{std::exchange(other.fd_, -1)} {}
  shm_fd& operator=(shm_fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  shm_fd(const shm_fd&) = delete;
  shm_fd& operator=(const shm_fd&) = delete;
  ~shm_fd() { reset(); }

  /// The descriptor, or -1.
  int get() const noexcept { return fd_; }
  /// True when a descriptor is held.
  explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Closes the descriptor (if any).
  void reset() noexcept;
  /// Gives up ownership without closing.
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

/// One sealed memfd mapped read-write and shared. Move-only; unmaps and closes on destruction.
class shm_segment {
 public:
  shm_segment() noexcept = default;
  shm_segment(shm_segment&& other) noexcept;
  shm_segment& operator=(shm_segment&& other) noexcept;
  shm_segment(const shm_segment&) = delete;
  shm_segment& operator=(const shm_segment&) = delete;
  ~shm_segment();

  /// Creates a memfd of `bytes` (rounded up to the page size), seals its size and maps it
  /// MAP_POPULATE, so no access on the data path ever pays a page fault (DESIGN.md: a first touch
  /// costs ~225 ms per 64 MiB on our VMs). `name` only shows in /proc/PID/fd ("memfd:NAME").
  static result<shm_segment> create(const char* name, std::size_t bytes) noexcept;

  /// Maps a memfd received from a peer (takes ownership of `fd`). Refuses (handshake_failed) a
  /// file that is not size-sealed or whose size is outside [min_bytes, max_bytes].
  static result<shm_segment> adopt(shm_fd fd, std::size_t min_bytes,
                                   std::size_t max_bytes) noexcept;

  /// The mapping.
  std::byte* data() const noexcept { return data_; }
  /// Bytes mapped.
  std::size_t size() const noexcept { return size_; }
  /// The memfd while it is still held (-1 after close_fd()).
  int fd() const noexcept { return fd_.get(); }
  /// Closes the memfd once it has been handed over: the mapping alone keeps the memory alive.
  void close_fd() noexcept { fd_.reset(); }
  /// True when something is mapped.
  explicit operator bool() const noexcept { return data_ != nullptr; }

 private:
  void unmap() noexcept;

  shm_fd fd_;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Sends `bytes` with `fds` attached (SCM_RIGHTS) on a connected AF_UNIX stream socket, in one
/// sendmsg (blocking; a short send is an error: setup messages are small).
result<void> send_with_fds(int socket, std::span<const std::byte> bytes,
                           std::span<const int> fds) noexcept;

/// Receives exactly `bytes.size()` bytes and up to `fds.size()` descriptors (MSG_CMSG_CLOEXEC),
/// blocking at most `timeout_ms` per wait. Returns how many descriptors arrived; the caller owns
/// them. Fails (and closes whatever arrived) on EOF, timeout, or truncated control data.
result<std::size_t> recv_with_fds(int socket, std::span<std::byte> bytes, std::span<int> fds,
                                  int timeout_ms) noexcept;

}  // namespace vessel::io
