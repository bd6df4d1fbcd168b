#include "actors/node.hpp"

#include <charconv>
#include <condition_variable>
#include <future>
#include <stdexcept>
#include <string>
#include <system_error>

#include <caf/blocking_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>

#include "actors/actor_errc.hpp"
#include "actors/errc.hpp"
#include "actors/link_actor.hpp"
#include "actors/rank_actor.hpp"
#include "io/log.hpp"

namespace vessel {

using namespace std::chrono_literals;
using actors::event_batch;
using actors::inbound_message;
using actors::link_event;

namespace {

constexpr const char* threads_var = "VESSEL_CAF_THREADS";
constexpr const char* scheduler_var = "VESSEL_CAF_SCHEDULER";
constexpr const char* rank_thread_var = "VESSEL_RANK_ACTOR_THREAD";
constexpr auto start_timeout = 10s;
constexpr auto stop_timeout = 30s;

// Lendable while callers may drive the loop (actors::driving_scoped_actor borrows it).
io::reactor_config reactor_config_of(const node_config& c) {
  io::reactor_config r = c.reactor;
  r.lendable = c.caller_progress.enabled;
  return r;
}

std::string peer_child_name(std::uint32_t peer) { return "peer/" + std::to_string(peer); }
std::string link_child_name(std::uint32_t peer) { return "link/" + std::to_string(peer); }

// Runs `fn` on the reactor thread and waits for it.
template <class F>
void on_reactor(io::reactor& r, F fn) {
  std::promise<void> done;
  if (!r.post([&] {
        fn();
        done.set_value();
      })) {
    return;  // stopped: nothing runs there any more
  }
  done.get_future().wait();
}

}  // namespace

actors::detailed_result<void> node_config::apply_env(const actors::env_view& env) {
  if (auto v = env.get(threads_var)) {
    std::size_t n = 0;
    const auto* end = v->data() + v->size();
    const auto [ptr, ec] = std::from_chars(v->data(), end, n);
    if (ec != std::errc{} || ptr != end || n < 1 || n > 256) {
      return actors::fail(actors::errc::malformed_number,
                          std::string{threads_var} + "='" + *v +
                              "' is not a thread count between 1 and 256");
    }
    scheduler_threads = n;
  }
  if (auto v = env.get(scheduler_var)) {
    if (*v == "sharing") {
      scheduler = caf_scheduler::sharing;
    } else if (*v == "stealing") {
      scheduler = caf_scheduler::stealing;
    } else {
      return actors::fail(actors::errc::bad_scheduler_override,
                          std::string{scheduler_var} + "='" + *v +
                              "' is not a CAF scheduler: sharing or stealing");
    }
  }
  if (auto v = env.get(rank_thread_var)) {
    if (*v == "reactor" || *v == "caf") {
      rank_actor_on_reactor = *v == "reactor";
    } else {
      return actors::fail(actors::errc::bad_scheduler_override,
                          std::string{rank_thread_var} + "='" + *v +
                              "' is not where the rank actor runs: reactor or caf");
    }
  }
  if (auto read = caller_progress.apply_env(env); !read) return read.error();
  return outcome::success();
}

/// Reactor thread: what the transport delivers goes to the batchers, or straight into a rank
/// actor resident on this thread.
class node::observer final : public actors::mesh_observer {
 public:
  explicit observer(node& n) : node_{n} {}

  // A hosted rank actor takes an arrival in the transport's own call: a batch would be matched
  // one posted turn later, behind the transport's continuation, and its flush reads the slot
  // under the mutex. That hop was a fifth of what an 8-byte message through the actor API costs
  // the reactor between its arrival and the reply's send. An arrival already waiting in the
  // batch keeps the next ones behind it.
  void on_message(inbound_message&& m) override {
    auto* direct = rank_direct();
    if (direct != nullptr && node_.rank_batcher_->pending() == 0 && direct->take_arrival(m)) return;
    node_.rank_batcher_->push(std::move(m));
  }
  void on_peer_state(std::uint32_t peer, actors::peer_state s, std::error_code why) override {
    if (peer < node_.link_batchers_.size() && node_.link_batchers_[peer]) {
      node_.link_batchers_[peer]->push(link_event{peer, s, why});
    }
  }
  void on_writable(std::uint32_t peer) override { node_.outbox_->on_writable(peer); }

  /// Once the reactor has stopped: lets go of the rank actor before the actor system goes.
  void forget_rank() noexcept {
    rank_ = nullptr;
    direct_ = nullptr;
    seen_generation_ = ~std::uint64_t{0};
  }

 private:
  // The slot as this thread last read it; the handle keeps the entry's actor alive meanwhile.
  actors::rank_direct_entry* rank_direct() {
    auto& slot = node_.rank_slot_;
    const auto generation = slot.generation.load(std::memory_order_acquire);
    if (generation != seen_generation_) {
      const std::lock_guard lock{slot.mutex};
      rank_ = slot.current;
      direct_ = slot.direct;
      seen_generation_ = generation;
    }
    return direct_;
  }

  node& node_;
  caf::actor rank_;
  actors::rank_direct_entry* direct_ = nullptr;
  std::uint64_t seen_generation_ = ~std::uint64_t{0};
};

node::node(node_config config, transport_factory make_transport)
    : config_{std::move(config)},
      pool_{std::make_unique<io::buffer_pool>(config_.pool)},
      reactor_{reactor_config_of(config_)},
      waiters_yield_{config_.caller_progress.yield_when_idle.value_or(false)} {
  if (config_.world_size < 1 || config_.rank >= config_.world_size) {
    throw std::system_error(actors::errc::rank_out_of_range,
                            "node: rank " + std::to_string(config_.rank) + " in a world of " +
                                std::to_string(config_.world_size));
  }
  if (!make_transport && config_.world_size != 1) {
    throw std::system_error(actors::errc::invalid_world_size,
                            "node: a world larger than 1 needs a transport (the mesh)");
  }
  caf_config_.set("scheduler.max-threads", config_.scheduler_threads);
  caf_config_.set("scheduler.policy", config_.scheduler == caf_scheduler::sharing
                                          ? caf::atom("sharing")
                                          : caf::atom("stealing"));
  system_ = std::make_unique<caf::actor_system>(caf_config_);
  pool_room_ = std::make_unique<actors::pool_room>(*pool_);
  if (auto started = reactor_.start(); !started) {
    throw std::system_error(started.error(), "node: the reactor did not start");
  }
  if (config_.rank_actor_on_reactor) {
    rank_host_ = std::make_unique<actors::reactor_execution_unit>(*system_, reactor_);
  }
  auto outbox_cfg = config_.outbox;
  outbox_cfg.world_size = config_.world_size;
  outbox_ = std::make_shared<actors::outbox>(reactor_, outbox_cfg);
  // Room for a destination again: the current rank actor sends what it parked.
  outbox_->set_room_callback([this](std::uint32_t dst) {
    caf::actor dest;
    {
      const std::lock_guard lock{rank_slot_.mutex};
      dest = rank_slot_.current;
    }
    if (dest) {
      caf::anon_send(caf::actor_cast<actors::rank_impl_actor>(dest), actors::room_atom::value, dst);
    }
  });
  observer_ = std::make_unique<observer>(*this);

  // Batches go to whichever incarnation of the actor is current when they leave.
  rank_batcher_ = std::make_unique<actors::event_batcher<inbound_message>>(
      [this](event_batch<inbound_message>&& b) {
        caf::actor dest;
        actors::rank_direct_entry* direct = nullptr;
        {
          const std::lock_guard lock{rank_slot_.mutex};
          dest = rank_slot_.current;
          direct = rank_slot_.direct;
        }
        if (direct != nullptr && direct->take(b)) return;  // dest keeps it alive meanwhile
        if (dest) caf::anon_send(caf::actor_cast<actors::rank_impl_actor>(dest), std::move(b));
      },
      &reactor_, config_.batching);
  link_slots_.resize(config_.world_size);
  link_batchers_.resize(config_.world_size);
  for (std::uint32_t p = 0; p < config_.world_size; ++p) {
    if (p == config_.rank) continue;
    link_slots_[p] = std::make_unique<actor_slot>();
    auto* slot = link_slots_[p].get();
    link_batchers_[p] = std::make_unique<actors::event_batcher<link_event>>(
        [slot](event_batch<link_event>&& b) {
          caf::actor dest;
          {
            const std::lock_guard lock{slot->mutex};
            dest = slot->current;
          }
          if (dest) caf::anon_send(caf::actor_cast<actors::link_impl_actor>(dest), std::move(b));
        },
        &reactor_, config_.batching);
  }

  // The transport is built on the reactor thread, which drives it from then on.
  on_reactor(reactor_, [&] {
    if (make_transport) {
      transport_ = make_transport(reactor_, *observer_);
    } else {
      transport_ = std::make_unique<actors::loopback_transport>(reactor_, *observer_);
    }
    outbox_->set_transport(transport_.get());
    transport_open_ = transport_ != nullptr;
  });
  if (!transport_) {
    throw std::system_error(actors::actor_errc::child_start_failed,
                            "node: the transport factory returned nothing");
  }

  // The supervision tree: rank, then one supervisor per peer holding its link actor.
  auto user_observer = config_.supervision.observer;
  auto observe = [this, user_observer](const actors::supervisor_event& e) {
    on_root_event(e);
    if (user_observer) user_observer(e);
  };
  std::vector<actors::child_spec> children;
  const actors::rank_actor_config rank_cfg{config_.rank, config_.world_size, config_.matching,
                                           config_.max_waiting_sends};
  children.push_back(actors::child_spec{
      "rank",
      [this, rank_cfg](caf::actor_system& sys) {
        auto rank = actors::spawn_rank_actor(sys, rank_cfg, outbox_, rank_host_.get());
        auto a = caf::actor_cast<caf::actor>(rank);
        rank_slot_.set(a, actors::direct_entry_of(rank));
        rank_slot_.changed.notify_all();
        return a;
      },
      actors::restart_mode::permanent});
  for (std::uint32_t p = 0; p < config_.world_size; ++p) {
    if (p == config_.rank) continue;
    auto* slot = link_slots_[p].get();
    actors::child_spec link{link_child_name(p),
                            [slot, p](caf::actor_system& sys) {
                              auto a =
                                  caf::actor_cast<caf::actor>(actors::spawn_link_actor(sys, p));
                              {
                                const std::lock_guard lock{slot->mutex};
                                slot->current = a;
                              }
                              slot->changed.notify_all();
                              return a;
                            },
                            actors::restart_mode::permanent};
    auto peer_cfg = config_.supervision;
    peer_cfg.name = peer_child_name(p);
    peer_cfg.max_restarts = config_.peer_max_restarts;
    peer_cfg.observer = observe;
    auto peer_sup = actors::supervisor_child(peer_child_name(p), peer_cfg, {std::move(link)});
    peer_sup.mode = actors::restart_mode::temporary;  // a peer given up stays given up
    children.push_back(std::move(peer_sup));
  }
  auto root_cfg = config_.supervision;
  root_cfg.name = "node/" + std::to_string(config_.rank);
  root_cfg.observer = observe;
  root_ = actors::spawn_supervisor(*system_, root_cfg, std::move(children));

  // Ready when the rank actor runs (the links follow on their own).
  std::unique_lock lock{rank_slot_.mutex};
  rank_slot_.changed.wait_for(lock, start_timeout, [&] { return bool{rank_slot_.current}; });
}

node::~node() { stop(); }

void node::on_root_event(const actors::supervisor_event& e) {
  using kind = actors::supervisor_event::kind;
  auto clear = [](actor_slot& slot) {
    const std::lock_guard lock{slot.mutex};
    slot.current = nullptr;
  };
  if (e.what == kind::failed || e.what == kind::escalated) {
    // The entry is the failed actor's: no flush may call into it once the handle is gone.
    if (e.child == "rank") rank_slot_.set(nullptr, nullptr);
    for (std::uint32_t p = 0; p < link_slots_.size(); ++p) {
      if (link_slots_[p] && e.child == link_child_name(p)) clear(*link_slots_[p]);
    }
  }
  if (e.what == kind::escalated && e.supervisor == "node/" + std::to_string(config_.rank)) {
    const std::lock_guard lock{state_mutex_};
    failed_ = true;
  }
  if (e.what == kind::stopped && e.child.rfind("peer/", 0) == 0) {
    const std::lock_guard lock{state_mutex_};
    if (stopped_) return;
    const auto peer = static_cast<std::uint32_t>(std::stoul(e.child.substr(5)));
    lost_peers_.insert(peer);
    log::get("actors").error("rank {}: peer {} is lost: {}", config_.rank, peer, e.reason);
  }
}

result<actors::payload> node::copy_when_pool_has_room(caf::blocking_actor* self,
                                                      std::span<const std::byte> bytes,
                                                      caf::timespan timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto p = actors::payload::copy_of(*pool_, bytes);
    if (p || p.error() != io::errc::pool_exhausted) return p;
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= caf::timespan::zero() ||
        !notify_when_pool_has_room(bytes.size(), caf::actor_cast<caf::actor>(self))) {
      return p;
    }
    // A notice may come late for an earlier request: harmless, the next try decides.
    self->receive([](actors::pool_room_atom) {}, caf::after(left) >> [] {});
  }
}

actors::rank_actor node::rank_actor() const {
  const std::lock_guard lock{rank_slot_.mutex};
  return caf::actor_cast<actors::rank_actor>(rank_slot_.current);
}

actors::link_actor node::link_actor(std::uint32_t peer) const {
  if (peer >= link_slots_.size() || !link_slots_[peer]) return {};
  const std::lock_guard lock{link_slots_[peer]->mutex};
  return caf::actor_cast<actors::link_actor>(link_slots_[peer]->current);
}

actors::detailed_result<caf::actor> node::spawn_supervised(actors::child_spec spec) {
  caf::scoped_actor self{*system_};
  caf::actor result;
  caf::error failure;
  const auto name = spec.name;
  self->request(root_, start_timeout, actors::start_child_atom::value, std::move(spec))
      .receive([&](caf::actor& a) { result = std::move(a); },
               [&](caf::error& e) { failure = std::move(e); });
  if (failure) {
    return actors::fail(actors::from_caf_error(failure),
                        "node: cannot start '" + name + "': " + actors::describe(failure));
  }
  if (!result) {
    return actors::fail(actors::actor_errc::child_start_failed,
                        "node: '" + name + "' failed as it started (the supervisor retries it)");
  }
  return result;
}

void node::drop_connection(std::uint32_t peer) {
  reactor_.post([this, peer] {
    if (transport_open_) transport_->drop_connection(peer);
  });
}

std::set<std::uint32_t> node::lost_peers() const {
  const std::lock_guard lock{state_mutex_};
  return lost_peers_;
}

bool node::failed() const {
  const std::lock_guard lock{state_mutex_};
  return failed_;
}

void node::stop() {
  {
    const std::lock_guard lock{state_mutex_};
    if (stopped_) return;
    stopped_ = true;
  }
  if (root_) {
    caf::scoped_actor self{*system_};
    self->monitor(root_);
    self->send_exit(root_, caf::exit_reason::user_shutdown);
    bool down = false;
    self->receive([&](caf::down_msg&) { down = true; }, caf::after(stop_timeout) >> [] {});
    if (!down) log::get("actors").error("node: the supervision tree did not stop within 30 s");
    root_ = nullptr;
  }
  // The transport goes while the reactor still runs (a mesh closes from an app thread).
  on_reactor(reactor_, [&] {
    outbox_->set_transport(nullptr);
    transport_open_ = false;
  });
  transport_.reset();
  reactor_.stop();
  // Now no flush can be pending: the batchers and the slots may go.
  rank_batcher_.reset();
  link_batchers_.clear();
  if (observer_) observer_->forget_rank();
  rank_slot_.set(nullptr, nullptr);
  for (auto& slot : link_slots_) {
    if (!slot) continue;
    const std::lock_guard lock{slot->mutex};
    slot->current = nullptr;
  }
  system_.reset();  // waits for every actor; the pool (declared first) outlives their payloads
}

}  // namespace vessel
