#include "wire/reassembler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "wire/fragmenter.hpp"

namespace vessel::wire {
namespace {

std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

// A message as a sender would cut it: the source bytes and its fragment layout.
struct message {
  std::vector<std::byte> bytes;
  fragmenter layout;

  message(std::size_t total, std::uint64_t fragment_size, std::uint64_t seed)
      : bytes(random_bytes(total, seed)), layout(fragmenter::make(total, fragment_size).value()) {}

  std::span<const std::byte> payload(const fragment& f) const {
    return std::span<const std::byte>{bytes}.subspan(f.offset, f.length);
  }
  std::vector<std::uint32_t> indices() const {
    std::vector<std::uint32_t> v(layout.count());
    std::iota(v.begin(), v.end(), 0u);
    return v;
  }
};

result<fragment_status> deliver(reassembler& r, const message& m, std::uint32_t index) {
  const fragment f = m.layout[index];
  return r.accept(f.index, f.count, f.offset, m.layout.total_len(), m.payload(f));
}

void deliver_all(reassembler& r, const message& m, const std::vector<std::uint32_t>& order) {
  for (const std::uint32_t i : order) {
    const auto status = deliver(r, m, i);
    ASSERT_TRUE(status) << "fragment " << i << ": " << status.error().message();
    ASSERT_EQ(status.value(), fragment_status::accepted) << "fragment " << i;
  }
}

// A destination larger than the message, with guard bytes that must survive.
struct destination {
  static constexpr std::byte guard{0xA5};
  std::vector<std::byte> storage;
  std::size_t total;
  explicit destination(std::size_t n) : storage(n + 16, guard), total(n) {}
  std::span<std::byte> span() { return {storage.data(), storage.size()}; }
  std::span<const std::byte> written() const { return {storage.data(), total}; }
  bool guard_intact() const {
    return std::all_of(storage.begin() + static_cast<std::ptrdiff_t>(total), storage.end(),
                       [](std::byte b) { return b == guard; });
  }
};

void expect_reassembled(const reassembler& r, const message& m, const destination& d) {
  EXPECT_TRUE(r.complete());
  EXPECT_TRUE(r.missing().empty());
  EXPECT_TRUE(std::equal(m.bytes.begin(), m.bytes.end(), d.written().begin(), d.written().end()));
  EXPECT_TRUE(d.guard_intact());
}

TEST(reassembler, reassembles_fragments_delivered_in_order) {
  const message m{10'000, 1'000, 1};
  destination d{10'000};
  reassembler r;
  ASSERT_TRUE(r.begin(7, 10'000, m.layout.count(), d.span()));
  EXPECT_EQ(r.message_id(), 7u);
  EXPECT_EQ(r.data().size(), 10'000u);
  deliver_all(r, m, m.indices());
  expect_reassembled(r, m, d);
  EXPECT_EQ(r.counters().fragments, 10u);
  EXPECT_EQ(r.counters().bytes, 10'000u);
  EXPECT_EQ(r.counters().completed, 1u);
}

TEST(reassembler, reassembles_fragments_delivered_in_reverse) {
  const message m{10'001, 1'000, 2};
  destination d{10'001};
  reassembler r;
  ASSERT_TRUE(r.begin(1, 10'001, m.layout.count(), d.span()));
  auto order = m.indices();
  std::reverse(order.begin(), order.end());
  deliver_all(r, m, order);
  expect_reassembled(r, m, d);
}

TEST(reassembler, reassembles_fragments_delivered_in_random_order) {
  const message m{100'000, 1'024, 3};
  destination d{100'000};
  reassembler r;
  ASSERT_TRUE(r.begin(1, 100'000, m.layout.count(), d.span()));
  auto order = m.indices();
  std::shuffle(order.begin(), order.end(), std::mt19937{2026});
  for (std::size_t i = 0; i < order.size(); ++i) {
    EXPECT_FALSE(r.complete());
    ASSERT_TRUE(deliver(r, m, order[i]));
    EXPECT_EQ(r.received_fragments(), i + 1);
  }
  expect_reassembled(r, m, d);
}

TEST(reassembler, splits_a_two_part_destination_at_the_head_even_inside_a_fragment) {
  // 16-byte head (comm's chunk header), the rest into the app's buffer; fragment 0 straddles.
  const message m{10'000, 1'000, 11};
  destination head{16};
  destination body{10'000 - 16};
  reassembler r;
  ASSERT_TRUE(r.begin(3, 10'000, m.layout.count(), head.span().first(16), body.span()));
  EXPECT_EQ(r.data().size(), 10'000u - 16);
  auto order = m.indices();
  std::shuffle(order.begin(), order.end(), std::mt19937{7});
  deliver_all(r, m, order);
  EXPECT_TRUE(r.complete());
  EXPECT_TRUE(std::equal(m.bytes.begin(), m.bytes.begin() + 16, head.written().begin()));
  EXPECT_TRUE(std::equal(m.bytes.begin() + 16, m.bytes.end(), body.written().begin(),
                         body.written().end()));
  EXPECT_TRUE(head.guard_intact());
  EXPECT_TRUE(body.guard_intact());
}

TEST(reassembler, a_message_shorter_than_the_head_fills_only_the_head) {
  const message m{10, 10, 12};
  destination head{10};
  reassembler r;
  std::array<std::byte, 16> scratch{};
  ASSERT_TRUE(r.begin(1, 10, 1, scratch, head.span().first(0)));
  deliver_all(r, m, {0});
  EXPECT_TRUE(std::equal(m.bytes.begin(), m.bytes.end(), scratch.begin()));
}

TEST(reassembler, refuses_a_two_part_destination_too_small_for_the_message) {
  std::array<std::byte, 16> head{};
  std::vector<std::byte> body(100);
  reassembler r;
  const auto begun = r.begin(1, 117, 1, head, body);
  ASSERT_FALSE(begun);
  EXPECT_EQ(begun.error(), make_error_code(errc::buffer_too_small));
  EXPECT_FALSE(r.active());
}

TEST(reassembler, destination_of_is_where_accept_would_copy_and_accept_then_copies_nothing) {
  const message m{10'000, 1'000, 13};
  destination head{16};
  destination body{10'000 - 16};
  reassembler r;
  ASSERT_TRUE(r.begin(4, 10'000, m.layout.count(), head.span().first(16), body.span()));
  // Fragment 0 straddles head and body: not receivable in place, accepted by copy.
  EXPECT_TRUE(r.destination_of(0, 10, 0, 10'000, 1'000).empty());
  deliver_all(r, m, {0});
  for (std::uint32_t i = 1; i < 10; ++i) {
    const fragment f = m.layout[i];
    const std::span<std::byte> dst = r.destination_of(i, f.count, f.offset, 10'000, f.length);
    ASSERT_EQ(dst.size(), f.length) << i;
    EXPECT_EQ(dst.data(), body.span().data() + f.offset - 16) << i;
    std::copy_n(m.payload(f).begin(), f.length, dst.begin());  // what the transport does
    const auto status = r.accept(i, f.count, f.offset, 10'000, dst);
    ASSERT_TRUE(status) << i;
    EXPECT_EQ(status.value(), fragment_status::accepted);
    EXPECT_TRUE(r.destination_of(i, f.count, f.offset, 10'000, f.length).empty())
        << "received already: " << i;
  }
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.counters().in_place, 9u);
  EXPECT_TRUE(std::equal(m.bytes.begin() + 16, m.bytes.end(), body.written().begin(),
                         body.written().end()));
  EXPECT_TRUE(body.guard_intact());
}

TEST(reassembler, placement_of_splits_a_straddling_fragment_and_accept_placed_copies_nothing) {
  const message m{10'000, 1'000, 16};
  destination head{16};
  destination body{10'000 - 16};
  reassembler r;
  ASSERT_TRUE(r.begin(5, 10'000, m.layout.count(), head.span().first(16), body.span()));
  for (std::uint32_t i = 0; i < 10; ++i) {
    const fragment f = m.layout[i];
    const fragment_place place = r.placement_of(i, f.count, f.offset, 10'000, f.length);
    ASSERT_EQ(place.size(), f.length) << i;
    if (i == 0) {  // the 16 head bytes, then the body's first 984
      EXPECT_EQ(place.head.data(), head.span().data());
      EXPECT_EQ(place.head.size(), 16u);
      EXPECT_EQ(place.body.data(), body.span().data());
      EXPECT_EQ(place.body.size(), 1'000u - 16);
    } else {
      EXPECT_TRUE(place.head.empty()) << i;
      EXPECT_EQ(place.body.data(), body.span().data() + f.offset - 16) << i;
      EXPECT_EQ(r.destination_of(i, f.count, f.offset, 10'000, f.length).data(), place.body.data())
          << "destination_of names the same place where there is one part";
    }
    // What the transport does: the bytes into both parts.
    const auto bytes = m.payload(f);
    std::copy_n(bytes.begin(), place.head.size(), place.head.begin());
    std::copy(bytes.begin() + static_cast<std::ptrdiff_t>(place.head.size()), bytes.end(),
              place.body.begin());
    const auto status = r.accept_placed(i, f.count, f.offset, 10'000, f.length);
    ASSERT_TRUE(status) << i;
    EXPECT_EQ(status.value(), fragment_status::accepted);
    EXPECT_TRUE(r.placement_of(i, f.count, f.offset, 10'000, f.length).empty())
        << "received already: " << i;
  }
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.counters().in_place, 10u);
  EXPECT_EQ(r.counters().bytes, 10'000u);
  EXPECT_TRUE(std::equal(m.bytes.begin(), m.bytes.begin() + 16, head.written().begin()));
  EXPECT_TRUE(std::equal(m.bytes.begin() + 16, m.bytes.end(), body.written().begin(),
                         body.written().end()));
  EXPECT_TRUE(head.guard_intact());
  EXPECT_TRUE(body.guard_intact());
  // A repeat is a duplicate, and a fragment off the layout is refused, placed or not.
  const auto again = r.accept_placed(3, 10, 3'000, 10'000, 1'000);
  ASSERT_TRUE(again);
  EXPECT_EQ(again.value(), fragment_status::duplicate);
  EXPECT_EQ(r.accept_placed(3, 10, 3'001, 10'000, 1'000).error(),
            make_error_code(errc::fragment_mismatch));
}

TEST(reassembler, placement_of_a_fragment_inside_the_head_is_the_head_alone) {
  const message m{100, 10, 17};
  destination head{40};
  destination body{60};
  reassembler r;
  ASSERT_TRUE(r.begin(6, 100, m.layout.count(), head.span().first(40), body.span()));
  const fragment_place inside = r.placement_of(2, 10, 20, 100, 10);
  EXPECT_EQ(inside.head.data(), head.span().data() + 20);
  EXPECT_EQ(inside.head.size(), 10u);
  EXPECT_TRUE(inside.body.empty());
  EXPECT_TRUE(r.placement_of(2, 10, 21, 100, 10).empty()) << "off the layout";
  EXPECT_TRUE(r.placement_of(2, 10, 20, 100, 0).empty()) << "nothing to receive";
}

TEST(reassembler, a_combined_body_places_only_bytes_that_fall_in_the_head) {
  const message m{1'000, 10, 18};
  destination head{16};
  destination body{1'000 - 16};
  std::vector<std::byte> operand(1'000 - 16, std::byte{1});
  reassembler r;
  const body_combiner keep{[](const void*, std::byte* dst, const std::byte*,
                              const std::byte* arriving, std::size_t n) noexcept {
                             std::copy_n(arriving, n, dst);
                           },
                           nullptr, operand.data()};
  ASSERT_TRUE(r.begin(7, 1'000, m.layout.count(), head.span().first(16), body.span(), keep));
  EXPECT_EQ(r.placement_of(0, 100, 0, 1'000, 10).head.size(), 10u) << "all in the head";
  EXPECT_TRUE(r.placement_of(1, 100, 10, 1'000, 10).empty()) << "straddles into the body";
  EXPECT_TRUE(r.placement_of(5, 100, 50, 1'000, 10).empty()) << "in the body";
}

TEST(reassembler, destination_of_refuses_what_accept_would_refuse) {
  const message m{10'000, 1'000, 14};
  destination d{10'000};
  reassembler r;
  EXPECT_TRUE(r.destination_of(1, 10, 1'000, 10'000, 1'000).empty()) << "no message";
  ASSERT_TRUE(r.begin(4, 10'000, 10, d.span()));
  EXPECT_FALSE(r.destination_of(1, 10, 1'000, 10'000, 1'000).empty());
  EXPECT_TRUE(r.destination_of(1, 10, 1'001, 10'000, 1'000).empty()) << "off the layout";
  EXPECT_TRUE(r.destination_of(10, 10, 9'000, 10'000, 1'000).empty()) << "index past count";
  EXPECT_TRUE(r.destination_of(1, 9, 1'000, 10'000, 1'000).empty()) << "other count";
  EXPECT_TRUE(r.destination_of(1, 10, 1'000, 9'999, 1'000).empty()) << "other total";
  EXPECT_TRUE(r.destination_of(9, 10, 9'500, 10'000, 1'000).empty()) << "past the end";
  EXPECT_EQ(r.counters().rejected, 0u) << "asking is not receiving";
}

TEST(reassembler, retarget_moves_what_arrived_and_writes_the_rest_to_the_new_destination) {
  const message m{10'000, 1'000, 15};
  destination old_dst{10'000};
  destination head{16};
  destination body{10'000 - 16};
  reassembler r;
  ASSERT_TRUE(r.begin(5, 10'000, m.layout.count(), old_dst.span()));
  deliver_all(r, m, {0, 1, 4, 9});  // runs, and the short last fragment
  std::array<std::byte, 16> tiny{};
  const auto refused = r.retarget(tiny, body.span().first(100));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), make_error_code(errc::buffer_too_small));
  ASSERT_TRUE(r.retarget(head.span().first(16), body.span()));
  std::fill(old_dst.storage.begin(), old_dst.storage.end(), std::byte{0});  // not read again
  deliver_all(r, m, {2, 3, 5, 6, 7, 8});
  EXPECT_TRUE(r.complete());
  EXPECT_TRUE(std::equal(m.bytes.begin(), m.bytes.begin() + 16, head.written().begin()));
  EXPECT_TRUE(std::equal(m.bytes.begin() + 16, m.bytes.end(), body.written().begin(),
                         body.written().end()));
  EXPECT_TRUE(body.guard_intact());
  reassembler idle;
  EXPECT_FALSE(idle.retarget(head.span(), body.span())) << "no message in progress";
}

// A body_combiner that adds byte-wise (mod 256) and counts the runs it was given.
struct adding_combiner {
  std::vector<std::size_t> runs;
  static void apply(const void* ctx, std::byte* dst, const std::byte* operand,
                    const std::byte* arriving, std::size_t n) noexcept {
    auto& self = *static_cast<adding_combiner*>(const_cast<void*>(ctx));
    self.runs.push_back(n);
    for (std::size_t i = 0; i < n; ++i) {
      dst[i] = static_cast<std::byte>(std::to_integer<unsigned>(operand[i]) +
                                      std::to_integer<unsigned>(arriving[i]));
    }
  }
  body_combiner combiner(const std::vector<std::byte>& operand) {
    return {&adding_combiner::apply, this, operand.data()};
  }
};

// A 10'000-byte message in 1'000-byte fragments, begun with a 16-byte head (copied) and a body
// combined with `operand` by an adding_combiner: body = operand + arriving.
struct combined_message {
  message m;
  std::vector<std::byte> operand;
  destination head{16};
  destination body{10'000 - 16};
  adding_combiner add;
  reassembler r;
  combined_message(std::uint64_t seed, std::vector<std::byte> operand_bytes)
      : m{10'000, 1'000, seed}, operand(std::move(operand_bytes)) {}
  result<void> begin(std::uint64_t id) {
    return r.begin(id, 10'000, m.layout.count(), head.span().first(16), body.span(),
                   add.combiner(operand));
  }
};

TEST(reassembler, a_combined_body_is_folded_into_the_destination_fragment_by_fragment) {
  combined_message c{21, random_bytes(10'000 - 16, 22)};
  auto& [m, operand, head, body, add, r] = c;
  ASSERT_TRUE(c.begin(6));
  auto order = m.indices();
  std::shuffle(order.begin(), order.end(), std::mt19937{23});
  deliver_all(r, m, order);
  EXPECT_TRUE(r.complete());
  EXPECT_TRUE(std::equal(m.bytes.begin(), m.bytes.begin() + 16, head.written().begin()));
  for (std::size_t i = 0; i < operand.size(); ++i) {
    const auto want = static_cast<std::byte>(std::to_integer<unsigned>(operand[i]) +
                                             std::to_integer<unsigned>(m.bytes[16 + i]));
    ASSERT_EQ(body.written()[i], want) << "body byte " << i;
  }
  EXPECT_TRUE(head.guard_intact());
  EXPECT_TRUE(body.guard_intact());
  // One run per fragment: fragment 0's less the head, the others whole.
  std::vector<std::size_t> runs = add.runs;
  std::sort(runs.begin(), runs.end());
  std::vector<std::size_t> want(9, 1'000);
  want.insert(want.begin(), 1'000 - 16);
  EXPECT_EQ(runs, want);
  EXPECT_EQ(r.counters().in_place, 0u);
}

TEST(reassembler, a_combined_body_names_no_place_to_receive_into_and_cannot_be_retargeted) {
  combined_message c{24, std::vector<std::byte>(10'000 - 16, std::byte{1})};
  auto& [m, operand, head, body, add, r] = c;
  ASSERT_TRUE(c.begin(7));
  deliver_all(r, m, {0, 3});
  for (std::uint32_t i = 1; i < 10; ++i) {
    const fragment f = m.layout[i];
    EXPECT_TRUE(r.destination_of(i, f.count, f.offset, 10'000, f.length).empty())
        << "fragment " << i << ": its bytes must be computed, not received";
  }
  destination other{10'000};
  const auto moved = r.retarget({}, other.span());
  ASSERT_FALSE(moved);
  EXPECT_EQ(moved.error(), make_error_code(errc::fragment_mismatch));
  deliver_all(r, m, {1, 2, 4, 5, 6, 7, 8, 9});  // the message still completes where it began
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(body.written()[0], static_cast<std::byte>(std::to_integer<unsigned>(m.bytes[16]) + 1));

  // The next message, begun without one, copies again.
  const message plain{2'000, 1'000, 25};
  destination d{2'000};
  ASSERT_TRUE(r.begin(8, 2'000, plain.layout.count(), d.span()));
  EXPECT_FALSE(r.destination_of(1, 2, 1'000, 2'000, 1'000).empty());
  deliver_all(r, plain, {1, 0});
  expect_reassembled(r, plain, d);
  EXPECT_EQ(add.runs.size(), 10u) << "the plain message combined nothing";
}

TEST(reassembler, drops_and_counts_exact_duplicates) {
  const message m{3'000, 1'000, 4};
  destination d{3'000};
  reassembler r;
  ASSERT_TRUE(r.begin(1, 3'000, 3, d.span()));
  deliver_all(r, m, {1});
  const auto again = deliver(r, m, 1);
  ASSERT_TRUE(again);
  EXPECT_EQ(again.value(), fragment_status::duplicate);
  deliver_all(r, m, {0, 2});
  const auto after_completion = deliver(r, m, 2);
  ASSERT_TRUE(after_completion);
  EXPECT_EQ(after_completion.value(), fragment_status::duplicate);
  EXPECT_EQ(r.counters().duplicates, 2u);
  EXPECT_EQ(r.counters().fragments, 3u);
  EXPECT_EQ(r.received_fragments(), 3u);
  expect_reassembled(r, m, d);
}

TEST(reassembler, a_duplicate_does_not_overwrite_the_bytes_already_received) {
  const message m{2'000, 1'000, 5};
  destination d{2'000};
  reassembler r;
  ASSERT_TRUE(r.begin(1, 2'000, 2, d.span()));
  deliver_all(r, m, {0, 1});
  const std::vector<std::byte> other(1'000, std::byte{0x00});
  const auto status = r.accept(0, 2, 0, 2'000, other);
  ASSERT_TRUE(status);
  EXPECT_EQ(status.value(), fragment_status::duplicate);
  expect_reassembled(r, m, d);
}

TEST(reassembler, reports_the_missing_fragments_as_gaps) {
  const message m{20'000, 1'000, 6};
  destination d{20'000};
  reassembler r;
  ASSERT_TRUE(r.begin(1, 20'000, 20, d.span()));
  EXPECT_EQ(r.missing(), (std::vector<fragment_gap>{{0, 20}}));
  deliver_all(r, m, {0, 1, 5, 6, 7, 19});
  EXPECT_EQ(r.missing(), (std::vector<fragment_gap>{{2, 3}, {8, 11}}));
  EXPECT_EQ(r.missing(1), (std::vector<fragment_gap>{{2, 3}}));
  EXPECT_FALSE(r.complete());
  deliver_all(r, m, {2, 3, 4, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17});
  EXPECT_EQ(r.missing(), (std::vector<fragment_gap>{{18, 1}}));
  deliver_all(r, m, {18});
  expect_reassembled(r, m, d);
}

TEST(reassembler, reports_gaps_across_bitmap_words) {
  const std::uint32_t count = 200;
  const message m{count * 10u, 10, 7};
  destination d{count * 10u};
  reassembler r;
  ASSERT_TRUE(r.begin(1, count * 10u, count, d.span()));
  std::vector<std::uint32_t> received;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (i < 60 || (i >= 70 && i < 130) || i == 199) received.push_back(i);
  }
  deliver_all(r, m, received);
  EXPECT_EQ(r.missing(), (std::vector<fragment_gap>{{60, 10}, {130, 69}}));
}

TEST(reassembler, accepts_the_empty_message_as_one_empty_fragment) {
  reassembler r;
  ASSERT_TRUE(r.begin(1, 0, 1, {}));
  EXPECT_FALSE(r.complete());
  const auto status = r.accept(0, 1, 0, 0, {});
  ASSERT_TRUE(status);
  EXPECT_EQ(status.value(), fragment_status::accepted);
  EXPECT_TRUE(r.complete());
  EXPECT_TRUE(r.data().empty());
}

TEST(reassembler, reassembles_a_one_fragment_message) {
  const message m{777, 4'096, 8};
  destination d{777};
  reassembler r;
  ASSERT_TRUE(r.begin(1, 777, 1, d.span()));
  const auto all = std::span<const std::byte>{m.bytes};
  EXPECT_EQ(r.accept(0, 1, 0, 777, all.first(776)).error(), errc::fragment_mismatch);
  EXPECT_EQ(r.accept(0, 1, 1, 777, all.first(776)).error(), errc::fragment_mismatch);
  deliver_all(r, m, {0});
  expect_reassembled(r, m, d);
}

TEST(reassembler, is_reused_across_messages_without_reallocating) {
  reassembler r;
  const message big{64 * 1'000, 1'000, 9};
  destination d_big{big.bytes.size()};
  ASSERT_TRUE(r.begin(1, big.bytes.size(), big.layout.count(), d_big.span()));
  deliver_all(r, big, big.indices());
  expect_reassembled(r, big, d_big);
  EXPECT_EQ(r.counters().bitmap_allocations, 1u);

  for (std::uint64_t id = 2; id < 6; ++id) {
    const message small{5'000 + id, 512, id};
    destination d{small.bytes.size()};
    ASSERT_TRUE(r.begin(id, small.bytes.size(), small.layout.count(), d.span()));
    EXPECT_EQ(r.received_fragments(), 0u);
    EXPECT_FALSE(r.complete());
    auto order = small.indices();
    std::shuffle(order.begin(), order.end(), std::mt19937{static_cast<unsigned>(id)});
    deliver_all(r, small, order);
    expect_reassembled(r, small, d);
  }
  EXPECT_EQ(r.counters().bitmap_allocations, 1u);
  EXPECT_EQ(r.counters().messages, 5u);
  EXPECT_EQ(r.counters().completed, 5u);

  const message bigger{65 * 1'000, 1'000, 10};
  destination d_bigger{bigger.bytes.size()};
  ASSERT_TRUE(r.begin(9, bigger.bytes.size(), bigger.layout.count(), d_bigger.span()));
  EXPECT_EQ(r.counters().bitmap_allocations, 2u);
}

TEST(reassembler, begin_rejects_messages_beyond_the_limits) {
  reassembler r{reassembly_limits{.max_message_bytes = 1'000, .max_fragments = 4}};
  std::vector<std::byte> dst(2'000);
  auto too_large = r.begin(1, 1'001, 2, dst);
  ASSERT_FALSE(too_large);
  EXPECT_EQ(too_large.error(), errc::message_too_large);
  auto too_many = r.begin(1, 1'000, 5, dst);
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.error(), errc::too_many_fragments);
  EXPECT_TRUE(r.begin(1, 1'000, 4, dst));
  EXPECT_EQ(r.counters().rejected, 2u);
}

TEST(reassembler, begin_rejects_impossible_fragment_counts_and_short_buffers) {
  reassembler r;
  std::vector<std::byte> dst(100);
  auto zero = r.begin(1, 100, 0, dst);
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error(), errc::bad_field);
  auto more_fragments_than_bytes = r.begin(1, 3, 4, dst);
  ASSERT_FALSE(more_fragments_than_bytes);
  EXPECT_EQ(more_fragments_than_bytes.error(), errc::bad_field);
  auto empty_in_two = r.begin(1, 0, 2, dst);
  ASSERT_FALSE(empty_in_two);
  EXPECT_EQ(empty_in_two.error(), errc::bad_field);
  auto short_buffer = r.begin(1, 101, 2, dst);
  ASSERT_FALSE(short_buffer);
  EXPECT_EQ(short_buffer.error(), errc::buffer_too_small);
  EXPECT_FALSE(r.active());
}

TEST(reassembler, a_failed_begin_leaves_the_message_in_progress_untouched) {
  const message m{2'000, 1'000, 11};
  destination d{2'000};
  reassembler r{reassembly_limits{.max_message_bytes = 5'000, .max_fragments = 8}};
  ASSERT_TRUE(r.begin(3, 2'000, 2, d.span()));
  deliver_all(r, m, {1});
  std::vector<std::byte> other(10'000);
  ASSERT_FALSE(r.begin(4, 10'000, 2, other));
  EXPECT_EQ(r.message_id(), 3u);
  deliver_all(r, m, {0});
  expect_reassembled(r, m, d);
}

TEST(reassembler, accept_without_a_message_in_progress_is_a_mismatch) {
  reassembler r;
  const std::vector<std::byte> payload(10);
  auto status = r.accept(0, 1, 0, 10, payload);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error(), errc::fragment_mismatch);
}

// Every way a fragment can be wrong; none of them may write a byte.
TEST(reassembler, rejects_every_malformed_fragment_without_writing) {
  const message m{10'000, 1'000, 12};
  destination d{10'000};
  const std::vector<std::byte> before = d.storage;
  reassembler r;
  ASSERT_TRUE(r.begin(1, 10'000, 10, d.span()));
  const std::vector<std::byte> k(1'000, std::byte{0x11});
  const std::span<const std::byte> one_k{k};
  struct bad_case {
    const char* what;
    std::uint32_t index, count;
    std::uint64_t offset, total;
    std::span<const std::byte> payload;
    errc expected;
  };
  const std::vector<bad_case> cases{
      {"index == count", 10, 10, 9'000, 10'000, one_k, errc::fragment_out_of_range},
      {"index > count", 4'000'000'000u, 10, 0, 10'000, one_k, errc::fragment_out_of_range},
      {"bytes past total", 9, 10, 9'500, 10'000, one_k, errc::fragment_out_of_range},
      {"offset past total", 9, 10, 20'000, 10'000, one_k.first(0), errc::fragment_out_of_range},
      {"offset + len overflows", 9, 10, ~std::uint64_t{0} - 10, 10'000, one_k,
       errc::fragment_out_of_range},
      {"count differs from begin", 0, 11, 0, 10'000, one_k, errc::fragment_mismatch},
      {"total differs from begin", 0, 10, 0, 10'001, one_k, errc::fragment_mismatch},
      {"offset not index * size", 3, 10, 3'001, 10'000, one_k, errc::fragment_mismatch},
      {"size that cannot make count fragments", 0, 10, 0, 10'000, one_k.first(500),
       errc::fragment_mismatch},
      {"last fragment not ending at total", 9, 10, 9'000, 10'000, one_k.first(999),
       errc::fragment_mismatch},
      {"last fragment offset not a multiple", 9, 10, 8'999, 10'000, one_k,
       errc::fragment_mismatch},
  };
  for (const auto& c : cases) {
    const auto status = r.accept(c.index, c.count, c.offset, c.total, c.payload);
    ASSERT_FALSE(status) << c.what;
    EXPECT_EQ(status.error(), c.expected) << c.what;
  }
  EXPECT_EQ(r.received_fragments(), 0u);
  EXPECT_EQ(d.storage, before);
  EXPECT_EQ(r.counters().rejected, cases.size());
  // The message is still intact and completes from the genuine fragments.
  deliver_all(r, m, m.indices());
  expect_reassembled(r, m, d);
}

// Once the fragment size is known, a fragment claiming another size or place cannot write over
// bytes that belong to its neighbours, whether or not its index was already received.
TEST(reassembler, rejects_fragments_that_would_overlap_their_neighbours) {
  const message m{4'000, 1'000, 13};
  destination d{4'000};
  reassembler r;
  ASSERT_TRUE(r.begin(1, 4'000, 4, d.span()));
  deliver_all(r, m, {0});
  const std::vector<std::byte> evil(1'500, std::byte{0xEE});
  const std::span<const std::byte> e{evil};
  EXPECT_EQ(r.accept(1, 4, 1'000, 4'000, e).error(), errc::fragment_mismatch);   // too long
  EXPECT_EQ(r.accept(1, 4, 500, 4'000, e.first(1'000)).error(), errc::fragment_mismatch);
  EXPECT_EQ(r.accept(0, 4, 0, 4'000, e.first(1'200)).error(), errc::fragment_mismatch);  // dup
  EXPECT_EQ(r.accept(3, 4, 2'500, 4'000, e).error(), errc::fragment_mismatch);   // last, moved
  deliver_all(r, m, {3, 2, 1});
  expect_reassembled(r, m, d);
}

TEST(reassembler, learns_the_fragment_size_from_the_last_fragment) {
  const message m{10'500, 1'000, 14};
  destination d{10'500};
  reassembler r;
  ASSERT_TRUE(r.begin(1, 10'500, 11, d.span()));
  deliver_all(r, m, {10});
  const std::vector<std::byte> wrong(999);
  EXPECT_EQ(r.accept(0, 11, 0, 10'500, wrong).error(), errc::fragment_mismatch);
  deliver_all(r, m, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  expect_reassembled(r, m, d);
}

// Random messages and fragment sizes, fragments shuffled and some sent twice or three times:
// the destination always ends equal to the source, and the counters add up.
TEST(reassembler, reassembles_shuffled_duplicated_fragments_of_random_messages) {
  std::mt19937_64 rng{20261129};
  reassembler r;
  std::uint64_t expected_duplicates = 0;
  for (std::uint64_t id = 1; id <= 300; ++id) {
    const std::size_t total = rng() % 50'000;
    const std::uint64_t size = 1 + rng() % (id % 3 == 0 ? 64 : 8'192);
    const message m{total, size, id};
    destination d{total};
    ASSERT_TRUE(r.begin(id, total, m.layout.count(), d.span()));
    std::vector<std::uint32_t> order = m.indices();
    for (std::uint32_t i = 0; i < m.layout.count(); ++i) {
      for (std::uint64_t extra = rng() % 4; extra > 1; --extra) order.push_back(i);
    }
    std::shuffle(order.begin(), order.end(), rng);
    std::uint64_t dups = 0;
    for (const std::uint32_t i : order) {
      const auto status = deliver(r, m, i);
      ASSERT_TRUE(status) << "message " << id << " fragment " << i;
      dups += status.value() == fragment_status::duplicate ? 1 : 0;
    }
    ASSERT_EQ(dups, order.size() - m.layout.count());
    expected_duplicates += dups;
    expect_reassembled(r, m, d);
  }
  EXPECT_EQ(r.counters().duplicates, expected_duplicates);
  EXPECT_EQ(r.counters().completed, 300u);
  EXPECT_EQ(r.counters().rejected, 0u);
}

}  // namespace
}  // namespace vessel::wire
