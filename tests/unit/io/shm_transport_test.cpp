// The shared-memory transport within one process: both ends on their own reactor thread, so the
// ring protocol runs truly concurrently (and under TSan, which sees both sides' atomics).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "io/buffer_pool.hpp"
#include "io/errc.hpp"
#include "io/shm_ring.hpp"
#include "io/shm_segment.hpp"
#include "tests/unit/io/reactor_test_support.hpp"
#include "tests/unit/io/shm_test_support.hpp"

namespace vessel::io {
namespace {

using namespace std::chrono_literals;
using shm_test::side;

shm_config small_config() {
  shm_config c;
  c.ring_bytes = 4096;
  c.area_bytes = 16384;
  c.inline_max = 300;
  return c;
}

TEST(shm_ring, positions_wrap_with_skipped_tail_and_full_ring_refuses) {
  alignas(64) std::atomic<std::uint64_t> head{0}, tail{0};
  alignas(64) std::byte data[256] = {};
  shm::ring_producer p{&head, &tail, data, sizeof data};
  shm::ring_consumer c{&head, &tail, data, sizeof data};
  std::uint64_t pos = 0, skipped = 0;

  ASSERT_NE(p.reserve(200, pos, skipped), nullptr);
  EXPECT_EQ(pos, 0u);
  EXPECT_EQ(skipped, 0u);
  EXPECT_EQ(c.readable(), 0u) << "nothing is visible before publish()";
  p.publish();
  EXPECT_EQ(c.refresh(), 200u);
  EXPECT_EQ(p.reserve(100, pos, skipped), nullptr) << "56 free bytes cannot hold 100";
  c.consume_to(200);
  // 56 bytes remain before the end: they are skipped and the record starts at offset 0.
  std::byte* at = p.reserve(100, pos, skipped);
  ASSERT_EQ(at, data);
  EXPECT_EQ(skipped, 56u);
  EXPECT_EQ(pos, 256u);
  p.rollback();
  EXPECT_EQ(p.reserve(40, pos, skipped), data + 200) << "rollback forgot the reservation";
  p.publish();
  EXPECT_EQ(p.in_use(), 40u);
}

TEST(shm_segment, refuses_a_memfd_whose_size_is_not_sealed) {
  shm_fd fd{::memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING)};
  ASSERT_TRUE(fd);
  ASSERT_EQ(::ftruncate(fd.get(), 65536), 0);
  auto seg = shm_segment::adopt(std::move(fd), 4096, 1 << 20);
  ASSERT_FALSE(seg);
  EXPECT_EQ(seg.error(), errc::handshake_failed);
}

TEST(shm_connector, abstract_listener_hands_segments_over_and_leaves_no_file) {
  const auto before = shm_test::dev_shm_entries();
  const std::string name = "test-" + std::to_string(::getpid());
  auto listener = shm_listener::listen(name);
  ASSERT_TRUE(listener) << listener.error().message();
  shm_config config = small_config();
  auto accepted = std::async(std::launch::async, [&] { return listener.value().accept(config); });
  auto connected = shm_connect(name, config);
  auto acc = accepted.get();
  ASSERT_TRUE(connected) << connected.error().message();
  ASSERT_TRUE(acc) << acc.error().message();
  EXPECT_EQ(connected.value().rx_ring_bytes, config.ring_bytes);
  EXPECT_EQ(acc.value().rx_area_bytes, config.area_bytes);
  EXPECT_GE(connected.value().tx.size(), shm::segment_bytes(4096, 16384));
  EXPECT_EQ(shm_test::dev_shm_entries(), before) << "memfd segments must not appear in /dev/shm";
  EXPECT_EQ(::access(("/tmp/" + name).c_str(), F_OK), -1);
}

/// Sends `frames` data frames of sizes 1..1999 (many odd, crossing inline_max both ways: records
/// of every length meet the ring's end, so every wrap case happens), frame i through
/// send(a, i, len, tx), which adds what it sent to tx; then checks that b got them all, in order,
/// intact (each header's CRC over its payload). Returns the sender's pushbacks.
using frame_sender = std::function<result<void>(side& a, std::uint64_t index, std::size_t len,
                                                shm_test::digest& tx)>;
std::uint64_t stream_odd_sizes(std::uint64_t frames, const frame_sender& send) {
  auto [ca, cb] = shm_test::channel_pair(small_config(), small_config());
  side a, b;
  a.open(std::move(ca), small_config());
  b.open(std::move(cb), small_config());

  std::promise<shm_test::digest> received;
  shm_test::digest rx;
  std::uint64_t expected = 0;
  bool order_ok = true;
  b.h.frame = [&](const wire::frame_header& h, std::span<const std::byte> payload) {
    if (h.kind() == wire::frame_kind::heartbeat) {
      received.set_value(rx);
      return;
    }
    order_ok = order_ok && h.seq == expected++ && h.crc32c == wire::crc32c(payload) &&
               h.payload_len == payload.size();
    rx.add(h.seq, payload);
  };

  shm_test::digest tx;
  std::uint64_t next = 0;
  std::function<void()> pump = [&] {
    while (next <= frames) {
      const result<void> sent = next == frames
                                    ? a.t->send_copy(shm_test::end_header(next), {})
                                    : send(a, next, (next * 7919) % 1999 + 1, tx);
      if (!sent) {
        EXPECT_EQ(sent.error(), errc::send_queue_full);
        return;  // on_writable() calls pump again
      }
      ++next;
    }
  };
  a.h.writable = pump;
  b.start();
  a.start();
  shm_test::run_on(*a.r, pump);

  auto done = received.get_future();
  EXPECT_EQ(done.wait_for(60s), std::future_status::ready);
  if (done.wait_for(0s) != std::future_status::ready) return 0;
  const auto got = done.get();
  // Read on a's thread: the ring's release/acquire pairs sit at different addresses in the two
  // mappings, so they give TSan no happens-before edge from a's thread to this one.
  const auto sent = shm_test::run_on(*a.r, [&] { return tx; });
  EXPECT_TRUE(order_ok);
  EXPECT_EQ(got.frames, frames);
  EXPECT_EQ(got.value, sent.value);
  EXPECT_EQ(got.bytes, sent.bytes);
  return shm_test::run_on(*a.r, [&] { return a.t->stats().send_queue_full; });
}

TEST(shm_transport, frames_of_odd_sizes_wrap_the_ring_in_order_and_intact) {
  const auto& pat = shm_test::pattern();
  const std::uint64_t pushbacks = stream_odd_sizes(
      20000, [&](side& a, std::uint64_t i, std::size_t len, shm_test::digest& tx) {
        std::span<const std::byte> payload{pat.data() + (i * 131) % (pat.size() - 2000), len};
        auto sent = a.t->send_copy(shm_test::data_header(i, len, wire::crc32c(payload)), payload);
        if (sent) tx.add(i, payload);
        return sent;
      });
  EXPECT_GT(pushbacks, 0u) << "a 4 KiB ring must have pushed back at least once";
}

// send_parts: a payload from two slices of different blocks, cut anywhere (either part may be
// empty), inline and through the area, wrapping the ring: each frame arrives whole (its CRC is
// over both parts), in order.
TEST(shm_transport, a_payload_sent_in_two_parts_arrives_joined) {
  buffer_pool pool{buffer_pool_config{{{8192, 2}}, true}};
  buffer head_block = pool.try_acquire(8192);
  buffer tail_block = pool.try_acquire(8192);
  const auto& pat = shm_test::pattern();
  std::memcpy(head_block.data(), pat.data(), 8192);
  std::memcpy(tail_block.data(), pat.data() + 8192, 8192);
  std::vector<std::byte> joined;
  stream_odd_sizes(5000, [&](side& a, std::uint64_t i, std::size_t len, shm_test::digest& tx) {
    const std::size_t cut = i % 5 == 0 ? 0 : i % 5 == 1 ? len : (i * 31) % (len + 1);
    auto first = head_block.slice(i % 97, cut);
    auto second = tail_block.slice(i % 89, len - cut);
    joined.assign(first.bytes().begin(), first.bytes().end());
    joined.insert(joined.end(), second.bytes().begin(), second.bytes().end());
    auto sent = a.t->send_parts(shm_test::data_header(i, len, wire::crc32c(joined)),
                                std::move(first), std::move(second));
    if (sent) tx.add(i, joined);
    return sent;
  });
}

TEST(shm_transport, payload_over_half_the_area_is_refused_at_once_and_half_the_area_always_fits) {
  // A wrapping reservation skips the bytes up to the area's end, so a payload over half the area
  // could wait for room forever once the write position is off 0: refuse it up front instead.
  constexpr std::size_t half = 16384 / 2;
  auto [ca, cb] = shm_test::channel_pair(small_config(), small_config());
  side a, b;
  a.open(std::move(ca), small_config());
  b.open(std::move(cb), small_config());
  std::promise<std::uint32_t> big_crc;
  b.h.frame = [&](const wire::frame_header&, std::span<const std::byte> payload) {
    if (payload.size() == half) big_crc.set_value(wire::crc32c(payload));
  };
  b.start();
  a.start();
  const auto& pat = shm_test::pattern();
  const auto send = [&](std::uint64_t seq, std::size_t len) {
    std::span<const std::byte> payload{pat.data(), len};
    return shm_test::run_on(*a.r, [&] {
      return a.t->send_copy(shm_test::data_header(seq, len, wire::crc32c(payload)), payload);
    });
  };

  ASSERT_TRUE(send(0, 1000)) << "moves the area's write position off 0";
  auto too_big = send(1, half + 1);
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error(), std::errc::message_size);

  result<void> sent = errc::send_queue_full;
  for (int tries = 0; tries < 5000 && !sent && sent.error() == errc::send_queue_full; ++tries) {
    sent = send(2, half);  // must wrap; fits as soon as the first payload is released
    if (!sent) std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(sent) << sent.error().message();
  auto delivered = big_crc.get_future();
  ASSERT_EQ(delivered.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(delivered.get(), wire::crc32c(std::span<const std::byte>{pat.data(), half}));
}

TEST(shm_transport, full_ring_refuses_with_send_queue_full_then_on_writable_resumes) {
  auto [ca, cb] = shm_test::channel_pair(small_config(), small_config());
  side a, b;
  a.open(std::move(ca), small_config());
  b.open(std::move(cb), small_config());
  std::atomic<std::uint64_t> delivered{0};
  b.h.frame = [&](const wire::frame_header&, std::span<const std::byte>) { ++delivered; };
  std::promise<void> writable;
  a.h.writable = [&] { writable.set_value(); };
  a.start();  // b is not started: nobody consumes yet

  const std::byte payload[100] = {};
  std::uint64_t accepted = 0;
  std::error_code refused;
  shm_test::run_on(*a.r, [&] {
    for (;;) {
      auto sent = a.t->send_copy(shm_test::data_header(accepted, sizeof payload), payload);
      if (!sent) {
        refused = sent.error();
        return;
      }
      ++accepted;
    }
  });
  EXPECT_EQ(refused, errc::send_queue_full);
  EXPECT_GT(accepted, 10u);
  EXPECT_EQ(shm_test::run_on(*a.r, [&] { return a.t->stats().send_queue_full; }), 1u);
  EXPECT_GT(shm_test::run_on(*a.r, [&] { return a.t->queued_bytes(); }), 3000u);

  b.start();  // consuming frees room; b sees a's "waiting" flag and wakes it
  auto ready = writable.get_future();
  ASSERT_EQ(ready.wait_for(10s), std::future_status::ready) << "on_writable never came";
  auto more = shm_test::run_on(*a.r, [&] {
    return a.t->send_copy(shm_test::data_header(accepted, sizeof payload), payload);
  });
  EXPECT_TRUE(more);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (delivered.load() < accepted + 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(delivered.load(), accepted + 1);
}

TEST(shm_transport, a_borrowers_drain_stops_after_the_frame_that_completed_a_request) {
  // Caller-driven progress: a caller borrows the loop to wait for one request while the peer
  // streams. Its turn must give the loop back right after the frame that completed a request
  // (reactor::note_completion), not after everything the peer sent meanwhile (measured: a
  // broadcast's receiver saw its message 10 ms late, behind 188 others); the rest follows on its
  // next turns, in order.
  auto [ca, cb] = shm_test::channel_pair(small_config(), small_config());
  side a, b;
  b.r = std::make_unique<reactor>(testing::lendable(std::chrono::seconds{60}));
  a.open(std::move(ca), small_config());
  b.open(std::move(cb), small_config());
  std::vector<std::uint64_t> seen;  // the loop's holder only: this thread, which borrows it
  b.h.frame = [&](const wire::frame_header& h, std::span<const std::byte>) {
    seen.push_back(h.seq);
    if (h.seq == 2 || h.seq == 6) b.r->note_completion();
  };
  a.start();
  const std::byte payload[16] = {};
  shm_test::run_on(*a.r, [&] {  // ten frames wait in b's ring before anyone looks
    for (std::uint64_t seq = 0; seq < 10; ++seq) {
      ASSERT_TRUE(a.t->send_copy(shm_test::data_header(seq, sizeof payload), payload));
    }
  });
  ASSERT_TRUE(b.r->borrow());
  b.t->start();  // its first drain runs here, on the borrower's thread
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{0, 1, 2}));
  EXPECT_TRUE(b.r->completion_noted());
  b.r->borrowed_turn();
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6}));
  b.r->borrowed_turn();
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_FALSE(b.r->completion_noted()) << "cleared when a turn begins";
  b.r->give_back(false);
}

TEST(shm_transport, orderly_close_reports_connection_closed_to_the_peer) {
  auto [ca, cb] = shm_test::channel_pair(small_config(), small_config());
  side a, b;
  a.open(std::move(ca), small_config());
  b.open(std::move(cb), small_config());
  std::atomic<int> frames{0};
  b.h.frame = [&](const wire::frame_header&, std::span<const std::byte>) { ++frames; };
  a.start();
  b.start();
  shm_test::run_on(*a.r, [&] {
    ASSERT_TRUE(a.t->send_copy(shm_test::data_header(1, 0), {}));
    a.t->close();
    a.t->close();  // idempotent
    auto late = a.t->send_copy(shm_test::data_header(2, 0), {});
    ASSERT_FALSE(late);
    EXPECT_EQ(late.error(), errc::transport_closed);
  });
  auto local = a.h.wait_closed(5s);
  auto remote = b.h.wait_closed(5s);
  ASSERT_TRUE(local.has_value());
  ASSERT_TRUE(remote.has_value());
  EXPECT_EQ(*local, errc::transport_closed);
  EXPECT_EQ(*remote, errc::connection_closed);
  EXPECT_EQ(frames.load(), 1) << "a frame published before the close is still delivered";
}

// The receiver polls the first word of the record at its next position. Whatever a buggy or
// hostile peer writes there is checked against the ring's geometry before anything is read: the
// link closes with bad_frame and nothing reaches the handler.
TEST(shm_transport, a_record_word_that_lies_about_its_length_closes_the_link_with_bad_frame) {
  struct lie {
    const char* what;
    std::uint32_t word0;  // bits 0..29: record bytes, 30..31: kind (0 = inline, 3 = lent)
  };
  for (const lie& l : {lie{"longer than the ring", 8192}, lie{"not whole cache lines", 72},
                       lie{"a lent record without a header", (3u << 30) | 128}}) {
    SCOPED_TRACE(l.what);
    auto [ca, cb] = shm_test::channel_pair(small_config(), small_config());
    std::memcpy(ca.tx.data() + shm::ring_offset, &l.word0, sizeof l.word0);  // a, by hand
    side b;
    b.open(std::move(cb), small_config());
    std::atomic<int> frames{0};
    b.h.frame = [&](const wire::frame_header&, std::span<const std::byte>) { ++frames; };
    b.start();
    const auto why = b.h.wait_closed(5s);
    ASSERT_TRUE(why.has_value());
    EXPECT_EQ(*why, errc::bad_frame);
    EXPECT_EQ(frames.load(), 0);
  }
}

TEST(shm_transport, idle_receiver_stops_spinning_and_sleeps_on_its_eventfd) {
  auto [ca, cb] = shm_test::channel_pair(small_config(), small_config());
  side a, b;
  a.open(std::move(ca), small_config());
  b.open(std::move(cb), small_config());
  std::atomic<int> frames{0};
  b.h.frame = [&](const wire::frame_header&, std::span<const std::byte>) { ++frames; };
  a.start();
  b.start();
  // Frames far apart (10 ms >> the 40 µs spin): each idle period halves the spin budget, so an
  // idle link ends up sleeping at once instead of burning a core.
  for (int i = 0; i < 8; ++i) {
    shm_test::run_on(*a.r, [&] { ASSERT_TRUE(a.t->send_copy(shm_test::data_header(i, 0), {})); });
    std::this_thread::sleep_for(10ms);
  }
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (frames.load() < 8 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(frames.load(), 8);
  EXPECT_EQ(shm_test::run_on(*b.r, [&] { return b.t->spin_budget(); }).count(), 0);
  const auto counters = shm_test::run_on(*b.r, [&] { return b.t->shm_counters(); });
  EXPECT_GE(counters.sleeps, 7u);
  EXPECT_GE(counters.wakeups_received, 7u) << "sleeping receivers are woken through the eventfd";
}

// Lost wake-up stress: both receivers have no spin budget, so every frame of a ping-pong finds
// its receiver asleep on the eventfd (the flag/eventfd hand-off runs ~2 times per round trip),
// for longer than many watchdog periods. No wake-up may be lost: the watchdog never recovers
// anything and no round trip stalls anywhere near a watchdog period or more.
TEST(shm_transport, pingpong_with_sleeping_receivers_loses_no_wake_up) {
  shm_config config = small_config();
  config.max_spin = std::chrono::nanoseconds{0};
  auto [ca, cb] = shm_test::channel_pair(config, config);
  side a, b;
  a.open(std::move(ca), config);
  b.open(std::move(cb), config);
  constexpr std::uint64_t round_trips = 4000;
  const auto run_for = 1500ms;  // >> the 10 ms watchdog period: it ticks ~150 times
  std::atomic<std::uint64_t> trips{0};
  std::atomic<std::int64_t> worst_ns{0};
  std::promise<void> finished;
  const std::byte payload[64] = {};
  auto sent_at = std::chrono::steady_clock::now();
  const auto started = sent_at;
  b.h.frame = [&](const wire::frame_header& h, std::span<const std::byte> p) {
    ASSERT_TRUE(b.t->send_copy(shm_test::data_header(h.seq, p.size()), p));
  };
  a.h.frame = [&](const wire::frame_header& h, std::span<const std::byte>) {
    const auto now = std::chrono::steady_clock::now();
    const auto rtt = std::chrono::duration_cast<std::chrono::nanoseconds>(now - sent_at).count();
    if (rtt > worst_ns.load()) worst_ns.store(rtt);
    const auto n = trips.fetch_add(1) + 1;
    if (n >= round_trips && now - started >= run_for) {
      finished.set_value();
      return;
    }
    sent_at = now;
    ASSERT_TRUE(a.t->send_copy(shm_test::data_header(h.seq + 1, sizeof payload), payload));
  };
  b.start();
  a.start();
  shm_test::run_on(*a.r, [&] {
    sent_at = std::chrono::steady_clock::now();
    ASSERT_TRUE(a.t->send_copy(shm_test::data_header(0, sizeof payload), payload));
  });
  auto done = finished.get_future();
  ASSERT_EQ(done.wait_for(120s), std::future_status::ready)
      << "ping-pong hung after " << trips.load() << " round trips";
  const auto ca_ = shm_test::run_on(*a.r, [&] { return a.t->shm_counters(); });
  const auto cb_ = shm_test::run_on(*b.r, [&] { return b.t->shm_counters(); });
  EXPECT_EQ(ca_.watchdog_recoveries, 0u);
  EXPECT_EQ(cb_.watchdog_recoveries, 0u);
  EXPECT_GE(ca_.sleeps + cb_.sleeps, trips.load()) << "receivers must have slept, not spun";
  EXPECT_GT(ca_.wakeups_received + cb_.wakeups_received, trips.load());
  // A lost wake-up costs one to two watchdog periods (10-20 ms); a loaded CI core can delay a
  // thread too, hence the margin.
  EXPECT_LT(worst_ns.load(), std::chrono::nanoseconds{200ms}.count())
      << "worst round trip " << worst_ns.load() / 1000 << " us over " << trips.load();
  std::printf("[ info ] %llu round trips, worst %lld us, sleeps %llu/%llu\n",
              static_cast<unsigned long long>(trips.load()),
              static_cast<long long>(worst_ns.load() / 1000),
              static_cast<unsigned long long>(ca_.sleeps),
              static_cast<unsigned long long>(cb_.sleeps));
}

}  // namespace
}  // namespace vessel::io
