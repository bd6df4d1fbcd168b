#include "collectives/algorithms/pairwise_alltoall.hpp"

#include <cstring>

#include "collectives/algorithms/algorithm_checks.hpp"
#include "wire/copy_bytes.hpp"

namespace vessel::collectives {

namespace {

bool power_of_two(std::uint32_t n) noexcept {
  return (n & (n - 1)) == 0;
}

}  // namespace

pairwise_alltoall::pairwise_alltoall(const algorithm_params& params) : params_(params) {
  if (!params_valid(params)) return;
  received_.assign(params.size, 0);
}

result<void> pairwise_alltoall::start(const algorithm_buffers& buffers,
                                      std::vector<send_step>& out) {
  if (started_) return errc::invalid_argument;
  VESSEL_TRY(check_params(params_));
  const std::uint32_t p = params_.size;
  VESSEL_TRY(block, checked_bytes(params_.count, size_of(params_.type)));
  VESSEL_TRY(total, checked_bytes(params_.count, size_of(params_.type), p));
  VESSEL_TRY(check_buffer(buffers.input, total));
  VESSEL_TRY(check_buffer(buffers.output, total));
  block_ = block;
  layout_ = chunk_layout(block, chunk_granule(params_.chunk_bytes, size_of(params_.type)));
  if (!layout_.fits_chunk_field()) return errc::invalid_argument;
  buffers_ = buffers;

  const bool in_place = total != 0 && buffers.input.data() == buffers.output.data();
  if (power_of_two(p)) {
    pairing_ = pairing::xor_partner;
    first_round_ = 1;
    rounds_ = p;
  } else if (in_place) {
    pairing_ = pairing::symmetric_shifted;
    first_round_ = 0;
    rounds_ = p;
  } else {
    pairing_ = pairing::shifted;
    first_round_ = 1;
    rounds_ = p;
  }
  in_place_ = in_place;
  send_buffer_ = in_place ? buffer_id::output : buffer_id::input;
  if (!in_place && block != 0) {
    const std::size_t own = std::size_t{params_.rank} * block;
    std::memmove(buffers.output.data() + own, buffers.input.data() + own, block);
  }
  started_ = true;
  round_ = first_round_;
  received_[params_.rank] = static_cast<std::uint32_t>(layout_.count());  // our own block
  send_round(out);
  advance(out);
  return outcome::success();
}

result<receive_status> pairwise_alltoall::on_receive(std::uint32_t peer, std::uint32_t step,
                                                     std::uint32_t chunk,
                                                     std::span<const std::byte> data,
                                                     std::vector<send_step>& out) {
  if (!started_) return receive_status::not_yet;
  // Each peer sends one block, in its round, chunk after chunk.
  if (peer >= params_.size || peer == params_.rank || step != round_of(peer) ||
      chunk != received_[peer] || chunk >= layout_.count()) {
    return protocol_violation();
  }
  const byte_range range = layout_.at(chunk);
  if (data.size() != range.bytes) return protocol_violation();
  // In place, the block's region still holds what we send to that peer until our round with it.
  if (in_place_ && step > round_) return receive_status::not_yet;
  std::byte* place = buffers_.output.data() + std::size_t{peer} * block_ + range.offset;
  if (data.data() != place) wire::copy_bytes(place, data.data(), range.bytes);  // else landed
  ++received_[peer];
  advance(out);
  return receive_status::consumed;
}

std::span<std::byte> pairwise_alltoall::landing(std::uint32_t peer, std::uint32_t step,
                                                std::uint32_t chunk) const noexcept {
  // Not in place, every chunk is taken whenever it comes (never not_yet) and its place is
  // written by nothing else. Reads only what start() fixed.
  if (!started_ || in_place_ || peer >= params_.size || peer == params_.rank ||
      step != round_of(peer) || chunk >= layout_.count()) {
    return {};
  }
  const byte_range range = layout_.at(chunk);
  const std::size_t offset = std::size_t{peer} * block_ + range.offset;
  if (range.bytes == 0 || offset + range.bytes > buffers_.output.size()) return {};
  return buffers_.output.subspan(offset, range.bytes);
}

std::uint32_t pairwise_alltoall::send_to(std::uint32_t round) const noexcept {
  const std::uint32_t p = params_.size;
  switch (pairing_) {
    case pairing::xor_partner: return params_.rank ^ round;
    case pairing::shifted: return (params_.rank + round) % p;
    case pairing::symmetric_shifted: return (round + p - params_.rank) % p;
  }
  return params_.rank;
}

std::uint32_t pairwise_alltoall::receive_from(std::uint32_t round) const noexcept {
  const std::uint32_t p = params_.size;
  if (pairing_ == pairing::shifted) return (params_.rank + p - round) % p;
  return send_to(round);  // symmetric pairings
}

std::uint32_t pairwise_alltoall::round_of(std::uint32_t peer) const noexcept {
  const std::uint32_t p = params_.size;
  switch (pairing_) {
    case pairing::xor_partner: return params_.rank ^ peer;
    case pairing::shifted: return (params_.rank + p - peer) % p;
    case pairing::symmetric_shifted: return (params_.rank + peer) % p;
  }
  return 0;
}

std::uint32_t pairwise_alltoall::waiting_for(std::vector<std::uint32_t>& peers) const {
  if (!started_ || done()) return round_;
  peers.push_back(receive_from(round_));
  return round_;
}

void pairwise_alltoall::advance(std::vector<send_step>& out) {
  while (round_ < rounds_ && received_[receive_from(round_)] == layout_.count()) {
    ++round_;
    if (round_ < rounds_) send_round(out);
  }
}

void pairwise_alltoall::send_round(std::vector<send_step>& out) const {
  if (round_ >= rounds_) return;
  const std::uint32_t to = send_to(round_);
  if (to == params_.rank) return;  // the idle round of the symmetric pairing
  for (std::size_t c = 0; c < layout_.count(); ++c) {
    const byte_range range = layout_.at(c);
    // From input (not in place) the bytes are never written: they may go out lent.
    out.push_back({to, round_, static_cast<std::uint32_t>(c), send_buffer_,
                   std::size_t{to} * block_ + range.offset, range.bytes, !in_place_});
  }
}

}  // namespace vessel::collectives
