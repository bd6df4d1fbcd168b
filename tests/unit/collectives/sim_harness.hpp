#pragma once
// Runs one collective on every rank of a simulated network (collectives/sim/network.hpp) and
// computes the serial reference it must match.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "collectives/algorithms/algorithm.hpp"
#include "collectives/reduce.hpp"
#include "collectives/sim/network.hpp"

namespace vessel::collectives::testing {

using bytes = std::vector<std::byte>;
using factory = std::function<std::unique_ptr<algorithm>(const algorithm_params&)>;

/// Writes `v` (a value every dtype holds exactly: a small integer, or a multiple of 1/4 for
/// floats) as element `i` of `out`.
inline void put(bytes& out, std::size_t i, dtype t, double v) {
  std::byte* p = out.data() + i * size_of(t);
  auto store = [p](auto x) { std::memcpy(p, &x, sizeof x); };
  switch (t) {
    case dtype::int8: store(static_cast<std::int8_t>(v)); break;
    case dtype::uint8: store(static_cast<std::uint8_t>(static_cast<std::int64_t>(v))); break;
    case dtype::int32: store(static_cast<std::int32_t>(v)); break;
    case dtype::uint32: store(static_cast<std::uint32_t>(static_cast<std::int64_t>(v))); break;
    case dtype::int64: store(static_cast<std::int64_t>(v)); break;
    case dtype::uint64: store(static_cast<std::uint64_t>(static_cast<std::int64_t>(v))); break;
    case dtype::float32: store(static_cast<float>(v)); break;
    case dtype::float64: store(v); break;
    case dtype::bfloat16: {
      const float f = static_cast<float>(v);
      std::uint32_t b;
      std::memcpy(&b, &f, 4);
      store(static_cast<std::uint16_t>(b >> 16));  // exact: few significant bits
      break;
    }
    case dtype::float16: {
      std::uint16_t h = 0;
      if (v != 0) {
        int e;
        const double m = std::frexp(std::fabs(v), &e);  // |v| = m * 2^e, m in [0.5, 1)
        const auto exponent = static_cast<std::uint16_t>(e - 1 + 15);
        const auto mantissa = static_cast<std::uint16_t>((m * 2 - 1) * 1024);
        h = static_cast<std::uint16_t>((v < 0 ? 0x8000 : 0) | (exponent << 10) | mantissa);
      }
      store(h);
      break;
    }
  }
}

/// Element values that keep every reduction exact in any order, for every dtype: small
/// integers for sum/avg/min/max, +-1 with one 2 per element for prod, any bits for bitwise ops.
inline double exact_value(reduce_op op, std::uint32_t rank, std::size_t i, std::uint32_t size) {
  const std::uint64_t h = (rank + 1) * 0x9E3779B97F4A7C15ull ^ (i + 7) * 0xC2B2AE3D27D4EB4Full;
  switch (op) {
    case reduce_op::prod: return (i % size == rank ? 2.0 : 1.0) * ((h >> 17) % 2 == 0 ? 1.0 : -1.0);
    case reduce_op::band:
    case reduce_op::bor:
    case reduce_op::bxor: return static_cast<double>((h >> 13) % 120);
    default: return static_cast<double>(static_cast<std::int64_t>((h >> 11) % 7) - 3);
  }
}

inline bytes exact_input(dtype t, reduce_op op, std::uint32_t rank, std::uint32_t size,
                         std::size_t count) {
  bytes out(count * size_of(t));
  for (std::size_t i = 0; i < count; ++i) put(out, i, t, exact_value(op, rank, i, size));
  return out;
}

/// The reduction of inputs[0..p) in rank order, averaged when op is avg.
inline bytes serial_reduce(const std::vector<bytes>& inputs, dtype t, reduce_op op) {
  bytes acc = inputs.at(0);
  for (std::size_t r = 1; r < inputs.size(); ++r) {
    EXPECT_TRUE(reduce_into(acc, inputs[r], t, op));
  }
  if (op == reduce_op::avg && !acc.empty()) {
    EXPECT_TRUE(finish_average(acc, t, static_cast<std::uint32_t>(inputs.size())));
  }
  return acc;
}

/// One collective on p simulated ranks: inputs, outputs, scratch and the run's report.
struct sim_run {
  std::vector<bytes> inputs;
  std::vector<bytes> outputs;
  sim::run_report report;
};

struct run_options {
  bool in_place = false;         ///< input aliases output (at block `rank` for allgather)
  sim::network_config config{};  ///< ranks is set by run_collective
  std::function<void(sim::network&)> faults;
};

enum class shape : std::uint8_t { allreduce, reduce_scatter, allgather };

/// Runs `make` on params.size ranks with the given inputs (input bytes per rank as the shape
/// requires). Output sizes: allreduce count, reduce_scatter count, allgather size * count.
inline sim_run run_collective(const factory& make, shape s, algorithm_params params,
                              std::vector<bytes> inputs, run_options options = {}) {
  const std::uint32_t p = params.size;
  const std::size_t block = params.count * size_of(params.type);
  const std::size_t out_bytes = s == shape::allgather ? block * p : block;
  sim_run run;
  run.inputs = std::move(inputs);
  run.outputs.assign(p, bytes(out_bytes, std::byte{0xEE}));
  std::vector<std::unique_ptr<algorithm>> algos;
  std::vector<algorithm*> pointers;
  std::vector<bytes> scratch(p);
  std::vector<bytes> in_place_buffers(p);
  std::vector<algorithm_buffers> buffers(p);
  for (std::uint32_t r = 0; r < p; ++r) {
    params.rank = r;
    algos.push_back(make(params));
    pointers.push_back(algos.back().get());
    scratch[r].resize(algos.back()->scratch_bytes());
    buffers[r].scratch = scratch[r];
    if (!options.in_place) {
      buffers[r].input = run.inputs[r];
      buffers[r].output = run.outputs[r];
      continue;
    }
    // In place: the input lives inside the output buffer (reduce_scatter: the output is the
    // start of the input buffer, as MPI_IN_PLACE has it).
    bytes& shared = in_place_buffers[r];
    switch (s) {
      case shape::allreduce:
        shared = run.inputs[r];
        buffers[r].input = shared;
        buffers[r].output = shared;
        break;
      case shape::reduce_scatter:
        shared = run.inputs[r];
        buffers[r].input = shared;
        buffers[r].output = std::span<std::byte>(shared).first(block);
        break;
      case shape::allgather:
        shared.assign(block * p, std::byte{0xEE});
        if (block != 0) std::memcpy(shared.data() + r * block, run.inputs[r].data(), block);
        buffers[r].input = std::span<const std::byte>(shared).subspan(r * block, block);
        buffers[r].output = shared;
        break;
    }
  }
  options.config.ranks = p;
  sim::network net(options.config);
  if (options.faults) options.faults(net);
  run.report = net.run(pointers, buffers);
  if (options.in_place && out_bytes != 0) {
    for (std::uint32_t r = 0; r < p; ++r) {
      std::memcpy(run.outputs[r].data(), in_place_buffers[r].data(), out_bytes);
    }
  }
  return run;
}

/// What every rank must hold after the collective (exact inputs: any order gives these bytes).
inline std::vector<bytes> expected_outputs(shape s, const algorithm_params& params,
                                           const std::vector<bytes>& inputs) {
  const std::uint32_t p = params.size;
  const std::size_t block = params.count * size_of(params.type);
  std::vector<bytes> out(p);
  if (s == shape::allgather) {
    bytes all(block * p);
    for (std::uint32_t r = 0; r < p; ++r) {
      if (block != 0) std::memcpy(all.data() + r * block, inputs[r].data(), block);
    }
    out.assign(p, all);
    return out;
  }
  const bytes reduced = serial_reduce(inputs, params.type, params.op);
  for (std::uint32_t r = 0; r < p; ++r) {
    if (s == shape::allreduce) {
      out[r] = reduced;
    } else {
      out[r].assign(reduced.begin() + static_cast<std::ptrdiff_t>(r * block),
                    reduced.begin() + static_cast<std::ptrdiff_t>((r + 1) * block));
    }
  }
  return out;
}

}  // namespace vessel::collectives::testing
