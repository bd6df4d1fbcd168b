#pragma once
// A private D-Bus daemon and the BlueZ emulation (tests/ble/bluez_gatt.py) per test case, plus a
// driven reactor and a bluez_client on it. Mock state lives for the process, so one bus and one
// mock per case (about half a second). Skips when dbus-daemon or python3-dbusmock is missing.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sdbus-c++/sdbus-c++.h>

#include "bridges/ble/bluez_client.hpp"
#include "io/reactor.hpp"

#ifndef VESSEL_BLE_TEMPLATE
#error "VESSEL_BLE_TEMPLATE must name tests/ble/bluez_gatt.py"
#endif

namespace vessel::bridges::ble::testing {

inline constexpr const char* nus_addr = "C0:FF:EE:00:00:01";
inline constexpr const char* known_addr = "C0:FF:EE:00:00:02";
inline constexpr const char* nus_dev = "/org/bluez/hci0/dev_C0_FF_EE_00_00_01";
inline constexpr const char* known_dev = "/org/bluez/hci0/dev_C0_FF_EE_00_00_02";
inline constexpr const char* python = "/usr/bin/python3";

/// A child process started with fork/exec, killed (by its pid) when destroyed.
struct child {
  pid_t pid = -1;
  ~child() { stop(); }
  void stop() {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
  }
};

inline pid_t spawn(const std::vector<std::string>& argv, int stdout_fd = -1) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (stdout_fd >= 0) ::dup2(stdout_fd, 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

class ble_env : public ::testing::Test {
 protected:
  /// The mock's -p parameters; override per suite.
  virtual std::string mock_parameters() const {
    return std::string{R"({"adapter":"hci0","resolve_delay_ms":30,"nus":")"} + nus_addr +
           R"(","known":")" + known_addr + R"("})";
  }

  void SetUp() override {
    for (const char* tool : {"/usr/bin/dbus-daemon", python})
      if (::access(tool, X_OK) != 0)
        GTEST_SKIP() << tool << " missing (apt-get install dbus-daemon python3-dbusmock)";
    if (std::system("/usr/bin/python3 -c 'import dbusmock' 2>/dev/null") != 0)
      GTEST_SKIP() << "python3-dbusmock missing (apt-get install python3-dbusmock)";
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    bus_.pid =
        spawn({"/usr/bin/dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address=1"},
              fds[1]);
    ::close(fds[1]);
    std::string address;
    char ch = 0;
    while (::read(fds[0], &ch, 1) == 1 && ch != '\n') address += ch;
    ::close(fds[0]);
    ASSERT_FALSE(address.empty()) << "dbus-daemon printed no address";
    ::setenv("DBUS_SYSTEM_BUS_ADDRESS", address.c_str(), 1);
    // The mock logs every call on stdout; VESSEL_BLE_MOCK_LOG=1 keeps it for debugging.
    const char* keep_log = std::getenv("VESSEL_BLE_MOCK_LOG");
    const int quiet =
        (keep_log != nullptr && *keep_log == '1') ? -1 : ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    mock_.pid = spawn({python, "-m", "dbusmock", "--system", "--template", VESSEL_BLE_TEMPLATE,
                       "-p", mock_parameters()},
                      quiet);
    if (quiet >= 0) ::close(quiet);
    control_ = sdbus::createSystemBusConnection();
    auto dbus = sdbus::createProxy(*control_, "org.freedesktop.DBus", "/org/freedesktop/DBus");
    bool up = false;
    for (int i = 0; i < 500 && !up; ++i) {
      dbus->callMethod("NameHasOwner")
          .onInterface("org.freedesktop.DBus")
          .withArguments(std::string{"org.bluez"})
          .storeResultsTo(up);
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds{10});
    }
    ASSERT_TRUE(up) << "the BlueZ emulation did not take org.bluez";
    mock_proxy_ = sdbus::createProxy(*control_, "org.bluez", "/");

    io::reactor_config rc;
    rc.own_thread = false;
    reactor_ = std::make_unique<io::reactor>(rc);
    ASSERT_TRUE(reactor_->start());
    auto c = bluez_client::open(*reactor_);
    ASSERT_TRUE(c) << c.error().to_string();
    client_ = std::move(c).value();
  }

  void TearDown() override {
    extra_teardown();
    if (client_) client_->pump().shutdown();
    if (reactor_) {
      reactor_->stop();
      while (reactor_->run_once(std::chrono::milliseconds{10})) {
      }
    }
    client_.reset();
    reactor_.reset();
    mock_proxy_.reset();
    control_.reset();
    mock_.stop();
    bus_.stop();
  }
  virtual void extra_teardown() {}

  /// Turns the reactor until `done()` or `limit` passes; true if done.
  bool run_until(const std::function<bool()>& done,
                 std::chrono::milliseconds limit = std::chrono::seconds{10}) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > end) return false;
      reactor_->run_once(std::chrono::milliseconds{5});
    }
    return true;
  }

  /// Lets the reactor run for `d` (to let signals arrive).
  void run_for(std::chrono::milliseconds d) {
    const auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) reactor_->run_once(std::chrono::milliseconds{5});
  }

  /// A synchronous call to org.bluez.Mock (the test side may block).
  template <class... Args>
  void mock(const char* method, Args&&... args) {
    mock_proxy_->callMethod(method)
        .onInterface("org.bluez.Mock")
        .withArguments(std::forward<Args>(args)...);
  }
  std::vector<std::vector<std::uint8_t>> written(const std::string& char_path) {
    std::vector<std::vector<std::uint8_t>> out;
    mock_proxy_->callMethod("GetWrittenValues")
        .onInterface("org.bluez.Mock")
        .withArguments(sdbus::ObjectPath{char_path})
        .storeResultsTo(out);
    return out;
  }

  child bus_;
  child mock_;
  std::unique_ptr<sdbus::IConnection> control_;
  std::unique_ptr<sdbus::IProxy> mock_proxy_;
  std::unique_ptr<io::reactor> reactor_;
  std::unique_ptr<bluez_client> client_;
};

}  // namespace vessel::bridges::ble::testing
