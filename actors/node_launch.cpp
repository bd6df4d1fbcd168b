#include "actors/node_launch.hpp"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <random>

#include "actors/auth.hpp"
#include "actors/errc.hpp"
#include "actors/kv_store_client.hpp"
#include "actors/kv_store_server.hpp"
#include "actors/node_transport.hpp"
#include "actors/runtime.hpp"
#include "actors/store_rendezvous.hpp"
#include "io/log.hpp"
#include "io/tcp_socket.hpp"

namespace vessel {

using namespace std::chrono_literals;
using actors::detailed_result;
using actors::fail;
using clock = std::chrono::steady_clock;

namespace {

spdlog::logger& logger() { return log::get("actors"); }

}  // namespace

node_launch_options node_launch_options::defaults() { return node_launch_options{}; }

node_config node_launch_options::default_node() {
  node_config c;
  c.pool = io::buffer_pool_config{{{4096, 1024}, {65536, 256}, {std::size_t{1} << 20, 16}}, false};
  return c;
}

actors::mesh_config node_launch_options::default_mesh() {
  actors::mesh_config c;
  // Receive blocks hold the rank actor's unexpected queue (its bound) plus a link window from
  // every peer; address space only, touched as used.
  c.pool = io::buffer_pool_config{{{4096, 8192}, {65536, 1024}, {std::size_t{1} << 20, 64}}, false};
  return c;
}

actors::detailed_result<void> node_launch_options::apply_env(const actors::env_view& env) {
  auto timeout = actors::env_number(env, "VESSEL_CONNECT_TIMEOUT_MS", connect_timeout.count());
  if (!timeout) return timeout.error();
  connect_timeout = std::chrono::milliseconds{timeout.value()};
  auto spin = actors::env_number(env, "VESSEL_PROGRESS_SPIN_US", bound_reactor_spin.count());
  if (!spin) return spin.error();
  bound_reactor_spin = std::chrono::microseconds{spin.value()};
  auto binding = actors::cpu_binding_from_env(env, bind);
  if (!binding) return binding.error();
  bind = binding.value();
  if (auto applied = node.apply_env(env); !applied) return applied.error();
  return mesh.apply_env(env);
}

detailed_result<std::unique_ptr<launched_node>> launched_node::start(
    const actors::env_view& env, node_launch_options options) {
  std::unique_ptr<launched_node> n{new launched_node};
  auto booted = n->boot(env, std::move(options));
  if (!booted) {
    n->stop();
    return booted.error();
  }
  return n;
}

detailed_result<void> launched_node::boot(const actors::env_view& env,
                                          node_launch_options options) {
  auto launched = actors::detect_launch_and_log(env);
  if (!launched) return launched.error();
  launch_ = std::move(launched).value();
  const auto rank = static_cast<std::uint32_t>(launch_.rank);
  const auto world = static_cast<std::uint32_t>(launch_.world_size);
  if (auto applied = options.apply_env(env); !applied) return applied.error();

  auto token = actors::load_token(env);
  if (!token) {
    if (world > 1) return token.error();
    std::array<std::byte, 32> random{};  // a singleton talks to nobody: any secret will do
    std::random_device rd;
    for (auto& b : random) b = static_cast<std::byte>(rd());
    token = actors::cluster_token::from_bytes(random, "random (single process)");
    if (!token) return token.error();
  }
  token_ = std::make_unique<actors::cluster_token>(std::move(token).value());

  store_reactor_ = std::make_unique<io::reactor>();
  if (auto started = store_reactor_->start(); !started) {
    return fail(started.error(), "cannot start the store's reactor: " + started.error().message());
  }
  const auto deadline = clock::now() + options.connect_timeout;
  const auto left = [&] {
    return std::max(1ms,
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()));
  };

  // The store: VESSEL_STORE (or torchrun's MASTER_ADDR/PORT); else a file rank 0 writes.
  auto found = actors::find_store(env, *store_reactor_, rank, world, launch_.store, deadline);
  if (!found) return found.error();
  store_server_ = std::move(found.value().server);
  store_file_ = std::move(found.value().published_in);
  const actors::endpoint store_at = found.value().address;
  auto client = actors::kv_store_client::connect(*store_reactor_, store_at, left());
  if (!client) return client.error();
  store_client_ = std::move(client).value();

  // The node, with a mesh built on its reactor thread.
  node_config nc = options.node;
  nc.rank = rank;
  nc.world_size = world;
  actors::mesh_config mc = options.mesh;
  mc.self_rank = rank;
  mc.world_size = world;
  mc.token = token_.get();
  std::random_device rd;
  mc.incarnation = (std::uint64_t{rd()} << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid());
  transport_factory factory;
  if (world > 1) {
    factory = [this, mc](io::reactor& r, actors::mesh_observer& o) {
      auto t = std::make_unique<actors::mesh_node_transport<actors::mesh>>(
          std::make_unique<actors::mesh>(r, mc, o));
      mesh_ = &t->mesh();
      return t;
    };
  }
  try {
    node_ = std::make_unique<vessel::node>(nc, std::move(factory));
  } catch (const std::system_error& e) {
    return fail(e.code(), std::string{"cannot start the node: "} + e.what());
  }
  if (mesh_ != nullptr) {
    logger().info("rank {}: connecting {} peers, deadline {} ms", rank, world - 1, left().count());
    if (auto connected = mesh_->connect(*store_client_, left()); !connected) {
      return connected.error();
    }
    const std::uint32_t on_host = mesh_->ranks_on_this_host();
    const unsigned cpus = actors::usable_cpus();  // before binding: what the host's ranks share
    node_->set_waiters_yield(nc.caller_progress.waiters_yield(on_host, cpus));
    logger().info(
        "rank {}: every peer link is up (waiting threads: {}; {} rank(s) on this host, "
        "{} CPU(s): waiters {})",
        rank, nc.caller_progress.enabled ? "drive the loop" : "sleep", on_host, cpus,
        node_->waiters_yield() ? "yield between turns" : "spin");
    auto bound = actors::bind_rank_process(options.bind, rank, mesh_->rank_on_this_host(), on_host);
    if (!bound) return bound.error();
    if (bound.value().core >= 0) {
      node_->reactor().set_busy_poll(options.bound_reactor_spin, /*yield_while_polling=*/true);
      logger().info("rank {}: the reactor polls {} us before it sleeps (VESSEL_PROGRESS_SPIN_US)",
                    rank, options.bound_reactor_spin.count());
    }
  }
  return outcome::success();
}

launched_node::~launched_node() { stop(); }

actors::detailed_result<void> launched_node::barrier(const std::string& name,
                                                     std::chrono::milliseconds timeout) {
  if (!store_client_) {
    return fail(make_error_code(actors::errc::store_unreachable), "barrier: no store");
  }
  const auto world = static_cast<std::uint32_t>(launch_.world_size);
  const std::string prefix = "vessel/barrier/" + name + "/";
  if (auto set = store_client_->set(prefix + std::to_string(launch_.rank), "1"); !set) {
    return set.error();
  }
  std::vector<std::string> keys;
  for (std::uint32_t r = 0; r < world; ++r) keys.push_back(prefix + std::to_string(r));
  return store_client_->wait(keys, timeout);
}

void launched_node::stop() {
  if (stopped_) return;
  stopped_ = true;
  // Goodbyes: a store that rank 0 serves goes with it, so then rank 0 leaves last.
  if (store_client_ && launch_.world_size > 1) {
    if (launch_.rank != 0) {
      (void)store_client_->set("vessel/bye/" + std::to_string(launch_.rank), "1");
    } else if (store_server_) {
      std::vector<std::string> keys;
      for (int r = 1; r < launch_.world_size; ++r) keys.push_back("vessel/bye/" + std::to_string(r));
      (void)store_client_->wait(keys, 5s);
    }
  }
  if (node_) node_->stop();  // closes the mesh while the node's reactor runs
  mesh_ = nullptr;
  store_client_.reset();
  if (store_server_) store_server_->stop();
  if (!store_file_.empty()) std::remove(store_file_.c_str());
  if (store_reactor_) store_reactor_->stop();
  store_server_.reset();
  node_.reset();
}

}  // namespace vessel
