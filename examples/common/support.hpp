#pragma once
// What every example shares: `--key value` arguments, aligned tables, machine-readable progress
// and summary lines for `make demo`'s renderer (scripts/demo-render), and the VESSEL_STATS=1
// report printed at exit (per-link counters from comm::link_stats, per-collective timings kept by
// collective_stats).
//
// Progress and summary lines are ordinary output that start with '@' so that a person reading
// the raw log still understands them:
//   @progress <example> <done> <total>
//   @summary <example> <key>=<value> ...

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "actors/comm.hpp"

namespace vessel::examples {

/// `--name value` pairs and bare `--flag`s; unknown names are an error (a typo must not silently
/// run the default).
class arguments {
 public:
  arguments(int argc, char** argv, std::vector<std::string_view> known) {
    for (int i = 1; i < argc; ++i) {
      std::string_view a = argv[i];
      if (a.substr(0, 2) != "--") throw std::invalid_argument("unexpected argument " + std::string(a));
      a.remove_prefix(2);
      bool ok = false;
      for (auto k : known) ok = ok || k == a;
      if (!ok) throw std::invalid_argument("unknown option --" + std::string(a));
      const bool has_value = i + 1 < argc && std::string_view(argv[i + 1]).substr(0, 2) != "--";
      values_[std::string(a)] = has_value ? argv[++i] : "1";
    }
  }
  bool has(std::string_view k) const { return values_.count(std::string(k)) != 0; }
  std::string text(std::string_view k, std::string fallback) const {
    auto it = values_.find(std::string(k));
    return it == values_.end() ? fallback : it->second;
  }
  /// An integer with an optional K/M/G suffix (powers of 1024: sizes in bytes).
  std::uint64_t size(std::string_view k, std::uint64_t fallback) const {
    auto it = values_.find(std::string(k));
    if (it == values_.end()) return fallback;
    char* end = nullptr;
    std::uint64_t v = std::strtoull(it->second.c_str(), &end, 10);
    if (end == it->second.c_str()) throw std::invalid_argument("--" + it->first + " wants a number");
    switch (*end) {
      case 'k': case 'K': v <<= 10; ++end; break;
      case 'm': case 'M': v <<= 20; ++end; break;
      case 'g': case 'G': v <<= 30; ++end; break;
      default: break;
    }
    if (*end != '\0') throw std::invalid_argument("--" + it->first + ": bad number " + it->second);
    return v;
  }
  double real(std::string_view k, double fallback) const {
    auto it = values_.find(std::string(k));
    return it == values_.end() ? fallback : std::strtod(it->second.c_str(), nullptr);
  }

 private:
  std::map<std::string, std::string> values_;
};

/// "4 KiB", "1 MiB", "8 B".
inline std::string human_bytes(std::uint64_t b) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (u < 3 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    ++u;
  }
  return std::to_string(b) + " " + units[u];
}

inline std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

/// Rows of cells printed with every column as wide as its widest cell (right-aligned but the
/// first), one printf per line so that vessel-run's line prefix keeps the table readable.
class table {
 public:
  explicit table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::FILE* out = stdout) const {
    std::vector<std::size_t> width;
    for (const auto& r : rows_) {
      if (width.size() < r.size()) width.resize(r.size(), 0);
      for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
    }
    for (std::size_t n = 0; n < rows_.size(); ++n) {
      std::string line;
      for (std::size_t i = 0; i < rows_[n].size(); ++i) {
        const std::string& c = rows_[n][i];
        const std::string pad(width[i] - c.size(), ' ');
        line += i == 0 ? c + pad : "  " + pad + c;
      }
      std::fprintf(out, "%s\n", line.c_str());
      if (n == 0) {
        std::size_t total = 0;
        for (auto w : width) total += w + 2;
        std::fprintf(out, "%s\n", std::string(total - 2, '-').c_str());
      }
    }
    std::fflush(out);
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

/// "@progress <example> <done> <total>", at most every 1/50 of the way (and the last one).
class progress {
 public:
  progress(std::string example, std::uint64_t total, bool enabled)
      : example_(std::move(example)), total_(total), enabled_(enabled) {}
  void update(std::uint64_t done) {
    if (!enabled_ || total_ == 0) return;
    const std::uint64_t bucket = done * 50 / total_;
    if (bucket == last_bucket_ && done != total_) return;
    last_bucket_ = bucket;
    std::printf("@progress %s %llu %llu\n", example_.c_str(), static_cast<unsigned long long>(done),
                static_cast<unsigned long long>(total_));
    std::fflush(stdout);
  }

 private:
  std::string example_;
  std::uint64_t total_;
  bool enabled_;
  std::uint64_t last_bucket_ = UINT64_MAX;
};

/// Calls, bytes and time per collective, for the VESSEL_STATS=1 report.
class collective_stats {
 public:
  struct entry {
    std::uint64_t calls = 0;
    std::uint64_t bytes = 0;
    double seconds = 0;
    double max_seconds = 0;
  };
  void add(const std::string& op, std::uint64_t bytes, double seconds) {
    entry& e = entries_[op];
    ++e.calls;
    e.bytes += bytes;
    e.seconds += seconds;
    e.max_seconds = std::max(e.max_seconds, seconds);
  }
  /// Runs `fn` (returning a result<void> or nothing) and records it under `op`.
  template <class F>
  auto timed(const std::string& op, std::uint64_t bytes, F&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    if constexpr (std::is_void_v<decltype(fn())>) {
      fn();
      add(op, bytes, seconds_since(t0));
    } else {
      auto r = fn();
      add(op, bytes, seconds_since(t0));
      return r;
    }
  }
  const std::map<std::string, entry>& entries() const { return entries_; }

  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  std::map<std::string, entry> entries_;
};

inline bool stats_enabled() {
  const char* v = std::getenv("VESSEL_STATS");
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

inline const char* state_name(actors::peer_state s) {
  switch (s) {
    case actors::peer_state::connecting: return "connecting";
    case actors::peer_state::up: return "up";
    case actors::peer_state::reconnecting: return "reconnecting";
    case actors::peer_state::restarted: return "restarted";
    case actors::peer_state::down: return "down";
  }
  return "?";
}

/// With VESSEL_STATS=1: this rank's links and collectives as two tables. Call before finalize().
inline void print_stats(comm& world, const collective_stats& colls) {
  if (!stats_enabled()) return;
  const std::uint32_t me = world.rank();
  table links({"rank " + std::to_string(me) + " link", "state", "msgs out", "msgs in", "MiB out",
               "MiB in", "retrans", "stalls", "reconn", "restarts", "srtt us"});
  for (std::uint32_t p = 0; p < world.size(); ++p) {
    if (p == me) continue;
    const actors::peer_link_stats s = world.link_stats(p);
    links.add({"-> " + std::to_string(p), state_name(s.state), std::to_string(s.messages_sent),
               std::to_string(s.messages_received), fixed(double(s.bytes_sent) / (1 << 20), 2),
               fixed(double(s.bytes_received) / (1 << 20), 2), std::to_string(s.retransmits),
               std::to_string(s.credit_stalls), std::to_string(s.reconnects),
               std::to_string(s.restarts),
               fixed(std::chrono::duration<double, std::micro>(s.srtt).count(), 1)});
  }
  links.print();
  table ops({"rank " + std::to_string(me) + " collective", "calls", "MiB", "total ms", "mean us",
             "max us"});
  for (const auto& [name, e] : colls.entries()) {
    ops.add({name, std::to_string(e.calls), fixed(double(e.bytes) / (1 << 20), 2),
             fixed(e.seconds * 1e3, 1), fixed(e.seconds / double(e.calls) * 1e6, 1),
             fixed(e.max_seconds * 1e6, 1)});
  }
  ops.print();
  const actors::matcher_stats m = world.matching_stats();
  std::printf("rank %u matching: %llu arrived, %llu unexpected on arrival, peak unexpected %s, "
              "%llu backpressure episodes\n",
              me, static_cast<unsigned long long>(m.arrived),
              static_cast<unsigned long long>(m.arrived - m.matched_on_arrival),
              human_bytes(m.unexpected_peak_bytes).c_str(),
              static_cast<unsigned long long>(m.backpressure_episodes));
  std::fflush(stdout);
}

}  // namespace vessel::examples
