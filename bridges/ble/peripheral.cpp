#include "bridges/ble/peripheral.hpp"

#include <utility>

namespace vessel::bridges::ble {

const char* to_string(link_state s) noexcept {
  switch (s) {
    case link_state::idle: return "idle";
    case link_state::discovering: return "discovering";
    case link_state::connecting: return "connecting";
    case link_state::ready: return "ready";
    case link_state::outage: return "outage";
    case link_state::closed: return "closed";
  }
  return "?";
}

peripheral::peripheral(bluez_client& client, peripheral_config config)
    : client_{client},
      config_{std::move(config)},
      backoff_{config_.reconnect},
      label_{config_.address.empty() ? config_.name : config_.address} {}

peripheral::~peripheral() {
  *alive_ = false;
  for (const auto id : listener_ids_) client_.remove_listener(id);
  if (connect_timer_armed_) client_.reactor().cancel_timer(connect_timer_);
  if (expiry_timer_armed_) client_.reactor().cancel_timer(expiry_timer_);
}

ble_error peripheral::error(errc e, std::string uuid, std::string detail) const {
  return ble_error{e, label_, std::move(uuid), std::move(detail)};
}

void peripheral::start(done_fn ready) {
  on_first_ready_ = std::move(ready);
  listener_ids_.push_back(client_.on_device([this](const device_info& d) { on_device(d); }));
  listener_ids_.push_back(
      client_.on_value([this](const std::string& path, std::span<const std::uint8_t> v) {
        for (const auto& [uuid, p] : char_paths_) {
          if (p != path) continue;
          const auto sub = subscriptions_.find(uuid);
          if (sub == subscriptions_.end()) return;
          ++counters_.notifications;
          counters_.bytes_in += v.size();
          sub->second(v);
          return;
        }
      }));
  listener_ids_.push_back(client_.on_removed([this](const std::string& path) {
    if (path == device_path_ && state_ != link_state::closed)
      link_lost("device removed from BlueZ");
  }));
  locate();
}

void peripheral::locate() {
  if (const auto known = client_.devices(wanted()); !known.empty()) {
    found(known.front());
    return begin_connect();
  }
  // Unknown to BlueZ: discover it. Bonded/cached devices were found above; they never advertise
  // themselves again as new objects.
  device_path_.clear();
  state_ = link_state::discovering;
  const auto gen = ++link_generation_;
  std::weak_ptr<bool> alive = alive_;
  client_.start_discovery(
      wanted(), [this, alive, gen](ble_result<void> r) {
        if (alive.expired() || gen != link_generation_ || r || r.error().code == errc::in_progress)
          return;
        fail_start(r.error());
      });
  if (connect_timer_armed_) client_.reactor().cancel_timer(connect_timer_);
  connect_timer_ = client_.reactor().add_timer(config_.discovery_timeout, [this, alive, gen] {
    if (alive.expired() || gen != link_generation_) return;
    connect_timer_armed_ = false;
    client_.stop_discovery([](ble_result<void>) {});
    const auto e = error(errc::device_not_found, {}, "not discovered within the discovery timeout");
    if (!had_link_) return fail_start(e);
    schedule_reconnect("device not found");
  });
  connect_timer_armed_ = true;
}

void peripheral::begin_connect() {
  state_ = link_state::connecting;
  const auto gen = ++link_generation_;
  std::weak_ptr<bool> alive = alive_;
  if (connect_timer_armed_) client_.reactor().cancel_timer(connect_timer_);
  connect_timer_ = client_.reactor().add_timer(config_.connect_timeout, [this, alive, gen] {
    if (alive.expired() || gen != link_generation_) return;
    connect_timer_armed_ = false;
    client_.disconnect(device_path_, [](ble_result<void>) {});
    ++counters_.errors;
    if (!had_link_) return fail_start(error(errc::timeout, {}, "connect/resolve deadline"));
    schedule_reconnect("connect timed out");
  });
  connect_timer_armed_ = true;

  const auto d = client_.device(device_path_);
  if (d && d->connected) {
    if (d->services_resolved) link_ready();
    return;  // connected by someone else: wait for ServicesResolved
  }
  client_.connect(device_path_, config_.connect_timeout, [this, alive, gen](ble_result<void> r) {
    if (alive.expired() || gen != link_generation_ || state_ != link_state::connecting) return;
    if (r || r.error().code == errc::already_connected) {
      if (const auto now = client_.device(device_path_); now && now->services_resolved)
        link_ready();
      return;  // else ServicesResolved arrives later (on_device)
    }
    ++counters_.errors;
    if (!had_link_) return fail_start(r.error());
    schedule_reconnect(r.error().to_string());
  });
}

void peripheral::on_device(const device_info& d) {
  if (state_ == link_state::discovering && !d.address.empty() && wanted().matches(d)) {
    found(d);
    client_.stop_discovery([](ble_result<void>) {});
    return begin_connect();
  }
  if (d.path != device_path_) return;
  if (state_ == link_state::connecting && d.connected && d.services_resolved) return link_ready();
  if (state_ == link_state::ready && (!d.connected || !d.services_resolved))
    return link_lost(d.connected ? "services no longer resolved" : "link lost");
}

void peripheral::found(const device_info& d) {
  device_path_ = d.path;
  if (!d.address.empty()) label_ = d.address;
}

void peripheral::link_ready() {
  if (connect_timer_armed_) client_.reactor().cancel_timer(connect_timer_);
  connect_timer_armed_ = false;
  ++link_generation_;
  state_ = link_state::ready;
  ++counters_.connects;
  if (had_link_) ++counters_.reconnects;
  backoff_.reset();
  char_paths_.clear();
  // The MTU is negotiated per link: re-read it every time.
  std::uint16_t mtu = 23;
  for (const auto& c : client_.characteristics(device_path_)) mtu = std::max(mtu, c.mtu);
  payload_size_ = mtu - 3u;
  resubscribe();
  if (had_link_) {
    outage_event ev{true, std::chrono::steady_clock::now() - outage_since_, outage_reason_};
    for (auto& fn : outage_listeners_) fn(ev);
  }
  had_link_ = true;
  if (auto ready = std::exchange(on_first_ready_, nullptr)) ready(outcome::success());
  pump_queue();
}

void peripheral::resubscribe() {
  for (const auto& [uuid, fn] : subscriptions_) {
    // Failures are counted by finish(); the subscription stays and is retried on the next link.
    request r{op::subscribe,
              uuid,
              {},
              {},
              [](ble_result<void>) {},
              std::chrono::steady_clock::now() + config_.request_timeout,
              config_.retries_after_link_loss};
    r.id = next_request_++;
    queue_.push_front(std::make_shared<request>(std::move(r)));
  }
}

void peripheral::link_lost(std::string reason) {
  if (state_ != link_state::ready && state_ != link_state::connecting) return;
  const bool was_ready = state_ == link_state::ready;
  ++link_generation_;
  char_paths_.clear();
  if (was_ready) {
    ++counters_.disconnects;
    outage_since_ = std::chrono::steady_clock::now();
    outage_reason_ = reason;
    for (auto& fn : outage_listeners_) fn(outage_event{false, {}, reason});
  }
  // Requests whose reply the link took with it: resend (front, in order) or fail.
  for (auto it = in_flight_.rbegin(); it != in_flight_.rend(); ++it) {
    auto& r = it->second;
    if (r->retries_left > 0) {
      --r->retries_left;
      ++counters_.retries;
      queue_.push_front(r);
    } else {
      finish(r, error(errc::link_lost, r->uuid, reason));
    }
  }
  in_flight_.clear();
  schedule_reconnect(std::move(reason));
}

void peripheral::schedule_reconnect(std::string reason) {
  state_ = link_state::outage;
  const auto gen = ++link_generation_;
  const auto delay = backoff_.next();
  if (!delay) {
    state_ = link_state::closed;
    for (auto& r : std::exchange(queue_, {}))
      finish(r, error(errc::link_lost, r->uuid, "gave up: " + reason));
    return;
  }
  std::weak_ptr<bool> alive = alive_;
  client_.reactor().add_timer(*delay, [this, alive, gen] {
    if (alive.expired() || gen != link_generation_ || state_ != link_state::outage) return;
    locate();
  });
  if (!expiry_timer_armed_ && !queue_.empty()) expire_requests();
}

void peripheral::fail_start(ble_error e) {
  if (connect_timer_armed_) client_.reactor().cancel_timer(connect_timer_);
  connect_timer_armed_ = false;
  ++link_generation_;
  state_ = link_state::idle;
  for (auto& r : std::exchange(queue_, {})) finish(r, e);
  if (auto ready = std::exchange(on_first_ready_, nullptr)) ready(std::move(e));
}

void peripheral::close() {
  if (state_ == link_state::closed) return;
  const bool connected = state_ == link_state::ready || state_ == link_state::connecting;
  state_ = link_state::closed;
  ++link_generation_;
  if (connect_timer_armed_) client_.reactor().cancel_timer(connect_timer_);
  connect_timer_armed_ = false;
  // No timer of ours stays armed: the destructor may then run while the reactor drops its timers.
  if (expiry_timer_armed_) client_.reactor().cancel_timer(expiry_timer_);
  expiry_timer_armed_ = false;
  for (auto& [id, r] : std::exchange(in_flight_, {})) finish(r, error(errc::closed, r->uuid));
  for (auto& r : std::exchange(queue_, {})) finish(r, error(errc::closed, r->uuid));
  if (connected) {
    ++counters_.disconnects;
    client_.disconnect(device_path_, [](ble_result<void>) {});
  }
  if (auto ready = std::exchange(on_first_ready_, nullptr)) ready(error(errc::closed));
}

void peripheral::read(std::string uuid, read_fn done) {
  enqueue(request{op::read,
                  normalize_uuid(uuid),
                  {},
                  std::move(done),
                  {},
                  {},
                  config_.retries_after_link_loss});
}

void peripheral::write(std::string uuid, std::vector<std::uint8_t> data, bool with_response,
                       done_fn done) {
  enqueue(request{with_response ? op::write : op::write_command,
                  normalize_uuid(uuid),
                  std::move(data),
                  {},
                  std::move(done),
                  {},
                  config_.retries_after_link_loss});
}

void peripheral::subscribe(std::string uuid, notify_fn on_value, done_fn done) {
  uuid = normalize_uuid(uuid);
  subscriptions_[uuid] = std::move(on_value);
  enqueue(
      request{op::subscribe, uuid, {}, {}, std::move(done), {}, config_.retries_after_link_loss});
}

void peripheral::unsubscribe(std::string uuid, done_fn done) {
  uuid = normalize_uuid(uuid);
  subscriptions_.erase(uuid);
  char_paths_.erase(uuid);
  enqueue(
      request{op::unsubscribe, uuid, {}, {}, std::move(done), {}, config_.retries_after_link_loss});
}

void peripheral::enqueue(request r) {
  if (state_ == link_state::closed) {
    auto p = std::make_shared<request>(std::move(r));
    return finish(p, error(errc::closed, p->uuid));
  }
  r.deadline = std::chrono::steady_clock::now() + config_.request_timeout;
  r.id = next_request_++;
  queue_.push_back(std::make_shared<request>(std::move(r)));
  if (!expiry_timer_armed_) expire_requests();
  pump_queue();
}

void peripheral::expire_requests() {
  // One coarse tick while anything is pending: deadlines are seconds, a 100 ms tick is plenty.
  expiry_timer_armed_ = false;
  const auto now = std::chrono::steady_clock::now();
  const auto why = state_ == link_state::ready ? errc::timeout : errc::link_lost;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->deadline > now) {
      ++it;
      continue;
    }
    auto r = *it;
    it = queue_.erase(it);
    finish(r,
           error(why, r->uuid, std::string{"request deadline passed while "} + to_string(state_)));
  }
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (it->second->deadline > now) {
      ++it;
      continue;
    }
    auto r = it->second;
    it = in_flight_.erase(it);
    finish(r, error(errc::timeout, r->uuid, "no reply before the request deadline"));
  }
  if (queue_.empty() && in_flight_.empty()) return;
  std::weak_ptr<bool> alive = alive_;
  expiry_timer_ = client_.reactor().add_timer(std::chrono::milliseconds{100}, [this, alive] {
    if (!alive.expired()) expire_requests();
  });
  expiry_timer_armed_ = true;
}

void peripheral::pump_queue() {
  while (state_ == link_state::ready && !queue_.empty()) {
    auto r = queue_.front();
    queue_.pop_front();
    issue(std::move(r));
  }
}

void peripheral::issue(std::shared_ptr<request> r) {
  const auto ch = client_.characteristic(device_path_, r->uuid);
  if (!ch) return finish(r, error(errc::characteristic_not_found, r->uuid));
  in_flight_[r->id] = r;
  const auto id = r->id;
  const auto path = ch->path;
  std::weak_ptr<bool> alive = alive_;
  auto on_reply = [this, alive, id, path](ble_result<std::vector<std::uint8_t>> res) {
    if (alive.expired()) return;
    const auto it = in_flight_.find(id);
    if (it == in_flight_.end()) return;  // failed, resent or expired already
    auto req = it->second;
    in_flight_.erase(it);
    if (!res) {
      ble_error e = res.error();
      e.device = label_;
      e.characteristic = req->uuid;
      const auto code = e.code;
      if (code == errc::not_authorized && config_.pair_when_required && !req->paired_once) {
        req->paired_once = true;
        client_.pair(device_path_, [this, alive, req, e](ble_result<void> p) {
          if (alive.expired()) return;
          if (!p && p.error().code != errc::already_exists)
            return finish(req, e);  // pairing refused
          queue_.push_front(req);
          pump_queue();
        });
        return;
      }
      if ((code == errc::not_connected || code == errc::does_not_exist) && req->retries_left > 0) {
        --req->retries_left;
        ++counters_.retries;
        queue_.push_front(req);  // the link-loss signal follows; the queue waits for the reconnect
        return pump_queue();
      }
      return finish(req, std::move(e));
    }
    if (req->kind == op::subscribe) char_paths_[req->uuid] = path;
    finish(req, std::move(res));
  };
  switch (r->kind) {
    case op::read: client_.read(path, on_reply); break;
    case op::write:
    case op::write_command:
      counters_.bytes_out += r->data.size();
      client_.write(path, r->data, r->kind == op::write, [on_reply](ble_result<void> res) {
        on_reply(res ? ble_result<std::vector<std::uint8_t>>{std::vector<std::uint8_t>{}}
                     : ble_result<std::vector<std::uint8_t>>{res.error()});
      });
      break;
    case op::subscribe:
    case op::unsubscribe: {
      auto cb = [on_reply](ble_result<void> res) {
        on_reply(res ? ble_result<std::vector<std::uint8_t>>{std::vector<std::uint8_t>{}}
                     : ble_result<std::vector<std::uint8_t>>{res.error()});
      };
      if (r->kind == op::subscribe)
        client_.start_notify(path, cb);
      else
        client_.stop_notify(path, cb);
      break;
    }
  }
}

void peripheral::finish(const std::shared_ptr<request>& r,
                        ble_result<std::vector<std::uint8_t>> result) {
  if (!result)
    ++counters_.errors;
  else if (r->kind == op::read)
    counters_.bytes_in += result.value().size();
  if (r->on_read) return r->on_read(std::move(result));
  if (r->on_done)
    r->on_done(result ? ble_result<void>{outcome::success()} : ble_result<void>{result.error()});
}

}  // namespace vessel::bridges::ble
