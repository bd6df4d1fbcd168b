#include "actors/comm.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>

#include "actors/env.hpp"
#include "actors/trace_recorder.hpp"
#include "io/cross_memory.hpp"
#include "io/log.hpp"
#include "io/single_copy_probe.hpp"
#include "wire/copy_bytes.hpp"

namespace vessel {
namespace {

using clock = std::chrono::steady_clock;
using actors::p2p_request;

spdlog::logger& logger() {
  // log::get takes a lock and a map lookup; this runs twice per message.
  static spdlog::logger& actors_logger = log::get("actors");
  return actors_logger;
}

/// Prefix of every chunk: the whole message's length and this chunk's offset in it.
struct chunk_header {
  std::uint64_t total;
  std::uint64_t offset;
};
constexpr std::size_t header_bytes = sizeof(chunk_header);

/// Chunks of one message in flight at once, each way: enough to keep the link busy while the
/// next is copied, few enough to hold on the stack.
constexpr std::size_t chunk_window = 8;

/// A blocking send of at least this many bytes to another rank lends the caller's memory to the
/// link instead of copying it into send blocks, and returns once the peer has acked every byte
/// (the link then holds no handle to it): one pass over the bytes less (~100 us per MiB on our
/// VMs) against a wait for the last ack, which the next message no longer overlaps. That wait
/// also keeps a streaming sender from running ahead of its receiver, whose receives are then
/// posted before their messages arrive and take them in place (runtime: make_receive_into).
/// Measured (docs/io_performance.md, "Receives that take their message in place"): from 1 MiB
/// on. VESSEL_LEND_BYTES overrides it (0: never lend).
constexpr std::size_t default_lend_threshold = std::size_t{1} << 20;

/// A blocking send of at least this many bytes to a rank reached by shared memory offers the
/// caller's memory for the receiver to read in one copy (process_vm_readv) instead of passing
/// the bytes through the shm ring (two copies, one on each side); VESSEL_PULL_BYTES overrides it
/// (0: never). docs/io_performance.md, "One copy: the receiver reads the sender's memory".
constexpr std::size_t default_pull_threshold = actors::default_pull_bytes;
/// ... and of at most this many: beyond it the ring's two copies, one on each core at once, beat
/// the receiver's one. 1 MiB was pulled until the AMD VMs (2026-12-04): there a 1 MiB message
/// through the ring streamed at 18.3-23.5 GB/s against 12.0-18.3 pulled, and ping-ponged in 52-56
/// µs against 141-183 (docs/io_performance.md, "1 MiB through the ring again").
constexpr std::size_t max_pull_bytes = std::size_t{512} << 10;
/// ... or of any size where this machine's kernel copies between processes nearly as fast as
/// memcpy does (io/single_copy_probe.hpp; the AMD VMs above do not): there the sender's core, idle
/// in its blocking send until the receiver is done, writes the back half of the message while the
/// receiver reads the front (pull_reply). On an Intel Xeon KVM guest (2026-12-06), streams: 1 MiB
/// 41.6-46.5 GB/s (vader 20.9-21.8), 4 MiB 19.1-20.4 against 10.3-10.7 through the ring, 16 MiB
/// 18.8-19.7 against 12.2-12.5, 64 MiB 8.5-9.3 against 8.9-9.1 (docs/io_performance.md, "Both
/// sides copy").
constexpr std::size_t max_pull_bytes_where_pulls_pay = std::numeric_limits<std::size_t>::max();

/// How long a pulled send waits for the receiver to take its offer before it sends the bytes the
/// ordinary way: a receiver that is late must not hold its sender (nor two ranks that both send
/// first, then receive, each other).
constexpr std::chrono::milliseconds pull_ready_wait{1};

/// A byte count from `name` (0 turns the feature off: the largest size_t), or `fallback`.
std::size_t threshold_from(const actors::env_view& env, const char* name, std::size_t fallback,
                           const char* what_zero_means) {
  auto n = actors::env_byte_count(env, name, fallback);
  if (!n) {
    throw comm_error{actors::comm_errc::not_initialized,
                     n.error().detail + " (0 " + what_zero_means + ")"};
  }
  return n.value() == 0 ? std::numeric_limits<std::size_t>::max() : n.value();
}

/// In a first chunk's header offset: the message is lent (send_lent), so this chunk carries no
/// data and the message's bytes follow as bare chunks, in order, of the size in the offset's low
/// bits (the sender's chunk_payload(): the receiver's may differ when the ranks' pools do).
constexpr std::uint64_t lent_layout = std::uint64_t{1} << 63;

// A pulled message (send_pulled, take_offer), in five messages:
//   sender -> receiver, on the message's tag: the offer (a first chunk, pull_offer_layout, then
//     a pull_offer: where the bytes are and which process holds them);
//   receiver -> sender, on pull_control_tag(cookie, pull_ready): it has matched the offer, and
//     (a pull_reply) where its buffer lies and from which offset the sender writes the message
//     into it itself;
//   sender -> receiver, on the message's tag: go (a bare header, pull_go_layout) if that came
//     within pull_ready_wait, else the message itself as an ordinary send;
//   after go, both copy at once: the receiver reads the front of the message, the sender writes
//     the back (process_vm_writev), then says so on pull_control_tag(cookie, pull_pushed) (or
//     that it could not: the receiver reads the back too);
//   receiver -> sender, on pull_control_tag(cookie, pull_done): pulled; discarded (the receive
//     had nowhere to put it and fails, as with an ordinary message too large for its buffer);
//     or not (then the sender sends the message the ordinary way, as after a late "ready").
// Only the sender decides between go and the ordinary send, so the receiver never reads memory
// that the sender has stopped offering, nor does the sender write into a buffer that the
// receiver has stopped offering: the receiver returns only after pull_pushed.
constexpr std::uint64_t pull_offer_layout = std::uint64_t{1} << 62;
constexpr std::uint64_t pull_go_layout = lent_layout | pull_offer_layout;

/// Where an offered message lies in its sender (after the offer's chunk header).
struct pull_offer {
  std::uint64_t cookie;  ///< names this message's control messages
  std::uint64_t address;
  std::uint64_t token_address;
  std::array<std::uint64_t, 2> token;
  std::int64_t pid;
};

/// The receiver's answer to an offer: where the message goes, and from which offset on the
/// sender writes it there (the message's size: the receiver reads all of it).
struct pull_reply {
  std::uint64_t push_from;
  std::uint64_t address;
  std::uint64_t token_address;
  std::array<std::uint64_t, 2> token;
  std::int64_t pid;
};

/// Where the receiver splits a message of `bytes` that lands at `address`: halves, the back one
/// starting on a page of the receiver's buffer, so the two copies never share a page there.
/// Blocking sends only pull, and a sender blocked in one has a core to spare: two halves copied
/// at once took 17 µs for 1 MiB where one pull took 46 (docs/io_performance.md, "Both sides
/// copy").
std::uint64_t push_split(std::uint64_t address, std::size_t bytes) {
  constexpr std::uint64_t page = 4096;
  const std::uint64_t middle = (address + bytes / 2) & ~(page - 1);
  return middle > address ? middle - address : bytes;
}

enum pull_control : std::uint64_t { pull_ready = 0, pull_done = 1, pull_pushed = 2 };
enum pull_result : std::uint64_t { pulled = 0, not_pulled = 1, discarded = 2 };

/// Reserved tags with bit 61 set (comm's collectives number their calls in bits 16..60,
/// collectives::communicator uses bit 62): cookie and kind.
constexpr std::uint64_t pull_cookie_mask = (std::uint64_t{1} << 59) - 1;
constexpr std::uint64_t pull_control_tag(std::uint64_t cookie, pull_control kind) {
  return actors::reserved_tag_base | (std::uint64_t{1} << 61) | ((cookie & pull_cookie_mask) << 2) |
         kind;
}

std::string peer_name(std::uint32_t peer) {
  return peer == actors::any_source ? std::string{"any rank"} : "rank " + std::to_string(peer);
}
std::string tag_name(std::uint64_t tag) {
  return tag == actors::any_tag ? std::string{"any tag"} : "tag " + std::to_string(tag);
}

std::string format_duration(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + " s";
  return std::to_string(d.count()) + " ms";
}

clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  if (timeout == no_timeout) return clock::time_point::max();
  return clock::now() + timeout;
}

[[noreturn]] void throw_failed(std::uint32_t self, const char* what, std::uint32_t peer,
                               std::uint64_t tag, std::error_code ec) {
  throw comm_error{ec, "rank " + std::to_string(self) + ": " + what + " " + peer_name(peer) + " " +
                           tag_name(tag) + ": " + ec.message()};
}

/// A pull's control message received while other things go on: cancelled and waited for if
/// left unfinished (a throw on the way), so that the runtime never completes a request that is
/// gone.
class scoped_receive {
 public:
  explicit scoped_receive(actors::runtime& rt) : rt_{rt} {}
  scoped_receive(const scoped_receive&) = delete;
  scoped_receive& operator=(const scoped_receive&) = delete;
  ~scoped_receive() {
    if (!posted_) return;
    if (!request_.done()) rt_.cancel(request_);
    request_.wait();
  }

  void post(std::uint32_t source, std::uint64_t tag) {
    p2p_request::make_receive(request_, source, tag);
    rt_.submit(request_);
    posted_ = true;
  }
  bool posted() const { return posted_; }

  /// Waits for the message, one 64-bit word (not_pulled if it is anything else); throws if the
  /// link failed first, saying `what` (a "send to" or a "receive from") was failing with
  /// `user_tag` (the message the control message is about).
  std::uint64_t take_word(std::uint32_t self, const char* what, std::uint64_t user_tag) {
    request_.wait();
    if (request_.error) throw_failed(self, what, request_.peer, user_tag, request_.error);
    std::uint64_t word = not_pulled;
    if (request_.length == sizeof word) std::memcpy(&word, request_.payload.data(), sizeof word);
    request_.payload.reset();
    return word;
  }

 private:
  actors::runtime& rt_;
  p2p_request request_;
  bool posted_ = false;
};

void check_user_tag(std::uint32_t self, std::uint64_t tag, bool wildcard_ok) {
  if (tag < actors::reserved_tag_base || (wildcard_ok && tag == actors::any_tag)) return;
  throw comm_error{actors::comm_errc::tag_reserved, "rank " + std::to_string(self) + ": tag " +
                                                        std::to_string(tag) +
                                                        " is reserved (user tags are below 2^63)"};
}

/// Where received chunks go: (offset in the message, bytes).
using chunk_sink = std::function<void(std::size_t, std::span<const std::byte>)>;

/// The names VESSEL_TRACE gives the element types of allreduce: those of collectives::dtype, so
/// that both kinds of collectives read alike in one trace.
template <class T>
constexpr std::string_view trace_type_name() {
  if constexpr (std::is_same_v<T, std::int32_t>) {
    return "int32";
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return "int64";
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    return "uint64";
  } else if constexpr (std::is_same_v<T, float>) {
    return "float32";
  } else {
    static_assert(std::is_same_v<T, double>, "the types comm::allreduce is instantiated for");
    return "float64";
  }
}

constexpr std::string_view trace_name(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::prod: return "prod";
    case reduce_op::min: return "min";
    case reduce_op::max: return "max";
  }
  return "unknown";
}

/// ceil(log2 n): the rounds of a dissemination barrier.
std::uint32_t ceil_log2(std::uint32_t n) {
  return n <= 1 ? 0 : static_cast<std::uint32_t>(std::bit_width(n - 1));
}

}  // namespace

// -- errors ------------------------------------------------------------------------------------

comm_timeout::comm_timeout(std::uint32_t self, std::uint32_t peer, std::uint64_t tag,
                           std::chrono::milliseconds waited)
    : comm_error{actors::comm_errc::receive_timeout,
                 "rank " + std::to_string(self) + ": no message from " + peer_name(peer) +
                     " with " + tag_name(tag) + " within " + format_duration(waited)},
      peer_{peer},
      tag_{tag},
      waited_{waited} {}

// -- the implementation ------------------------------------------------------------------------

struct comm::impl {
  // Before rt, so destroyed after it: the runtime's reactor may drop the last handle of a loan.
  io::borrowed_memory lent{2 * chunk_window};
  // Pulled sends (send_pulled), guarded by pull_mutex (isend's completions run on other threads).
  std::mutex pull_mutex;
  std::uint64_t next_pull_cookie = 0;
  std::vector<bool> pull_refused;  // [rank]: it could not read our memory once; never again
  std::vector<bool> push_refused;  // [rank]: we could not write into its memory once; never again
  // "Ready"s that came too late for their offer (the message went the ordinary way): left
  // posted, before rt for the same reason as `lent`, so that they do not pile up unexpected.
  std::vector<std::unique_ptr<p2p_request>> late_ready;
  vessel::pull_stats pulls;
  std::unique_ptr<actors::runtime> rt;
  std::size_t lend_threshold = default_lend_threshold;  // VESSEL_LEND_BYTES
  std::size_t pull_threshold = default_pull_threshold;  // VESSEL_PULL_BYTES
  std::size_t pull_limit = max_pull_bytes;              // or max_pull_bytes_where_pulls_pay
  std::uint64_t collective_seq = 0;  // barrier/allreduce calls so far (same order on every rank)
  bool finalized = false;
  actors::trace_recorder* recorder = actors::trace_recorder::global();  // null: no VESSEL_TRACE

  std::uint32_t rank() const { return rt->rank(); }

  actors::runtime& live() {
    if (finalized || !rt) {
      throw comm_error{actors::comm_errc::not_initialized, "vessel::comm used after finalize()"};
    }
    return *rt;
  }

  std::size_t chunk_payload() const { return rt->max_message_bytes() - header_bytes; }

  /// Copies `data[offset, offset + n)` behind a chunk header into a send block and prepares `r`.
  void prepare_chunk(p2p_request& r, std::span<const std::byte> data, std::size_t offset,
                     std::size_t n, std::uint32_t dst, std::uint64_t tag) {
    io::buffer block = rt->acquire_send_block(header_bytes + n);  // waits: backpressure
    const chunk_header h{data.size(), offset};
    std::memcpy(block.data(), &h, header_bytes);
    if (n > 0) wire::copy_bytes(block.data() + header_bytes, data.data() + offset, n);
    p2p_request::make_send(r, dst, tag, std::move(block).slice(0, header_bytes + n));
  }

  /// Whether a send may offer its buffer for the receiver to read (send_pulled). The collectives
  /// below never do: their receives hand chunks to a sink and have no buffer to pull into, and
  /// both partners of an exchange send before they receive (each offer would wait out
  /// pull_ready_wait).
  enum class offers { allowed, never };

  /// Blocking send of a whole message, `chunk_window` chunks in flight at most.
  void send(std::span<const std::byte> data, std::uint32_t dst, std::uint64_t tag,
            offers may_offer = offers::allowed) {
    actors::runtime& r = live();
    if (dst >= r.size()) {
      throw_failed(rank(), "send to", dst, tag, actors::comm_errc::source_out_of_range);
    }
    if (may_offer == offers::allowed && data.size() >= pull_threshold &&
        data.size() <= pull_limit && may_pull(dst) && send_pulled(data, dst, tag)) {
      return;
    }
    // Not to ourselves: the loopback hands the sent handle itself to the receive, so the send
    // would wait for a receive that comes after it.
    if (data.size() >= lend_threshold && dst != rank()) return send_lent(data, dst, tag);
    const std::size_t step = chunk_payload();
    if (data.size() <= step) {  // one chunk: no window of requests to set up and tear down
      p2p_request only;
      prepare_chunk(only, data, 0, data.size(), dst, tag);
      r.submit(only);
      only.wait();
      if (only.error) throw_failed(rank(), "send to", dst, tag, only.error);
      return;
    }
    std::array<p2p_request, chunk_window> slots;
    std::size_t chunks = 0;
    std::error_code failed;
    std::size_t offset = 0;
    do {
      p2p_request& slot = slots[chunks % chunk_window];
      if (chunks >= chunk_window) {
        slot.wait();
        if (slot.error && !failed) failed = slot.error;
      }
      if (failed) break;
      const std::size_t n = std::min(step, data.size() - offset);
      prepare_chunk(slot, data, offset, n, dst, tag);
      r.submit(slot);
      ++chunks;
      offset += n;
    } while (offset < data.size());
    for (std::size_t i = 0; i < std::min(chunks, chunk_window); ++i) {
      slots[i].wait();
      if (slots[i].error && !failed) failed = slots[i].error;
    }
    if (failed) throw_failed(rank(), "send to", dst, tag, failed);
  }

  /// send() of a large message without copying it: a header chunk (flagged lent_layout), then
  /// the caller's bytes lent to the link chunk by chunk (io::borrowed_memory). Returns only when
  /// no handle to `data` is left: every byte acked by the peer, or dropped with a link gone down
  /// (the caller may then reuse `data` at once, as after a copying send).
  void send_lent(std::span<const std::byte> data, std::uint32_t dst, std::uint64_t tag) {
    actors::runtime& r = *rt;
    struct in_flight {
      p2p_request request;
      std::optional<std::uint32_t> slot;  // the loan of this chunk's bytes, until returned
    };
    std::array<in_flight, chunk_window> slots;
    std::error_code failed;
    // Waits for the chunk's hand-over, drops our reference and waits until the link has none.
    auto settle = [&](in_flight& f) {
      f.request.wait();
      if (f.request.error && !failed) failed = f.request.error;
      f.request.payload.reset();
      if (f.slot) r.await_returned(lent, *f.slot);
      f.slot.reset();
    };
    // Chunks of even size: a short last chunk (4 MiB = 4 MiB - 16 + 16 B) would be acked only by
    // the receiver's delayed-ack timer (a link acks at once only a message of a fragment or
    // more), and the send waits for that ack.
    const std::size_t chunks = (data.size() + chunk_payload() - 1) / chunk_payload();
    const std::size_t step = (data.size() + chunks - 1) / chunks;
    {
      io::buffer block = r.acquire_send_block(header_bytes);
      const chunk_header h{data.size(), lent_layout | step};
      std::memcpy(block.data(), &h, header_bytes);
      p2p_request::make_send(slots[0].request, dst, tag, std::move(block).slice(0, header_bytes));
      r.submit(slots[0].request);
    }
    std::size_t used = 1;  // slots[0] holds the header's send
    auto* base = const_cast<std::byte*>(data.data());  // lent read-only: nobody writes it
    for (std::size_t offset = 0; offset < data.size() && !failed;) {
      in_flight& f = slots[used % chunk_window];
      if (used >= chunk_window) settle(f);
      if (failed) break;
      const std::size_t n = std::min(step, data.size() - offset);
      io::borrowed_memory::loan loan = lent.try_lend({base + offset, n});
      while (!loan.handle) {  // every slot lent (other threads' sends): wait for one back
        std::this_thread::sleep_for(std::chrono::microseconds{50});
        loan = lent.try_lend({base + offset, n});
      }
      f.slot = loan.slot;
      p2p_request::make_send(f.request, dst, tag, std::move(loan.handle).slice(0, n));
      r.submit(f.request);
      ++used;
      offset += n;
    }
    for (std::size_t i = 0; i < std::min(used, chunk_window); ++i) settle(slots[i]);
    if (failed) throw_failed(rank(), "send to", dst, tag, failed);
  }

  /// A small message of our own (a pull's control message, or its go): copied, sent, waited for.
  void send_small(std::uint32_t dst, std::uint64_t tag, std::span<const std::byte> bytes,
                  std::uint64_t user_tag) {
    p2p_request r;
    io::buffer block = rt->acquire_send_block(bytes.size());
    std::memcpy(block.data(), bytes.data(), bytes.size());
    p2p_request::make_send(r, dst, tag, std::move(block).slice(0, bytes.size()));
    rt->submit(r);
    r.wait();
    if (r.error) throw_failed(rank(), "send to", dst, user_tag, r.error);
  }

  bool may_pull(std::uint32_t dst) {
    if (dst == rank() || !rt->reaches_by_shm(dst)) return false;
    return !is_listed(pull_refused, dst);
  }

  /// pull_refused and push_refused: ranks listed once are never tried again.
  bool is_listed(const std::vector<bool>& list, std::uint32_t r) {
    const std::lock_guard lock{pull_mutex};
    return r < list.size() && list[r];
  }
  void add_to_list(std::vector<bool>& list, std::uint32_t r) {  // pull_mutex held
    if (list.size() <= r) list.resize(rt->size());
    list[r] = true;
  }

  /// send() by an offer of the caller's memory, which the receiver reads in one copy (while we
  /// write the back of it into the receiver's buffer ourselves, where it asks us to). True once
  /// it did; false when the message must go the ordinary way instead (the receiver took the
  /// offer late, or could not read our memory).
  bool send_pulled(std::span<const std::byte> data, std::uint32_t dst, std::uint64_t tag) {
    actors::runtime& r = *rt;
    std::uint64_t cookie;
    {
      const std::lock_guard lock{pull_mutex};
      std::erase_if(late_ready, [](const auto& late) { return late->done(); });
      cookie = next_pull_cookie++ & pull_cookie_mask;
      ++pulls.offered;
    }
    // Posted before the offer goes out, on the heap: a late answer still finds it.
    auto ready = std::make_unique<p2p_request>();
    p2p_request::make_receive(*ready, dst, pull_control_tag(cookie, pull_ready));
    r.submit(*ready);
    const io::process_token_offer self = io::this_process_token();
    struct {
      chunk_header h;
      pull_offer o;
    } offer{{data.size(), pull_offer_layout},
            {cookie, reinterpret_cast<std::uintptr_t>(data.data()), self.token_address,
             self.token.words, self.pid}};
    send_small(dst, tag, std::as_bytes(std::span{&offer, 1}), tag);

    if (!ready->wait_until(clock::now() + pull_ready_wait)) {
      const std::lock_guard lock{pull_mutex};
      late_ready.push_back(std::move(ready));
      ++pulls.taken_late;
      return false;
    }
    if (ready->error) throw_failed(rank(), "send to", dst, tag, ready->error);
    pull_reply reply{data.size(), 0, 0, {}, 0};  // a bare "ready": the receiver reads it all
    if (ready->length == sizeof reply) std::memcpy(&reply, ready->payload.data(), sizeof reply);
    ready->payload.reset();
    const bool asked_to_push = reply.push_from < data.size();

    scoped_receive done{r};
    done.post(dst, pull_control_tag(cookie, pull_done));
    const chunk_header go{data.size(), pull_go_layout};
    send_small(dst, tag, std::as_bytes(std::span{&go, 1}), tag);
    bool pushed = false;
    if (asked_to_push) {
      pushed = !is_listed(push_refused, dst) && push_back_part(data, dst, reply);
      const std::uint64_t word = pushed ? pulled : not_pulled;  // not: the receiver reads it too
      send_small(dst, pull_control_tag(cookie, pull_pushed), std::as_bytes(std::span{&word, 1}),
                 tag);
    }
    const std::uint64_t result = done.take_word(rank(), "send to", tag);
    if (result == pulled || result == discarded) {
      // Discarded: the receive failed, as an ordinary message too large for its buffer does, and
      // the send is done all the same.
      const std::lock_guard lock{pull_mutex};
      ++(result == pulled ? pulls.pulled : pulls.discarded);
      if (result == pulled && pushed) ++pulls.pushed;
      return true;
    }
    logger().warn("rank {}: rank {} could not read this process's memory; messages to it go "
                  "through the shm ring from now on",
                  rank(), dst);
    const std::lock_guard lock{pull_mutex};
    add_to_list(pull_refused, dst);
    ++pulls.refused;
    return false;
  }

  /// Writes data[reply.push_from, ...) into the receiver's buffer. False (once with a warning,
  /// and never again to that rank) when we may not write there: the receiver then reads it.
  bool push_back_part(std::span<const std::byte> data, std::uint32_t dst, const pull_reply& reply) {
    const io::process_token_offer to{static_cast<pid_t>(reply.pid), reply.token_address,
                                     io::process_token{reply.token}};
    const std::error_code ec =
        io::push_to_process(to, reply.address + reply.push_from, data.subspan(reply.push_from));
    if (!ec) return true;
    logger().warn(
        "rank {}: cannot write into rank {}'s memory ({}): it reads whole messages "
        "from this process from now on",
        rank(), dst, ec.message());
    const std::lock_guard lock{pull_mutex};
    add_to_list(push_refused, dst);
    return false;
  }

  /// The receiving side of send_pulled: `offer` arrived for the receive `st` (a message of
  /// st.bytes). Says "ready" (and where the sender writes the message's back half), then pulls
  /// on "go" or takes the ordinary send that came instead.
  recv_status take_offer(const pull_offer& offer, recv_status st,
                         const std::function<std::span<std::byte>(std::size_t)>& size_known,
                         const chunk_sink& sink) {
    const std::span<std::byte> destination = size_known(st.bytes);
    auto answer = std::make_unique<p2p_request>();
    p2p_request::make_receive(*answer, st.source, st.tag);  // go, or the message itself
    rt->submit(*answer);
    // Nowhere to put it (destination empty): nothing to split, the sender is told it is
    // discarded. Else the sender writes from push_from on, and says when it has.
    const auto at = reinterpret_cast<std::uintptr_t>(destination.data());
    const std::uint64_t push_from = destination.empty() ? st.bytes : push_split(at, st.bytes);
    scoped_receive pushed{*rt};
    if (push_from < st.bytes) {
      pushed.post(st.source, pull_control_tag(offer.cookie, pull_pushed));
    }
    const io::process_token_offer self = io::this_process_token();
    const pull_reply reply{push_from, at, self.token_address, self.token.words, self.pid};
    send_small(st.source, pull_control_tag(offer.cookie, pull_ready),
               std::as_bytes(std::span{&reply, 1}), st.tag);
    answer->wait();
    if (answer->error) throw_failed(rank(), "receive from", st.source, st.tag, answer->error);
    chunk_header h{};
    if (answer->length == header_bytes) std::memcpy(&h, answer->payload.data(), header_bytes);
    if (answer->length == header_bytes && h.offset == pull_go_layout) {
      if (h.total != st.bytes) {
        throw_failed(rank(), "receive from", st.source, st.tag,
                     actors::comm_errc::message_too_large);
      }
      answer->payload.reset();
      std::error_code ec;
      const io::process_token_offer from{static_cast<pid_t>(offer.pid), offer.token_address,
                                         io::process_token{offer.token}};
      // An empty destination: nowhere to put it, the receive fails (as for an ordinary message).
      if (!destination.empty()) {
        ec = io::pull_from_process(from, offer.address, destination.first(push_from));
      }
      if (pushed.posted()) {
        // Only once the sender is done with our buffer may this receive end, whatever happened.
        const std::uint64_t word = pushed.take_word(rank(), "receive from", st.tag);
        if (word != pulled && !ec) {
          ec = io::pull_from_process(from, offer.address + push_from,
                                     destination.subspan(push_from));
        }
      }
      const std::uint64_t result = destination.empty() ? discarded : ec ? not_pulled : pulled;
      send_small(st.source, pull_control_tag(offer.cookie, pull_done),
                 std::as_bytes(std::span{&result, 1}), st.tag);
      if (!ec) {
        if (!destination.empty()) {
          const std::lock_guard lock{pull_mutex};
          ++pulls.pulls_done;
        }
        return st;
      }
      logger().warn("rank {}: cannot read rank {}'s memory ({}): it sends through the shm ring "
                    "instead",
                    rank(), st.source, ec.message());
      answer = std::make_unique<p2p_request>();
      p2p_request::make_receive(*answer, st.source, st.tag);  // the message, the ordinary way
      rt->submit(*answer);
      answer->wait();
      if (answer->error) throw_failed(rank(), "receive from", st.source, st.tag, answer->error);
    }
    // The ordinary send of the same message (never another offer: its sender is past offering).
    recv_status ordinary = finish_receive(*answer, size_known, sink, /*offers_allowed=*/false);
    if (ordinary.bytes != st.bytes) {
      throw_failed(rank(), "receive from", st.source, st.tag, actors::comm_errc::message_too_large);
    }
    return ordinary;
  }

  /// Waits for the first chunk of a receive already submitted; on timeout cancels it and throws.
  void await_first(p2p_request& first, std::chrono::milliseconds timeout) {
    if (timeout != no_timeout && !first.wait_for(timeout)) {
      rt->cancel(first);
    }
    settle_first(first, timeout);
  }
  /// await_first() up to `deadline` (several rounds of one call share it).
  void await_first(p2p_request& first, clock::time_point deadline,
                   std::chrono::milliseconds timeout) {
    if (deadline != clock::time_point::max() && !first.wait_until(deadline)) {
      rt->cancel(first);
    }
    settle_first(first, timeout);
  }
  void settle_first(p2p_request& first, std::chrono::milliseconds timeout) {
    first.wait();  // done, cancelled, or a message matched before the cancel
    if (first.error == actors::comm_errc::receive_cancelled) {
      throw comm_timeout{rank(), first.peer, first.tag, timeout};
    }
    if (first.error) throw_failed(rank(), "receive from", first.peer, first.tag, first.error);
  }

  /// Parses the first chunk and takes the rest of the message from the same source and tag.
  /// `size_known(total)` returns where the whole message goes, or an empty span: the chunks then
  /// go to `sink` (offset in the message, bytes) from the pool blocks they arrive in. Chunks
  /// posted with a destination land there in place (make_receive_into) and skip the sink; a
  /// first chunk that landed must have been posted with the same destination.
  recv_status finish_receive(p2p_request& first,
                             const std::function<std::span<std::byte>(std::size_t)>& size_known,
                             const chunk_sink& sink, bool offers_allowed = true) {
    chunk_header h;
    if (first.length < header_bytes) {
      throw_failed(rank(), "receive from", first.source, first.matched_tag,
                   actors::comm_errc::message_too_large);  // not a comm message
    }
    if (first.landed) {
      std::memcpy(&h, first.head.data(), header_bytes);
    } else {
      std::memcpy(&h, first.payload.data(), header_bytes);
    }
    const std::size_t got = first.length - header_bytes;  // the message's bytes in this chunk
    recv_status st{first.source, first.matched_tag, static_cast<std::size_t>(h.total),
                   first.message_id};
    if (h.offset == pull_offer_layout) {
      if (!offers_allowed || got != sizeof(pull_offer)) {
        throw_failed(rank(), "receive from", st.source, st.tag,
                     actors::comm_errc::message_too_large);
      }
      pull_offer offer;
      std::memcpy(&offer, first.landed ? first.into.data() : first.payload.data() + header_bytes,
                  sizeof offer);
      first.payload.reset();
      return take_offer(offer, st, size_known, sink);
    }
    const bool lent_chunks = (h.offset & lent_layout) != 0;
    const std::size_t lent_step = static_cast<std::size_t>(h.offset & ~lent_layout);
    // A first chunk starts the message; a lent one carries nothing but the header.
    if ((lent_chunks && (got != 0 || lent_step == 0)) || (!lent_chunks && h.offset != 0) ||
        got > st.bytes) {
      throw_failed(rank(), "receive from", st.source, st.tag, actors::comm_errc::message_too_large);
    }
    const std::span<std::byte> destination = size_known(st.bytes);
    if (!first.landed) sink(0, first.payload.bytes().subspan(header_bytes));
    first.payload.reset();

    // Post the remaining chunks' receives ahead, chunk_window at a time: they match in order.
    // Every chunk but the last is the sender's chunk size (its pool may differ from ours): the
    // first chunk's, or the lent layout's.
    const std::size_t step = lent_chunks ? lent_step : got;
    const std::size_t base = lent_chunks ? 0 : got;  // where chunk i of the rest starts
    const std::size_t remaining =
        st.bytes > got && step > 0 ? (st.bytes - got + step - 1) / step : 0;
    if (st.bytes > got && step == 0) {
      throw_failed(rank(), "receive from", st.source, st.tag, actors::comm_errc::message_too_large);
    }
    auto chunk_at = [&](std::size_t i) { return base + i * step; };
    auto chunk_length = [&](std::size_t i) { return std::min(step, st.bytes - chunk_at(i)); };
    if (remaining == 0) return st;  // one chunk: no window of requests to set up
    std::array<p2p_request, chunk_window> slots;
    std::size_t posted = 0;
    std::error_code failed;
    auto post = [&] {
      p2p_request& s = slots[posted % chunk_window];
      if (destination.empty()) {
        p2p_request::make_receive(s, st.source, st.tag);
      } else {
        p2p_request::make_receive_into(s, st.source, st.tag, lent_chunks ? 0 : header_bytes,
                                       destination.subspan(chunk_at(posted), chunk_length(posted)));
      }
      rt->submit(s);
      ++posted;
    };
    while (posted < std::min(remaining, chunk_window)) post();
    for (std::size_t i = 0; i < remaining; ++i) {
      p2p_request& s = slots[i % chunk_window];
      s.wait();
      if (s.error) {
        if (!failed) failed = s.error;
      } else if (!failed && lent_chunks) {
        // Bare bytes, in order; a chunk that is not where the layout says is not ours to copy.
        if (s.length != chunk_length(i)) {
          failed = actors::comm_errc::message_too_large;
        } else if (!s.landed) {
          sink(chunk_at(i), s.payload.bytes());
        }
      } else if (!failed) {
        chunk_header c;
        if (s.length < header_bytes) {
          failed = actors::comm_errc::message_too_large;
        } else {
          std::memcpy(&c, s.landed ? s.head.data() : s.payload.data(), header_bytes);
          if (c.offset != chunk_at(i) || s.length - header_bytes != chunk_length(i)) {
            failed = actors::comm_errc::message_too_large;
          } else if (!s.landed) {
            sink(chunk_at(i), s.payload.bytes().subspan(header_bytes));
          }
        }
      }
      s.payload.reset();
      if (posted < remaining && !failed) post();
      if (failed && posted == i + 1) break;
    }
    // Wait out whatever is still posted so that no slot outlives this frame in flight.
    for (std::size_t i = 0; i < chunk_window && i < posted; ++i) {
      if (!slots[i].done()) {
        rt->cancel(slots[i]);
        slots[i].wait();
      }
    }
    if (failed) throw_failed(rank(), "receive from", st.source, st.tag, failed);
    return st;
  }

  recv_status recv_into(std::span<std::byte> buffer, std::uint32_t src, std::uint64_t tag,
                        std::chrono::milliseconds timeout) {
    actors::runtime& r = live();
    p2p_request first;
    // The first chunk lands in the buffer when it fits: header apart, its bytes at offset 0.
    p2p_request::make_receive_into(first, src, tag, header_bytes, buffer);
    r.submit(first);
    await_first(first, timeout);
    bool fits = true;
    recv_status st = finish_receive(
        first,
        [&](std::size_t total) {
          fits = total <= buffer.size();
          return fits ? buffer.first(total) : std::span<std::byte>{};
        },
        [&](std::size_t offset, std::span<const std::byte> bytes) {
          if (fits && !bytes.empty())
            wire::copy_bytes(buffer.data() + offset, bytes.data(), bytes.size());
        });
    if (!fits) {
      throw comm_error{actors::comm_errc::buffer_too_small,
                       "rank " + std::to_string(rank()) + ": message of " +
                           std::to_string(st.bytes) + " bytes from rank " +
                           std::to_string(st.source) + " tag " + std::to_string(st.tag) +
                           " does not fit a buffer of " + std::to_string(buffer.size())};
    }
    return st;
  }

  std::vector<std::byte> recv_vector(p2p_request& first, recv_status* status) {
    std::vector<std::byte> out;
    recv_status st = finish_receive(
        first,
        [&](std::size_t total) {
          out.resize(total);
          return std::span<std::byte>{out};
        },
        [&](std::size_t offset, std::span<const std::byte> bytes) {
          if (!bytes.empty()) wire::copy_bytes(out.data() + offset, bytes.data(), bytes.size());
        });
    if (status != nullptr) *status = st;
    return out;
  }

  // -- collectives over point-to-point (the collectives module replaces these later) ----------

  std::uint64_t next_collective_tag() {
    // reserved | call number << 16 | round: unique per call, so rounds of consecutive calls
    // never match each other even when a fast rank runs ahead. Bits 61 and up stay clear
    // (pull_control_tag, collectives::communicator).
    return actors::reserved_tag_base | ((++collective_seq & 0x1fff'ffff'ffffull) << 16);
  }

  // -- VESSEL_TRACE (actors/trace_recorder.hpp): one event per call and one per round --------

  using trace = std::optional<actors::collective_trace>;

  /// The clock only when tracing: untraced, a round pays a test, not a clock read.
  static std::int64_t trace_clock(const trace& t) { return t ? actors::trace_now() : 0; }

  /// Starts the record of the collective just numbered (collective_seq); empty unless tracing.
  trace begin_trace(std::string_view operation, std::string_view algorithm,
                    std::string_view element_type, std::string_view reduction, std::uint64_t count,
                    std::uint64_t bytes, std::size_t steps) {
    trace t;
    if (recorder == nullptr) return t;
    actors::trace_event h;
    h.rank = rank();
    h.track = actors::comm_trace_track;
    h.comm_rank = rank();
    h.comm_size = rt->size();
    h.sequence = collective_seq;
    h.count = count;
    h.bytes = bytes;
    h.operation = operation;
    h.element_type = element_type;
    h.reduction = reduction;
    h.api = "vessel::comm";
    const std::size_t n = std::min(algorithm.size(), h.algorithm.size() - 1);
    std::copy_n(algorithm.data(), n, h.algorithm.data());
    t.emplace(*recorder, h, steps, actors::trace_now());
    return t;
  }

  /// A message of `bytes` in step `step`, counted as the chunks send() cuts it into. A send is
  /// stamped when it started (`at`), a receive when it completed: the step spans the round.
  void trace_message(trace& t, bool sent, std::uint32_t step, std::uint32_t peer, std::size_t bytes,
                     std::int64_t at) {
    if (!t) return;
    const std::size_t most = chunk_payload();
    std::size_t left = bytes;
    do {
      const std::size_t n = std::min(left, most);
      if (sent) {
        t->sent(step, peer, n, at);
      } else {
        t->received(step, peer, n, at);
      }
      left -= n;
    } while (left > 0);
  }
  void trace_sent(trace& t, std::uint32_t step, std::uint32_t to, std::size_t bytes,
                  std::int64_t started) {
    trace_message(t, true, step, to, bytes, started);
  }
  void trace_received(trace& t, std::uint32_t step, std::uint32_t from, std::size_t bytes) {
    trace_message(t, false, step, from, bytes, trace_clock(t));
  }

  /// Runs `body` (the collective's rounds) and records the outcome: a comm_error's code, or ok.
  template <class Body>
  void traced(trace& t, Body&& body) {
    if (!t) {
      body();
      return;
    }
    try {
      body();
    } catch (const comm_error& e) {
      t->finish(e.code(), actors::trace_now());
      throw;
    }
    t->finish({}, actors::trace_now());
  }

  /// `traced_call`: false for finalize()'s barrier (the user did not call it).
  void barrier(std::chrono::milliseconds timeout, bool traced_call = true) {
    actors::runtime& r = live();
    const std::uint32_t n = r.size();
    const std::uint64_t base = next_collective_tag();
    const auto deadline = deadline_after(timeout);
    const std::byte token{1};
    trace t =
        traced_call ? begin_trace("barrier", "dissemination", {}, {}, 0, 0, ceil_log2(n)) : trace{};
    traced(t, [&] {
      for (std::uint32_t k = 0, dist = 1; dist < n; ++k, dist <<= 1) {
        const std::uint32_t to = (rank() + dist) % n;
        const std::uint32_t from = (rank() + n - dist) % n;
        std::byte got{};
        const std::int64_t at = trace_clock(t);
        exchange(std::span<const std::byte>{&token, 1}, to, std::span<std::byte>{&got, 1}, from,
                 base | k, deadline, timeout);
        trace_sent(t, k, to, 1, at);
        trace_received(t, k, from, 1);
      }
    });
  }

  void receive_until(std::span<std::byte> into, std::uint32_t from, std::uint64_t tag,
                     clock::time_point deadline, std::chrono::milliseconds timeout) {
    receive_until(from, tag, deadline, timeout, copy_into(into));
  }
  void receive_until(std::uint32_t from, std::uint64_t tag, clock::time_point deadline,
                     std::chrono::milliseconds timeout, const chunk_sink& sink) {
    p2p_request first;
    p2p_request::make_receive(first, from, tag);
    rt->submit(first);
    receive_posted(first, deadline, timeout, sink);
  }

  /// A sink that copies each chunk to its offset in `into` (what does not fit is dropped).
  static chunk_sink copy_into(std::span<std::byte> into) {
    return [into](std::size_t offset, std::span<const std::byte> bytes) {
      const std::size_t n = std::min(bytes.size(), into.size() - std::min(offset, into.size()));
      if (n > 0) wire::copy_bytes(into.data() + offset, bytes.data(), n);
    };
  }

  /// One round: sends `out` to `to` and receives into `into` from `from`. The receive is posted
  /// before the send, so both cross to the reactor in one batch and a reply that comes back
  /// before the send's hand-over is matched at once (one thread hand-off less per round).
  void exchange(std::span<const std::byte> out, std::uint32_t to, std::span<std::byte> into,
                std::uint32_t from, std::uint64_t tag, clock::time_point deadline,
                std::chrono::milliseconds timeout) {
    exchange(out, to, from, tag, deadline, timeout, copy_into(into));
  }
  /// exchange() that hands each received chunk to `sink`, which runs only once the send is
  /// complete: the sink may overwrite `out`'s bytes.
  void exchange(std::span<const std::byte> out, std::uint32_t to, std::uint32_t from,
                std::uint64_t tag, clock::time_point deadline, std::chrono::milliseconds timeout,
                const chunk_sink& sink) {
    p2p_request first;
    p2p_request::make_receive(first, from, tag);
    rt->submit(first);
    try {
      send(out, to, tag, offers::never);
    } catch (...) {
      if (!first.done()) rt->cancel(first);
      first.wait();
      throw;
    }
    receive_posted(first, deadline, timeout, sink);
  }

  /// Finishes a receive whose first chunk is already posted as `first`, chunk by chunk into
  /// `sink`. Never an offer (offers::never): with no buffer there is nothing to pull into.
  void receive_posted(p2p_request& first, clock::time_point deadline,
                      std::chrono::milliseconds timeout, const chunk_sink& sink) {
    await_first(first, deadline, timeout);
    finish_receive(
        first, [](std::size_t) { return std::span<std::byte>{}; }, sink,
        /*offers_allowed=*/false);
  }

  /// Reduces the elements [offset / sizeof(T), ...) of `acc` with the bytes of one received
  /// chunk, straight from the pooled block it arrived in. Combines as (lower rank's value) op
  /// (higher rank's value): both partners then compute the same expression, so every rank ends
  /// with the same bits even for floating point.
  template <class T>
  static void reduce_chunk(std::span<T> acc, std::size_t offset, std::span<const std::byte> bytes,
                           reduce_op op, bool acc_is_lower) {
    const std::size_t first = offset / sizeof(T);
    if (offset % sizeof(T) != 0 || first >= acc.size()) return;
    const std::size_t n = std::min(bytes.size() / sizeof(T), acc.size() - first);
    switch (op) {
      case reduce_op::sum:
        return combine_chunk(acc.data() + first, bytes.data(), n, acc_is_lower, std::plus<T>{});
      case reduce_op::prod:
        return combine_chunk(acc.data() + first, bytes.data(), n, acc_is_lower,
                             std::multiplies<T>{});
      case reduce_op::min:
        return combine_chunk(acc.data() + first, bytes.data(), n, acc_is_lower,
                             [](T a, T b) { return std::min(a, b); });
      case reduce_op::max:
        return combine_chunk(acc.data() + first, bytes.data(), n, acc_is_lower,
                             [](T a, T b) { return std::max(a, b); });
    }
  }
  template <class T, class Op>
  static void combine_chunk(T* acc, const std::byte* other, std::size_t n, bool acc_is_lower,
                            Op f) {
    for (std::size_t i = 0; i < n; ++i) {
      T o;
      std::memcpy(&o, other + i * sizeof(T), sizeof(T));  // a chunk may sit at any alignment
      acc[i] = acc_is_lower ? f(acc[i], o) : f(o, acc[i]);
    }
  }

  template <class T>
  void allreduce(std::span<T> data, reduce_op op, std::chrono::milliseconds timeout) {
    actors::runtime& r = live();
    const std::uint32_t n = r.size();
    const std::uint32_t me = rank();
    const std::uint64_t base = next_collective_tag();
    const std::uint32_t p2 = std::bit_floor(n);
    const std::uint32_t extra = n - p2;
    const std::uint32_t rounds = ceil_log2(p2);
    // Steps in the trace: 0 the fold, 1..rounds recursive doubling, rounds + 1 the unfold.
    trace t = begin_trace("allreduce", "recursive_doubling", trace_type_name<T>(), trace_name(op),
                          data.size(), data.size_bytes(), rounds + 2);
    if (n == 1) {
      traced(t, [] {});
      return;
    }
    const auto deadline = deadline_after(timeout);
    const auto bytes = std::as_writable_bytes(data);
    // The peer's chunks are reduced into `data` as they come, from the blocks they arrived in:
    // no vector of the peer's data (fresh pages at every call of a large allreduce) and no pass
    // copying into it. Chunks split at multiples of chunk_payload(), so elements stay whole.
    if (chunk_payload() % sizeof(T) != 0) {
      throw comm_error{actors::comm_errc::message_too_large,
                       "rank " + std::to_string(me) + ": allreduce: chunks of " +
                           std::to_string(chunk_payload()) + " bytes would split elements"};
    }
    auto reduce_from = [&](bool acc_is_lower) -> chunk_sink {
      return [data, op, acc_is_lower](std::size_t offset, std::span<const std::byte> chunk) {
        reduce_chunk<T>(data, offset, chunk, op, acc_is_lower);
      };
    };

    traced(t, [&] {
      // Fold: ranks past the largest power of two hand their data to a partner below it.
      if (me >= p2) {
        const std::int64_t at = trace_clock(t);
        send(bytes, me - p2, base | 0xff, offers::never);
        trace_sent(t, 0, me - p2, bytes.size(), at);
        receive_until(bytes, me - p2, base | 0xfe, deadline, timeout);
        trace_received(t, rounds + 1, me - p2, bytes.size());
        return;
      }
      if (me < extra) {
        receive_until(me + p2, base | 0xff, deadline, timeout, reduce_from(true));
        trace_received(t, 0, me + p2, bytes.size());
      }
      // Recursive doubling among the first p2 ranks.
      std::uint32_t round = 0;
      for (std::uint32_t mask = 1; mask < p2; mask <<= 1, ++round) {
        const std::uint32_t partner = me ^ mask;
        const std::int64_t at = trace_clock(t);
        exchange(bytes, partner, partner, base | round, deadline, timeout,
                 reduce_from(me < partner));
        trace_sent(t, round + 1, partner, bytes.size(), at);
        trace_received(t, round + 1, partner, bytes.size());
      }
      if (me < extra) {
        const std::int64_t at = trace_clock(t);
        send(bytes, me + p2, base | 0xfe, offers::never);
        trace_sent(t, rounds + 1, me + p2, bytes.size(), at);
      }
    });
  }
};

// -- comm_request --------------------------------------------------------------------------------

struct comm_request::state {
  comm::impl* owner = nullptr;
  bool is_send = false;
  std::vector<std::unique_ptr<p2p_request>> sends;  // every chunk of a send
  p2p_request first;                                // a receive's first chunk
  bool finished = false;
  recv_status status;
  std::vector<std::byte> data;
  std::size_t send_bytes = 0;

  ~state() {
    if (owner == nullptr) return;
    if (is_send) {
      for (auto& s : sends) s->wait();
    } else if (!finished && !first.done()) {
      owner->rt->cancel(first);
      first.wait();
    } else if (!finished && first.done() && !first.error) {
      // The first chunk matched but nobody waited: take the rest so it cannot confuse a later
      // receive of the same source and tag.
      try {
        owner->recv_vector(first, nullptr);
      } catch (...) {
      }
    }
  }
};

comm_request::comm_request() noexcept = default;
comm_request::comm_request(std::unique_ptr<state> s) noexcept : state_{std::move(s)} {}
comm_request::comm_request(comm_request&&) noexcept = default;
comm_request& comm_request::operator=(comm_request&&) noexcept = default;
comm_request::~comm_request() = default;

bool comm_request::ready() const noexcept {
  if (!state_) return false;
  if (state_->is_send) {
    return std::all_of(state_->sends.begin(), state_->sends.end(),
                       [](const auto& s) { return s->done(); });
  }
  return state_->finished || state_->first.done();
}

recv_status comm_request::wait(std::chrono::milliseconds timeout) {
  if (!state_) throw comm_error{actors::comm_errc::not_initialized, "wait() on an empty request"};
  state& s = *state_;
  if (s.finished) return s.status;
  if (s.is_send) {
    std::error_code failed;
    for (auto& r : s.sends) {
      r->wait();
      if (r->error && !failed) failed = r->error;
    }
    s.finished = true;
    if (failed)
      throw_failed(s.owner->rank(), "send to", s.sends.front()->peer, s.sends.front()->tag, failed);
    s.status = recv_status{s.owner->rank(), s.sends.front()->tag, s.send_bytes, 0};
    return s.status;
  }
  s.owner->await_first(s.first, timeout);
  s.finished = true;  // from here on the message is ours, whatever happens to its chunks
  s.data = s.owner->recv_vector(s.first, &s.status);
  return s.status;
}

std::vector<std::byte> comm_request::take_data() {
  if (!state_) return {};
  return std::move(state_->data);
}

// -- comm ----------------------------------------------------------------------------------------

comm::comm(std::unique_ptr<impl> p) noexcept : impl_{std::move(p)} {}
comm::comm(comm&&) noexcept = default;
comm& comm::operator=(comm&&) noexcept = default;
comm::~comm() {
  if (!impl_ || impl_->finalized) return;
  try {
    finalize();
  } catch (const std::exception& e) {
    logger().warn("comm: finalize in the destructor failed: {}", e.what());
    abort();
  }
}

comm comm::init() {
  // One rank per process: bound to a core of its own where the host's ranks fit (VESSEL_BIND).
  actors::runtime_options options = actors::runtime_options::defaults();
  options.bind = actors::cpu_binding::automatic;
  return init(actors::env_view::process(), std::move(options));
}

namespace {

/// max_pull_bytes_where_pulls_pay where a peer is reached by shared memory (the only kind pulls
/// go to; with none, or with pulls turned off, there is nothing to measure) and the probe says a
/// pull pays, else max_pull_bytes. Logged at info: the probe's times say why.
std::size_t pull_limit_for(const actors::runtime& rt, std::size_t pull_threshold) {
  if (!rt.reaches_any_by_shm() || pull_threshold == std::numeric_limits<std::size_t>::max()) {
    return max_pull_bytes;
  }
  const io::single_copy_rate& rate = io::single_copy_rate_here();
  const std::size_t limit = rate.pays() ? max_pull_bytes_where_pulls_pay : max_pull_bytes;
  logger().info(
      "rank {}: sends pulled {}: process_vm_readv copies {} KiB in {:.1f} us, memcpy in "
      "{:.1f} us{}",
      rt.rank(),
      limit == max_pull_bytes ? "up to " + std::to_string(max_pull_bytes >> 10) + " KiB"
                              : std::string{"at any size"},
      io::single_copy_probe_bytes >> 10, static_cast<double>(rate.kernel_copy.count()) / 1e3,
      static_cast<double>(rate.user_copy.count()) / 1e3,
      rate.error ? " (this process cannot read memory)" : "");
  return limit;
}

}  // namespace

comm comm::init(const actors::env_view& env, actors::runtime_options options) {
  const std::size_t lend_threshold =
      threshold_from(env, "VESSEL_LEND_BYTES", default_lend_threshold, "turns lending off");
  const std::size_t pull_threshold =
      threshold_from(env, "VESSEL_PULL_BYTES", default_pull_threshold, "turns pulling off");
  auto started = actors::runtime::start(env, std::move(options));
  if (!started) throw comm_error{started.error().code, started.error().detail};
  auto p = std::make_unique<impl>();
  p->lend_threshold = lend_threshold;
  p->pull_threshold = pull_threshold;
  p->rt = std::move(started).value();
  p->pull_limit = pull_limit_for(*p->rt, pull_threshold);
  return comm{std::move(p)};
}

std::uint32_t comm::rank() const {
  return impl_->rt->rank();
}
std::uint32_t comm::size() const {
  return impl_->rt->size();
}

void comm::send(std::span<const std::byte> data, std::uint32_t dst, std::uint64_t tag) {
  check_user_tag(rank(), tag, false);
  const bool debug = logger().should_log(spdlog::level::debug);
  const auto t0 = debug ? clock::now() : clock::time_point{};
  impl_->send(data, dst, tag);
  if (debug) {
    logger().debug(
        "rank {}: send to rank {} tag {}: {} B in {} us", rank(), dst, tag, data.size(),
        std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - t0).count());
  }
}

recv_status comm::recv(std::span<std::byte> buffer, std::uint32_t src, std::uint64_t tag,
                       std::chrono::milliseconds timeout) {
  check_user_tag(rank(), tag, true);
  const bool debug = logger().should_log(spdlog::level::debug);
  const auto t0 = debug ? clock::now() : clock::time_point{};
  recv_status st = impl_->recv_into(buffer, src, tag, timeout);
  if (debug) {
    logger().debug(
        "rank {}: recv from rank {} tag {} id {}: {} B in {} us", rank(), st.source, st.tag,
        st.message_id, st.bytes,
        std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - t0).count());
  }
  return st;
}

std::vector<std::byte> comm::recv(std::uint32_t src, std::uint64_t tag,
                                  std::chrono::milliseconds timeout, recv_status* status) {
  comm_request r = irecv(src, tag);
  const bool debug = logger().should_log(spdlog::level::debug);
  const auto t0 = debug ? clock::now() : clock::time_point{};
  recv_status st = r.wait(timeout);
  if (status != nullptr) *status = st;
  if (debug) {
    logger().debug(
        "rank {}: recv from rank {} tag {} id {}: {} B in {} us", rank(), st.source, st.tag,
        st.message_id, st.bytes,
        std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - t0).count());
  }
  return r.take_data();
}

comm_request comm::isend(std::span<const std::byte> data, std::uint32_t dst, std::uint64_t tag) {
  check_user_tag(rank(), tag, false);
  actors::runtime& r = impl_->live();
  if (dst >= r.size()) {
    throw_failed(rank(), "send to", dst, tag, actors::comm_errc::source_out_of_range);
  }
  auto s = std::make_unique<comm_request::state>();
  s->owner = impl_.get();
  s->is_send = true;
  s->send_bytes = data.size();
  const std::size_t step = impl_->chunk_payload();
  std::size_t offset = 0;
  do {
    const std::size_t n = std::min(step, data.size() - offset);
    auto chunk = std::make_unique<p2p_request>();
    impl_->prepare_chunk(*chunk, data, offset, n, dst, tag);
    r.submit(*chunk);
    s->sends.push_back(std::move(chunk));
    offset += n;
  } while (offset < data.size());
  return comm_request{std::move(s)};
}

comm_request comm::irecv(std::uint32_t src, std::uint64_t tag) {
  check_user_tag(rank(), tag, true);
  actors::runtime& r = impl_->live();
  auto s = std::make_unique<comm_request::state>();
  s->owner = impl_.get();
  p2p_request::make_receive(s->first, src, tag);
  r.submit(s->first);
  return comm_request{std::move(s)};
}

void comm::barrier(std::chrono::milliseconds timeout) {
  impl_->barrier(timeout);
}

template <class T>
void comm::allreduce(std::span<T> data, reduce_op op, std::chrono::milliseconds timeout) {
  impl_->allreduce(data, op, timeout);
}

template void comm::allreduce<std::int32_t>(std::span<std::int32_t>, reduce_op,
                                            std::chrono::milliseconds);
template void comm::allreduce<std::int64_t>(std::span<std::int64_t>, reduce_op,
                                            std::chrono::milliseconds);
template void comm::allreduce<std::uint64_t>(std::span<std::uint64_t>, reduce_op,
                                             std::chrono::milliseconds);
template void comm::allreduce<float>(std::span<float>, reduce_op, std::chrono::milliseconds);
template void comm::allreduce<double>(std::span<double>, reduce_op, std::chrono::milliseconds);

actors::peer_link_stats comm::link_stats(std::uint32_t peer) {
  return impl_->live().link_stats(peer);
}
actors::matcher_stats comm::matching_stats() {
  return impl_->live().matching_stats();
}
vessel::pull_stats comm::pull_stats() const {
  const std::lock_guard lock{impl_->pull_mutex};
  return impl_->pulls;
}
actors::runtime& comm::runtime() {
  return impl_->live();
}

void comm::finalize() {
  if (!impl_ || impl_->finalized) return;
  impl_->barrier(no_timeout, /*traced_call=*/false);
  if (actors::trace_recorder* recorder = impl_->recorder) {
    // Now, not only at exit: a rank that is killed after finalize still leaves its file.
    if (auto w = recorder->write(rank()); !w) {
      logger().warn("rank {}: VESSEL_TRACE: cannot write {}: {}", rank(),
                    actors::trace_recorder::rank_path(recorder->path(), rank()),
                    w.error().message());
    }
  }
  {
    const std::lock_guard lock{impl_->pull_mutex};
    for (auto& late : impl_->late_ready) {
      if (!late->done()) impl_->rt->cancel(*late);
    }
    impl_->late_ready.clear();
  }
  impl_->finalized = true;
  impl_->rt->finish();
}

void comm::abort() {
  if (!impl_ || !impl_->rt) return;
  impl_->finalized = true;
  impl_->rt->shutdown();
}

}  // namespace vessel
