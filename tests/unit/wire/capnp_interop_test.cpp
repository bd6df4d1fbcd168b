// Frames written by vessel decode with the `capnp` CLI, and messages written by the CLI decode with
// vessel: the header really is a standard Cap'n Proto stream message (docs/wire.md).

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/unit/wire/frame_test_support.hpp"
#include "wire/frame_codec.hpp"
#include "wire/stream_decoder.hpp"

namespace vessel::wire {
namespace {

const std::string capnp_tool = VESSEL_CAPNP_EXECUTABLE;
const std::string frame_schema = VESSEL_FRAME_SCHEMA;

// Runs `command` in a shell; returns its stdout, or fails the test when it exits non-zero.
std::string run(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed: " << command;
    return out;
  }
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = ::pclose(pipe);
  EXPECT_EQ(status, 0) << command;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "vessel_wire_interop_" + std::to_string(::getpid()) + "_" + name;
}

// A nonce of printable letters, so that the CLI prints it without escapes.
nonce letters(char first) {
  nonce n;
  for (std::size_t i = 0; i < n.size(); ++i) {
    n[i] = static_cast<std::byte>(first + static_cast<char>(i % 26));
  }
  return n;
}

std::string text(const nonce& n) {
  std::string s;
  for (auto b : n) s.push_back(static_cast<char>(b));
  return s;
}

// What `capnp decode --short` prints for a header (fields in declaration order, all of them).
std::string capnp_text(const frame_header& h) {
  using std::to_string;
  std::string s = "(version = " + to_string(h.version) + ", seq = " + to_string(h.seq) +
                  ", payloadLen = " + to_string(h.payload_len) +
                  ", hasCrc32c = " + (h.crc32c ? "true" : "false") +
                  ", crc32c = " + to_string(h.crc32c.value_or(0)) + ", ";
  struct visitor {
    std::string operator()(const hello_fields& f) const {
      return "hello = (senderRank = " + to_string(f.sender_rank) +
             ", worldSize = " + to_string(f.world_size) +
             ", incarnation = " + to_string(f.incarnation) + ", challenge = \"" +
             text(*f.challenge) + "\", response = \"" + text(*f.response) +
             "\", lastSeqSeen = " + to_string(f.last_seq_seen) + ")";
    }
    std::string operator()(const data_fields& f) const {
      return "data = (src = " + to_string(f.src) + ", dst = " + to_string(f.dst) +
             ", tag = " + to_string(f.tag) + ", messageId = " + to_string(f.message_id) +
             ", fragmentIndex = " + to_string(f.fragment_index) +
             ", fragmentCount = " + to_string(f.fragment_count) +
             ", totalLen = " + to_string(f.total_len) +
             ", fragmentOffset = " + to_string(f.fragment_offset) + ")";
    }
    std::string operator()(const ack_fields& f) const {
      return "ack = (cumulativeSeq = " + to_string(f.cumulative_seq) +
             ", closing = " + (f.closing ? "true" : "false") + ")";
    }
    std::string operator()(const credit_fields& f) const {
      return "credit = (bytes = " + to_string(f.bytes) + ")";
    }
    std::string operator()(const heartbeat_fields& f) const {
      return "heartbeat = (sendTimeNs = " + to_string(f.send_time_ns) +
             ", echoTimeNs = " + to_string(f.echo_time_ns) + ")";
    }
    std::string operator()(const collective_fields& f) const {
      return "collective = (communicator = " + to_string(f.communicator) +
             ", operation = " + to_string(f.operation) + ", step = " + to_string(f.step) +
             ", chunkIndex = " + to_string(f.chunk_index) + ")";
    }
    std::string operator()(const device_fields& f) const {
      return "device = (deviceId = " + to_string(f.device_id) +
             ", kind = " + to_string(f.kind) + ", requestId = " + to_string(f.request_id) + ")";
    }
  };
  return s + std::visit(visitor{}, h.body) + ")";
}

std::vector<frame_header> interop_headers() {
  auto headers = test::one_header_per_kind();
  auto& hello = std::get<hello_fields>(headers[0].body);
  hello.challenge = letters('A');
  hello.response = letters('a');
  return headers;
}

TEST(capnp_interop, capnp_cli_decodes_every_kind_vessel_encodes) {
  frame_encoder encoder;
  int i = 0;
  for (const auto& header : interop_headers()) {
    ASSERT_TRUE(encoder.encode(header, {}));
    const auto path = temp_path("encode_" + std::to_string(i++));
    {
      std::ofstream file(path, std::ios::binary);
      auto bytes = encoder.header_bytes().subspan(prefix_bytes);  // the CLI reads the message only
      file.write(reinterpret_cast<const char*>(bytes.data()),
                 static_cast<std::streamsize>(bytes.size()));
    }
    const auto printed =
        run("'" + capnp_tool + "' decode --short '" + frame_schema + "' Frame < '" + path + "'");
    EXPECT_EQ(printed, capnp_text(header));
    std::remove(path.c_str());
  }
}

TEST(capnp_interop, vessel_decodes_every_kind_the_capnp_cli_encodes) {
  int i = 0;
  for (auto header : interop_headers()) {
    header.payload_len = 3;
    const auto path = temp_path("decode_" + std::to_string(i++));
    // The CLI's text format is the one `capnp decode` prints, so the same text goes back in.
    run("echo '" + capnp_text(header) + "' | '" + capnp_tool + "' encode '" + frame_schema +
        "' Frame > '" + path + "'");
    std::ifstream file(path, std::ios::binary);
    std::vector<char> message((std::istreambuf_iterator<char>(file)),
                              std::istreambuf_iterator<char>());
    std::remove(path.c_str());
    ASSERT_FALSE(message.empty());

    std::vector<std::byte> stream(4);
    const auto len = static_cast<std::uint32_t>(message.size());
    for (int b = 0; b < 4; ++b) stream[b] = static_cast<std::byte>(len >> (8 * b));
    for (char c : message) stream.push_back(static_cast<std::byte>(c));
    for (int p = 0; p < 3; ++p) stream.push_back(static_cast<std::byte>('x' + p));

    stream_decoder decoder;
    ASSERT_EQ(decoder.feed(stream), stream.size());
    auto frame = decoder.next();
    ASSERT_TRUE(frame) << frame.error().message();
    ASSERT_TRUE(frame.value().has_value());
    EXPECT_EQ(frame.value()->header, header);
    EXPECT_EQ(frame.value()->payload.size(), 3u);
    EXPECT_EQ(frame.value()->payload[0], std::byte{'x'});
  }
}

}  // namespace
}  // namespace vessel::wire
