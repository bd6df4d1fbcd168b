// libFuzzer target for vessel::wire::serial_decoder: arbitrary bytes, arbitrary splits and silences.
// Beyond "no crash, no sanitizer report" it checks the decoder's contract on every input:
//  - every delivered frame is exactly `0xAA | len | payload | crc8` at the stream position the
//    counters say it was consumed from, with a correct CRC-8 (nothing is invented or misplaced);
//  - bytes_in == delivered frame bytes + crc_errors + bad_length + truncated + resync_bytes + buffered;
//  - feed() takes min(offered, free space) bytes: backpressure, never loss.
//
// Input layout: a sequence of records `ctl | data...`. ctl's low 6 bits + 1 give how many data bytes
// follow (clipped at the end); bit 6 lets more than the read timeout pass before they arrive;
// bit 7 calls poll() first.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "wire/crc8.hpp"
#include "wire/serial_decoder.hpp"
#include "wire/serial_frame.hpp"

namespace {

using vessel::wire::serial_decoder;

void check(bool ok) {
  if (!ok) std::abort();
}

struct harness {
  serial_decoder decoder{std::chrono::milliseconds{10}, vessel::wire::serial_max_frame_bytes + 7};
  std::vector<std::byte> accepted;  // every byte feed() took, in order
  std::uint64_t delivered_bytes = 0;

  std::uint64_t consumed() const {
    const auto& c = decoder.counters();
    return delivered_bytes + c.crc_errors + c.bad_length + c.truncated + c.resync_bytes;
  }

  void check_accounting() const {
    check(decoder.counters().bytes_in == accepted.size());
    check(consumed() + decoder.buffered() == decoder.counters().bytes_in);
    check(decoder.buffered() <= decoder.capacity());
  }

  void drain() {
    for (;;) {
      const std::uint64_t ok_before = decoder.counters().frames_ok;
      auto frame = decoder.next();
      if (!frame) {
        check(decoder.counters().frames_ok == ok_before);
        break;
      }
      check(decoder.counters().frames_ok == ok_before + 1);
      check(frame->size() <= vessel::wire::serial_max_payload);
      delivered_bytes += vessel::wire::serial_frame_size(frame->size());
      const std::uint64_t start = consumed() - vessel::wire::serial_frame_size(frame->size());
      const std::byte* at = accepted.data() + start;
      check(at[0] == vessel::wire::serial_start_byte);
      check(static_cast<std::size_t>(at[1]) == frame->size());
      for (std::size_t i = 0; i < frame->size(); ++i) check(at[2 + i] == (*frame)[i]);
      std::uint8_t crc = vessel::wire::crc8_update(vessel::wire::crc8_init, at[1]);
      crc = vessel::wire::crc8_update(crc, *frame);
      check(static_cast<std::uint8_t>(at[2 + frame->size()]) == crc);
      check_accounting();
    }
  }

  void feed(std::span<const std::byte> data, serial_decoder::clock::time_point now) {
    while (!data.empty()) {
      const std::size_t room = decoder.free_space();
      const std::size_t took = decoder.feed(data, now);
      check(took == std::min(room, data.size()));
      accepted.insert(accepted.end(), data.begin(), data.begin() + static_cast<std::ptrdiff_t>(took));
      data = data.subspan(took);
      check_accounting();
      drain();
      check(took != 0 || decoder.free_space() != 0);  // draining a full ring always frees room
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  harness h;
  serial_decoder::clock::time_point now{};
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  std::size_t pos = 0;
  while (pos < size) {
    const std::uint8_t ctl = data[pos++];
    const std::size_t n = std::min<std::size_t>((ctl & 0x3Fu) + 1u, size - pos);
    now += (ctl & 0x40u) != 0 ? h.decoder.read_timeout() + std::chrono::microseconds{1}
                              : std::chrono::microseconds{87};
    if ((ctl & 0x80u) != 0) {
      h.decoder.poll(now);
      h.check_accounting();
      h.drain();
    }
    h.feed({bytes + pos, n}, now);
    pos += n;
  }
  // Silence at the end: everything left must be delivered or discarded.
  h.decoder.poll(now + h.decoder.read_timeout() + std::chrono::microseconds{1});
  h.drain();
  check(h.decoder.buffered() == 0);
  h.check_accounting();
  return 0;
}
