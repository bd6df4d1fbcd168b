#pragma once
// What a node sends through, on its reactor thread: the mesh (actors/mesh.hpp) for a real world,
// or a loopback for a world of one. The node is the transport's mesh_observer: whatever arrives
// goes to the node's batchers and from there to the rank and link actors.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

#include "actors/mesh.hpp"
#include "io/buffer.hpp"
#include "io/reactor.hpp"
#include "wire/result.hpp"

namespace vessel::actors {

/// The reactor-thread side of a node's messaging (the shape of mesh's send/release).
class node_transport {
 public:
  virtual ~node_transport() = default;
  /// Reactor thread. Queues one message; actors::errc::link_would_block asks the caller to wait
  /// for mesh_observer::on_writable(dst).
  virtual result<void> send(std::uint32_t dst, std::uint64_t tag, io::buffer_slice payload) = 0;
  /// Reactor thread. The app is done with `bytes` of messages from `src` (credit).
  virtual void release(std::uint32_t src, std::size_t bytes) = 0;
  /// Reactor thread. Fault injection (tests): cut the connection to `peer`.
  virtual void drop_connection(std::uint32_t /*peer*/) {}
};

/// A world of one: messages to rank 0 come back through the observer on a later reactor turn
/// (never from inside send, as the mesh does it).
class loopback_transport final : public node_transport {
 public:
  loopback_transport(io::reactor& r, mesh_observer& observer) : reactor_{r}, observer_{observer} {}
  ~loopback_transport() override = default;

  result<void> send(std::uint32_t dst, std::uint64_t tag, io::buffer_slice payload) override;
  void release(std::uint32_t, std::size_t) override {}

 private:
  static void deliver_thunk(void* self) noexcept;

  io::reactor& reactor_;
  mesh_observer& observer_;
  std::deque<inbound_message> queue_;
  std::uint64_t next_id_ = 1;
  bool posted_ = false;
};

/// A node_transport over a mesh (template so that this header does not need the mesh linked
/// until someone uses it). Owning the mesh, it destroys (closes) it when the node drops the
/// transport: on the node's stopping thread, while the reactor still runs, as the mesh requires.
template <class Mesh>
class mesh_node_transport final : public node_transport {
 public:
  explicit mesh_node_transport(Mesh& m) : mesh_{m} {}
  explicit mesh_node_transport(std::unique_ptr<Mesh> m) : owned_{std::move(m)}, mesh_{*owned_} {}
  Mesh& mesh() noexcept { return mesh_; }
  result<void> send(std::uint32_t dst, std::uint64_t tag, io::buffer_slice payload) override {
    return mesh_.send(dst, tag, std::move(payload));
  }
  void release(std::uint32_t src, std::size_t bytes) override { mesh_.release(src, bytes); }
  void drop_connection(std::uint32_t peer) override { mesh_.drop_connection(peer); }

 private:
  std::unique_ptr<Mesh> owned_;
  Mesh& mesh_;
};

}  // namespace vessel::actors
