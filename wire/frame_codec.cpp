#include "wire/frame_codec.hpp"

#include <capnp/message.h>
#include <kj/exception.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "wire/errc.hpp"
#include "wire/frame.capnp.h"

namespace vessel::wire {
namespace {

static_assert(schema::PROTOCOL_VERSION == protocol_version,
              "wire/frame_header.hpp and wire/frame.capnp disagree on the protocol version");

// The readers below compile to one load each on little-endian hosts, and stay right elsewhere.
std::uint32_t load_le32(const std::byte* p) noexcept {
  return std::to_integer<std::uint32_t>(p[0]) | std::to_integer<std::uint32_t>(p[1]) << 8 |
         std::to_integer<std::uint32_t>(p[2]) << 16 | std::to_integer<std::uint32_t>(p[3]) << 24;
}

void store_le32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

std::uint64_t load_le64(const std::byte* p) noexcept {
  return std::uint64_t{load_le32(p)} | std::uint64_t{load_le32(p + 4)} << 32;
}

void store_le64(std::byte* p, std::uint64_t v) noexcept {
  store_le32(p, static_cast<std::uint32_t>(v));
  store_le32(p + 4, static_cast<std::uint32_t>(v >> 32));
}

// ---- data frames without Cap'n Proto's builder and reader ----
//
// Data frames carry every message, and on a small message the generic builder and reader cost
// more user time than the rest of a TCP hop's user space together (perf, vessel-bench transport
// tcp 8 B). For them the encoder writes the bytes MallocMessageBuilder lays out for one segment,
// and the decoder reads that layout after the bounds checks Cap'n Proto makes itself; anything
// else (another kind, other section sizes, far or out-of-bounds pointers, a multi-segment
// message) goes to the generic reader, so what is accepted and what is refused does not change.
// frame_codec_test checks both directions against Cap'n Proto byte for byte and on mutated input.
// Field offsets (bytes into a struct's data section) are those of the generated frame.capnp.h.

constexpr std::size_t frame_data_words = schema::Frame::_capnpPrivate::dataWordSize;
constexpr std::size_t frame_pointers = schema::Frame::_capnpPrivate::pointerCount;
constexpr std::size_t data_header_words = schema::DataHeader::_capnpPrivate::dataWordSize;
static_assert(frame_data_words == 3 && frame_pointers == 1 && data_header_words == 6 &&
                  schema::DataHeader::_capnpPrivate::pointerCount == 0,
              "frame.capnp changed: update the data-frame fast path's offsets");
// root pointer, Frame (data + pointers), DataHeader
constexpr std::size_t data_segment_words = 1 + frame_data_words + frame_pointers + data_header_words;

namespace frame_at {  // Frame's data section
constexpr std::size_t version = 0, has_crc32c = 2, payload_len = 4, seq = 8, crc32c = 16, which = 20;
}  // namespace frame_at
namespace data_at {  // DataHeader's data section
constexpr std::size_t src = 0, dst = 4, tag = 8, message_id = 16, fragment_index = 24,
                      fragment_count = 28, total_len = 32, fragment_offset = 40;
}  // namespace data_at

constexpr std::uint64_t struct_pointer(std::size_t data_words, std::size_t pointers) noexcept {
  return std::uint64_t{data_words} << 32 | std::uint64_t{pointers} << 48;  // offset 0, kind struct
}

// Writes the one segment of a data frame's header (data_segment_words words) at `seg`.
void write_data_segment(const frame_header& h, const data_fields& d, std::byte* seg) noexcept {
  std::memset(seg, 0, data_segment_words * 8);
  store_le64(seg, struct_pointer(frame_data_words, frame_pointers));
  std::byte* f = seg + 8;
  f[frame_at::version] = static_cast<std::byte>(h.version);
  f[frame_at::version + 1] = static_cast<std::byte>(h.version >> 8);
  store_le32(f + frame_at::payload_len, h.payload_len);
  store_le64(f + frame_at::seq, h.seq);
  if (h.crc32c) {
    f[frame_at::has_crc32c] = std::byte{1};
    store_le32(f + frame_at::crc32c, *h.crc32c);
  }
  f[frame_at::which] = static_cast<std::byte>(schema::Frame::DATA);
  std::byte* ptr = f + frame_data_words * 8;  // Frame's only pointer, straight before its target
  store_le64(ptr, struct_pointer(data_header_words, 0));
  std::byte* b = ptr + 8;
  store_le32(b + data_at::src, d.src);
  store_le32(b + data_at::dst, d.dst);
  store_le64(b + data_at::tag, d.tag);
  store_le64(b + data_at::message_id, d.message_id);
  store_le32(b + data_at::fragment_index, d.fragment_index);
  store_le32(b + data_at::fragment_count, d.fragment_count);
  store_le64(b + data_at::total_len, d.total_len);
  store_le64(b + data_at::fragment_offset, d.fragment_offset);
}

// A struct as a pointer at segment word `at` locates it: its first word and section sizes.
struct struct_span {
  std::size_t begin = 0;
  std::size_t data_words = 0;
  std::size_t pointers = 0;
};

// The struct `seg[at]` points to, when it is a plain struct pointer whose target lies inside the
// segment; nullopt for anything the generic reader must judge (null, list, far, other, outside).
std::optional<struct_span> struct_at(const std::byte* seg, std::size_t seg_words,
                                     std::size_t at) noexcept {
  const std::uint64_t p = load_le64(seg + at * 8);
  if (p == 0 || (p & 3) != 0) return std::nullopt;
  const std::int64_t offset = static_cast<std::int32_t>(static_cast<std::uint32_t>(p)) >> 2;
  const std::int64_t begin = static_cast<std::int64_t>(at) + 1 + offset;
  struct_span s{0, (p >> 32) & 0xffff, p >> 48};
  if (begin < 0 || static_cast<std::uint64_t>(begin) + s.data_words + s.pointers > seg_words) {
    return std::nullopt;
  }
  s.begin = static_cast<std::size_t>(begin);
  return s;
}

// A field of `size` bytes at byte `at` of a struct's data section: 0 (the schema default) where
// the section is shorter, as Cap'n Proto reads a struct written by an older schema.
// A template, so that each read inlines to a bounds check and one load: as a call with a switch
// on the size, field() and decode() took 5.2 % and 2.6 % of an 8-byte shm ping-pong's samples,
// decode() alone 4.4 % since (half round trip 0.80 -> 0.78 µs, medians of four rounds: noise-level).
template <std::size_t Size>
inline std::uint64_t field(const std::byte* seg, const struct_span& s, std::size_t at) noexcept {
  if (at + Size > s.data_words * 8) return 0;
  const std::byte* p = seg + s.begin * 8 + at;
  if constexpr (Size == 1) return std::to_integer<std::uint64_t>(p[0]);
  if constexpr (Size == 2) {
    return std::to_integer<std::uint64_t>(p[0]) | std::to_integer<std::uint64_t>(p[1]) << 8;
  }
  static_assert(Size == 1 || Size == 2 || Size == 4 || Size == 8);
  if constexpr (Size == 4) return load_le32(p);
  return load_le64(p);
}

// The fields of a one-segment data frame; false: not that shape, ask the generic reader.
bool read_data_segment(const std::byte* seg, std::size_t seg_words, frame_header& h,
                       data_fields& d) noexcept {
  if (seg_words == 0) return false;
  const auto frame = struct_at(seg, seg_words, 0);
  if (!frame || field<2>(seg, *frame, frame_at::which) != schema::Frame::DATA ||
      frame->pointers == 0) {
    return false;
  }
  const auto body = struct_at(seg, seg_words, frame->begin + frame->data_words);
  if (!body || body->data_words == 0) return false;
  h.version = static_cast<std::uint16_t>(field<2>(seg, *frame, frame_at::version));
  h.seq = field<8>(seg, *frame, frame_at::seq);
  h.payload_len = static_cast<std::uint32_t>(field<4>(seg, *frame, frame_at::payload_len));
  if ((field<1>(seg, *frame, frame_at::has_crc32c) & 1) != 0) {
    h.crc32c = static_cast<std::uint32_t>(field<4>(seg, *frame, frame_at::crc32c));
  }
  d.src = static_cast<std::uint32_t>(field<4>(seg, *body, data_at::src));
  d.dst = static_cast<std::uint32_t>(field<4>(seg, *body, data_at::dst));
  d.tag = field<8>(seg, *body, data_at::tag);
  d.message_id = field<8>(seg, *body, data_at::message_id);
  d.fragment_index = static_cast<std::uint32_t>(field<4>(seg, *body, data_at::fragment_index));
  d.fragment_count = static_cast<std::uint32_t>(field<4>(seg, *body, data_at::fragment_count));
  d.total_len = field<8>(seg, *body, data_at::total_len);
  d.fragment_offset = field<8>(seg, *body, data_at::fragment_offset);
  return true;
}

// Hard cap on segments, so that the reader's segment list lives on the stack. vessel writes one
// segment and the capnp CLI writes one for a message this small; 64 is generous.
constexpr std::size_t segment_cap = 64;

// ---- frame_header -> builder ----

kj::ArrayPtr<const kj::byte> as_kj(const nonce& n) noexcept {
  return {reinterpret_cast<const kj::byte*>(n.data()), n.size()};
}

void fill(schema::Hello::Builder b, const hello_fields& h) {
  b.setSenderRank(h.sender_rank);
  b.setWorldSize(h.world_size);
  b.setIncarnation(h.incarnation);
  if (h.challenge) b.setChallenge(as_kj(*h.challenge));
  if (h.response) b.setResponse(as_kj(*h.response));
  b.setLastSeqSeen(h.last_seq_seen);
}

void fill(schema::DataHeader::Builder b, const data_fields& d) {
  b.setSrc(d.src);
  b.setDst(d.dst);
  b.setTag(d.tag);
  b.setMessageId(d.message_id);
  b.setFragmentIndex(d.fragment_index);
  b.setFragmentCount(d.fragment_count);
  b.setTotalLen(d.total_len);
  b.setFragmentOffset(d.fragment_offset);
}

void fill(schema::Frame::Builder f, const frame_header& h) {
  f.setVersion(h.version);
  f.setSeq(h.seq);
  f.setPayloadLen(h.payload_len);
  f.setHasCrc32c(h.crc32c.has_value());
  f.setCrc32c(h.crc32c.value_or(0));
  switch (h.kind()) {
    case frame_kind::hello: fill(f.initHello(), std::get<hello_fields>(h.body)); break;
    case frame_kind::data: fill(f.initData(), std::get<data_fields>(h.body)); break;
    case frame_kind::ack: {
      const auto& ack = std::get<ack_fields>(h.body);
      auto b = f.initAck();
      b.setCumulativeSeq(ack.cumulative_seq);
      b.setClosing(ack.closing);
      break;
    }
    case frame_kind::credit: f.initCredit().setBytes(std::get<credit_fields>(h.body).bytes); break;
    case frame_kind::heartbeat: {
      const auto& hb = std::get<heartbeat_fields>(h.body);
      auto b = f.initHeartbeat();
      b.setSendTimeNs(hb.send_time_ns);
      b.setEchoTimeNs(hb.echo_time_ns);
      break;
    }
    case frame_kind::collective: {
      const auto& c = std::get<collective_fields>(h.body);
      auto b = f.initCollective();
      b.setCommunicator(c.communicator);
      b.setOperation(c.operation);
      b.setStep(c.step);
      b.setChunkIndex(c.chunk_index);
      break;
    }
    case frame_kind::device: {
      const auto& d = std::get<device_fields>(h.body);
      auto b = f.initDevice();
      b.setDeviceId(d.device_id);
      b.setKind(d.kind);
      b.setRequestId(d.request_id);
      break;
    }
  }
}

// ---- reader -> frame_header ----

// An empty Data is "absent"; anything but empty or 32 bytes is a peer bug or an attack.
result<std::optional<nonce>> read_nonce(capnp::Data::Reader d) noexcept {
  if (d.size() == 0) return std::optional<nonce>{};
  if (d.size() != nonce_bytes) return errc::bad_field;
  nonce n;
  std::memcpy(n.data(), d.begin(), nonce_bytes);
  return std::optional<nonce>{n};
}

result<data_fields> check_data(const data_fields& d, std::uint32_t payload_len,
                               const decoder_limits& limits) noexcept {
  // A message always has at least one fragment; 0 is a field out of range, not a count to check.
  if (d.fragment_count == 0) return errc::bad_field;
  if (d.fragment_count > limits.max_fragments) return errc::too_many_fragments;
  if (d.fragment_index >= d.fragment_count) return errc::fragment_out_of_range;
  // Written as a subtraction so that a hostile offset near 2^64 cannot wrap around.
  if (d.fragment_offset > d.total_len || d.total_len - d.fragment_offset < payload_len) {
    return errc::fragment_out_of_range;
  }
  return d;
}

result<data_fields> read_data(schema::DataHeader::Reader r, std::uint32_t payload_len,
                              const decoder_limits& limits) noexcept {
  data_fields d;
  d.src = r.getSrc();
  d.dst = r.getDst();
  d.tag = r.getTag();
  d.message_id = r.getMessageId();
  d.fragment_index = r.getFragmentIndex();
  d.fragment_count = r.getFragmentCount();
  d.total_len = r.getTotalLen();
  d.fragment_offset = r.getFragmentOffset();
  return check_data(d, payload_len, limits);
}

result<frame_header> read_frame(schema::Frame::Reader f, const decoder_limits& limits) {
  frame_header h;
  h.version = f.getVersion();
  if (h.version > protocol_version) return errc::unsupported_version;
  h.seq = f.getSeq();
  h.payload_len = f.getPayloadLen();
  if (f.getHasCrc32c()) h.crc32c = f.getCrc32c();

  switch (f.which()) {
    case schema::Frame::HELLO: {
      auto r = f.getHello();
      hello_fields hello;
      hello.sender_rank = r.getSenderRank();
      hello.world_size = r.getWorldSize();
      hello.incarnation = r.getIncarnation();
      VESSEL_TRY(challenge, read_nonce(r.getChallenge()));
      VESSEL_TRY(response, read_nonce(r.getResponse()));
      hello.challenge = challenge;
      hello.response = response;
      hello.last_seq_seen = r.getLastSeqSeen();
      h.body = hello;
      break;
    }
    case schema::Frame::DATA: {
      VESSEL_TRY(d, read_data(f.getData(), h.payload_len, limits));
      h.body = d;
      break;
    }
    case schema::Frame::ACK: {
      auto r = f.getAck();
      h.body = ack_fields{r.getCumulativeSeq(), r.getClosing()};
      break;
    }
    case schema::Frame::CREDIT: h.body = credit_fields{f.getCredit().getBytes()}; break;
    case schema::Frame::HEARTBEAT: {
      auto r = f.getHeartbeat();
      h.body = heartbeat_fields{r.getSendTimeNs(), r.getEchoTimeNs()};
      break;
    }
    case schema::Frame::COLLECTIVE: {
      auto r = f.getCollective();
      h.body = collective_fields{r.getCommunicator(), r.getOperation(), r.getStep(),
                                 r.getChunkIndex()};
      break;
    }
    case schema::Frame::DEVICE: {
      auto r = f.getDevice();
      h.body = device_fields{r.getDeviceId(), r.getKind(), r.getRequestId()};
      break;
    }
    default: return errc::unknown_kind;  // a member added by a newer schema
  }
  // Checked after the kind so that an unknown kind reads as such, whatever its length claims.
  if (h.payload_len > limits.max_payload_bytes) return errc::payload_too_large;
  return h;
}

// Reads the Frame root of a validated segment list; Cap'n Proto throws on what it rejects.
result<frame_header> read_message(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments,
                                  std::size_t message_words, const decoder_limits& limits) noexcept {
  try {
    capnp::ReaderOptions options;
    // Headers are tiny; a small limit stops pointer loops from amplifying a hostile message.
    options.traversalLimitInWords = message_words * 4 + 64;
    options.nestingLimit = 8;
    capnp::SegmentArrayMessageReader reader(segments, options);
    return read_frame(reader.getRoot<schema::Frame>(), limits);
  } catch (const kj::Exception&) {
    return errc::malformed_header;
  }
}

// What read_frame checks of a data frame, in the same order, for the fields read_data_segment
// found.
result<frame_header> finish_data(frame_header h, const data_fields& d,
                                 const decoder_limits& limits) noexcept {
  if (h.version > protocol_version) return errc::unsupported_version;
  VESSEL_TRY(checked, check_data(d, h.payload_len, limits));
  h.body = checked;
  if (h.payload_len > limits.max_payload_bytes) return errc::payload_too_large;
  return h;
}

result<frame_header> decode(std::span<const std::byte> message, const decoder_limits& limits,
                            bool data_fast_path) noexcept {
  if (reinterpret_cast<std::uintptr_t>(message.data()) % alignof(capnp::word) != 0) {
    return errc::malformed_header;
  }
  if (message.size() < min_header_bytes) return errc::header_too_small;
  if (message.size() % sizeof(capnp::word) != 0) return errc::header_misaligned;

  // Segment table: u32 count-1, u32 size in words per segment, padded to a whole word.
  const std::size_t message_words = message.size() / sizeof(capnp::word);
  const std::uint64_t count = std::uint64_t{load_le32(message.data())} + 1;
  if (count > std::min<std::size_t>(limits.max_segments, segment_cap)) {
    return errc::bad_segment_table;
  }
  const std::size_t table_words = (count + 2) / 2;
  if (table_words > message_words) return errc::bad_segment_table;
  const auto* words = reinterpret_cast<const capnp::word*>(message.data());
  std::uint64_t offset = table_words;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t size = load_le32(message.data() + 4 + 4 * i);
    if (size > message_words - offset) return errc::bad_segment_table;
    offset += size;
  }
  // Exactly as writeMessage lays it out: no trailing bytes that nobody accounts for.
  if (offset != message_words) return errc::bad_segment_table;

  // One segment is the norm (vessel writes nothing else), so it skips the segment list, whose
  // default construction zeroes 1 KiB per header (perf: decode_header was the top symbol).
  if (count == 1) {
    if (data_fast_path) {
      frame_header h;
      data_fields d;
      if (read_data_segment(message.data() + table_words * 8, message_words - table_words, h, d)) {
        return finish_data(h, d, limits);
      }
    }
    const kj::ArrayPtr<const capnp::word> only =
        kj::arrayPtr(words + table_words, message_words - table_words);
    return read_message(kj::arrayPtr(&only, 1), message_words, limits);
  }
  std::array<kj::ArrayPtr<const capnp::word>, segment_cap> segments;
  offset = table_words;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t size = load_le32(message.data() + 4 + 4 * i);
    segments[i] = kj::arrayPtr(words + offset, size);
    offset += size;
  }
  return read_message(kj::arrayPtr(segments.data(), count), message_words, limits);
}

// The segment MallocMessageBuilder writes for `header`, copied to `out` (room for segment_words
// words); returns its words. Throws kj::Exception where Cap'n Proto refuses.
result<std::size_t> build_with_capnp(const frame_header& header, std::span<std::uint64_t> scratch,
                                     std::byte* out) {
  // Built in the zeroed scratch segment, then copied so that the output outlives the builder,
  // whose destructor zeroes the scratch again.
  capnp::MallocMessageBuilder builder(
      kj::arrayPtr(reinterpret_cast<capnp::word*>(scratch.data()), scratch.size()),
      capnp::AllocationStrategy::FIXED_SIZE);
  fill(builder.initRoot<schema::Frame>(), header);
  auto segments = builder.getSegmentsForOutput();
  // Headers are bounded by their schema, so a second segment means the scratch is too small.
  if (segments.size() != 1) return errc::buffer_too_small;
  const std::size_t words = segments[0].size();
  std::memcpy(out, segments[0].begin(), words * sizeof(capnp::word));
  return words;
}

}  // namespace

result<std::array<iovec, 2>> frame_encoder::encode(const frame_header& header,
                                                   std::span<const std::byte> payload) noexcept {
  out_len_ = 0;
  if (payload.size() != header.payload_len) return errc::bad_field;
  VESSEL_TRY(encode_header(header));
  std::array<iovec, 2> iov{};
  iov[0].iov_base = out_.data() + 4;
  iov[0].iov_len = out_len_;
  // iovec has no const flavour; writev only reads the payload.
  iov[1].iov_base = const_cast<std::byte*>(payload.data());
  iov[1].iov_len = payload.size();
  return iov;
}

result<std::span<const std::byte>> frame_encoder::encode_header(
    const frame_header& header) noexcept {
  out_len_ = 0;
  if (header.body.valueless_by_exception()) return errc::bad_field;
  std::size_t words = 0;
  if (const auto* data = std::get_if<data_fields>(&header.body)) {
    write_data_segment(header, *data, out_.data() + 16);
    words = data_segment_words;
  } else {
    try {
      auto built = build_with_capnp(header, segment_, out_.data() + 16);
      if (!built) return built.error();
      words = built.value();
    } catch (const kj::Exception&) {
      return errc::malformed_header;
    }
  }
  const std::size_t header_len = 8 + words * sizeof(capnp::word);
  store_le32(out_.data() + 4, static_cast<std::uint32_t>(header_len));
  store_le32(out_.data() + 8, 0);  // segment count - 1
  store_le32(out_.data() + 12, static_cast<std::uint32_t>(words));
  out_len_ = prefix_bytes + header_len;
  return header_bytes();
}

std::span<const std::byte> frame_encoder::header_bytes() const noexcept {
  return {out_.data() + 4, out_len_};
}

result<void> frame_encoder::encode_to(const frame_header& header,
                                      std::span<const std::byte> payload,
                                      std::vector<std::byte>& out) {
  VESSEL_TRY(encode(header, payload));
  auto bytes = header_bytes();
  out.insert(out.end(), bytes.begin(), bytes.end());
  out.insert(out.end(), payload.begin(), payload.end());
  return outcome::success();
}

result<frame_header> decode_header(std::span<const std::byte> message,
                                   const decoder_limits& limits) noexcept {
  return decode(message, limits, true);
}

namespace detail {

result<frame_header> decode_header_with_capnp(std::span<const std::byte> message,
                                              const decoder_limits& limits) noexcept {
  return decode(message, limits, false);
}

std::vector<std::byte> encode_header_with_capnp(const frame_header& header) {
  std::array<std::uint64_t, 32> scratch{};
  std::array<std::byte, 32 * 8> segment{};
  auto words = build_with_capnp(header, scratch, segment.data());
  if (!words) return {};
  std::vector<std::byte> out(8 + words.value() * 8);
  store_le32(out.data(), 0);
  store_le32(out.data() + 4, static_cast<std::uint32_t>(words.value()));
  std::memcpy(out.data() + 8, segment.data(), words.value() * 8);
  return out;
}

}  // namespace detail

}  // namespace vessel::wire
