// A rank that owns a UART board, end to end: vessel-virtual-board on a pty, then vessel-run with
// examples/topologies/uart-board.toml (its port moved into the test's directory) running
// examples/uart_board. The rank with the uart device (VESSEL_DEVICES) spawns the board's device
// actor; the other rank calls the board through it by point-to-point messages (echo, add, sensor).

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string slurp(const fs::path& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Starts `argv` with stdout/stderr into `out`/`err`.
pid_t spawn(std::vector<std::string> argv, const fs::path& out, const fs::path& err) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!std::freopen(out.c_str(), "w", stdout) || !std::freopen(err.c_str(), "w", stderr)) ::_exit(99);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(98);
  }
  return pid;
}

// Waits for `pid` up to `timeout` (then kills it); its exit status, 128 + signal if it died of one.
int finish(pid_t pid, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "process " << pid << " did not end within " << timeout.count() << " s";
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class uart_board_run_test : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/vessel-uart-run-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    if (board_ > 0) {
      ::kill(board_, SIGKILL);
      ::waitpid(board_, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  fs::path dir_;
  pid_t board_ = -1;
};

TEST_F(uart_board_run_test, a_rank_calls_the_board_another_rank_owns) {
  const auto port = dir_ / "board";
  board_ = spawn({VIRTUAL_BOARD_PATH, "--link", port.string()}, dir_ / "board.out", dir_ / "board.err");
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (slurp(dir_ / "board.out").find("READY") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << slurp(dir_ / "board.err");
    std::this_thread::sleep_for(20ms);
  }

  // The example topology, its port moved here.
  std::string topology = slurp(fs::path{VESSEL_SOURCE_DIR} / "examples/topologies/uart-board.toml");
  const std::string original = "\"/tmp/vessel-board\"";
  const auto at = topology.find(original);
  ASSERT_NE(at, std::string::npos) << "the example topology names no /tmp/vessel-board port";
  topology.replace(at, original.size(), "\"" + port.string() + "\"");
  std::ofstream{dir_ / "uart-board.toml"} << topology;

  const pid_t run = spawn({VESSEL_RUN_PATH, "--topology", (dir_ / "uart-board.toml").string(), UART_BOARD_PATH,
                           "--calls", "3"},
                          dir_ / "run.out", dir_ / "run.err");
  const int status = finish(run, 180s);
  const auto out = slurp(dir_ / "run.out");
  const auto err = slurp(dir_ / "run.err");
  ASSERT_EQ(status, 0) << out << err;
  EXPECT_NE(out.find("owns uart device 'uart0' on " + port.string()), std::string::npos) << out;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(out.find("board echoed 'hello from rank 0 #" + std::to_string(i) + "'"), std::string::npos) << out;
  }
  EXPECT_NE(out.find("board says 0 + 40 = 40"), std::string::npos) << out;
  EXPECT_NE(out.find("board temperature"), std::string::npos) << out;
  EXPECT_NE(out.find("served 5 calls"), std::string::npos) << out;
  EXPECT_NE(out.find("OK uart_board rank 0"), std::string::npos) << out;
  EXPECT_NE(out.find("OK uart_board rank 1"), std::string::npos) << out;

  // The board ran the five requests.
  ::kill(board_, SIGTERM);
  EXPECT_EQ(finish(board_, 30s), 0);
  board_ = -1;
  const auto board_out = slurp(dir_ / "board.out");
  EXPECT_NE(board_out.find("board requests=5 "), std::string::npos) << board_out;
}

}  // namespace
