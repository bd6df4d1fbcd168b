#include "actors/mesh.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <future>
#include <sstream>
#include <thread>
#include <utility>

#include "actors/errc.hpp"
#include "actors/kv_store_client.hpp"
#include "actors/mesh_impl.hpp"
#include "io/errc.hpp"
#include "io/log.hpp"
#include "io/single_copy_probe.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;

/// Runs `fn` on the reactor thread and waits for it (app threads only).
/// False when the reactor no longer runs anything.
template <class F>
bool run_on(io::reactor& r, F&& fn) {
  std::promise<void> done;
  auto future = done.get_future();
  if (!r.post([&fn, &done] {
        fn();
        done.set_value();
      })) {
    return false;
  }
  future.wait();
  return true;
}

std::string address_key(const mesh_config& c, std::uint32_t rank) {
  return c.store_prefix + "/addr/" + std::to_string(rank);
}

/// The value of `name=` in a "k=v;k=v" record.
std::string field(std::string_view record, std::string_view name) {
  std::size_t pos = 0;
  while (pos <= record.size()) {
    const std::size_t end = std::min(record.find(';', pos), record.size());
    const std::string_view item = record.substr(pos, end - pos);
    if (item.size() > name.size() && item.substr(0, name.size()) == name &&
        item[name.size()] == '=') {
      return std::string{item.substr(name.size() + 1)};
    }
    pos = end + 1;
  }
  return {};
}

detailed_result<std::chrono::milliseconds> env_ms(const env_view& env, std::string_view name,
                                                  std::chrono::milliseconds fallback) {
  auto v = env.get(name);
  if (!v || v->empty()) return fallback;
  long long ms = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), ms);
  if (ec != std::errc{} || p != v->data() + v->size() || ms <= 0) {
    return fail(make_error_code(errc::malformed_number),
                std::string{name} + "='" + *v + "' is not a positive number of milliseconds");
  }
  return std::chrono::milliseconds{ms};
}

}  // namespace

const char* to_string(peer_state s) noexcept {
  switch (s) {
    case peer_state::connecting: return "connecting";
    case peer_state::up: return "up";
    case peer_state::reconnecting: return "reconnecting";
    case peer_state::restarted: return "restarted";
    case peer_state::down: return "down";
  }
  return "unknown";
}

detailed_result<void> mesh_config::apply_env(const env_view& env) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  auto deadline =
      env_ms(env, "VESSEL_PEER_TIMEOUT_MS", duration_cast<milliseconds>(liveness.peer_deadline));
  if (!deadline) return deadline.error();
  auto heartbeat =
      env_ms(env, "VESSEL_HEARTBEAT_MS", duration_cast<milliseconds>(liveness.heartbeat_interval));
  if (!heartbeat) return heartbeat.error();
  auto reconnect = env_ms(env, "VESSEL_RECONNECT_TIMEOUT_MS", reconnect_deadline);
  if (!reconnect) return reconnect.error();
  // Zero, which env_ms refuses from the environment, stands for "not given".
  auto handshake = env_ms(env, "VESSEL_HANDSHAKE_TIMEOUT_MS", milliseconds::zero());
  if (!handshake) return handshake.error();
  auto choice = read_transport_override(env);
  if (!choice) return choice.error();
  // Measured only when it decides something: the probe takes ~3 ms.
  const bool lend_given = env.get("VESSEL_SHM_LEND_BYTES").has_value();
  auto lend = env_byte_count(env, "VESSEL_SHM_LEND_BYTES",
                             lend_given || !io::single_copy_rate_here().pays_split()
                                 ? std::size_t{0}
                                 : default_shm_lend_bytes);
  if (!lend) return lend.error();
  switch (choice.value()) {
    case transport_override::automatic: transport = mesh_transport::automatic; break;
    case transport_override::tcp: transport = mesh_transport::tcp; break;
    case transport_override::shm: transport = mesh_transport::shm; break;
    case transport_override::rdma:
      return fail(make_error_code(errc::transport_unavailable),
                  "VESSEL_TRANSPORT=rdma: the mesh has no RDMA links yet; use auto, tcp or shm");
  }
  liveness.peer_deadline = deadline.value();
  liveness.heartbeat_interval = heartbeat.value();
  reconnect_deadline = reconnect.value();
  shm.lend_min = lend.value();
  if (handshake.value() != milliseconds::zero()) {
    // One setting for both handshakes a link may make: the mesh's and, before it, shm's own.
    handshake_timeout = handshake.value();
    shm.handshake_timeout = handshake.value();
  }
  return outcome::success();
}

std::string mesh_config::to_string() const {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  std::ostringstream os;
  const char* via = transport == mesh_transport::tcp   ? "tcp"
                    : transport == mesh_transport::shm ? "shm"
                                                       : "auto";
  os << "rank=" << self_rank << " world=" << world_size << " incarnation=" << incarnation
     << " transport=" << via << " listen=" << listen_host << ":" << listen_port
     << " fragment_bytes=" << fragment_bytes << " window_bytes=" << window_bytes
     << " max_queued_messages=" << max_queued_messages
     << " heartbeat_ms=" << duration_cast<milliseconds>(liveness.heartbeat_interval).count()
     << " peer_deadline_ms=" << duration_cast<milliseconds>(liveness.peer_deadline).count()
     << " handshake_timeout_ms=" << handshake_timeout.count()
     << " reconnect_deadline_ms=" << reconnect_deadline.count()
     << " dial_timeout_ms=" << dial_timeout.count();
  return os.str();
}

// ------------------------------------------------------------------------------------- impl

mesh::impl::impl(mesh& m, io::reactor& r, const mesh_config& c, mesh_observer& o)
    : self{m},
      reactor{r},
      config{c},
      observer{o},
      stats{m.stats_},
      pool{c.pool},
      send_pool{c.pool},
      listener{r},
      refreshing(c.world_size, false),
      published_states(c.world_size, peer_state::connecting) {
  // A data frame's payload may be as large as a fragment: the decoder must take it.
  tcp_options.limits.max_payload_bytes = static_cast<std::uint32_t>(
      std::max<std::size_t>(tcp_options.limits.max_payload_bytes, c.fragment_bytes));
  // Fragments land in their message's block or the receive's buffer, not in the decoder's, also
  // where no caller borrows the loop (an actor rank's node).
  tcp_options.receive_by_readiness = true;
  links.resize(c.world_size);
  connectors.resize(c.world_size);
  addresses.resize(c.world_size);
  records.resize(c.world_size);
  shm_dial_threads.resize(c.world_size);
  shm_dialing.assign(c.world_size, false);
  for (std::uint32_t p = 0; p < c.world_size; ++p) {
    if (p != c.self_rank) links[p] = std::make_unique<peer_link>(*this, p);
  }
  self_queue.resize(std::max<std::size_t>(c.max_queued_messages, 1));
  published_states[c.self_rank] = peer_state::up;
}

void mesh::impl::publish(std::uint32_t peer, peer_state s, std::error_code why) {
  {
    // Notified under the lock: a waiter that sees the change may go on to destroy the mesh (and
    // this condition variable) as soon as it holds the mutex.
    std::lock_guard lock{mutex};
    published_states[peer] = s;
    cv.notify_all();
  }
  observer.on_peer_state(peer, s, why);
}

mesh_connection& mesh::impl::adopt(std::unique_ptr<mesh_connection> c) {
  connections.push_back(std::move(c));
  return *connections.back();
}

void mesh::impl::retire(mesh_connection& c) {
  reactor.post([this, p = &c] {
    auto it = std::find_if(connections.begin(), connections.end(),
                           [p](const auto& owned) { return owned.get() == p; });
    if (it != connections.end()) connections.erase(it);
    check_closed();
  });
}

void mesh::impl::dial(peer_link& l) {
  const std::uint32_t p = l.peer();
  const peer_address& a = addresses[p];
  if (a.via == mesh_connection::kind::shm) {
    if (shm_dialing[p] || closing) return;
    shm_dialing[p] = true;
    ++stats.dials;
    if (shm_dial_threads[p].joinable()) shm_dial_threads[p].join();  // it has posted: ends now
    shm_dial_threads[p] = std::thread{[this, p, name = a.shm_name] {
      auto channel = io::shm_connect(name, config.shm);
      auto shared = std::make_shared<result<io::shm_channel>>(std::move(channel));
      reactor.post([this, p, shared] {
        shm_dialing[p] = false;
        peer_link* link = this->link(p);
        if (closing || link == nullptr) return;
        if (!*shared) {
          ++stats.dial_failures;
          return link->dial_failed(shared->error());
        }
        adopt(mesh_connection::dialled(*this, mesh_connection::kind::shm, p))
            .start_shm(std::move(shared->value()));
      });
    }};
    return;
  }
  if (a.tcp.empty()) return;
  auto& connector = connectors[p];
  if (!connector) connector = std::make_unique<io::tcp_connector>(reactor);
  if (connector->busy() || closing) return;
  ++stats.dials;
  io::connect_options options;
  options.timeout = config.dial_timeout;
  const io::socket_address& target = a.tcp[stats.dials % a.tcp.size()];
  auto started = connector->connect(target, options, [this, p](result<int> fd) {
    peer_link* link = this->link(p);
    if (!fd) {
      ++stats.dial_failures;
      if (closing) return check_closed();
      if (link != nullptr) link->dial_failed(fd.error());
      return;
    }
    if (closing || link == nullptr) {
      ::close(fd.value());
      return check_closed();
    }
    adopt(mesh_connection::dialled(*this, mesh_connection::kind::tcp, p)).start_tcp(fd.value());
  });
  if (!started) l.dial_failed(started.error());
}

void mesh::impl::deliver_self(void* ctx) noexcept {
  auto& m = *static_cast<mesh::impl*>(ctx);
  m.self_posted = false;
  const std::size_t n = m.self_count;
  for (std::size_t i = 0; i < n && m.self_count > 0 && !m.closing; ++i) {
    inbound_message msg = std::move(m.self_queue[m.self_head]);
    m.self_head = (m.self_head + 1) % m.self_queue.size();
    --m.self_count;
    m.observer.on_message(std::move(msg));
  }
  if (m.self_blocked && m.self_count < m.self_queue.size()) {
    m.self_blocked = false;
    m.observer.on_writable(m.config.self_rank);
  }
  m.check_closed();
}

void mesh::impl::check_closed() {
  if (!closing) return;
  if (listener.accepting() || self_posted || !connections.empty()) return;
  for (const auto& c : connectors) {
    if (c && c->busy()) return;
  }
  for (const auto& l : links) {
    if (l && !l->idle()) return;
  }
  for (const bool dialing : shm_dialing) {
    if (dialing) return;  // its thread's result is still to be posted here
  }
  // Notified under the lock: close() returns, and the mesh may be destroyed, once it sees
  // closed_done; a notify after unlocking could touch a destroyed condition variable.
  std::lock_guard lock{mutex};
  closed_done = true;
  cv.notify_all();
}

void mesh::impl::run_shm_accept_loop() {
  while (!shm_stop.load(std::memory_order_acquire)) {
    pollfd pfd{shm_listener->fd(), POLLIN, 0};
    const int ready = ::poll(&pfd, 1, 50);
    if (ready <= 0 || shm_stop.load(std::memory_order_acquire)) continue;
    auto channel = shm_listener->accept(config.shm);
    auto shared = std::make_shared<result<io::shm_channel>>(std::move(channel));
    reactor.post([this, shared] {
      if (closing) return;
      if (!*shared) {
        ++stats.protocol_errors;
        log::get("actors").warn("inbound shm connection: closed: hand-over failed ({})",
                                shared->error().message());
        return;
      }
      ++stats.accepted;
      adopt(mesh_connection::accepted(*this, mesh_connection::kind::shm))
          .start_shm(std::move(shared->value()));
    });
  }
}

detailed_result<peer_address> mesh::impl::parse_record(std::uint32_t p,
                                                       const std::string& text) const {
  peer_address a;
  a.shm_name = field(text, "shm");
  const bool local_peer = same_host(config.host, host_identity::from_key(field(text, "host")));
  a.same_host = local_peer;
  const bool shm = !a.shm_name.empty() && config.transport != mesh_transport::tcp &&
                   (config.transport == mesh_transport::shm || local_peer);
  if (config.transport == mesh_transport::shm && a.shm_name.empty()) {
    return fail(make_error_code(errc::transport_unavailable),
                "mesh: shm forced but rank " + std::to_string(p) + " offers no shm listener");
  }
  a.via = shm ? mesh_connection::kind::shm : mesh_connection::kind::tcp;
  auto ep = parse_endpoint(field(text, "tcp"), address_key(config, p));
  if (!ep) return ep.error();
  auto resolved = io::resolve(ep.value().host, ep.value().port);
  if (!resolved) {
    return fail(resolved.error(),
                "mesh: cannot resolve rank " + std::to_string(p) + " at " + ep.value().to_string());
  }
  a.tcp = std::move(resolved.value());
  return a;
}

void mesh::impl::request_refresh(std::uint32_t p) {
  if (closing || p >= refreshing.size() || refreshing[p] || !store_address) return;
  refreshing[p] = true;
  std::lock_guard lock{refresh_mutex};
  refresh_wanted.push_back(p);
  refresh_cv.notify_one();
}

void mesh::impl::on_refreshed(std::uint32_t p, std::optional<std::string> record,
                              std::optional<peer_address> address) {
  refreshing[p] = false;
  if (closing || !record || !address) return;
  ++stats.address_reads;
  if (*record == records[p]) return;  // not republished (yet): the link keeps re-dialling
  ++stats.address_changes;
  log::get("actors").info("mesh: rank {} published a new address ({}): dialling it", p, *record);
  records[p] = std::move(*record);
  addresses[p] = std::move(*address);
  if (peer_link* l = link(p)) l->address_changed();
}

void mesh::impl::run_refresh_loop() {
  std::unique_ptr<kv_store_client> client;
  kv_store_client_options options;
  // Short bounds: close() joins this thread, and a read that fails is simply asked again.
  options.op_timeout = 2s;
  options.attempt_timeout = 1s;
  std::unique_lock lock{refresh_mutex};
  for (;;) {
    refresh_cv.wait(lock, [this] { return refresh_stop || !refresh_wanted.empty(); });
    if (refresh_stop) break;
    std::vector<std::uint32_t> wanted;
    wanted.swap(refresh_wanted);
    lock.unlock();
    for (const std::uint32_t p : wanted) {
      auto read =
          std::make_shared<std::pair<std::optional<std::string>, std::optional<peer_address>>>();
      if (!client) {
        auto made = kv_store_client::connect(*store_address, 2s, options);
        if (made) {
          client = std::move(made.value());
        } else {
          log::get("actors").debug("mesh: cannot re-read rank {}'s address: {}", p,
                                   made.error().message());
        }
      }
      if (client) {
        auto value = client->get(address_key(config, p));
        if (value) {
          std::string text(reinterpret_cast<const char*>(value.value().data()),
                           value.value().size());
          auto parsed = parse_record(p, text);
          if (parsed) {
            read->first = std::move(text);
            read->second = std::move(parsed.value());
          } else {
            log::get("actors").warn("mesh: rank {}'s new record is unusable: {}", p,
                                    parsed.error().message());
          }
        } else {
          log::get("actors").debug("mesh: cannot re-read rank {}'s address: {}", p,
                                   value.error().message());
          client.reset();  // a store that went away: dial it afresh next time
        }
      }
      reactor.post(
          [this, p, read] { on_refreshed(p, std::move(read->first), std::move(read->second)); });
    }
    lock.lock();
  }
  lock.unlock();
  client.reset();
}

void mesh::impl::stop_refresh() {
  {
    std::lock_guard lock{refresh_mutex};
    refresh_stop = true;
    refresh_cv.notify_all();
  }
  if (refresh_thread.joinable()) refresh_thread.join();
}

// ------------------------------------------------------------------------------------- mesh

mesh::mesh(io::reactor& r, mesh_config config, mesh_observer& observer)
    : reactor_{r}, config_{std::move(config)}, observer_{observer} {
  if (config_.world_size == 0 || config_.self_rank >= config_.world_size) {
    throw std::invalid_argument("mesh: rank " + std::to_string(config_.self_rank) +
                                " is not below the world size " +
                                std::to_string(config_.world_size));
  }
  if (config_.token == nullptr) throw std::invalid_argument("mesh: no cluster token");
  if (config_.fragment_bytes == 0 || config_.fragment_bytes > (1u << 20)) {
    throw std::invalid_argument("mesh: fragment_bytes must be in (0, 1 MiB]");
  }
  impl_ = std::make_unique<impl>(*this, r, config_, observer);
}

mesh::~mesh() {
  close();
}

io::buffer_pool& mesh::pool() noexcept {
  return impl_->send_pool;
}
std::size_t mesh::max_message_bytes() const noexcept {
  return impl_->pool.max_block_size();
}
std::uint16_t mesh::listen_port() const noexcept {
  return impl_->listener.port();
}

detailed_result<void> mesh::connect(kv_store_client& store, std::chrono::milliseconds deadline) {
  if (reactor_.is_reactor_thread()) {
    return fail(make_error_code(errc::mesh_connect_timeout),
                "mesh::connect called on the reactor thread: it blocks; call it from another");
  }
  const auto until = std::chrono::steady_clock::now() + deadline;
  impl& m = *impl_;
  if (config_.host.hostname.empty()) {
    auto host = local_host_identity();
    if (!host) return host.error();
    config_.host = std::move(host.value());
  }

  // Listen: TCP always (any peer may be remote), shm unless forced to TCP.
  auto local = io::resolve(config_.listen_host, config_.listen_port);
  if (!local || local.value().empty()) {
    return fail(local ? make_error_code(errc::malformed_endpoint) : local.error(),
                "mesh: cannot resolve the listen address " + config_.listen_host);
  }
  if (auto listening = m.listener.listen(local.value().front()); !listening) {
    return fail(listening.error(), "mesh: cannot listen on " + local.value().front().to_string() +
                                       ": " + listening.error().message());
  }
  result<void> started = outcome::success();
  run_on(reactor_, [&] {
    started = m.listener.start(io::tcp_socket_options{}, [&m](result<int> fd) {
      if (!fd) {  // the final call
        if (!m.closing && fd.error() != io::errc::transport_closed) {
          // Rare (the listener retries what a single connection or a shortage causes), and
          // otherwise silent: peers would only see their dials time out.
          log::get("actors").error("mesh: rank {} stopped accepting TCP connections on {}: {}",
                                   m.config.self_rank, m.listener.local_address().to_string(),
                                   fd.error().message());
        }
        return m.check_closed();
      }
      if (m.closing) {
        ::close(fd.value());
        return;
      }
      ++m.stats.accepted;
      m.adopt(mesh_connection::accepted(m, mesh_connection::kind::tcp)).start_tcp(fd.value());
    });
    m.listening = static_cast<bool>(started);
  });
  if (!started) return fail(started.error(), "mesh: cannot accept: " + started.error().message());
  if (config_.transport != mesh_transport::tcp && config_.world_size > 1) {
    m.shm_name = "vessel-" + std::to_string(::getpid()) + "-" + std::to_string(config_.self_rank) +
                 "-" + std::to_string(config_.incarnation);
    auto l = io::shm_listener::listen(m.shm_name);
    if (!l) return fail(l.error(), "mesh: cannot listen for shm peers: " + l.error().message());
    m.shm_listener.emplace(std::move(l.value()));
    m.shm_accept_thread = std::thread{[&m] { m.run_shm_accept_loop(); }};
  }

  // Publish ours, read theirs.
  std::string host = config_.listen_host;
  if (host == "0.0.0.0" || host == "::") host = config_.host.hostname;
  const std::string record = "tcp=" + endpoint{host, m.listener.port()}.to_string() +
                             ";shm=" + m.shm_name + ";host=" + config_.host.key();
  if (auto set = store.set(address_key(config_, config_.self_rank), record); !set) {
    return set.error();
  }
  std::vector<peer_address> addresses(config_.world_size);
  std::vector<std::string> records(config_.world_size);
  ranks_on_host_ = 1;
  rank_on_host_ = 0;
  by_shm_.assign(config_.world_size, false);
  for (std::uint32_t p = 0; p < config_.world_size; ++p) {
    if (p == config_.self_rank) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    auto value = store.get(address_key(config_, p), std::max(left, 1ms));
    if (!value) {
      return fail(value.error().code,
                  "mesh: rank " + std::to_string(p) +
                      " never published its address: " + value.error().message());
    }
    std::string text(reinterpret_cast<const char*>(value.value().data()), value.value().size());
    auto parsed = m.parse_record(p, text);
    if (!parsed) return parsed.error();
    if (parsed.value().same_host) {
      ++ranks_on_host_;
      if (p < config_.self_rank) ++rank_on_host_;
    }
    by_shm_[p] = parsed.value().via == mesh_connection::kind::shm;
    addresses[p] = std::move(parsed.value());
    records[p] = std::move(text);
  }
  log::get("actors").info("mesh: {}", config_.to_string());

  m.store_address = store.address();
  if (config_.world_size > 1 && !m.refresh_thread.joinable()) {
    m.refresh_thread = std::thread{[&m] { m.run_refresh_loop(); }};
  }
  run_on(reactor_, [&] {
    m.addresses = std::move(addresses);
    m.records = std::move(records);
    for (auto& l : m.links) {
      if (l) l->start();
    }
  });

  // Wait until every peer is up, or the deadline.
  std::unique_lock lock{m.mutex};
  auto all_up = [&] {
    return std::all_of(m.published_states.begin(), m.published_states.end(),
                       [](peer_state s) { return s == peer_state::up; });
  };
  m.cv.wait_until(lock, until, all_up);
  if (all_up()) return outcome::success();
  std::string missing;
  for (std::uint32_t p = 0; p < config_.world_size; ++p) {
    if (m.published_states[p] == peer_state::up) continue;
    if (!missing.empty()) missing += ", ";
    missing += std::to_string(p) + " (" + to_string(m.published_states[p]) + ")";
  }
  return fail(make_error_code(errc::mesh_connect_timeout),
              "mesh: rank " + std::to_string(config_.self_rank) + ": peers not up after " +
                  format_seconds(deadline) + ": " + missing);
}

result<void> mesh::send(std::uint32_t dst, std::uint64_t tag, io::buffer_slice payload,
                        io::buffer_slice tail) {
  impl& m = *impl_;
  if (dst >= config_.world_size) return make_error_code(errc::rank_out_of_range);
  if (m.closing) return make_error_code(errc::mesh_closed);
  if (dst != config_.self_rank) return m.links[dst]->send(tag, std::move(payload), std::move(tail));
  if (!tail.empty()) return make_error_code(errc::mesh_bad_split);  // a self message: one block
  if (m.self_count == m.self_queue.size()) {
    m.self_blocked = true;
    return make_error_code(errc::link_would_block);
  }
  m.self_queue[(m.self_head + m.self_count) % m.self_queue.size()] =
      inbound_message{dst, tag, m.self_message_id++, std::move(payload)};
  ++m.self_count;
  if (!m.self_posted) {
    m.self_posted = true;
    if (!reactor_.post(io::work_item{&impl::deliver_self, &m})) m.self_posted = false;
  }
  return outcome::success();
}

void mesh::release(std::uint32_t src, std::size_t bytes) {
  if (peer_link* l = impl_->link(src)) l->release(bytes);
}

std::optional<message_start> mesh::in_progress(std::uint32_t src) const {
  if (const peer_link* l = impl_->link(src)) return l->in_progress();
  return std::nullopt;
}

bool mesh::divert(std::uint32_t src, std::uint64_t message_id, const message_destination& into) {
  if (peer_link* l = impl_->link(src)) return l->divert(message_id, into);
  return false;
}

peer_link_stats mesh::stats(std::uint32_t peer) const {
  if (const peer_link* l = impl_->link(peer)) return l->stats();
  peer_link_stats s;
  s.state = peer_state::up;
  return s;
}

peer_state mesh::state(std::uint32_t peer) const {
  if (const peer_link* l = impl_->link(peer)) return l->state();
  return peer < config_.world_size ? peer_state::up : peer_state::down;
}

void mesh::drop_connection(std::uint32_t peer) {
  if (peer_link* l = impl_->link(peer)) l->drop_connection();
}

bool mesh::drain(std::chrono::milliseconds limit) {
  impl& m = *impl_;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<std::uint32_t> unsettled;
  for (;;) {
    unsettled.clear();
    const bool running = run_on(reactor_, [&m, &unsettled] {
      if (m.closing) return;
      for (auto& l : m.links) {
        if (l && !l->settle()) unsettled.push_back(l->peer());
      }
    });
    if (!running || unsettled.empty()) return true;
    if (std::chrono::steady_clock::now() >= deadline) break;
    // Acks come back within a round trip, or after a reconnect: polling costs nothing here.
    std::this_thread::sleep_for(1ms);
  }
  log::get("actors").warn(
      "mesh: closing unsettled after {} ms with rank(s) {}: frames unacked or no closing ack",
      limit.count(), fmt::join(unsettled, ","));
  return false;
}

void mesh::close() {
  impl& m = *impl_;
  {
    std::lock_guard lock{m.mutex};
    if (m.closed_done) return;
  }
  const bool running = run_on(reactor_, [&m] {
    if (m.closing) return;
    m.closing = true;
    if (m.listener.accepting()) m.listener.close();
    for (auto& c : m.connectors) {
      if (c && c->busy()) c->cancel();
    }
    for (auto& l : m.links) {
      if (l) l->close();
    }
    // close() may end a connection at once (and retire it): iterate over a snapshot.
    std::vector<mesh_connection*> open;
    for (auto& c : m.connections) open.push_back(c.get());
    for (auto* c : open) c->close();
    for (std::size_t i = 0; i < m.self_count; ++i) {
      m.self_queue[(m.self_head + i) % m.self_queue.size()].payload.reset();
    }
    m.self_count = 0;
  });
  // The blocking shm threads end within one poll interval or one hand-over timeout; whatever
  // they posted before ending is queued before the checks below.
  m.shm_stop.store(true, std::memory_order_release);
  if (m.shm_accept_thread.joinable()) m.shm_accept_thread.join();
  m.stop_refresh();
  for (auto& t : m.shm_dial_threads) {
    if (t.joinable()) t.join();
  }
  std::unique_lock lock{m.mutex};
  if (!running) m.closed_done = true;  // a stopped reactor has cancelled everything already
  // At least one round trip through the reactor after the joins, even if closed_done is already
  // set: the threads may have posted work that touches this mesh, and the reactor runs posted
  // work in order, so once ours has run, theirs has too.
  bool drained = !running;
  while (!drained || !m.closed_done) {
    lock.unlock();
    const bool alive = run_on(reactor_, [&m] { m.check_closed(); });
    lock.lock();
    drained = true;
    if (!alive) m.closed_done = true;
    if (!m.closed_done) m.cv.wait_for(lock, 20ms);
  }
}

}  // namespace vessel::actors
