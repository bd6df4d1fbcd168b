// Reassembler (wire/reassembler.hpp) under arbitrary fragment headers. Checks, beyond "no crash":
// fragments accepted as new never overlap, each lands where it says with its own bytes, nothing
// else writes a byte (duplicates and errors leave the destination as it was), nothing is written
// past total_len, and complete() means every byte of the message came from an accepted fragment.
// With bit 7 of the count byte, the body is combined (body_combiner: here operand + arriving, byte
// by byte) rather than copied, under the same checks. The destination is in two parts (a head of
// total_len % 17 bytes, then the body, adjacent in memory so the checks see one range); a record
// with flag bit 2 is received where placement_of() says (as a transport would) and handed over
// with accept_placed(): a place is only ever the fragment's own bytes, never one accept() would
// refuse, and none for bytes that a combined body must compute.
//
// Input: u16 total_len (mod 4097), u8 fragment_count (bits 0-6; bit 7: combine), then 6-byte records
//   u8 index | u16 offset | u16 length | u8 flags (bit 0: header count + 1, bit 1: header total + 1,
//   bit 2: received in place).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "wire/reassembler.hpp"

namespace {

using namespace vessel::wire;

void require(bool ok) {
  if (!ok) std::abort();
}

std::uint16_t u16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}

std::byte operand_at(std::uint64_t i) { return static_cast<std::byte>(i * 7 + 3); }

void add(const void*, std::byte* dst, const std::byte* operand, const std::byte* arriving,
         std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    dst[i] = static_cast<std::byte>(std::to_integer<unsigned>(operand[i]) +
                                    std::to_integer<unsigned>(arriving[i]));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const std::uint64_t total = u16(data) % 4097;
  const std::uint32_t count = data[2] & 0x7fu;
  const bool combined = (data[2] & 0x80u) != 0;
  data += 3;
  size -= 3;

  constexpr std::size_t guard_bytes = 64;
  constexpr std::byte guard{0x5A};
  std::vector<std::byte> storage(total + guard_bytes, guard);
  reassembler r{reassembly_limits{.max_message_bytes = 4096, .max_fragments = 64}};
  std::vector<std::byte> operand(total);
  for (std::uint64_t i = 0; i < total; ++i) operand[i] = operand_at(i);
  const body_combiner combine{combined ? &add : nullptr, nullptr, operand.data()};
  const std::size_t head = total % 17;
  const std::span<std::byte> all{storage};
  if (!r.begin(1, total, count, all.first(head), all.subspan(head), combine)) return 0;

  std::vector<int> owner(total, -1);  // which accepted fragment wrote each byte
  std::vector<bool> accepted(count, false);
  std::vector<std::byte> payload;
  std::vector<std::byte> before;
  for (std::size_t record = 0; size >= 6; ++record, data += 6, size -= 6) {
    const std::uint32_t index = data[0];
    const std::uint64_t offset = u16(data + 1);
    const std::uint64_t length = u16(data + 3);
    const std::uint32_t header_count = count + ((data[5] & 1u) != 0 ? 1 : 0);
    const std::uint64_t header_total = total + ((data[5] & 2u) != 0 ? 1 : 0);
    payload.resize(length);
    for (std::size_t i = 0; i < length; ++i) payload[i] = static_cast<std::byte>(record * 31 + i);

    before = storage;
    const std::uint32_t received_before = r.received_fragments();
    const bool in_place = (data[5] & 4u) != 0;
    vessel::result<fragment_status> status = make_error_code(errc::fragment_mismatch);
    if (in_place) {
      const fragment_place place = r.placement_of(index, header_count, offset, header_total, length);
      if (place.empty()) continue;  // the transport would take it from its buffer: nothing to do
      require(storage == before);   // asking writes nothing
      // The fragment's own bytes: [offset, offset + length), the head's part then the body's.
      require(place.size() == length && offset + length <= total);
      require(place.head.empty() || place.head.data() == storage.data() + offset);
      require(place.body.empty() || place.body.data() == storage.data() + offset + place.head.size());
      require(place.body.empty() || !combined);
      if (!place.head.empty()) std::memcpy(place.head.data(), payload.data(), place.head.size());
      if (!place.body.empty()) {
        std::memcpy(place.body.data(), payload.data() + place.head.size(), place.body.size());
      }
      status = r.accept_placed(index, header_count, offset, header_total, length);
      require(status && status.value() == fragment_status::accepted);
    } else {
      status = r.accept(index, header_count, offset, header_total, payload);
    }
    if (status && status.value() == fragment_status::accepted) {
      require(index < count && !accepted[index]);
      require(offset + length <= total);
      for (std::uint64_t i = 0; i < length; ++i) {
        require(owner[offset + i] == -1);
        owner[offset + i] = static_cast<int>(index);
        const std::uint64_t at = offset + i;
        const std::byte want =
            combined && at >= head
                ? static_cast<std::byte>(std::to_integer<unsigned>(operand_at(at - head)) +
                                         std::to_integer<unsigned>(payload[i]))
                : payload[i];
        require(storage[at] == want);
      }
      // Nothing outside the fragment moved.
      require(std::memcmp(storage.data(), before.data(), offset) == 0);
      require(std::memcmp(storage.data() + offset + length, before.data() + offset + length,
                          storage.size() - offset - length) == 0);
      accepted[index] = true;
      require(r.received_fragments() == received_before + 1);
    } else {
      if (status) require(index < count && accepted[index]);  // a duplicate of a received index
      require(storage == before);
      require(r.received_fragments() == received_before);
    }
  }

  for (std::size_t i = 0; i < guard_bytes; ++i) require(storage[total + i] == guard);
  std::uint64_t missing = 0;
  for (const fragment_gap& gap : r.missing()) {
    for (std::uint32_t i = gap.first; i < gap.first + gap.count; ++i) require(!accepted[i]);
    missing += gap.count;
  }
  require(missing == count - r.received_fragments());
  if (r.complete()) {
    for (const int o : owner) require(o != -1);
  }
  return 0;
}
