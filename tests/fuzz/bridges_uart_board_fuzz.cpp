// libFuzzer target, differential: the board's C99 frame parser (bridges/uart/board/vsl_frame.h)
// against wire's serial decoder (wire/serial_decoder.hpp), fed the same bytes at the same times.
// The board parser is the decoder's twin by design (docs/uart.md): on every input both must
// deliver the same frames in the same order and count the same crc errors, bad lengths,
// truncations, resync bytes and buffered bytes. Beyond that, no crash and no sanitizer report.
//
// Input layout: that of wire_serial_decoder_fuzz, whose corpus this target replays too
// (tests/fuzz/shared_corpora): records `ctl | data...`; ctl's low 6 bits + 1 give how many data
// bytes follow (clipped at the end); bit 6 lets more than the read timeout pass before they
// arrive; bit 7 polls first.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "bridges/uart/board/vsl_frame.h"
#include "wire/serial_decoder.hpp"

namespace {

constexpr std::uint32_t timeout_ms = 10;

void check(bool ok) {
  if (!ok) std::abort();
}

struct twins {
  vessel::wire::serial_decoder host{std::chrono::milliseconds{timeout_ms}};
  vsl_parser board{};
  std::vector<std::vector<std::uint8_t>> host_frames, board_frames;

  twins() { vsl_parser_init(&board, timeout_ms); }

  void drain() {
    while (auto f = host.next()) {
      const auto* b = reinterpret_cast<const std::uint8_t*>(f->data());
      host_frames.emplace_back(b, b + f->size());
    }
    const std::uint8_t* payload = nullptr;
    int n;
    while ((n = vsl_parser_next(&board, &payload)) >= 0) {
      board_frames.emplace_back(payload, payload + n);
    }
  }

  void poll(std::uint32_t now_ms) {
    host.poll(at(now_ms));
    vsl_parser_poll(&board, now_ms);
    drain();
    compare();
  }

  void feed(std::span<const std::uint8_t> data, std::uint32_t now_ms) {
    auto rest_host = std::as_bytes(data);
    auto rest_board = data;
    while (!rest_host.empty() || !rest_board.empty()) {
      const std::size_t h = rest_host.empty() ? 0 : host.feed(rest_host, at(now_ms));
      const std::size_t b =
          rest_board.empty() ? 0 : vsl_parser_feed(&board, rest_board.data(), rest_board.size(), now_ms);
      rest_host = rest_host.subspan(h);
      rest_board = rest_board.subspan(b);
      drain();
      check(h != 0 || b != 0 || (rest_host.empty() && rest_board.empty()));  // draining frees room
    }
    compare();
  }

  void compare() const {
    check(host_frames == board_frames);
    const auto& h = host.counters();
    const auto& b = board.counters;
    check(h.frames_ok == b.frames_ok);
    check(h.crc_errors == b.crc_errors);
    check(h.bad_length == b.bad_length);
    check(h.truncated == b.truncated);
    check(h.resync_bytes == b.resync_bytes);
    check(h.bytes_in == b.bytes_in);
    check(host.buffered() == vsl_parser_buffered(&board));
  }

  static vessel::wire::serial_decoder::clock::time_point at(std::uint32_t ms) {
    return vessel::wire::serial_decoder::clock::time_point{} + std::chrono::milliseconds{ms};
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  twins t;
  std::uint32_t now = 1;
  std::size_t pos = 0;
  while (pos < size) {
    const std::uint8_t ctl = data[pos++];
    const std::size_t n = std::min<std::size_t>((ctl & 0x3Fu) + 1u, size - pos);
    now += (ctl & 0x40u) != 0 ? timeout_ms + 1 : 1;
    if ((ctl & 0x80u) != 0) t.poll(now);
    t.feed({data + pos, n}, now);
    pos += n;
  }
  // Silence at the end: both must have delivered or discarded everything, the same way.
  t.poll(now + timeout_ms + 1);
  check(t.host.buffered() == 0);
  return 0;
}
