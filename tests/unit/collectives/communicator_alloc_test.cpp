// A communicator's small call reuses the state of an earlier one (collective_engine::fresh_state):
// once warm, a call allocates only its algorithm, and a request still held keeps its own state.
// Its own executable because it replaces the global operator new to count calls.

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/comm.hpp"
#include "actors/env.hpp"
#include "collectives/communicator.hpp"
#include "tests/support/counting_new.hpp"

namespace vessel::collectives {
namespace {

// No launcher variables: a world of one, whose calls run start to finish inside start().
struct world_of_one {
  comm world = comm::init(actors::env_view::from_map({}));
  std::unique_ptr<communicator> c;
  world_of_one() {
    auto made = communicator::create(world.runtime());
    EXPECT_TRUE(made) << made.error().message();
    if (made) c = std::move(made).value();
  }
};

std::array<std::byte, 8> two_int32(std::int32_t a, std::int32_t b) {
  std::array<std::byte, 8> out{};
  std::memcpy(out.data(), &a, 4);
  std::memcpy(out.data() + 4, &b, 4);
  return out;
}

TEST(communicator_alloc, a_repeated_small_call_allocates_only_its_algorithm) {
  world_of_one w;
  ASSERT_TRUE(w.c);
  auto in = two_int32(3, 4);
  std::array<std::byte, 8> out{};
  for (int i = 0; i < 3; ++i) {  // warm: the state and its rings exist
    ASSERT_TRUE(w.c->allreduce(in, out, dtype::int32, reduce_op::sum));
  }
  constexpr std::uint64_t calls = 16;
  const std::uint64_t before = test::allocations_on_this_thread();
  for (std::uint64_t i = 0; i < calls; ++i) {
    ASSERT_TRUE(w.c->allreduce(in, out, dtype::int32, reduce_op::sum));
  }
  EXPECT_LE(test::allocations_on_this_thread() - before, calls);  // the algorithm object each
  EXPECT_EQ(std::memcmp(out.data(), in.data(), out.size()), 0);
}

TEST(communicator_alloc, requests_still_held_keep_their_own_outcome_and_output) {
  world_of_one w;
  ASSERT_TRUE(w.c);
  // More held at once than the engine keeps for reuse, good calls between failing ones (a
  // count that is not whole elements of int32): a state handed out twice would mix them up.
  constexpr int held = 9;
  std::vector<std::array<std::byte, 8>> inputs, outputs(held);
  std::vector<collective_request> requests;
  for (int i = 0; i < held; ++i) inputs.push_back(two_int32(i, 100 + i));
  for (int i = 0; i < held; ++i) {
    const bool bad = i % 3 == 1;
    const std::span<const std::byte> in{inputs[i].data(), bad ? std::size_t{7} : std::size_t{8}};
    const std::span<std::byte> out{outputs[i].data(), bad ? std::size_t{7} : std::size_t{8}};
    requests.push_back(w.c->iallreduce(in, out, dtype::int32, reduce_op::sum));
  }
  for (int i = held - 1; i >= 0; --i) {
    const auto r = requests[i].wait();
    if (i % 3 == 1) {
      EXPECT_FALSE(r) << "call " << i;
    } else {
      ASSERT_TRUE(r) << "call " << i << ": " << r.error().message();
      EXPECT_EQ(std::memcmp(outputs[i].data(), inputs[i].data(), 8), 0) << "call " << i;
    }
  }
  // And the states they leave are taken again, still right.
  requests.clear();
  auto in = two_int32(-5, 6);
  std::array<std::byte, 8> out{};
  ASSERT_TRUE(w.c->allreduce(in, out, dtype::int32, reduce_op::max));
  EXPECT_EQ(std::memcmp(out.data(), in.data(), 8), 0);
}

}  // namespace
}  // namespace vessel::collectives
