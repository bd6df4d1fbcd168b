#pragma once
// Results of a vessel-bench invocation: a readable table on stdout and, with --csv FILE, rows
// with exactly the columns bench/run.sh and summarize.py read:
//   bench,transport,ranks,size_bytes,metric,unit,vessel,peer,peer_value,advantage
// advantage > 1 means vessel is better: peer/vessel for times, vessel/peer for bandwidths.

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

namespace vessel::bench {

/// One measured point: vessel's median against one peer's median from the same run.
struct result_row {
  std::string bench;     ///< e.g. "pingpong", "stream"
  std::string transport; ///< e.g. "tcp"
  std::size_t ranks = 2; ///< processes taking part
  std::size_t size_bytes = 0;
  std::string metric;    ///< latency | time (unit us) or bandwidth | algbw | busbw (unit GB/s)
  double vessel = 0;     ///< vessel's median
  std::string peer;      ///< what vessel was compared against, e.g. "socket"
  double peer_value = 0; ///< the peer's median, measured in the same invocation
};

/// The unit a metric is reported in ("us" for times, "GB/s" = 1e9 B/s for bandwidths).
const char* unit_of(const std::string& metric);

/// True for metrics where smaller is better (latency, time).
bool is_time_metric(const std::string& metric);

/// peer/vessel for times, vessel/peer for bandwidths: > 1 means vessel is better.
double advantage_of(const result_row& row);

/// Median of `values` (sorted copy; the mean of the two middle values for even sizes).
double median(std::vector<double> values);

/// Collects rows and writes them out.
class report {
public:
  /// Adds one row (printed and written by the writers below).
  void add(result_row row);

  /// The rows added so far.
  const std::vector<result_row>& rows() const noexcept { return rows_; }

  /// A fixed-width table, one line per row.
  void print_table(std::ostream& os) const;

  /// The CSV header and rows; returns false if `path` could not be written.
  bool write_csv(const std::string& path) const;

private:
  std::vector<result_row> rows_;
};

} // namespace vessel::bench
