#include "collectives/algorithms/ring_pipeline.hpp"

#include <cstring>

#include "collectives/errc.hpp"
#include "collectives/reduce.hpp"
#include "wire/copy_bytes.hpp"

namespace vessel::collectives {

ring_pipeline::ring_pipeline(kind k, const algorithm_params& params)
    : kind_(k),
      params_(params),
      element_bytes_(size_of(params.type) == 0 ? 1 : size_of(params.type)),
      granule_(chunk_granule(params.chunk_bytes, element_bytes_)) {
  const std::uint32_t p = params.size == 0 ? 1 : params.size;
  left_ = (params.rank + p - 1) % p;
  right_ = (params.rank + 1) % p;
}

std::size_t ring_pipeline::scratch_bytes() const noexcept {
  if (kind_ != kind::reduce_scatter) return 0;
  const std::size_t block_bytes = params_.count * element_bytes_;
  return block_bytes < granule_ ? block_bytes : granule_;
}

std::uint32_t ring_pipeline::steps() const noexcept {
  const std::uint32_t phase = params_.size - 1;
  return kind_ == kind::allreduce ? 2 * phase : phase;
}

bool ring_pipeline::is_reducing_step(std::uint32_t step) const noexcept {
  return kind_ == kind::reduce_scatter || (kind_ == kind::allreduce && step < params_.size - 1);
}

std::uint32_t ring_pipeline::block_sent(std::uint32_t step) const noexcept {
  // Offsets chosen so that reduce_scatter leaves rank r with block r, and allreduce's
  // allgather starts with the block its reduce-scatter finished (r + 1).
  const std::uint64_t p = params_.size;
  const std::uint64_t r = params_.rank;
  switch (kind_) {
    case kind::allreduce:
      if (step < p - 1) return static_cast<std::uint32_t>((r + p - step) % p);
      return static_cast<std::uint32_t>((r + 1 + p - (step - (p - 1))) % p);
    case kind::reduce_scatter: return static_cast<std::uint32_t>((r + 2 * p - step - 1) % p);
    case kind::allgather: return static_cast<std::uint32_t>((r + p - step) % p);
  }
  return 0;
}

std::uint32_t ring_pipeline::block_received(std::uint32_t step) const noexcept {
  // What the left neighbour sends at this step.
  const std::uint32_t p = params_.size;
  return (block_sent(step) + p - 1) % p;
}

byte_range ring_pipeline::block(std::uint32_t b) const noexcept {
  if (kind_ == kind::allreduce) return block_range(params_.count, params_.size, b, element_bytes_);
  const std::size_t block_bytes = params_.count * element_bytes_;
  return {b * block_bytes, block_bytes};
}

void ring_pipeline::send_chunk(std::uint32_t step, std::uint32_t chunk, buffer_id buffer,
                               std::size_t offset, std::size_t bytes,
                               std::vector<send_step>& out) const {
  // Lendable but for scratch, which the next chunk reuses: a block of the input is never
  // written, and a block of the output is written once, or, when its final value comes round
  // (allreduce's allgather phase), only after it went round the ring through the right.
  out.push_back({right_, step, chunk, buffer, offset, bytes, buffer != buffer_id::scratch});
}

result<void> ring_pipeline::start(const algorithm_buffers& buffers, std::vector<send_step>& out) {
  if (started_) return errc::invalid_argument;
  if (size_of(params_.type) == 0) return errc::unsupported_type;
  if (!supports(params_.type, params_.op)) return errc::unsupported_op;
  const std::uint32_t p = params_.size;
  if (p == 0 || params_.rank >= p) return errc::invalid_argument;
  if (params_.count > static_cast<std::size_t>(-1) / element_bytes_ / p) {
    return errc::invalid_argument;  // count * element * size would wrap
  }

  const std::size_t block_bytes = params_.count * element_bytes_;
  const std::size_t whole = kind_ == kind::allreduce ? block_bytes : block_bytes * p;
  const std::size_t in_bytes = kind_ == kind::allgather ? block_bytes : whole;
  const std::size_t out_bytes = kind_ == kind::reduce_scatter ? block_bytes : whole;
  if (buffers.input.size() < in_bytes || buffers.output.size() < out_bytes ||
      buffers.scratch.size() < scratch_bytes()) {
    return errc::size_mismatch;
  }
  buffers_ = buffers;
  const std::uint32_t r = params_.rank;
  input_apart_ = buffers.input.data() + buffers.input.size() <= buffers.output.data() ||
                 buffers.output.data() + buffers.output.size() <= buffers.input.data();

  // Lay out the working vector. allreduce reads its own blocks from the input and writes each
  // output block once (reduced from the input and a peer's chunk, or the final block copied in),
  // so the input is copied over only when there is nobody to reduce with. allgather works in the
  // output; reduce_scatter reads the input and reduces chunk by chunk.
  if (kind_ == kind::allreduce && p == 1 && whole != 0 &&
      buffers.input.data() != buffers.output.data()) {
    std::memmove(buffers.output.data(), buffers.input.data(), whole);
  }
  if (kind_ == kind::allgather && block_bytes != 0 &&
      buffers.input.data() != buffers.output.data() + r * block_bytes) {
    std::memmove(buffers.output.data() + r * block_bytes, buffers.input.data(), block_bytes);
  }
  if (kind_ == kind::reduce_scatter && p == 1 && block_bytes != 0 &&
      buffers.input.data() != buffers.output.data()) {
    std::memmove(buffers.output.data(), buffers.input.data(), block_bytes);
  }

  started_ = true;
  const std::uint32_t n = steps();
  next_chunk_.assign(n, 0);
  expected_ = 0;
  for (std::uint32_t s = 0; s < n; ++s) {
    expected_ += chunk_count(block(block_received(s)).bytes, granule_);
  }
  if (n == 0) return outcome::success();  // one rank: the layout above was all of it

  const byte_range first = block(block_sent(0));
  const buffer_id source = kind_ == kind::allgather ? buffer_id::output : buffer_id::input;
  for (std::uint32_t c = 0, chunks = chunk_count(first.bytes, granule_); c < chunks; ++c) {
    const byte_range piece = chunk_of(first, granule_, c);
    send_chunk(0, c, source, piece.offset, piece.bytes, out);
  }
  return outcome::success();
}

result<receive_status> ring_pipeline::on_receive(std::uint32_t peer, std::uint32_t step,
                                                 std::uint32_t chunk,
                                                 std::span<const std::byte> data,
                                                 std::vector<send_step>& out) {
  if (peer != left_ || params_.size < 2 || step >= steps()) return errc::protocol_violation;
  const byte_range b = block(block_received(step));
  if (chunk >= chunk_count(b.bytes, granule_)) return errc::protocol_violation;
  const byte_range where = chunk_of(b, granule_, chunk);
  if (data.size() != where.bytes) return errc::protocol_violation;
  if (!started_) return receive_status::not_yet;
  if (chunk != next_chunk_[step]) return errc::protocol_violation;  // duplicate or reordered
  VESSEL_TRY(apply(step, chunk, where, data, out));
  ++next_chunk_[step];
  ++received_;
  return receive_status::consumed;
}

result<void> ring_pipeline::apply(std::uint32_t step, std::uint32_t chunk, byte_range where,
                                  std::span<const std::byte> data, std::vector<send_step>& out) {
  const std::uint32_t last_reduce = params_.size - 2;
  const bool forward = step + 1 < steps();
  if (kind_ == kind::reduce_scatter) {
    // Reduce into one chunk of scratch, forwarded at once (the driver copies it before our next
    // call), or at the last step straight into this rank's result. Never writes the input.
    const auto own = buffers_.input.subspan(where.offset, where.bytes);
    if (forward) {
      VESSEL_TRY(reduce_to(buffers_.scratch.first(where.bytes), own, data, params_.type,
                           params_.op));
      send_chunk(step + 1, chunk, buffer_id::scratch, 0, where.bytes, out);
      return outcome::success();
    }
    const auto result =
        buffers_.output.subspan(where.offset - block(params_.rank).offset, where.bytes);
    if (data.data() != result.data()) {  // else reduced as it landed (reducing_landing())
      VESSEL_TRY(reduce_to(result, own, data, params_.type, params_.op));
    }
    if (params_.op == reduce_op::avg) {
      VESSEL_TRY(finish_average(result, params_.type, params_.size));
    }
    return outcome::success();
  }

  const auto mine = buffers_.output.subspan(where.offset, where.bytes);
  if (is_reducing_step(step)) {
    // The first write of this block here: our input's share and the peer's partial sum (done
    // as the chunk landed when it is already there: reducing_landing()).
    if (data.data() != mine.data()) {
      VESSEL_TRY(reduce_to(mine, buffers_.input.subspan(where.offset, where.bytes), data,
                           params_.type, params_.op));
    }
    if (step == last_reduce && params_.op == reduce_op::avg) {
      VESSEL_TRY(finish_average(mine, params_.type, params_.size));  // final: average once
    }
  } else if (data.data() != mine.data()) {  // else it landed in place (landing())
    wire::copy_bytes(mine.data(), data.data(), data.size());
  }
  if (forward) send_chunk(step + 1, chunk, buffer_id::output, where.offset, where.bytes, out);
  return outcome::success();
}

std::optional<byte_range> ring_pipeline::incoming(std::uint32_t peer, std::uint32_t step,
                                                  std::uint32_t chunk) const noexcept {
  if (peer != left_ || params_.size < 2 || step >= steps()) return std::nullopt;
  const byte_range b = block(block_received(step));
  if (chunk >= chunk_count(b.bytes, granule_)) return std::nullopt;
  const byte_range where = chunk_of(b, granule_, chunk);
  if (where.bytes == 0) return std::nullopt;
  return where;
}

std::span<std::byte> ring_pipeline::landing(std::uint32_t peer, std::uint32_t step,
                                            std::uint32_t chunk) const noexcept {
  // A copying step's block is written by nothing else: every chunk of it arrives once, from the
  // left, and the ring consumes it whenever it comes (after start(), which posts no receive).
  if (is_reducing_step(step)) return {};
  const std::optional<byte_range> where = incoming(peer, step, chunk);
  if (!where || where->offset + where->bytes > buffers_.output.size()) return {};
  return buffers_.output.subspan(where->offset, where->bytes);
}

reduce_landing ring_pipeline::reducing_landing(std::uint32_t peer, std::uint32_t step,
                                              std::uint32_t chunk) const noexcept {
  // As landing(): each chunk of a reducing step comes once, from the left, and is consumed
  // whenever it comes. Not reduce_scatter's forwarded steps, which reduce into the one chunk of
  // scratch that every chunk reuses; not in place, where the operand is the place itself.
  if (!input_apart_ || !is_reducing_step(step) ||
      (kind_ == kind::reduce_scatter && step + 1 < steps())) {
    return {};
  }
  const std::optional<byte_range> where = incoming(peer, step, chunk);
  if (!where) return {};
  const std::size_t at =
      kind_ == kind::reduce_scatter ? where->offset - block(params_.rank).offset : where->offset;
  if (at + where->bytes > buffers_.output.size() ||
      where->offset + where->bytes > buffers_.input.size()) {
    return {};
  }
  return {buffers_.output.subspan(at, where->bytes),
          buffers_.input.subspan(where->offset, where->bytes)};
}

std::uint32_t ring_pipeline::waiting_for(std::vector<std::uint32_t>& peers) const {
  if (!started_ || done()) return 0;
  peers.push_back(left_);
  for (std::uint32_t s = 0; s < steps(); ++s) {
    if (next_chunk_[s] < chunk_count(block(block_received(s)).bytes, granule_)) return s;
  }
  return steps();
}

}  // namespace vessel::collectives
