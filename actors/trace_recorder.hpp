#pragma once
// VESSEL_TRACE=out.json: a timeline of every collective a rank runs, per rank, in the Chrome
// Trace Event Format that Perfetto (ui.perfetto.dev) and chrome://tracing open. Both kinds of
// collectives record here, into one recorder per process and one file per rank: those of
// collectives::communicator (collectives/trace_recorder.hpp names their operations and types)
// and vessel::comm's own barrier and allreduce (actors/comm.hpp). It sits in actors/ for the
// latter: it knows operations and types only by name.
//
// Each collective is a complete event ("ph":"X") named "<operation> <algorithm>" on process
// (pid) = world rank, thread (tid) = its communicator (communicator id * 64 + a lane: non-blocking
// collectives in flight together on one communicator take lanes 1, 2, ... so that events on one
// track never overlap), or comm_trace_track for vessel::comm's. Inside it, one event per algorithm step (round) this rank took part in,
// with the peers it sent to and received from and the bytes each way. Steps are laid out in step
// order, each from the end of the previous one (or its own first chunk, if later) to its last
// chunk sent or received: pipelined steps overlap in time, a peer a round ahead sends early, and
// a track must nest, so the timeline shows when the rank moved on to each step.
//
// Cost: unset, a collective pays one null-pointer test per chunk. Set, a chunk costs a clock read
// and a few additions into the collective's step records (reserved at its start); the events of
// a finished collective are appended under a mutex into one buffer reserved at the first event.
// The buffer is bounded (VESSEL_TRACE_MAX_EVENTS, default 65536 events of ~250 B: 16 MiB): once
// full, whole collectives are dropped and counted, and the file says so
// (otherData.dropped_events, and an instant event "trace truncated").
//
// Files: rank r writes out.rank<r>.json (the path with the rank inserted before its extension)
// when its last communicator of a family goes and again at exit; vessel-run joins them into
// out.json at the end of the job (tools/vessel_run/trace_merge.hpp), scripts/vessel-trace-merge
// does it for jobs mpirun or srun started. Timestamps are microseconds since the Unix epoch
// (system_clock read once, steady_clock since), so ranks on different hosts line up as well as
// their clocks do.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "wire/result.hpp"

namespace vessel::actors {

/// steady_clock in nanoseconds: what every trace timestamp is taken with.
inline std::int64_t trace_now() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// The distinct peers of a step: up to four named (ring, tree and pairwise steps have one or
/// two), more only counted as `others`, so that recording never allocates.
struct trace_peers {
  static constexpr std::size_t max_named = 4;
  std::array<std::uint32_t, max_named> ranks{};
  std::uint8_t named = 0;
  bool others = false;

  void add(std::uint32_t rank) noexcept {
    for (std::uint8_t i = 0; i < named; ++i) {
      if (ranks[i] == rank) return;
    }
    if (named < max_named) {
      ranks[named++] = rank;
    } else {
      others = true;
    }
  }
};

/// What one rank did in one step (or, summed, in a whole collective).
struct trace_traffic {
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  std::uint32_t chunks_sent = 0;
  std::uint32_t chunks_received = 0;
  trace_peers to;  ///< ranks in the communicator
  trace_peers from;
};

/// One complete event of the trace: a collective, or one of its steps.
struct trace_event {
  std::int64_t start_ns = 0;  ///< steady_clock (trace_now())
  std::int64_t duration_ns = 0;
  std::uint32_t rank = 0;   ///< world rank: the pid
  std::uint32_t track = 0;  ///< the tid: communicator * 64 + lane
  std::uint32_t communicator = 0;
  std::uint32_t comm_rank = 0;
  std::uint32_t comm_size = 0;
  std::uint32_t root = 0;
  std::uint64_t sequence = 0;
  std::uint64_t count = 0;  ///< elements (algorithm_params::count)
  std::uint64_t bytes = 0;  ///< the message size the algorithm was chosen for
  // Names, not enums (this module knows neither collectives' types nor its operations). They
  // must view static text (to_string() of an enum, a literal): events are copied, never owned.
  std::string_view operation = "barrier";
  std::string_view element_type;  ///< "float32", ...; empty: none (a barrier of vessel::comm)
  std::string_view reduction;     ///< "sum", ...; empty: the operation does not reduce
  bool rooted = false;            ///< the operation has a root (args.root)
  /// Empty: a communicator's collective (args.communicator); else the API that ran it
  /// ("vessel::comm": args.api), also the name of its track.
  std::string_view api;
  bool is_step = false;
  std::uint32_t step = 0;
  std::error_code error;  ///< the collective's outcome (collective events only)
  trace_traffic traffic;
  std::array<char, 24> algorithm{};  ///< NUL-terminated, truncated if longer
};

inline constexpr std::uint32_t trace_lanes_per_communicator = 64;
/// vessel::comm's collectives: one track of their own, past every communicator's (ids are far
/// below 2^26), so that they never share one with a communicator's collectives.
inline constexpr std::uint32_t comm_trace_track = 0xffff'ffc0u;

class trace_recorder {
 public:
  static constexpr std::size_t default_max_events = 65536;

  /// `path` as VESSEL_TRACE gives it; at most `max_events` events kept (whole collectives).
  explicit trace_recorder(std::string path, std::size_t max_events = default_max_events);
  /// Writes every rank with events not yet written (errors to stderr: this runs at exit).
  ~trace_recorder();
  trace_recorder(const trace_recorder&) = delete;
  trace_recorder& operator=(const trace_recorder&) = delete;

  /// The process's recorder: null unless VESSEL_TRACE names a file (the environment is read
  /// once, at the first call; VESSEL_TRACE_MAX_EVENTS bounds it). Written at exit.
  static trace_recorder* global() noexcept;

  /// "out.json" -> "out.rank2.json"; "trace" -> "trace.rank2.json".
  static std::string rank_path(std::string_view path, std::uint32_t rank);

  /// Appends one collective's events (its own first, then its steps), all or none: none when
  /// they do not fit under the bound, which is then counted as dropped for their rank.
  void record(std::span<const trace_event> events);

  /// Rank `rank`'s trace as JSON (what write() puts in its file).
  std::string json(std::uint32_t rank) const;
  /// Writes rank_path(path, rank) (through a temporary file and rename: a reader never sees
  /// half a file).
  result<void> write(std::uint32_t rank);

  const std::string& path() const noexcept { return path_; }
  std::size_t max_events() const noexcept { return max_events_; }
  /// Copies of the events kept for `rank`, in the order recorded.
  std::vector<trace_event> events(std::uint32_t rank) const;
  std::uint64_t dropped(std::uint32_t rank) const;

 private:
  std::string path_;
  std::size_t max_events_;
  std::int64_t wall_offset_ns_;  // system_clock - steady_clock, read once: one epoch per process
  mutable std::mutex mutex_;
  std::vector<trace_event> events_;
  std::map<std::uint32_t, std::uint64_t> dropped_;
  std::set<std::uint32_t> unwritten_;  // ranks with events recorded since their last write
};

/// The steps of one collective on one rank while it runs; turned into events at finish().
class collective_trace {
 public:
  /// Steps at or beyond this share one record (step numbers come from peers' chunk headers:
  /// a broken one must not make us allocate).
  static constexpr std::uint32_t max_steps = 1024;

  /// `header` names the collective (everything but times, traffic and outcome); `expected_steps`
  /// reserves that many step records (2 * size covers every algorithm of algorithms/).
  collective_trace(trace_recorder& recorder, const trace_event& header, std::size_t expected_steps,
                   std::int64_t now_ns);

  void sent(std::uint32_t step, std::uint32_t peer, std::size_t bytes, std::int64_t now_ns);
  void received(std::uint32_t step, std::uint32_t peer, std::size_t bytes, std::int64_t now_ns);
  /// The collective ended with `error` (empty: success): records its events.
  void finish(std::error_code error, std::int64_t now_ns);

 private:
  struct step_record {
    std::int64_t first_ns = -1;  // -1: nothing yet
    std::int64_t last_ns = 0;
    std::uint32_t step = 0;
    trace_traffic traffic;
  };
  step_record& at(std::uint32_t step, std::int64_t now_ns);

  trace_recorder* recorder_;
  trace_event header_;
  std::int64_t start_ns_;
  std::vector<step_record> steps_;  // indexed by step number
  std::vector<trace_event> out_;    // reserved with steps_: finish() allocates nothing more
};

}  // namespace vessel::actors
