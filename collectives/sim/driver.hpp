#pragma once
// step_driver: the part of driving an algorithm (collectives/algorithms/algorithm.hpp) that does
// not depend on how bytes move, shared by the simulated network and the collective actor.
//
//   step_driver<Payload> d(algo, buffers);
//   d.start(emit);                                   // once; chunks may be delivered before
//   d.deliver(peer, step, chunk, std::move(p), emit);  // per chunk, in arrival order per peer
//   d.done();
//
// - emit(const send_step&, std::span<const std::byte> bytes) is called for every send step, in
//   the order the algorithm made them, with the step's bytes already resolved in its buffer. It
//   must copy them out (or finish sending them) before it returns: the driver calls the
//   algorithm again right after, and a later step may overwrite that region. emit must not call
//   back into the driver.
// - Payload owns one received chunk's bytes (a pooled slice, a std::vector<std::byte>, ...) and
//   exposes data() (a std::byte pointer) and size(). A chunk the algorithm answers not_yet for
//   is kept, and so is every later chunk from the same peer (links are ordered per peer, so the
//   algorithm sees each peer's chunks in order); kept chunks are offered again, oldest first,
//   each time the algorithm consumes something, until none is consumed.
// - Any error (the algorithm's, or a send step outside its buffer) is returned; the collective
//   has then failed and the driver must not be used again.
// - No allocation per chunk once the step list and the kept list have grown to their working
//   size (kept chunks are rare: a peer one round ahead); rebind() reuses a driver and its
//   capacity for the next collective.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "collectives/algorithms/algorithm.hpp"
#include "collectives/errc.hpp"
#include "wire/result.hpp"

namespace vessel::collectives {

/// A chunk the driver holds until the algorithm accepts it.
struct kept_chunk_info {
  std::uint32_t peer = 0;
  std::uint32_t step = 0;
  std::uint32_t chunk = 0;
};

template <class Payload>
class step_driver {
 public:
  step_driver(algorithm& algo, const algorithm_buffers& buffers)
      : algo_(&algo), buffers_(buffers) {}

  template <class Emit>
  result<void> start(Emit&& emit) {
    return start(emit, [] {});
  }

  /// As start(emit), calling before_sends() once the algorithm has started (its landing places
  /// are fixed) and before the first send: a driver over real links posts its receives there, so
  /// that what the peers answer lands in place instead of waiting, copied, as unexpected.
  template <class Emit, class BeforeSends>
  result<void> start(Emit&& emit, BeforeSends&& before_sends) {
    VESSEL_TRY(algo_->start(buffers_, out_));
    before_sends();
    VESSEL_TRY(emit_pending(emit));
    return reoffer(emit);  // chunks may arrive before start: the algorithm answers not_yet
  }

  template <class Emit>
  result<void> deliver(std::uint32_t peer, std::uint32_t step, std::uint32_t chunk, Payload payload,
                       Emit&& emit) {
    ++chunks_received_;
    const bool peer_has_kept = std::any_of(kept_.begin(), kept_.end(),
                                           [peer](const kept& k) { return k.info.peer == peer; });
    if (peer_has_kept) {  // stay behind the peer's older chunks
      kept_.push_back({{peer, step, chunk}, std::move(payload)});
      return outcome::success();
    }
    VESSEL_TRY(status, offer(peer, step, chunk, view(payload), emit));
    if (status == receive_status::not_yet) {
      kept_.push_back({{peer, step, chunk}, std::move(payload)});
      return outcome::success();
    }
    return reoffer(emit);
  }

  /// Drives a fresh algorithm with the same driver: kept chunks are dropped, the capacity of
  /// the step and kept lists stays (a driver reused across collectives allocates nothing).
  void rebind(algorithm& algo, const algorithm_buffers& buffers) {
    algo_ = &algo;
    buffers_ = buffers;
    out_.clear();
    kept_.clear();
    chunks_received_ = chunks_sent_ = bytes_sent_ = 0;
  }

  /// Releases the chunks held for a later round (a collective that ended, failed, early);
  /// the lists keep their capacity for rebind().
  void drop_kept() noexcept { kept_.clear(); }

  bool done() const noexcept { return algo_->done(); }

  /// Chunks held back for a later round, oldest first (for hang reports).
  std::size_t kept_count() const noexcept { return kept_.size(); }
  kept_chunk_info kept_at(std::size_t i) const noexcept { return kept_[i].info; }

  std::uint64_t chunks_received() const noexcept { return chunks_received_; }
  std::uint64_t chunks_sent() const noexcept { return chunks_sent_; }
  std::uint64_t bytes_sent() const noexcept { return bytes_sent_; }

 private:
  struct kept {
    kept_chunk_info info;
    Payload payload;
  };

  static std::span<const std::byte> view(const Payload& p) noexcept { return {p.data(), p.size()}; }

  result<std::span<const std::byte>> bytes_of(const send_step& s) const noexcept {
    std::span<const std::byte> buffer;
    switch (s.buffer) {
      case buffer_id::input: buffer = buffers_.input; break;
      case buffer_id::output: buffer = buffers_.output; break;
      case buffer_id::scratch: buffer = buffers_.scratch; break;
    }
    if (s.offset > buffer.size() || s.bytes > buffer.size() - s.offset) {
      return errc::invalid_argument;  // the algorithm asked for bytes outside its buffer
    }
    return buffer.subspan(s.offset, s.bytes);
  }

  template <class Emit>
  result<void> emit_pending(Emit& emit) {
    for (const send_step& s : out_) {
      auto bytes = bytes_of(s);
      if (!bytes) {
        out_.clear();
        return bytes.error();
      }
      ++chunks_sent_;
      bytes_sent_ += s.bytes;
      emit(s, bytes.value());
    }
    out_.clear();
    return outcome::success();
  }

  template <class Emit>
  result<receive_status> offer(std::uint32_t peer, std::uint32_t step, std::uint32_t chunk,
                               std::span<const std::byte> data, Emit& emit) {
    auto status = algo_->on_receive(peer, step, chunk, data, out_);
    if (!status) {
      out_.clear();
      return status.error();
    }
    VESSEL_TRY(emit_pending(emit));
    return status.value();
  }

  /// Offers kept chunks again while the algorithm keeps consuming some: each pass offers, per
  /// peer, its oldest kept chunks until one is refused.
  template <class Emit>
  result<void> reoffer(Emit& emit) {
    bool progress = true;
    while (progress && !kept_.empty()) {
      progress = false;
      refused_peers_.clear();
      for (std::size_t i = 0; i < kept_.size();) {
        const kept_chunk_info info = kept_[i].info;
        if (std::find(refused_peers_.begin(), refused_peers_.end(), info.peer) !=
            refused_peers_.end()) {
          ++i;
          continue;
        }
        VESSEL_TRY(status, offer(info.peer, info.step, info.chunk, view(kept_[i].payload), emit));
        if (status == receive_status::consumed) {
          kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(i));
          progress = true;
        } else {
          refused_peers_.push_back(info.peer);
          ++i;
        }
      }
    }
    return outcome::success();
  }

  algorithm* algo_;
  algorithm_buffers buffers_;
  std::vector<send_step> out_;
  std::vector<kept> kept_;
  std::vector<std::uint32_t> refused_peers_;
  std::uint64_t chunks_received_ = 0;
  std::uint64_t chunks_sent_ = 0;
  std::uint64_t bytes_sent_ = 0;
};

}  // namespace vessel::collectives
