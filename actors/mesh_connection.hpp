#pragma once
// One connection of the mesh, from accept or dial to close: it owns the transport (TCP or shm),
// runs the handshake on it, and only once the peer proved it holds the token hands it to that
// peer's link. Until then nothing the peer sends goes anywhere: a refusal or a stall closes the
// connection with one log line and a counter in mesh_stats. Reactor thread only.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <system_error>

#include "actors/handshake.hpp"
#include "io/shm_connector.hpp"
#include "io/timer_queue.hpp"
#include "io/transport.hpp"
#include "actors/mesh.hpp"

namespace vessel::actors {

class peer_link;

/// A transport plus its handshake, then its link.
class mesh_connection final : public io::transport_handler {
 public:
  enum class kind : std::uint8_t { tcp, shm };

  /// An accepted connection (the handshake waits for the peer's opening hello).
  static std::unique_ptr<mesh_connection> accepted(mesh::impl& owner, kind k);
  /// A dialled connection to `peer` (we open the handshake).
  static std::unique_ptr<mesh_connection> dialled(mesh::impl& owner, kind k, std::uint32_t peer);

  ~mesh_connection() override;
  mesh_connection(const mesh_connection&) = delete;
  mesh_connection& operator=(const mesh_connection&) = delete;

  /// Takes over a connected socket / a completed shm hand-over and starts the handshake.
  void start_tcp(int fd);
  void start_shm(io::shm_channel channel);

  /// Sends on the transport (after the handshake, for the link).
  io::transport& transport() noexcept { return *transport_; }
  /// Closes the transport; on_closed follows (from the transport).
  void close() noexcept;
  /// The link stops receiving this connection's callbacks (it was replaced or closed).
  void detach() noexcept { link_ = nullptr; }
  bool closed() const noexcept { return closed_; }
  kind transport_kind() const noexcept { return kind_; }
  /// A description for log lines: "tcp from 127.0.0.1:4242", "shm to rank 3".
  const std::string& describe() const noexcept { return description_; }

  // io::transport_handler
  void on_frame(const wire::frame_header& header, std::span<const std::byte> payload,
                const io::buffer_slice& payload_owner) override;
  wire::fragment_place payload_destination(const wire::frame_header& header,
                                           std::span<const std::byte> arrived) override;
  void on_writable() override;
  void on_closed(std::error_code why) override;

 private:
  mesh_connection(mesh::impl& owner, kind k, handshake::role role,
                  std::optional<std::uint32_t> peer);
  void begin();
  void on_handshake_frame(const wire::frame_header& header);
  void refuse(std::error_code code, const std::string& reason);
  void on_handshake_timeout();
  void send_hello(const wire::frame_header& hello);

  mesh::impl& owner_;
  kind kind_;
  handshake::role role_;
  std::optional<std::uint32_t> peer_;  // the rank dialled, or learnt from the opening hello
  std::optional<handshake> handshake_;
  std::unique_ptr<io::transport> transport_;
  peer_link* link_ = nullptr;
  std::optional<io::timer_id> timeout_;
  bool refused_ = false;
  bool attached_ = false;
  bool closed_ = false;
  std::string description_;
};

}  // namespace vessel::actors
