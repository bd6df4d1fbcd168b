#pragma once
// A tiny in-test network for the algorithm state machines: every rank in one process, a FIFO per
// directed pair of ranks, and a seeded choice of which pair delivers next, so that one seed is one
// interleaving of deliveries across peers, replayable. A chunk answered not_yet stays at the head
// of its FIFO (links are ordered) until the receiver has made progress elsewhere. With
// land_chunks(true), a chunk whose receiver names a place for it (algorithm::landing) is written
// there the moment it is sent, the earliest a link could land it, and on_receive later gets that
// place as its data; with reduce_landed_chunks(type, op) as well, a chunk whose receiver names a
// place to reduce it into (algorithm::reducing_landing) is reduced there the same moment.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collectives/algorithms/algorithm.hpp"
#include "collectives/reduce.hpp"

namespace vessel::collectives::testing {

struct rank_buffers {
  std::vector<std::byte> input;
  std::vector<std::byte> output;
  std::vector<std::byte> scratch;
  /// In place: the input the algorithm sees starts at this byte of output (0: input aliases
  /// output; root * block: gather's root block) ...
  std::optional<std::size_t> input_in_output;
  /// ... or the output it sees starts at this byte of input (scatter's root block).
  std::optional<std::size_t> output_in_input;
};

/// One algorithm object per rank of params.size, each with its own params.rank.
template <class Algorithm>
std::vector<std::unique_ptr<algorithm>> make_ranks(algorithm_params params) {
  std::vector<std::unique_ptr<algorithm>> ranks;
  for (std::uint32_t r = 0; r < params.size; ++r) {
    params.rank = r;
    ranks.push_back(std::make_unique<Algorithm>(params));
  }
  return ranks;
}

class loop_network {
 public:
  struct message {
    std::uint32_t from = 0;
    std::uint32_t step = 0;
    std::uint32_t chunk = 0;
    std::vector<std::byte> bytes;
    std::span<const std::byte> landed;  ///< where it was written on sending (land_chunks)
  };

  loop_network(std::vector<std::unique_ptr<algorithm>> ranks, std::vector<rank_buffers> buffers,
               std::uint64_t seed)
      : ranks_(std::move(ranks)),
        buffers_(std::move(buffers)),
        spans_(ranks_.size()),
        started_(ranks_.size(), false),
        delivered_to_(ranks_.size(), 0),
        random_(seed) {
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      buffers_[r].scratch.resize(ranks_[r]->scratch_bytes());
    }
  }

  std::uint32_t size() const { return static_cast<std::uint32_t>(ranks_.size()); }
  algorithm& rank(std::uint32_t r) { return *ranks_[r]; }
  rank_buffers& buffers(std::uint32_t r) { return buffers_[r]; }
  std::size_t delivered() const { return delivered_; }
  /// Chunks rank `r` consumed so far.
  std::size_t delivered_to(std::uint32_t r) const { return delivered_to_[r]; }
  /// Write chunks into their receivers' landing places as they are sent (see above).
  void land_chunks(bool on) { land_ = on; }
  /// Also reduce chunks where their receivers' reducing_landing says, in `type` and `op`.
  void reduce_landed_chunks(dtype type, reduce_op op) {
    land_ = true;
    fold_ = std::pair{type, op};
  }
  /// Chunks written into a landing place so far (reduced ones included).
  std::size_t landed() const { return landed_; }
  /// Chunks reduced into a reducing_landing place so far.
  std::size_t reduced_on_landing() const { return reduced_on_landing_; }
  /// Chunks offered to a started rank and answered not_yet (each offer counts).
  std::size_t refusals() const { return refusals_; }
  bool quiet() const { return active_.empty(); }
  bool stalled() const { return stalled_; }
  bool all_done() const {
    for (const auto& r : ranks_) {
      if (!r->done()) return false;
    }
    return true;
  }

  std::error_code start(std::uint32_t r) {
    rank_buffers& b = buffers_[r];
    algorithm_buffers& spans = spans_[r];
    spans = {b.input, b.output, b.scratch};
    if (b.input_in_output) spans.input = std::span(b.output).subspan(*b.input_in_output);
    if (b.output_in_input) spans.output = std::span(b.input).subspan(*b.output_in_input);
    std::vector<send_step> out;
    auto started = ranks_[r]->start(spans, out);
    if (!started) return started.error();
    started_[r] = true;
    post(r, out);
    ++generation_;  // a started rank may accept what it refused before
    refused_ = 0;
    return {};
  }

  /// Starts the ranks in a seeded random order with a random number of deliveries between
  /// starts (so chunks reach ranks that have not started), then delivers until quiet.
  std::error_code run() {
    std::vector<std::uint32_t> order(size());
    for (std::uint32_t r = 0; r < size(); ++r) order[r] = r;
    std::shuffle(order.begin(), order.end(), random_);
    for (std::uint32_t r : order) {
      if (auto e = start(r)) return e;
      if (auto e = deliver(std::uniform_int_distribution<std::size_t>(0, 8)(random_))) return e;
    }
    return deliver();
  }

  /// Delivers up to `limit` chunks. Stops at the first error an algorithm returns, or when every
  /// waiting chunk is refused with not_yet (stalled(): a deadlock once every rank has started).
  std::error_code deliver(std::size_t limit = static_cast<std::size_t>(-1)) {
    std::vector<send_step> out;
    stalled_ = false;
    while (limit > 0 && !active_.empty()) {
      if (refused_ == active_.size()) {
        stalled_ = true;
        return {};
      }
      const std::uint64_t key =
          active_[std::uniform_int_distribution<std::size_t>(0, active_.size() - 1)(random_)];
      auto& refused_at = refused_at_[key];
      if (refused_at == generation_) continue;  // refused since the last progress
      auto& queue = queues_[key];
      const auto to = static_cast<std::uint32_t>(key & 0xFFFFFFFFu);
      message& m = queue.front();
      out.clear();
      const std::span<const std::byte> data = m.landed.empty() ? std::span<const std::byte>{m.bytes}
                                                               : m.landed;
      auto status = ranks_[to]->on_receive(m.from, m.step, m.chunk, data, out);
      if (!status) return status.error();
      if (status.value() == receive_status::not_yet) {
        refused_at = generation_;
        ++refused_;
        if (started_[to]) ++refusals_;
        continue;
      }
      queue.pop_front();
      if (queue.empty()) deactivate(key);
      ++delivered_;
      ++delivered_to_[to];
      --limit;
      post(to, out);
      ++generation_;
      refused_ = 0;
    }
    return {};
  }

  /// Injects a chunk as if `from` had sent it (malformed-input tests).
  std::error_code inject(std::uint32_t from, std::uint32_t to, std::uint32_t step,
                         std::uint32_t chunk, std::vector<std::byte> bytes,
                         receive_status* status = nullptr) {
    std::vector<send_step> out;
    auto r = ranks_[to]->on_receive(from, step, chunk, bytes, out);
    if (!r) return r.error();
    if (status != nullptr) *status = r.value();
    return {};
  }

  /// The chunks waiting from `from` to `to`, oldest first.
  std::deque<message>& queue(std::uint32_t from, std::uint32_t to) {
    return queues_[key_of(from, to)];
  }

 private:
  static std::uint64_t key_of(std::uint32_t from, std::uint32_t to) {
    return std::uint64_t{from} << 32 | to;
  }

  void post(std::uint32_t from, const std::vector<send_step>& steps) {
    for (const send_step& s : steps) {
      ASSERT_LT(s.peer, size()) << "rank " << from << " sends to a rank outside the world";
      ASSERT_NE(s.peer, from) << "rank " << from << " sends to itself";
      const algorithm_buffers& b = spans_[from];
      const std::span<const std::byte> source = s.buffer == buffer_id::scratch  ? b.scratch
                                                : s.buffer == buffer_id::output ? b.output
                                                                                : b.input;
      ASSERT_LE(s.offset + s.bytes, source.size()) << "rank " << from << " sends past a buffer";
      const auto bytes = source.subspan(s.offset, s.bytes);
      message m{from, s.step, s.chunk, {bytes.begin(), bytes.end()}, {}};
      if (land_ && started_[s.peer] && !bytes.empty()) {
        const std::span<std::byte> place = ranks_[s.peer]->landing(from, s.step, s.chunk);
        if (!place.empty()) {
          ASSERT_EQ(place.size(), bytes.size()) << "rank " << s.peer << " lands a chunk of "
                                                << bytes.size() << " bytes in " << place.size();
          std::memcpy(place.data(), bytes.data(), bytes.size());
          m.landed = place;
          ++landed_;
        } else if (const reduce_landing fold =
                       fold_ ? ranks_[s.peer]->reducing_landing(from, s.step, s.chunk)
                             : reduce_landing{};
                   !fold.empty()) {
          ASSERT_EQ(fold.place.size(), bytes.size()) << "rank " << s.peer << " reduces a chunk of "
                                                      << bytes.size() << " bytes into "
                                                      << fold.place.size();
          ASSERT_EQ(fold.operand.size(), bytes.size());
          const bool apart = fold.operand.data() + fold.operand.size() <= fold.place.data() ||
                             fold.place.data() + fold.place.size() <= fold.operand.data();
          ASSERT_TRUE(apart) << "rank " << s.peer << ": the operand overlaps the place";
          ASSERT_TRUE(reduce_to(fold.place, fold.operand, bytes, fold_->first, fold_->second));
          m.landed = fold.place;
          ++landed_;
          ++reduced_on_landing_;
        }
      }
      const std::uint64_t key = key_of(from, s.peer);
      auto& queue = queues_[key];
      if (queue.empty()) activate(key);
      queue.push_back(std::move(m));
    }
  }

  void activate(std::uint64_t key) {
    position_[key] = active_.size();
    active_.push_back(key);
  }
  void deactivate(std::uint64_t key) {
    const std::size_t at = position_[key];
    active_[at] = active_.back();
    position_[active_[at]] = at;
    active_.pop_back();
    position_.erase(key);
  }

  std::vector<std::unique_ptr<algorithm>> ranks_;
  std::vector<rank_buffers> buffers_;
  std::vector<algorithm_buffers> spans_;  ///< what each rank was started with
  std::vector<bool> started_;
  std::vector<std::size_t> delivered_to_;
  std::mt19937_64 random_;
  std::unordered_map<std::uint64_t, std::deque<message>> queues_;
  std::unordered_map<std::uint64_t, std::size_t> position_;
  std::unordered_map<std::uint64_t, std::uint64_t> refused_at_;
  std::vector<std::uint64_t> active_;
  std::uint64_t generation_ = 1;
  bool stalled_ = false;
  bool land_ = false;
  std::optional<std::pair<dtype, reduce_op>> fold_;
  std::size_t landed_ = 0;
  std::size_t reduced_on_landing_ = 0;
  std::size_t refused_ = 0;  ///< distinct queues refused since the last progress
  std::size_t delivered_ = 0;
  std::size_t refusals_ = 0;
};

}  // namespace vessel::collectives::testing
