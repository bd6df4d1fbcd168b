// libFuzzer target for the UART link layer on the host: line bytes through wire's serial decoder
// (shared with wire_serial_decoder_fuzz) into bridges::uart::reliable_channel and parse_message,
// interleaved with sends and the passing of time. Beyond "no crash, no sanitizer report":
//  - everything the channel writes is a well-formed link payload (2..253 bytes, its check right);
//  - at most `window` frames are in flight; delivered messages fit a link payload;
//  - the channel's delivery counters equal what the sink saw.
//
// Input layout: records `ctl | data...`. ctl's low 6 bits + 1 give how many data bytes follow
// (clipped at the end); bit 6: those bytes are a message to send() instead of line bytes;
// bit 7: 1 s passes first (retransmit timers fire).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "bridges/uart/command.hpp"
#include "bridges/uart/link_header.hpp"
#include "bridges/uart/reliable_channel.hpp"
#include "wire/serial_decoder.hpp"
#include "wire/serial_frame.hpp"

namespace {

using namespace vessel::bridges::uart;

void check(bool ok) {
  if (!ok) std::abort();
}

struct sink final : channel_sink {
  void write_link_payload(std::span<const std::byte> p) override {
    check(p.size() >= link_header_bytes && p.size() <= vessel::wire::serial_max_payload);
    check(link_check(static_cast<std::uint8_t>(p[0]), p.subspan(2)) == static_cast<std::uint8_t>(p[1]));
    ++writes;
  }
  void deliver(std::span<const std::byte> m, bool reliable) override {
    check(m.size() <= link_max_message);
    if (const auto msg = parse_message(m)) check(msg->body.size() <= m.size());
    ++(reliable ? reliable_ : unreliable_);
  }
  std::uint64_t writes = 0, reliable_ = 0, unreliable_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  sink out;
  reliable_channel_config cfg;
  cfg.window = 3;
  reliable_channel ch{cfg, out};
  vessel::wire::serial_decoder decoder{std::chrono::milliseconds{10}};
  auto now = reliable_channel::clock::time_point{};
  ch.start(0x21, now);
  std::size_t i = 0;
  while (i < size) {
    const std::uint8_t ctl = data[i++];
    const std::size_t n = std::min<std::size_t>((ctl & 0x3Fu) + 1u, size - i);
    const std::span<const std::byte> chunk{reinterpret_cast<const std::byte*>(data + i), n};
    i += n;
    if ((ctl & 0x80u) != 0) {
      now += std::chrono::seconds{1};
      ch.poll(now);
    }
    if ((ctl & 0x40u) != 0) {
      (void)ch.send(chunk, now);  // window_full is fine
    } else {
      auto rest = chunk;
      while (!rest.empty()) {
        rest = rest.subspan(decoder.feed(rest, now));
        while (const auto p = decoder.next()) ch.on_link_payload(*p, now);
      }
    }
    check(ch.in_flight() <= cfg.window);
  }
  check(ch.stats().delivered_reliable == out.reliable_);
  check(ch.stats().delivered_unreliable == out.unreliable_);
  return 0;
}
