// vessel-serial: a protocol-aware serial monitor for vessel's frames (`0xAA | len | payload |
// crc8`, docs/uart.md).
//
//   vessel-serial listen --port PATH --baud N [--count K] [--timeout S]
//     prints each valid frame's payload as lowercase hex, one line per frame, on stdout; stops
//     after K frames, after S seconds (fractions allowed), on SIGINT/SIGTERM or when the device is
//     unplugged; then prints one summary line with the error counters on stderr.
//   vessel-serial send --port PATH --baud N HEX...
//     sends each HEX string as one frame (in order), waits until the line has taken them.
//
// Exit codes: 0 done; 1 listen ended by its timeout before K frames; 2 bad arguments (a bad HEX
// included, nothing sent); 3 the port could not be opened, or the device went away.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/errc.hpp"
#include "io/reactor.hpp"
#include "io/serial_transport.hpp"
#include "tools/vessel_serial/hex.hpp"
#include "wire/serial_frame.hpp"

namespace {

using namespace std::chrono_literals;
using vessel::io::reactor;
using vessel::io::serial_transport;

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "vessel-serial: %s\n"
               "usage: vessel-serial listen --port PATH --baud N [--count K] [--timeout S]\n"
               "       vessel-serial send --port PATH --baud N HEX...\n",
               why.c_str());
  std::exit(2);
}

struct options {
  std::string mode;
  std::string port;
  std::uint32_t baud = 0;
  std::optional<unsigned long> count;
  std::optional<double> timeout_s;
  std::vector<std::vector<std::byte>> frames;
};

unsigned long whole(const std::string& flag, const char* text) {
  char* end = nullptr;
  const unsigned long v = std::strtoul(text, &end, 10);
  if (end == text || *end != '\0' || text[0] == '-') usage(flag + " wants a whole number, not '" + text + "'");
  return v;
}

options parse(int argc, char** argv) {
  if (argc < 2) usage("missing mode");
  options o;
  o.mode = argv[1];
  if (o.mode != "listen" && o.mode != "send") usage("unknown mode '" + o.mode + "'");
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage("missing value after " + a);
      return argv[++i];
    };
    if (a == "--port") {
      o.port = value();
    } else if (a == "--baud") {
      o.baud = static_cast<std::uint32_t>(whole(a, value()));
    } else if (a == "--count" && o.mode == "listen") {
      o.count = whole(a, value());
    } else if (a == "--timeout" && o.mode == "listen") {
      const char* t = value();
      char* end = nullptr;
      const double s = std::strtod(t, &end);
      if (end == t || *end != '\0' || s < 0) usage("--timeout wants seconds, not '" + std::string(t) + "'");
      o.timeout_s = s;
    } else if (o.mode == "send" && a.rfind("--", 0) != 0) {
      auto bytes = vessel::tools::from_hex(a);
      if (!bytes) usage("not a hex string (whole bytes, digits 0-9a-f): '" + a + "'");
      if (bytes->size() > vessel::wire::serial_max_payload) {
        usage("'" + a.substr(0, 16) + "...' is " + std::to_string(bytes->size()) +
              " bytes; a frame carries at most 253");
      }
      o.frames.push_back(std::move(*bytes));
    } else {
      usage("unknown option '" + a + "' for " + o.mode);
    }
  }
  if (o.port.empty()) usage("--port is required");
  if (o.baud == 0) usage("--baud is required");
  if (o.mode == "send" && o.frames.empty()) usage("send needs at least one HEX frame");
  return o;
}

struct handler final : vessel::io::serial_handler {
  void on_serial_frame(std::span<const std::byte> payload) override {
    std::printf("%s\n", vessel::tools::to_hex(payload).c_str());
    std::fflush(stdout);
    ++frames;
  }
  void on_writable() override {}
  void on_closed(std::error_code why) override { closed = why; }
  unsigned long frames = 0;
  std::optional<std::error_code> closed;
};

void summary(const serial_transport& t) {
  const auto s = t.stats();
  std::fprintf(stderr,
               "summary frames=%llu bytes=%llu crc_errors=%llu bad_length=%llu truncated=%llu "
               "resync_bytes=%llu\n",
               static_cast<unsigned long long>(s.frames_received),
               static_cast<unsigned long long>(s.bytes_received),
               static_cast<unsigned long long>(s.crc_errors),
               static_cast<unsigned long long>(s.bad_length),
               static_cast<unsigned long long>(s.truncated),
               static_cast<unsigned long long>(s.resync_bytes));
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  vessel::io::reactor_config rc;
  rc.own_thread = false;  // this thread drives it: the handler needs no locks
  reactor r{rc};
  if (auto s = r.start(); !s) {
    std::fprintf(stderr, "vessel-serial: reactor: %s\n", s.error().message().c_str());
    return 3;
  }
  vessel::io::serial_config sc;
  sc.path = o.port;
  sc.baud = o.baud;
  handler h;
  auto opened = serial_transport::open(r, sc, h);
  if (!opened) {
    std::fprintf(stderr, "vessel-serial: cannot open %s: %s\n", o.port.c_str(),
                 opened.error().message().c_str());
    return opened.error() == vessel::io::errc::unsupported_baud ? 2 : 3;
  }
  auto& t = *opened.value();
  int rc_exit = 0;

  if (o.mode == "listen") {
    const auto deadline = o.timeout_s
                              ? reactor::clock::now() + std::chrono::duration_cast<reactor::clock::duration>(
                                                            std::chrono::duration<double>(*o.timeout_s))
                              : reactor::clock::time_point::max();
    while (!g_stop && !h.closed && !(o.count && h.frames >= *o.count)) {
      const auto now = reactor::clock::now();
      if (now >= deadline) {
        if (o.count) rc_exit = 1;
        break;
      }
      r.run_once(std::min<reactor::clock::duration>(deadline - now, 50ms));
    }
    if (h.closed) {
      std::fprintf(stderr, "vessel-serial: %s: %s\n", o.port.c_str(), h.closed->message().c_str());
      rc_exit = 3;
    }
  } else {
    for (const auto& f : o.frames) {
      for (;;) {
        const auto sent = t.send_frame(f);
        if (sent) break;
        if (sent.error() != vessel::io::errc::send_queue_full || h.closed || g_stop) {
          std::fprintf(stderr, "vessel-serial: send: %s\n", sent.error().message().c_str());
          rc_exit = 3;
          break;
        }
        r.run_once(10ms);
      }
      if (rc_exit != 0) break;
    }
    while (rc_exit == 0 && t.queued_bytes() > 0 && !h.closed && !g_stop) r.run_once(10ms);
    // The port's close discards output not yet sent (TCOFLUSH; on a pty, what the peer has not
    // read yet): give the line the time its bytes take, plus the adapter-latency floor.
    std::size_t bytes = 0;
    for (const auto& f : o.frames) bytes += vessel::wire::serial_frame_size(f.size());
    const auto drained = reactor::clock::now() +
                         vessel::wire::serial_frame_time(sc.baud, sc.bits_per_char(), bytes) +
                         vessel::wire::serial_timeout_floor;
    while (rc_exit == 0 && !h.closed && reactor::clock::now() < drained) r.run_once(5ms);
  }
  if (o.mode == "listen") summary(t);
  t.close();
  while (!h.closed && r.run_once(10ms)) {
  }
  r.stop();
  while (r.run_once(1ms)) {
  }
  return rc_exit;
}
