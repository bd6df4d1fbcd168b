#include "io/rdma_qp_info.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/errc.hpp"

namespace vessel::io {
namespace {

// Little-endian field writer/reader: the encoding must not depend on the host's byte order.
struct writer {
  std::byte* p;
  void u8(std::uint8_t v) noexcept { *p++ = static_cast<std::byte>(v); }
  void u16(std::uint16_t v) noexcept {
    u8(static_cast<std::uint8_t>(v));
    u8(static_cast<std::uint8_t>(v >> 8));
  }
  void u32(std::uint32_t v) noexcept {
    u16(static_cast<std::uint16_t>(v));
    u16(static_cast<std::uint16_t>(v >> 16));
  }
};

struct reader {
  const std::byte* p;
  std::uint8_t u8() noexcept { return static_cast<std::uint8_t>(*p++); }
  std::uint16_t u16() noexcept {
    const std::uint16_t lo = u8();
    return static_cast<std::uint16_t>(lo | (std::uint16_t{u8()} << 8));
  }
  std::uint32_t u32() noexcept {
    const std::uint32_t lo = u16();
    return lo | (std::uint32_t{u16()} << 16);
  }
};

constexpr std::uint32_t max_24bit = (1u << 24) - 1;

}  // namespace

std::array<std::byte, rdma_qp_info_bytes> encode_qp_info(const rdma_qp_info& info) noexcept {
  std::array<std::byte, rdma_qp_info_bytes> out{};
  writer w{out.data()};
  w.u32(rdma_qp_info_magic);
  w.u16(rdma_qp_info_version);
  w.u8(info.port);
  w.u8(info.mtu);
  w.u32(info.qp_num);
  w.u32(info.psn);
  w.u16(info.lid);
  w.u16(0);  // reserved
  w.u32(info.recv_depth);
  w.u32(info.max_message);
  for (auto b : info.gid) w.u8(b);
  return out;
}

result<rdma_qp_info> decode_qp_info(std::span<const std::byte> bytes) noexcept {
  if (bytes.size() != rdma_qp_info_bytes) return errc::handshake_failed;
  reader r{bytes.data()};
  if (r.u32() != rdma_qp_info_magic || r.u16() != rdma_qp_info_version) {
    return errc::handshake_failed;
  }
  rdma_qp_info info;
  info.port = r.u8();
  info.mtu = r.u8();
  info.qp_num = r.u32();
  info.psn = r.u32();
  info.lid = r.u16();
  (void)r.u16();
  info.recv_depth = r.u32();
  info.max_message = r.u32();
  for (auto& b : info.gid) b = r.u8();
  if (info.qp_num > max_24bit || info.psn > max_24bit || info.mtu < 1 || info.mtu > 5 ||
      info.recv_depth == 0 || info.max_message == 0) {
    return errc::handshake_failed;
  }
  return info;
}

result<rdma_qp_info> exchange_qp_info(int fd, const rdma_qp_info& mine) noexcept {
  const auto out = encode_qp_info(mine);
  std::size_t sent = 0;
  while (sent < out.size()) {
    // send(MSG_NOSIGNAL): a peer that hung up must be an error value, not a SIGPIPE that kills
    // the process; write() for an fd that is not a socket (a pipe pair, a tty).
    auto n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = ::write(fd, out.data() + sent, out.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::error_code{errno, std::generic_category()};
    sent += static_cast<std::size_t>(n);
  }
  std::array<std::byte, rdma_qp_info_bytes> in{};
  std::size_t got = 0;
  while (got < in.size()) {
    const auto n = ::read(fd, in.data() + got, in.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::error_code{errno, std::generic_category()};
    if (n == 0) return errc::connection_closed;
    got += static_cast<std::size_t>(n);
  }
  return decode_qp_info(in);
}

}  // namespace vessel::io
