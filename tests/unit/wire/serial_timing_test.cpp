#include "wire/serial_timing.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include "wire/serial_decoder.hpp"
#include "wire/serial_frame.hpp"

namespace vessel::wire {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

TEST(wire_serial_timing, bits_per_char_counts_start_data_parity_and_stop_bits) {
  EXPECT_EQ(bits_per_char(8, serial_parity::none, 1), 10u);  // 8N1
  EXPECT_EQ(bits_per_char(8, serial_parity::even, 1), 11u);  // 8E1
  EXPECT_EQ(bits_per_char(8, serial_parity::none, 2), 11u);  // 8N2
  EXPECT_EQ(bits_per_char(7, serial_parity::odd, 2), 11u);   // 7O2
  EXPECT_EQ(bits_per_char(5, serial_parity::none, 1), 7u);
  EXPECT_EQ(bits_per_char_8n1, 10u);
}

TEST(wire_serial_timing, byte_time_at_115200_8n1_is_86_8_microseconds) {
  // 10 bits / 115200 baud = 86805.55... ns, rounded up.
  EXPECT_EQ(serial_byte_time(115200, bits_per_char_8n1), nanoseconds{86806});
}

TEST(wire_serial_timing, byte_time_at_9600_8n1_is_1_04_milliseconds) {
  // 10 bits / 9600 baud = 1041666.66... ns, rounded up.
  EXPECT_EQ(serial_byte_time(9600, bits_per_char_8n1), nanoseconds{1'041'667});
}

TEST(wire_serial_timing, a_256_byte_frame_at_115200_8n1_takes_22_2_milliseconds) {
  // 2560 bits / 115200 baud = 22222222.2 ns; computed from the bit total, not 256 x the rounded byte time.
  EXPECT_EQ(serial_frame_time(115200, bits_per_char_8n1, serial_max_frame_bytes), nanoseconds{22'222'223});
}

TEST(wire_serial_timing, a_256_byte_frame_at_9600_8n1_takes_266_7_milliseconds) {
  EXPECT_EQ(serial_frame_time(9600, bits_per_char_8n1, 256), nanoseconds{266'666'667});
}

TEST(wire_serial_timing, parity_makes_a_frame_a_tenth_slower_than_8n1) {
  EXPECT_EQ(serial_frame_time(9600, bits_per_char(8, serial_parity::even, 1), 256),
            nanoseconds{293'333'334});  // 2816 bits / 9600 = 293333333.3 ns
}

TEST(wire_serial_timing, read_timeout_is_twice_the_frame_time_plus_a_20_ms_floor) {
  EXPECT_EQ(serial_timeout_safety_factor, 2u);
  EXPECT_EQ(serial_timeout_floor, milliseconds{20});
  EXPECT_EQ(serial_read_timeout(115200, bits_per_char_8n1, 256), nanoseconds{64'444'446});
  EXPECT_EQ(serial_read_timeout(9600, bits_per_char_8n1, 256), nanoseconds{553'333'334});
  EXPECT_EQ(serial_read_timeout(9600, bits_per_char_8n1, 256, 3, milliseconds{5}),
            nanoseconds{805'000'001});
}

TEST(wire_serial_timing, decoder_built_from_a_baud_rate_times_out_after_the_read_timeout_of_a_largest_frame) {
  EXPECT_EQ(serial_decoder(115200).read_timeout(), serial_read_timeout(115200, 10, serial_max_frame_bytes));
  EXPECT_EQ(serial_decoder(9600, bits_per_char(8, serial_parity::even, 1)).read_timeout(),
            serial_read_timeout(9600, 11, serial_max_frame_bytes));
}

}  // namespace
}  // namespace vessel::wire
