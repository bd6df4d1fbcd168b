// vessel-bench model --transport tcp|shm: each collective algorithm
// run on the simulated network (collectives/sim/network.hpp) for a few (ranks, size), its
// modelled time printed beside the textbook alpha-beta formula (Thakur, Rabenseifner and Gropp,
// "Optimization of Collective Communication Operations in MPICH", 2005):
//   ring allreduce          2 (p-1) a + 2 (p-1)/p n b
//   recursive doubling      log2(p) (a + n b)           (+ 2 (a + n b) to fold p != 2^k)
//   Rabenseifner            2 log2(p) a + 2 (p-1)/p n b  (+ 2 (a + n b) to fold p != 2^k)
//   ring reduce_scatter,
//   ring allgather          (p-1) a + (p-1)/p n b
//   recursive doubling ag.  log2(p) a + (p-1)/p n b      (+ a + n/p b + a + n b to fold)
//   binomial broadcast,
//   binomial reduce         ceil(log2 p) (a + n b)
//   chain broadcast         (p - 2 + k) (a + n/k b)       (k chunks of chunk_bytes)
//   dissemination barrier   ceil(log2 p) a
//   pairwise alltoall       (p-1) (a + n/p b)
//   binomial gather/scatter ceil(log2 p) a + (p-1)/p n b
// n is the whole vector (allreduce, broadcast, reduce), the whole input (reduce_scatter, scatter,
// alltoall) or the whole output (allgather, gather); roots are rank 0.
// alpha and beta are Open MPI's measured here (notes/PEERS.md): tcp 10.7 us and
// 2.7 GB/s, shm (vader) 0.41 us and 6.8 GB/s. Rows: vessel = simulated time, peer = formula,
// advantage = formula / simulated (1 means the state machines achieve the textbook cost; > 1
// where pipelining or empty blocks beat it). The data really moves (and is reduced), so the
// sweep keeps ranks x size within 128 MiB.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/algorithms/binomial_broadcast.hpp"
#include "collectives/algorithms/binomial_gather.hpp"
#include "collectives/algorithms/binomial_reduce.hpp"
#include "collectives/algorithms/binomial_scatter.hpp"
#include "collectives/algorithms/chain_broadcast.hpp"
#include "collectives/algorithms/dissemination_barrier.hpp"
#include "collectives/algorithms/pairwise_alltoall.hpp"
#include "collectives/algorithms/rabenseifner_allreduce.hpp"
#include "collectives/algorithms/recursive_doubling_allgather.hpp"
#include "collectives/algorithms/recursive_doubling_allreduce.hpp"
#include "collectives/algorithms/ring_allgather.hpp"
#include "collectives/algorithms/ring_allreduce.hpp"
#include "collectives/algorithms/ring_reduce_scatter.hpp"
#include "collectives/sim/network.hpp"
#include "tools/vessel_bench/modes.hpp"
#include "tools/vessel_bench/report.hpp"

namespace vessel::bench {
namespace {

namespace coll = vessel::collectives;

/// Which buffers hold n bytes: whole = both (allreduce, broadcast, reduce); the others hold one
/// rank's block of n / p on the side that is not all p blocks.
enum class shape { allreduce, reduce_scatter, allgather, barrier, alltoall };

/// algorithm_params::chunk_bytes' default: the pipelining chunk of the chain broadcast.
constexpr std::size_t model_chunk_bytes = coll::algorithm_params{}.chunk_bytes;

struct model_case {
  const char* name;
  shape kind;
  std::function<std::unique_ptr<coll::algorithm>(const coll::algorithm_params&)> make;
  /// The textbook time for p ranks and n bytes.
  std::function<double(double p, double n, double a, double b)> formula;
};

double log2_ceil(double p) { return std::ceil(std::log2(p)); }
double log2_floor(double p) {
  return std::floor(std::log2(p));
}
double fold_cost(double p, double n, double a, double b) {
  return std::bit_floor(static_cast<unsigned>(p)) == static_cast<unsigned>(p) ? 0 : 2 * (a + n * b);
}

std::vector<model_case> cases() {
  return {
      {"allreduce_ring", shape::allreduce,
       [](const auto& p) { return std::make_unique<coll::ring_allreduce>(p); },
       [](double p, double n, double a, double b) {
         return 2 * (p - 1) * a + 2 * (p - 1) / p * n * b;
       }},
      {"allreduce_recursive_doubling", shape::allreduce,
       [](const auto& p) { return std::make_unique<coll::recursive_doubling_allreduce>(p); },
       [](double p, double n, double a, double b) {
         return log2_floor(p) * (a + n * b) + fold_cost(p, n, a, b);
       }},
      {"allreduce_rabenseifner", shape::allreduce,
       [](const auto& p) { return std::make_unique<coll::rabenseifner_allreduce>(p); },
       [](double p, double n, double a, double b) {
         const double q = std::bit_floor(static_cast<unsigned>(p));
         return 2 * log2_floor(p) * a + 2 * (q - 1) / q * n * b + fold_cost(p, n, a, b);
       }},
      {"reduce_scatter_ring", shape::reduce_scatter,
       [](const auto& p) { return std::make_unique<coll::ring_reduce_scatter>(p); },
       [](double p, double n, double a, double b) { return (p - 1) * a + (p - 1) / p * n * b; }},
      {"allgather_ring", shape::allgather,
       [](const auto& p) { return std::make_unique<coll::ring_allgather>(p); },
       [](double p, double n, double a, double b) { return (p - 1) * a + (p - 1) / p * n * b; }},
      {"allgather_recursive_doubling", shape::allgather,
       [](const auto& p) { return std::make_unique<coll::recursive_doubling_allgather>(p); },
       [](double p, double n, double a, double b) {
         // Folding p != 2^k: an extra's block goes up, the whole result comes back.
         const double q = std::bit_floor(static_cast<unsigned>(p));
         const double fold = q == p ? 0 : (a + n / p * b) + (a + n * b);
         return log2_floor(p) * a + (q - 1) / q * n * b + fold;
       }},
      {"broadcast_binomial", shape::allreduce,
       [](const auto& p) { return std::make_unique<coll::binomial_broadcast>(p); },
       [](double p, double n, double a, double b) { return log2_ceil(p) * (a + n * b); }},
      {"broadcast_chain", shape::allreduce,
       [](const auto& p) { return std::make_unique<coll::chain_broadcast>(p); },
       [](double p, double n, double a, double b) {
         const double k = std::max(1.0, std::ceil(n / static_cast<double>(model_chunk_bytes)));
         return (p - 2 + k) * (a + n / k * b);
       }},
      {"reduce_binomial", shape::allreduce,
       [](const auto& p) { return std::make_unique<coll::binomial_reduce>(p); },
       [](double p, double n, double a, double b) { return log2_ceil(p) * (a + n * b); }},
      {"barrier_dissemination", shape::barrier,
       [](const auto& p) { return std::make_unique<coll::dissemination_barrier>(p); },
       [](double p, double, double a, double) { return log2_ceil(p) * a; }},
      {"alltoall_pairwise", shape::alltoall,
       [](const auto& p) { return std::make_unique<coll::pairwise_alltoall>(p); },
       [](double p, double n, double a, double b) { return (p - 1) * (a + n / p * b); }},
      {"gather_binomial", shape::allgather,
       [](const auto& p) { return std::make_unique<coll::binomial_gather>(p); },
       [](double p, double n, double a, double b) {
         return log2_ceil(p) * a + (p - 1) / p * n * b;
       }},
      {"scatter_binomial", shape::reduce_scatter,
       [](const auto& p) { return std::make_unique<coll::binomial_scatter>(p); },
       [](double p, double n, double a, double b) {
         return log2_ceil(p) * a + (p - 1) / p * n * b;
       }},
  };
}

/// Simulated seconds of one run, or a negative value (after printing why) on failure.
double simulate(const model_case& c, std::uint32_t ranks, std::size_t bytes,
                const coll::sim::link_model& link) {
  coll::algorithm_params params;
  params.size = ranks;
  params.type = coll::dtype::float32;
  params.op = coll::reduce_op::sum;
  const std::size_t elements = bytes / 4 == 0 ? 1 : bytes / 4;
  params.count = c.kind == shape::allreduce ? elements
                 : c.kind == shape::barrier ? 0
                                            : (elements + ranks - 1) / ranks;
  const std::size_t block = params.count * 4;
  const bool all_in = c.kind == shape::reduce_scatter || c.kind == shape::alltoall;
  const bool all_out = c.kind == shape::allgather || c.kind == shape::alltoall;
  const std::size_t in_bytes = all_in ? block * ranks : block;
  const std::size_t out_bytes = all_out ? block * ranks : block;

  std::vector<std::unique_ptr<coll::algorithm>> algos;
  std::vector<coll::algorithm*> pointers;
  std::vector<std::vector<std::byte>> inputs, outputs, scratch;
  std::vector<coll::algorithm_buffers> buffers(ranks);
  for (std::uint32_t r = 0; r < ranks; ++r) {
    params.rank = r;
    algos.push_back(c.make(params));
    pointers.push_back(algos.back().get());
    inputs.emplace_back(in_bytes, std::byte{0});
    outputs.emplace_back(out_bytes);
    scratch.emplace_back(algos.back()->scratch_bytes());
  }
  for (std::uint32_t r = 0; r < ranks; ++r) buffers[r] = {inputs[r], outputs[r], scratch[r]};
  coll::sim::network_config config;
  config.ranks = ranks;
  config.link = link;
  coll::sim::network net(config);
  const auto report = net.run(pointers, buffers);
  if (!report.completed()) {
    std::fprintf(stderr, "vessel-bench model: %s on %u ranks, %zu bytes: %s", c.name, ranks, bytes,
                 report.explain().c_str());
    return -1;
  }
  return report.completion_s;
}

int run_model(const bench_options& opts, report& out, const char* transport,
              coll::sim::link_model link) {
  const std::vector<std::size_t> sizes =
      opts.sizes.empty() ? std::vector<std::size_t>{8, 64 << 10, 1 << 20, 16 << 20} : opts.sizes;
  const std::vector<std::uint32_t> rank_counts =
      opts.ranks != 0 ? std::vector<std::uint32_t>{static_cast<std::uint32_t>(opts.ranks)}
                      : std::vector<std::uint32_t>{2, 4, 6, 8, 64, 256};
  constexpr std::size_t memory_cap = std::size_t{128} << 20;
  for (const auto& c : cases()) {
    for (std::uint32_t p : rank_counts) {
      for (std::size_t n : sizes) {
        if (std::size_t{p} * n > memory_cap) continue;
        const double simulated = simulate(c, p, n, link);
        if (simulated < 0) return 1;
        // The formula sees the bytes actually moved (counts round up to whole elements).
        const std::size_t elements = n / 4 == 0 ? 1 : n / 4;
        const double moved = c.kind == shape::allreduce ? elements * 4.0
                             : c.kind == shape::barrier ? 0.0
                                                        : ((elements + p - 1) / p) * 4.0 * p;
        result_row row;
        row.bench = c.name;
        row.transport = std::string("model-") + transport;
        row.ranks = p;
        row.size_bytes = n;
        row.metric = "time";
        row.vessel = simulated * 1e6;
        row.peer = "alpha-beta";
        row.peer_value = c.formula(p, moved, link.alpha_s, link.beta_s_per_byte) * 1e6;
        out.add(row);
      }
    }
  }
  return 0;
}

int run_model_tcp(const bench_options& opts, report& out) {
  return run_model(opts, out, "tcp", {10.7e-6, 1.0 / 2.7e9});
}
int run_model_shm(const bench_options& opts, report& out) {
  return run_model(opts, out, "shm", {0.41e-6, 1.0 / 6.8e9});
}

}  // namespace

VESSEL_BENCH_REGISTER(model_tcp, "model", "tcp",
                      "collective algorithms on the simulated network vs the alpha-beta formula "
                      "(Open MPI TCP alpha, beta)",
                      &run_model_tcp);
VESSEL_BENCH_REGISTER(model_shm, "model", "shm",
                      "collective algorithms on the simulated network vs the alpha-beta formula "
                      "(Open MPI vader alpha, beta)",
                      &run_model_shm);

}  // namespace vessel::bench
