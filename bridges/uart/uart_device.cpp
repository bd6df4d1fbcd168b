#include "bridges/uart/uart_device.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <charconv>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/actor_cast.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/actor_errc.hpp"
#include "bridges/uart/errc.hpp"
#include "io/log.hpp"

namespace vessel::bridges::uart {
namespace {

// -- Reactor -> actor messages ------------------------------------------------------------------

struct open_done {
  std::error_code error;
};
struct call_done {
  std::uint64_t token = 0;
  std::error_code error;
  actors::payload data;
};
struct send_done {
  std::uint64_t token = 0;
  std::error_code error;
};
struct stats_done {
  std::uint64_t token = 0;
  actors::device_stats stats;
};
struct event_frame {
  actors::payload data;  // topic | body
};
struct state_change {
  link_state state = link_state::up;
  std::error_code why;
};

}  // namespace
}  // namespace vessel::bridges::uart

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::bridges::uart::open_done)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::bridges::uart::call_done)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::bridges::uart::send_done)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::bridges::uart::stats_done)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::bridges::uart::event_frame)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::bridges::uart::state_change)

namespace vessel::bridges::uart {
namespace {

using grace_atom = caf::atom_constant<caf::atom("uartgrace")>;
using retired_atom = caf::atom_constant<caf::atom("uartclosed")>;

using uart_device_impl = actors::device_actor::extend<
    caf::reacts_to<open_done>, caf::reacts_to<call_done>, caf::reacts_to<send_done>,
    caf::reacts_to<stats_done>, caf::reacts_to<event_frame>, caf::reacts_to<state_change>,
    caf::reacts_to<grace_atom, std::uint64_t>, caf::reacts_to<retired_atom>>;

// The reactor side of one board, shared by every incarnation of its actor. Reactor thread only,
// but for the constant members.
struct device_core {
  device_core(io::reactor& r, io::buffer_pool& p, uart_device_config c)
      : reactor{r}, pool{p}, config{std::move(c)} {}

  io::reactor& reactor;
  io::buffer_pool& pool;
  const uart_device_config config;

  std::unique_ptr<uart_link> link;  // the current incarnation's
  std::uint64_t incarnation = 0;    // the actor generation `link` belongs to
  std::vector<std::unique_ptr<uart_link>> retiring;  // closing, destroyed once closed
  std::uint64_t opens = 0;
  actors::device_stats retired;  // line counters of the links closed so far
  actors::device_stats calls;    // call outcomes (calls, call_timeouts, call_errors), all time

  actors::device_stats snapshot() const {
    actors::device_stats s = retired;
    s.calls = calls.calls;
    s.call_timeouts = calls.call_timeouts;
    s.call_errors = calls.call_errors;
    if (link) add_line(s, link->counters());
    s.reconnects += opens > 0 ? opens - 1 : 0;
    return s;
  }

  static void add_line(actors::device_stats& s, const uart_link_counters& c) {
    s.sends += c.sends;
    s.unsolicited += c.events;
    s.bytes_out += c.bytes_out;
    s.bytes_in += c.bytes_in;
    s.reconnects += c.reopens;
    s.frames_in += c.frames_in;
    s.frames_out += c.frames_out;
    s.crc_errors += c.crc_errors;
    s.resync_bytes += c.resync_bytes;
    s.retransmits += c.retransmits;
  }

  // Closes the link of `generation` (if it is still the current one); it is destroyed once closed.
  // `done` runs once it is closed (at once when there is none): a transport must not outlive its
  // reactor with operations in flight, so the actor ends only after this.
  void retire(std::uint64_t generation, std::function<void()> done = {}) {
    if (!link || incarnation != generation) {
      if (done) done();
      return;
    }
    add_line(retired, link->counters());
    auto* raw = link.get();
    retiring.push_back(std::move(link));
    auto finish = [this, raw, done = std::move(done)] {
      // Not from inside the link's own callback: destroy it on the next turn.
      reactor.post([this, raw] {
        std::erase_if(retiring, [raw](const auto& l) { return l.get() == raw; });
        if (dying && retiring.empty()) delete this;
      });
      if (done) done();
    };
    for (std::uint64_t id : subscriptions) raw->unsubscribe(id);
    subscriptions.clear();
    if (raw->state() == link_state::closed) {
      raw->on_state({});
      finish();
      return;
    }
    raw->on_state([f = std::function<void()>{std::move(finish)}](link_state s, std::error_code) mutable {
      if (s == link_state::closed && f) std::exchange(f, {})();
    });
    raw->close();
  }

  std::vector<std::uint64_t> subscriptions;
  bool dying = false;  // released by its owners; goes once its retiring links have closed

  // The last owner let go (any thread). A link may be destroyed only on the reactor thread once
  // closed, or after the reactor stopped: the core goes there, when its links are done.
  static void release(device_core* c) {
    const bool posted = c->reactor.post([c] {
      c->retire(c->incarnation);
      c->dying = true;
      if (c->retiring.empty()) delete c;
    });
    if (!posted) delete c;  // the reactor has stopped
  }
};

caf::actor handle_of(const caf::actor_addr& addr) { return caf::actor_cast<caf::actor>(addr); }

std::error_code public_error(std::error_code ec) {
  if (ec == errc::call_timeout) return actors::actor_errc::device_timeout;
  if (ec == errc::device_busy || ec == errc::too_many_calls) return actors::actor_errc::device_busy;
  return ec;
}

struct device_state {
  std::shared_ptr<device_core> core;
  std::uint64_t generation = 0;
  bool open = false;  // the port opened; calls are forwarded from the start (the reactor orders them)
  bool ending = false;
  caf::error quit_reason;  // set once ending: why the actor ends, after its link has closed
  std::uint64_t next_token = 1;
  std::uint64_t down_epoch = 0;  // bumped by every up/down: a grace timer of an older epoch is moot
  bool down = false;
  std::unordered_map<std::uint64_t, caf::typed_response_promise<actors::payload>> calls;
  std::unordered_map<std::uint64_t, caf::typed_response_promise<actors::sent_atom>> sends;
  std::unordered_map<std::uint64_t, caf::typed_response_promise<actors::device_stats>> stats;
  std::vector<actors::device_listener> listeners;
  static inline const char* name = "vessel.uart_device";
};

using self_ptr = uart_device_impl::stateful_pointer<device_state>;

std::string who(self_ptr self) { return "uart device '" + self->state.core->config.name + "'"; }

// Answers every request still open with `ec` (none is left unanswered when the actor ends).
void fail_pending(self_ptr self, std::error_code ec, const std::string& detail) {
  auto& st = self->state;
  for (auto& [token, p] : st.calls) p.deliver(actors::to_caf_error(public_error(ec), detail));
  for (auto& [token, p] : st.sends) p.deliver(actors::to_caf_error(ec, detail));
  for (auto& [token, p] : st.stats) p.deliver(actors::to_caf_error(ec, detail));
  st.calls.clear();
  st.sends.clear();
  st.stats.clear();
}

// Ends the actor with `reason` once its link has closed (or after 5 s at the latest).
void close_then_quit(self_ptr self, caf::error reason) {
  auto& st = self->state;
  st.quit_reason = std::move(reason);
  const auto gen = st.generation;
  auto addr = self->address();
  auto core = st.core;
  const bool ok = core->reactor.dispatch([core, gen, addr] {
    core->retire(gen, [addr] { caf::anon_send(handle_of(addr), retired_atom::value); });
  });
  if (!ok) {
    self->quit(st.quit_reason);
    return;
  }
  self->delayed_send(self, std::chrono::seconds{5}, retired_atom::value);
}

// Fails what is open with `ec`, then ends the actor with it (its supervisor restarts it).
void fail_and_quit(self_ptr self, std::error_code ec, const std::string& detail) {
  auto& st = self->state;
  if (st.ending) return;
  st.ending = true;
  fail_pending(self, ec, detail);
  log::get("bridges").warn("{}", detail);
  close_then_quit(self, actors::to_caf_error(ec, detail));
}

// Runs `fn(core)` on the reactor; false when the reactor no longer runs work.
template <class F>
bool on_reactor(self_ptr self, F fn) {
  auto core = self->state.core;
  return core->reactor.dispatch([core, fn = std::move(fn)]() mutable { fn(*core); });
}

// Reactor: opens the port for generation `gen` and wires the link's callbacks to the actor.
void open_link(device_core& core, std::uint64_t gen, const caf::actor_addr& addr) {
  core.retire(core.incarnation);  // a previous incarnation's link, should its exit not have run
  auto opened = uart_link::open(core.reactor, core.config.link);
  if (!opened) {
    caf::anon_send(handle_of(addr), open_done{opened.error()});
    return;
  }
  core.link = std::move(opened).value();
  core.incarnation = gen;
  ++core.opens;
  core.link->on_state([addr](link_state s, std::error_code why) {
    caf::anon_send(handle_of(addr), state_change{s, why});
  });
  auto* c = &core;
  core.subscriptions.push_back(core.link->subscribe([c, addr](std::uint8_t topic, std::span<const std::byte> body) {
    auto block = c->pool.try_acquire(body.size() + 1);
    if (!block) return;  // no block free: the event is lost (counted by the link as delivered)
    block.data()[0] = std::byte{topic};
    if (!body.empty()) std::memcpy(block.data() + 1, body.data(), body.size());
    caf::anon_send(handle_of(addr), event_frame{actors::payload{std::move(block).slice(0, body.size() + 1)}});
  }));
  caf::anon_send(handle_of(addr), open_done{});
}

uart_device_impl::behavior_type device_impl(self_ptr self, std::shared_ptr<device_core> shared_core,
                                            std::uint64_t generation) {
  actors::keep_exception_text(self);
  self->state.core = std::move(shared_core);
  self->state.generation = generation;
  // The link closes with the actor, whatever ends it.
  self->attach_functor([c = self->state.core, generation] {
    c->reactor.dispatch([c, generation] { c->retire(generation); });
  });
  // An exit message (supervisor shutdown, a link) ends the actor, but answers its requests first.
  self->set_exit_handler([self](caf::exit_msg& em) {
    if (self->state.ending) return;
    self->state.ending = true;
    fail_pending(self, errc::link_closed, who(self) + ": stopped (" + actors::describe(em.reason) + ")");
    close_then_quit(self, std::move(em.reason));
  });
  if (!on_reactor(self, [generation, me = self->address()](device_core& c) { open_link(c, generation, me); })) {
    fail_and_quit(self, actors::actor_errc::node_stopped, who(self) + ": the reactor has stopped");
  }
  return {
      [self](actors::call_atom, const std::string& command, actors::payload& data,
             caf::timespan timeout) -> caf::result<actors::payload> {
        auto cmd = parse_command(command);
        if (!cmd) return actors::to_caf_error(cmd.error(), who(self) + ": command '" + command + "'");
        auto& st = self->state;
        if (st.ending) return actors::to_caf_error(errc::link_closed, who(self) + ": ending");
        const auto token = st.next_token++;
        auto promise = self->make_response_promise<actors::payload>();
        st.calls.emplace(token, promise);
        const auto addr = self->address();
        const auto gen = st.generation;
        const auto c = cmd.value();
        const auto ok = on_reactor(self, [gen, token, addr, c, data = std::move(data), timeout](device_core& core) {
          if (!core.link || core.incarnation != gen) {
            caf::anon_send(handle_of(addr), call_done{token, errc::link_closed, {}});
            return;
          }
          auto* cp = &core;
          auto id = core.link->call(
              c, data.bytes(), std::chrono::duration_cast<io::reactor::clock::duration>(timeout),
              [cp, token, addr](result<std::span<const std::byte>> r) {
                if (!r) {
                  if (r.error() == errc::call_timeout) {
                    ++cp->calls.call_timeouts;
                  } else {
                    ++cp->calls.call_errors;
                  }
                  caf::anon_send(handle_of(addr), call_done{token, r.error(), {}});
                  return;
                }
                ++cp->calls.calls;
                auto body = actors::payload::copy_of(cp->pool, r.value());
                if (!body) {
                  caf::anon_send(handle_of(addr), call_done{token, body.error(), {}});
                } else {
                  caf::anon_send(handle_of(addr), call_done{token, {}, std::move(body).value()});
                }
              });
          if (!id) {
            ++cp->calls.call_errors;
            caf::anon_send(handle_of(addr), call_done{token, id.error(), {}});
          }
        });
        if (!ok) fail_and_quit(self, actors::actor_errc::node_stopped, who(self) + ": the reactor has stopped");
        return promise;
      },
      [self](actors::send_atom, const std::string& command,
             actors::payload& data) -> caf::result<actors::sent_atom> {
        auto cmd = parse_command(command);
        if (!cmd) return actors::to_caf_error(cmd.error(), who(self) + ": command '" + command + "'");
        auto& st = self->state;
        if (st.ending) return actors::to_caf_error(errc::link_closed, who(self) + ": ending");
        const auto token = st.next_token++;
        auto promise = self->make_response_promise<actors::sent_atom>();
        st.sends.emplace(token, promise);
        const auto addr = self->address();
        const auto gen = st.generation;
        const auto c = cmd.value();
        const auto ok = on_reactor(self, [gen, token, addr, c, data = std::move(data)](device_core& core) {
          std::error_code ec = errc::link_closed;
          if (core.link && core.incarnation == gen) {
            auto sent = core.link->send(c, data.bytes());
            ec = sent ? std::error_code{} : sent.error();
          }
          caf::anon_send(handle_of(addr), send_done{token, ec});
        });
        if (!ok) fail_and_quit(self, actors::actor_errc::node_stopped, who(self) + ": the reactor has stopped");
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
      [self](actors::stats_atom) -> caf::result<actors::device_stats> {
        auto& st = self->state;
        if (st.ending) return actors::to_caf_error(errc::link_closed, who(self) + ": ending");
        const auto token = st.next_token++;
        auto promise = self->make_response_promise<actors::device_stats>();
        st.stats.emplace(token, promise);
        const auto addr = self->address();
        if (!on_reactor(self, [token, addr](device_core& core) {
              caf::anon_send(handle_of(addr), stats_done{token, core.snapshot()});
            })) {
          fail_and_quit(self, actors::actor_errc::node_stopped, who(self) + ": the reactor has stopped");
        }
        return promise;
      },
      // -- from the reactor --
      [self](open_done& d) {
        if (d.error) {
          fail_and_quit(self, d.error,
                        who(self) + ": cannot open " + self->state.core->config.link.serial.path + ": " +
                            d.error.message());
          return;
        }
        self->state.open = true;
        log::get("bridges").info("{}: port {} open", who(self), self->state.core->config.link.serial.path);
      },
      [self](call_done& d) {
        auto& calls = self->state.calls;
        auto it = calls.find(d.token);
        if (it == calls.end()) return;
        if (d.error) {
          it->second.deliver(actors::to_caf_error(public_error(d.error), who(self) + ": call failed: " + d.error.message()));
        } else {
          it->second.deliver(std::move(d.data));
        }
        calls.erase(it);
      },
      [self](send_done& d) {
        auto& sends = self->state.sends;
        auto it = sends.find(d.token);
        if (it == sends.end()) return;
        if (d.error) {
          it->second.deliver(actors::to_caf_error(d.error, who(self) + ": send failed: " + d.error.message()));
        } else {
          it->second.deliver(actors::sent_atom::value);
        }
        sends.erase(it);
      },
      [self](stats_done& d) {
        auto& stats = self->state.stats;
        auto it = stats.find(d.token);
        if (it == stats.end()) return;
        it->second.deliver(d.stats);
        stats.erase(it);
      },
      [self](event_frame& f) {
        for (const auto& l : self->state.listeners) {
          self->send(l, actors::frame_atom::value, self->state.core->config.name, f.data);
        }
      },
      [self](state_change& s) {
        auto& st = self->state;
        switch (s.state) {
          case link_state::up:
            ++st.down_epoch;
            st.down = false;
            break;
          case link_state::down: {
            ++st.down_epoch;
            st.down = true;
            const auto grace = st.core->config.unplug_grace;
            if (grace.count() == 0) {
              fail_and_quit(self, errc::device_unplugged,
                            who(self) + ": the port went away (" + s.why.message() + ")");
            } else {
              self->delayed_send(self, grace, grace_atom::value, st.down_epoch);
            }
            break;
          }
          case link_state::closed:
            fail_and_quit(self, s.why ? s.why : std::error_code{errc::device_gone},
                          who(self) + ": the link closed (" + s.why.message() + ")");
            break;
        }
      },
      [self](retired_atom) {
        if (self->state.ending) self->quit(self->state.quit_reason);
      },
      [self](grace_atom, std::uint64_t epoch) {
        auto& st = self->state;
        if (!st.down || epoch != st.down_epoch) return;
        fail_and_quit(self, errc::device_unplugged,
                      who(self) + ": the port stayed away longer than the grace period");
      },
  };
}

}  // namespace

actors::supervisor_config uart_device_config::default_supervision() {
  actors::supervisor_config c;
  c.restart_backoff = io::reconnect_policy{std::chrono::milliseconds{20}, std::chrono::seconds{1}, 2.0, 0, true};
  c.max_restarts = 1'000'000;
  c.window = std::chrono::seconds{10};
  return c;
}

result<std::uint8_t> parse_command(std::string_view text) noexcept {
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
    base = 16;
  }
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || value > 0x7F) {
    return errc::bad_command;
  }
  return static_cast<std::uint8_t>(value);
}

actors::child_spec uart_device_child(io::reactor& reactor, io::buffer_pool& pool,
                                     uart_device_config config) {
  actors::register_caf_error_category(uart_category());
  std::shared_ptr<device_core> core{new device_core(reactor, pool, std::move(config)), &device_core::release};
  auto generation = std::make_shared<std::atomic<std::uint64_t>>(0);
  actors::child_spec spec;
  spec.name = core->config.name;
  spec.mode = actors::restart_mode::permanent;
  spec.start = [core, generation](caf::actor_system& sys) -> caf::actor {
    return caf::actor_cast<caf::actor>(sys.spawn(device_impl, core, ++*generation));
  };
  return spec;
}

actors::child_spec supervised_uart_device(io::reactor& reactor, io::buffer_pool& pool,
                                          uart_device_config config) {
  auto sup = config.supervision;
  sup.name = "uart/" + config.name;
  auto name = sup.name;
  std::vector<actors::child_spec> children;
  children.push_back(uart_device_child(reactor, pool, std::move(config)));
  return actors::supervisor_child(std::move(name), std::move(sup), std::move(children));
}

actors::device_actor current_uart_device(caf::actor_system& sys, const caf::actor& supervisor,
                                         const std::string& name, std::chrono::milliseconds timeout) {
  caf::scoped_actor self{sys};
  caf::actor out;
  self->request(supervisor, timeout, actors::child_atom::value, name)
      .receive([&](caf::actor& a) { out = std::move(a); }, [](caf::error&) {});
  return caf::actor_cast<actors::device_actor>(out);
}

}  // namespace vessel::bridges::uart
