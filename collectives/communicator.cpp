#include "collectives/communicator.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "actors/message_matcher.hpp"
#include "actors/runtime.hpp"
#include "collectives/algorithms/factory.hpp"
#include "collectives/errc.hpp"
#include "collectives/sim/driver.hpp"
#include "io/log.hpp"

namespace vessel::collectives {
namespace {

spdlog::logger& logger() {
  return log::get("collectives");
}

constexpr std::size_t header_bytes = 8;  // step, chunk: two little-endian u32
constexpr std::size_t default_chunk_bytes = std::size_t{1} << 20;

void put_u32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
std::uint32_t get_u32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}

/// A received chunk for step_driver: the pooled slice less its header.
struct received_chunk {
  io::buffer_slice slice;
  const std::byte* data() const noexcept { return slice.data() + header_bytes; }
  std::size_t size() const noexcept { return slice.size() - header_bytes; }
};

}  // namespace

struct collective_state {
  collective_op op = collective_op::barrier;
  std::string algorithm_name;
  std::uint64_t sequence = 0;
  std::uint64_t tag = 0;
  std::unique_ptr<algorithm> algo;
  std::vector<std::byte> scratch;
  std::optional<step_driver<received_chunk>> driver;

  std::unique_ptr<actors::p2p_request[]> receives;  // a ring, posted oldest first from head
  std::size_t receive_slots = 0;
  std::size_t receive_head = 0;
  std::size_t receives_posted = 0;
  std::unique_ptr<actors::p2p_request[]> sends;  // a ring of the sends not yet accepted
  std::size_t send_slots = 0;
  std::size_t send_head = 0;
  std::size_t sends_out = 0;

  std::chrono::milliseconds timeout{};
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::error_code error;
  bool finished = false;

  void touch() {
    if (timeout == std::chrono::milliseconds::max()) return;
    deadline = std::chrono::steady_clock::now() + timeout;
  }
};

// -- collective_request

collective_request::collective_request() noexcept = default;
collective_request::collective_request(communicator* owner,
                                       std::shared_ptr<collective_state> s) noexcept
    : owner_(owner), state_(std::move(s)) {}
collective_request::collective_request(collective_request&&) noexcept = default;
collective_request& collective_request::operator=(collective_request&& other) noexcept {
  if (this != &other) {
    if (state_ && !state_->finished) (void)wait();
    owner_ = other.owner_;
    state_ = std::move(other.state_);
  }
  return *this;
}
collective_request::~collective_request() {
  if (state_ && !state_->finished) (void)wait();
}

result<void> collective_request::wait() {
  if (!state_) return errc::invalid_argument;
  if (!state_->finished) return owner_->wait_for(*state_);
  if (state_->error) return state_->error;
  return outcome::success();
}

bool collective_request::test() {
  if (!state_) return true;
  if (!state_->finished) owner_->progress();
  return state_->finished;
}

// -- communicator

communicator::communicator(actors::runtime& rt, communicator_options options)
    : rt_(&rt), options_(options) {}

communicator::~communicator() {
  const auto pending = active_;
  for (const auto& s : pending) {
    if (!s->finished) (void)wait_for(*s);
  }
}

result<std::unique_ptr<communicator>> communicator::create(actors::runtime& rt,
                                                           communicator_options options) {
  if (options.id > max_communicator_id || options.max_sends_in_flight == 0 ||
      options.receive_window == 0) {
    return errc::invalid_argument;
  }
  std::unique_ptr<communicator> c{new communicator(rt, options)};
  VESSEL_TRY(c->selector_.apply_env(process_env()));
  return c;
}

std::uint32_t communicator::rank() const noexcept {
  return rt_->rank();
}
std::uint32_t communicator::size() const noexcept {
  return rt_->size();
}

namespace {

/// A request that failed before it started.
std::shared_ptr<collective_state> failed_state(collective_op op, std::error_code ec) {
  auto s = std::make_shared<collective_state>();
  s->op = op;
  s->error = ec;
  s->finished = true;
  return s;
}

}  // namespace

collective_request communicator::start(collective_op op, algorithm_params params,
                                       algorithm_buffers buffers, std::size_t message_bytes,
                                       const call_options& o) {
  params.rank = rank();
  params.size = size();
  params.root = o.root;
  const std::size_t largest = rt_->max_message_bytes() - header_bytes;
  params.chunk_bytes = std::min(o.chunk_bytes != 0 ? o.chunk_bytes : default_chunk_bytes, largest);
  // Every rank burns the sequence number, even on a local error, so the next call still agrees.
  const std::uint64_t sequence = sequence_++;
  if (params.root >= params.size) return {this, failed_state(op, errc::invalid_argument)};

  auto name = selector_.select(op, params.size, message_bytes, o.algorithm);
  if (!name) return {this, failed_state(op, name.error())};
  auto algo = make_algorithm(op, name.value(), params);
  if (!algo) return {this, failed_state(op, algo.error())};

  auto s = std::make_shared<collective_state>();
  s->op = op;
  s->algorithm_name = std::string{name.value()};
  s->sequence = sequence;
  s->tag = collective_tag(options_.id, sequence);
  s->algo = std::move(algo).value();
  s->scratch.resize(s->algo->scratch_bytes());
  buffers.scratch = s->scratch;
  s->driver.emplace(*s->algo, buffers);
  // Small messages need few receives ahead; each one left over costs a cancel at the end.
  s->receive_slots = message_bytes <= params.chunk_bytes
                         ? std::min<std::size_t>(2, options_.receive_window)
                         : options_.receive_window;
  s->receives = std::make_unique<actors::p2p_request[]>(s->receive_slots);
  s->send_slots = options_.max_sends_in_flight;
  s->sends = std::make_unique<actors::p2p_request[]>(s->send_slots);
  s->timeout = o.timeout;
  s->touch();

  collective_state& st = *s;
  auto emit = [this, &st](const send_step& step, std::span<const std::byte> bytes) {
    send_chunk(st, step, bytes);
  };
  if (auto started = st.driver->start(emit); !started) {
    fail(st, started.error());
  } else if (!st.error) {
    if (!st.driver->done()) {
      for (std::size_t i = 0; i < st.receive_slots; ++i) post_receive(st, i);
    }
  }
  (void)advance(st);
  if (!st.finished) active_.push_back(s);
  return {this, std::move(s)};
}

void communicator::post_receive(collective_state& s, std::size_t slot) {
  actors::p2p_request& r = s.receives[slot];
  actors::p2p_request::make_receive(r, actors::any_source, s.tag);
  ++s.receives_posted;
  rt_->submit(r);
}

void communicator::send_chunk(collective_state& s, const send_step& step,
                              std::span<const std::byte> bytes) {
  if (s.error) return;
  if (s.sends_out == s.send_slots) {  // backpressure: wait for the oldest send's hand-over
    actors::p2p_request& oldest = s.sends[s.send_head];
    oldest.wait();
    if (oldest.error) return fail(s, make_error_code(errc::transport_failed));
    oldest.payload.reset();
    s.send_head = (s.send_head + 1) % s.send_slots;
    --s.sends_out;
  }
  io::buffer block = rt_->acquire_send_block(header_bytes + bytes.size());
  if (!block) return fail(s, make_error_code(errc::invalid_argument));
  put_u32(block.data(), step.step);
  put_u32(block.data() + 4, step.chunk);
  if (!bytes.empty()) std::memcpy(block.data() + header_bytes, bytes.data(), bytes.size());
  actors::p2p_request& r = s.sends[(s.send_head + s.sends_out) % s.send_slots];
  actors::p2p_request::make_send(r, step.peer, s.tag,
                                 std::move(block).slice(0, header_bytes + bytes.size()));
  ++s.sends_out;
  rt_->submit(r);
}

void communicator::fail(collective_state& s, std::error_code ec) {
  if (!s.error) s.error = ec;
}

bool communicator::advance(collective_state& s) {
  if (s.finished) return false;
  bool moved = false;
  auto emit = [this, &s](const send_step& step, std::span<const std::byte> bytes) {
    send_chunk(s, step, bytes);
  };
  while (!s.error && s.receives_posted > 0 && s.receives[s.receive_head].done()) {
    actors::p2p_request& r = s.receives[s.receive_head];
    const std::size_t slot = s.receive_head;
    s.receive_head = (s.receive_head + 1) % s.receive_slots;
    --s.receives_posted;
    moved = true;
    if (r.error) {
      fail(s, make_error_code(errc::transport_failed));
      logger().error("collective {} #{} ({}): receive failed: {}", to_string(s.op), s.sequence,
                     s.algorithm_name, r.error.message());
      break;
    }
    if (r.payload.size() < header_bytes) {
      fail(s, make_error_code(errc::protocol_violation));
      break;
    }
    const std::uint32_t step = get_u32(r.payload.data());
    const std::uint32_t chunk = get_u32(r.payload.data() + 4);
    auto delivered =
        s.driver->deliver(r.source, step, chunk, received_chunk{std::move(r.payload)}, emit);
    if (!delivered) {
      fail(s, delivered.error());
      break;
    }
    if (!s.error && !s.driver->done()) post_receive(s, slot);
  }
  while (s.sends_out > 0 && s.sends[s.send_head].done()) {
    actors::p2p_request& r = s.sends[s.send_head];
    if (r.error) fail(s, make_error_code(errc::transport_failed));
    r.payload.reset();
    s.send_head = (s.send_head + 1) % s.send_slots;
    --s.sends_out;
    moved = true;
  }
  if (moved) s.touch();
  if (s.error || (s.driver->done() && s.sends_out == 0)) finish(s);
  return moved || s.finished;
}

void communicator::finish(collective_state& s) {
  // Receives still posted: nothing more is addressed to us under this tag once the algorithm
  // is done, so a cancelled receive that got a message anyway means a broken peer.
  while (s.receives_posted > 0) {
    actors::p2p_request& r = s.receives[s.receive_head];
    rt_->cancel(r);
    if (!r.error && !s.error) fail(s, make_error_code(errc::protocol_violation));
    r.payload.reset();
    s.receive_head = (s.receive_head + 1) % s.receive_slots;
    --s.receives_posted;
  }
  while (s.sends_out > 0) {  // their memory must outlive the reactor's use of them
    actors::p2p_request& r = s.sends[s.send_head];
    r.wait();
    r.payload.reset();
    s.send_head = (s.send_head + 1) % s.send_slots;
    --s.sends_out;
  }
  s.finished = true;
}

bool communicator::progress() {
  bool moved = false;
  for (std::size_t i = 0; i < active_.size(); ++i) moved |= advance(*active_[i]);
  std::erase_if(active_, [](const auto& s) { return s->finished; });
  return moved;
}

result<void> communicator::wait_for(collective_state& s) {
  while (!s.finished) {
    if (progress() || s.finished) continue;
    // Nothing moved: sleep on the oldest thing this collective waits for, briefly, since other
    // active collectives may need driving too.
    const auto now = std::chrono::steady_clock::now();
    const auto until = now + std::chrono::milliseconds{1};
    if (s.receives_posted > 0) {
      (void)s.receives[s.receive_head].wait_until(until);
    } else if (s.sends_out > 0) {
      (void)s.sends[s.send_head].wait_until(until);
    } else {
      std::this_thread::yield();
    }
    for (const auto& other : active_) {
      collective_state& a = *other;
      if (a.finished || std::chrono::steady_clock::now() < a.deadline) continue;
      std::vector<std::uint32_t> peers;
      const std::uint32_t round = a.algo->waiting_for(peers);
      std::string list;
      for (std::uint32_t p : peers) list += (list.empty() ? "" : ",") + std::to_string(p);
      logger().error(
          "rank {}: collective {} #{} ({}) made no progress for {} ms: round {}, waiting for "
          "rank(s) [{}], {} chunk(s) kept",
          rank(), to_string(a.op), a.sequence, a.algorithm_name, a.timeout.count(), round, list,
          a.driver->kept_count());
      fail(a, make_error_code(errc::timed_out));
      finish(a);
    }
    std::erase_if(active_, [](const auto& p) { return p->finished; });
  }
  if (s.error) return s.error;
  return outcome::success();
}

// -- the operations

namespace {

bool whole_elements(std::size_t bytes, dtype t) noexcept {
  return size_of(t) != 0 && bytes % size_of(t) == 0;
}

}  // namespace

collective_request communicator::ibarrier(call_options o) {
  return start(collective_op::barrier, {}, {}, 0, o);
}

collective_request communicator::ibroadcast(std::span<const std::byte> input,
                                            std::span<std::byte> output, dtype type,
                                            call_options o) {
  const bool root = rank() == o.root;
  if (!whole_elements(output.size(), type) || (root && input.size() != output.size())) {
    ++sequence_;
    return {this, failed_state(collective_op::broadcast, errc::size_mismatch)};
  }
  algorithm_params p;
  p.count = output.size() / size_of(type);
  p.type = type;
  return start(collective_op::broadcast, p,
               {root ? input : std::span<const std::byte>{}, output, {}}, output.size(), o);
}

collective_request communicator::ireduce(std::span<const std::byte> input,
                                         std::span<std::byte> output, dtype type, reduce_op op,
                                         call_options o) {
  const bool root = rank() == o.root;
  if (!whole_elements(input.size(), type) || (root && output.size() != input.size())) {
    ++sequence_;
    return {this, failed_state(collective_op::reduce, errc::size_mismatch)};
  }
  algorithm_params p;
  p.count = input.size() / size_of(type);
  p.type = type;
  p.op = op;
  return start(collective_op::reduce, p, {input, root ? output : std::span<std::byte>{}, {}},
               input.size(), o);
}

collective_request communicator::iallreduce(std::span<const std::byte> input,
                                            std::span<std::byte> output, dtype type, reduce_op op,
                                            call_options o) {
  if (!whole_elements(input.size(), type) || output.size() != input.size()) {
    ++sequence_;
    return {this, failed_state(collective_op::allreduce, errc::size_mismatch)};
  }
  algorithm_params p;
  p.count = input.size() / size_of(type);
  p.type = type;
  p.op = op;
  return start(collective_op::allreduce, p, {input, output, {}}, input.size(), o);
}

collective_request communicator::iallgather(std::span<const std::byte> input,
                                            std::span<std::byte> output, dtype type,
                                            call_options o) {
  if (!whole_elements(input.size(), type) || output.size() != input.size() * size()) {
    ++sequence_;
    return {this, failed_state(collective_op::allgather, errc::size_mismatch)};
  }
  algorithm_params p;
  p.count = input.size() / size_of(type);
  p.type = type;
  return start(collective_op::allgather, p, {input, output, {}}, input.size(), o);
}

collective_request communicator::ireduce_scatter(std::span<const std::byte> input,
                                                 std::span<std::byte> output, dtype type,
                                                 reduce_op op, call_options o) {
  if (!whole_elements(output.size(), type) || input.size() != output.size() * size()) {
    ++sequence_;
    return {this, failed_state(collective_op::reduce_scatter, errc::size_mismatch)};
  }
  algorithm_params p;
  p.count = output.size() / size_of(type);
  p.type = type;
  p.op = op;
  return start(collective_op::reduce_scatter, p, {input, output, {}}, output.size(), o);
}

collective_request communicator::igather(std::span<const std::byte> input,
                                         std::span<std::byte> output, dtype type, call_options o) {
  const bool root = rank() == o.root;
  if (!whole_elements(input.size(), type) || (root && output.size() != input.size() * size())) {
    ++sequence_;
    return {this, failed_state(collective_op::gather, errc::size_mismatch)};
  }
  algorithm_params p;
  p.count = input.size() / size_of(type);
  p.type = type;
  return start(collective_op::gather, p, {input, root ? output : std::span<std::byte>{}, {}},
               input.size(), o);
}

collective_request communicator::iscatter(std::span<const std::byte> input,
                                          std::span<std::byte> output, dtype type, call_options o) {
  const bool root = rank() == o.root;
  if (!whole_elements(output.size(), type) || (root && input.size() != output.size() * size())) {
    ++sequence_;
    return {this, failed_state(collective_op::scatter, errc::size_mismatch)};
  }
  algorithm_params p;
  p.count = output.size() / size_of(type);
  p.type = type;
  return start(collective_op::scatter, p, {root ? input : std::span<const std::byte>{}, output, {}},
               output.size(), o);
}

collective_request communicator::ialltoall(std::span<const std::byte> input,
                                           std::span<std::byte> output, dtype type,
                                           call_options o) {
  const std::size_t block = size_of(type) * size();
  if (block == 0 || input.size() % block != 0 || output.size() != input.size()) {
    ++sequence_;
    return {this, failed_state(collective_op::alltoall, errc::size_mismatch)};
  }
  algorithm_params p;
  p.count = input.size() / block;
  p.type = type;
  return start(collective_op::alltoall, p, {input, output, {}}, input.size() / size(), o);
}

}  // namespace vessel::collectives
