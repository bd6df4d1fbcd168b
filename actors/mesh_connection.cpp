#include "actors/mesh_connection.hpp"

#include <string>
#include <utility>

#include "actors/errc.hpp"
#include "actors/mesh_impl.hpp"
#include "io/errc.hpp"
#include "io/log.hpp"
#include "io/shm_transport.hpp"
#include "io/tcp_transport.hpp"
#include "wire/errc.hpp"

namespace vessel::actors {

std::unique_ptr<mesh_connection> mesh_connection::accepted(mesh::impl& owner, kind k) {
  return std::unique_ptr<mesh_connection>{
      new mesh_connection{owner, k, handshake::role::acceptor, std::nullopt}};
}

std::unique_ptr<mesh_connection> mesh_connection::dialled(mesh::impl& owner, kind k,
                                                          std::uint32_t peer) {
  return std::unique_ptr<mesh_connection>{
      new mesh_connection{owner, k, handshake::role::initiator, peer}};
}

mesh_connection::mesh_connection(mesh::impl& owner, kind k, handshake::role role,
                                 std::optional<std::uint32_t> peer)
    : owner_{owner}, kind_{k}, role_{role}, peer_{peer} {
  const char* via = k == kind::tcp ? "tcp" : "shm";
  description_ = role == handshake::role::initiator
                     ? std::string{via} + " connection to rank " + std::to_string(*peer)
                     : std::string{"inbound "} + via + " connection";
}

mesh_connection::~mesh_connection() = default;

void mesh_connection::start_tcp(int fd) {
  if (auto peer = io::socket_address::local_of(fd); peer && role_ == handshake::role::acceptor) {
    description_ += " on " + peer.value().to_string();
  }
  auto t = std::make_unique<io::tcp_transport>(owner_.reactor, fd, *this, owner_.tcp_options);
  io::tcp_transport& tcp = *t;
  transport_ = std::move(t);
  begin();
  tcp.start();
}

void mesh_connection::start_shm(io::shm_channel channel) {
  auto t = std::make_unique<io::shm_transport>(owner_.reactor, std::move(channel), *this,
                                               owner_.config.shm);
  io::shm_transport& shm = *t;
  transport_ = std::move(t);
  // shm refuses sends before start(); nothing arrives before our hello on a dialled one, and an
  // accepted one builds its handshake from the first frame, whenever it comes.
  shm.start();
  begin();
}

void mesh_connection::begin() {
  // The stall deadline: a peer that connects and says nothing (or too little) is dropped.
  timeout_ = owner_.reactor.add_timer(owner_.config.handshake_timeout, [this] {
    timeout_.reset();
    on_handshake_timeout();
  });
  if (role_ != handshake::role::initiator) return;
  auto challenge = make_challenge();
  if (!challenge) {
    log::get("actors").error("{}: {}", description_, challenge.error().message());
    close();
    return;
  }
  peer_link* l = owner_.link(*peer_);
  handshake_config hc;
  hc.self_rank = owner_.config.self_rank;
  hc.world_size = owner_.config.world_size;
  hc.incarnation = owner_.config.incarnation;
  hc.expected_peer_rank = *peer_;
  hc.timeout = owner_.config.handshake_timeout;
  hc.last_seq_seen = l != nullptr ? l->resume_point(l->known_incarnation()) : 0;
  handshake_.emplace(handshake::initiator(*owner_.config.token, hc, challenge.value(),
                                          handshake::clock::now()));
  if (auto hello = handshake_->opening_hello()) send_hello(*hello);
}

void mesh_connection::send_hello(const wire::frame_header& hello) {
  if (transport_ && !closed_) (void)transport_->send_copy(hello, {});
}

void mesh_connection::on_frame(const wire::frame_header& header,
                               std::span<const std::byte> payload, const io::buffer_slice&) {
  if (link_ != nullptr) return link_->on_frame(header, payload);
  if (refused_ || closed_) return;  // nothing a refused peer sends goes anywhere
  if (handshake_ && handshake_->current() == handshake::state::accepted) return;  // detached
  on_handshake_frame(header);
}

wire::fragment_place mesh_connection::payload_destination(const wire::frame_header& header,
                                                          std::span<const std::byte> arrived) {
  // Only an authenticated link's frames: before that nothing a peer sends is let in anywhere.
  return link_ != nullptr ? link_->payload_destination(header, arrived) : wire::fragment_place{};
}

void mesh_connection::on_handshake_frame(const wire::frame_header& header) {
  if (!handshake_) {
    // Acceptor: the opening hello names the peer, and so which last_seq_seen our reply carries.
    auto challenge = make_challenge();
    if (!challenge) {
      log::get("actors").error("{}: {}", description_, challenge.error().message());
      return close();
    }
    handshake_config hc;
    hc.self_rank = owner_.config.self_rank;
    hc.world_size = owner_.config.world_size;
    hc.incarnation = owner_.config.incarnation;
    hc.timeout = owner_.config.handshake_timeout;
    if (const auto* hello = std::get_if<wire::hello_fields>(&header.body)) {
      if (peer_link* l = owner_.link(hello->sender_rank)) {
        hc.last_seq_seen = l->resume_point(hello->incarnation);
      }
    }
    handshake_.emplace(handshake::acceptor(*owner_.config.token, hc, challenge.value(),
                                           handshake::clock::now()));
  }
  if (auto reply = handshake_->on_frame(header)) send_hello(*reply);
  if (const auto& refused = handshake_->refused()) return refuse(refused->code, refused->reason);
  const auto& accepted = handshake_->accepted();
  if (!accepted) return;
  if (timeout_) owner_.reactor.cancel_timer(*timeout_);
  timeout_.reset();
  peer_link* l = owner_.link(accepted->peer_rank);
  if (l == nullptr) return refuse(make_error_code(errc::handshake_rank_out_of_range), "no link");
  peer_ = accepted->peer_rank;
  description_ += " (rank " + std::to_string(*peer_) + ")";
  link_ = l;
  attached_ = true;
  l->attach(*this, *accepted);
}

void mesh_connection::refuse(std::error_code code, const std::string& reason) {
  refused_ = true;
  ++owner_.stats.refused;
  log::get("actors").warn("{}: refused: {} ({})", description_, reason, code.message());
  close();
}

void mesh_connection::on_handshake_timeout() {
  if (link_ != nullptr || closed_ || refused_) return;
  ++owner_.stats.handshake_timeouts;
  log::get("actors").warn("{}: closed: no handshake within {} ms", description_,
                          owner_.config.handshake_timeout.count());
  close();
}

void mesh_connection::on_writable() {
  if (link_ != nullptr) link_->on_writable();
}

void mesh_connection::close() noexcept {
  if (transport_ && !closed_) transport_->close();
}

void mesh_connection::on_closed(std::error_code why) {
  closed_ = true;
  if (timeout_) owner_.reactor.cancel_timer(*timeout_);
  timeout_.reset();
  const bool garbage = why.category() == wire::wire_category() || why == io::errc::bad_frame;
  if (garbage) {
    ++owner_.stats.protocol_errors;
    log::get("actors").warn("{}: closed: the peer sent bytes that are not frames ({})",
                            description_, why.message());
  }
  if (link_ != nullptr) {
    peer_link* l = link_;
    link_ = nullptr;
    l->on_connection_closed(*this, why);
  } else if (!attached_ && role_ == handshake::role::initiator) {
    // A dial that connected but did not make it through the handshake: try again later.
    if (peer_link* l = owner_.link(*peer_)) l->dial_failed(why);
  }
  owner_.retire(*this);
}

}  // namespace vessel::actors
