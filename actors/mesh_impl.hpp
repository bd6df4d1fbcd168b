#pragma once
// The inside of a mesh, shared by mesh.cpp, peer_link.cpp and mesh_connection.cpp (not part of
// the public interface): the pool, the links, the listeners, the dialers, and the connections
// still in their handshake. Everything here belongs to the reactor thread unless marked.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/endpoint.hpp"
#include "actors/mesh.hpp"
#include "actors/mesh_connection.hpp"
#include "actors/peer_link.hpp"
#include "io/buffer_pool.hpp"
#include "io/reactor.hpp"
#include "io/tcp_connector.hpp"
#include "io/tcp_listener.hpp"
#include "io/tcp_socket.hpp"
#include "io/tcp_transport.hpp"

namespace vessel::actors {

/// Where a peer is reached, from its store record.
struct peer_address {
  std::vector<io::socket_address> tcp;  ///< resolved TCP addresses
  std::string shm_name;                 ///< its abstract shm listener name
  mesh_connection::kind via = mesh_connection::kind::tcp;
  bool same_host = false;  ///< the record names this host (hostname and boot id)
};

struct mesh::impl {
  impl(mesh& m, io::reactor& r, const mesh_config& config, mesh_observer& observer);

  mesh& self;
  io::reactor& reactor;
  const mesh_config& config;
  mesh_observer& observer;
  mesh_stats& stats;
  io::buffer_pool pool;       // reassembly blocks only: what peers send us
  io::buffer_pool send_pool;  // mesh::pool(): blocks the app fills and sends
  io::tcp_transport_options tcp_options;

  std::vector<std::unique_ptr<peer_link>> links;  // [rank]; null for self
  std::vector<peer_address> addresses;            // [rank]
  std::vector<std::string> records;               // [rank]: the store record they came from
  std::vector<std::unique_ptr<io::tcp_connector>> connectors;  // [rank]; for peers we dial
  std::vector<std::unique_ptr<mesh_connection>> connections;   // every open connection
  io::tcp_listener listener;
  bool listening = false;
  bool closing = false;

  // Messages to self, delivered from a posted work item (never from inside send()).
  std::vector<inbound_message> self_queue;
  std::size_t self_head = 0;
  std::size_t self_count = 0;
  bool self_posted = false;
  bool self_blocked = false;
  std::uint64_t self_message_id = 1;
  static void deliver_self(void* ctx) noexcept;

  // shm: the abstract listener served by an accept thread, and a dial thread. Both block in
  // io::shm_connector calls (bounded by shm.handshake_timeout) and post results to the reactor.
  std::string shm_name;
  std::optional<io::shm_listener> shm_listener;
  std::thread shm_accept_thread;
  std::atomic<bool> shm_stop{false};
  std::vector<std::thread> shm_dial_threads;  // [rank]: the latest dial's thread
  std::vector<bool> shm_dialing;              // [rank]: a dial thread has not posted yet

  // Address refresh: a peer we dial that cannot be reached may have been restarted (a launcher's
  // --restart) and published a new record under <prefix>/addr/<p>. The store is blocking, so a
  // worker thread reads it (with a client of its own, made on first use: the one connect() was
  // given need not outlive connect) and posts what it read to the reactor.
  std::optional<endpoint> store_address;  // set by connect()
  std::thread refresh_thread;
  std::mutex refresh_mutex;
  std::condition_variable refresh_cv;
  std::vector<std::uint32_t> refresh_wanted;  // guarded by refresh_mutex
  bool refresh_stop = false;                  // guarded by refresh_mutex
  std::vector<bool> refreshing;               // [rank], reactor: queued or being read

  // connect()/close() from app threads wait on these (guarded by mutex).
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<peer_state> published_states;  // [rank], as last reported
  bool closed_done = false;

  peer_link* link(std::uint32_t rank) noexcept {
    return rank < links.size() ? links[rank].get() : nullptr;
  }
  const peer_link* link(std::uint32_t rank) const noexcept {
    return rank < links.size() ? links[rank].get() : nullptr;
  }

  /// Starts one dial to `peer` (tcp connector or shm dial thread); the result goes to the link.
  void dial(peer_link& l);
  /// Adopts a new connection (keeps it alive until it closes).
  mesh_connection& adopt(std::unique_ptr<mesh_connection> c);
  /// A connection ended: destroyed later in the loop (never from inside its own callback).
  void retire(mesh_connection& c);
  /// A link changed state: tell the observer and any thread waiting in connect().
  void publish(std::uint32_t peer, peer_state s, std::error_code why);
  /// After close(): signals the closing thread once nothing is in flight.
  void check_closed();
  void run_shm_accept_loop();

  /// Parses a peer's store record ("tcp=host:port;shm=name;host=key") and resolves its TCP
  /// address (blocking DNS: app or worker threads only).
  detailed_result<peer_address> parse_record(std::uint32_t peer, const std::string& text) const;
  /// Reactor thread: asks the worker to re-read `peer`'s record (one read in flight per peer).
  void request_refresh(std::uint32_t peer);
  /// Reactor thread: what the worker read (nullopt: the read failed; it is asked again later).
  void on_refreshed(std::uint32_t peer, std::optional<std::string> record,
                    std::optional<peer_address> address);
  void run_refresh_loop();
  /// Any thread but the reactor's: stops and joins the worker (close()).
  void stop_refresh();
};

}  // namespace vessel::actors
