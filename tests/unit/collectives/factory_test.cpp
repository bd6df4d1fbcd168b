// make_algorithm builds a runnable instance for every (operation, name) the selection knows,
// and refuses names it does not.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "collectives/algorithms/factory.hpp"
#include "collectives/errc.hpp"
#include "collectives/selection.hpp"
#include "collectives/sim/network.hpp"

namespace vessel::collectives {
namespace {

TEST(make_algorithm, every_selectable_algorithm_is_built_and_completes_on_five_ranks) {
  const std::uint32_t p = 5;
  for (collective_op op : all_collective_ops) {
    for (std::string_view name : algorithm_names(op)) {
      SCOPED_TRACE(::testing::Message() << to_string(op) << " " << name);
      std::vector<std::unique_ptr<algorithm>> ranks;
      std::vector<algorithm*> pointers;
      std::vector<std::vector<std::byte>> inputs, outputs, scratch;
      std::vector<algorithm_buffers> buffers;
      for (std::uint32_t r = 0; r < p; ++r) {
        auto made = make_algorithm(op, name, {r, p, 2, 6, dtype::float32, reduce_op::sum, 8});
        ASSERT_TRUE(made) << made.error().message();
        ranks.push_back(std::move(made).value());
        pointers.push_back(ranks.back().get());
        // Room for the largest layout: p blocks of 6 floats.
        inputs.emplace_back(p * 6 * 4);
        outputs.emplace_back(p * 6 * 4);
        scratch.emplace_back(ranks.back()->scratch_bytes());
      }
      for (std::uint32_t r = 0; r < p; ++r) buffers.push_back({inputs[r], outputs[r], scratch[r]});
      sim::network_config config;
      config.ranks = p;
      sim::network net(config);
      const auto report = net.run(pointers, buffers);
      EXPECT_TRUE(report.completed()) << report.explain();
    }
  }
}

TEST(make_algorithm, an_unknown_name_is_an_error) {
  const algorithm_params params{0, 4, 0, 8, dtype::int32, reduce_op::sum, 64};
  const auto unknown = make_error_code(errc::unknown_algorithm);
  EXPECT_EQ(make_algorithm(collective_op::broadcast, "ring", params).error(), unknown);
  EXPECT_EQ(make_algorithm(collective_op::alltoall, "", params).error(), unknown);
  EXPECT_EQ(make_algorithm(collective_op::barrier, "auto", params).error(), unknown);
}

}  // namespace
}  // namespace vessel::collectives
