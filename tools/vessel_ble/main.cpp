// vessel-ble: poke a BLE peripheral through BlueZ (the bridge's own client and engine).
//   vessel-ble [--adapter hci0] scan [--timeout SEC] [--name NAME] [--uuid UUID]
//   vessel-ble [--adapter hci0] read ADDR CHAR_UUID
//   vessel-ble [--adapter hci0] write ADDR CHAR_UUID HEX [--no-response]
//   vessel-ble [--adapter hci0] notify ADDR CHAR_UUID [--count N] [--timeout SEC]
// Output is for scripts: one line per device (ADDR NAME RSSI UUIDS...) or per value (hex).
// Exit status: 0 done, 1 BLE error (message on stderr), 2 usage, 3 notify timed out before --count.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "bridges/ble/bluez_client.hpp"
#include "bridges/ble/peripheral.hpp"
#include "io/reactor.hpp"

namespace {

using namespace vessel::bridges::ble;
using clock_type = std::chrono::steady_clock;

int usage() {
  std::cerr
      << "usage: vessel-ble [--adapter NAME] scan [--timeout SEC] [--name NAME] [--uuid UUID]\n"
         "       vessel-ble [--adapter NAME] read ADDR CHAR_UUID\n"
         "       vessel-ble [--adapter NAME] write ADDR CHAR_UUID HEX [--no-response]\n"
         "       vessel-ble [--adapter NAME] notify ADDR CHAR_UUID [--count N] [--timeout SEC]\n";
  return 2;
}

std::string hex(std::span<const std::uint8_t> v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (const auto b : v) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

std::optional<std::vector<std::uint8_t>> parse_hex(std::string_view s) {
  std::vector<std::uint8_t> out;
  if (s.starts_with("0x")) s.remove_prefix(2);
  if (s.size() % 2 != 0) return std::nullopt;
  for (std::size_t i = 0; i < s.size(); i += 2) {
    unsigned v = 0;
    if (std::sscanf(std::string{s.substr(i, 2)}.c_str(), "%2x", &v) != 1) return std::nullopt;
    out.push_back(static_cast<std::uint8_t>(v));
  }
  return out;
}

struct tool {
  vessel::io::reactor reactor{[] {
    vessel::io::reactor_config rc;
    rc.own_thread = false;
    return rc;
  }()};
  std::unique_ptr<bluez_client> client;

  template <class Pred>
  bool run_until(Pred done, std::chrono::milliseconds limit) {
    const auto end = clock_type::now() + limit;
    while (!done()) {
      if (clock_type::now() > end) return false;
      reactor.run_once(std::chrono::milliseconds{10});
    }
    return true;
  }
  ~tool() {
    if (client) client->pump().shutdown();
    reactor.stop();
    while (reactor.run_once(std::chrono::milliseconds{10})) {
    }
  }
};

int fail(const ble_error& e) {
  std::cerr << "vessel-ble: " << e.to_string() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string adapter, name, uuid_filter;
  double timeout_s = -1;
  long count = 0;
  bool with_response = true;
  std::vector<std::string> pos;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "--adapter" && has_value)
      adapter = args[++i];
    else if (a == "--timeout" && has_value)
      timeout_s = std::atof(args[++i].c_str());
    else if (a == "--count" && has_value)
      count = std::atol(args[++i].c_str());
    else if (a == "--name" && has_value)
      name = args[++i];
    else if (a == "--uuid" && has_value)
      uuid_filter = args[++i];
    else if (a == "--no-response")
      with_response = false;
    else if (a.starts_with("--"))
      return usage();
    else
      pos.push_back(a);
  }
  if (pos.empty()) return usage();
  const auto& cmd = pos[0];
  if ((cmd == "scan" && pos.size() != 1) ||
      ((cmd == "read" || cmd == "notify") && pos.size() != 3) ||
      (cmd == "write" && pos.size() != 4) ||
      (cmd != "scan" && cmd != "read" && cmd != "write" && cmd != "notify"))
    return usage();

  tool t;
  if (auto started = t.reactor.start(); !started) {
    std::cerr << "vessel-ble: reactor: " << started.error().message() << "\n";
    return 1;
  }
  auto c = bluez_client::open(t.reactor, adapter);
  if (!c) return fail(c.error());
  t.client = std::move(c).value();
  auto& client = *t.client;

  if (cmd == "scan") {
    // Known devices first (bonded ones never advertise as new), then whatever discovery finds.
    const scan_filter filter{
        name, {}, uuid_filter.empty() ? std::vector<std::string>{} : std::vector{uuid_filter}};
    std::vector<std::string> seen;
    auto print = [&](const device_info& d) {
      if (!filter.matches(d) || std::find(seen.begin(), seen.end(), d.address) != seen.end())
        return;
      seen.push_back(d.address);
      std::cout << d.address << " " << (d.name.empty() ? "-" : d.name) << " "
                << (d.rssi ? std::to_string(*d.rssi) : std::string{"-"});
      for (const auto& u : d.uuids) std::cout << " " << u;
      std::cout << std::endl;
    };
    for (const auto& d : client.devices(filter)) print(d);
    client.on_device(print);
    std::optional<ble_result<void>> started;
    client.start_discovery(filter, [&](ble_result<void> r) { started = std::move(r); });
    if (!t.run_until([&] { return started.has_value(); }, std::chrono::seconds{10})) return 1;
    if (!*started) return fail(started->error());
    t.run_until(
        [] { return false; },
        std::chrono::milliseconds{static_cast<long>((timeout_s < 0 ? 5 : timeout_s) * 1000)});
    bool stopped = false;
    client.stop_discovery([&](ble_result<void>) { stopped = true; });
    t.run_until([&] { return stopped; }, std::chrono::seconds{2});
    return 0;
  }

  peripheral_config pc;
  pc.address = pos[1];
  peripheral dev{client, pc};
  std::optional<ble_result<void>> ready;
  dev.start([&](ble_result<void> r) { ready = std::move(r); });
  t.run_until([&] { return ready.has_value(); },
              pc.connect_timeout + pc.discovery_timeout + std::chrono::seconds{1});
  if (!ready) return fail(ble_error{errc::timeout, pc.address, {}, "no link"});
  if (!*ready) return fail(ready->error());

  int rc = 0;
  if (cmd == "read") {
    std::optional<ble_result<std::vector<std::uint8_t>>> v;
    dev.read(pos[2], [&](auto r) { v = std::move(r); });
    t.run_until([&] { return v.has_value(); }, pc.request_timeout + std::chrono::seconds{1});
    if (!v)
      rc = fail(ble_error{errc::timeout, pc.address, pos[2], {}});
    else if (!*v)
      rc = fail(v->error());
    else
      std::cout << hex(v->value()) << std::endl;
  } else if (cmd == "write") {
    const auto data = parse_hex(pos[3]);
    if (!data) {
      dev.close();
      return usage();
    }
    std::optional<ble_result<void>> w;
    dev.write(pos[2], *data, with_response, [&](auto r) { w = std::move(r); });
    t.run_until([&] { return w.has_value(); }, pc.request_timeout + std::chrono::seconds{1});
    if (!w)
      rc = fail(ble_error{errc::timeout, pc.address, pos[2], {}});
    else if (!*w)
      rc = fail(w->error());
  } else {  // notify
    long got = 0;
    std::optional<ble_result<void>> sub;
    dev.subscribe(
        pos[2],
        [&](std::span<const std::uint8_t> v) {
          ++got;
          std::cout << hex(v) << std::endl;
        },
        [&](auto r) { sub = std::move(r); });
    t.run_until([&] { return sub.has_value(); }, pc.request_timeout + std::chrono::seconds{1});
    if (!sub || !*sub) {
      rc = fail(sub ? sub->error() : ble_error{errc::timeout, pc.address, pos[2], {}});
    } else {
      const auto limit = timeout_s < 0
                             ? std::chrono::milliseconds{std::chrono::hours{24 * 365}}
                             : std::chrono::milliseconds{static_cast<long>(timeout_s * 1000)};
      const bool enough = t.run_until([&] { return count > 0 && got >= count; }, limit);
      if (count > 0 && !enough) rc = 3;
    }
  }
  dev.close();
  t.run_until([] { return false; }, std::chrono::milliseconds{50});  // let Disconnect go out
  return rc;
}
