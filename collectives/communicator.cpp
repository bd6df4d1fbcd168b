#include "collectives/communicator.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "actors/env.hpp"
#include "actors/kv_store_client.hpp"
#include "actors/message_matcher.hpp"
#include "actors/runtime.hpp"
#include "collectives/algorithms/factory.hpp"
#include "collectives/chunk_offer.hpp"
#include "collectives/errc.hpp"
#include "collectives/reduce.hpp"
#include "collectives/sim/driver.hpp"
#include "collectives/trace_recorder.hpp"
#include "io/cross_memory.hpp"
#include "io/log.hpp"
#include "io/single_copy_probe.hpp"
#include "wire/copy_bytes.hpp"

namespace vessel::collectives {
namespace {

spdlog::logger& logger() {
  return log::get("collectives");
}

constexpr std::size_t header_bytes = 8;  // step, chunk: two little-endian u32
constexpr std::size_t default_chunk_bytes = std::size_t{1} << 20;
constexpr std::uint32_t not_a_member = ~std::uint32_t{0};

/// An offered chunk reduced into place is read in pieces of this many bytes (a multiple of
/// every element size), small enough that each is still in cache when it is reduced.
constexpr std::size_t pull_piece_bytes = std::size_t{128} << 10;
/// How long a failed call waits for the answers to its open offers: a live peer answers within
/// microseconds of matching one, and a peer that gave up the call never answers.
constexpr std::chrono::milliseconds offer_answer_grace{100};

void put_u32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
std::uint32_t get_u32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}

/// A received chunk for step_driver: the pooled slice less its header, or where it landed.
struct received_chunk {
  io::buffer_slice slice;
  std::span<const std::byte> landed;  // set when the chunk went to algorithm::landing's place
  const std::byte* data() const noexcept {
    return slice ? slice.data() + header_bytes : landed.data();
  }
  std::size_t size() const noexcept { return slice ? slice.size() - header_bytes : landed.size(); }
};

/// Next free communicator id per runtime, process-wide: a child's id is the max of its members'
/// (communicator.hpp), so every communicator this process made must count.
struct id_registry {
  std::mutex mutex;
  std::map<const actors::runtime*, std::uint32_t> next_free;

  std::uint32_t next(const actors::runtime& rt) {
    std::lock_guard lock{mutex};
    return next_free[&rt];
  }
  void used(const actors::runtime& rt, std::uint32_t id) {
    std::lock_guard lock{mutex};
    std::uint32_t& n = next_free[&rt];
    n = std::max(n, id + 1);
  }
};

id_registry& ids() {
  static id_registry r;
  return r;
}

/// VESSEL_RESTARTS > 0: the launcher restarts dead ranks (vessel-run --restart).
bool restarts_allowed() {
  const char* v = std::getenv("VESSEL_RESTARTS");
  return v != nullptr && std::strtoul(v, nullptr, 10) > 0;
}

/// How long a restarted rank waits for its survivors' rejoin records: VESSEL_CONNECT_TIMEOUT_MS
/// (the runtime's start-up bound), 60 s without it.
std::chrono::milliseconds rejoin_wait() {
  const char* v = std::getenv("VESSEL_CONNECT_TIMEOUT_MS");
  const unsigned long ms = v != nullptr ? std::strtoul(v, nullptr, 10) : 0;
  return std::chrono::milliseconds{ms > 0 ? ms : 60000};
}

/// Unset, VESSEL_PULL_BYTES is left to this machine: chunks of 256 KiB and up are offered only
/// where the kernel copies between processes about as fast as memcpy does
/// (io/single_copy_probe.hpp; measured once per process, logged at info). vessel::comm keeps its
/// fixed 256 KiB: its pulls also keep an eager sender in step with its receiver, which a
/// collective's posted receives already do.
std::size_t pull_bytes_for_this_machine(std::uint32_t rank) {
  const io::single_copy_rate& rate = io::single_copy_rate_here();
  const bool pays = rate.pays();
  if (rate.error) {
    logger().info("rank {}: chunks not offered: this process cannot read memory ({})", rank,
                  rate.error.message());
  } else {
    logger().info(
        "rank {}: chunks {} offered: process_vm_readv copies {} KiB in {:.1f} us, memcpy in "
        "{:.1f} us (VESSEL_PULL_BYTES overrides)",
        rank, pays ? "are" : "not", io::single_copy_probe_bytes >> 10,
        static_cast<double>(rate.kernel_copy.count()) / 1e3,
        static_cast<double>(rate.user_copy.count()) / 1e3);
  }
  return pays ? actors::default_pull_bytes : 0;
}

/// VESSEL_PULL_BYTES (vessel::comm reads it too), else pull_bytes_for_this_machine(); 0 turns
/// offers off.
result<std::size_t> pull_bytes_from_env(const actors::runtime& rt) {
  const actors::env_view env = actors::env_view::process();
  if (!env.has("VESSEL_PULL_BYTES")) {
    // Offers go only to ranks reached by shared memory: with none, there is nothing to measure.
    return rt.reaches_any_by_shm() ? pull_bytes_for_this_machine(rt.rank()) : 0;
  }
  auto n = actors::env_byte_count(env, "VESSEL_PULL_BYTES", 0);
  if (!n) {
    logger().error("rank {}: {} (0 turns pulling off)", rt.rank(), n.error().detail);
    return errc::invalid_argument;
  }
  return n.value();
}

std::string rank_list(const std::vector<std::uint32_t>& ranks) {
  std::string s;
  for (std::uint32_t r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return "[" + s + "]";
}

}  // namespace

/// Who is in a communicator: member i is runtime rank members[i].
struct communicator_group {
  std::vector<std::uint32_t> members;
  std::vector<std::uint32_t> index_of;  // runtime rank -> member index, or not_a_member
  std::uint32_t self = 0;

  communicator_group(std::vector<std::uint32_t> m, std::uint32_t world, std::uint32_t me)
      : members(std::move(m)), index_of(world, not_a_member) {
    for (std::uint32_t i = 0; i < members.size(); ++i) index_of[members[i]] = i;
    self = index_of[me];
  }
  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(members.size()); }
};

struct collective_state {
  collective_op op = collective_op::barrier;
  std::string_view algorithm_name;  // algorithm_selector's static copy: no allocation per call
  const communicator* owner = nullptr;
  std::shared_ptr<const communicator_group> group;
  std::uint32_t comm_id = 0;
  std::uint64_t sequence = 0;
  std::uint64_t tag = 0;
  // What a retry after a member's restart starts again from (communicator.hpp, "Restarts").
  algorithm_params params;
  algorithm_buffers buffers;  // input: kept_input for in-place calls when retrying
  // Chunks may be reduced as they land: every fragment boundary falls on an element (the
  // fragments' bytes and the chunk header are multiples of every element size).
  bool reduce_on_landing = false;
  std::vector<std::byte> kept_input;
  std::uint64_t epoch = 0;  // the attempt it runs under (the tag's attempt bits)
  std::uint32_t attempts = 1;
  bool awaiting_retry = false;  // abandoned (or not yet started): waits for every link up
  std::unique_ptr<algorithm> algo;
  std::vector<std::byte> scratch;
  std::optional<step_driver<received_chunk>> driver;
  std::unique_ptr<collective_trace> trace;  // null unless VESSEL_TRACE is set
  std::uint32_t trace_lane = 0;

  // Large lendable chunks go out without a copy (collective_engine::send_chunk): their bytes are
  // the link's until the peer acked them, so the collective is done only once every loan is back.
  std::unique_ptr<io::borrowed_memory> lent;  // null: nothing this large to send
  std::unique_ptr<std::uint32_t[]> loans;     // a ring of lent's slots, oldest first
  std::size_t loan_slots = 0;
  std::size_t loan_head = 0;
  std::size_t loans_out = 0;  // (declared before the requests, which may hold its handles)
  // Chunks offered to same-host peers to read from where they lie (chunk_offer.hpp). Like a
  // loan, an offered chunk is held until its offer is answered; a refused one goes again.
  struct offered_chunk {
    std::uint32_t peer = 0;  // world rank
    send_step step;
    std::span<const std::byte> bytes;
    bool answered = false;
    bool resent = false;
  };
  bool pull = false;  // this call's chunks are large enough to offer
  std::vector<offered_chunk> offers;
  std::size_t offers_first_open = 0;  // every offer before it is answered
  std::size_t offers_open = 0;
  std::vector<std::byte> pull_bounce;  // an offered chunk read here, then reduced into place
  std::unique_ptr<actors::p2p_request[]> receives;  // a ring, posted oldest first from head
  std::size_t receive_capacity = 0;                 // of the array, kept across reuse
  std::size_t receive_slots = 0;
  std::size_t receive_head = 0;
  std::size_t receives_posted = 0;
  // Messages still due under this call's tag when the algorithm counts its chunks
  // (algorithm::chunks_to_receive): those chunks, an answer per offer made and a resend per offer
  // refused. A receive stays posted for each (post_receives_due). unknown_due: every slot is
  // reposted as it completes while the driver runs, and what is left over is cancelled.
  static constexpr std::uint64_t unknown_due = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t messages_due = unknown_due;
  bool counts_messages() const noexcept { return messages_due != unknown_due; }
  /// One more message will come under the tag (an offer's answer, a refused offer's resend).
  void one_more_due() noexcept {
    if (counts_messages()) ++messages_due;
  }
  std::unique_ptr<actors::p2p_request[]> sends;  // a ring of the sends not yet accepted
  std::size_t send_capacity = 0;
  std::size_t send_slots = 0;
  std::size_t send_head = 0;
  std::size_t sends_out = 0;

  std::chrono::milliseconds timeout{};
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::error_code error;
  std::string detail;
  bool finished = false;

  /// Ready for the next call (collective_engine::fresh_state): every field as new, but the
  /// request rings, scratch and the driver's step list keep their memory.
  void reuse() noexcept {
    op = collective_op::barrier;
    algorithm_name = {};
    owner = nullptr;
    group.reset();
    comm_id = 0;
    sequence = tag = epoch = 0;
    params = {};
    reduce_on_landing = false;
    buffers = {};
    kept_input.clear();
    attempts = 1;
    awaiting_retry = false;
    trace.reset();
    trace_lane = 0;
    lent.reset();
    loans.reset();
    loan_slots = loan_head = loans_out = 0;
    pull = false;
    drop_offers();
    receive_slots = receive_head = receives_posted = 0;
    messages_due = unknown_due;
    send_slots = send_head = sends_out = 0;
    timeout = {};
    deadline = std::chrono::steady_clock::time_point::max();
    error.clear();
    detail.clear();
    finished = false;
  }
  /// The oldest offer to world rank `peer` not answered yet (a peer answers in order), or
  /// offers.size().
  std::size_t first_open_offer(std::uint32_t peer) const noexcept {
    std::size_t i = offers_first_open;
    while (i < offers.size() && (offers[i].answered || offers[i].peer != peer)) ++i;
    return i;
  }
  void drop_offers() noexcept {
    offers.clear();
    offers_first_open = offers_open = 0;
  }
  /// Request rings of at least `receive_n` and `send_n` slots, each signalling the runtime's
  /// events word (collective_engine::wait_for sleeps on it).
  void size_rings(std::size_t receive_n, std::size_t send_n) {
    if (receive_capacity < receive_n) {
      receives = std::make_unique<actors::p2p_request[]>(receive_n);
      receive_capacity = receive_n;
      for (std::size_t i = 0; i < receive_n; ++i) receives[i].signal_events(true);
    }
    if (send_capacity < send_n) {
      sends = std::make_unique<actors::p2p_request[]>(send_n);
      send_capacity = send_n;
      for (std::size_t i = 0; i < send_n; ++i) sends[i].signal_events(true);
    }
    receive_slots = receive_n;
    send_slots = send_n;
  }
  /// Memory past this stays with a finished call only while it is small: a state kept for reuse
  /// must not pin a large call's scratch or input copy.
  static constexpr std::size_t kept_capacity_bytes = std::size_t{1} << 20;
  void release_large_buffers() noexcept {
    if (scratch.capacity() > kept_capacity_bytes) std::vector<std::byte>{}.swap(scratch);
    if (kept_input.capacity() > kept_capacity_bytes) std::vector<std::byte>{}.swap(kept_input);
    if (pull_bounce.capacity() > kept_capacity_bytes) std::vector<std::byte>{}.swap(pull_bounce);
  }

  void touch() {
    if (timeout == std::chrono::milliseconds::max()) return;
    deadline = std::chrono::steady_clock::now() + timeout;
  }
  std::string name() const {
    return std::string{to_string(op)} + " #" + std::to_string(sequence) + " (" +
           std::string{algorithm_name} +
           ", communicator " + std::to_string(comm_id) +
           (attempts > 1 ? ", attempt " + std::to_string(attempts) : std::string{}) + ")";
  }
};

/// Drives the active collectives of one communicator family from the calling thread.
struct collective_engine {
  actors::runtime* rt;
  std::vector<std::shared_ptr<collective_state>> active;

  std::vector<std::uint64_t> trace_lanes;  // per communicator id: lanes in use (bit per lane)

  // Restarts (communicator.hpp): the epoch is epoch_base plus every restart seen so far.
  bool retry_on_restart = false;
  std::uint64_t epoch_base = 0;
  std::uint64_t epoch = 0;
  std::vector<std::uint64_t> restarts_seen;  // per world rank
  const communicator* world_comm = nullptr;  // whose sequence a rejoin record names

  // The states of the last calls. One that nobody else holds any more (its request is gone
  // and it is not active) serves the next call: a small call then allocates no state, request
  // rings or step list (on two ranks over shm, set-up was ~0.15 of a 1.1 us allreduce).
  std::array<std::shared_ptr<collective_state>, 4> recent;
  std::size_t recent_next = 0;

  // Offers (chunk_offer.hpp). A peer that could not read our memory once is offered nothing
  // more, and once we could not read a peer's, we refuse its offers from then on: its refused
  // chunks come again in their order, and no later offer may overtake them.
  std::size_t pull_threshold = std::numeric_limits<std::size_t>::max();
  std::vector<bool> offers_refused_by;     // per world rank
  std::vector<bool> refusing_offers_from;  // per world rank
  chunk_pull_stats pulls;

  explicit collective_engine(actors::runtime& r)
      : rt(&r), offers_refused_by(r.size()), refusing_offers_from(r.size()) {}
  /// The family's last communicator is gone: its rank's trace file gets what it ran.
  ~collective_engine();

  /// A state for a new call: a recent one nobody holds, reset, or a new one.
  std::shared_ptr<collective_state> fresh_state();
  /// A request that failed before it started.
  std::shared_ptr<collective_state> failed_state(collective_op op, std::error_code ec);
  /// One pass over every active collective; true if anything moved.
  bool progress();
  bool advance(collective_state& s);
  result<void> wait_for(collective_state& s);
  void post_receive(collective_state& s, std::size_t slot);
  /// A call that counts its messages: posts receives until one waits for every message due, or
  /// every slot is out.
  void post_receives_due(collective_state& s);
  void send_chunk(collective_state& s, const send_step& step, std::span<const std::byte> bytes);
  /// The next slot of the sends ring (waiting for the oldest hand-over when all are out), or
  /// null with `s` failed.
  actors::p2p_request* claim_send(collective_state& s);
  /// A small message of the engine's own (an offer, an answer) to world rank `peer`.
  void send_control(collective_state& s, std::uint32_t peer, std::uint32_t step,
                    std::uint32_t chunk, std::span<const std::byte> body);
  void offer_chunk(collective_state& s, const send_step& step, std::uint32_t peer,
                   std::span<const std::byte> bytes);
  /// Pulls an offered chunk into its place and answers; the chunk, or nothing if refused.
  std::optional<received_chunk> take_offer(collective_state& s, std::uint32_t source,
                                           std::uint32_t from, std::uint32_t step,
                                           std::uint32_t chunk, std::span<const std::byte> body);
  void on_answer(collective_state& s, std::uint32_t source, std::uint32_t step,
                 std::uint32_t chunk, std::span<const std::byte> body);
  /// A failed or abandoned call with offers open: waits (offer_answer_grace) for the answers of
  /// peers still up, so that nobody reads the bytes once they are the caller's again.
  void settle_offers(collective_state& s);
  /// Lends `bytes` to the link (waiting for the oldest loan back if every slot is out).
  io::buffer lend(collective_state& s, std::span<const std::byte> bytes);
  /// Waits until the link holds nothing of the oldest loan (the peer acked it, or the link
  /// dropped it going down).
  void settle_oldest_loan(collective_state& s);
  // The oldest send, handed over, and the oldest receive, completed or cancelled, leave their
  // rings; the buffers they held go back now, not when the slot is reused.
  static void retire_oldest_send(collective_state& s) noexcept;
  static void retire_oldest_receive(collective_state& s) noexcept;
  void fail(collective_state& s, std::error_code ec, std::string detail = {});
  /// A send or receive failed: a dead member says why better than the transport does.
  void fail_transport(collective_state& s, std::string what);
  /// Fails `s` with errc::rank_failed if a member's link is down; true if it did.
  bool check_members(collective_state& s);
  /// Cancels what is still posted, waits for the sends' hand-over, marks it finished.
  void finish(collective_state& s);
  /// Members of `g` whose links are down (member indices).
  std::vector<std::uint32_t> down_members(const communicator_group& g) const;
  /// VESSEL_TRACE: the collective's trace, on the lowest lane of its communicator free now.
  void begin_trace(collective_state& s, trace_recorder& recorder, const algorithm_params& p,
                   std::size_t message_bytes);
  void end_trace(collective_state& s);

  /// Starts (or starts again) the driver of `s`: first sends, receives posted.
  void launch(collective_state& s);
  /// Counts restarts; a new one abandons every collective in flight under an older epoch and
  /// publishes the rejoin record for the restarted rank.
  void check_restarts();
  /// Drops the attempt in flight: nothing of it (chunks kept, receives, partial output) survives.
  void abandon(collective_state& s);
  /// An abandoned or deferred collective: starts it under the current epoch once every member's
  /// link is up (fails it if one is down). True if it moved.
  bool retry(collective_state& s);
  bool members_up(const communicator_group& g) const;
  void publish_rejoin(std::uint32_t rank, std::uint64_t restart);
};

// -- collective_request

collective_request::collective_request() noexcept = default;
collective_request::collective_request(std::shared_ptr<collective_engine> engine,
                                       std::shared_ptr<collective_state> s) noexcept
    : engine_(std::move(engine)), state_(std::move(s)) {}
collective_request::collective_request(collective_request&&) noexcept = default;
collective_request& collective_request::operator=(collective_request&& other) noexcept {
  if (this != &other) {
    if (state_ && !state_->finished) (void)wait();
    engine_ = std::move(other.engine_);
    state_ = std::move(other.state_);
  }
  return *this;
}
collective_request::~collective_request() {
  if (state_ && !state_->finished) (void)wait();
}

result<void> collective_request::wait() {
  if (!state_) return errc::invalid_argument;
  if (!state_->finished) return engine_->wait_for(*state_);
  if (state_->error) return state_->error;
  return outcome::success();
}

bool collective_request::test() {
  if (!state_) return true;
  if (!state_->finished) engine_->progress();
  return state_->finished;
}

std::string collective_request::detail() const {
  if (!state_ || !state_->finished || !state_->error) return {};
  if (!state_->detail.empty()) return state_->detail;
  return state_->name() + ": " + state_->error.message();
}

// -- collective_engine

namespace {

/// wire::body_combiner for a chunk reduced as it lands: ctx is the collective's params. The
/// algorithm checked type and op at start(), and runs come whole elements (reduce_on_landing).
void reduce_arriving(const void* ctx, std::byte* dst, const std::byte* operand,
                     const std::byte* arriving, std::size_t n) noexcept {
  const auto& params = *static_cast<const algorithm_params*>(ctx);
  (void)reduce_to({dst, n}, {operand, n}, {arriving, n}, params.type, params.op);
}

/// Where a chunk arriving for `ctx` (a collective_state) goes: the algorithm's landing place, or a
/// pool block. On the thread running the reactor's loop; reads only what stays fixed while
/// receives are posted (the group, the algorithm).
actors::p2p_request::location locate_chunk(const void* ctx, std::uint32_t source,
                                           std::span<const std::byte> head) noexcept {
  const auto& s = *static_cast<const collective_state*>(ctx);
  if (s.algo == nullptr || source >= s.group->index_of.size()) return {};
  const std::uint32_t from = s.group->index_of[source];
  if (from == not_a_member) return {};
  const std::uint32_t step = get_u32(head.data());
  const std::uint32_t chunk = get_u32(head.data() + 4);
  if ((step & ~chunk_step_mask) != 0) return {};  // an offer or an answer: small, into a block
  if (std::span<std::byte> place = s.algo->landing(from, step, chunk); !place.empty()) {
    return {place, {}};
  }
  if (!s.reduce_on_landing) return {};
  const reduce_landing fold = s.algo->reducing_landing(from, step, chunk);
  if (fold.empty() || fold.operand.size() != fold.place.size()) return {};
  return {fold.place, {&reduce_arriving, &s.params, fold.operand.data()}};
}

}  // namespace

void collective_engine::post_receive(collective_state& s, std::size_t slot) {
  actors::p2p_request& r = s.receives[slot];
  actors::p2p_request::make_receive_located(r, actors::any_source, s.tag, header_bytes,
                                            &locate_chunk, &s);
  ++s.receives_posted;
  rt->submit(r);
}

void collective_engine::post_receives_due(collective_state& s) {
  const std::uint64_t wanted = std::min<std::uint64_t>(s.receive_slots, s.messages_due);
  while (!s.error && s.receives_posted < wanted) {
    post_receive(s, (s.receive_head + s.receives_posted) % s.receive_slots);
  }
}

actors::p2p_request* collective_engine::claim_send(collective_state& s) {
  if (s.sends_out == s.send_slots) {  // backpressure: wait for the oldest send's hand-over
    actors::p2p_request& oldest = s.sends[s.send_head];
    oldest.wait();
    if (oldest.error) {
      fail_transport(s, "send to rank " + std::to_string(oldest.peer));
      return nullptr;
    }
    retire_oldest_send(s);
  }
  return &s.sends[(s.send_head + s.sends_out) % s.send_slots];
}

void collective_engine::send_chunk(collective_state& s, const send_step& step,
                                   std::span<const std::byte> bytes) {
  if (s.error) return;
  if (step.peer >= s.group->size() || (step.step & ~chunk_step_mask) != 0) {
    return fail(s, make_error_code(errc::invalid_argument));
  }
  const std::uint32_t peer = s.group->members[step.peer];
  // A chunk that stays put until the peer has it, to a peer on this host: the peer reads it
  // from here, one copy instead of two through the shared-memory ring.
  if (s.pull && step.lendable && peer != rt->rank() && !offers_refused_by[peer] &&
      rt->reaches_by_shm(peer)) {
    return offer_chunk(s, step, peer, bytes);
  }
  actors::p2p_request* r = claim_send(s);
  if (r == nullptr) return;
  // A chunk of a fragment or more that stays put until the peer has it: copy only its header
  // and lend the bytes (the fragment the two share goes out in two parts), saving a pass over
  // them. Smaller chunks are copied: the link acks them late (its delayed ack), and a lent
  // chunk holds its call until the ack is in.
  const bool split = s.lent && step.lendable && peer != rt->rank() &&
                     header_bytes + bytes.size() >= rt->fragment_bytes();
  const std::size_t copied = split ? 0 : bytes.size();
  io::buffer block = rt->acquire_send_block(header_bytes + copied);
  if (!block) return fail(s, make_error_code(errc::invalid_argument));
  put_u32(block.data(), step.step);
  put_u32(block.data() + 4, step.chunk);
  if (copied != 0) wire::copy_bytes(block.data() + header_bytes, bytes.data(), copied);
  if (split) {
    io::buffer rest = lend(s, bytes.subspan(copied));
    actors::p2p_request::make_split_send(*r, peer, s.tag,
                                         std::move(block).slice(0, header_bytes + copied),
                                         std::move(rest).slice(0, bytes.size() - copied));
  } else {
    actors::p2p_request::make_send(*r, peer, s.tag,
                                   std::move(block).slice(0, header_bytes + copied));
  }
  ++s.sends_out;
  rt->submit(*r);
  if (s.trace) s.trace->sent(step.step, step.peer, bytes.size(), trace_now());
}

void collective_engine::send_control(collective_state& s, std::uint32_t peer, std::uint32_t step,
                                     std::uint32_t chunk, std::span<const std::byte> body) {
  actors::p2p_request* r = claim_send(s);
  if (r == nullptr) return;
  io::buffer block = rt->acquire_send_block(header_bytes + body.size());
  if (!block) return fail(s, make_error_code(errc::invalid_argument));
  put_u32(block.data(), step);
  put_u32(block.data() + 4, chunk);
  std::memcpy(block.data() + header_bytes, body.data(), body.size());
  actors::p2p_request::make_send(*r, peer, s.tag,
                                 std::move(block).slice(0, header_bytes + body.size()));
  ++s.sends_out;
  rt->submit(*r);
}

void collective_engine::offer_chunk(collective_state& s, const send_step& step,
                                    std::uint32_t peer, std::span<const std::byte> bytes) {
  std::array<std::byte, sizeof(chunk_offer)> body;
  put_plain(body.data(), chunk_offer::of(bytes, io::this_process_token()));
  s.offers.push_back({peer, step, bytes});
  ++s.offers_open;
  s.one_more_due();  // its answer
  ++pulls.offered;
  send_control(s, peer, step.step | chunk_offer_bit, step.chunk, body);
  if (s.trace) s.trace->sent(step.step, step.peer, bytes.size(), trace_now());
}

std::optional<received_chunk> collective_engine::take_offer(collective_state& s,
                                                            std::uint32_t source,
                                                            std::uint32_t from, std::uint32_t step,
                                                            std::uint32_t chunk,
                                                            std::span<const std::byte> body) {
  if (body.size() != sizeof(chunk_offer)) {
    fail(s, make_error_code(errc::protocol_violation),
         s.name() + ": malformed chunk offer from world rank " + std::to_string(source));
    return std::nullopt;
  }
  const chunk_offer offer = get_plain<chunk_offer>(body.data());
  std::error_code ec = make_error_code(std::errc::operation_not_permitted);  // refused before
  received_chunk arrived;
  if (!refusing_offers_from[source]) {
    // Where the ordinary chunk would have landed (locate_chunk), else a block of the pool.
    const std::span<std::byte> place = s.algo->landing(from, step, chunk);
    const reduce_landing fold = place.empty() && s.reduce_on_landing
                                    ? s.algo->reducing_landing(from, step, chunk)
                                    : reduce_landing{};
    if (!place.empty() && place.size() == offer.bytes) {
      ec = io::pull_from_process(offer.holder(), offer.address, place);
      arrived.landed = place;
    } else if (!fold.empty() && fold.place.size() == offer.bytes &&
               fold.operand.size() == offer.bytes) {
      // Read piece by piece into a bounce that stays in cache, each reduced into place at once
      // (as the ring reduces a chunk fragment by fragment as it lands).
      const std::size_t piece = std::min<std::size_t>(offer.bytes, pull_piece_bytes);
      s.pull_bounce.resize(piece);
      ec.clear();
      for (std::size_t at = 0; at < offer.bytes && !ec; at += piece) {
        const std::size_t n = std::min(piece, offer.bytes - at);
        const std::span<std::byte> into{s.pull_bounce.data(), n};
        ec = io::pull_from_process(offer.holder(), offer.address + at, into);
        if (!ec) {
          (void)reduce_to(fold.place.subspan(at, n), fold.operand.subspan(at, n), into,
                          s.params.type, s.params.op);
        }
      }
      arrived.landed = fold.place;
    } else {
      if (offer.bytes > rt->max_message_bytes() - header_bytes) {
        fail(s, make_error_code(errc::protocol_violation),
             s.name() + ": chunk offer of " + std::to_string(offer.bytes) +
                 " B from world rank " + std::to_string(source) + " exceeds the largest message");
        return std::nullopt;
      }
      io::buffer block = rt->acquire_send_block(header_bytes + offer.bytes);
      if (!block) {
        fail(s, make_error_code(errc::invalid_argument));
        return std::nullopt;
      }
      ec = io::pull_from_process(offer.holder(), offer.address,
                                 {block.data() + header_bytes, offer.bytes});
      arrived.slice = std::move(block).slice(0, header_bytes + offer.bytes);
    }
    if (ec) {
      refusing_offers_from[source] = true;
      logger().warn(
          "rank {}: cannot read world rank {}'s memory ({}): its chunks come through the "
          "transport from now on",
          rt->rank(), source, ec.message());
    }
  }
  std::array<std::byte, sizeof(chunk_answer)> answer;
  put_plain(answer.data(), ec ? chunk_answer::refused : chunk_answer::pulled);
  send_control(s, source, step | chunk_answer_bit, chunk, answer);
  if (ec) {
    ++pulls.refused;
    s.one_more_due();  // sent again
    return std::nullopt;
  }
  ++pulls.pulled;
  return arrived;
}

void collective_engine::on_answer(collective_state& s, std::uint32_t source, std::uint32_t step,
                                  std::uint32_t chunk, std::span<const std::byte> body) {
  const std::size_t i = s.first_open_offer(source);
  if (body.size() != sizeof(chunk_answer) || i == s.offers.size() ||
      s.offers[i].step.step != step || s.offers[i].step.chunk != chunk) {
    return fail(s, make_error_code(errc::protocol_violation),
                s.name() + ": world rank " + std::to_string(source) +
                    " answered an offer it was not made (step " + std::to_string(step) +
                    ", chunk " + std::to_string(chunk) + ")");
  }
  s.offers[i].answered = true;
  --s.offers_open;
  while (s.offers_first_open < s.offers.size() && s.offers[s.offers_first_open].answered) {
    ++s.offers_first_open;
  }
  if (get_plain<chunk_answer>(body.data()) != chunk_answer::refused || s.offers[i].resent) return;
  if (!offers_refused_by[source]) {
    offers_refused_by[source] = true;
    logger().warn(
        "rank {}: world rank {} cannot read this process's memory: chunks to it go through the "
        "transport from now on",
        rt->rank(), source);
  }
  // The peer refuses every later offer of ours too: all of them go again, in their order,
  // before anything new.
  for (std::size_t j = i; j < s.offers.size() && !s.error; ++j) {
    if (s.offers[j].peer != source || s.offers[j].resent) continue;
    s.offers[j].resent = true;
    const send_step again = s.offers[j].step;
    const std::span<const std::byte> bytes = s.offers[j].bytes;
    send_chunk(s, again, bytes);
  }
}

void collective_engine::settle_offers(collective_state& s) {
  const auto until = std::chrono::steady_clock::now() + offer_answer_grace;
  actors::p2p_request r;
  for (std::size_t i = s.offers_first_open; i < s.offers.size(); ++i) {
    const std::uint32_t peer = s.offers[i].peer;
    while (!s.offers[i].answered && rt->peer_status(peer) == actors::peer_state::up &&
           std::chrono::steady_clock::now() < until) {
      actors::p2p_request::make_receive(r, peer, s.tag);
      rt->submit(r);
      if (!r.wait_until(until)) rt->cancel(r);
      if (r.error) break;
      // Answers mark their offers; chunks and offers to this failed call are dropped.
      const std::span<const std::byte> got{r.payload.data(), r.payload.size()};
      if (got.size() == header_bytes + sizeof(chunk_answer) &&
          (get_u32(got.data()) & chunk_answer_bit) != 0) {
        if (const std::size_t j = s.first_open_offer(peer); j < s.offers.size()) {
          s.offers[j].answered = true;
        }
      }
      r.payload.reset();
    }
  }
  s.drop_offers();
}

io::buffer collective_engine::lend(collective_state& s, std::span<const std::byte> bytes) {
  // Lent read-only: the link sends from it and nobody writes it until the loan is back.
  const std::span<std::byte> memory{const_cast<std::byte*>(bytes.data()), bytes.size()};
  io::borrowed_memory::loan loan = s.lent->try_lend(memory);
  while (!loan.handle) {  // every slot out: the oldest comes back with its ack
    settle_oldest_loan(s);
    loan = s.lent->try_lend(memory);
  }
  s.loans[(s.loan_head + s.loans_out) % s.loan_slots] = loan.slot;
  ++s.loans_out;
  return std::move(loan.handle);
}

void collective_engine::retire_oldest_send(collective_state& s) noexcept {
  actors::p2p_request& r = s.sends[s.send_head];
  r.payload.reset();
  r.tail.reset();
  s.send_head = (s.send_head + 1) % s.send_slots;
  --s.sends_out;
}

void collective_engine::retire_oldest_receive(collective_state& s) noexcept {
  s.receives[s.receive_head].payload.reset();
  s.receive_head = (s.receive_head + 1) % s.receive_slots;
  --s.receives_posted;
}

void collective_engine::settle_oldest_loan(collective_state& s) {
  const std::uint32_t slot = s.loans[s.loan_head];
  s.loan_head = (s.loan_head + 1) % s.loan_slots;
  --s.loans_out;
  rt->await_returned(*s.lent, slot);
}

void collective_engine::fail(collective_state& s, std::error_code ec, std::string detail) {
  if (s.error) return;
  s.error = ec;
  s.detail = std::move(detail);
}

std::vector<std::uint32_t> collective_engine::down_members(const communicator_group& g) const {
  std::vector<std::uint32_t> down;
  for (std::uint32_t i = 0; i < g.size(); ++i) {
    if (rt->peer_status(g.members[i]) == actors::peer_state::down) down.push_back(i);
  }
  return down;
}

bool collective_engine::check_members(collective_state& s) {
  if (s.error) return false;
  const std::vector<std::uint32_t> down = down_members(*s.group);
  if (down.empty()) return false;
  std::vector<std::uint32_t> world;
  for (std::uint32_t i : down) world.push_back(s.group->members[i]);
  std::string detail = s.name() + ": rank(s) " + rank_list(down) + " gone (world rank(s) " +
                       rank_list(world) + "): link down";
  logger().error("rank {}: {}", rt->rank(), detail);
  fail(s, make_error_code(errc::rank_failed), std::move(detail));
  return true;
}

void collective_engine::fail_transport(collective_state& s, std::string what) {
  if (check_members(s)) return;
  std::string detail = s.name() + ": " + what + " failed";
  logger().error("rank {}: {}", rt->rank(), detail);
  fail(s, make_error_code(errc::transport_failed), std::move(detail));
}

bool collective_engine::advance(collective_state& s) {
  if (s.finished) return false;
  if (s.awaiting_retry) return retry(s);
  bool moved = false;
  auto emit = [this, &s](const send_step& step, std::span<const std::byte> bytes) {
    send_chunk(s, step, bytes);
  };
  while (!s.error && s.receives_posted > 0 && s.receives[s.receive_head].done()) {
    actors::p2p_request& r = s.receives[s.receive_head];
    const std::size_t slot = s.receive_head;
    s.receive_head = (s.receive_head + 1) % s.receive_slots;
    --s.receives_posted;
    const bool counted = s.counts_messages();
    if (counted) --s.messages_due;
    moved = true;
    if (r.error) {
      fail_transport(s, "receive (" + r.error.message() + ")");
      break;
    }
    const std::uint32_t from =
        r.source < s.group->index_of.size() ? s.group->index_of[r.source] : not_a_member;
    const std::size_t length = r.landed ? r.length : r.payload.size();
    if (length < header_bytes || from == not_a_member) {
      fail(s, make_error_code(errc::protocol_violation),
           s.name() + ": malformed chunk from world rank " + std::to_string(r.source));
      break;
    }
    const std::byte* header = r.landed ? r.head.data() : r.payload.data();
    std::uint32_t step = get_u32(header);
    const std::uint32_t chunk = get_u32(header + 4);
    // Answers are still due after the driver is done, while offers of ours are open.
    auto repost = [&] {
      if (counted) return post_receives_due(s);
      if (!s.error && (!s.driver->done() || s.offers_open > 0)) post_receive(s, slot);
    };
    received_chunk arrived;
    if ((step & ~chunk_step_mask) != 0) {  // never landed: locate_chunk leaves these in blocks
      const std::span<const std::byte> body{header + header_bytes, length - header_bytes};
      std::optional<received_chunk> pulled;
      if ((step & chunk_answer_bit) != 0) {
        on_answer(s, r.source, step & chunk_step_mask, chunk, body);
      } else {
        step &= chunk_step_mask;
        pulled = take_offer(s, r.source, from, step, chunk, body);
      }
      r.payload.reset();
      if (!pulled) {
        repost();
        continue;
      }
      arrived = std::move(*pulled);
    } else {
      arrived.slice = std::move(r.payload);
      if (r.landed) arrived.landed = std::span<const std::byte>{r.into.data(), length - header_bytes};
      // Done with r: the next receive goes out before the chunk is reduced, in time for a chunk
      // that arrives meanwhile to land in place.
      if (counted) post_receives_due(s);
    }
    if (s.trace) s.trace->received(step, from, arrived.size(), trace_now());
    auto delivered = s.driver->deliver(from, step, chunk, std::move(arrived), emit);
    if (!delivered) {
      fail(s, delivered.error());
      break;
    }
    repost();
  }
  while (s.sends_out > 0 && s.sends[s.send_head].done()) {
    actors::p2p_request& r = s.sends[s.send_head];
    if (r.error) fail_transport(s, "send to world rank " + std::to_string(r.peer));
    retire_oldest_send(s);
    moved = true;
  }
  if (!s.error && s.offers_open > 0 && s.receives_posted == 0) {
    // A driver done before anything came (a broadcast's root) still takes its answers.
    post_receive(s, s.receive_head);
  }
  if (moved) s.touch();
  if (s.error || (s.driver->done() && s.sends_out == 0 && s.offers_open == 0)) finish(s);
  return moved || s.finished;
}

void collective_engine::finish(collective_state& s) {
  // Receives still posted: nothing more is addressed to us under this tag once the algorithm
  // is done, so a cancelled receive that got a message anyway means a broken peer.
  while (s.receives_posted > 0) {
    actors::p2p_request& r = s.receives[s.receive_head];
    rt->cancel(r);
    if (!r.error && !s.error) fail(s, make_error_code(errc::protocol_violation));
    retire_oldest_receive(s);
  }
  if (s.offers_open > 0) settle_offers(s);  // failed: a done driver waited for every answer
  while (s.sends_out > 0) {  // their memory must outlive the reactor's use of them
    s.sends[s.send_head].wait();
    retire_oldest_send(s);
  }
  while (s.loans_out > 0) settle_oldest_loan(s);  // the caller's buffers are its own again
  // Chunks the driver kept for later rounds are blocks of the mesh's pool: a failed collective
  // must not hold them until its request goes (the runtime may be shut down first). The driver
  // itself stays, with its step list's capacity, for the state's next call.
  if (s.driver) s.driver->drop_kept();
  s.release_large_buffers();
  s.finished = true;
  end_trace(s);
}

std::shared_ptr<collective_state> collective_engine::failed_state(collective_op op,
                                                                  std::error_code ec) {
  std::shared_ptr<collective_state> s = fresh_state();
  s->op = op;
  s->error = ec;
  s->finished = true;
  return s;
}

std::shared_ptr<collective_state> collective_engine::fresh_state() {
  for (const auto& kept : recent) {
    if (kept && kept.use_count() == 1) {
      kept->reuse();
      return kept;
    }
  }
  auto s = std::make_shared<collective_state>();
  recent[recent_next] = s;
  recent_next = (recent_next + 1) % recent.size();
  return s;
}

collective_engine::~collective_engine() {
  trace_recorder* recorder = trace_recorder::global();
  if (recorder == nullptr) return;
  if (auto w = recorder->write(rt->rank()); !w) {
    logger().warn("rank {}: VESSEL_TRACE: cannot write {}: {}", rt->rank(),
                  trace_recorder::rank_path(recorder->path(), rt->rank()), w.error().message());
  }
}

void collective_engine::begin_trace(collective_state& s, trace_recorder& recorder,
                                    const algorithm_params& p, std::size_t message_bytes) {
  if (s.comm_id >= trace_lanes.size()) trace_lanes.resize(s.comm_id + 1, 0);
  std::uint64_t& busy = trace_lanes[s.comm_id];
  std::uint32_t lane = 0;
  while (lane + 1 < trace_lanes_per_communicator && (busy & (std::uint64_t{1} << lane)) != 0) {
    ++lane;
  }
  busy |= std::uint64_t{1} << lane;
  s.trace_lane = lane;
  trace_event header;
  header.rank = rt->rank();
  header.track = s.comm_id * trace_lanes_per_communicator + lane;
  header.communicator = s.comm_id;
  header.comm_rank = p.rank;
  header.comm_size = p.size;
  header.root = p.root;
  header.sequence = s.sequence;
  header.count = p.count;
  header.bytes = message_bytes;
  describe(header, s.op, p.type, p.op);
  const std::size_t n = std::min(s.algorithm_name.size(), header.algorithm.size() - 1);
  std::memcpy(header.algorithm.data(), s.algorithm_name.data(), n);
  s.trace = std::make_unique<collective_trace>(recorder, header, 2 * std::size_t{p.size} + 2,
                                               trace_now());
}

void collective_engine::end_trace(collective_state& s) {
  if (!s.trace) return;
  s.trace->finish(s.error, trace_now());
  s.trace.reset();
  if (s.comm_id < trace_lanes.size()) {
    trace_lanes[s.comm_id] &= ~(std::uint64_t{1} << s.trace_lane);
  }
}

bool collective_engine::progress() {
  check_restarts();
  bool moved = false;
  for (std::size_t i = 0; i < active.size(); ++i) moved |= advance(*active[i]);
  std::erase_if(active, [](const auto& s) { return s->finished; });
  return moved;
}

result<void> collective_engine::wait_for(collective_state& s) {
  while (!s.finished) {
    // Read before looking: a completion after this read moves it, so the sleep below cannot
    // miss one (every request of every collective here signals rt->events(), as do link state
    // changes), and waiting on `s` drives every collective of the family.
    const std::uint32_t seen = rt->events();
    if (progress() || s.finished) continue;
    // No spin first: on these loaded 2-core machines a spinning waiter takes the core the
    // reactor needs to deliver the chunk (a 200- or 2000-poll spin measured slower). The sleep
    // ends at the earliest deadline, so a hang is still reported on time.
    auto until = std::chrono::steady_clock::time_point::max();
    for (const auto& a : active) until = std::min(until, a->deadline);
    (void)rt->wait_events(seen, until);
    for (const auto& other : active) {
      collective_state& a = *other;
      if (a.finished) continue;
      if (check_members(a)) {  // a member is gone for good: no point waiting for the timeout
        finish(a);
        continue;
      }
      if (std::chrono::steady_clock::now() < a.deadline) continue;
      if (a.awaiting_retry) {
        std::string detail = a.name() + ": no progress for " + std::to_string(a.timeout.count()) +
                             " ms: waiting to retry after a member's restart until every " +
                             "member's link is up";
        logger().error("rank {}: {}", rt->rank(), detail);
        fail(a, make_error_code(errc::timed_out), std::move(detail));
        finish(a);
        continue;
      }
      std::vector<std::uint32_t> peers;
      const std::uint32_t round = a.algo->waiting_for(peers);
      std::string links;  // awaited members whose link is not up say more than "waiting"
      for (std::uint32_t p : peers) {
        if (p >= a.group->size()) continue;
        const actors::peer_state st = rt->peer_status(a.group->members[p]);
        if (st != actors::peer_state::up) {
          links += " rank " + std::to_string(p) + " link " + actors::to_string(st) + ";";
        }
      }
      std::string detail = a.name() + ": no progress for " + std::to_string(a.timeout.count()) +
                           " ms: round " + std::to_string(round) + ", waiting for rank(s) " +
                           rank_list(peers) + ", " + std::to_string(a.driver->kept_count()) +
                           " chunk(s) kept" + links +
                           (a.offers_open > 0 ? ", " + std::to_string(a.offers_open) +
                                                    " offered chunk(s) not yet taken"
                                              : std::string{});
      logger().error("rank {}: {}", rt->rank(), detail);
      fail(a, make_error_code(errc::timed_out), std::move(detail));
      finish(a);
    }
    std::erase_if(active, [](const auto& p) { return p->finished; });
  }
  if (s.error) return s.error;
  return outcome::success();
}

void collective_engine::launch(collective_state& s) {
  auto emit = [this, &s](const send_step& step, std::span<const std::byte> bytes) {
    send_chunk(s, step, bytes);
  };
  // Receives go out before the first send: a sender may take in the peer's chunks on its own
  // turn (runtime::submit), and a chunk with no receive posted is copied into a pool block and
  // again into place (a 16 MiB allgather, 8 chunks sent back to back, measured 40 % slower).
  auto post_receives = [this, &s] {
    if (const std::optional<std::uint64_t> due = s.algo->chunks_to_receive()) {
      s.messages_due = *due;
      return post_receives_due(s);
    }
    if (s.driver->done()) return;
    for (std::size_t i = 0; i < s.receive_slots; ++i) post_receive(s, i);
  };
  if (auto started = s.driver->start(emit, post_receives); !started) fail(s, started.error());
  if (s.counts_messages()) post_receives_due(s);  // offers' answers
  (void)advance(s);
}

bool collective_engine::members_up(const communicator_group& g) const {
  for (std::uint32_t m : g.members) {
    if (rt->peer_status(m) != actors::peer_state::up) return false;
  }
  return true;
}

void collective_engine::check_restarts() {
  if (!retry_on_restart) return;
  bool changed = false;
  for (std::uint32_t p = 0; p < restarts_seen.size() && !changed; ++p) {
    changed = rt->peer_restarts(p) != restarts_seen[p];
  }
  if (!changed) return;
  std::uint64_t seen = 0;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> restarted;
  for (std::uint32_t p = 0; p < restarts_seen.size(); ++p) {
    const std::uint64_t c = rt->peer_restarts(p);
    if (c != restarts_seen[p]) restarted.emplace_back(p, c);
    restarts_seen[p] = c;
    seen += c;
  }
  epoch = epoch_base + seen;
  for (const auto& s : active) {
    if (!s->finished && !s->awaiting_retry && s->epoch != epoch) abandon(*s);
  }
  for (const auto& [p, c] : restarted) publish_rejoin(p, c);
}

void collective_engine::abandon(collective_state& s) {
  while (s.receives_posted > 0) {  // whatever matched meanwhile belongs to the dead attempt
    actors::p2p_request& r = s.receives[s.receive_head];
    rt->cancel(r);
    retire_oldest_receive(s);
  }
  while (s.sends_out > 0) {  // handed over (or failed): their bytes are the link's, not ours
    s.sends[s.send_head].wait();
    retire_oldest_send(s);
  }
  while (s.loans_out > 0) settle_oldest_loan(s);  // the retry rewrites what they lent
  settle_offers(s);                                // ... and what it offered
  s.receive_head = s.send_head = s.loan_head = 0;
  s.driver.reset();
  s.algo.reset();
  s.awaiting_retry = true;
  logger().info(
      "rank {}: {}: a member restarted: attempt abandoned, retried once every "
      "member's link is up",
      rt->rank(), s.name());
}

bool collective_engine::retry(collective_state& s) {
  if (check_members(s)) {  // gone for good after all: case 3, as without restarts
    finish(s);
    return true;
  }
  if (!members_up(*s.group)) return false;
  auto algo = make_algorithm(s.op, s.algorithm_name, s.params);
  if (!algo) {
    fail(s, algo.error());
    finish(s);
    return true;
  }
  s.algo = std::move(algo).value();
  s.scratch.assign(s.algo->scratch_bytes(), std::byte{0});
  s.buffers.scratch = s.scratch;
  s.driver.emplace(*s.algo, s.buffers);
  if (s.epoch != epoch) ++s.attempts;
  s.epoch = epoch;
  s.tag = collective_tag(s.comm_id, s.sequence, epoch);
  s.awaiting_retry = false;
  s.touch();
  if (s.attempts > 1) logger().info("rank {}: {}: retrying", rt->rank(), s.name());
  launch(s);
  return true;
}

void collective_engine::publish_rejoin(std::uint32_t rank, std::uint64_t restart) {
  if (world_comm == nullptr) return;
  rejoin_record rec{world_comm->sequence_, epoch};
  for (const auto& s : active) {
    if (s->owner == world_comm && !s->finished) {
      rec.sequence = std::min(rec.sequence, s->sequence);
    }
  }
  const std::string key = rejoin_record::key(rank, restart, rt->rank());
  logger().info("rank {}: rank {} restarted (restart {}): it rejoins at collective #{} (epoch {})",
                rt->rank(), rank, restart, rec.sequence, rec.epoch);
  if (auto w = rt->store().set(key, rec.encode()); !w) {
    logger().error("rank {}: cannot publish {}: {}", rt->rank(), key, w.error().message());
  }
}

// -- rejoin_record

std::string rejoin_record::encode() const {
  return std::to_string(sequence) + " " + std::to_string(epoch);
}

result<rejoin_record> rejoin_record::decode(std::string_view text) {
  rejoin_record r;
  std::uint64_t* fields[2] = {&r.sequence, &r.epoch};
  std::size_t at = 0;
  for (int f = 0; f < 2; ++f) {
    if (f == 1) {
      if (at >= text.size() || text[at] != ' ') return errc::protocol_violation;
      ++at;
    }
    const std::size_t begin = at;
    std::uint64_t v = 0;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
      const std::uint64_t digit = static_cast<std::uint64_t>(text[at] - '0');
      if (v > (~std::uint64_t{0} - digit) / 10) return errc::protocol_violation;
      v = v * 10 + digit;
      ++at;
    }
    if (at == begin || at - begin > 20) return errc::protocol_violation;
    *fields[f] = v;
  }
  if (at != text.size()) return errc::protocol_violation;
  return r;
}

std::string rejoin_record::key(std::uint32_t rank, std::uint64_t restart, std::uint32_t survivor) {
  return "vessel/coll/rejoin/" + std::to_string(rank) + "/" + std::to_string(restart) + "/" +
         std::to_string(survivor);
}

// -- communicator

communicator::communicator(std::shared_ptr<collective_engine> engine,
                           std::shared_ptr<const communicator_group> group,
                           communicator_options options)
    : engine_(std::move(engine)), group_(std::move(group)), options_(options) {
  ids().used(*engine_->rt, options_.id);
  links_ = link_class::shared_memory;
  for (std::uint32_t r = 0; r < size(); ++r) {
    if (r != rank() && !engine_->rt->reaches_by_shm(world_rank(r))) links_ = link_class::mixed;
  }
  if (const char* inc = std::getenv("VESSEL_INCARNATION"); inc != nullptr) {
    incarnation_ = static_cast<std::uint32_t>(std::strtoul(inc, nullptr, 10));
  }
}

communicator::~communicator() {
  const auto pending = engine_->active;
  for (const auto& s : pending) {
    if (s->owner == this && !s->finished) (void)engine_->wait_for(*s);
  }
  if (engine_->world_comm == this) engine_->world_comm = nullptr;
}

result<std::unique_ptr<communicator>> communicator::create(actors::runtime& rt,
                                                           communicator_options options) {
  if (options.id > max_communicator_id || options.max_sends_in_flight == 0 ||
      options.receive_window == 0) {
    return errc::invalid_argument;
  }
  std::vector<std::uint32_t> all(rt.size());
  for (std::uint32_t i = 0; i < rt.size(); ++i) all[i] = i;
  auto group = std::make_shared<const communicator_group>(std::move(all), rt.size(), rt.rank());
  std::unique_ptr<communicator> c{
      new communicator(std::make_shared<collective_engine>(rt), std::move(group), options)};
  VESSEL_TRY(c->selector_.apply_env(process_env()));
  collective_engine& e = *c->engine_;
  if (options.pull_bytes) {
    e.pull_threshold = *options.pull_bytes;
  } else {
    auto from_env = pull_bytes_from_env(rt);
    if (!from_env) return from_env.error();
    e.pull_threshold = from_env.value();
  }
  if (e.pull_threshold == 0) e.pull_threshold = std::numeric_limits<std::size_t>::max();
  e.retry_on_restart = options.retry_on_restart.value_or(restarts_allowed());
  if (!e.retry_on_restart) return c;
  e.world_comm = c.get();
  e.restarts_seen.resize(rt.size());
  std::uint64_t seen = 0;
  for (std::uint32_t p = 0; p < rt.size(); ++p) seen += e.restarts_seen[p] = rt.peer_restarts(p);
  if (c->incarnation_ > 0) {
    // A restart: every other rank names the world collective it is retrying (header comment).
    std::optional<rejoin_record> agreed;
    for (std::uint32_t p = 0; p < rt.size(); ++p) {
      if (p == rt.rank()) continue;
      const std::string key = rejoin_record::key(rt.rank(), c->incarnation_, p);
      auto value = rt.store().get(key, rejoin_wait());
      if (!value) {
        logger().error("rank {}: restarted (incarnation {}): no rejoin record from rank {}: {}",
                       rt.rank(), c->incarnation_, p, value.error().message());
        return errc::rejoin_mismatch;
      }
      const std::vector<std::byte>& v = value.value();
      auto rec = rejoin_record::decode({reinterpret_cast<const char*>(v.data()), v.size()});
      if (!rec) return rec.error();
      if (agreed && !(*agreed == rec.value())) {
        logger().error(
            "rank {}: restarted: rank {} rejoins at #{} (epoch {}), another at #{} "
            "(epoch {})",
            rt.rank(), p, rec.value().sequence, rec.value().epoch, agreed->sequence, agreed->epoch);
        return errc::rejoin_mismatch;
      }
      agreed = rec.value();
    }
    if (agreed) {
      c->sequence_ = agreed->sequence;
      c->rejoin_sequence_ = agreed->sequence;
      e.epoch_base = agreed->epoch - seen;
      logger().info("rank {}: restarted (incarnation {}): rejoins at collective #{} (epoch {})",
                    rt.rank(), c->incarnation_, agreed->sequence, agreed->epoch);
    }
  }
  e.epoch = e.epoch_base + seen;
  return c;
}

chunk_pull_stats communicator::pull_stats() const noexcept {
  return engine_->pulls;
}

std::uint32_t communicator::rank() const noexcept {
  return group_->self;
}
std::uint32_t communicator::size() const noexcept {
  return group_->size();
}
std::uint32_t communicator::world_rank(std::uint32_t r) const noexcept {
  return r < group_->size() ? group_->members[r] : not_a_member;
}

result<std::string_view> communicator::algorithm_for(collective_op op, std::size_t bytes,
                                                     std::string_view per_call) const {
  return selector_.select(op, size(), bytes, per_call, links_);
}

std::unique_ptr<communicator> communicator::child(const std::vector<std::uint32_t>& members,
                                                  std::uint32_t id) const {
  std::vector<std::uint32_t> world;
  world.reserve(members.size());
  for (std::uint32_t m : members) world.push_back(group_->members[m]);
  auto group = std::make_shared<const communicator_group>(std::move(world), engine_->rt->size(),
                                                          engine_->rt->rank());
  communicator_options o = options_;
  o.id = id;
  std::unique_ptr<communicator> c{new communicator(engine_, std::move(group), o)};
  c->selector_ = selector_;
  return c;
}

result<std::vector<std::int64_t>> communicator::exchange(std::span<const std::int64_t> mine,
                                                         const call_options& o) {
  std::vector<std::int64_t> all(mine.size() * size());
  call_options g = o;
  g.algorithm = {};
  auto r = iallgather(std::as_bytes(mine), std::as_writable_bytes(std::span{all}), dtype::int64, g);
  VESSEL_TRY(r.wait());
  return all;
}

result<std::unique_ptr<communicator>> communicator::split(int color, int key, call_options o) {
  const std::uint32_t next = ids().next(*engine_->rt);
  const std::int64_t mine[3] = {color < 0 ? -1 : color, key, next};
  auto all = exchange(mine, o);
  if (!all) return all.error();
  const std::vector<std::int64_t>& v = all.value();
  std::uint32_t new_id = 0;
  for (std::uint32_t r = 0; r < size(); ++r) new_id = std::max(new_id, std::uint32_t(v[3 * r + 2]));
  // Every member burns the id, whatever its color: ids of disjoint groups may repeat, but this
  // way the next split agrees again without another round.
  ids().used(*engine_->rt, new_id);
  if (new_id > max_communicator_id) return errc::communicators_exhausted;
  if (color < 0) return std::unique_ptr<communicator>{};
  std::vector<std::uint32_t> members;
  for (std::uint32_t r = 0; r < size(); ++r) {
    if (v[3 * r] == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return v[3 * a + 1] < v[3 * b + 1]; });
  return child(members, new_id);
}

std::vector<std::uint32_t> communicator::dead_ranks() const {
  return engine_->down_members(*group_);
}

result<std::unique_ptr<communicator>> communicator::shrink(call_options o) {
  // Wait until every link has settled: a member between up and down (its connection dropped,
  // the reconnect deadline not yet passed) may still come back.
  const auto until = o.timeout == std::chrono::milliseconds::max()
                         ? std::chrono::steady_clock::time_point::max()
                         : std::chrono::steady_clock::now() + o.timeout;
  for (;;) {
    bool settled = true;
    for (std::uint32_t m : group_->members) {
      const actors::peer_state st = engine_->rt->peer_status(m);
      settled &= st == actors::peer_state::up || st == actors::peer_state::down;
    }
    if (settled) break;
    if (std::chrono::steady_clock::now() >= until) return errc::timed_out;
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  const std::vector<std::uint32_t> dead = dead_ranks();
  std::vector<std::uint32_t> survivors;
  std::vector<std::int64_t> mask((size() + 62) / 63 + 1, 0);  // 63 bits per word, then next id
  for (std::uint32_t r = 0; r < size(); ++r) {
    if (std::find(dead.begin(), dead.end(), r) == dead.end()) {
      survivors.push_back(r);
    } else {
      mask[r / 63] |= std::int64_t{1} << (r % 63);
    }
  }
  mask.back() = ids().next(*engine_->rt);
  // The agreement runs over the survivors under this communicator's id and next sequence
  // number (every survivor burns it), so no new id is needed before one is agreed.
  std::unique_ptr<communicator> agree = child(survivors, options_.id);
  agree->sequence_ = sequence_++;
  auto all = agree->exchange(mask, o);
  if (!all) return all.error();
  const std::size_t words = mask.size();
  std::uint32_t new_id = 0;
  for (std::uint32_t r = 0; r < agree->size(); ++r) {
    const std::int64_t* theirs = all.value().data() + r * words;
    if (!std::equal(mask.begin(), mask.end() - 1, theirs)) {
      logger().error("rank {}: shrink of communicator {}: survivor {} sees other dead ranks",
                     rank(), id(), r);
      return errc::rank_failed;
    }
    new_id = std::max(new_id, static_cast<std::uint32_t>(theirs[words - 1]));
  }
  agree.reset();
  ids().used(*engine_->rt, new_id);
  if (new_id > max_communicator_id) return errc::communicators_exhausted;
  logger().info("rank {}: communicator {} shrunk to {} of {} ranks (dead: {}) as communicator {}",
                rank(), options_.id, survivors.size(), size(), rank_list(dead), new_id);
  return child(survivors, new_id);
}

collective_request communicator::start(collective_op op, algorithm_params params,
                                       algorithm_buffers buffers, std::size_t message_bytes,
                                       const call_options& o) {
  params.rank = rank();
  params.size = size();
  params.root = o.root;
  const std::size_t largest = engine_->rt->max_message_bytes() - header_bytes;
  params.chunk_bytes = std::min(o.chunk_bytes != 0 ? o.chunk_bytes : default_chunk_bytes, largest);
  // Every rank burns the sequence number, even on a local error, so the next call still agrees.
  engine_->check_restarts();  // before the number: a rejoin record may name this call
  const std::uint64_t sequence = sequence_++;
  if (params.root >= params.size) return {engine_, engine_->failed_state(op, errc::invalid_argument)};

  auto name = algorithm_for(op, message_bytes, o.algorithm);
  if (!name) return {engine_, engine_->failed_state(op, name.error())};
  auto algo = make_algorithm(op, name.value(), params);
  if (!algo) return {engine_, engine_->failed_state(op, algo.error())};

  std::shared_ptr<collective_state> s = engine_->fresh_state();
  s->op = op;
  s->algorithm_name = name.value();
  s->owner = this;
  s->group = group_;
  s->comm_id = options_.id;
  s->sequence = sequence;
  s->epoch = engine_->epoch;
  s->tag = collective_tag(options_.id, sequence, s->epoch);
  s->params = params;
  if (const std::size_t element = size_of(params.type); element != 0) {
    s->reduce_on_landing =
        engine_->rt->fragment_bytes() % element == 0 && header_bytes % element == 0;
  }
  if (engine_->retry_on_restart && !buffers.input.empty() && !buffers.output.empty() &&
      buffers.input.data() < buffers.output.data() + buffers.output.size() &&
      buffers.output.data() < buffers.input.data() + buffers.input.size()) {
    // In place: a retry must start from the input, which the first attempt overwrites.
    s->kept_input.assign(buffers.input.begin(), buffers.input.end());
    buffers.input = s->kept_input;
  }
  s->algo = std::move(algo).value();
  s->scratch.resize(s->algo->scratch_bytes());
  buffers.scratch = s->scratch;
  s->buffers = buffers;
  if (s->driver) {
    s->driver->rebind(*s->algo, buffers);
  } else {
    s->driver.emplace(*s->algo, buffers);
  }
  // One-chunk messages of an algorithm that cannot count its chunks post one receive at a time:
  // its repost rides in the same batch to the reactor as the sends the chunk released, and none
  // is left over to cancel at the end (a cancel is one more round trip to the reactor thread,
  // the largest cost of a small call). One that counts posts no more than are due.
  const std::size_t receive_slots =
      message_bytes <= params.chunk_bytes && !s->algo->chunks_to_receive().has_value()
          ? std::size_t{1}
          : options_.receive_window;
  // A small send is handed over within a turn or two, so a one-chunk message needs few slots:
  // size - 1 covers the widest fan-out of one step (a tree's root, an alltoall), and on two ranks
  // the set-up zeroes one request instead of max_sends_in_flight (perf: most of a small call's
  // start()). More sends at once only wait for the oldest hand-over.
  const std::size_t send_slots =
      message_bytes <= params.chunk_bytes
          ? std::clamp<std::size_t>(params.size - 1, 1, options_.max_sends_in_flight)
          : options_.max_sends_in_flight;
  s->size_rings(receive_slots, send_slots);
  // Offers while the chunks are large (the ring's blocks are message_bytes / size); every
  // lendable chunk of such a call is offered, so a refused offer's resend overtakes none. A
  // broadcast moves data one way: offered only up to actors::max_one_way_pull_bytes.
  const std::size_t chunk_bytes = std::min(
      op == collective_op::allreduce ? message_bytes / params.size : message_bytes,
      params.chunk_bytes);
  s->pull = chunk_bytes >= engine_->pull_threshold &&
            (op != collective_op::broadcast || message_bytes <= actors::max_one_way_pull_bytes);
  if (message_bytes + header_bytes >= engine_->rt->fragment_bytes()) {
    // Room for the sends in flight and as many more awaiting their acks.
    s->loan_slots = 2 * s->send_slots;
    s->lent = std::make_unique<io::borrowed_memory>(static_cast<std::uint32_t>(s->loan_slots));
    s->loans = std::make_unique<std::uint32_t[]>(s->loan_slots);
  }
  s->timeout = o.timeout;
  s->touch();

  collective_engine& e = *engine_;
  collective_state& st = *s;
  if (trace_recorder* recorder = trace_recorder::global()) {
    e.begin_trace(st, *recorder, params, message_bytes);
  }
  if (e.check_members(st)) {  // a member already gone: fail at once, send nothing
    st.finished = true;
    e.end_trace(st);
    return {engine_, std::move(s)};
  }
  if (e.retry_on_restart && !e.members_up(*group_)) {
    // A member is reconnecting or restarting: what it is sent now may go to its dead process;
    // start once every link is up, under the epoch of then.
    st.driver.reset();
    st.awaiting_retry = true;
  } else {
    e.launch(st);
  }
  if (!st.finished) e.active.push_back(s);
  return {engine_, std::move(s)};
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
    return {engine_, engine_->failed_state(collective_op::broadcast, errc::size_mismatch)};
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
    return {engine_, engine_->failed_state(collective_op::reduce, errc::size_mismatch)};
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
    return {engine_, engine_->failed_state(collective_op::allreduce, errc::size_mismatch)};
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
    return {engine_, engine_->failed_state(collective_op::allgather, errc::size_mismatch)};
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
    return {engine_, engine_->failed_state(collective_op::reduce_scatter, errc::size_mismatch)};
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
    return {engine_, engine_->failed_state(collective_op::gather, errc::size_mismatch)};
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
    return {engine_, engine_->failed_state(collective_op::scatter, errc::size_mismatch)};
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
    return {engine_, engine_->failed_state(collective_op::alltoall, errc::size_mismatch)};
  }
  algorithm_params p;
  p.count = input.size() / block;
  p.type = type;
  return start(collective_op::alltoall, p, {input, output, {}}, input.size() / size(), o);
}

}  // namespace vessel::collectives
