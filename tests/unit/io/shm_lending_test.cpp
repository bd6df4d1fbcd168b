// Lent payloads over the shared-memory transport (shm_transport.cpp, "Lent records"): the
// receiver reads a large part of a pooled payload from the sender's memory instead of the
// payload area. Both ends live in this process, so the read is of our own pid: the same system
// call and token check as across processes (p2p_launch covers two processes and a receiver
// forbidden to read).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "io/buffer_pool.hpp"
#include "io/cross_memory.hpp"
#include "io/errc.hpp"
#include "io/shm_ring.hpp"
#include "tests/unit/io/reactor_test_support.hpp"
#include "tests/unit/io/shm_test_support.hpp"
#include "wire/frame_codec.hpp"

namespace vessel::io {
namespace {

using namespace std::chrono_literals;
using shm_test::side;

constexpr std::size_t block_bytes = 8192;

shm_config lending_config() {
  shm_config c;
  c.ring_bytes = 8192;
  c.area_bytes = 32768;
  c.inline_max = 300;
  c.lend_min = 1024;
  return c;
}

/// A pool of `blocks` blocks filled with the test pattern.
struct filled_pool {
  explicit filled_pool(std::uint32_t blocks)
      : pool{buffer_pool_config{{{block_bytes, blocks}}, true}} {
    for (std::uint32_t i = 0; i < blocks; ++i) {
      held.push_back(pool.try_acquire(block_bytes));
      std::memcpy(held.back().data(), shm_test::pattern().data() + i * 97, block_bytes);
    }
  }
  /// True once only `held` still refers to each block (the transport let go of every loan).
  bool all_back() const {
    for (const auto& b : held)
      if (b.use_count() != 1) return false;
    return true;
  }
  buffer_pool pool;
  std::vector<buffer> held;
};

bool eventually(const std::function<bool()>& done, std::chrono::milliseconds within = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

/// Both ends of a lending link, opened and not started; the blocks come first, since a
/// transport may hold a loan until it is destroyed. `tamper` edits the channels before.
struct lending_link {
  explicit lending_link(std::uint32_t block_count,
                        const std::function<void(shm_channel&, shm_channel&)>& tamper = {})
      : blocks{block_count} {
    auto [ca, cb] = shm_test::channel_pair(config, config);
    if (tamper) tamper(ca, cb);
    a.open(std::move(ca), config);
    b.open(std::move(cb), config);
  }
  const shm_config config = lending_config();
  filled_pool blocks;
  side a, b;
};

/// Keeps `r`'s thread busy, reading nothing, until the returned promise is set.
std::promise<void> hold_until_released(reactor& r) {
  std::promise<void> release;
  shm_test::run_on(r, [] {});
  r.post(std::function<void()>{[held = release.get_future().share()] { held.wait(); }});
  return release;
}

// Frames of every size from inline to most of a block, from one slice or two, cut anywhere:
// those with a part of lend_min bytes are lent, the others copied, and each arrives whole, in
// order, into the handler's memory (split in two at odd places, as a link's message head and
// body) or, every third frame, where the transport reads it itself. Every block comes back.
TEST(shm_lending, lent_payloads_arrive_whole_and_in_order_and_every_block_comes_back) {
  lending_link link{8};
  side& a = link.a;
  side& b = link.b;
  filled_pool& blocks = link.blocks;

  constexpr std::uint64_t frames = 3000;
  std::vector<std::byte> landing(block_bytes);
  std::uint64_t expected = 0;
  bool order_ok = true;
  std::promise<shm_test::digest> received;
  shm_test::digest rx;
  b.h.destination = [&](const wire::frame_header& h, std::span<const std::byte>) {
    if (h.seq % 3 == 0) return wire::fragment_place{};
    const std::size_t head = std::min<std::size_t>(h.seq % 211, h.payload_len);
    return wire::fragment_place{std::span{landing}.first(head),
                                std::span{landing}.subspan(head, h.payload_len - head)};
  };
  std::vector<std::byte> joined;
  b.h.frame = [&](const wire::frame_header& h, std::span<const std::byte> payload) {
    if (h.kind() == wire::frame_kind::heartbeat) {
      received.set_value(rx);
      return;
    }
    // Placed in two parts, `payload` is the body: the head is in `landing` before it.
    std::span<const std::byte> whole = payload;
    if (payload.size() != h.payload_len) {
      if (payload.data() + payload.size() != landing.data() + h.payload_len) order_ok = false;
      whole = std::span<const std::byte>{landing}.first(h.payload_len);
    }
    order_ok = order_ok && h.seq == expected++ && h.crc32c == wire::crc32c(whole);
    rx.add(h.seq, whole);
  };

  shm_test::digest tx;
  std::uint64_t next = 0;
  std::function<void()> pump = [&] {
    while (next <= frames) {
      if (next == frames) {
        if (!a.t->send_copy(shm_test::end_header(next), {})) return;
        ++next;
        continue;
      }
      const std::size_t len = (next * 7919) % (block_bytes - 200) + 1;
      const buffer& block = blocks.held[next % blocks.held.size()];
      const std::size_t cut = next % 4 == 0 ? 0 : (next * 31) % std::min<std::size_t>(len + 1, 200);
      auto first = block.slice(0, cut);
      auto second = block.slice(cut + next % 50, len - cut);
      joined.assign(first.bytes().begin(), first.bytes().end());
      joined.insert(joined.end(), second.bytes().begin(), second.bytes().end());
      const auto header = shm_test::data_header(next, len, wire::crc32c(joined));
      auto sent = cut == 0 ? a.t->send(header, std::move(second))
                           : a.t->send_parts(header, std::move(first), std::move(second));
      if (!sent) {
        EXPECT_EQ(sent.error(), errc::send_queue_full);
        return;  // on_writable() pumps again
      }
      tx.add(next, joined);
      ++next;
    }
  };
  a.h.writable = pump;
  b.start();
  a.start();
  shm_test::run_on(*a.r, pump);

  auto done = received.get_future();
  ASSERT_EQ(done.wait_for(60s), std::future_status::ready);
  const auto got = done.get();
  const auto sent = shm_test::run_on(*a.r, [&] { return tx; });
  EXPECT_TRUE(order_ok);
  EXPECT_EQ(got.frames, frames);
  EXPECT_EQ(got.value, sent.value);
  const auto lent = shm_test::run_on(*a.r, [&] { return a.t->shm_counters().payloads_lent; });
  const auto pulled = shm_test::run_on(*b.r, [&] { return b.t->shm_counters().payloads_pulled; });
  EXPECT_GT(lent, frames / 2) << "most frames have a part of lend_min bytes or more";
  EXPECT_EQ(pulled, lent);
  EXPECT_TRUE(eventually([&] { return blocks.all_back(); }))
      << "the sender still holds a block its peer has consumed";
  EXPECT_EQ(shm_test::run_on(*a.r, [&] { return a.t->queued_bytes(); }), 0u);
}

// A receiver that cannot read the sender (here: the token it finds is not the one the sender's
// segment names, as in another pid namespace) never says it can, so nothing is lent: every
// payload goes through the area and arrives.
TEST(shm_lending, a_receiver_that_cannot_read_the_sender_is_lent_nothing) {
  lending_link link{1, [](shm_channel&, shm_channel& b) { b.rx_lender.token.words[1] ^= 1; }};
  side& a = link.a;
  side& b = link.b;
  filled_pool& blocks = link.blocks;
  std::promise<std::uint32_t> crc;
  b.h.frame = [&](const wire::frame_header&, std::span<const std::byte> payload) {
    crc.set_value(wire::crc32c(payload));
  };
  b.start();
  a.start();
  const auto payload = blocks.held[0].slice(0, 5000);
  const std::uint32_t want = wire::crc32c(payload.bytes());
  ASSERT_TRUE(shm_test::run_on(
      *a.r, [&] { return a.t->send(shm_test::data_header(0, 5000, want), payload); }));
  auto got = crc.get_future();
  ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(got.get(), want);
  EXPECT_EQ(shm_test::run_on(*a.r, [&] { return a.t->shm_counters().payloads_lent; }), 0u);
}

// A read that fails mid-stream (the lender's token no longer what its segment says: what a
// recycled pid looks like) delivers nothing of that frame and ends the transport with
// bad_frame; the sender, seeing the peer's end go, gives its loans back.
TEST(shm_lending, a_lent_payload_that_cannot_be_read_ends_the_link_and_is_not_delivered) {
  lending_link link{1};
  side& a = link.a;
  side& b = link.b;
  filled_pool& blocks = link.blocks;
  std::atomic<int> delivered{0};
  b.h.frame = [&](const wire::frame_header&, std::span<const std::byte>) { ++delivered; };
  b.start();
  a.start();
  ASSERT_TRUE(eventually([&] {
    return shm_test::run_on(*a.r,
                            [&] {
                              return a.t->send(shm_test::data_header(0, 4000),
                                               blocks.held[0].slice(0, 4000));
                            })
               .has_value() &&
           shm_test::run_on(*a.r, [&] { return a.t->shm_counters().payloads_lent; }) == 1;
  })) << "the first large payload is lent once the receiver has said it can read us";
  ASSERT_TRUE(eventually([&] { return delivered.load() == 1; }));

  // Our own token, which the receiver checks on every read: changed, every read fails.
  auto* token = reinterpret_cast<std::uint64_t*>(this_process_token().token_address);
  token[0] ^= 1;
  ASSERT_TRUE(shm_test::run_on(*a.r, [&] {
    return a.t->send(shm_test::data_header(1, 4000), blocks.held[0].slice(0, 4000));
  }));
  const auto why = b.h.wait_closed(10s);
  token[0] ^= 1;
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why, errc::bad_frame);
  EXPECT_EQ(delivered.load(), 1);
  ASSERT_TRUE(a.h.wait_closed(10s).has_value());
  EXPECT_TRUE(eventually([&] { return blocks.all_back(); }));
}

// Closing with payloads lent and not yet read: the peer, which delivers what was published
// before our end, still reads them whole, and we hold the blocks (and report closed) until it
// has.
TEST(shm_lending, a_sender_closed_with_loans_out_holds_them_until_the_peer_has_read_them) {
  lending_link link{4};
  side& a = link.a;
  side& b = link.b;
  filled_pool& blocks = link.blocks;
  std::vector<std::uint32_t> crcs;
  b.h.frame = [&](const wire::frame_header& h, std::span<const std::byte> payload) {
    EXPECT_EQ(h.crc32c, wire::crc32c(payload));
    crcs.push_back(wire::crc32c(payload));
  };
  b.start();  // says it can read a
  a.start();
  std::promise<void> release_b = hold_until_released(*b.r);

  std::vector<std::uint32_t> sent;
  shm_test::run_on(*a.r, [&] {
    for (std::uint64_t i = 0; i < 4; ++i) {
      auto payload = blocks.held[i].slice(0, 6000);
      sent.push_back(wire::crc32c(payload.bytes()));
      EXPECT_TRUE(a.t->send(shm_test::data_header(i, 6000, sent.back()), std::move(payload)));
    }
    EXPECT_EQ(a.t->shm_counters().payloads_lent, 4u);
    a.t->close();
  });
  EXPECT_FALSE(a.h.wait_closed(50ms).has_value()) << "closed while its peer may still read";
  EXPECT_FALSE(blocks.all_back());

  release_b.set_value();
  const auto b_why = b.h.wait_closed(10s);
  ASSERT_TRUE(b_why.has_value());
  EXPECT_EQ(*b_why, errc::connection_closed);
  EXPECT_EQ(shm_test::run_on(*b.r, [&] { return crcs; }), sent);
  const auto a_why = a.h.wait_closed(10s);
  ASSERT_TRUE(a_why.has_value());
  EXPECT_EQ(*a_why, errc::transport_closed);
  EXPECT_TRUE(eventually([&] { return blocks.all_back(); }));
}

// A sender whose reactor stops with payloads lent and unread (no orderly close) lets go of the
// blocks, which may soon hold other payloads: it says so first, and the peer, which still reads
// what was published before the sender went, drops those records instead of delivering them.
TEST(shm_lending, loans_withdrawn_by_a_stopped_sender_are_dropped_not_delivered) {
  lending_link link{2};
  side& a = link.a;
  side& b = link.b;
  filled_pool& blocks = link.blocks;
  std::atomic<int> delivered{0};
  b.h.frame = [&](const wire::frame_header&, std::span<const std::byte>) { ++delivered; };
  b.start();
  a.start();
  std::promise<void> release_b = hold_until_released(*b.r);
  shm_test::run_on(*a.r, [&] {
    for (std::uint64_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(a.t->send(shm_test::data_header(i, 6000), blocks.held[i].slice(0, 6000)));
    }
    EXPECT_EQ(a.t->shm_counters().payloads_lent, 2u);
  });
  a.shutdown();  // the reactor stops, the transport goes: no orderly close
  EXPECT_TRUE(blocks.all_back());
  release_b.set_value();
  const auto why = b.h.wait_closed(10s);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why, errc::connection_reset);
  EXPECT_EQ(delivered.load(), 0);
}

/// Streams `frames` payloads of 64-256 KiB lent from pooled blocks, each landing in the receiver's
/// memory split at an odd place (as a link's message head and body), and returns the receiver's
/// counters once every frame arrived intact and in order. The sender's loop is driven by this
/// thread (a borrower, as vessel::comm's caller does), which turns it without pause: a sender
/// whose loop sleeps (its spin backs off on a link that carries nothing back, as this one)
/// leaves every back to the receiver, and the split would be tested by chance. `tamper` edits
/// the channels first.
shm_stats stream_large_lent(std::uint64_t frames,
                            const std::function<void(shm_channel&, shm_channel&)>& tamper = {}) {
  constexpr std::size_t big = 256 << 10;
  // Before the sides: a transport may hold a loan until it is destroyed.
  buffer_pool pool{buffer_pool_config{{{big, 4}}, true}};
  std::vector<buffer> blocks;
  for (int i = 0; i < 4; ++i) {
    blocks.push_back(pool.try_acquire(big));
    for (std::size_t at = 0; at < big; at += 4096) {
      std::memcpy(blocks.back().data() + at, shm_test::pattern().data() + (at / 4096 + i) * 13,
                  4096);
    }
  }
  const shm_config config = lending_config();
  auto [ca, cb] = shm_test::channel_pair(config, config);
  if (tamper) tamper(ca, cb);
  side a, b;
  a.r = std::make_unique<reactor>(testing::lendable(std::chrono::seconds{60}));
  a.open(std::move(ca), config);
  b.open(std::move(cb), config);
  std::vector<std::byte> landing(big + 4096);
  std::uint64_t expected = 0;
  bool order_ok = true;
  std::atomic<bool> all_in{false};
  b.h.destination = [&](const wire::frame_header& h, std::span<const std::byte>) {
    const std::size_t head = h.seq % 3 == 0 ? 0 : 16 + h.seq % 100;
    const std::size_t skew = h.seq % 61;  // the body off any page boundary
    return wire::fragment_place{std::span{landing}.first(head),
                                std::span{landing}.subspan(head + skew, h.payload_len - head)};
  };
  b.h.frame = [&](const wire::frame_header& h, std::span<const std::byte> payload) {
    const std::size_t head = h.payload_len - payload.size();
    std::vector<std::byte> whole(landing.begin(), landing.begin() + static_cast<long>(head));
    whole.insert(whole.end(), payload.begin(), payload.end());
    order_ok = order_ok && h.seq == expected++ && h.crc32c == wire::crc32c(whole);
    if (expected == frames) all_in.store(true, std::memory_order_release);
  };
  std::uint64_t next = 0;
  std::function<void()> pump = [&] {
    for (; next < frames; ++next) {
      const std::size_t len = (64 << 10) + (next * 7919 * 13) % (big - (64 << 10) - 100);
      auto payload = blocks[next % 4].slice(next % 100, len);
      const auto header = shm_test::data_header(next, len, wire::crc32c(payload.bytes()));
      auto sent = next % 2 == 0
                      ? a.t->send(header, std::move(payload))
                      : a.t->send_parts(header, payload.owner().slice(0, 0), std::move(payload));
      if (!sent) {
        EXPECT_EQ(sent.error(), errc::send_queue_full);
        return;
      }
    }
  };
  a.h.writable = pump;
  b.start();
  EXPECT_TRUE(a.r->borrow());
  a.t->start();
  pump();
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!all_in.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline) {
    a.r->borrowed_turn();
  }
  const std::uint64_t lent = a.t->shm_counters().payloads_lent;
  a.r->give_back(false);
  EXPECT_TRUE(all_in.load());
  EXPECT_EQ(lent, frames);
  return shm_test::run_on(*b.r, [&] {
    EXPECT_TRUE(order_ok);
    return b.t->shm_counters();
  });
}

// Parts of 64 KiB and up are split: the sender writes the back into the receiver's memory while
// the receiver reads the front, whenever the sender's loop is there to claim it, else the
// receiver reads the back too. Either way every frame arrives whole. Whether the sender gets
// there first is up to the scheduler (two busy threads on a loaded 2-core machine may take turns
// on one core for a whole stream), so streams are repeated until one saw a back written.
TEST(shm_lending, large_lent_payloads_are_copied_by_both_sides_and_arrive_whole) {
  std::uint64_t pushed = 0;
  for (int stream = 0; stream < 20 && pushed == 0 && !HasFailure(); ++stream) {
    const shm_stats got = stream_large_lent(400);
    EXPECT_EQ(got.payloads_pulled, 400u);
    pushed = got.payloads_pushed;
  }
  EXPECT_GT(pushed, 0u) << "in 20 streams a sender turning its loop never wrote a back half";
  std::printf("of 400 lent payloads, the sender wrote the back of %llu\n",
              static_cast<unsigned long long>(pushed));
}

// A sender that cannot write into the receiver (here: the receiver's token, which it checks
// first, is not the one it finds) says so in the record: the receiver reads that back itself,
// and is offered nothing more to write.
TEST(shm_lending, a_sender_that_cannot_write_into_the_receiver_leaves_it_the_whole_read) {
  const shm_stats got =
      stream_large_lent(200, [](shm_channel& a, shm_channel&) { a.rx_lender.token.words[0] ^= 1; });
  EXPECT_EQ(got.payloads_pulled, 200u);
  EXPECT_EQ(got.payloads_pushed, 0u);
}

// Lent records written by hand, as a buggy or hostile peer could: each ends the link with a clear
// error and delivers nothing. A record that says more bytes are lent than the frame holds, and one
// sent to a receiver that never offered to read, are bad frames; one that names memory the lender
// does not have mapped fails the read (bad_address).
TEST(shm_lending, lent_records_that_lie_end_the_link_and_deliver_nothing) {
  struct lie {
    const char* what;
    std::uint64_t address;  // 0: a real buffer of ours
    std::uint64_t lent_len;
    bool offered;
    std::error_code expected;
  };
  constexpr std::uint32_t payload_len = 4096;
  const std::vector<std::byte> source(payload_len, std::byte{0x5a});
  const auto here = reinterpret_cast<std::uintptr_t>(source.data());
  for (const lie& l :
       {lie{"more lent than the frame holds", here, payload_len + 1, true, errc::bad_frame},
        lie{"never offered", here, payload_len - 64, false, errc::bad_frame},
        lie{"an unmapped range", 4096, payload_len - 64, true,
            make_error_code(std::errc::bad_address)}}) {
    SCOPED_TRACE(l.what);
    shm_config config = lending_config();
    if (!l.offered) config.lend_min = 0;
    auto [ca, cb] = shm_test::channel_pair(config, config);
    // The record at the ring's start, as shm_transport writes one (shm_transport.cpp's layout).
    wire::frame_encoder encoder;
    auto encoded = encoder.encode_header(shm_test::data_header(0, payload_len));
    ASSERT_TRUE(encoded);
    const std::span<const std::byte> header = encoded.value().subspan(wire::prefix_bytes);
    const std::size_t header_end = 8 + (header.size() + 7) / 8 * 8;
    const std::size_t lead = payload_len - std::min<std::size_t>(l.lent_len, payload_len);
    const std::size_t record = (header_end + 40 + lead + 63) / 64 * 64;
    std::byte* rec = ca.tx.data() + shm::ring_offset;
    const auto hlen = static_cast<std::uint32_t>(header.size());
    std::memcpy(rec + 4, &hlen, sizeof hlen);
    std::memcpy(rec + 8, header.data(), header.size());
    std::memcpy(rec + header_end, &l.address, 8);
    std::memcpy(rec + header_end + 8, &l.lent_len, 8);
    const auto word0 = static_cast<std::uint32_t>(record) | (3u << 30);
    std::memcpy(rec, &word0, sizeof word0);
    side b;
    b.open(std::move(cb), config);
    std::atomic<int> frames{0};
    b.h.frame = [&](const wire::frame_header&, std::span<const std::byte>) { ++frames; };
    b.start();
    const auto why = b.h.wait_closed(5s);
    ASSERT_TRUE(why.has_value());
    EXPECT_EQ(*why, l.expected) << why->message();
    EXPECT_EQ(frames.load(), 0);
  }
}

}  // namespace
}  // namespace vessel::io
