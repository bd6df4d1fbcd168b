#include "wire/frame_codec.hpp"

#include <capnp/message.h>
#include <kj/exception.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

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
    case frame_kind::ack:
      f.initAck().setCumulativeSeq(std::get<ack_fields>(h.body).cumulative_seq);
      break;
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
    case schema::Frame::ACK: h.body = ack_fields{f.getAck().getCumulativeSeq()}; break;
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

}  // namespace

result<std::array<iovec, 2>> frame_encoder::encode(const frame_header& header,
                                                   std::span<const std::byte> payload) noexcept {
  out_len_ = 0;
  if (payload.size() != header.payload_len) return errc::bad_field;
  if (header.body.valueless_by_exception()) return errc::bad_field;
  try {
    // Built in the zeroed scratch segment, then copied (at most 256 bytes) so that the output
    // outlives the builder, whose destructor zeroes the scratch again.
    std::size_t words = 0;
    {
      capnp::MallocMessageBuilder builder(
          kj::arrayPtr(reinterpret_cast<capnp::word*>(segment_.data()), segment_.size()),
          capnp::AllocationStrategy::FIXED_SIZE);
      fill(builder.initRoot<schema::Frame>(), header);
      auto segments = builder.getSegmentsForOutput();
      // Headers are bounded by their schema, so a second segment means segment_words is wrong.
      if (segments.size() != 1) return errc::buffer_too_small;
      words = segments[0].size();
      std::memcpy(out_.data() + 16, segments[0].begin(), words * sizeof(capnp::word));
    }
    const std::size_t header_len = 8 + words * sizeof(capnp::word);
    store_le32(out_.data() + 4, static_cast<std::uint32_t>(header_len));
    store_le32(out_.data() + 8, 0);  // segment count - 1
    store_le32(out_.data() + 12, static_cast<std::uint32_t>(words));
    out_len_ = prefix_bytes + header_len;
  } catch (const kj::Exception&) {
    return errc::malformed_header;
  }
  std::array<iovec, 2> iov{};
  iov[0].iov_base = out_.data() + 4;
  iov[0].iov_len = out_len_;
  // iovec has no const flavour; writev only reads the payload.
  iov[1].iov_base = const_cast<std::byte*>(payload.data());
  iov[1].iov_len = payload.size();
  return iov;
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

}  // namespace vessel::wire
