// pipeline: a chain of stage actors across ranks, with backpressure you can watch.
//
// Stage k runs on rank k. Stage 0 produces --items numbered items of --item-bytes bytes and sends
// each to stage 1; every middle stage adds its number to the item's value and forwards it; the last
// stage (slow: --slow-ms per item) checks order and values. No stage has a window of its own:
// each one waits for the rank actor's `sent` reply before its next item, and that reply is
// delayed while the link ahead is full (actor_interfaces.hpp). When the last stage falls behind,
// its unexpected queue passes its bound, its credit stops, the stage before it stops getting
// `sent`, stops receiving, and so on back to stage 0. The last stage reports how many items it
// has consumed every --report items; stage 0 prints `in flight` = sent - consumed, which stays
// under the bound that the queues add up to (checked: the example fails if it is exceeded).
//
//   vessel-run -n 4 build/bin/pipeline [--items N] [--item-bytes N] [--slow-ms N] [--report N]

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "actors/actor_errc.hpp"
#include "actors/actor_interfaces.hpp"
#include "actors/node_launch.hpp"

namespace {

using namespace std::chrono_literals;
namespace va = vessel::actors;

constexpr std::uint64_t tag_item = 200;      // stage k -> stage k + 1
constexpr std::uint64_t tag_progress = 201;  // last stage -> stage 0: items consumed

struct item_header {
  std::uint64_t seq;    // 1, 2, ...
  std::uint64_t value;  // seq, plus the number of every middle stage it went through
};

struct options {
  std::uint64_t items = 2000;
  std::size_t item_bytes = 16 << 10;
  unsigned slow_ms = 1;
  std::uint64_t report = 25;
};

// Small queues, so that the bound is visible with a few hundred items.
constexpr std::size_t queue_bytes = 256 << 10;
constexpr std::size_t queue_messages = 16;

struct stage_context {
  options opt;
  std::uint32_t stage = 0;
  std::uint32_t stages = 0;
  vessel::node* node = nullptr;
  std::uint64_t bound = 0;  // items that may be between stage 0 and the consumer at most
  bool ok = true;
};

// A payload of `bytes` from the node's pool. While the pool is empty (the links hold its blocks
// until the peers ack them) the stage waits for the node's word that a block is back.
va::payload make_payload(caf::blocking_actor* self, vessel::node& node,
                         std::span<const std::byte> bytes) {
  auto p = node.copy_when_pool_has_room(self, bytes, 120s);
  if (!p) throw std::runtime_error("payload: " + p.error().message());
  return std::move(p).value();
}

void send_to(caf::blocking_actor* self, const va::rank_actor& rank, std::uint32_t dst,
             std::uint64_t tag, va::payload p) {
  self->request(rank, caf::infinite, va::send_atom::value, dst, tag, std::move(p))
      .receive([](va::sent_atom) {},
               [&](caf::error& e) {
                 throw std::runtime_error("send to rank " + std::to_string(dst) +
                                          " failed: " + va::describe(e));
               });
}

va::envelope receive_from(caf::blocking_actor* self, const va::rank_actor& rank, std::uint32_t src,
                          std::uint64_t tag, caf::timespan timeout) {
  va::envelope out;
  self->request(rank, caf::infinite, va::recv_atom::value, src, tag, timeout)
      .receive([&](va::envelope& e) { out = std::move(e); },
               [&](caf::error& e) { throw std::runtime_error(va::describe(e)); });
  return out;
}

// The newest consumed count waiting from the last stage (no wait), or `known`.
std::uint64_t poll_progress(caf::blocking_actor* self, const va::rank_actor& rank,
                            std::uint32_t last, std::uint64_t known) {
  for (;;) {
    bool got = false;
    self->request(rank, caf::infinite, va::recv_atom::value, last, tag_progress,
                  caf::timespan::zero())
        .receive(
            [&](va::envelope& e) {
              std::uint64_t n = 0;
              std::memcpy(&n, e.data.view().data(), std::min(sizeof n, e.data.size()));
              known = std::max(known, n);
              got = true;
            },
            [](caf::error&) {});  // receive_timeout: nothing waiting
    if (!got) return known;
  }
}

void source_stage(caf::blocking_actor* self, stage_context& cx) {
  const va::rank_actor rank = cx.node->rank_actor();
  std::vector<std::byte> bytes(std::max(cx.opt.item_bytes, sizeof(item_header)));
  std::uint64_t consumed = 0;
  std::uint64_t max_in_flight = 0;
  const std::uint32_t last = cx.stages - 1;
  for (std::uint64_t seq = 1; seq <= cx.opt.items; ++seq) {
    const item_header h{seq, seq};
    std::memcpy(bytes.data(), &h, sizeof h);
    send_to(self, rank, 1, tag_item, make_payload(self, *cx.node, bytes));
    consumed = poll_progress(self, rank, last, consumed);
    max_in_flight = std::max(max_in_flight, seq - consumed);
    if (seq % (cx.opt.report * 8) == 0) {
      std::printf("stage 0: sent %llu, consumed %llu, in flight %llu\n",
                  static_cast<unsigned long long>(seq), static_cast<unsigned long long>(consumed),
                  static_cast<unsigned long long>(seq - consumed));
      std::fflush(stdout);
    }
  }
  while (consumed < cx.opt.items) {
    auto e = receive_from(self, rank, last, tag_progress, caf::timespan{120s});
    std::uint64_t n = 0;
    std::memcpy(&n, e.data.view().data(), std::min(sizeof n, e.data.size()));
    consumed = std::max(consumed, n);
  }
  va::rank_stats stats;
  self->request(rank, caf::infinite, va::stats_atom::value)
      .receive([&](va::rank_stats& s) { stats = s; }, [](caf::error&) {});
  const bool bounded = max_in_flight <= cx.bound;
  cx.ok = cx.ok && bounded;
  std::printf(
      "stage 0: %llu items sent; max in flight %llu (bound %llu: %s); sends whose reply waited "
      "for room: %llu\n",
      static_cast<unsigned long long>(cx.opt.items), static_cast<unsigned long long>(max_in_flight),
      static_cast<unsigned long long>(cx.bound), bounded ? "kept" : "EXCEEDED",
      static_cast<unsigned long long>(stats.sends_delayed));
  std::fflush(stdout);
}

void middle_stage(caf::blocking_actor* self, stage_context& cx) {
  const va::rank_actor rank = cx.node->rank_actor();
  std::vector<std::byte> bytes;
  for (std::uint64_t n = 0; n < cx.opt.items; ++n) {
    auto e = receive_from(self, rank, cx.stage - 1, tag_item, caf::timespan{120s});
    item_header h{};
    std::memcpy(&h, e.data.view().data(), sizeof h);
    h.value += cx.stage;
    bytes.resize(e.data.size());
    std::memcpy(bytes.data(), e.data.view().data(), bytes.size());
    std::memcpy(bytes.data(), &h, sizeof h);
    send_to(self, rank, cx.stage + 1, tag_item, make_payload(self, *cx.node, bytes));
  }
  std::printf("stage %u: forwarded %llu items\n", cx.stage,
              static_cast<unsigned long long>(cx.opt.items));
}

void sink_stage(caf::blocking_actor* self, stage_context& cx) {
  const va::rank_actor rank = cx.node->rank_actor();
  const std::uint64_t added = std::uint64_t{cx.stages - 2} * (cx.stages - 1) / 2;  // 1 + .. + n-2
  std::uint64_t wrong = 0;
  for (std::uint64_t n = 1; n <= cx.opt.items; ++n) {
    auto e = receive_from(self, rank, cx.stage - 1, tag_item, caf::timespan{120s});
    item_header h{};
    std::memcpy(&h, e.data.view().data(), sizeof h);
    if (h.seq != n || h.value != n + added || e.data.size() != cx.opt.item_bytes) ++wrong;
    if (cx.opt.slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds{cx.opt.slow_ms});
    if (n % cx.opt.report == 0 || n == cx.opt.items) {
      std::byte b[sizeof n];
      std::memcpy(b, &n, sizeof n);
      send_to(self, rank, 0, tag_progress, make_payload(self, *cx.node, b));
    }
  }
  cx.ok = cx.ok && wrong == 0;
  std::printf("stage %u: consumed %llu items in order, values %s\n", cx.stage,
              static_cast<unsigned long long>(cx.opt.items),
              wrong == 0 ? "correct" : ("WRONG: " + std::to_string(wrong)).c_str());
}

void stage_body(caf::blocking_actor* self, stage_context* cx) {
  try {
    if (cx->stage == 0) {
      source_stage(self, *cx);
    } else if (cx->stage + 1 == cx->stages) {
      sink_stage(self, *cx);
    } else {
      middle_stage(self, *cx);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stage %u: %s\n", cx->stage, e.what());
    cx->ok = false;
  }
  std::fflush(stdout);
}

bool parse_options(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (i + 1 >= argc) return false;
    const unsigned long long n = std::strtoull(argv[++i], nullptr, 10);
    if (a == "--items" && n > 0) {
      o.items = n;
    } else if (a == "--item-bytes" && n >= sizeof(item_header) && n <= (64u << 10)) {
      o.item_bytes = n;
    } else if (a == "--slow-ms") {
      o.slow_ms = static_cast<unsigned>(n);
    } else if (a == "--report" && n > 0) {
      o.report = n;
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
    std::fprintf(stderr,
                 "usage: %s [--items N] [--item-bytes 16..65536] [--slow-ms N] [--report N]\n",
                 argv[0]);
    return 2;
  }
  auto launch = vessel::node_launch_options::defaults();
  launch.node.matching.max_unexpected_bytes = queue_bytes;
  launch.node.matching.max_unexpected_messages = queue_messages;
  launch.node.outbox.max_queued_bytes = queue_bytes;
  launch.node.outbox.max_queued_messages = queue_messages;
  launch.mesh.window_bytes = queue_bytes;
  launch.mesh.sender.max_queued_frames = queue_messages;  // the link's own queue past its window
  launch.mesh.sender.max_buffered_bytes = queue_bytes;    // and its bytes, window included
  launch.mesh.max_queued_messages = queue_messages;       // the mesh's queue of whole messages
  auto launched = vessel::launched_node::start(va::env_view::process(), launch);
  if (!launched) {
    std::fprintf(stderr, "pipeline: %s\n", launched.error().detail.c_str());
    return 1;
  }
  auto& ln = *launched.value();
  vessel::node& node = ln.node();
  const std::uint32_t my_rank = node.rank();
  if (node.world_size() < 2) {
    std::fprintf(stderr, "pipeline: needs at least 2 ranks (one stage per rank)\n");
    return 2;
  }
  stage_context cx;
  cx.opt = opt;
  cx.stage = my_rank;
  cx.stages = node.world_size();
  cx.node = &node;
  // Per hop: the receiver's unexpected queue up to its bound and one link window of credit past
  // it; on the sender, the link's frames (sent or waiting, max_buffered_bytes), the mesh's queue
  // of whole messages, and the outbox; one item in each of the two stages' hands. Plus the report
  // interval (consumed is counted in steps of --report).
  const std::uint64_t per_item = std::max<std::size_t>(opt.item_bytes, 1);
  const std::uint64_t queue_items =
      std::min<std::uint64_t>(queue_messages, (queue_bytes + per_item - 1) / per_item + 1);
  const std::uint64_t window_items = queue_bytes / per_item + 2;
  const std::uint64_t link_items = (queue_bytes + per_item - 1) / per_item + 1;
  cx.bound = (cx.stages - 1) * (2 * queue_items + window_items + link_items + queue_messages + 2) +
             opt.report;
  if (my_rank == 0) {
    std::printf("pipeline: %u stages, %llu items of %zu bytes, last stage %u ms per item\n",
                cx.stages, static_cast<unsigned long long>(opt.items), opt.item_bytes, opt.slow_ms);
    std::fflush(stdout);
  }
  {
    caf::scoped_actor self{node.system()};
    auto stage = node.system().spawn(stage_body, &cx);
    self->monitor(stage);
    self->receive([](caf::down_msg&) {});
  }
  bool ok = cx.ok;
  if (auto all = ln.barrier("pipeline/end", 120s); !all) {
    std::fprintf(stderr, "pipeline: final barrier: %s\n", all.error().detail.c_str());
    ok = false;
  }
  ln.stop();
  if (!ok) {
    std::fprintf(stderr, "FAILED pipeline rank %u\n", my_rank);
    return 1;
  }
  std::printf("OK pipeline rank %u\n", my_rank);
  return 0;
}
