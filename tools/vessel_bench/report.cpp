#include "tools/vessel_bench/report.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <ostream>

namespace vessel::bench {

const char* unit_of(const std::string& metric) {
  return is_time_metric(metric) ? "us" : "GB/s";
}

bool is_time_metric(const std::string& metric) {
  return metric == "latency" || metric == "time";
}

double advantage_of(const result_row& row) {
  if (is_time_metric(row.metric))
    return row.vessel > 0 ? row.peer_value / row.vessel : 0.0;
  return row.peer_value > 0 ? row.vessel / row.peer_value : 0.0;
}

double median(std::vector<double> values) {
  if (values.empty())
    return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

void report::add(result_row row) {
  rows_.push_back(std::move(row));
}

namespace {

std::string human_size(std::size_t bytes) {
  char buf[32];
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
    std::snprintf(buf, sizeof buf, "%zu MiB", bytes >> 20);
  else if (bytes >= (1u << 10) && bytes % (1u << 10) == 0)
    std::snprintf(buf, sizeof buf, "%zu KiB", bytes >> 10);
  else
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  return buf;
}

} // namespace

void report::print_table(std::ostream& os) const {
  char line[256];
  std::snprintf(line, sizeof line, "%-10s %-9s %5s %9s %-10s %-5s %12s %-8s %12s %9s\n", "bench",
                "transport", "ranks", "size", "metric", "unit", "vessel", "peer", "peer_value",
                "advantage");
  os << line;
  for (const auto& r : rows_) {
    std::snprintf(line, sizeof line, "%-10s %-9s %5zu %9s %-10s %-5s %12.3f %-8s %12.3f %9.3f\n",
                  r.bench.c_str(), r.transport.c_str(), r.ranks, human_size(r.size_bytes).c_str(),
                  r.metric.c_str(), unit_of(r.metric), r.vessel, r.peer.c_str(), r.peer_value,
                  advantage_of(r));
    os << line;
  }
}

bool report::write_csv(const std::string& path) const {
  std::ofstream out(path);
  if (!out)
    return false;
  out << "bench,transport,ranks,size_bytes,metric,unit,vessel,peer,peer_value,advantage\n";
  char num[64];
  const auto fmt = [&num](double v) {
    std::snprintf(num, sizeof num, "%.6g", v);
    return std::string(num);
  };
  for (const auto& r : rows_) {
    out << r.bench << ',' << r.transport << ',' << r.ranks << ',' << r.size_bytes << ','
        << r.metric << ',' << unit_of(r.metric) << ',' << fmt(r.vessel) << ',' << r.peer << ','
        << fmt(r.peer_value) << ',' << fmt(advantage_of(r)) << '\n';
  }
  return static_cast<bool>(out);
}

} // namespace vessel::bench
