#include "actors/kv_store_client.hpp"

#include <algorithm>
#include <cstdio>
#include <future>
#include <thread>
#include <utility>

#include "actors/errc.hpp"
#include "io/errc.hpp"
#include "io/reactor.hpp"
#include "io/tcp_connector.hpp"
#include "io/tcp_socket.hpp"
#include "io/tcp_transport.hpp"

namespace vessel::actors {

using clock = std::chrono::steady_clock;

std::string format_seconds(std::chrono::nanoseconds d) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", std::chrono::duration<double>(d).count());
  return text;
}

/// The reactor-thread half: dialling with backoff, then the transport and its replies.
struct kv_store_client::handler final : io::transport_handler {
  handler(kv_store_client& c, io::reactor& r) : client{c}, reactor{r}, connector{r} {}

  // Dials addresses[attempt % n] until one connects or `deadline` passes; `done` gets the outcome.
  void start_dial(std::vector<io::socket_address> a, clock::time_point d,
                  std::promise<std::error_code>* p) {
    addresses = std::move(a);
    deadline = d;
    {
      std::lock_guard lock{client.mutex_};
      closed = false;
    }
    done = p;
    retry.emplace(client.options_.retry, std::random_device{}());
    attempt = 0;
    last_error = io::make_error_code(io::errc::connect_timeout);
    dial_next();
  }

  void dial_next() {
    const auto left = deadline - clock::now();
    if (left <= clock::duration::zero()) return finish_dial(last_error);
    io::connect_options opts;
    opts.timeout = std::min<clock::duration>(client.options_.attempt_timeout, left);
    const auto& address = addresses[attempt++ % addresses.size()];
    auto started = connector.connect(address, opts, [this](result<int> fd) { on_dial(fd); });
    if (!started) on_dial(started.error());
  }

  void on_dial(result<int> fd) {
    if (fd) {
      io::tcp_transport_options opts;
      opts.limits.max_payload_bytes = static_cast<std::uint32_t>(
          store_prefix_bytes + client.options_.max_value_bytes + 64);
      opts.limits.receive_buffer_bytes = 0;
      opts.send_queue_frames = 64;
      // The store is off the latency path: a borrower of the loop need not pay a recv(2) per
      // turn for it (its replies wait for the reactor thread instead).
      opts.poll_when_lent = false;
      retire_transport();
      transport = std::make_unique<io::tcp_transport>(reactor, fd.value(), *this, opts);
      transport->start();
      return finish_dial({});
    }
    last_error = fd.error();
    const auto left = deadline - clock::now();
    auto delay = retry->next();
    if (!delay || left <= clock::duration::zero()) return finish_dial(last_error);
    const auto wait = std::min<clock::duration>(*delay, left);
    // A reactor timer, not a sleep: the reactor thread may serve other sockets meanwhile.
    reactor.add_timer(wait, [this] { dial_next(); });
  }

  void finish_dial(std::error_code ec) {
    if (done != nullptr) std::exchange(done, nullptr)->set_value(ec);
  }

  void on_frame(const wire::frame_header& h, std::span<const std::byte> payload,
                const io::buffer_slice&) override {
    store_response r;
    if (!decode_store_response(h, payload, r)) return transport->close();
    std::lock_guard lock{client.mutex_};
    auto it = client.pending_.find(r.id);
    if (it == client.pending_.end()) return;  // its caller timed out and left
    pending& p = *it->second;
    p.done = true;
    p.status = r.status;
    p.arg = r.arg;
    p.value.assign(r.value.begin(), r.value.end());
    client.pending_.erase(it);
    client.cv_.notify_all();
  }

  /// Drops the transport of a connection given up on (a redial). One that is still closing may
  /// have its finish queued on the reactor: it is kept, closed, until its on_closed.
  void retire_transport() {
    if (!transport) return;
    if (transport->has_ended()) return transport.reset();
    {
      std::lock_guard lock{client.mutex_};
      ++retiring;
    }
    retired.push_back(std::move(transport));
    retired.back()->close();  // its on_closed, now or later, drops it
  }

  void on_closed(std::error_code why) override {
    // A retired transport's end says nothing of the current connection.
    const auto ended =
        std::find_if(retired.begin(), retired.end(), [](const auto& t) { return t->has_ended(); });
    if (ended != retired.end()) {
      retired.erase(ended);  // destroys the caller: its last act was this call
      std::lock_guard lock{client.mutex_};
      --retiring;
      client.cv_.notify_all();
      return;
    }
    {
      std::lock_guard lock{client.mutex_};
      client.lost_ = why ? why : io::make_error_code(io::errc::connection_closed);
      for (auto& [id, p] : client.pending_) {
        p->done = true;
        p->lost = client.lost_;
      }
      client.pending_.clear();
      closed = true;
      client.cv_.notify_all();
    }
  }

  kv_store_client& client;
  io::reactor& reactor;
  io::tcp_connector connector;
  std::unique_ptr<io::tcp_transport> transport;
  std::vector<std::unique_ptr<io::tcp_transport>> retired;  // closing, dropped at their on_closed
  std::vector<io::socket_address> addresses;
  clock::time_point deadline;
  std::promise<std::error_code>* done = nullptr;
  std::optional<io::backoff> retry;
  std::size_t attempt = 0;
  std::error_code last_error;
  bool closed = false;       // guarded by client.mutex_
  std::size_t retiring = 0;  // guarded by client.mutex_: retired.size()
};

kv_store_client::kv_store_client(std::unique_ptr<io::reactor> own, io::reactor& r,
                                 endpoint address, kv_store_client_options options)
    : own_reactor_{std::move(own)}, reactor_{r}, address_{std::move(address)},
      options_{options}, pool_{make_store_pool(options.max_key_bytes, options.max_value_bytes)},
      handler_{std::make_unique<handler>(*this, r)} {}

detailed_result<std::unique_ptr<kv_store_client>> kv_store_client::connect(
    const endpoint& address, std::chrono::milliseconds deadline, kv_store_client_options options) {
  io::reactor_config config;
  config.queue_depth = 64;
  config.post_capacity = 1024;
  auto own = std::make_unique<io::reactor>(config);
  if (auto started = own->start(); !started) {
    return fail(started.error(), "cannot start a reactor for the store client at " +
                                     address.to_string() + ": " + started.error().message());
  }
  auto& r = *own;
  std::unique_ptr<kv_store_client> c{new kv_store_client(std::move(own), r, address, options)};
  VESSEL_TRY(c->dial(clock::now() + deadline));
  return c;
}

detailed_result<std::unique_ptr<kv_store_client>> kv_store_client::connect(
    io::reactor& r, const endpoint& address, std::chrono::milliseconds deadline,
    kv_store_client_options options) {
  if (r.is_reactor_thread()) {
    return fail(std::make_error_code(std::errc::resource_deadlock_would_occur),
                "the store client blocks: call it off the reactor thread");
  }
  std::unique_ptr<kv_store_client> c{new kv_store_client(nullptr, r, address, options)};
  VESSEL_TRY(c->dial(clock::now() + deadline));
  return c;
}

detailed_result<void> kv_store_client::dial(clock::time_point deadline) {
  const auto began = clock::now();
  const auto unreachable = [&](std::string why) {
    return fail(errc::store_unreachable, "no store at " + address_.to_string() + " after " +
                                             format_seconds(clock::now() - began) + ": " + why);
  };
  // Resolution is retried too: the store's host name may appear only once its pod or node is up.
  io::backoff resolve_retry{options_.retry, std::random_device{}()};
  std::vector<io::socket_address> addresses;
  for (;;) {
    auto resolved = io::resolve(address_.host, address_.port);
    if (resolved && !resolved.value().empty()) {
      addresses = std::move(resolved).value();
      break;
    }
    const auto left = deadline - clock::now();
    auto delay = resolve_retry.next();
    if (left <= clock::duration::zero() || !delay) {
      return unreachable("cannot resolve " + address_.host +
                         (resolved ? std::string{} : ": " + resolved.error().message()));
    }
    std::this_thread::sleep_for(std::min<clock::duration>(*delay, left));
  }
  for (;;) {
    std::promise<std::error_code> dialled;
    auto outcome = dialled.get_future();
    if (!reactor_.post([this, addresses, deadline, &dialled] {
          handler_->start_dial(addresses, deadline, &dialled);
        })) {
      return unreachable("the client's reactor has stopped");
    }
    if (auto ec = outcome.get(); ec) return unreachable(ec.message());
    {
      std::lock_guard lock{mutex_};
      connected_ = true;
      lost_ = {};
    }
    // A TCP accept only proves a listener: a ping proves a store that serves this client.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    auto ping = call(store_op::ping, {}, 0, {}, std::max(left, std::chrono::milliseconds{1}));
    if (ping) {
      if (ping.value().status == store_status::too_many_clients) {
        return fail(errc::store_too_many_clients,
                    "the store at " + address_.to_string() + " serves too many clients");
      }
      return outcome::success();
    }
    if (ping.error().code != errc::store_connection_lost || clock::now() >= deadline) {
      return unreachable(ping.error().detail);
    }
    // The listener accepted and then closed (a store restarting): dial again.
    reactor_.post([this] { handler_->retire_transport(); });
  }
}

detailed_result<kv_store_client::pending> kv_store_client::call(
    store_op op, std::span<const std::string_view> keys, std::int64_t arg,
    std::span<const std::byte> value, std::chrono::milliseconds timeout) {
  if (reactor_.is_reactor_thread()) {
    return fail(std::make_error_code(std::errc::resource_deadlock_would_occur),
                "the store client blocks: call it off the reactor thread");
  }
  for (auto k : keys) {
    if (k.size() > options_.max_key_bytes) {
      return fail(errc::store_limit_exceeded, "key '" + std::string{k.substr(0, 64)} + "...' has " +
                                                  std::to_string(k.size()) + " bytes, more than " +
                                                  std::to_string(options_.max_key_bytes));
    }
  }
  if (value.size() > options_.max_value_bytes) {
    return fail(errc::store_limit_exceeded,
                "value for key '" + std::string{keys.empty() ? "" : keys[0]} + "' has " +
                    std::to_string(value.size()) + " bytes, more than " +
                    std::to_string(options_.max_value_bytes));
  }
  auto payload = std::make_shared<std::vector<std::byte>>();
  encode_store_request(*payload, arg, keys, value);
  pending p;
  std::uint64_t id = 0;
  {
    std::lock_guard lock{mutex_};
    if (lost_) {
      return fail(errc::store_connection_lost, "the connection to the store at " +
                                                   address_.to_string() + " ended: " +
                                                   lost_.message());
    }
    id = next_id_++;
    pending_.emplace(id, &p);
  }
  const bool posted = reactor_.post([this, op, id, payload] {
    auto& t = handler_->transport;
    std::error_code ec = io::make_error_code(io::errc::transport_closed);
    if (t && t->is_open()) {
      auto sent = send_store_frame(*t, pool_, 512, op, id, *payload);
      if (sent) return;
      ec = sent.error();
    }
    std::lock_guard lock{mutex_};
    if (auto it = pending_.find(id); it != pending_.end()) {
      it->second->done = true;
      it->second->lost = ec;
      pending_.erase(it);
      cv_.notify_all();
    }
  });
  std::unique_lock lock{mutex_};
  if (!posted) {
    pending_.erase(id);
    p.done = true;
    p.lost = io::make_error_code(io::errc::transport_closed);
  }
  const bool done = cv_.wait_for(lock, timeout, [&] { return p.done; });
  if (!done) {
    pending_.erase(id);  // a late reply finds no entry and is dropped
    return failure(op, keys, p, true, timeout);
  }
  if (p.lost) return failure(op, keys, p, false, timeout);
  return p;
}

detailed_error kv_store_client::failure(store_op op, std::span<const std::string_view> keys,
                                        const pending& p, bool timed_out,
                                        std::chrono::milliseconds timeout) const {
  std::string what;
  switch (op) {
    case store_op::ping: what = "ping"; break;
    case store_op::set: what = "set"; break;
    case store_op::get: what = "get"; break;
    case store_op::wait: what = "wait for"; break;
    case store_op::add: what = "add to"; break;
    case store_op::erase: what = "erase"; break;
  }
  for (std::size_t i = 0; i < keys.size() && i < 8; ++i) {
    what += (i == 0 ? " '" : ", '") + std::string{keys[i]} + "'";
  }
  if (keys.size() > 8) what += " and " + std::to_string(keys.size() - 8) + " more keys";
  const auto at = " at the store at " + address_.to_string();
  if (timed_out) {
    return fail(errc::store_timeout, what + at + ": no reply after " + format_seconds(timeout));
  }
  if (p.lost) {
    return fail(errc::store_connection_lost, what + at + ": connection ended: " + p.lost.message());
  }
  switch (p.status) {
    case store_status::ok: break;
    case store_status::not_found: return fail(errc::store_key_not_found, what + at + ": not found");
    case store_status::timeout:
      return fail(errc::store_timeout, what + at + ": timed out after " + format_seconds(timeout));
    case store_status::too_large:
      return fail(errc::store_limit_exceeded, what + at + ": key or value too large for the store");
    case store_status::store_full:
      return fail(errc::store_limit_exceeded, what + at + ": the store is full");
    case store_status::not_integer:
      return fail(errc::store_not_integer, what + at + ": the value is not an 8-byte integer");
    case store_status::too_many_clients:
      return fail(errc::store_too_many_clients, what + at + ": the store serves too many clients");
    case store_status::bad_request: break;
  }
  return fail(errc::store_connection_lost, what + at + ": the store refused the request");
}

detailed_result<void> kv_store_client::set(std::string_view key, std::span<const std::byte> value) {
  const std::string_view keys[] = {key};
  VESSEL_TRY(p, call(store_op::set, keys, 0, value, options_.op_timeout));
  if (p.status != store_status::ok) return failure(store_op::set, keys, p, false, options_.op_timeout);
  return outcome::success();
}

detailed_result<void> kv_store_client::set(std::string_view key, std::string_view value) {
  return set(key, std::as_bytes(std::span{value.data(), value.size()}));
}

detailed_result<std::vector<std::byte>> kv_store_client::get(std::string_view key) {
  return get(key, std::chrono::milliseconds{0});
}

detailed_result<std::vector<std::byte>> kv_store_client::get(std::string_view key,
                                                             std::chrono::milliseconds wait) {
  const std::string_view keys[] = {key};
  VESSEL_TRY(p, call(store_op::get, keys, wait.count(), {}, wait + options_.op_timeout));
  if (p.status != store_status::ok) return failure(store_op::get, keys, p, false, wait);
  return std::move(p.value);
}

detailed_result<void> kv_store_client::wait(std::span<const std::string> keys,
                                            std::chrono::milliseconds timeout) {
  std::vector<std::string_view> views{keys.begin(), keys.end()};
  VESSEL_TRY(p, call(store_op::wait, views, timeout.count(), {}, timeout + options_.op_timeout));
  if (p.status != store_status::ok) return failure(store_op::wait, views, p, false, timeout);
  return outcome::success();
}

detailed_result<std::int64_t> kv_store_client::add(std::string_view key, std::int64_t delta) {
  const std::string_view keys[] = {key};
  VESSEL_TRY(p, call(store_op::add, keys, delta, {}, options_.op_timeout));
  if (p.status != store_status::ok) return failure(store_op::add, keys, p, false, options_.op_timeout);
  return p.arg;
}

detailed_result<void> kv_store_client::erase(std::string_view key) {
  const std::string_view keys[] = {key};
  VESSEL_TRY(p, call(store_op::erase, keys, 0, {}, options_.op_timeout));
  if (p.status != store_status::ok) return failure(store_op::erase, keys, p, false, options_.op_timeout);
  return outcome::success();
}

kv_store_client::~kv_store_client() {
  if (own_reactor_) {
    // Stopping cancels the socket's ops; the transport's on_closed runs inside stop().
    own_reactor_->stop();
    handler_.reset();
    return;
  }
  // A given reactor: close on its thread, wait for on_closed, then drop the transport there too.
  std::promise<void> closed;
  auto done = closed.get_future();
  const bool posted = reactor_.post([this] {
    if (handler_->connector.busy()) handler_->connector.cancel();
    if (handler_->transport) return handler_->transport->close();
    std::lock_guard lock{mutex_};  // never connected: nothing will call on_closed
    handler_->closed = true;
    cv_.notify_all();
  });
  if (posted) {
    std::unique_lock lock{mutex_};
    cv_.wait_for(lock, std::chrono::seconds{5},
                 [&] { return handler_->closed && handler_->retiring == 0; });
  }
  if (posted && reactor_.post([this, &closed] {
        handler_->transport.reset();
        closed.set_value();
      })) {
    done.wait();
  }
}

}  // namespace vessel::actors
