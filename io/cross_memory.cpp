#include "io/cross_memory.hpp"

#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include "io/errc.hpp"

namespace vessel::io {
namespace {

struct drawn_token {
  std::mutex mutex;
  pid_t owner = 0;  // the process that drew `token`: a forked child draws anew
  process_token token;
};

drawn_token& process_wide() {
  static drawn_token t;
  return t;
}

void draw(process_token& t) noexcept {
  auto* out = reinterpret_cast<unsigned char*>(t.words.data());
  std::size_t got = 0;
  while (got < sizeof t.words) {
    const ssize_t n = ::getrandom(out + got, sizeof t.words - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      // No entropy source: the pid and an address still tell processes apart on one host.
      t.words[0] ^= static_cast<std::uint64_t>(::getpid());
      t.words[1] ^= static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&t));
      return;
    }
  }
}

}  // namespace

process_token_offer this_process_token() noexcept {
  drawn_token& t = process_wide();
  const std::lock_guard lock{t.mutex};
  const pid_t self = ::getpid();
  if (t.owner != self) {
    draw(t.token);
    t.owner = self;
  }
  return {self, reinterpret_cast<std::uintptr_t>(&t.token), t.token};
}

std::error_code pull_from_process(const process_token_offer& from, std::uint64_t remote_address,
                                  std::span<std::byte> into) noexcept {
  process_token seen;
  // The token first, in the same call: the bytes after it come from the process it names.
  iovec local[2] = {{&seen, sizeof seen}, {into.data(), into.size()}};
  iovec remote[2] = {{reinterpret_cast<void*>(from.token_address), sizeof seen},
                     {reinterpret_cast<void*>(remote_address), into.size()}};
  std::size_t done = 0;
  const std::size_t total = sizeof seen + into.size();
  bool token_checked = false;
  while (done < total) {
    ssize_t n;
    if (done == 0) {
      n = ::process_vm_readv(from.pid, local, 2, remote, 2, 0);
    } else {  // a short read (a fault part-way): the rest, or the error that stopped it
      const std::size_t at = done - sizeof seen;
      iovec l{into.data() + at, into.size() - at};
      iovec r{reinterpret_cast<void*>(remote_address + at), into.size() - at};
      n = ::process_vm_readv(from.pid, &l, 1, &r, 1, 0);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::make_error_code(static_cast<std::errc>(errno));
    }
    if (n == 0) return std::make_error_code(std::errc::bad_address);
    done += static_cast<std::size_t>(n);
    if (!token_checked) {
      if (done < sizeof seen) return std::make_error_code(std::errc::bad_address);
      if (seen != from.token) return errc::not_that_process;
      token_checked = true;
    }
  }
  return {};
}

std::error_code push_to_process(const process_token_offer& to, std::uint64_t remote_address,
                                std::span<const std::byte> from) noexcept {
  if (const std::error_code ec = pull_from_process(to, 0, {})) return ec;  // the token alone
  std::size_t done = 0;
  while (done < from.size()) {
    // The iovec's base is not const, but process_vm_writev only reads the local side.
    iovec local{const_cast<std::byte*>(from.data()) + done, from.size() - done};
    iovec remote{reinterpret_cast<void*>(remote_address + done), from.size() - done};
    const ssize_t n = ::process_vm_writev(to.pid, &local, 1, &remote, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::make_error_code(static_cast<std::errc>(errno));
    }
    if (n == 0) return std::make_error_code(std::errc::bad_address);
    done += static_cast<std::size_t>(n);
  }
  return {};
}

}  // namespace vessel::io
