#include "collectives/sim/network.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <queue>
#include <random>
#include <sstream>
#include <utility>

#include "collectives/errc.hpp"
#include "collectives/sim/driver.hpp"

namespace vessel::collectives::sim {
namespace {

constexpr double never = std::numeric_limits<double>::infinity();

/// Recycles message buffers so a long run does not allocate per message once warm.
class buffer_pool {
 public:
  std::vector<std::byte> take(std::span<const std::byte> bytes) {
    std::vector<std::byte> buffer;
    if (!free_.empty()) {
      buffer = std::move(free_.back());
      free_.pop_back();
    }
    buffer.assign(bytes.begin(), bytes.end());
    return buffer;
  }
  void give(std::vector<std::byte>&& buffer) { free_.push_back(std::move(buffer)); }

 private:
  std::vector<std::vector<std::byte>> free_;
};

/// A received chunk's bytes; goes back to the pool when the driver is done with it.
class pooled_payload {
 public:
  pooled_payload(buffer_pool& pool, std::vector<std::byte>&& bytes)
      : pool_(&pool), bytes_(std::move(bytes)) {}
  pooled_payload(pooled_payload&& other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), bytes_(std::move(other.bytes_)) {}
  pooled_payload& operator=(pooled_payload&& other) noexcept {
    if (this != &other) {
      release();
      pool_ = std::exchange(other.pool_, nullptr);
      bytes_ = std::move(other.bytes_);
    }
    return *this;
  }
  ~pooled_payload() { release(); }

  const std::byte* data() const noexcept { return bytes_.data(); }
  std::size_t size() const noexcept { return bytes_.size(); }

 private:
  void release() {
    if (pool_ != nullptr) pool_->give(std::move(bytes_));
    pool_ = nullptr;
  }
  buffer_pool* pool_;
  std::vector<std::byte> bytes_;
};

struct message {
  std::uint32_t src = 0;
  std::uint32_t step = 0;
  std::uint32_t chunk = 0;
  std::vector<std::byte> bytes;
};

struct event {
  double time_s;
  std::uint64_t order;  ///< emission order: ties resolve the same way on every run
  std::uint32_t rank;
  std::uint32_t slot;  ///< message slot, or no_message for the rank's start
  bool operator>(const event& o) const noexcept {
    return time_s != o.time_s ? time_s > o.time_s : order > o.order;
  }
};
constexpr std::uint32_t no_message = std::numeric_limits<std::uint32_t>::max();

struct link_state {
  double busy_until_s = 0;
  double last_arrival_s = 0;
};

}  // namespace

network::network(network_config config)
    : config_(config), kill_at_(config.ranks == 0 ? 1 : config.ranks, never) {
  if (config_.ranks == 0) config_.ranks = 1;
}

void network::drop_link(std::uint32_t src, std::uint32_t dst, double from_s, double until_s) {
  auto& list = faults_[link_key(src, dst)];
  list.push_back({from_s, until_s, 0, true});
  std::sort(list.begin(), list.end(),
            [](const fault& a, const fault& b) { return a.from_s < b.from_s; });
}

void network::delay_link(std::uint32_t src, std::uint32_t dst, double extra_s, double from_s,
                         double until_s) {
  faults_[link_key(src, dst)].push_back({from_s, until_s, extra_s, false});
}

void network::kill_rank(std::uint32_t rank, double at_s) {
  if (rank < kill_at_.size()) kill_at_[rank] = at_s;
}

run_report network::run(std::span<algorithm* const> algorithms,
                        std::span<const algorithm_buffers> buffers) {
  const std::uint32_t ranks = config_.ranks;
  run_report report;
  if (algorithms.size() != ranks || buffers.size() != ranks) {
    report.status = run_report::outcome::failed;
    report.error = errc::invalid_argument;
    return report;
  }

  std::mt19937_64 random(config_.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  buffer_pool pool;
  std::vector<message> slots;
  std::vector<std::uint32_t> free_slots;
  std::priority_queue<event, std::vector<event>, std::greater<>> queue;
  std::unordered_map<std::uint64_t, link_state> links;
  std::vector<double> port_busy_until(config_.one_port ? ranks : 0, 0.0);
  std::uint64_t order = 0;

  std::vector<step_driver<pooled_payload>> drivers;
  drivers.reserve(ranks);
  report.ranks.resize(ranks);
  for (std::uint32_t r = 0; r < ranks; ++r) {
    drivers.emplace_back(*algorithms[r], buffers[r]);
    report.ranks[r].rank = r;
    const double start = config_.start_skew_s > 0 ? unit(random) * config_.start_skew_s : 0.0;
    queue.push({start, order++, r, no_message});
  }

  // Schedules a message emitted by `src` at `now`; returns its arrival time.
  auto schedule = [&](std::uint32_t src, double now, const send_step& s,
                      std::span<const std::byte> bytes) {
    const std::uint64_t key = link_key(src, s.peer);
    link_state& link = links[key];
    const double transmit = static_cast<double>(bytes.size()) * config_.link.beta_s_per_byte;
    double extra = config_.jitter_s > 0 ? unit(random) * config_.jitter_s : 0.0;
    const auto faults = faults_.find(key);
    if (faults != faults_.end()) {
      for (const fault& f : faults->second) {
        if (!f.drop && now >= f.from_s && now < f.until_s) extra += f.extra_s;
      }
    }
    double start = std::max(now, link.busy_until_s);
    if (config_.one_port) start = std::max(start, port_busy_until[src]);
    double arrival = start + transmit + config_.link.alpha_s + extra;
    if (faults != faults_.end()) {
      // Outages sorted by start: one pass pushes the message past every outage it overlaps.
      for (const fault& f : faults->second) {
        if (f.drop && start < f.until_s && arrival > f.from_s) {
          start = f.until_s;
          arrival = start + transmit + config_.link.alpha_s + extra;
          ++report.resent;
        }
      }
    }
    link.busy_until_s = start + transmit;
    if (config_.one_port) port_busy_until[src] = std::max(port_busy_until[src], start + transmit);
    arrival = std::max(arrival, link.last_arrival_s);  // FIFO even when a delay ends
    link.last_arrival_s = arrival;

    std::uint32_t slot;
    if (!free_slots.empty()) {
      slot = free_slots.back();
      free_slots.pop_back();
    } else {
      slot = static_cast<std::uint32_t>(slots.size());
      slots.emplace_back();
    }
    message& m = slots[slot];
    m.src = src;
    m.step = s.step;
    m.chunk = s.chunk;
    m.bytes = pool.take(bytes);
    queue.push({arrival, order++, s.peer, slot});
    ++report.messages;
    report.bytes += bytes.size();
  };

  auto fail = [&](std::uint32_t rank, std::error_code error) {
    report.status = run_report::outcome::failed;
    report.error = error;
    report.failed_rank = rank;
  };

  while (!queue.empty()) {
    const event e = queue.top();
    queue.pop();
    auto& driver = drivers[e.rank];
    const bool dead = e.time_s >= kill_at_[e.rank];
    const bool was_done = driver.done();
    auto emit = [&](const send_step& s, std::span<const std::byte> bytes) {
      schedule(e.rank, e.time_s, s, bytes);
    };

    if (e.slot == no_message) {
      if (dead) continue;
      if (auto started = driver.start(emit); !started) {
        fail(e.rank, started.error());
        break;
      }
    } else {
      message& m = slots[e.slot];
      pooled_payload payload(pool, std::move(m.bytes));
      const std::uint32_t src = m.src, step = m.step, chunk = m.chunk;
      free_slots.push_back(e.slot);
      if (dead) {
        ++report.discarded;
        continue;
      }
      if (auto delivered = driver.deliver(src, step, chunk, std::move(payload), emit); !delivered) {
        fail(e.rank, delivered.error());
        break;
      }
    }
    if (!was_done && driver.done()) {
      report.ranks[e.rank].done = true;
      report.ranks[e.rank].done_s = e.time_s;
      report.completion_s = std::max(report.completion_s, e.time_s);
    }
  }

  std::vector<std::uint32_t> waits;
  for (std::uint32_t r = 0; r < ranks; ++r) {
    rank_report& rr = report.ranks[r];
    rr.killed = kill_at_[r] != never;
    rr.killed_at_s = kill_at_[r];
    if (rr.done) continue;
    waits.clear();
    rr.round = algorithms[r]->waiting_for(waits);
    rr.waits_for = waits;
    rr.kept_chunks = drivers[r].kept_count();
    if (!rr.killed && report.status == run_report::outcome::completed) {
      report.status = run_report::outcome::blocked;
    }
  }
  return report;
}

std::vector<std::uint32_t> run_report::blocked_ranks() const {
  std::vector<std::uint32_t> out;
  for (const auto& r : ranks) {
    if (!r.done && !r.killed) out.push_back(r.rank);
  }
  return out;
}

std::vector<std::uint32_t> run_report::root_causes() const {
  // Walk the wait-for graph from every blocked rank; collect the killed ranks reached.
  std::vector<char> seen(ranks.size(), 0);
  std::vector<std::uint32_t> stack = blocked_ranks();
  for (auto r : stack) seen[r] = 1;
  std::vector<std::uint32_t> causes;
  while (!stack.empty()) {
    const std::uint32_t r = stack.back();
    stack.pop_back();
    for (std::uint32_t peer : ranks[r].waits_for) {
      if (peer >= ranks.size() || seen[peer]) continue;
      seen[peer] = 1;
      if (ranks[peer].killed) {
        causes.push_back(peer);
      } else if (!ranks[peer].done) {
        stack.push_back(peer);
      }
    }
  }
  std::sort(causes.begin(), causes.end());
  return causes;
}

std::string run_report::explain() const {
  std::ostringstream s;
  switch (status) {
    case outcome::completed: s << "completed"; break;
    case outcome::blocked: s << "blocked"; break;
    case outcome::failed: s << "failed on rank " << failed_rank << ": " << error.message(); break;
  }
  s << " at " << completion_s * 1e6 << " us; " << messages << " messages, " << bytes << " bytes, "
    << resent << " resent, " << discarded << " discarded\n";
  for (const auto& r : ranks) {
    if (r.done) continue;
    s << "rank " << r.rank;
    if (r.killed) {
      s << " was killed at " << r.killed_at_s * 1e6 << " us\n";
      continue;
    }
    s << " in round " << r.round << " waits for";
    if (r.waits_for.empty()) s << " nobody it can name";
    for (std::size_t i = 0; i < r.waits_for.size(); ++i) {
      const std::uint32_t peer = r.waits_for[i];
      s << (i == 0 ? " rank " : ", rank ") << peer;
      if (peer < ranks.size()) {
        if (ranks[peer].killed) {
          s << " (killed)";
        } else if (!ranks[peer].done) {
          s << " (blocked)";
        }
      }
    }
    if (r.kept_chunks != 0) s << "; chunks kept for later rounds: " << r.kept_chunks;
    s << '\n';
  }
  const auto causes = root_causes();
  if (!causes.empty()) {
    s << "root cause: killed rank";
    for (auto c : causes) s << ' ' << c;
    s << '\n';
  }
  return s.str();
}

}  // namespace vessel::collectives::sim
