#include "wire/reassembler.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "wire/copy_bytes.hpp"

namespace vessel::wire {

result<void> reassembler::begin(std::uint64_t message_id, std::uint64_t total_len,
                                 std::uint32_t fragment_count, std::span<std::byte> dst) {
  return begin(message_id, total_len, fragment_count, {}, dst);
}

result<void> reassembler::begin(std::uint64_t message_id, std::uint64_t total_len,
                                 std::uint32_t fragment_count, std::span<std::byte> head,
                                 std::span<std::byte> body) {
  return begin(message_id, total_len, fragment_count, head, body, {});
}

result<void> reassembler::begin(std::uint64_t message_id, std::uint64_t total_len,
                                 std::uint32_t fragment_count, std::span<std::byte> head,
                                 std::span<std::byte> body, body_combiner combine) {
  if (total_len > limits_.max_message_bytes) return reject(errc::message_too_large);
  if (fragment_count > limits_.max_fragments) return reject(errc::too_many_fragments);
  if (fragment_count == 0 || fragment_count > std::max<std::uint64_t>(total_len, 1)) {
    return reject(errc::bad_field);
  }
  if (head.size() + body.size() < total_len) return reject(errc::buffer_too_small);

  const std::size_t words = (std::size_t{fragment_count} + 63) / 64;
  if (words > bitmap_words_capacity_) {
    bitmap_ = std::make_unique_for_overwrite<std::uint64_t[]>(words);
    bitmap_words_capacity_ = words;
    ++counters_.bitmap_allocations;
  }
  std::fill_n(bitmap_.get(), words, std::uint64_t{0});

  active_ = true;
  message_id_ = message_id;
  total_len_ = total_len;
  fragment_count_ = fragment_count;
  received_ = 0;
  fragment_size_ = k_unknown_size;
  head_ = head.first(std::min<std::size_t>(head.size(), static_cast<std::size_t>(total_len)));
  body_ = body.first(static_cast<std::size_t>(total_len) - head_.size());
  combine_ = combine;
  ++counters_.messages;
  return outcome::success();
}

result<fragment_status> reassembler::take(std::uint32_t fragment_index,
                                          std::uint32_t fragment_count, std::uint64_t offset,
                                          std::uint64_t total_len, std::uint64_t length) {
  if (!active_ || fragment_count != fragment_count_ || total_len != total_len_) {
    return reject(errc::fragment_mismatch);
  }
  if (fragment_index >= fragment_count_ || length > total_len_ || offset > total_len_ - length) {
    return reject(errc::fragment_out_of_range);
  }
  // Checked before the duplicate test: a repeat with other bytes is a forgery, not a duplicate.
  if (!fits_layout(fragment_index, offset, length)) return reject(errc::fragment_mismatch);

  std::uint64_t& word = bitmap_[fragment_index / 64];
  const std::uint64_t bit = std::uint64_t{1} << (fragment_index % 64);
  if ((word & bit) != 0) {
    ++counters_.duplicates;
    return fragment_status::duplicate;
  }
  word |= bit;
  ++received_;
  ++counters_.fragments;
  counters_.bytes += length;
  if (received_ == fragment_count_) ++counters_.completed;
  return fragment_status::accepted;
}

result<fragment_status> reassembler::accept(std::uint32_t fragment_index,
                                            std::uint32_t fragment_count, std::uint64_t offset,
                                            std::uint64_t total_len,
                                            std::span<const std::byte> payload) {
  auto taken = take(fragment_index, fragment_count, offset, total_len, payload.size());
  if (!taken || taken.value() == fragment_status::duplicate || payload.empty()) return taken;
  // take() bounded [offset, offset + length) by total_len = head + body.
  std::size_t at = static_cast<std::size_t>(offset);
  std::span<const std::byte> rest = payload;
  // Received in place (destination_of): the bytes are where they belong already.
  const std::byte* home = at >= head_.size() ? body_.data() + (at - head_.size())
                                             : head_.data() + at;
  if (rest.data() == home) {
    rest = {};
    ++counters_.in_place;
  }
  if (!rest.empty() && at < head_.size()) {
    const std::size_t n = std::min(rest.size(), head_.size() - at);
    std::memcpy(head_.data() + at, rest.data(), n);
    rest = rest.subspan(n);
    at += n;
  }
  if (!rest.empty()) {
    const std::size_t in_body = at - head_.size();
    if (combine_) {
      combine_.apply(combine_.ctx, body_.data() + in_body, combine_.operand + in_body,
                     rest.data(), rest.size());
    } else {
      copy_bytes(body_.data() + in_body, rest.data(), rest.size());
    }
  }
  return taken;
}

result<fragment_status> reassembler::accept_placed(std::uint32_t fragment_index,
                                                   std::uint32_t fragment_count,
                                                   std::uint64_t offset, std::uint64_t total_len,
                                                   std::uint64_t length) {
  auto taken = take(fragment_index, fragment_count, offset, total_len, length);
  if (taken && taken.value() == fragment_status::accepted && length != 0) ++counters_.in_place;
  return taken;
}

std::span<std::byte> reassembler::destination_of(std::uint32_t fragment_index,
                                                 std::uint32_t fragment_count,
                                                 std::uint64_t offset, std::uint64_t total_len,
                                                 std::uint64_t length) {
  const fragment_place place =
      placement_of(fragment_index, fragment_count, offset, total_len, length);
  if (!place.head.empty() && !place.body.empty()) return {};  // straddles the two parts
  return place.head.empty() ? place.body : place.head;
}

fragment_place reassembler::placement_of(std::uint32_t fragment_index,
                                         std::uint32_t fragment_count, std::uint64_t offset,
                                         std::uint64_t total_len, std::uint64_t length) {
  if (!active_ || fragment_count != fragment_count_ || total_len != total_len_ || length == 0 ||
      fragment_index >= fragment_count_ || length > total_len_ || offset > total_len_ - length ||
      !fits_layout(fragment_index, offset, length)) {
    return {};
  }
  if ((bitmap_[fragment_index / 64] & (std::uint64_t{1} << (fragment_index % 64))) != 0) return {};
  const auto at = static_cast<std::size_t>(offset);
  const auto n = static_cast<std::size_t>(length);
  if (at + n <= head_.size()) return {head_.subspan(at, n), {}};
  if (combine_) return {};  // the body's bytes are computed, not received
  if (at >= head_.size()) return {{}, body_.subspan(at - head_.size(), n)};
  return {head_.subspan(at), body_.first(at + n - head_.size())};
}

namespace {

/// Copies message bytes [at, at + n) between two-part destinations (head, then body).
void copy_between(std::span<const std::byte> from_head, std::span<const std::byte> from_body,
                  std::span<std::byte> to_head, std::span<std::byte> to_body, std::size_t at,
                  std::size_t n) {
  while (n > 0) {
    const bool src_in_head = at < from_head.size();
    const bool dst_in_head = at < to_head.size();
    const std::byte* src =
        src_in_head ? from_head.data() + at : from_body.data() + (at - from_head.size());
    std::byte* dst = dst_in_head ? to_head.data() + at : to_body.data() + (at - to_head.size());
    std::size_t run = n;
    if (src_in_head) run = std::min(run, from_head.size() - at);
    if (dst_in_head) run = std::min(run, to_head.size() - at);
    copy_bytes(dst, src, run);
    at += run;
    n -= run;
  }
}

}  // namespace

result<void> reassembler::retarget(std::span<std::byte> head, std::span<std::byte> body) {
  if (!active_ || combine_) return reject(errc::fragment_mismatch);
  if (head.size() + body.size() < total_len_) return reject(errc::buffer_too_small);
  const auto total = static_cast<std::size_t>(total_len_);
  const std::span<std::byte> new_head = head.first(std::min(head.size(), total));
  const std::span<std::byte> new_body = body.first(total - new_head.size());
  // Runs of received fragments; the size is known once any fragment of a multi-fragment message
  // arrived (a single fragment is the whole message).
  for (std::uint64_t from = 0;;) {
    const std::uint64_t first = next_index(true, from);
    if (first >= fragment_count_) break;
    from = next_index(false, first);
    const std::uint64_t size = fragment_count_ == 1 ? total_len_ : fragment_size_;
    const std::uint64_t begin = first * size;
    const std::uint64_t end = std::min<std::uint64_t>(from * size, total_len_);
    copy_between(head_, body_, new_head, new_body, static_cast<std::size_t>(begin),
                 static_cast<std::size_t>(end - begin));
  }
  head_ = new_head;
  body_ = new_body;
  return outcome::success();
}

// Whether fragment `index` with `length` bytes at `offset` is where the fragmenter would have put
// it; the first fragment that passes fixes the fragment size for the rest of the message.
// Precondition: index < count and offset + length <= total.
bool reassembler::fits_layout(std::uint32_t index, std::uint64_t offset, std::uint64_t length) {
  const std::uint64_t count = fragment_count_;
  const std::uint64_t total = total_len_;
  const bool last = index + 1 == count;
  if (count == 1) return offset == 0 && length == total;

  std::uint64_t size = fragment_size_;
  if (size == k_unknown_size) {
    if (!last) {
      size = length;
    } else {
      if (offset % (count - 1) != 0) return false;
      size = offset / (count - 1);
    }
    // ceil(total / size) must be count: (count - 1) * size < total <= count * size, written
    // without products that could overflow. begin() guarantees total >= count >= 2 here.
    const std::uint64_t smallest = total / count + (total % count != 0 ? 1 : 0);
    const std::uint64_t largest = (total - 1) / (count - 1);
    if (size < smallest || size > largest) return false;
  }
  // index * size <= (count - 1) * size < total: no overflow.
  const std::uint64_t expected_offset = index * size;
  const std::uint64_t expected_length = last ? total - expected_offset : size;
  if (offset != expected_offset || length != expected_length) return false;
  fragment_size_ = size;
  return true;
}

std::vector<fragment_gap> reassembler::missing(std::size_t max_gaps) const {
  std::vector<fragment_gap> gaps;
  if (!active_) return gaps;
  std::uint64_t from = 0;
  while (gaps.size() < max_gaps) {
    const std::uint64_t first = next_index(false, from);
    if (first >= fragment_count_) break;
    from = next_index(true, first);
    gaps.push_back({static_cast<std::uint32_t>(first), static_cast<std::uint32_t>(from - first)});
  }
  return gaps;
}

// The first index >= from whose received bit equals `received`, or fragment_count_ if none.
std::uint64_t reassembler::next_index(bool received, std::uint64_t from) const noexcept {
  const std::uint64_t count = fragment_count_;
  while (from < count) {
    const std::uint64_t w = from / 64;
    std::uint64_t word = received ? bitmap_[w] : ~bitmap_[w];
    word &= ~std::uint64_t{0} << (from % 64);
    if (word != 0) return std::min<std::uint64_t>(w * 64 + std::countr_zero(word), count);
    from = (w + 1) * 64;
  }
  return count;
}

std::error_code reassembler::reject(errc e) noexcept {
  ++counters_.rejected;
  return make_error_code(e);
}

}  // namespace vessel::wire
