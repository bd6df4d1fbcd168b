// A caller that only sends, between two ranks in one process over shared memory. With
// caller-driven progress the reactor thread stays parked while callers keep borrowing the loop,
// so such a caller must take in what comes back by itself: the acks that free its send blocks.
// Rank 0's reactor lingers a second before it takes its loop back (a millisecond by default):
// only the sender's own progress makes them pass well within the bound below.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "actors/comm.hpp"
#include "actors/runtime.hpp"
#include "tests/integration/rank_launcher.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t message_bytes = 60000;  // one copied chunk: a 64 KiB block each
constexpr auto parked = std::chrono::seconds{1};

std::vector<std::byte> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + seed * 7) & 0xff);
  return v;
}

/// Two ranks over shm; rank 0 with `sender` options, rank 1 with the defaults. Each runs its
/// function on a thread of its own; both must return within 20 s (a sender that waits for its
/// reactor thread to take acks in needs a second per dry pool, 16 times here).
void run_pair(const runtime_options& sender, const std::function<void(comm&)>& rank0,
              const std::function<void(comm&)>& rank1) {
  const std::string store = "127.0.0.1:" + std::to_string(test::free_loopback_port());
  auto start = [&](std::uint32_t rank, runtime_options o, const std::function<void(comm&)>& fn) {
    comm c = comm::init(env_view::from_map({{"VESSEL_RANK", std::to_string(rank)},
                                            {"VESSEL_WORLD_SIZE", "2"},
                                            {"VESSEL_STORE", store},
                                            {"VESSEL_TOKEN", "vessel-send-progress-test-token-0123"},
                                            {"VESSEL_TRANSPORT", "shm"}}),
                        std::move(o));
    fn(c);
    c.finalize();
  };
  auto a = std::async(std::launch::async, start, 0u, sender, std::cref(rank0));
  auto b = std::async(std::launch::async, start, 1u, runtime_options::defaults(), std::cref(rank1));
  for (auto* f : {&a, &b}) {
    if (f->wait_for(20s) != std::future_status::ready) {
      // A rank is stuck waiting for something nobody will do: fail now, not at ctest's timeout.
      std::fprintf(stderr, "a rank is stuck: the sender never took in the acks\n");
      std::abort();
    }
  }
  a.get();  // rethrows what a rank threw
  b.get();
}

runtime_options parked_sender() {
  runtime_options o = runtime_options::defaults();
  o.reactor.lend_linger = parked;
  return o;
}

TEST(send_progress, a_sender_whose_pool_runs_dry_takes_in_the_acks_that_refill_it) {
  // Four 64 KiB blocks for 64 messages: each block comes back only with the ack of its message.
  runtime_options o = parked_sender();
  o.send_pool = io::buffer_pool_config{{{4096 + 64, 64}, {65536 + 64, 4}}, false};
  constexpr std::uint32_t count = 64;
  run_pair(
      o,
      [&](comm& c) {
        for (std::uint32_t i = 0; i < count; ++i) c.send(pattern(message_bytes, i), 1, 1);
      },
      [&](comm& c) {
        std::vector<std::byte> got(message_bytes);
        for (std::uint32_t i = 0; i < count; ++i) {
          ASSERT_EQ(c.recv(got, 0, 1, 30s).bytes, message_bytes);
          ASSERT_EQ(got, pattern(message_bytes, i)) << "message " << i;
        }
      });
}

TEST(send_progress, a_caller_that_only_sends_takes_in_acks_as_it_goes) {
  // 30 messages of 60000 bytes (within the link's window and the shm area: none waits), then
  // small ones only. The link holds each big payload until rank 1 acks it; rank 1 acks at the
  // latest every 32 frames it receives, and rank 0's sends take acks in every 8 of them (nobody
  // else runs rank 0's loop): a few dozen small sends release the blocks.
  constexpr std::uint32_t count = 30;
  constexpr std::uint32_t max_small = 5000;
  std::atomic<bool> all_received{false};
  std::atomic<std::uint32_t> small_sent{0};
  std::atomic<bool> done_sending{false};
  std::uint64_t held_at_end = 0;
  run_pair(
      parked_sender(),
      [&](comm& c) {
        for (std::uint32_t i = 0; i < count; ++i) c.send(pattern(message_bytes, i), 1, 1);
        while (!all_received.load()) std::this_thread::sleep_for(1ms);
        const std::byte one[8] = {};
        while (small_sent.load() < max_small) {
          c.send(one, 1, 2);
          small_sent.fetch_add(1);
          held_at_end = c.runtime().link_stats(1).buffered_bytes;
          if (held_at_end < message_bytes) break;
        }
        done_sending.store(true);
      },
      [&](comm& c) {
        std::vector<std::byte> got(message_bytes);
        for (std::uint32_t i = 0; i < count; ++i) {
          ASSERT_EQ(c.recv(got, 0, 1, 30s).bytes, message_bytes);
          ASSERT_EQ(got, pattern(message_bytes, i)) << "message " << i;
        }
        all_received.store(true);
        std::byte small[8];
        for (std::uint32_t taken = 0;;) {
          const bool last = done_sending.load();  // set after the final count: read it first
          if (taken < small_sent.load()) {
            c.recv(small, 0, 2, 30s);
            ++taken;
          } else if (last) {
            break;
          } else {
            std::this_thread::yield();
          }
        }
      });
  EXPECT_LT(held_at_end, message_bytes)
      << "the big payloads' blocks were still held after " << small_sent.load() << " small sends";
}

}  // namespace
}  // namespace vessel::actors
