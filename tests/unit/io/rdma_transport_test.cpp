// RDMA verbs transport. The QP-info encoding, its exchange and device discovery run everywhere;
// the loopback tests need a device (a ConnectX port, or soft-RoCE: `rdma link add rxe0 type rxe
// netdev lo`) and skip with a message naming what is missing otherwise.

#include "io/rdma_transport.hpp"

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "io/errc.hpp"

namespace vessel::io {
namespace {

using namespace std::chrono_literals;

#define SKIP_WITHOUT_RDMA_DEVICE()                                                \
  do {                                                                            \
    if (!rdma_devices_present()) {                                                \
      GTEST_SKIP() << "no RDMA device: /sys/class/infiniband is empty";           \
    }                                                                             \
  } while (0)

rdma_qp_info sample_info() {
  rdma_qp_info info;
  info.qp_num = 0x123456;
  info.psn = 0xABCDEF;
  info.lid = 0x0102;
  info.port = 1;
  info.mtu = 5;  // IBV_MTU_4096
  for (std::size_t i = 0; i < info.gid.size(); ++i) info.gid[i] = static_cast<std::uint8_t>(0xF0 + i);
  info.recv_depth = 64;
  info.max_message = 65532;
  return info;
}

TEST(rdma_qp_info_test, round_trips_through_its_fixed_little_endian_encoding) {
  const auto info = sample_info();
  const auto bytes = encode_qp_info(info);
  ASSERT_EQ(bytes.size(), rdma_qp_info_bytes);
  // The magic "VQPI" comes first, byte for byte, whatever the host's endianness.
  EXPECT_EQ(std::memcmp(bytes.data(), "VQPI", 4), 0);
  EXPECT_EQ(bytes[8], std::byte{0x56});  // qp_num, least significant byte first
  const auto back = decode_qp_info(bytes);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back.value(), info);
}

TEST(rdma_qp_info_test, refuses_foreign_truncated_and_out_of_range_info) {
  const auto good = encode_qp_info(sample_info());
  EXPECT_EQ(decode_qp_info(std::span{good}.first(rdma_qp_info_bytes - 1)).error(),
            errc::handshake_failed);
  auto bad = good;
  bad[0] = std::byte{'X'};
  EXPECT_EQ(decode_qp_info(bad).error(), errc::handshake_failed);
  bad = good;
  bad[4] = std::byte{2};  // a version this build does not know
  EXPECT_EQ(decode_qp_info(bad).error(), errc::handshake_failed);
  auto info = sample_info();
  info.qp_num = 1u << 24;  // QP numbers are 24 bits
  EXPECT_EQ(decode_qp_info(encode_qp_info(info)).error(), errc::handshake_failed);
  info = sample_info();
  info.mtu = 6;
  EXPECT_EQ(decode_qp_info(encode_qp_info(info)).error(), errc::handshake_failed);
  info = sample_info();
  info.recv_depth = 0;  // a peer granting no credit could never be sent to
  EXPECT_EQ(decode_qp_info(encode_qp_info(info)).error(), errc::handshake_failed);
}

TEST(rdma_qp_info_test, both_sides_exchange_at_once_over_a_bootstrap_socket) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  auto a = sample_info();
  auto b = sample_info();
  b.qp_num = 0x77;
  b.psn = 0x42;
  std::optional<result<rdma_qp_info>> got_by_b;
  std::thread peer([&] { got_by_b = exchange_qp_info(fds[1], b); });
  const auto got_by_a = exchange_qp_info(fds[0], a);
  peer.join();
  ::close(fds[0]);
  ::close(fds[1]);
  ASSERT_TRUE(got_by_a.has_value()) << got_by_a.error().message();
  ASSERT_TRUE(got_by_b.has_value() && got_by_b->has_value());
  EXPECT_EQ(got_by_a.value(), b);
  EXPECT_EQ(got_by_b->value(), a);
}

TEST(rdma_qp_info_test, exchange_reports_a_peer_that_hangs_up) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  ::close(fds[1]);
  const auto got = exchange_qp_info(fds[0], sample_info());
  ::close(fds[0]);
  ASSERT_FALSE(got.has_value());
  // The write meets a closed socket (EPIPE, generic) or the read meets EOF (connection_closed).
  EXPECT_TRUE(got.error() == errc::connection_closed || got.error() == std::errc::broken_pipe)
      << got.error().message();
}

TEST(rdma_device_test, discovery_agrees_with_sysfs_and_reports_no_device_cleanly) {
  const auto names = rdma_device_names();
  if (rdma_devices_present()) {
    EXPECT_FALSE(names.empty());
    rdma_device_config missing;
    missing.name = "vessel_no_such_device";
    EXPECT_EQ(rdma_device::open(missing).error(), errc::no_device);
  } else {
    EXPECT_TRUE(names.empty());
    const auto dev = rdma_device::open();
    ASSERT_FALSE(dev.has_value());
    EXPECT_EQ(dev.error(), errc::no_device);
    EXPECT_EQ(dev.error().message(), "required device not present");
  }
}

// -- Loopback: two QPs on one device, driven by one reactor on the test thread. -----------------

struct frame_log final : transport_handler {
  void on_frame(const wire::frame_header& header, std::span<const std::byte> payload,
                const buffer_slice& /*owner*/) override {
    headers.push_back(header);
    payloads.emplace_back(payload.begin(), payload.end());
  }
  void on_writable() override { ++writable; }
  void on_closed(std::error_code why) override { closed = why; }
  std::vector<wire::frame_header> headers;
  std::vector<std::vector<std::byte>> payloads;
  int writable = 0;
  std::optional<std::error_code> closed;
};

wire::frame_header data_header(std::uint64_t seq, std::size_t len) {
  wire::frame_header h;
  h.seq = seq;
  h.payload_len = static_cast<std::uint32_t>(len);
  h.body = wire::data_fields{.src = 1, .dst = 2, .tag = seq * 10, .total_len = len};
  return h;
}

class rdma_loopback_test : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_RDMA_DEVICE();
    auto dev = rdma_device::open();
    ASSERT_TRUE(dev.has_value()) << dev.error().message();
    device_ = dev.value();
    buffer_pool_config pc;
    pc.classes = {{4096, 256}, {64 * 1024, 160}};
    pool_ = std::make_unique<buffer_pool>(pc);
    reactor_config rc;
    rc.own_thread = false;
    reactor_ = std::make_unique<reactor>(rc);
    ASSERT_TRUE(reactor_->start().has_value());
    rdma_transport_config tc;
    tc.recv_depth = 8;  // small, so that the credit tests run out of credit quickly
    tc.send_depth = 16;
    auto a = rdma_transport::create(*reactor_, device_, *pool_, log_a_, tc);
    auto b = rdma_transport::create(*reactor_, device_, *pool_, log_b_, tc);
    ASSERT_TRUE(a.has_value()) << a.error().message();
    ASSERT_TRUE(b.has_value()) << b.error().message();
    a_ = std::move(a).value();
    b_ = std::move(b).value();
    // In-process "bootstrap": each side gets the other's info through the same encoding.
    const auto info_a = decode_qp_info(encode_qp_info(a_->local_info())).value();
    const auto info_b = decode_qp_info(encode_qp_info(b_->local_info())).value();
    auto ca = a_->connect(info_b);
    auto cb = b_->connect(info_a);
    ASSERT_TRUE(ca.has_value()) << ca.error().message();
    ASSERT_TRUE(cb.has_value()) << cb.error().message();
  }

  void TearDown() override {
    if (!reactor_) return;
    if (a_ && !log_a_.closed) a_->close();
    if (b_ && !log_b_.closed) b_->close();
    run_until([&] { return log_a_.closed && log_b_.closed; }, 5s);
    reactor_->stop();
    while (reactor_->run_once(10ms)) {
    }
    a_.reset();
    b_.reset();
  }

  template <class Pred>
  bool run_until(Pred pred, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      reactor_->run_once(1ms);
    }
    return true;
  }

  std::shared_ptr<rdma_device> device_;
  std::unique_ptr<buffer_pool> pool_;
  std::unique_ptr<reactor> reactor_;
  frame_log log_a_;
  frame_log log_b_;
  std::unique_ptr<rdma_transport> a_;
  std::unique_ptr<rdma_transport> b_;
};

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((seed + i * 13) & 0xFF);
  return v;
}

TEST_F(rdma_loopback_test, frames_cross_both_ways_with_headers_and_payloads_intact) {
  // Pooled (zero-copy) payloads from a to b, copied ones from b to a, sizes around the edges.
  const std::vector<std::size_t> sizes{0, 1, 63, 4096, 60000};
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto bytes = pattern(sizes[i], static_cast<unsigned>(i));
    buffer block = pool_->try_acquire(std::max<std::size_t>(sizes[i], 1));
    ASSERT_TRUE(block);
    std::memcpy(block.data(), bytes.data(), bytes.size());
    ASSERT_TRUE(a_->send(data_header(i + 1, sizes[i]), std::move(block).slice(0, sizes[i])));
    ASSERT_TRUE(b_->send_copy(data_header(100 + i, sizes[i]), bytes));
  }
  ASSERT_TRUE(run_until([&] {
    return log_a_.payloads.size() == sizes.size() && log_b_.payloads.size() == sizes.size();
  }, 5s));
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto bytes = pattern(sizes[i], static_cast<unsigned>(i));
    EXPECT_EQ(log_b_.payloads[i], bytes);
    EXPECT_EQ(log_b_.headers[i], data_header(i + 1, sizes[i]));
    EXPECT_EQ(log_a_.payloads[i], bytes);
    EXPECT_EQ(log_a_.headers[i], data_header(100 + i, sizes[i]));
  }
  EXPECT_EQ(a_->stats().frames_sent, sizes.size());
  EXPECT_EQ(b_->stats().frames_received, sizes.size());
}

TEST_F(rdma_loopback_test, more_frames_than_credits_wait_for_returned_credits_in_order) {
  constexpr std::size_t count = 200;  // 25 x the receive window of 8
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_TRUE(a_->send_copy(data_header(i + 1, 8), pattern(8, static_cast<unsigned>(i))));
  }
  EXPECT_EQ(a_->credits(), 0u);  // the window went out at once, the rest waits
  ASSERT_TRUE(run_until([&] { return log_b_.payloads.size() == count; }, 10s));
  for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(log_b_.headers[i].seq, i + 1);
  ASSERT_TRUE(run_until([&] { return a_->queued_bytes() == 0; }, 5s));
}

TEST_F(rdma_loopback_test, a_local_close_reaches_the_peer_as_connection_closed) {
  a_->close();
  ASSERT_TRUE(run_until([&] { return log_a_.closed && log_b_.closed; }, 5s));
  EXPECT_EQ(*log_a_.closed, errc::transport_closed);
  EXPECT_EQ(*log_b_.closed, errc::connection_closed);
  EXPECT_EQ(a_->send_copy(data_header(1, 0), {}).error(), errc::transport_closed);
}

TEST_F(rdma_loopback_test, a_frame_larger_than_the_peer_accepts_is_refused) {
  const auto big = pattern(70000, 1);
  const auto r = a_->send_copy(data_header(1, big.size()), big);
  ASSERT_FALSE(r.has_value());  // no pool block that large, or larger than the peer's receives
}

}  // namespace
}  // namespace vessel::io
