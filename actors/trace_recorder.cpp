#include "actors/trace_recorder.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace vessel::actors {
namespace {

void append_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void append_uint(std::string& out, std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%" PRIu64, v);
  out += buf;
}

/// `,"key":value`: the fields after an object's first.
void append_field(std::string& out, std::string_view key, std::uint64_t v) {
  out += ",\"";
  out += key;
  out += "\":";
  append_uint(out, v);
}
void append_text_field(std::string& out, std::string_view key, std::string_view text) {
  out += ",\"";
  out += key;
  out += "\":";
  append_string(out, text);
}

/// Nanoseconds as microseconds with three decimals, exactly (no double on the way).
void append_us(std::string& out, std::int64_t ns) {
  char buf[32];
  const char* sign = ns < 0 ? "-" : "";
  const std::uint64_t a = ns < 0 ? std::uint64_t(-ns) : std::uint64_t(ns);
  std::snprintf(buf, sizeof buf, "%s%" PRIu64 ".%03" PRIu64, sign, a / 1000, a % 1000);
  out += buf;
}

void append_peers(std::string& out, const trace_peers& p) {
  out += '[';
  for (std::uint8_t i = 0; i < p.named; ++i) {
    if (i > 0) out += ',';
    append_uint(out, p.ranks[i]);
  }
  out += ']';
}

std::string_view algorithm_of(const trace_event& e) {
  return {e.algorithm.data(), ::strnlen(e.algorithm.data(), e.algorithm.size())};
}

void append_traffic(std::string& out, const trace_traffic& t) {
  out += "\"to\":";
  append_peers(out, t.to);
  out += ",\"from\":";
  append_peers(out, t.from);
  if (t.to.others || t.from.others) out += ",\"more_peers\":true";
  append_field(out, "bytes_sent", t.bytes_sent);
  append_field(out, "bytes_received", t.bytes_received);
  append_field(out, "chunks_sent", t.chunks_sent);
  append_field(out, "chunks_received", t.chunks_received);
}

void append_event(std::string& out, const trace_event& e, std::int64_t wall_offset_ns) {
  out += "{\"ph\":\"X\",\"pid\":";
  append_uint(out, e.rank);
  append_field(out, "tid", e.track);
  out += ",\"ts\":";
  append_us(out, e.start_ns + wall_offset_ns);
  out += ",\"dur\":";
  append_us(out, e.duration_ns);
  if (e.is_step) {
    out += ",\"cat\":\"step\",\"name\":\"step ";
    append_uint(out, e.step);
    out += "\",\"args\":{\"step\":";
    append_uint(out, e.step);
    out += ',';
    append_traffic(out, e.traffic);
    out += "}}";
    return;
  }
  out += ",\"cat\":\"collective\",\"name\":";
  append_string(out, std::string{e.operation} + " " + std::string{algorithm_of(e)});
  out += ",\"args\":{\"operation\":";
  append_string(out, e.operation);
  append_text_field(out, "algorithm", algorithm_of(e));
  append_field(out, "count", e.count);
  if (!e.element_type.empty()) {
    append_text_field(out, "dtype", e.element_type);
  }
  if (!e.reduction.empty()) {
    append_text_field(out, "reduce_op", e.reduction);
  }
  if (e.rooted) {
    append_field(out, "root", e.root);
  }
  append_field(out, "bytes", e.bytes);
  append_field(out, "sequence", e.sequence);
  if (e.api.empty()) {
    append_field(out, "communicator", e.communicator);
  } else {
    append_text_field(out, "api", e.api);
  }
  append_field(out, "rank", e.comm_rank);
  append_field(out, "size", e.comm_size);
  out += ',';
  append_traffic(out, e.traffic);
  append_text_field(out, "outcome", e.error ? e.error.message() : "ok");
  out += "}}";
}

void append_metadata(std::string& out, std::uint32_t rank, const char* name, std::int64_t tid,
                     std::string_view key, std::string_view text, std::uint64_t number) {
  out += "{\"ph\":\"M\",\"pid\":";
  append_uint(out, rank);
  if (tid >= 0) {
    append_field(out, "tid", std::uint64_t(tid));
  }
  out += ",\"name\":\"";
  out += name;
  out += "\",\"args\":{\"";
  out += key;
  out += "\":";
  if (text.empty()) {
    append_uint(out, number);
  } else {
    append_string(out, text);
  }
  out += "}}";
}

std::size_t max_events_from_env() {
  const char* v = std::getenv("VESSEL_TRACE_MAX_EVENTS");
  if (v == nullptr || *v == '\0') return trace_recorder::default_max_events;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0') {
    std::fprintf(stderr, "vessel: VESSEL_TRACE_MAX_EVENTS=%s is not a number; using %zu\n", v,
                 trace_recorder::default_max_events);
    return trace_recorder::default_max_events;
  }
  return static_cast<std::size_t>(n);
}

}  // namespace

// -- trace_recorder

trace_recorder::trace_recorder(std::string path, std::size_t max_events)
    : path_(std::move(path)), max_events_(max_events) {
  using namespace std::chrono;
  const auto wall = duration_cast<nanoseconds>(system_clock::now().time_since_epoch()).count();
  wall_offset_ns_ = wall - trace_now();
}

trace_recorder::~trace_recorder() {
  std::set<std::uint32_t> ranks;
  {
    std::lock_guard lock{mutex_};
    ranks = unwritten_;
  }
  for (std::uint32_t r : ranks) {
    if (auto w = write(r); !w) {
      std::fprintf(stderr, "vessel: VESSEL_TRACE: cannot write %s: %s\n",
                   rank_path(path_, r).c_str(), w.error().message().c_str());
    }
  }
}

trace_recorder* trace_recorder::global() noexcept {
  static const std::unique_ptr<trace_recorder> recorder = []() -> std::unique_ptr<trace_recorder> {
    const char* path = std::getenv("VESSEL_TRACE");
    if (path == nullptr || *path == '\0') return nullptr;
    return std::make_unique<trace_recorder>(path, max_events_from_env());
  }();
  return recorder.get();
}

std::string trace_recorder::rank_path(std::string_view path, std::uint32_t rank) {
  const std::string tag = ".rank" + std::to_string(rank);
  const std::size_t slash = path.rfind('/');
  const std::size_t dot = path.rfind('.');
  const bool has_extension =
      dot != std::string_view::npos && (slash == std::string_view::npos || dot > slash + 1);
  if (!has_extension) return std::string{path} + tag + ".json";
  return std::string{path.substr(0, dot)} + tag + std::string{path.substr(dot)};
}

void trace_recorder::record(std::span<const trace_event> events) {
  if (events.empty()) return;
  std::lock_guard lock{mutex_};
  if (events_.capacity() == 0) events_.reserve(max_events_);  // once: no growth later
  const std::uint32_t rank = events.front().rank;
  unwritten_.insert(rank);
  if (events_.size() + events.size() > max_events_) {
    dropped_[rank] += events.size();
    return;
  }
  events_.insert(events_.end(), events.begin(), events.end());
}

std::vector<trace_event> trace_recorder::events(std::uint32_t rank) const {
  std::lock_guard lock{mutex_};
  std::vector<trace_event> mine;
  for (const trace_event& e : events_) {
    if (e.rank == rank) mine.push_back(e);
  }
  return mine;
}

std::uint64_t trace_recorder::dropped(std::uint32_t rank) const {
  std::lock_guard lock{mutex_};
  auto it = dropped_.find(rank);
  return it == dropped_.end() ? 0 : it->second;
}

std::string trace_recorder::json(std::uint32_t rank) const {
  const std::vector<trace_event> mine = events(rank);
  const std::uint64_t lost = dropped(rank);
  std::string out;
  out.reserve(256 + mine.size() * 320);
  out += "{\"traceEvents\":[\n";
  append_metadata(out, rank, "process_name", -1, "name", "rank " + std::to_string(rank), 0);
  out += ",\n";
  append_metadata(out, rank, "process_sort_index", -1, "sort_index", {}, rank);
  std::map<std::uint32_t, std::string_view> tracks;  // track -> its API's name (empty: none)
  for (const trace_event& e : mine) tracks.emplace(e.track, e.api);
  for (const auto& [t, api] : tracks) {
    const std::uint32_t comm = t / trace_lanes_per_communicator;
    const std::uint32_t lane = t % trace_lanes_per_communicator;
    std::string name = api.empty() ? "communicator " + std::to_string(comm) : std::string{api};
    if (lane > 0 && api.empty()) name += " (overlapping " + std::to_string(lane) + ")";
    out += ",\n";
    append_metadata(out, rank, "thread_name", t, "name", name, 0);
    out += ",\n";
    append_metadata(out, rank, "thread_sort_index", t, "sort_index", {}, t);
  }
  std::int64_t last_ns = 0;
  for (const trace_event& e : mine) {
    out += ",\n";
    append_event(out, e, wall_offset_ns_);
    last_ns = std::max(last_ns, e.start_ns + e.duration_ns);
  }
  if (lost > 0) {
    out += ",\n{\"ph\":\"i\",\"s\":\"p\",\"pid\":";
    append_uint(out, rank);
    out += ",\"tid\":0,\"ts\":";
    append_us(out, last_ns + wall_offset_ns_);
    out += ",\"name\":\"trace truncated: ";
    append_uint(out, lost);
    out += " events dropped (VESSEL_TRACE_MAX_EVENTS)\"}";
  }
  out += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"vessel_rank\":";
  append_uint(out, rank);
  append_field(out, "events", mine.size());
  append_field(out, "max_events", max_events_);
  append_field(out, "dropped_events", lost);
  out += ",\"truncated\":";
  out += lost > 0 ? "true" : "false";
  out += ",\"clock\":\"ts in microseconds since the Unix epoch\"}}\n";
  return out;
}

result<void> trace_recorder::write(std::uint32_t rank) {
  {
    std::lock_guard lock{mutex_};
    unwritten_.erase(rank);
  }
  const std::string text = json(rank);
  const std::string final_path = rank_path(path_, rank);
  const std::string temporary = final_path + ".tmp" + std::to_string(::getpid());
  std::FILE* f = std::fopen(temporary.c_str(), "w");
  if (f == nullptr) return std::error_code{errno, std::generic_category()};
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !written) {
    const int e = written ? errno : write_errno;
    std::remove(temporary.c_str());
    return std::error_code{e, std::generic_category()};
  }
  if (std::rename(temporary.c_str(), final_path.c_str()) != 0) {
    const int e = errno;
    std::remove(temporary.c_str());
    return std::error_code{e, std::generic_category()};
  }
  return outcome::success();
}

// -- collective_trace

collective_trace::collective_trace(trace_recorder& recorder, const trace_event& header,
                                   std::size_t expected_steps, std::int64_t now_ns)
    : recorder_(&recorder), header_(header), start_ns_(now_ns) {
  expected_steps = std::min<std::size_t>(expected_steps, max_steps);
  steps_.reserve(expected_steps);
  out_.reserve(expected_steps + 1);
}

collective_trace::step_record& collective_trace::at(std::uint32_t step, std::int64_t now_ns) {
  step = std::min(step, max_steps - 1);
  if (step >= steps_.size()) steps_.resize(step + 1);  // within the reserve but for odd algorithms
  step_record& s = steps_[step];
  if (s.first_ns < 0) {
    s.first_ns = now_ns;
    s.step = step;
  }
  s.last_ns = std::max(s.last_ns, now_ns);
  return s;
}

void collective_trace::sent(std::uint32_t step, std::uint32_t peer, std::size_t bytes,
                            std::int64_t now_ns) {
  trace_traffic& t = at(step, now_ns).traffic;
  t.bytes_sent += bytes;
  ++t.chunks_sent;
  t.to.add(peer);
}

void collective_trace::received(std::uint32_t step, std::uint32_t peer, std::size_t bytes,
                                std::int64_t now_ns) {
  trace_traffic& t = at(step, now_ns).traffic;
  t.bytes_received += bytes;
  ++t.chunks_received;
  t.from.add(peer);
}

void collective_trace::finish(std::error_code error, std::int64_t now_ns) {
  const std::int64_t end_ns = std::max(now_ns, start_ns_);
  out_.clear();
  out_.push_back(header_);  // the collective itself; completed below (out_ may grow: no reference)
  trace_traffic sum;

  // Steps in their order (rounds follow each other in every algorithm of algorithms/), laid end
  // to end (the header says why). Not by first activity: a chunk from a peer a round ahead
  // arrives, and is recorded, before this rank's own part of the round before.
  std::int64_t cursor = start_ns_;
  for (auto it = steps_.begin(); it != steps_.end(); ++it) {
    if (it->first_ns < 0) continue;
    const std::int64_t begin = std::clamp(it->first_ns, cursor, end_ns);
    const std::int64_t end = std::clamp(it->last_ns, begin, end_ns);
    cursor = end;
    trace_event& e = out_.emplace_back(header_);
    e.is_step = true;
    e.step = it->step;
    e.start_ns = begin;
    e.duration_ns = end - begin;
    e.traffic = it->traffic;
    sum.bytes_sent += it->traffic.bytes_sent;
    sum.bytes_received += it->traffic.bytes_received;
    sum.chunks_sent += it->traffic.chunks_sent;
    sum.chunks_received += it->traffic.chunks_received;
    for (std::uint8_t i = 0; i < it->traffic.to.named; ++i) sum.to.add(it->traffic.to.ranks[i]);
    for (std::uint8_t i = 0; i < it->traffic.from.named; ++i) {
      sum.from.add(it->traffic.from.ranks[i]);
    }
    sum.to.others |= it->traffic.to.others;
    sum.from.others |= it->traffic.from.others;
  }
  trace_event& whole = out_.front();
  whole.start_ns = start_ns_;
  whole.duration_ns = end_ns - start_ns_;
  whole.error = error;
  whole.is_step = false;
  whole.traffic = sum;
  recorder_->record(out_);
}

}  // namespace vessel::actors
