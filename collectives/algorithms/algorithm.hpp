#pragma once
// The contract between a collective algorithm and whatever drives it (the collective actor over
// real links, the simulated network in tests and benchmarks). An algorithm is a pure state
// machine: it never does I/O, never blocks and never allocates per chunk; it turns arriving
// chunks into the sends they make possible.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "collectives/dtype.hpp"
#include "wire/result.hpp"

namespace vessel::collectives {

/// What a collective instance is asked to do. Ranks are ranks within the communicator.
struct algorithm_params {
  std::uint32_t rank = 0;
  std::uint32_t size = 1;
  std::uint32_t root = 0;  ///< broadcast, reduce, gather, scatter
  /// Elements in the operation's defining buffer: the whole vector for allreduce, reduce and
  /// broadcast; one rank's block for allgather, gather, scatter, reduce_scatter and alltoall.
  std::size_t count = 0;
  dtype type = dtype::float32;
  reduce_op op = reduce_op::sum;
  std::size_t chunk_bytes = std::size_t{1} << 20;  ///< pipelining granularity, rounded to elements
};

/// The memory an algorithm works in; the driver owns it and keeps it alive until done().
/// input may alias output (in place); scratch has at least scratch_bytes().
struct algorithm_buffers {
  std::span<const std::byte> input;
  std::span<std::byte> output;
  std::span<std::byte> scratch;
};

enum class buffer_id : std::uint8_t { input, output, scratch };

/// One message the algorithm wants sent. The bytes are read from the named buffer at the moment
/// the step is emitted: the driver copies them out (or finishes sending them) before it calls
/// the algorithm again, because a later step may overwrite that region -- unless the step is
/// `lendable`.
struct send_step {
  std::uint32_t peer = 0;
  std::uint32_t step = 0;   ///< algorithm-defined round; travels as collective_fields.step
  std::uint32_t chunk = 0;  ///< travels as collective_fields.chunk_index
  buffer_id buffer = buffer_id::output;
  std::size_t offset = 0;   ///< bytes
  std::size_t bytes = 0;
  /// The region is not written again until the peer has received these bytes (a later write
  /// there waits for something the peer sends after it got them), so the driver may send them
  /// from where they lie, without a copy, and hold the region until the collective is done.
  bool lendable = false;
  bool operator==(const send_step&) const = default;
};

/// A place where a chunk is reduced as it arrives (algorithm::reducing_landing): element-wise
/// place = operand op chunk, in the params' type and op.
struct reduce_landing {
  std::span<std::byte> place;
  std::span<const std::byte> operand;  ///< as long as place
  bool empty() const noexcept { return place.empty(); }
};

enum class receive_status : std::uint8_t {
  consumed,  ///< the chunk was applied; the driver may release its bytes
  not_yet,   ///< the chunk belongs to a later round: the driver keeps it and offers it again
             ///< after the algorithm has made progress (links are ordered per peer, but a peer
             ///< may run ahead of us by a round)
};

class algorithm {
 public:
  virtual ~algorithm() = default;

  virtual std::string_view name() const noexcept = 0;

  /// Bytes of scratch memory the driver must provide in algorithm_buffers::scratch.
  virtual std::size_t scratch_bytes() const noexcept { return 0; }

  /// Begins the operation; appends the sends that need nothing received.
  virtual result<void> start(const algorithm_buffers& buffers, std::vector<send_step>& out) = 0;

  /// A chunk from `peer` arrived. Appends the sends it makes possible. A chunk the algorithm
  /// can never accept (unknown step, wrong peer, wrong size, duplicate) is an error: the peer
  /// is broken or malicious, and the collective fails instead of computing garbage.
  virtual result<receive_status> on_receive(std::uint32_t peer, std::uint32_t step,
                                            std::uint32_t chunk, std::span<const std::byte> data,
                                            std::vector<send_step>& out) = 0;

  /// Where the bytes of chunk (`peer`, `step`, `chunk`) may be written as they arrive, before
  /// on_receive sees them: the place on_receive would copy them to, so that the chunk costs no
  /// copy out of a pool block (on_receive then gets `data` at that very place). Empty: anywhere.
  /// Only for chunks the algorithm consumes whenever they arrive (never not_yet) and whose place
  /// nothing else reads or writes meanwhile. Called from another thread (the one receiving) while
  /// the algorithm works: it may read only what start() fixed, never state that on_receive moves.
  virtual std::span<std::byte> landing(std::uint32_t peer, std::uint32_t step,
                                       std::uint32_t chunk) const noexcept {
    (void)peer;
    (void)step;
    (void)chunk;
    return {};
  }

  /// As landing(), for a chunk that on_receive would reduce with `operand` into `place`: the
  /// driver may instead reduce the bytes there as they arrive (no pass through a pool block),
  /// and on_receive then gets `data` at `place`, already reduced (finishing touches such as
  /// avg's division stay its own). The same conditions as landing()'s hold, and: `operand` is
  /// not written while the collective runs and does not overlap `place`, so a chunk that lands
  /// twice (its first try abandoned with a restarted peer) leaves the same bytes.
  virtual reduce_landing reducing_landing(std::uint32_t peer, std::uint32_t step,
                                          std::uint32_t chunk) const noexcept {
    (void)peer;
    (void)step;
    (void)chunk;
    return {};
  }

  /// Every byte of output is final and every send has been emitted.
  virtual bool done() const noexcept = 0;

  /// How many chunks this rank receives in all: nullopt for an algorithm that cannot tell ahead
  /// (whether it can is fixed at construction), the count once start() returned. A driver over
  /// real links then keeps a receive posted for every chunk still due (within its window), so
  /// none is left over to cancel at the end.
  virtual std::optional<std::uint64_t> chunks_to_receive() const noexcept { return std::nullopt; }

  /// For hang reports: appends the peers whose chunks the algorithm needs before it can make
  /// progress, and returns the round it is in. Appends nothing when it is done or cannot tell.
  virtual std::uint32_t waiting_for(std::vector<std::uint32_t>& peers) const {
    (void)peers;
    return 0;
  }
};

}  // namespace vessel::collectives
