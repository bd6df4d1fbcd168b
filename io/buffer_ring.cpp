#include "io/buffer_ring.hpp"

#include <cerrno>
#include <memory>

#include <sys/mman.h>

#include "io/reactor.hpp"

namespace vessel::io {

result<std::unique_ptr<buffer_ring>> buffer_ring::create(reactor& r, std::uint16_t group,
                                                         std::uint32_t count, std::uint32_t size) {
  if (!r.features().buffer_ring) return std::make_error_code(std::errc::function_not_supported);
  if (count == 0 || count > 32768 || (count & (count - 1)) != 0 || size == 0) {
    return std::make_error_code(std::errc::invalid_argument);
  }
  std::unique_ptr<buffer_ring> br{new buffer_ring(r, group, count, size)};
  br->ring_bytes_ = count * sizeof(io_uring_buf);
  void* mem = ::mmap(nullptr, br->ring_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return std::error_code{errno, std::system_category()};
  br->ring_ = static_cast<io_uring_buf_ring*>(mem);
  io_uring_buf_ring_init(br->ring_);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<std::uintptr_t>(br->ring_);
  reg.ring_entries = count;
  reg.bgid = group;
  if (int rc = io_uring_register_buf_ring(&r.ring(), &reg, 0); rc < 0) {
    return std::error_code{-rc, std::system_category()};
  }
  br->registered_ = true;
  const int mask = io_uring_buf_ring_mask(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    io_uring_buf_ring_add(br->ring_, br->storage_.data() + std::size_t{i} * size, size,
                          static_cast<unsigned short>(i), mask, static_cast<int>(i));
  }
  io_uring_buf_ring_advance(br->ring_, static_cast<int>(count));
  return br;
}

buffer_ring::buffer_ring(reactor& r, std::uint16_t group, std::uint32_t count, std::uint32_t size)
    : reactor_(r), group_(group), count_(count), size_(size), storage_(std::size_t{count} * size) {}

buffer_ring::~buffer_ring() {
  if (registered_ && reactor_.ring_open()) io_uring_unregister_buf_ring(&reactor_.ring(), group_);
  if (ring_ != nullptr) ::munmap(ring_, ring_bytes_);
}

std::span<std::byte> buffer_ring::data(std::uint16_t id, std::size_t len) noexcept {
  return {storage_.data() + std::size_t{id} * size_, len};
}

void buffer_ring::recycle(std::uint16_t id) noexcept {
  io_uring_buf_ring_add(ring_, storage_.data() + std::size_t{id} * size_, size_, id,
                        io_uring_buf_ring_mask(count_), 0);
  io_uring_buf_ring_advance(ring_, 1);
}

}  // namespace vessel::io
