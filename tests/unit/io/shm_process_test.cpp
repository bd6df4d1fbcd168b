// The shared-memory transport between two processes. The peer is this same executable, started
// with fork + exec and told its role through the environment (main() below): exec gives the
// child a fresh, single-threaded process, which keeps fork safe under ASan and TSan alike.
//
// Sizes: 1M small frames and 1 GiB of 1 MiB frames by default (the CI budget under ASan;
// 250k and 256 MiB under TSan); the full 10M small frames and 10 GiB in io_long_tests
// (`make long`) or with VESSEL_LONG_TESTS=1 (tests/unit/io/proof_size.hpp).
#include <gtest/gtest.h>

#include <dirent.h>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/errc.hpp"
#include "tests/unit/io/proof_size.hpp"
#include "tests/unit/io/shm_test_support.hpp"

extern char** environ;

namespace vessel::io {
namespace {

using namespace std::chrono_literals;
using shm_test::side;

constexpr int peer_fd_number = 200;  // where the child finds its end of the socketpair

// TSan makes these runs ~10x slower (and sees nothing of the cross-process ring anyway, see
// shm_transport_test.cpp), so its default run is smaller again, to stay well under a minute.
#if defined(__SANITIZE_THREAD__)
constexpr bool tsan_build = true;
#else
constexpr bool tsan_build = false;
#endif

shm_config process_config() {
  shm_config c;
  c.ring_bytes = std::size_t{1} << 20;
  c.area_bytes = std::size_t{8} << 20;
  return c;
}

constexpr std::size_t large_frame = std::size_t{1} << 20;
constexpr std::size_t large_variants = 8;

// The large frames' payloads: slices of one pattern, with their CRCs computed once.
struct large_source {
  std::vector<std::byte> bytes;
  std::array<std::uint32_t, large_variants> crcs{};
  large_source() : bytes(large_frame + large_variants * 4096) {
    const auto& pat = shm_test::pattern();
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      bytes[i] = pat[i % pat.size()] ^ static_cast<std::byte>(i >> 16);
    }
    for (std::size_t v = 0; v < large_variants; ++v) crcs[v] = wire::crc32c(slice(v));
  }
  std::span<const std::byte> slice(std::uint64_t i) const {
    return {bytes.data() + (i % large_variants) * 4096, large_frame};
  }
};

std::span<const std::byte> small_payload(std::uint64_t i) {
  const auto& pat = shm_test::pattern();
  const std::size_t len = 8 + (i * 7919) % 57;  // 8..64 bytes, odd and even
  return {pat.data() + (i * 131) % (pat.size() - 64), len};
}

// Result the sink sends back: what it received.
struct sink_report {
  std::uint64_t frames = 0;
  std::uint64_t bytes = 0;
  std::uint64_t digest = 0;
  std::uint64_t crc_errors = 0;
};

// -- The child process ---------------------------------------------------------------------------

int run_peer(const std::string& role, int fd, std::uint64_t arg) {
  const shm_config config = process_config();
  auto ch = shm_handshake(shm_fd{fd}, shm_role::connector, config);
  if (!ch) {
    std::fprintf(stderr, "peer: handshake failed: %s\n", ch.error().message().c_str());
    return 10;
  }
  side me;
  me.open(std::move(ch).value(), config);
  shm_test::digest rx;
  std::uint64_t crc_errors = 0;
  std::unique_ptr<large_source> large;
  std::uint64_t next = 0;
  std::function<void()> pump;

  if (role == "sink") {
    me.h.frame = [&](const wire::frame_header& h, std::span<const std::byte> payload) {
      if (h.kind() == wire::frame_kind::heartbeat) {
        sink_report r{rx.frames, rx.bytes, rx.value, crc_errors};
        auto bytes = std::as_bytes(std::span{&r, 1});
        (void)me.t->send_copy(shm_test::data_header(h.seq, bytes.size()), bytes);
        return;
      }
      const auto crc = wire::crc32c(payload);
      if (h.crc32c != crc) ++crc_errors;
      rx.add(h.seq, crc, payload.size());
    };
  } else if (role == "source") {
    large = std::make_unique<large_source>();
    pump = [&] {
      for (; next <= arg; ++next) {
        auto sent = next == arg ? me.t->send_copy(shm_test::end_header(next), {})
                                : me.t->send_copy(shm_test::data_header(
                                                      next, large_frame,
                                                      large->crcs[next % large_variants]),
                                                  large->slice(next));
        if (!sent) return;  // full: on_writable() resumes
      }
    };
    me.h.writable = pump;
  } else if (role == "echo") {
    me.h.frame = [&](const wire::frame_header& h, std::span<const std::byte> payload) {
      (void)me.t->send_copy(h, payload);
    };
  } else if (role != "idle") {
    return 11;
  }
  me.start();
  if (pump) shm_test::run_on(*me.r, pump);
  // The parent ends every scenario by closing (or killing us).
  const auto why = me.h.wait_closed(std::chrono::hours{1});
  me.shutdown();
  return why && *why == errc::connection_closed ? 0 : 12;
}

// -- The parent side -----------------------------------------------------------------------------

struct child_process {
  pid_t pid = -1;
  shm_channel channel;

  /// Waits for the child; its exit status, or 128 + signal.
  int wait() {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) return -1;
    pid = -1;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  }
  ~child_process() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      wait();
    }
  }
};

std::unique_ptr<child_process> spawn_peer(const std::string& role, std::uint64_t arg = 0) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return nullptr;
  // Everything the child needs is built before fork: between fork and exec it only calls
  // async-signal-safe functions (dup2, execve, _exit).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.push_back("VESSEL_SHM_PEER=" + role);
  env_strings.push_back("VESSEL_SHM_PEER_ARG=" + std::to_string(arg));
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  char exe[] = "/proc/self/exe";
  char* argv[] = {exe, nullptr};

  const pid_t pid = ::fork();
  if (pid < 0) return nullptr;
  if (pid == 0) {
    if (::dup2(sv[1], peer_fd_number) < 0) ::_exit(120);  // dup2 clears FD_CLOEXEC on the copy
    ::execve(exe, argv, envp.data());
    ::_exit(121);
  }
  ::close(sv[1]);
  auto child = std::make_unique<child_process>();
  child->pid = pid;
  auto ch = shm_handshake(shm_fd{sv[0]}, shm_role::acceptor, process_config());
  if (!ch) {
    ADD_FAILURE() << "handshake with the child failed: " << ch.error().message();
    return nullptr;
  }
  child->channel = std::move(ch).value();
  return child;
}

// Mappings and descriptors of our memfd segments still held by this process.
int vessel_segments_held() {
  int held = 0;
  std::ifstream maps{"/proc/self/maps"};
  for (std::string line; std::getline(maps, line);) {
    if (line.find("memfd:vessel-shm") != std::string::npos) ++held;
  }
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) {
      char target[256] = {};
      const std::string path = std::string{"/proc/self/fd/"} + e->d_name;
      if (::readlink(path.c_str(), target, sizeof target - 1) > 0 &&
          std::strstr(target, "memfd:vessel-shm") != nullptr) {
        ++held;
      }
    }
    ::closedir(d);
  }
  return held;
}

TEST(shm_process, small_frames_reach_the_other_process_in_order_with_equal_checksums) {
  const std::uint64_t frames = test::full_size_proofs() ? 10'000'000
                               : tsan_build               ? 250'000
                                                          : 1'000'000;
  const auto shm_before = shm_test::dev_shm_entries();
  auto child = spawn_peer("sink");
  ASSERT_TRUE(child);
  side me;
  me.open(std::move(child->channel), process_config());

  shm_test::digest tx;
  std::uint64_t next = 0;
  std::function<void()> pump = [&] {
    for (; next <= frames; ++next) {
      result<void> sent = outcome::success();
      if (next == frames) {
        sent = me.t->send_copy(shm_test::end_header(next), {});
      } else {
        const auto payload = small_payload(next);
        const auto crc = wire::crc32c(payload);
        sent = me.t->send_copy(shm_test::data_header(next, payload.size(), crc), payload);
        if (sent) tx.add(next, crc, payload.size());
      }
      if (!sent) return;  // ring full: on_writable() resumes
    }
  };
  std::promise<sink_report> reported;
  me.h.writable = pump;
  me.h.frame = [&](const wire::frame_header&, std::span<const std::byte> payload) {
    sink_report r;
    if (payload.size() == sizeof r) std::memcpy(&r, payload.data(), sizeof r);
    reported.set_value(r);
  };
  me.start();
  const auto t0 = std::chrono::steady_clock::now();
  shm_test::run_on(*me.r, pump);
  auto report = reported.get_future();
  ASSERT_EQ(report.wait_for(120s), std::future_status::ready);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto r = report.get();
  std::printf("%llu small frames in %.2f s (%.2f M frames/s)\n",
              static_cast<unsigned long long>(frames), secs, frames / secs / 1e6);
  EXPECT_EQ(r.frames, frames);
  EXPECT_EQ(r.bytes, tx.bytes);
  EXPECT_EQ(r.digest, tx.value);
  EXPECT_EQ(r.crc_errors, 0u);
  EXPECT_EQ(shm_test::dev_shm_entries(), shm_before) << "a memfd link creates nothing in /dev/shm";

  shm_test::run_on(*me.r, [&] { me.t->close(); });
  ASSERT_TRUE(me.h.wait_closed(5s).has_value());
  EXPECT_EQ(child->wait(), 0) << "the child saw our orderly close as connection_closed";
  me.shutdown();
  EXPECT_EQ(vessel_segments_held(), 0);
}

TEST(shm_process, large_payloads_are_read_in_place_with_equal_checksums) {
  // x 1 MiB: 10 GiB, 1 GiB, or 256 MiB under TSan (which slows each byte ~20x).
  const std::uint64_t frames = test::full_size_proofs() ? 10240 : tsan_build ? 256 : 1024;
  auto child = spawn_peer("source", frames);
  ASSERT_TRUE(child);
  side me;
  me.open(std::move(child->channel), process_config());

  const large_source expected_source;
  shm_test::digest expected, rx;
  for (std::uint64_t i = 0; i < frames; ++i) {
    expected.add(i, expected_source.crcs[i % large_variants], large_frame);
  }
  std::uint64_t crc_errors = 0;
  std::promise<void> ended;
  me.h.frame = [&](const wire::frame_header& h, std::span<const std::byte> payload) {
    if (h.kind() == wire::frame_kind::heartbeat) return ended.set_value();
    const auto crc = wire::crc32c(payload);  // reads the sender's bytes in place
    if (h.crc32c != crc) ++crc_errors;
    rx.add(h.seq, crc, payload.size());
  };
  const auto t0 = std::chrono::steady_clock::now();
  me.start();
  auto done = ended.get_future();
  ASSERT_EQ(done.wait_for(300s), std::future_status::ready);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%llu MiB in %.2f s (%.2f GB/s, CRC on the receiving side)\n",
              static_cast<unsigned long long>(frames), secs, frames * large_frame / secs / 1e9);
  EXPECT_EQ(shm_test::run_on(*me.r, [&] { return rx.frames; }), frames);
  EXPECT_EQ(rx.value, expected.value);
  EXPECT_EQ(rx.bytes, expected.bytes);
  EXPECT_EQ(crc_errors, 0u);

  shm_test::run_on(*me.r, [&] { me.t->close(); });
  ASSERT_TRUE(me.h.wait_closed(5s).has_value());
  EXPECT_EQ(child->wait(), 0);
}

TEST(shm_process, killed_peer_is_reported_as_connection_reset_within_a_second) {
  const auto shm_before = shm_test::dev_shm_entries();
  auto child = spawn_peer("echo");
  ASSERT_TRUE(child);
  side me;
  me.open(std::move(child->channel), process_config());
  std::promise<void> echoed;
  me.h.frame = [&](const wire::frame_header&, std::span<const std::byte>) { echoed.set_value(); };
  me.start();
  shm_test::run_on(*me.r, [&] {
    ASSERT_TRUE(me.t->send_copy(shm_test::data_header(1, 0), {}));
  });
  ASSERT_EQ(echoed.get_future().wait_for(10s), std::future_status::ready) << "peer not running";

  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(child->pid, SIGKILL), 0);
  const auto why = me.h.wait_closed(5s);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(why.has_value()) << "no on_closed within 5 s of SIGKILL";
  EXPECT_EQ(*why, errc::connection_reset) << why->message();
  EXPECT_LT(took, 1s) << "peer death must be noticed within a bounded time";
  std::printf("peer death noticed after %.3f ms\n",
              std::chrono::duration<double, std::milli>(took).count());
  EXPECT_EQ(child->wait(), 128 + SIGKILL);

  // Nothing outlives the link: no /dev/shm entry, no mapping, no descriptor of a segment.
  me.shutdown();
  EXPECT_EQ(vessel_segments_held(), 0);
  EXPECT_EQ(shm_test::dev_shm_entries(), shm_before);
}

TEST(shm_process, ping_pong_round_trips_between_processes) {
  auto child = spawn_peer("echo");
  ASSERT_TRUE(child);
  side me;
  me.open(std::move(child->channel), process_config());
  constexpr int round_trips = 20000;
  int done = 0;
  std::promise<void> finished;
  const std::byte payload[8] = {};
  bool order_ok = true;
  me.h.frame = [&](const wire::frame_header& h, std::span<const std::byte> p) {
    order_ok = order_ok && h.seq == static_cast<std::uint64_t>(done) && p.size() == 8;
    if (++done == round_trips) return finished.set_value();
    (void)me.t->send_copy(shm_test::data_header(done, 8), payload);
  };
  me.start();
  const auto t0 = std::chrono::steady_clock::now();
  shm_test::run_on(*me.r, [&] { (void)me.t->send_copy(shm_test::data_header(0, 8), payload); });
  ASSERT_EQ(finished.get_future().wait_for(60s), std::future_status::ready);
  const auto half_rtt =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      round_trips / 2;
  std::printf("8-byte ping-pong: %.2f us half round trip (%d round trips)\n", half_rtt,
              round_trips);
  EXPECT_TRUE(order_ok);
  shm_test::run_on(*me.r, [&] { me.t->close(); });
  ASSERT_TRUE(me.h.wait_closed(5s).has_value());
  EXPECT_EQ(child->wait(), 0);
}

}  // namespace
}  // namespace vessel::io

int main(int argc, char** argv) {
  if (const char* role = std::getenv("VESSEL_SHM_PEER")) {
    const char* arg = std::getenv("VESSEL_SHM_PEER_ARG");
    return vessel::io::run_peer(role, vessel::io::peer_fd_number,
                                arg != nullptr ? std::strtoull(arg, nullptr, 10) : 0);
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
