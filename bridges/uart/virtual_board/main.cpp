// vessel-virtual-board: a UART board on a pty for tests and demos (virtual_board.hpp). Prints
// `READY <link> <slave>` once the host may open the port, runs until SIGINT/SIGTERM, then prints
// one line of counters.
//
//   vessel-virtual-board --link /tmp/ttyBOARD [--baud 115200] [--unpaced] [--time-scale X]
//       [--flip-rate R] [--drop-rate R] [--noise-rate R] [--seed S] [--board-to-host-only]
//       [--telemetry HZ] [--hang-after MS --hang-for MS] [--unplug-after MS --unplug-for MS]
//       [--session N]

#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>

#include "bridges/uart/virtual_board/virtual_board.hpp"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "vessel-virtual-board: %s\n"
               "usage: vessel-virtual-board --link PATH [--baud N] [--unpaced] [--time-scale X]\n"
               "         [--flip-rate R] [--drop-rate R] [--noise-rate R] [--seed S]\n"
               "         [--board-to-host-only] [--telemetry HZ] [--session N]\n"
               "         [--hang-after MS --hang-for MS] [--unplug-after MS --unplug-for MS]\n"
               "  rates are per byte (0.01 = 1%%); the board answers echo 0x01, add 0x02,\n"
               "  read sensor 0x03, telemetry 0x04, fault 0x05 (docs/uart.md)\n",
               why);
  std::exit(2);
}

double number(const char* flag, const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || v < 0) {
    std::fprintf(stderr, "vessel-virtual-board: %s wants a non-negative number, not '%s'\n", flag, text);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace vessel::bridges::uart;
  virtual_board_config cfg;
  double hang_after = -1, hang_for = 0, unplug_after = -1, unplug_for = 0;
  unsigned telemetry = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(("missing value after " + std::string(a)).c_str());
      return argv[++i];
    };
    if (a == "--link") cfg.link = value();
    else if (a == "--baud") cfg.baud = static_cast<std::uint32_t>(number("--baud", value()));
    else if (a == "--unpaced") cfg.paced = false;
    else if (a == "--time-scale") cfg.time_scale = number("--time-scale", value());
    else if (a == "--flip-rate") cfg.faults.bit_flip_rate = number("--flip-rate", value());
    else if (a == "--drop-rate") cfg.faults.drop_rate = number("--drop-rate", value());
    else if (a == "--noise-rate") cfg.faults.noise_rate = number("--noise-rate", value());
    else if (a == "--seed") cfg.faults.seed = static_cast<std::uint64_t>(number("--seed", value()));
    else if (a == "--board-to-host-only") cfg.faults.from_host_too = false;
    else if (a == "--telemetry") telemetry = static_cast<unsigned>(number("--telemetry", value()));
    else if (a == "--session") cfg.session = static_cast<std::uint8_t>(number("--session", value()));
    else if (a == "--hang-after") hang_after = number("--hang-after", value());
    else if (a == "--hang-for") hang_for = number("--hang-for", value());
    else if (a == "--unplug-after") unplug_after = number("--unplug-after", value());
    else if (a == "--unplug-for") unplug_for = number("--unplug-for", value());
    else if (a == "-h" || a == "--help") usage("help");
    else usage(("unknown option " + std::string(a)).c_str());
  }
  if (cfg.baud == 0) usage("--baud must be > 0");
  if (cfg.time_scale <= 0) usage("--time-scale must be > 0");
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);

  try {
    virtual_board board{cfg};
    board.start();
    if (telemetry != 0) board.set_telemetry(telemetry);
    std::printf("READY %s %s\n", cfg.link.empty() ? "-" : cfg.link.c_str(), board.slave_path().c_str());
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    bool hung = false, unplugged = false;
    while (!g_stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds{5});
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!hung && hang_after >= 0 && ms >= hang_after) {
        hung = true;
        board.hang(std::chrono::milliseconds{static_cast<long>(hang_for)});
      }
      if (!unplugged && unplug_after >= 0 && ms >= unplug_after) {
        unplugged = true;
        board.unplug(std::chrono::milliseconds{static_cast<long>(unplug_for)});
      }
    }
    board.stop();
    const auto s = board.stats();
    std::printf(
        "board requests=%" PRIu64 " replies=%" PRIu64 " events=%" PRIu64 " bad_requests=%" PRIu64
        " boots=%" PRIu64 " unplugs=%" PRIu64 " hangs=%" PRIu64 " to_host_bytes=%" PRIu64
        " flipped=%" PRIu64 " dropped=%" PRIu64 " noise=%" PRIu64 " frames=%" PRIu64
        " frames_damaged=%" PRIu64 " from_host_bytes=%" PRIu64 " from_host_flipped=%" PRIu64
        " crc_errors=%" PRIu32 " resync_bytes=%" PRIu32 " retransmitted=%" PRIu32 "\n",
        s.requests, s.replies, s.events, s.bad_requests, s.boots, s.unplugs, s.hangs,
        s.to_host.bytes, s.to_host.bits_flipped, s.to_host.bytes_dropped, s.to_host.noise_bytes,
        s.to_host.frames, s.to_host.frames_damaged, s.from_host.bytes, s.from_host.bits_flipped,
        s.parser.crc_errors, s.parser.resync_bytes, s.link.retransmitted_frames);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vessel-virtual-board: %s\n", e.what());
    return 1;
  }
}
