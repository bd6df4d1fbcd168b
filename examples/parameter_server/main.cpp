// parameter_server: actors on vessel::node as server shards and workers.
//
// The parameter vector (--dims doubles) is cut into shards, one server shard actor each on ranks
// 0 .. S-1 (--servers, default half the world). Every rank runs a worker actor that, for
// --steps steps, pulls the whole vector from every shard and pushes a gradient back. Gradients
// are integers (exact in a double whatever the order of the sums), so the final vector is known:
// every shard checks its own values once all pushes are in, every worker pulls the final vector
// and checks all of it, and a rank exits non-zero if anything differs.
//
// Messages go through the rank actor (actor_interfaces.hpp): one request tag for the shards (push,
// pull, final pull), one reply tag for the workers. A worker pushes, then pulls: messages of one
// (source, tag) do not overtake each other, so each pull already contains the worker's own earlier
// pushes, which it checks too. --drop-connection makes every worker cut its connection to shard 0
// half way (node::drop_connection): the mesh re-dials and resends, and the run must still be exact.
//
//   vessel-run -n 4 build/bin/parameter_server [--dims N] [--steps N] [--servers N] [--drop-connection]

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#include "actors/actor_errc.hpp"
#include "actors/actor_interfaces.hpp"
#include "actors/node_launch.hpp"
#include "actors/pool_room.hpp"
#include "io/errc.hpp"

namespace {

using namespace std::chrono_literals;
namespace va = vessel::actors;

constexpr std::uint64_t tag_request = 100;  // worker -> shard
constexpr std::uint64_t tag_reply = 101;    // shard -> worker

enum class op : std::uint32_t { pull = 1, push = 2, final_pull = 3 };

// Every message starts with this header; pushes and replies carry the shard's doubles after it.
struct header {
  op what;
  std::uint32_t worker;
  std::uint64_t step;
};

struct options {
  std::size_t dims = 4096;
  std::uint64_t steps = 20;
  std::uint32_t servers = 0;  // 0: half the world, at least one
  bool drop_connection = false;
};

struct layout {
  std::uint32_t world = 1;
  std::uint32_t servers = 1;
  std::size_t dims = 0;
  std::uint64_t steps = 0;
  std::size_t begin(std::uint32_t shard) const { return dims * shard / servers; }
  std::size_t end(std::uint32_t shard) const { return dims * (shard + 1) / servers; }
  // The gradient worker `w` pushes at step `t` for element `i` (small integers: exact sums).
  static double gradient(std::uint32_t w, std::uint64_t t, std::size_t i) {
    return static_cast<double>((w + 1) * (t + 1) + i % 7);
  }
  // Element `i` once every worker pushed every step.
  double expected(std::size_t i) const {
    double sum = 0;
    for (std::uint32_t w = 0; w < world; ++w) {
      for (std::uint64_t t = 0; t < steps; ++t) sum += gradient(w, t, i);
    }
    return sum;
  }
  // What worker `w` itself has added to element `i` after `done` steps.
  static double own(std::uint32_t w, std::uint64_t done, std::size_t i) {
    double sum = 0;
    for (std::uint64_t t = 0; t < done; ++t) sum += gradient(w, t, i);
    return sum;
  }
};

// A request or reply: `h`, then `values`.
std::vector<std::byte> encode(header h, const double* values, std::size_t count) {
  std::vector<std::byte> bytes(sizeof(header) + count * sizeof(double));
  std::memcpy(bytes.data(), &h, sizeof h);
  if (count > 0) std::memcpy(bytes.data() + sizeof h, values, count * sizeof(double));
  return bytes;
}

// A payload of the message from the node's pool, for a blocking actor: while the links hold every
// block (until the peers ack them) it waits for the node's word that one is back.
va::payload build_message(caf::blocking_actor* self, vessel::node& node, header h,
                          const double* values, std::size_t count) {
  auto p = node.copy_when_pool_has_room(self, encode(h, values, count), 120s);
  if (!p) throw std::runtime_error("payload: " + p.error().message());
  return std::move(p).value();
}

header read_header(const va::payload& p) {
  header h{};
  if (p.size() >= sizeof h) std::memcpy(&h, p.view().data(), sizeof h);
  return h;
}

// -- the server shard (event-based: receives, applies, answers) -----------------------------

struct shard_state {
  layout lay;
  std::uint32_t shard = 0;
  va::rank_actor rank;
  vessel::node* node = nullptr;
  std::vector<double> values;
  std::uint64_t pushes = 0;
  std::vector<std::uint32_t> final_waiters;  // workers whose final pull waits for the last push
  std::uint32_t finals_sent = 0;             // the shard quits once every worker has its final
  // Replies waiting for a payload block (worker, final?), in order: sent on pool_room_atom.
  std::deque<std::pair<std::uint32_t, bool>> replies_waiting;
  std::shared_ptr<std::atomic<int>> failures;
  static inline const char* name = "ps.shard";
};

// Sends the shard's values to `worker`; false when the pool has no block now (the node then tells
// the shard, which retries: an event-based actor must not sleep in a handler).
bool try_shard_reply(caf::stateful_actor<shard_state>* self, std::uint32_t worker, bool last) {
  auto& st = self->state;
  const auto bytes =
      encode(header{op::pull, st.shard, st.pushes}, st.values.data(), st.values.size());
  auto msg = va::payload::copy_of(st.node->pool(), bytes);
  if (!msg) {
    if (msg.error() == vessel::io::errc::pool_exhausted &&
        st.node->notify_when_pool_has_room(bytes.size(), caf::actor_cast<caf::actor>(self))) {
      return false;
    }
    std::fprintf(stderr, "shard %u: reply: %s\n", st.shard, msg.error().message().c_str());
    ++*st.failures;
    self->quit();
    return true;
  }
  self->request(st.rank, caf::infinite, va::send_atom::value, worker, tag_reply,
                std::move(msg).value())
      .then(
          [self, last](va::sent_atom) {
            if (last && ++self->state.finals_sent == self->state.lay.world) self->quit();
          },
          [self](caf::error& e) {
            std::fprintf(stderr, "shard %u: reply failed: %s\n", self->state.shard,
                         va::describe(e).c_str());
            ++*self->state.failures;
            self->quit();
          });
  return true;
}

// Replies go out in the order they were asked for: behind any that wait for a block.
void shard_reply(caf::stateful_actor<shard_state>* self, std::uint32_t worker, bool last) {
  auto& waiting = self->state.replies_waiting;
  if (waiting.empty() && try_shard_reply(self, worker, last)) return;
  waiting.emplace_back(worker, last);
}

void shard_retry_replies(caf::stateful_actor<shard_state>* self) {
  auto& waiting = self->state.replies_waiting;
  while (!waiting.empty() && try_shard_reply(self, waiting.front().first, waiting.front().second)) {
    waiting.pop_front();
  }
}

// Every push is in: check the shard, answer the final pulls that waited.
void shard_finish(caf::stateful_actor<shard_state>* self) {
  auto& st = self->state;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < st.values.size(); ++i) {
    if (st.values[i] != st.lay.expected(st.lay.begin(st.shard) + i)) ++wrong;
  }
  if (wrong > 0) ++*st.failures;
  std::printf(
      "shard %u [%zu, %zu): %llu pushes applied, %s\n", st.shard, st.lay.begin(st.shard),
      st.lay.end(st.shard), static_cast<unsigned long long>(st.pushes),
      wrong == 0 ? "values match" : ("WRONG: " + std::to_string(wrong) + " values").c_str());
  std::fflush(stdout);
  for (auto w : st.final_waiters) shard_reply(self, w, true);
  st.final_waiters.clear();
}

void shard_handle(caf::stateful_actor<shard_state>* self, const va::envelope& e) {
  auto& st = self->state;
  const header h = read_header(e.data);
  const std::uint64_t total = std::uint64_t{st.lay.world} * st.lay.steps;
  switch (h.what) {
    case op::push: {
      const std::size_t n = (e.data.size() - sizeof(header)) / sizeof(double);
      if (n != st.values.size()) {
        std::fprintf(stderr, "shard %u: a push of %zu values, expected %zu\n", st.shard, n,
                     st.values.size());
        ++*st.failures;
      } else {
        const auto* g = e.data.view().data() + sizeof(header);
        for (std::size_t i = 0; i < n; ++i) {
          double v;
          std::memcpy(&v, g + i * sizeof(double), sizeof v);
          st.values[i] += v;
        }
      }
      if (++st.pushes == total) shard_finish(self);
      break;
    }
    case op::pull: shard_reply(self, e.source, false); break;
    case op::final_pull:
      if (st.pushes == total) {
        shard_reply(self, e.source, true);
      } else {
        st.final_waiters.push_back(e.source);
      }
      break;
    default:
      std::fprintf(stderr, "shard %u: unknown request %u from rank %u\n", st.shard,
                   static_cast<unsigned>(h.what), e.source);
      ++*st.failures;
  }
}

// One receive at a time: the next is posted once this one is handled.
void shard_receive(caf::stateful_actor<shard_state>* self) {
  self->request(self->state.rank, caf::infinite, va::recv_atom::value, va::rank_any_source,
                tag_request, caf::timespan::max())
      .then(
          [self](va::envelope& e) {
            shard_handle(self, e);
            shard_receive(self);
          },
          [self](caf::error& e) {
            std::fprintf(stderr, "shard %u: receive failed: %s\n", self->state.shard,
                         va::describe(e).c_str());
            ++*self->state.failures;
            self->quit();
          });
}

caf::behavior shard_actor(caf::stateful_actor<shard_state>* self, layout lay, std::uint32_t shard,
                          va::rank_actor rank, vessel::node* node,
                          std::shared_ptr<std::atomic<int>> failures) {
  auto& st = self->state;
  st.lay = lay;
  st.shard = shard;
  st.rank = rank;
  st.node = node;
  st.values.assign(lay.end(shard) - lay.begin(shard), 0.0);
  st.failures = std::move(failures);
  shard_receive(self);
  return {[self](va::pool_room_atom) { shard_retry_replies(self); }};
}

}  // namespace
namespace {

// -- the worker (a blocking actor: one step after the other) --------------------------------

struct worker_context {
  layout lay;
  std::uint32_t self = 0;
  vessel::node* node = nullptr;
  bool drop_connection = false;
  std::shared_ptr<std::atomic<int>> failures;
};

void send_or_fail(caf::blocking_actor* self, const va::rank_actor& rank, std::uint32_t dst,
                  va::payload msg, const worker_context& cx) {
  self->request(rank, caf::infinite, va::send_atom::value, dst, tag_request, std::move(msg))
      .receive([](va::sent_atom) {},
               [&](caf::error& e) {
                 throw std::runtime_error("worker " + std::to_string(cx.self) + ": send to rank " +
                                          std::to_string(dst) + " failed: " + va::describe(e));
               });
}

// Pulls every shard (final: waits for the last push) into `params`.
void pull_all(caf::blocking_actor* self, const va::rank_actor& rank, const worker_context& cx,
              op what, std::uint64_t step, std::vector<double>& params) {
  for (std::uint32_t s = 0; s < cx.lay.servers; ++s) {
    send_or_fail(self, rank, s,
                 build_message(self, *cx.node, header{what, cx.self, step}, nullptr, 0), cx);
  }
  for (std::uint32_t s = 0; s < cx.lay.servers; ++s) {
    self->request(rank, caf::infinite, va::recv_atom::value, s, tag_reply, caf::timespan{120s})
        .receive(
            [&](va::envelope& e) {
              const std::size_t n = (e.data.size() - sizeof(header)) / sizeof(double);
              const std::size_t begin = cx.lay.begin(s);
              if (n != cx.lay.end(s) - begin) {
                throw std::runtime_error("shard " + std::to_string(s) + " sent " +
                                         std::to_string(n) + " values");
              }
              std::memcpy(params.data() + begin, e.data.view().data() + sizeof(header),
                          n * sizeof(double));
            },
            [&](caf::error& e) {
              throw std::runtime_error("worker " + std::to_string(cx.self) +
                                       ": no reply from shard " + std::to_string(s) + ": " +
                                       va::describe(e));
            });
  }
}

void worker_body(caf::blocking_actor* self, worker_context cx) {
  try {
    const va::rank_actor rank = cx.node->rank_actor();
    std::vector<double> params(cx.lay.dims, 0.0);
    std::vector<double> grad;
    std::size_t stale = 0;
    for (std::uint64_t t = 0; t < cx.lay.steps; ++t) {
      pull_all(self, rank, cx, op::pull, t, params);
      // Our own pushes went before this pull on the same (source, tag): they are in it.
      for (std::size_t i = 0; i < cx.lay.dims; ++i) {
        if (params[i] < layout::own(cx.self, t, i)) ++stale;
      }
      if (cx.drop_connection && t == cx.lay.steps / 2 && cx.self != 0) {
        std::printf("worker %u: cutting the connection to shard 0 at step %llu\n", cx.self,
                    static_cast<unsigned long long>(t));
        cx.node->drop_connection(0);
      }
      for (std::uint32_t s = 0; s < cx.lay.servers; ++s) {
        grad.resize(cx.lay.end(s) - cx.lay.begin(s));
        for (std::size_t i = 0; i < grad.size(); ++i) {
          grad[i] = layout::gradient(cx.self, t, cx.lay.begin(s) + i);
        }
        send_or_fail(
            self, rank, s,
            build_message(self, *cx.node, header{op::push, cx.self, t}, grad.data(), grad.size()),
            cx);
      }
    }
    pull_all(self, rank, cx, op::final_pull, cx.lay.steps, params);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < cx.lay.dims; ++i) {
      if (params[i] != cx.lay.expected(i)) ++wrong;
    }
    if (wrong > 0 || stale > 0) ++*cx.failures;
    std::printf(
        "worker %u: %llu steps, pulls saw own pushes: %s; final parameters (%zu values) %s\n",
        cx.self, static_cast<unsigned long long>(cx.lay.steps),
        stale == 0 ? "yes" : ("NO (" + std::to_string(stale) + ")").c_str(), cx.lay.dims,
        wrong == 0 ? "match" : ("WRONG: " + std::to_string(wrong) + " differ").c_str());
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker %u: %s\n", cx.self, e.what());
    ++*cx.failures;
  }
}

bool parse_options(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--dims" || a == "--steps" || a == "--servers") {
      const char* v = next();
      if (v == nullptr) return false;
      const unsigned long long n = std::strtoull(v, nullptr, 10);
      if (n == 0) return false;
      if (a == "--dims") o.dims = n;
      if (a == "--steps") o.steps = n;
      if (a == "--servers") o.servers = static_cast<std::uint32_t>(n);
    } else if (a == "--drop-connection") {
      o.drop_connection = true;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  if (!parse_options(argc, argv, opt)) {
    std::fprintf(stderr, "usage: %s [--dims N] [--steps N] [--servers N] [--drop-connection]\n",
                 argv[0]);
    return 2;
  }
  auto launched = vessel::launched_node::start();
  if (!launched) {
    std::fprintf(stderr, "parameter_server: %s\n", launched.error().detail.c_str());
    return 1;
  }
  auto& ln = *launched.value();
  vessel::node& node = ln.node();
  const std::uint32_t my_rank = node.rank();
  layout lay;
  lay.world = node.world_size();
  lay.servers = opt.servers != 0 ? std::min(opt.servers, lay.world) : std::max(1u, lay.world / 2);
  lay.dims = std::max<std::size_t>(opt.dims, lay.servers);
  lay.steps = opt.steps;
  const std::size_t shard_bytes = sizeof(header) + (lay.dims / lay.servers + 1) * sizeof(double);
  if (!node.pool().class_for(shard_bytes)) {
    std::fprintf(stderr, "parameter_server: a shard of %zu bytes is larger than a pool block\n",
                 shard_bytes);
    return 2;
  }
  if (node.rank() == 0) {
    std::printf("parameter_server: %u ranks, %u shards, %zu parameters, %llu steps%s\n", lay.world,
                lay.servers, lay.dims, static_cast<unsigned long long>(lay.steps),
                opt.drop_connection ? ", connections cut half way" : "");
    std::fflush(stdout);
  }

  auto failures = std::make_shared<std::atomic<int>>(0);
  {
    caf::scoped_actor self{node.system()};
    std::vector<caf::actor> running;
    if (node.rank() < lay.servers) {
      running.push_back(
          node.system().spawn(shard_actor, lay, node.rank(), node.rank_actor(), &node, failures));
    }
    running.push_back(node.system().spawn(
        worker_body, worker_context{lay, node.rank(), &node, opt.drop_connection, failures}));
    for (auto& a : running) self->monitor(a);
    for (std::size_t done = 0; done < running.size();) {
      self->receive([&](caf::down_msg&) { ++done; });
    }
  }
  // Nobody closes its links while a peer may still wait for its messages.
  if (auto all = ln.barrier("parameter_server/end", 120s); !all) {
    std::fprintf(stderr, "parameter_server: final barrier: %s\n", all.error().detail.c_str());
    ++*failures;
  }
  ln.stop();
  if (*failures != 0) {
    std::fprintf(stderr, "FAILED parameter_server rank %u\n", my_rank);
    return 1;
  }
  std::printf("OK parameter_server rank %u\n", my_rank);
  return 0;
}
