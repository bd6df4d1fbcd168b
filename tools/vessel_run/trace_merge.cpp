#include "tools/vessel_run/trace_merge.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

#include "actors/trace_recorder.hpp"

namespace vessel::tools {
namespace {

constexpr std::string_view head = "{\"traceEvents\":[\n";
constexpr std::string_view tail = "\n],\"displayTimeUnit\"";

bool read_file(const std::string& path, std::string& text) {
  std::ifstream in{path, std::ios::binary};
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  text = s.str();
  return true;
}

}  // namespace

bool merge_rank_traces(const std::string& path, std::uint32_t ranks, trace_merge_report& report) {
  std::string out{head};
  bool first = true;
  for (std::uint32_t r = 0; r < ranks; ++r) {
    std::string text;
    const std::size_t end = read_file(actors::trace_recorder::rank_path(path, r), text)
                                ? text.rfind(tail)
                                : std::string::npos;
    if (text.compare(0, head.size(), head) != 0 || end == std::string::npos || end < head.size()) {
      report.missing += (report.missing.empty() ? "" : ",") + std::to_string(r);
      continue;
    }
    if (!first) out += ",\n";
    out.append(text, head.size(), end - head.size());
    first = false;
    ++report.merged;
    constexpr std::string_view key = "\"dropped_events\":";
    if (const std::size_t at = text.find(key, end); at != std::string::npos) {
      report.dropped_events += std::strtoull(text.c_str() + at + key.size(), nullptr, 10);
    }
  }
  if (report.merged == 0) return false;
  out += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"ranks\":" + std::to_string(ranks) +
         ",\"merged_ranks\":" + std::to_string(report.merged) +
         ",\"dropped_events\":" + std::to_string(report.dropped_events) +
         ",\"truncated\":" + (report.dropped_events > 0 ? "true" : "false") +
         ",\"clock\":\"ts in microseconds since the Unix epoch\"}}\n";
  const std::string temporary = path + ".tmp";
  {
    std::ofstream f{temporary, std::ios::binary | std::ios::trunc};
    if (!(f << out) || !f.flush()) return false;
  }
  return std::rename(temporary.c_str(), path.c_str()) == 0;
}

}  // namespace vessel::tools
