// uart_board: a rank that owns a UART board serves it to the other ranks. The rank whose
// VESSEL_DEVICES names a uart device (vessel-run --topology sets it) runs the board's device actor
// (bridges/uart/uart_device.hpp) under a supervisor on a local vessel::node and answers the other
// ranks' requests, which reach it by point-to-point messages; each other rank calls the board:
// echo, add and a sensor read, and checks the answers.
//
//   vessel-virtual-board --link /tmp/vessel-board &       # or a real board on that port
//   vessel-run --topology examples/topologies/uart-board.toml build/bin/uart_board [--calls 3]
//
// Request (to the owner, tag 1): command u8 | timeout ms u32 LE | body.
// Reply (tag 2): 0 | reply body, or 1 | the error as text. An empty request: this rank is done.
// Exit status 0 when every call was answered as expected.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "actors/actor_errc.hpp"
#include "actors/comm.hpp"
#include "actors/node.hpp"
#include "bridges/uart/device_spec.hpp"
#include "bridges/uart/errc.hpp"
#include "bridges/uart/uart_device.hpp"
#include "examples/common/device_service.hpp"
#include "examples/common/support.hpp"

namespace {

using namespace std::chrono_literals;
namespace uart = vessel::bridges::uart;
using vessel::examples::error_reply;
using vessel::examples::get32;
using vessel::examples::le32;

// The owner's side: calls the board through its device actor. A call that meets the device
// between incarnations (unplugged, restarting) is made again on the next one until `timeout`.
class board_server {
 public:
  explicit board_server(uart::uart_device_config config) : name_{config.name} {
    auto sup = node_.spawn_supervised(uart::supervised_uart_device(node_.reactor(), node_.pool(), std::move(config)));
    if (!sup) throw std::runtime_error(sup.error().detail);
    supervisor_ = sup.value();
  }

  // 0 | body, or 1 | error text.
  std::vector<std::byte> call(std::uint8_t command, std::span<const std::byte> body, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string why = "the device did not come up";
    while (std::chrono::steady_clock::now() < deadline) {
      auto dev = uart::current_uart_device(node_.system(), supervisor_, name_, 1s);
      if (!dev) {
        std::this_thread::sleep_for(20ms);
        continue;
      }
      auto data = vessel::actors::payload::copy_of(node_.pool(), body);
      if (!data) return error_reply(data.error().message());
      const auto left = std::chrono::duration_cast<caf::timespan>(deadline - std::chrono::steady_clock::now());
      caf::scoped_actor self{node_.system()};
      std::vector<std::byte> out;
      bool retry = false;
      self->request(dev, left + 5s, vessel::actors::call_atom::value, std::to_string(command), std::move(data).value(), left)
          .receive(
              [&](vessel::actors::payload& reply) {
                out.push_back(std::byte{0});
                out.insert(out.end(), reply.bytes().begin(), reply.bytes().end());
              },
              [&](caf::error& e) {
                why = vessel::actors::describe(e);
                const auto ec = vessel::actors::from_caf_error(e);
                // The incarnation went away under the call: the next one gets it again.
                retry = ec == uart::errc::device_unplugged || ec == uart::errc::link_closed ||
                        e == caf::sec::request_receiver_down || ec == std::errc::no_such_file_or_directory;
              });
      if (!out.empty()) return out;
      if (!retry) break;
      std::this_thread::sleep_for(20ms);
    }
    return error_reply(why);
  }

  vessel::actors::device_stats stats() {
    vessel::actors::device_stats s;
    auto dev = uart::current_uart_device(node_.system(), supervisor_, name_, 1s);
    if (!dev) return s;
    caf::scoped_actor self{node_.system()};
    self->request(dev, 5s, vessel::actors::stats_atom::value)
        .receive([&](vessel::actors::device_stats& r) { s = r; }, [](caf::error&) {});
    return s;
  }

 private:
  vessel::node node_;  // a world of one: the actor system, reactor and supervision for the device
  std::string name_;
  caf::actor supervisor_;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const vessel::examples::arguments args(argc, argv, {"calls", "timeout-ms"});
    const auto calls = static_cast<std::uint32_t>(args.size("calls", 3));
    const auto timeout = std::chrono::milliseconds{args.size("timeout-ms", 10000)};

    const char* env = std::getenv("VESSEL_DEVICES");
    auto devices = uart::parse_uart_devices(env ? env : "");
    if (!devices) {
      std::fprintf(stderr, "uart_board: VESSEL_DEVICES='%s': %s\n", env ? env : "", devices.error().message().c_str());
      return 2;
    }

    vessel::comm world = vessel::comm::init();
    const std::uint32_t me = world.rank();
    // The lowest rank with a uart device serves it.
    const auto owner = vessel::examples::device_owner(world, !devices.value().empty());
    if (!owner) {
      if (me == 0) std::fprintf(stderr, "uart_board: no rank has a uart device (run it with --topology)\n");
      world.finalize();
      return 2;
    }

    int failures = 0;
    if (me == *owner) {
      const auto& cfg = devices.value().front();
      std::printf("rank %u owns uart device '%s' on %s at %u baud (%s)\n", me, cfg.name.c_str(),
                  cfg.link.serial.path.c_str(), cfg.link.serial.baud, cfg.link.reliable ? "reliable" : "plain frames");
      board_server server{cfg};
      const auto served = vessel::examples::serve_until_done(world, [&](std::span<const std::byte> msg) {
        if (msg.size() < 5) return error_reply("?");
        return server.call(static_cast<std::uint8_t>(msg[0]), msg.subspan(5), std::chrono::milliseconds{get32(msg.data() + 1)});
      });
      const auto s = server.stats();
      std::printf("rank %u served %u calls: device calls %llu timeouts %llu errors %llu frames in %llu out %llu "
                  "crc errors %llu retransmits %llu reconnects %llu\n",
                  me, served, static_cast<unsigned long long>(s.calls), static_cast<unsigned long long>(s.call_timeouts),
                  static_cast<unsigned long long>(s.call_errors), static_cast<unsigned long long>(s.frames_in),
                  static_cast<unsigned long long>(s.frames_out), static_cast<unsigned long long>(s.crc_errors),
                  static_cast<unsigned long long>(s.retransmits), static_cast<unsigned long long>(s.reconnects));
    } else {
      const std::uint32_t owner_rank = *owner;
      auto ask = [&](std::uint8_t command, const std::vector<std::byte>& body) {
        std::vector<std::byte> req{std::byte{command}};
        const auto t = le32(static_cast<std::uint32_t>(timeout.count()));
        req.insert(req.end(), t.begin(), t.end());
        req.insert(req.end(), body.begin(), body.end());
        world.send(req, owner_rank, vessel::examples::request_tag);
        return world.recv(owner_rank, vessel::examples::reply_tag, timeout + 10s);
      };
      auto failed = [&](const char* what, const std::vector<std::byte>& r) {
        std::printf("FAIL rank %u: %s: %s\n", me, what, vessel::examples::reply_text(r).c_str());
        ++failures;
      };
      for (std::uint32_t i = 0; i < calls; ++i) {
        const std::string text = "hello from rank " + std::to_string(me) + " #" + std::to_string(i);
        std::vector<std::byte> body(text.size());
        std::memcpy(body.data(), text.data(), text.size());
        const auto r = ask(0x01, body);  // echo
        if (r.empty() || r[0] != std::byte{0}) {
          failed("echo", r);
        } else if (!std::equal(r.begin() + 1, r.end(), body.begin(), body.end())) {
          std::printf("FAIL rank %u: echo came back different\n", me);
          ++failures;
        } else {
          std::printf("rank %u: board echoed '%s'\n", me, text.c_str());
        }
      }
      auto add_args = le32(me);
      const auto forty = le32(40);
      add_args.insert(add_args.end(), forty.begin(), forty.end());
      const auto sum = ask(0x02, add_args);  // add
      if (sum.size() != 5 || sum[0] != std::byte{0} || get32(sum.data() + 1) != me + 40) {
        failed("add", sum);
      } else {
        std::printf("rank %u: board says %u + 40 = %u\n", me, me, get32(sum.data() + 1));
      }
      const auto temp = ask(0x03, {std::byte{0}});  // read sensor 0: temperature, m°C
      if (temp.size() != 5 || temp[0] != std::byte{0}) {
        failed("read_sensor", temp);
      } else {
        std::printf("rank %u: board temperature %.3f C\n", me,
                    static_cast<std::int32_t>(get32(temp.data() + 1)) / 1000.0);
      }
      vessel::examples::say_done(world, owner_rank);
    }
    world.finalize();
    if (failures != 0) return 1;
    std::printf("OK uart_board rank %u\n", me);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uart_board: %s\n", e.what());
    return 1;
  }
}
