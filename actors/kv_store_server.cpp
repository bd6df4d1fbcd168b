#include "actors/kv_store_server.hpp"

#include <unistd.h>

#include <algorithm>
#include <future>
#include <utility>

#include "io/errc.hpp"
#include "io/log.hpp"
#include "io/reactor.hpp"

namespace vessel::actors {

namespace {
// Refused clients are kept open (answering every request with too_many_clients) so that they read
// a typed refusal instead of a reset; past this many more, a connection is closed at once.
constexpr std::size_t refused_slack = 64;
}  // namespace

/// One connection: the transport and the handler that feeds the server.
struct kv_store_server::client final : io::transport_handler {
  client(kv_store_server& s, std::uint64_t i, int fd, bool r)
      : server{s}, id{i}, refused{r},
        transport{std::make_unique<io::tcp_transport>(s.reactor_, fd, *this, s.transport_options_)} {}

  void on_frame(const wire::frame_header& h, std::span<const std::byte> payload,
                const io::buffer_slice&) override {
    server.on_request(*this, h, payload);
  }
  void on_closed(std::error_code why) override {
    if (why != io::errc::connection_closed && why != io::errc::transport_closed &&
        why != io::errc::connection_reset) {
      ++server.stats_.clients_dropped;
      log::get("actors").warn("kv store: dropped client {}: {}", id, why.message());
    }
    server.remove(id);  // destroys *this: nothing may follow
  }

  kv_store_server& server;
  std::uint64_t id;
  bool refused;
  std::unique_ptr<io::tcp_transport> transport;
};

kv_store_server::kv_store_server(io::reactor& r, kv_store_limits limits)
    : reactor_{r}, limits_{limits}, listener_{r},
      pool_{make_store_pool(limits.max_key_bytes, limits.max_value_bytes)} {
  // A frame larger than any valid request is garbage: the decoder refuses it and the client is
  // dropped, so a client cannot make the server buffer more than one bounded frame.
  transport_options_.limits.max_payload_bytes = static_cast<std::uint32_t>(
      store_prefix_bytes + limits.max_value_bytes +
      (limits.max_key_bytes + 4) * std::max<std::size_t>(limits.max_wait_keys, 1));
  transport_options_.limits.receive_buffer_bytes = 0;  // one largest frame
  transport_options_.send_queue_frames = 64;
  transport_options_.poll_when_lent = false;  // off the latency path, as the client's
  transport_options_.send_queue_bytes = 4 * (limits.max_value_bytes + 4096);
}

kv_store_server::~kv_store_server() = default;

result<void> kv_store_server::listen(const io::socket_address& address) {
  return listener_.listen(address);
}

void kv_store_server::run_on_reactor(std::function<void()> fn) {
  if (reactor_.is_reactor_thread()) return fn();
  std::promise<void> done;
  auto future = done.get_future();
  if (!reactor_.post([&fn, &done] {
        fn();
        done.set_value();
      })) {
    return;  // the reactor is stopping: everything it served is going away anyway
  }
  future.wait();
}

result<void> kv_store_server::start() {
  result<void> r = io::make_error_code(io::errc::transport_closed);
  run_on_reactor([&] {
    r = listener_.start(io::tcp_socket_options{}, [this](result<int> fd) { on_accept(fd); });
  });
  return r;
}

void kv_store_server::stop() {
  run_on_reactor([this] {
    if (stopped_) return;
    stopped_ = true;
    if (listener_.accepting()) listener_.close();
    for (auto& [id, w] : waiters_) reactor_.cancel_timer(w.timer);
    waiters_.clear();
    std::vector<std::uint64_t> ids;
    ids.reserve(clients_.size());
    for (auto& [id, c] : clients_) ids.push_back(id);
    // close() may call on_closed at once, which erases from clients_: look each one up again.
    for (auto id : ids) {
      if (auto it = clients_.find(id); it != clients_.end()) it->second->transport->close();
    }
  });
}

void kv_store_server::on_accept(result<int> fd) {
  if (!fd) return;  // the final call: closed or failed; nothing to clean up here
  const int s = fd.value();
  if (stopped_ || clients_.size() >= limits_.max_clients + refused_slack) {
    ++stats_.clients_refused;
    ::close(s);
    return;
  }
  const bool refused = clients_.size() >= limits_.max_clients;
  if (refused) {
    ++stats_.clients_refused;
    log::get("actors").warn("kv store: refusing a client: {} clients already", clients_.size());
  } else {
    ++stats_.clients_accepted;
  }
  const auto id = next_client_++;
  auto c = std::make_unique<client>(*this, id, s, refused);
  auto& ref = *c;
  clients_.emplace(id, std::move(c));
  ref.transport->start();
}

void kv_store_server::on_request(client& c, const wire::frame_header& h,
                                 std::span<const std::byte> payload) {
  // The key count is bounded by the payload (each key costs 4 bytes), which the decoder bounds.
  if (!decode_store_request(h, payload, payload.size() / 4, request_)) return drop(c, "not a store request");
  ++stats_.requests;
  if (c.refused) return reply(c, request_.op, request_.id, store_status::too_many_clients);
  handle(c, request_);
}

void kv_store_server::handle(client& c, const store_request& req) {
  for (auto k : req.keys) {
    if (k.size() > limits_.max_key_bytes) return reply(c, req.op, req.id, store_status::too_large);
  }
  if (req.value.size() > limits_.max_value_bytes || req.keys.size() > limits_.max_wait_keys) {
    return reply(c, req.op, req.id, store_status::too_large);
  }
  const bool one_key = req.keys.size() == 1;
  switch (req.op) {
    case store_op::ping:
      return reply(c, req.op, req.id, store_status::ok);
    case store_op::set: {
      if (!one_key) break;
      const auto st = store(req.keys[0], req.value);
      reply(c, req.op, req.id, st);
      if (st == store_status::ok) wake_waiters();
      return;
    }
    case store_op::get: {
      if (!one_key) break;
      if (auto it = map_.find(req.keys[0]); it != map_.end()) {
        return reply(c, req.op, req.id, store_status::ok, 0, it->second);
      }
      if (req.arg <= 0) return reply(c, req.op, req.id, store_status::not_found);
      return park(c, req);
    }
    case store_op::wait: {
      if (req.keys.empty()) break;
      bool all = true;
      for (auto k : req.keys) all = all && map_.find(k) != map_.end();
      if (all) return reply(c, req.op, req.id, store_status::ok);
      if (req.arg <= 0) return reply(c, req.op, req.id, store_status::timeout);
      return park(c, req);
    }
    case store_op::add: {
      if (!one_key) break;
      std::int64_t current = 0;
      if (auto it = map_.find(req.keys[0]); it != map_.end() && !load_int64(it->second, current)) {
        return reply(c, req.op, req.id, store_status::not_integer);
      }
      // Two's-complement wrap instead of signed overflow (UB): a counter, not arithmetic.
      const auto next = static_cast<std::int64_t>(static_cast<std::uint64_t>(current) +
                                                  static_cast<std::uint64_t>(req.arg));
      std::byte bytes[8];
      store_int64(next, bytes);
      const auto st = store(req.keys[0], bytes);
      reply(c, req.op, req.id, st, next);
      if (st == store_status::ok) wake_waiters();
      return;
    }
    case store_op::erase: {
      if (!one_key) break;
      if (auto it = map_.find(req.keys[0]); it != map_.end()) {
        total_bytes_ -= it->first.size() + it->second.size();
        map_.erase(it);
      }
      return reply(c, req.op, req.id, store_status::ok);
    }
  }
  reply(c, req.op, req.id, store_status::bad_request);
}

store_status kv_store_server::store(std::string_view key, std::span<const std::byte> value) {
  auto it = map_.find(key);
  const std::size_t old = it == map_.end() ? 0 : it->first.size() + it->second.size();
  if (it == map_.end() && map_.size() >= limits_.max_entries) return store_status::store_full;
  if (total_bytes_ - old + key.size() + value.size() > limits_.max_total_bytes) {
    return store_status::store_full;
  }
  if (it == map_.end()) it = map_.emplace(std::string{key}, std::vector<std::byte>{}).first;
  it->second.assign(value.begin(), value.end());
  total_bytes_ = total_bytes_ - old + key.size() + value.size();
  return store_status::ok;
}

void kv_store_server::park(client& c, const store_request& req) {
  if (waiters_.size() >= limits_.max_waiters) {
    return reply(c, req.op, req.id, store_status::store_full);
  }
  const auto wid = next_waiter_++;
  waiter w{c.id, req.id, req.op, {req.keys.begin(), req.keys.end()}, 0};
  // Capped at a day: an absurd timeout must not overflow the clock's arithmetic.
  const auto ms = std::min<std::int64_t>(req.arg, 24 * 3600 * 1000);
  w.timer = reactor_.add_timer(std::chrono::milliseconds{ms}, [this, wid] {
    ++stats_.waits_timed_out;
    finish_waiter(wid, store_status::timeout);
  });
  waiters_.emplace(wid, std::move(w));
}

bool kv_store_server::satisfied(const waiter& w) const {
  for (const auto& k : w.keys) {
    if (map_.find(k) == map_.end()) return false;
  }
  return true;
}

void kv_store_server::wake_waiters() {
  std::vector<std::uint64_t> ready;
  for (const auto& [wid, w] : waiters_) {
    if (satisfied(w)) ready.push_back(wid);
  }
  for (auto wid : ready) finish_waiter(wid, store_status::ok);
}

void kv_store_server::finish_waiter(std::uint64_t waiter_id, store_status status) {
  auto it = waiters_.find(waiter_id);
  if (it == waiters_.end()) return;
  waiter w = std::move(it->second);
  waiters_.erase(it);
  reactor_.cancel_timer(w.timer);  // false when this is the timer itself: harmless
  std::span<const std::byte> value;
  if (status == store_status::ok && w.op == store_op::get) {
    if (auto m = map_.find(w.keys[0]); m != map_.end()) value = m->second;
  }
  if (auto c = clients_.find(w.client_id); c != clients_.end()) {
    reply(*c->second, w.op, w.request_id, status, 0, value);
  }
}

void kv_store_server::reply(client& c, store_op op, std::uint64_t id, store_status status,
                            std::int64_t arg, std::span<const std::byte> value) {
  encode_store_response(scratch_, status, arg, value);
  auto sent = send_store_frame(*c.transport, pool_, transport_options_.copy_bytes, op, id, scratch_);
  if (!sent) {
    // A client that does not read its replies fills its queue; it is dropped rather than
    // letting it hold server memory.
    log::get("actors").warn("kv store: dropping client {}: {}", c.id, sent.error().message());
    c.transport->close();
  }
}

void kv_store_server::drop(client& c, const char* why) {
  ++stats_.clients_dropped;
  log::get("actors").warn("kv store: dropped client {}: {}", c.id, why);
  c.transport->close();
}

void kv_store_server::remove(std::uint64_t client_id) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->second.client_id == client_id) {
      reactor_.cancel_timer(it->second.timer);
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  clients_.erase(client_id);
}

}  // namespace vessel::actors
