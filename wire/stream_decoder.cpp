#include "wire/stream_decoder.hpp"

#include <algorithm>
#include <cstring>

#include "wire/errc.hpp"

namespace vessel::wire {
namespace {

std::uint32_t load_le32(const std::byte* p) noexcept {
  return std::to_integer<std::uint32_t>(p[0]) | std::to_integer<std::uint32_t>(p[1]) << 8 |
         std::to_integer<std::uint32_t>(p[2]) << 16 | std::to_integer<std::uint32_t>(p[3]) << 24;
}

}  // namespace

stream_decoder::stream_decoder(decoder_limits limits) : limits_(limits) {
  // Room for the largest frame the limits allow, so that compaction always makes progress.
  const std::size_t largest_frame =
      prefix_bytes + std::size_t{limits_.max_header_bytes} + limits_.max_payload_bytes;
  capacity_ = std::max(limits_.receive_buffer_bytes, largest_frame);
  // Not zeroed: only bytes received into it are read. Zeroing its 1.25 MiB on every connect
  // cost 9 us in release and, under TSan (a shadow write per byte), so long that 8 ranks on
  // 2 cores missed the mesh's 5 s handshake timeout, again on each redial.
  buffer_ = std::make_unique_for_overwrite<std::byte[]>(capacity_);
  header_scratch_ = std::make_unique<std::uint64_t[]>(limits_.max_header_bytes / 8 + 1);
}

std::span<std::byte> stream_decoder::prepare() noexcept {
  if (direct_) {
    if (direct_filled_ < direct_head_.size()) return direct_head_.subspan(direct_filled_);
    return direct_->subspan(direct_filled_ - direct_head_.size());
  }
  if (begin_ == end_) {
    begin_ = end_ = 0;
  } else if (begin_ > 0 && capacity_ - end_ < capacity_ / 2) {
    // Only the tail of a partial frame moves (less than one frame), and only when the free tail
    // has shrunk below half: amortized, each byte moves at most about once.
    std::memmove(buffer_.get(), buffer_.get() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  return {buffer_.get() + end_, capacity_ - end_};
}

void stream_decoder::commit(std::size_t n) noexcept {
  if (direct_) {
    direct_filled_ += std::min(n, direct_head_.size() + direct_->size() - direct_filled_);
    return;
  }
  end_ += std::min(n, capacity_ - end_);
}

std::size_t stream_decoder::payload_buffered() const noexcept {
  if (!pending_) return 0;
  if (direct_) return direct_filled_;
  const std::size_t available = end_ - begin_;
  const std::size_t before = prefix_bytes + pending_header_len_;
  return available > before ? std::min(available - before, std::size_t{pending_->payload_len})
                            : 0;
}

std::span<const std::byte> stream_decoder::payload_arrived() const noexcept {
  if (!pending_ || direct_) return {};
  return {buffer_.get() + begin_ + prefix_bytes + pending_header_len_, payload_buffered()};
}

bool stream_decoder::redirect_payload(std::span<std::byte> head,
                                      std::span<std::byte> body) noexcept {
  if (error_ || !pending_ || direct_ || head.size() + body.size() != pending_->payload_len) {
    return false;
  }
  // next() left the frame pending, so the buffer holds its prefix, header and part of the
  // payload, and nothing after it: all of that is consumed here.
  const std::span<const std::byte> got = payload_arrived();
  const std::size_t to_head = std::min(got.size(), head.size());
  if (to_head > 0) std::memcpy(head.data(), got.data(), to_head);
  if (got.size() > to_head) std::memcpy(body.data(), got.data() + to_head, got.size() - to_head);
  begin_ = end_ = 0;
  direct_ = body;
  direct_head_ = head;
  direct_filled_ = got.size();
  return true;
}

std::size_t stream_decoder::feed(std::span<const std::byte> bytes) noexcept {
  auto space = prepare();
  const std::size_t n = std::min(space.size(), bytes.size());
  if (n > 0) std::memcpy(space.data(), bytes.data(), n);
  commit(n);
  return n;
}

result<std::optional<frame_view>> stream_decoder::fail(std::error_code ec) noexcept {
  error_ = ec;
  pending_.reset();
  direct_.reset();
  direct_head_ = {};
  return ec;
}

result<std::optional<frame_view>> stream_decoder::next() noexcept {
  if (error_) return error_;
  if (direct_) {
    if (direct_filled_ < direct_head_.size() + direct_->size()) return std::optional<frame_view>{};
    frame_view view{*pending_, *direct_, direct_head_};
    pending_.reset();
    direct_.reset();
    direct_head_ = {};
    direct_filled_ = 0;
    return std::optional<frame_view>{view};
  }
  const std::size_t available = end_ - begin_;
  if (!pending_) {
    if (available < prefix_bytes) return std::optional<frame_view>{};
    // The length alone is judged first: nothing is awaited or copied for a header that cannot be.
    const std::uint32_t header_len = load_le32(buffer_.get() + begin_);
    if (header_len < min_header_bytes) return fail(errc::header_too_small);
    if (header_len > limits_.max_header_bytes) return fail(errc::header_too_large);
    if (header_len % 8 != 0) return fail(errc::header_misaligned);
    if (available < prefix_bytes + header_len) return std::optional<frame_view>{};

    // The header sits at any offset in the stream; Cap'n Proto reads words, so align a copy.
    std::memcpy(header_scratch_.get(), buffer_.get() + begin_ + prefix_bytes, header_len);
    auto header = decode_header(
        {reinterpret_cast<const std::byte*>(header_scratch_.get()), header_len}, limits_);
    if (!header) return fail(header.error());
    pending_ = header.value();
    pending_header_len_ = header_len;
  }
  const std::size_t frame_len = prefix_bytes + pending_header_len_ + pending_->payload_len;
  if (available < frame_len) return std::optional<frame_view>{};

  const std::byte* payload = buffer_.get() + begin_ + prefix_bytes + pending_header_len_;
  frame_view view{*pending_, {payload, pending_->payload_len}, {}};
  pending_.reset();
  begin_ += frame_len;
  return std::optional<frame_view>{view};
}

}  // namespace vessel::wire
