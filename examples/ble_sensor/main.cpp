// ble_sensor: a rank that owns a BLE peripheral serves it to the other ranks. The rank whose
// VESSEL_DEVICES names a ble device (vessel-run --topology sets it) runs the peripheral's device
// actor (bridges/ble/device_actor.hpp) under a supervisor on a local vessel::node and answers the
// other ranks' reads, which reach it by point-to-point messages; each other rank reads the
// characteristic (--read, the battery level 0x2a19 by default) --reads times and prints its value.
//
//   vessel-run --topology examples/topologies/ble-sensor.toml build/bin/ble_sensor [--read 2a19]
//
// Request (to the owner, tag 1): timeout ms u32 LE | characteristic UUID.
// Reply (tag 2): 0 | the value, or 1 | the error as text. An empty request: this rank is done.
// Exit status 0 when every read was answered.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "actors/actor_errc.hpp"
#include "actors/comm.hpp"
#include "actors/node.hpp"
#include "actors/supervisor.hpp"
#include "bridges/ble/device_spec.hpp"
#include "bridges/ble/errc.hpp"
#include "examples/common/device_service.hpp"
#include "examples/common/support.hpp"

namespace {

using namespace std::chrono_literals;
namespace ble = vessel::bridges::ble;
using vessel::examples::error_reply;
using vessel::examples::get32;
using vessel::examples::le32;

std::string hex(std::span<const std::byte> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (const auto b : bytes) {
    s += digits[static_cast<unsigned>(b) >> 4];
    s += digits[static_cast<unsigned>(b) & 15];
  }
  return s;
}

// The owner's side: reads through the device actor. A read that meets the device between
// incarnations (its first connect failed and the supervisor restarts it) is made again on the
// next one until `timeout`.
class sensor_server {
 public:
  explicit sensor_server(ble::ble_device_config config) : child_{"ble/" + config.name} {
    auto sup = node_.spawn_supervised(ble::make_ble_device_child(node_.reactor(), node_.pool(), std::move(config)));
    if (!sup) throw std::runtime_error(sup.error().detail);
  }

  // 0 | value, or 1 | error text.
  std::vector<std::byte> read(const std::string& uuid, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string why = "the device did not come up";
    while (std::chrono::steady_clock::now() < deadline) {
      const auto dev = current();
      if (!dev) {
        std::this_thread::sleep_for(20ms);
        continue;
      }
      const auto left = std::chrono::duration_cast<caf::timespan>(deadline - std::chrono::steady_clock::now());
      caf::scoped_actor self{node_.system()};
      std::vector<std::byte> out;
      bool retry = false;
      self->request(dev, left + 5s, vessel::actors::call_atom::value, uuid, vessel::actors::payload{}, left)
          .receive(
              [&](vessel::actors::payload& value) {
                out.push_back(std::byte{0});
                out.insert(out.end(), value.bytes().begin(), value.bytes().end());
              },
              [&](caf::error& e) {
                why = vessel::actors::describe(e);
                // A read held by an incarnation whose first connect failed fails with that error
                // (and the supervisor starts the next one): ask again. What the peripheral itself
                // refuses is final.
                const auto ec = vessel::actors::from_caf_error(e);
                retry = ec != ble::errc::characteristic_not_found && ec != ble::errc::not_permitted &&
                        ec != ble::errc::not_supported && ec != ble::errc::invalid_arguments;
              });
      if (!out.empty()) return out;
      if (!retry) break;
      std::this_thread::sleep_for(20ms);
    }
    return error_reply(why);
  }

  ble::ble_device_status status() {
    ble::ble_device_status s;
    const auto dev = current();
    if (!dev) return s;
    caf::scoped_actor self{node_.system()};
    self->request(dev, 5s, vessel::actors::status_atom::value)
        .receive([&](ble::ble_device_status& r) { s = r; }, [](caf::error&) {});
    return s;
  }

 private:
  ble::ble_device_actor current() {
    caf::scoped_actor self{node_.system()};
    caf::actor out;
    self->request(node_.root(), 1s, vessel::actors::child_atom::value, child_)
        .receive([&](caf::actor& a) { out = std::move(a); }, [](caf::error&) {});
    return caf::actor_cast<ble::ble_device_actor>(out);
  }

  vessel::node node_;  // a world of one: the actor system, reactor and supervision for the device
  std::string child_;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const vessel::examples::arguments args(argc, argv, {"read", "reads", "timeout-ms"});
    const auto uuid = args.text("read", "2a19");
    const auto reads = static_cast<std::uint32_t>(args.size("reads", 2));
    const auto timeout = std::chrono::milliseconds{args.size("timeout-ms", 20000)};

    const char* env = std::getenv("VESSEL_DEVICES");
    auto devices = ble::parse_ble_devices(env ? env : "");
    if (!devices) {
      std::fprintf(stderr, "ble_sensor: VESSEL_DEVICES='%s': %s\n", env ? env : "", devices.error().message().c_str());
      return 2;
    }

    vessel::comm world = vessel::comm::init();
    const std::uint32_t me = world.rank();
    // The lowest rank with a ble device serves it.
    const auto owner = vessel::examples::device_owner(world, !devices.value().empty());
    if (!owner) {
      if (me == 0) std::fprintf(stderr, "ble_sensor: no rank has a ble device (run it with --topology)\n");
      world.finalize();
      return 2;
    }

    int failures = 0;
    if (me == *owner) {
      const auto& cfg = devices.value().front();
      const auto& p = cfg.peripheral;
      std::printf("rank %u owns ble device '%s' (%s %s)\n", me, cfg.name.c_str(), p.address.empty() ? "name" : "address",
                  p.address.empty() ? p.name.c_str() : p.address.c_str());
      sensor_server server{cfg};
      const auto served = vessel::examples::serve_until_done(world, [&](std::span<const std::byte> msg) {
        if (msg.size() <= 4) return error_reply("?");
        const std::string what(reinterpret_cast<const char*>(msg.data()) + 4, msg.size() - 4);
        return server.read(what, std::chrono::milliseconds{get32(msg.data())});
      });
      const auto s = server.status();
      std::printf("rank %u served %u reads: link %s, payload size %zu, connects %llu reconnects %llu errors %llu\n", me,
                  served, ble::to_string(s.state), s.payload_size, static_cast<unsigned long long>(s.link.connects),
                  static_cast<unsigned long long>(s.link.reconnects), static_cast<unsigned long long>(s.link.errors));
    } else {
      const std::uint32_t owner_rank = *owner;
      for (std::uint32_t i = 0; i < reads; ++i) {
        auto req = le32(static_cast<std::uint32_t>(timeout.count()));
        for (char c : uuid) req.push_back(static_cast<std::byte>(c));
        world.send(req, owner_rank, vessel::examples::request_tag);
        const auto r = world.recv(owner_rank, vessel::examples::reply_tag, timeout + 10s);
        if (r.empty() || r[0] != std::byte{0}) {
          std::printf("FAIL rank %u: read %s: %s\n", me, uuid.c_str(),
                      r.empty() ? "no reply" : vessel::examples::reply_text(r).c_str());
          ++failures;
        } else {
          std::printf("rank %u: %s = %s (read #%u through rank %u)\n", me, uuid.c_str(),
                      hex(std::span<const std::byte>{r}.subspan(1)).c_str(), i, owner_rank);
        }
      }
      vessel::examples::say_done(world, owner_rank);
    }
    world.finalize();
    if (failures != 0) return 1;
    std::printf("OK ble_sensor rank %u\n", me);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ble_sensor: %s\n", e.what());
    return 1;
  }
}
