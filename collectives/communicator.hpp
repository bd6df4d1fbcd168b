#pragma once
// vessel::collectives::communicator: the collectives of collectives/algorithms/ over real ranks
// (an actors::runtime). Every call of every rank must come in the same order, as in MPI.
//
// Driving: from the calling thread, through p2p_requests handed to the runtime's reactor in
// batches (the reactor-thread driver of DESIGN.md is the next step). A collective in progress
// advances inside wait() of any collective of the same communicator, so several non-blocking
// collectives never wait on each other.
//
// Tags (in actors::reserved_tag_base's range; comm.cpp's own collectives use bit 63 with a
// sequence number in bits 16..61, far below bit 62):
//   bit 63 = 1 (reserved), bit 62 = 1 (communicator traffic),
//   bits 48..61 = communicator id (14 bits), bits 0..47 = sequence number of the collective.
// Every chunk carries an 8-byte header (algorithm step, chunk index), little-endian, then data.
//
// Flow: at most max_sends_in_flight chunk sends outstanding per collective (emit waits for the
// oldest one beyond that; a send completes once the link accepted it) and receive_window
// receives posted (any source, the collective's tag); unexpected chunks beyond those are held
// by the runtime's matcher, bounded by VESSEL_UNEXPECTED_BYTES.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "collectives/algorithms/algorithm.hpp"
#include "collectives/dtype.hpp"
#include "collectives/operation.hpp"
#include "collectives/selection.hpp"
#include "wire/result.hpp"

namespace vessel::actors {
class runtime;
}

namespace vessel::collectives {

inline constexpr std::uint64_t communicator_tag_bit = std::uint64_t{1} << 62;
inline constexpr std::uint32_t max_communicator_id = (1u << 14) - 1;

/// The tag of collective `sequence` on communicator `id` (layout above).
constexpr std::uint64_t collective_tag(std::uint32_t id, std::uint64_t sequence) noexcept {
  return (std::uint64_t{1} << 63) | communicator_tag_bit |
         (std::uint64_t{id & max_communicator_id} << 48) |
         (sequence & ((std::uint64_t{1} << 48) - 1));
}

/// Per call: which algorithm (empty: VESSEL_ALGO_<OP>, then the table), the root, a timeout.
struct call_options {
  std::string_view algorithm{};
  std::uint32_t root = 0;
  std::chrono::milliseconds timeout = std::chrono::milliseconds::max();
  std::size_t chunk_bytes = 0;  ///< 0: the largest that fits one runtime message (<= 1 MiB)
};

struct communicator_options {
  std::uint32_t id = 0;                 ///< tells communicators apart in the tag
  std::size_t max_sends_in_flight = 8;  ///< per collective
  std::size_t receive_window = 8;       ///< receives posted ahead per collective
};

class communicator;
struct collective_state;

/// A non-blocking collective in progress. Move-only; destroying an unfinished one waits for it.
class collective_request {
 public:
  collective_request() noexcept;
  collective_request(collective_request&&) noexcept;
  collective_request& operator=(collective_request&&) noexcept;
  ~collective_request();

  /// Drives every collective of the communicator until this one is done; its outcome (errc::
  /// timed_out names the operation, round and awaited peers in the log).
  result<void> wait();
  /// Advances without blocking; true once done (wait() then returns at once).
  bool test();
  bool valid() const noexcept { return state_ != nullptr; }

 private:
  friend class communicator;
  collective_request(communicator* owner, std::shared_ptr<collective_state> s) noexcept;
  communicator* owner_ = nullptr;
  std::shared_ptr<collective_state> state_;
};

class communicator {
 public:
  /// The world communicator over `rt` (which must outlive it). The selector reads
  /// VESSEL_ALGO_<OP>; a bad value there is an error here.
  static result<std::unique_ptr<communicator>> create(actors::runtime& rt,
                                                      communicator_options options = {});
  ~communicator();
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  std::uint32_t rank() const noexcept;
  std::uint32_t size() const noexcept;
  algorithm_selector& selector() noexcept { return selector_; }

  // Non-blocking forms; each blocking one is the same call followed by wait(). Spans: counts in
  // elements of `type`. In place: pass the same memory as input and output (allgather/gather:
  // input = output's own block; reduce_scatter: output = input's first block).

  /// Zero-byte dissemination.
  collective_request ibarrier(call_options o = {});
  /// count elements: root's input is sent, output receives (root: input may alias output).
  collective_request ibroadcast(std::span<const std::byte> input, std::span<std::byte> output,
                                dtype type, call_options o = {});
  collective_request ireduce(std::span<const std::byte> input, std::span<std::byte> output,
                             dtype type, reduce_op op, call_options o = {});
  collective_request iallreduce(std::span<const std::byte> input, std::span<std::byte> output,
                                dtype type, reduce_op op, call_options o = {});
  /// input: one block; output: size() blocks.
  collective_request iallgather(std::span<const std::byte> input, std::span<std::byte> output,
                                dtype type, call_options o = {});
  /// input: size() blocks; output: one block (the reduction of everyone's block rank()).
  collective_request ireduce_scatter(std::span<const std::byte> input, std::span<std::byte> output,
                                     dtype type, reduce_op op, call_options o = {});
  /// input: one block; output: size() blocks at the root (ignored elsewhere).
  collective_request igather(std::span<const std::byte> input, std::span<std::byte> output,
                             dtype type, call_options o = {});
  /// input: size() blocks at the root (ignored elsewhere); output: one block.
  collective_request iscatter(std::span<const std::byte> input, std::span<std::byte> output,
                              dtype type, call_options o = {});
  /// input and output: size() blocks each (block j to / from rank j).
  collective_request ialltoall(std::span<const std::byte> input, std::span<std::byte> output,
                               dtype type, call_options o = {});

  result<void> barrier(call_options o = {}) { return ibarrier(o).wait(); }
  result<void> broadcast(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                         call_options o = {}) {
    return ibroadcast(in, out, t, o).wait();
  }
  result<void> reduce(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                      reduce_op op, call_options o = {}) {
    return ireduce(in, out, t, op, o).wait();
  }
  result<void> allreduce(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                         reduce_op op, call_options o = {}) {
    return iallreduce(in, out, t, op, o).wait();
  }
  result<void> allgather(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                         call_options o = {}) {
    return iallgather(in, out, t, o).wait();
  }
  result<void> reduce_scatter(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                              reduce_op op, call_options o = {}) {
    return ireduce_scatter(in, out, t, op, o).wait();
  }
  result<void> gather(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                      call_options o = {}) {
    return igather(in, out, t, o).wait();
  }
  result<void> scatter(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                       call_options o = {}) {
    return iscatter(in, out, t, o).wait();
  }
  result<void> alltoall(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                        call_options o = {}) {
    return ialltoall(in, out, t, o).wait();
  }

  /// The generic entry: params.rank/size are filled in; count and buffers as algorithm.hpp says.
  collective_request start(collective_op op, algorithm_params params, algorithm_buffers buffers,
                           std::size_t message_bytes, const call_options& o);

 private:
  friend class collective_request;
  communicator(actors::runtime& rt, communicator_options options);
  /// One pass over every active collective; true if anything moved.
  bool progress();
  bool advance(collective_state& s);
  result<void> wait_for(collective_state& s);
  void post_receive(collective_state& s, std::size_t slot);
  void send_chunk(collective_state& s, const send_step& step, std::span<const std::byte> bytes);
  void fail(collective_state& s, std::error_code ec);
  /// Cancels what is still posted, waits for the sends' hand-over, marks it finished.
  void finish(collective_state& s);

  actors::runtime* rt_;
  communicator_options options_;
  algorithm_selector selector_;
  std::uint64_t sequence_ = 0;
  std::vector<std::shared_ptr<collective_state>> active_;
};

}  // namespace vessel::collectives
