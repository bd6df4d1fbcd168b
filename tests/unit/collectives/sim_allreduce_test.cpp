// The allreduce family (ring, recursive doubling, Rabenseifner), ring reduce_scatter and the
// ring and recursive-doubling allgathers, each run on the simulated network against a serial
// reference: world sizes 1..17, 64 and 256, counts 0, 1, below the size, not divisible by it,
// and large with many chunks, every dtype x op, in place and not.

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>

#include "collectives/algorithms/rabenseifner_allreduce.hpp"
#include "collectives/algorithms/recursive_doubling_allgather.hpp"
#include "collectives/algorithms/recursive_doubling_allreduce.hpp"
#include "collectives/algorithms/ring_allgather.hpp"
#include "collectives/algorithms/ring_allreduce.hpp"
#include "collectives/algorithms/ring_reduce_scatter.hpp"
#include "sim_harness.hpp"

namespace vessel::collectives {
namespace {

using namespace vessel::collectives::testing;

struct named_algorithm {
  std::string name;
  shape kind;
  factory make;
};

template <class A>
factory make_factory() {
  return [](const algorithm_params& p) { return std::make_unique<A>(p); };
}

std::vector<named_algorithm> all_algorithms() {
  return {
      {"ring_allreduce", shape::allreduce, make_factory<ring_allreduce>()},
      {"recursive_doubling_allreduce", shape::allreduce,
       make_factory<recursive_doubling_allreduce>()},
      {"rabenseifner_allreduce", shape::allreduce, make_factory<rabenseifner_allreduce>()},
      {"ring_reduce_scatter", shape::reduce_scatter, make_factory<ring_reduce_scatter>()},
      {"ring_allgather", shape::allgather, make_factory<ring_allgather>()},
      {"recursive_doubling_allgather", shape::allgather,
       make_factory<recursive_doubling_allgather>()},
  };
}

/// Inputs for the shape: allreduce count elements, reduce_scatter size * count, allgather count.
std::vector<bytes> inputs_for(shape s, const algorithm_params& params) {
  const std::size_t elements =
      s == shape::reduce_scatter ? params.count * params.size : params.count;
  std::vector<bytes> inputs;
  for (std::uint32_t r = 0; r < params.size; ++r) {
    inputs.push_back(exact_input(params.type, params.op, r, params.size, elements));
  }
  return inputs;
}

/// Runs and checks one case; returns the report for further checks.
sim::run_report check_case(const named_algorithm& a, algorithm_params params, bool in_place,
                           run_options options = {}) {
  options.in_place = in_place;
  const auto inputs = inputs_for(a.kind, params);
  const auto run = run_collective(a.make, a.kind, params, inputs, options);
  const std::string what =
      a.name + " p=" + std::to_string(params.size) + " count=" + std::to_string(params.count) +
      " " + std::string(to_string(params.type)) + " " + std::string(to_string(params.op)) +
      (in_place ? " in place" : "") + " chunk=" + std::to_string(params.chunk_bytes);
  EXPECT_TRUE(run.report.completed()) << what << "\n" << run.report.explain();
  const auto expected = expected_outputs(a.kind, params, inputs);
  for (std::uint32_t r = 0; r < params.size; ++r) {
    if (run.outputs[r] != expected[r]) {
      ADD_FAILURE() << what << ": rank " << r << " differs from the serial reference";
      break;
    }
  }
  return run.report;
}

algorithm_params params_of(std::uint32_t size, std::size_t count, dtype t = dtype::int32,
                           reduce_op op = reduce_op::sum, std::size_t chunk_bytes = 64) {
  algorithm_params p;
  p.size = size;
  p.count = count;
  p.type = t;
  p.op = op;
  p.chunk_bytes = chunk_bytes;
  return p;
}

TEST(CollectivesSimAlgorithms, EverySizeOneToSeventeenEveryCountShape) {
  for (const auto& a : all_algorithms()) {
    for (std::uint32_t p = 1; p <= 17; ++p) {
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{p > 1 ? p - 1 : 1},
                                std::size_t{3 * p + 1}, std::size_t{257}}) {
        check_case(a, params_of(p, count), false);
        check_case(a, params_of(p, count, dtype::float32, reduce_op::sum), true);
      }
    }
  }
}

TEST(CollectivesSimAlgorithms, EveryDtypeAndOp) {
  const dtype types[] = {dtype::int8,    dtype::uint8,  dtype::int32,   dtype::uint32,
                         dtype::int64,   dtype::uint64, dtype::float16, dtype::bfloat16,
                         dtype::float32, dtype::float64};
  const reduce_op ops[] = {reduce_op::sum, reduce_op::prod, reduce_op::min, reduce_op::max,
                           reduce_op::avg, reduce_op::band, reduce_op::bor, reduce_op::bxor};
  for (const auto& a : all_algorithms()) {
    for (std::uint32_t p : {5u, 8u}) {
      for (dtype t : types) {
        for (reduce_op op : ops) {
          if (!supports(t, op)) continue;
          if (a.kind == shape::allgather && op != reduce_op::sum) continue;  // no op involved
          check_case(a, params_of(p, 2 * p + 3, t, op, 3 * size_of(t)), p == 8);
        }
      }
    }
  }
}

TEST(CollectivesSimAlgorithms, LargeVectorsInManyChunks) {
  for (const auto& a : all_algorithms()) {
    for (std::uint32_t p : {2u, 6u, 7u}) {
      const auto report =
          check_case(a, params_of(p, 10007, dtype::float32, reduce_op::sum, 512), p == 7);
      EXPECT_GT(report.messages, 10007u * 4 / 512) << a.name;  // really chunked
    }
  }
}

TEST(CollectivesSimAlgorithms, SixtyFourRanks) {
  const std::uint32_t p = 64;
  for (const auto& a : all_algorithms()) {
    for (std::size_t count : {std::size_t{1}, std::size_t{p - 3}, std::size_t{2 * p + 5}}) {
      check_case(a, params_of(p, count, dtype::int64, reduce_op::sum, 256), false);
    }
    check_case(a, params_of(p, 3 * p + 1, dtype::float32, reduce_op::avg, 128), true);
    check_case(a, params_of(p, 700, dtype::uint32, reduce_op::bxor, 1024), false);
  }
}

TEST(CollectivesSimAlgorithms, TwoHundredFiftySixRanks) {
  // A ring allreduce at 256 ranks is 2 p (p - 1) = 130 560 messages: one case per algorithm,
  // every other one in place. reduce_scatter and allgather move size * count per rank: their
  // count stays small.
  const std::uint32_t p = 256;
  bool in_place = false;
  for (const auto& a : all_algorithms()) {
    const bool per_rank_blocks = a.kind != shape::allreduce;
    check_case(a, params_of(p, per_rank_blocks ? 3 : 2 * p + 5, dtype::int64, reduce_op::sum, 256),
               in_place);
    in_place = !in_place;
  }
  // avg over 256 ranks, count not divisible by the size.
  check_case(all_algorithms()[2], params_of(p, p - 3, dtype::float32, reduce_op::avg, 128), true);
}

TEST(CollectivesSimAlgorithms, TwoHundredFiftySixRanksUseTheMessageCountsOfTheTextbook) {
  // Per rank: ring allreduce 2 (p-1) steps, recursive doubling log2 p, Rabenseifner 2 log2 p,
  // one chunk each here.
  const std::uint32_t p = 256;
  const auto all = all_algorithms();
  EXPECT_EQ(check_case(all[0], params_of(p, p, dtype::int32, reduce_op::sum, 1024), false).messages,
            std::uint64_t{p} * 2 * (p - 1));
  EXPECT_EQ(
      check_case(all[1], params_of(p, 16, dtype::int32, reduce_op::sum, 1024), false).messages,
      std::uint64_t{p} * 8);
  EXPECT_EQ(check_case(all[2], params_of(p, p, dtype::int32, reduce_op::sum, 1024), false).messages,
            std::uint64_t{p} * 16);
}

// Floats that do not reduce exactly: every rank must still hold the same bits, within a stated
// tolerance of a float64 reference.
TEST(CollectivesSimAlgorithms, FloatResultsAreBitIdenticalOnEveryRank) {
  for (const auto& a : all_algorithms()) {
    if (a.kind != shape::allreduce) continue;
    for (std::uint32_t p : {5u, 13u, 64u}) {
      for (dtype t : {dtype::float32, dtype::float64, dtype::bfloat16, dtype::float16}) {
        if (p == 64 && t != dtype::float32) continue;  // keep the test fast
        for (reduce_op op : {reduce_op::sum, reduce_op::min, reduce_op::avg}) {
          auto params = params_of(p, 333, t, op, 40);
          std::mt19937_64 random(p * 131 + static_cast<unsigned>(t));
          std::uniform_real_distribution<double> value(-1.0, 1.0);
          std::vector<bytes> inputs(p, bytes(params.count * size_of(t)));
          std::vector<double> reference(params.count, 0.0);
          for (std::uint32_t r = 0; r < p; ++r) {
            for (std::size_t i = 0; i < params.count; ++i) {
              double v = value(random);
              if (i % 50 == 0) v = (r % 2 == 0) ? 0.0 : -0.0;  // min of +0 and -0
              // Round to the type first so the reference sees what the ranks see.
              if (t == dtype::float32) v = static_cast<float>(v);
              if (t == dtype::bfloat16 || t == dtype::float16) v = std::round(v * 64) / 64;
              put(inputs[r], i, t, v);
              if (op == reduce_op::min) {
                reference[i] = r == 0 ? v : std::min(reference[i], v);
              } else {
                reference[i] += v;
              }
            }
          }
          const auto run = run_collective(a.make, a.kind, params, inputs);
          ASSERT_TRUE(run.report.completed()) << a.name << "\n" << run.report.explain();
          for (std::uint32_t r = 1; r < p; ++r) {
            ASSERT_EQ(run.outputs[r], run.outputs[0])
                << a.name << " p=" << p << " " << to_string(t) << " " << to_string(op) << ": rank "
                << r << " differs from rank 0";
          }
          // Tolerance: p roundings of the type's epsilon on partial sums of at most p.
          const double eps = t == dtype::float64 ? 2.3e-16 : 1.2e-7;
          for (std::size_t i = 0; i < params.count; ++i) {
            double got = 0;
            if (t == dtype::float64) {
              std::memcpy(&got, run.outputs[0].data() + i * 8, 8);
            } else if (t == dtype::float32) {
              float f;
              std::memcpy(&f, run.outputs[0].data() + i * 4, 4);
              got = f;
            } else {
              break;  // 16-bit types round each partial sum: only bit identity is checked
            }
            const double want = op == reduce_op::avg ? reference[i] / p : reference[i];
            EXPECT_NEAR(got, want, double(p) * p * eps) << a.name << " p=" << p << " element " << i;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace vessel::collectives
