#include "io/shm_segment.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/errc.hpp"

namespace vessel::io {
namespace {

std::error_code last_errno() noexcept { return {errno, std::system_category()}; }

std::size_t page_round(std::size_t bytes) noexcept {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// The most descriptors one setup message carries (segment + eventfd, with room to spare).
constexpr std::size_t max_fds = 8;

}  // namespace

void shm_fd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

shm_segment::shm_segment(shm_segment&& other) noexcept
    : fd_{std::move(other.fd_)},
      data_{std::exchange(other.data_, nullptr)},
      size_{std::exchange(other.size_, 0)} {}

shm_segment& shm_segment::operator=(shm_segment&& other) noexcept {
  if (this != &other) {
    unmap();
    fd_ = std::move(other.fd_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

shm_segment::~shm_segment() { unmap(); }

void shm_segment::unmap() noexcept {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
  fd_.reset();
}

result<shm_segment> shm_segment::create(const char* name, std::size_t bytes) noexcept {
  if (bytes == 0) return make_error_code(std::errc::invalid_argument);
  bytes = page_round(bytes);
  shm_fd fd{::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING)};
  if (!fd) return last_errno();
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) return last_errno();
  // F_SEAL_SEAL too: nobody (the peer included) can lift the size seals afterwards.
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return last_errno();
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (p == MAP_FAILED) return last_errno();
  shm_segment s;
  s.fd_ = std::move(fd);
  s.data_ = static_cast<std::byte*>(p);
  s.size_ = bytes;
  return s;
}

result<shm_segment> shm_segment::adopt(shm_fd fd, std::size_t min_bytes,
                                       std::size_t max_bytes) noexcept {
  if (!fd) return make_error_code(std::errc::bad_file_descriptor);
  // Without both size seals the peer could shrink the file later and our reads would fault.
  const int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
    return errc::handshake_failed;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return last_errno();
  const auto bytes = static_cast<std::size_t>(st.st_size);
  if (bytes < min_bytes || bytes > max_bytes) return errc::handshake_failed;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (p == MAP_FAILED) return last_errno();
  shm_segment s;
  s.fd_ = std::move(fd);
  s.data_ = static_cast<std::byte*>(p);
  s.size_ = bytes;
  return s;
}

result<void> send_with_fds(int socket, std::span<const std::byte> bytes,
                           std::span<const int> fds) noexcept {
  if (fds.size() > max_fds || bytes.empty()) return make_error_code(std::errc::invalid_argument);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * max_fds)] = {};
  iovec iov{const_cast<std::byte*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n = 0;
  do {
    n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return error_from_errno(-errno);
  if (static_cast<std::size_t>(n) != bytes.size()) return errc::handshake_failed;
  return outcome::success();
}

result<std::size_t> recv_with_fds(int socket, std::span<std::byte> bytes, std::span<int> fds,
                                  int timeout_ms) noexcept {
  std::size_t got = 0;
  std::size_t nfds = 0;
  bool truncated = false;
  const auto fail = [&](std::error_code ec) -> result<std::size_t> {
    for (std::size_t i = 0; i < nfds; ++i) ::close(fds[i]);
    return ec;
  };
  while (got < bytes.size()) {
    pollfd p{socket, POLLIN, 0};
    const int ready = ::poll(&p, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return fail(last_errno());
    if (ready == 0) return fail(errc::connect_timeout);
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * max_fds)] = {};
    iovec iov{bytes.data() + got, bytes.size() - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(error_from_errno(-errno));
    if (n == 0) return fail(errc::connection_closed);
    got += static_cast<std::size_t>(n);
    if ((msg.msg_flags & MSG_CTRUNC) != 0) truncated = true;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (nfds < fds.size()) {
          fds[nfds++] = fd;
        } else {
          ::close(fd);  // more than asked for: the peer does not speak our protocol
          truncated = true;
        }
      }
    }
  }
  if (truncated) return fail(errc::handshake_failed);
  return nfds;
}

}  // namespace vessel::io
