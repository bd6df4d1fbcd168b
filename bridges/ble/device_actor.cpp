#include "bridges/ble/device_actor.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/actor_errc.hpp"
#include "bridges/ble/bluez_client.hpp"
#include "bridges/ble/vessel_frames.hpp"
#include "io/log.hpp"

namespace vessel::bridges::ble {
namespace {

using actors::payload;

// -- reactor -> actor messages ------------------------------------------------------------------

struct core_ready {
  std::error_code ec;  // empty: the first link is up and every subscription made
  std::string detail;
};

struct core_reply {
  std::uint64_t id = 0;
  payload data;
  std::error_code ec;
  std::string detail;
};

struct core_snapshot {
  std::uint64_t id = 0;
  ble_device_status status;
};

using call_tmo_atom = caf::atom_constant<caf::atom("bletmo")>;

}  // namespace
}  // namespace vessel::bridges::ble

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::bridges::ble::core_ready)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::bridges::ble::core_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::bridges::ble::core_snapshot)

namespace vessel::bridges::ble {
namespace {

using impl_actor = ble_device_actor::extend<
    caf::reacts_to<core_ready>, caf::reacts_to<core_reply>, caf::reacts_to<core_snapshot>,
    caf::reacts_to<actors::frame_atom, std::string, payload>, caf::reacts_to<ble_outage>,
    caf::reacts_to<call_tmo_atom, std::uint64_t>>;

// -- the reactor side ---------------------------------------------------------------------------

/// Everything that touches D-Bus: reactor thread only (constructed elsewhere, then handed over).
class device_core : public std::enable_shared_from_this<device_core> {
 public:
  device_core(io::buffer_pool& pool, ble_device_config config,
              std::unique_ptr<bluez_client> client, caf::actor owner)
      : pool_{pool},
        config_{std::move(config)},
        client_{std::move(client)},
        owner_{std::move(owner)},
        device_{*client_, config_.peripheral},
        nus_{device_, config_.nus} {
    if (config_.frames == ble_frame_mode::vessel)
      frames_ = std::make_unique<vessel_frame_stream>(nus_);
  }

  void start() {
    device_.on_outage([this](const outage_event& e) { on_outage(e); });
    if (frames_) {
      frames_->on_frame([this](const wire::device_fields& f, std::span<const std::byte> p) {
        on_vessel_frame(f, p);
      });
    } else if (config_.frames == ble_frame_mode::serial) {
      nus_.on_frame([this](std::span<const std::byte> p) {
        ++frames_in_;
        unsolicited(config_.name, p);
      });
    }
    auto self = shared_from_this();
    device_.start([this, self](ble_result<void> r) {
      if (!r) return ready(std::move(r));
      subscribe_all();
    });
  }

  void call(std::uint64_t id, const std::string& command, std::vector<std::uint8_t> data) {
    if (start_error_) return fail(id, *start_error_);
    if (!ready_) return hold(id, [this, id, command, d = std::move(data)]() mutable {
      call(id, command, std::move(d));
    });
    if (command == ble_frame_command) return frame_call(id, std::move(data));
    if (data.empty()) {
      return device_.read(command, [this, id](ble_result<std::vector<std::uint8_t>> r) {
        if (!r) return fail(id, r.error());
        reply(id, r.value());
      });
    }
    device_.write(command, std::move(data), true, [this, id](ble_result<void> r) { done(id, r); });
  }

  void send(std::uint64_t id, const std::string& command, std::vector<std::uint8_t> data) {
    if (start_error_) return fail(id, *start_error_);
    if (!ready_) return hold(id, [this, id, command, d = std::move(data)]() mutable {
      send(id, command, std::move(d));
    });
    if (command != ble_frame_command) {
      return device_.write(command, std::move(data), false,
                           [this, id](ble_result<void> r) { done(id, r); });
    }
    const auto bytes = std::as_bytes(std::span<const std::uint8_t>{data});
    switch (config_.frames) {
      case ble_frame_mode::none: return fail(id, no_frames());
      case ble_frame_mode::serial:
        ++frames_out_;
        return nus_.send_frame(bytes, [this, id](ble_result<void> r) { done(id, r); });
      case ble_frame_mode::vessel:
        return frames_->send(wire::device_fields{config_.device_id, ble_frame_kind_send, 0}, bytes,
                             [this, id](ble_result<void> r) { done(id, r); });
    }
  }

  /// The actor gave up on call `id` (its timeout): a late reply is dropped.
  void forget(std::uint64_t id) {
    for (auto it = frame_calls_.begin(); it != frame_calls_.end(); ++it) {
      if (it->second.call_id != id) continue;
      frame_calls_.erase(it);
      return;
    }
  }

  void snapshot(std::uint64_t id) {
    ble_device_status s;
    s.state = device_.state();
    s.payload_size = device_.payload_size();
    s.link = device_.counters();
    s.outages = outages_;
    s.frames_in = frames_in_ + (frames_ ? frames_->counters().frames_in : 0);
    s.frames_out = frames_out_ + (frames_ ? frames_->counters().frames_out : 0);
    s.frame_errors = frames_ ? frames_->counters().errors : nus_.decoder().counters().crc_errors;
    s.calls_failed_by_outage = calls_failed_by_outage_;
    tell(core_snapshot{id, s});
  }

  /// Disconnects, then lets the bus go once its polls have completed (the pump must outlive
  /// them): the pump holds this core's last reference until then.
  void close() {
    // What is pending fails with errc::closed (the actor answered its requests already).
    for (auto& [id, fn] : std::exchange(waiting_, {}))
      fail(id, ble_error{errc::closed, device_.label(), {}, "device closed"});
    device_.close();
    owner_ = nullptr;
    client_->pump().shutdown([self = shared_from_this()] {});
  }

 private:
  struct pending_frame_call {
    std::uint64_t call_id = 0;
    bool written = false;
  };

  template <class T>
  void tell(T&& msg) {
    if (owner_) caf::anon_send(owner_, std::forward<T>(msg));
  }

  void ready(ble_result<void> r) {
    if (!r) {
      // The actor ends on this; requests that reach the core before it has are answered with
      // the same error rather than held for a link that will not come.
      start_error_ = r.error();
      for (auto& [id, fn] : std::exchange(waiting_, {})) fail(id, r.error());
      return tell(core_ready{r.error().code, r.error().to_string()});
    }
    tell(core_ready{});
    ready_ = true;
    for (auto& [id, fn] : std::exchange(waiting_, {})) fn();
  }

  // Requests before the first link and its subscriptions wait: a frame call written before the
  // TX subscription would have its reply notified to nobody.
  void hold(std::uint64_t id, std::function<void()> fn) {
    waiting_.emplace_back(id, std::move(fn));
  }

  void subscribe_all() {
    std::vector<std::string> uuids = config_.notify;
    if (config_.frames != ble_frame_mode::none) uuids.push_back(config_.nus.tx_uuid);
    if (uuids.empty()) return ready(outcome::success());
    auto left = std::make_shared<std::size_t>(uuids.size());
    auto failed = std::make_shared<bool>(false);
    auto done = [this, left, failed](ble_result<void> r) {
      if (*failed) return;
      if (!r) {
        *failed = true;
        return ready(std::move(r));
      }
      if (--*left == 0) ready(outcome::success());
    };
    for (const auto& u : config_.notify) {
      const auto source = config_.name + "/" + normalize_uuid(u);
      device_.subscribe(
          u, [this, source](std::span<const std::uint8_t> v) { unsolicited(source, std::as_bytes(v)); },
          done);
    }
    if (config_.frames != ble_frame_mode::none) nus_.open(done);
  }

  void frame_call(std::uint64_t id, std::vector<std::uint8_t> data) {
    if (config_.frames != ble_frame_mode::vessel) return fail(id, no_frames(true));
    const auto rid = next_request_id_++;
    frame_calls_[rid] = pending_frame_call{id, false};
    frames_->send(wire::device_fields{config_.device_id, ble_frame_kind_call, rid},
                  std::as_bytes(std::span<const std::uint8_t>{data}),
                  [this, rid](ble_result<void> r) {
                    const auto it = frame_calls_.find(rid);
                    if (it == frame_calls_.end()) return;
                    if (r) {
                      it->second.written = true;
                      return;
                    }
                    const auto call_id = it->second.call_id;
                    frame_calls_.erase(it);
                    fail(call_id, r.error());
                  });
  }

  void on_vessel_frame(const wire::device_fields& f, std::span<const std::byte> p) {
    if (f.request_id != 0) {
      const auto it = frame_calls_.find(f.request_id);
      if (it != frame_calls_.end()) {
        const auto call_id = it->second.call_id;
        frame_calls_.erase(it);
        return reply(call_id, p);
      }
    }
    unsolicited(config_.name, p);
  }

  void on_outage(const outage_event& e) {
    if (!e.restored) {
      ++outages_;
      if (frames_) frames_->reset();  // a partial frame went with the link
      // Frames already written: their replies may be lost, and the board may have acted.
      for (auto it = frame_calls_.begin(); it != frame_calls_.end();) {
        if (!it->second.written) {
          ++it;
          continue;
        }
        ++calls_failed_by_outage_;
        fail(it->second.call_id,
             ble_error{errc::link_lost, device_.label(), config_.nus.rx_uuid,
                       "link lost after the frame call was written: " + e.reason});
        it = frame_calls_.erase(it);
      }
    }
    tell(ble_outage{config_.name, e.restored,
                    std::chrono::duration_cast<std::chrono::nanoseconds>(e.duration), e.reason});
  }

  void unsolicited(const std::string& source, std::span<const std::byte> bytes) {
    auto p = payload::copy_of(pool_, bytes);
    if (!p) {
      log::get("bridges").warn("ble {}: dropped {} bytes from {}: {}", config_.name, bytes.size(),
                               source, p.error().message());
      return;
    }
    if (owner_) caf::anon_send(owner_, actors::frame_atom::value, source, std::move(p).value());
  }

  void reply(std::uint64_t id, std::span<const std::uint8_t> bytes) {
    reply(id, std::as_bytes(bytes));
  }
  void reply(std::uint64_t id, std::span<const std::byte> bytes) {
    auto p = payload::copy_of(pool_, bytes);
    if (!p) return tell(core_reply{id, {}, p.error(), "reply of " + std::to_string(bytes.size())});
    tell(core_reply{id, std::move(p).value(), {}, {}});
  }
  void done(std::uint64_t id, const ble_result<void>& r) {
    if (!r) return fail(id, r.error());
    tell(core_reply{id, {}, {}, {}});
  }
  void fail(std::uint64_t id, const ble_error& e) { tell(core_reply{id, {}, e.code, e.to_string()}); }

  ble_error no_frames(bool calls = false) const {
    return ble_error{errc::not_supported, device_.label(), {},
                     calls ? "frame calls need ble_frame_mode::vessel"
                           : "frames need ble_frame_mode::serial or vessel"};
  }

  io::buffer_pool& pool_;
  ble_device_config config_;
  std::unique_ptr<bluez_client> client_;
  caf::actor owner_;
  peripheral device_;
  nus_stream nus_;
  std::unique_ptr<vessel_frame_stream> frames_;
  std::map<std::uint64_t, pending_frame_call> frame_calls_;  // by request id
  std::uint64_t next_request_id_ = 1;
  bool ready_ = false;
  std::optional<ble_error> start_error_;  // the first link failed: every request gets this
  std::vector<std::pair<std::uint64_t, std::function<void()>>> waiting_;
  std::uint64_t outages_ = 0;
  std::uint64_t frames_in_ = 0;   // serial mode
  std::uint64_t frames_out_ = 0;  // serial mode
  std::uint64_t calls_failed_by_outage_ = 0;
};

// -- the actor ----------------------------------------------------------------------------------

struct pending_snapshot {
  std::optional<caf::typed_response_promise<actors::device_stats>> stats;
  std::optional<caf::typed_response_promise<ble_device_status>> status;
};

struct device_state {
  io::reactor* reactor = nullptr;
  io::buffer_pool* pool = nullptr;
  ble_device_config config;
  std::shared_ptr<device_core> core;
  bool ready = false;
  std::uint64_t next_id = 1;
  std::map<std::uint64_t, caf::typed_response_promise<payload>> calls;
  std::map<std::uint64_t, caf::typed_response_promise<actors::sent_atom>> sends;
  std::map<std::uint64_t, pending_snapshot> snapshots;
  std::vector<actors::device_listener> listeners;
  std::vector<ble_listener> watchers;
  actors::device_stats stats;  // bytes and reconnects come from the core's counters
  static inline const char* name = "vessel.ble_device";

  ~device_state() {
    if (!core) return;
    // The core closes on its own thread; if the reactor has stopped, it goes with this handle.
    reactor->dispatch([c = core] { c->close(); });
  }

  // Runs `fn(core)` on the reactor.
  template <class F>
  bool on_reactor(F fn) {
    return reactor->dispatch([c = core, fn = std::move(fn)]() mutable { fn(*c); });
  }
};

using self_ptr = impl_actor::stateful_pointer<device_state>;

std::vector<std::uint8_t> to_vector(const payload& p) {
  const auto b = p.bytes();
  const auto* u = reinterpret_cast<const std::uint8_t*>(b.data());
  return {u, u + b.size()};
}

caf::error reactor_gone() {
  return actors::to_caf_error(actors::actor_errc::node_stopped, "the reactor has stopped");
}

// Answers every request still open with `err`: none is left unanswered when the actor ends (a
// promise CAF 0.17 destroys undelivered leaves its requester waiting for its own timeout).
void fail_pending(self_ptr self, const caf::error& err) {
  auto& st = self->state;
  for (auto& [id, p] : std::exchange(st.calls, {})) p.deliver(err);
  for (auto& [id, p] : std::exchange(st.sends, {})) p.deliver(err);
  for (auto& [id, s] : std::exchange(st.snapshots, {})) {
    if (s.stats) s.stats->deliver(err);
    if (s.status) s.status->deliver(err);
  }
}

void fail_and_quit(self_ptr self, caf::error err) {
  fail_pending(self, err);
  self->quit(std::move(err));
}

impl_actor::behavior_type ble_device_impl(self_ptr self, io::reactor* reactor,
                                          io::buffer_pool* pool, ble_device_config config) {
  actors::keep_exception_text(self);
  actors::register_caf_error_category(ble_category());
  {
    auto& init = self->state;
    init.reactor = reactor;
    init.pool = pool;
    init.config = std::move(config);
    // D-Bus set-up: synchronous round trips, here on a CAF worker rather than on the reactor.
    auto client = bluez_client::open(*reactor, init.config.adapter);
    if (!client) {
      self->quit(actors::to_caf_error(client.error().code, client.error().to_string()));
    } else {
      init.core = std::make_shared<device_core>(*pool, init.config,
                                                std::move(client).value(),
                                                caf::actor_cast<caf::actor>(self));
      if (!init.on_reactor([](device_core& c) { c.start(); })) self->quit(reactor_gone());
    }
  }
  // An exit message (supervisor shutdown, a link) ends the actor, but answers its requests first.
  self->set_exit_handler([self](caf::exit_msg& em) {
    if (!em.reason) return;  // a linked actor that ended normally: as CAF's default handler
    fail_pending(self, actors::to_caf_error(errc::closed, self->state.config.name + ": stopped (" +
                                                              actors::describe(em.reason) + ")"));
    self->quit(std::move(em.reason));
  });

  return {
      [self](actors::call_atom, std::string& command, actors::payload& data,
             caf::timespan timeout) -> caf::typed_response_promise<payload> {
        auto& st = self->state;
        auto promise = self->make_response_promise<payload>();
        if (st.calls.size() >= st.config.max_pending_calls) {
          ++st.stats.call_errors;
          promise.deliver(actors::to_caf_error(actors::actor_errc::device_busy,
                                               std::to_string(st.calls.size()) + " calls wait"));
          return promise;
        }
        const auto id = st.next_id++;
        st.calls.emplace(id, promise);
        if (!st.on_reactor([id, command = std::move(command), bytes = to_vector(data)](
                               device_core& c) mutable { c.call(id, command, std::move(bytes)); })) {
          st.calls.erase(id);
          promise.deliver(reactor_gone());
          return promise;
        }
        if (timeout != caf::timespan::max())
          self->delayed_send(self, timeout, call_tmo_atom::value, id);
        return promise;
      },
      [self](actors::send_atom, std::string& command,
             actors::payload& data) -> caf::typed_response_promise<actors::sent_atom> {
        auto& st = self->state;
        auto promise = self->make_response_promise<actors::sent_atom>();
        const auto id = st.next_id++;
        st.sends.emplace(id, promise);
        if (!st.on_reactor([id, command = std::move(command), bytes = to_vector(data)](
                               device_core& c) mutable { c.send(id, command, std::move(bytes)); })) {
          st.sends.erase(id);
          promise.deliver(reactor_gone());
        }
        return promise;
      },
      [self](actors::listen_atom, actors::device_listener& l) {
        auto& ls = self->state.listeners;
        if (std::find(ls.begin(), ls.end(), l) == ls.end()) ls.push_back(std::move(l));
      },
      [self](actors::unlisten_atom, const actors::device_listener& l) {
        auto& ls = self->state.listeners;
        ls.erase(std::remove(ls.begin(), ls.end(), l), ls.end());
      },
      [self](watch_atom, ble_listener& l) {
        auto& ws = self->state.watchers;
        if (std::find(ws.begin(), ws.end(), l) == ws.end()) ws.push_back(std::move(l));
      },
      [self](unwatch_atom, const ble_listener& l) {
        auto& ws = self->state.watchers;
        ws.erase(std::remove(ws.begin(), ws.end(), l), ws.end());
      },
      [self](actors::stats_atom) -> caf::typed_response_promise<actors::device_stats> {
        auto& st = self->state;
        auto promise = self->make_response_promise<actors::device_stats>();
        const auto id = st.next_id++;
        st.snapshots[id].stats = promise;
        if (!st.on_reactor([id](device_core& c) { c.snapshot(id); })) {
          st.snapshots.erase(id);
          promise.deliver(reactor_gone());
        }
        return promise;
      },
      [self](actors::status_atom) -> caf::typed_response_promise<ble_device_status> {
        auto& st = self->state;
        auto promise = self->make_response_promise<ble_device_status>();
        const auto id = st.next_id++;
        st.snapshots[id].status = promise;
        if (!st.on_reactor([id](device_core& c) { c.snapshot(id); })) {
          st.snapshots.erase(id);
          promise.deliver(reactor_gone());
        }
        return promise;
      },
      // -- from the reactor --
      [self](const core_ready& r) {
        if (r.ec) {
          // The first link failed: end, so that the supervisor retries with its backoff.
          log::get("bridges").warn("ble {}: {}", self->state.config.name, r.detail);
          fail_and_quit(self, actors::to_caf_error(r.ec, r.detail));
          return;
        }
        self->state.ready = true;
      },
      [self](core_reply& r) {
        auto& st = self->state;
        if (auto it = st.calls.find(r.id); it != st.calls.end()) {
          auto promise = std::move(it->second);
          st.calls.erase(it);
          if (r.ec) {
            ++st.stats.call_errors;
            promise.deliver(actors::to_caf_error(r.ec, std::move(r.detail)));
          } else {
            ++st.stats.calls;
            promise.deliver(std::move(r.data));
          }
          return;
        }
        if (auto it = st.sends.find(r.id); it != st.sends.end()) {
          auto promise = std::move(it->second);
          st.sends.erase(it);
          if (r.ec) {
            ++st.stats.call_errors;
            promise.deliver(actors::to_caf_error(r.ec, std::move(r.detail)));
          } else {
            ++st.stats.sends;
            promise.deliver(actors::sent_atom::value);
          }
        }
        // else: the call's timeout answered it already
      },
      [self](core_snapshot& s) {
        auto& st = self->state;
        const auto it = st.snapshots.find(s.id);
        if (it == st.snapshots.end()) return;
        auto pending = std::move(it->second);
        st.snapshots.erase(it);
        if (pending.status) pending.status->deliver(std::move(s.status));
        if (pending.stats) {
          auto d = st.stats;
          d.bytes_in = s.status.link.bytes_in;
          d.bytes_out = s.status.link.bytes_out;
          d.reconnects = s.status.link.reconnects;
          pending.stats->deliver(d);
        }
      },
      [self](actors::frame_atom, std::string& source, payload& data) {
        auto& st = self->state;
        ++st.stats.unsolicited;
        for (const auto& l : st.listeners) self->send(l, actors::frame_atom::value, source, data);
      },
      [self](ble_outage& e) {
        for (const auto& w : self->state.watchers) self->send(w, e);
      },
      [self](call_tmo_atom, std::uint64_t id) {
        auto& st = self->state;
        const auto it = st.calls.find(id);
        if (it == st.calls.end()) return;
        auto promise = std::move(it->second);
        st.calls.erase(it);
        ++st.stats.call_timeouts;
        st.on_reactor([id](device_core& c) { c.forget(id); });
        promise.deliver(actors::to_caf_error(actors::actor_errc::device_timeout,
                                             st.config.name + ": no answer in time"));
      },
  };
}

}  // namespace

ble_device_actor spawn_ble_device(caf::actor_system& sys, io::reactor& reactor,
                                  io::buffer_pool& pool, ble_device_config config) {
  return caf::actor_cast<ble_device_actor>(
      sys.spawn(ble_device_impl, &reactor, &pool, std::move(config)));
}

actors::child_spec make_ble_device_child(io::reactor& reactor, io::buffer_pool& pool,
                                         ble_device_config config) {
  auto name = "ble/" + config.name;
  auto start = [&reactor, &pool, config = std::move(config)](caf::actor_system& sys) {
    return caf::actor_cast<caf::actor>(spawn_ble_device(sys, reactor, pool, config));
  };
  return actors::child_spec{std::move(name), std::move(start), actors::restart_mode::permanent};
}

}  // namespace vessel::bridges::ble
