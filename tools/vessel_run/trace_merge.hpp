#pragma once
// After a job run with VESSEL_TRACE=out.json, vessel-run joins the ranks' out.rank<r>.json
// (actors/trace_recorder.hpp) into out.json, one process per rank: the file users open in
// Perfetto. The join is textual: the recorder writes one event per line between a fixed first
// line and a fixed tail, so nothing here parses JSON (scripts/vessel-trace-merge does the same
// with a parser, for jobs that mpirun or srun started).

#include <cstdint>
#include <string>

namespace vessel::tools {

struct trace_merge_report {
  std::uint32_t merged = 0;  ///< rank files joined
  std::string missing;       ///< "1,3": ranks without a file (or not in the recorder's shape)
  std::uint64_t dropped_events = 0;  ///< summed over ranks (truncated traces)
};

/// Joins the files of ranks 0..ranks-1 into `path` (through a temporary file and rename). False
/// when no rank left a file or `path` cannot be written; missing ranks are reported, not fatal.
bool merge_rank_traces(const std::string& path, std::uint32_t ranks, trace_merge_report& report);

}  // namespace vessel::tools
