#pragma once
// What `vessel-bench coll` measures, shared by its two sides (tools/vessel_bench/coll_rank.cpp
// for vessel, bench/peers/mpi_coll.cpp for Open MPI) so both run the same sizes, element counts,
// warm-up and iteration counts. Header-only and standard C++ only: the MPI peer includes it.

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace vessel::bench {

/// The operations, in the order both sides run them.
inline constexpr std::string_view coll_ops[] = {"allreduce", "broadcast", "allgather",
                                                "reduce_scatter"};

/// The operations a run measures, in coll_ops' order: those named in `list` (comma-separated,
/// VESSEL_BENCH_COLL_OPS), or all of them when `list` is empty. Empty when a name is not one of
/// coll_ops, so that the caller refuses the list rather than measure less than was asked.
inline std::vector<std::string_view> selected_coll_ops(std::string_view list) {
  if (list.empty()) return {std::begin(coll_ops), std::end(coll_ops)};
  std::vector<std::string_view> named;
  while (true) {
    const auto comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    if (std::find(std::begin(coll_ops), std::end(coll_ops), item) == std::end(coll_ops)) return {};
    named.push_back(item);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  std::vector<std::string_view> out;
  for (std::string_view op : coll_ops) {
    if (std::find(named.begin(), named.end(), op) != named.end()) out.push_back(op);
  }
  return out;
}

/// selected_coll_ops() of VESSEL_BENCH_COLL_OPS (both sides read it: vessel-bench passes it on).
inline std::vector<std::string_view> selected_coll_ops_from_env() {
  const char* list = std::getenv("VESSEL_BENCH_COLL_OPS");
  return selected_coll_ops(list != nullptr ? std::string_view{list} : std::string_view{});
}

struct coll_plan {
  /// float32 elements of one call: the whole vector (allreduce, broadcast, and allgather's output
  /// / reduce_scatter's input) and one rank's block.
  struct shape {
    std::size_t whole_elements;
    std::size_t block_elements;
  };

  std::vector<std::size_t> sizes;
  std::size_t iterations = 0;  ///< 0: iterations_for's default
  std::size_t world = 2;

  /// `list`: comma-separated byte counts (plain numbers; vessel-bench expands K/M suffixes).
  /// Anything else ("4K" here) leaves `sizes` empty, so the caller refuses it rather than
  /// reading a prefix.
  coll_plan(std::string_view list, std::size_t iterations_, std::size_t world_)
      : iterations{iterations_}, world{std::max<std::size_t>(world_, 1)} {
    while (!list.empty()) {
      const auto comma = list.find(',');
      const std::string_view item = list.substr(0, comma);
      std::size_t v = 0;
      const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
      if (ec != std::errc{} || end != item.data() + item.size() || v == 0) {
        sizes.clear();
        return;
      }
      sizes.push_back(v);
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
  }

  /// At least one float32 per rank's block, so an 8-byte allgather on 4 ranks still moves data.
  shape shape_of(std::size_t size_bytes) const {
    const std::size_t block = std::max<std::size_t>(size_bytes / 4 / world, 1);
    const std::size_t whole = std::max<std::size_t>(size_bytes / 4, 1);
    return {whole, block};
  }

  std::size_t largest_buffer_bytes() const {
    std::size_t most = 4;
    for (std::size_t s : sizes) {
      const shape sh = shape_of(s);
      most = std::max({most, sh.whole_elements * 4, sh.block_elements * 4 * world});
    }
    return most;
  }

  /// About 64 MiB moved per measurement, between 10 and 5000 calls. 5000 for the small sizes (as
  /// OSU's micro-benchmarks take 10000 up to 8 KiB): 500 calls of 8 bytes lasted under a
  /// millisecond, and both sides' medians moved by a third from run to run. At least 10 for the
  /// large ones (nccl-tests time 20): of 3 calls of a 64 MiB allreduce on 4 ranks sharing 2 cores,
  /// one that met a descheduled rank (130-210 ms against 55-80) moved the mean by half.
  std::size_t iterations_for(std::size_t size_bytes) const {
    if (iterations != 0) return iterations;
    return std::clamp<std::size_t>((std::size_t{64} << 20) / size_bytes, 10, 5000);
  }

  /// At least 5 calls, as nccl-tests warm up every size: the first calls of a new size touch
  /// pages and pool blocks for the first time (a 64 MiB allreduce's first call 59-362 ms against
  /// 55-80 after), and one warm-up call left that in the timed ones.
  std::size_t warmup(std::size_t size_bytes) const {
    return std::clamp<std::size_t>(iterations_for(size_bytes) / 10, 5, 20);
  }
};

}  // namespace vessel::bench
