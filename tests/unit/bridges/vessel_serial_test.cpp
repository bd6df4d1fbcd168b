// vessel-serial (tools/vessel_serial) against a pty pair: the test owns the master side and plays
// the board; the tool opens the slave through a symlink, as it would /dev/ttyUSB0.

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tools/vessel_serial/hex.hpp"
#include "wire/serial_decoder.hpp"
#include "wire/serial_frame.hpp"

namespace vessel::tools {
namespace {

using namespace std::chrono_literals;

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in{p};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::byte> frame_of(std::span<const std::byte> payload) {
  std::vector<std::byte> out(wire::serial_frame_size(payload.size()));
  EXPECT_TRUE(wire::encode_serial_frame(payload, out).has_value());
  return out;
}

class vessel_serial_test : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vessel_serial_tool_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    char name[256] = {};
    ASSERT_EQ(::openpty(&master_, &keeper_, name, nullptr, nullptr), 0);
    termios t{};
    ASSERT_EQ(::tcgetattr(keeper_, &t), 0);
    ::cfmakeraw(&t);
    ::cfsetspeed(&t, B38400);  // the pty default; the tool sets 115200 when it has opened
    ASSERT_EQ(::tcsetattr(keeper_, TCSANOW, &t), 0);
    link_ = dir_ / "ttyBOARD";
    std::filesystem::create_symlink(name, link_);
  }

  void TearDown() override {
    if (master_ >= 0) ::close(master_);
    if (keeper_ >= 0) ::close(keeper_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Starts the tool with `args`; stdout and stderr go to files under dir_.
  pid_t spawn(const std::vector<std::string>& args) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const auto out = (dir_ / "stdout").string();
      const auto err = (dir_ / "stderr").string();
      ::freopen(out.c_str(), "w", stdout);
      ::freopen(err.c_str(), "w", stderr);
      std::vector<char*> argv;
      std::string bin = VESSEL_SERIAL_BIN;
      argv.push_back(bin.data());
      std::vector<std::string> copy = args;
      for (auto& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
    return pid;
  }

  int wait_exit(pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // The tool has opened and configured the port once the slave's speed (read through the master)
  // is the one it asked for.
  bool wait_configured(speed_t speed, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      termios t{};
      if (::tcgetattr(master_, &t) == 0 && ::cfgetospeed(&t) == speed) return true;
      std::this_thread::sleep_for(2ms);
    }
    return false;
  }

  void write_master(std::span<const std::byte> bytes) {
    ASSERT_EQ(::write(master_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }

  std::filesystem::path dir_;
  std::filesystem::path link_;
  int master_ = -1;
  int keeper_ = -1;
};

TEST(vessel_serial_hex, parses_and_prints_lowercase) {
  const auto b = from_hex("00aBfF10");
  ASSERT_TRUE(b);
  EXPECT_EQ(to_hex(*b), "00abff10");
  EXPECT_TRUE(from_hex("").has_value());
  EXPECT_FALSE(from_hex("abc"));
  EXPECT_FALSE(from_hex("zz"));
  EXPECT_FALSE(from_hex("0x12"));
}

TEST_F(vessel_serial_test, listen_prints_each_frame_as_hex_and_a_summary_of_errors) {
  const pid_t pid = spawn({"listen", "--port", link_.string(), "--baud", "115200", "--count", "3",
                           "--timeout", "20"});
  ASSERT_TRUE(wait_configured(B115200, 10s));
  std::this_thread::sleep_for(50ms);  // past the open's input flush
  const std::vector<std::byte> a{std::byte{0x01}, std::byte{0xAB}};
  const std::vector<std::byte> b{};
  const std::vector<std::byte> c{std::byte{0xFF}, std::byte{0x00}, std::byte{0x10}};
  std::vector<std::byte> line;
  const auto fa = frame_of(a);
  line.insert(line.end(), fa.begin(), fa.end());
  // Garbage: 3 resync bytes, then a frame with a broken CRC (1 CRC error; its other bytes resync).
  for (int i = 0; i < 3; ++i) line.push_back(std::byte{0x55});
  auto bad = frame_of(c);
  bad.back() ^= std::byte{0x01};
  line.insert(line.end(), bad.begin(), bad.end());
  const auto fb = frame_of(b);
  line.insert(line.end(), fb.begin(), fb.end());
  const auto fc = frame_of(c);
  line.insert(line.end(), fc.begin(), fc.end());
  write_master(line);
  EXPECT_EQ(wait_exit(pid), 0);
  EXPECT_EQ(slurp(dir_ / "stdout"), "01ab\n\nff0010\n");
  const auto err = slurp(dir_ / "stderr");
  EXPECT_NE(err.find("summary frames=3 "), std::string::npos) << err;
  EXPECT_NE(err.find(" crc_errors=1 "), std::string::npos) << err;
  EXPECT_NE(err.find(" resync_bytes=" + std::to_string(3 + bad.size() - 1)), std::string::npos) << err;
}

TEST_F(vessel_serial_test, listen_times_out_before_its_count_with_exit_code_1) {
  const pid_t pid = spawn({"listen", "--port", link_.string(), "--baud", "115200", "--count", "5",
                           "--timeout", "0.3"});
  EXPECT_EQ(wait_exit(pid), 1);
  EXPECT_EQ(slurp(dir_ / "stdout"), "");
  EXPECT_NE(slurp(dir_ / "stderr").find("summary frames=0 "), std::string::npos);
}

TEST_F(vessel_serial_test, send_writes_each_hex_argument_as_one_frame) {
  const pid_t pid = spawn({"send", "--port", link_.string(), "--baud", "115200", "00ff", "", "DEADbeef"});
  wire::serial_decoder dec{115200, 10};
  std::vector<std::string> got;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (got.size() < 3 && std::chrono::steady_clock::now() < deadline) {
    pollfd p{master_, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    std::byte buf[256];
    const auto r = ::read(master_, buf, sizeof buf);
    if (r <= 0) continue;
    std::span<const std::byte> rest{buf, static_cast<std::size_t>(r)};
    while (!rest.empty()) {
      rest = rest.subspan(dec.feed(rest));
      while (auto f = dec.next()) got.push_back(to_hex(*f));
    }
  }
  EXPECT_EQ(wait_exit(pid), 0);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], "00ff");
  EXPECT_EQ(got[1], "");
  EXPECT_EQ(got[2], "deadbeef");
  EXPECT_EQ(dec.counters().crc_errors, 0u);
}

TEST_F(vessel_serial_test, bad_hex_is_refused_with_exit_code_2_and_nothing_sent) {
  for (const std::string bad : {"abc", "zz", "0x12"}) {
    const pid_t pid = spawn({"send", "--port", link_.string(), "--baud", "115200", "00", bad});
    EXPECT_EQ(wait_exit(pid), 2) << bad;
    EXPECT_NE(slurp(dir_ / "stderr").find("not a hex string"), std::string::npos) << bad;
  }
  const std::string big(2 * 254, 'a');
  EXPECT_EQ(wait_exit(spawn({"send", "--port", link_.string(), "--baud", "115200", big})), 2);
  EXPECT_EQ(wait_exit(spawn({"listen", "--port", link_.string()})), 2);  // no --baud
  EXPECT_EQ(wait_exit(spawn({"frobnicate"})), 2);
  EXPECT_EQ(wait_exit(spawn({"listen", "--port", (dir_ / "missing").string(), "--baud", "115200"})), 3);
  // Nothing reached the line.
  pollfd p{master_, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 50), 0);
}

}  // namespace
}  // namespace vessel::tools
