#pragma once
// A virtual UART board for tests and demos: owns the master side of a pty whose slave the host
// opens as if it were /dev/ttyUSB0 (through a stable symlink, HARNESS.md §3), and runs the board
// library of bridges/uart/board (the very C code the firmware runs) on a thread of its own. It
// paces bytes at the baud rate (10 bits per byte in 8N1; a pty ignores baud), answers the
// commands of docs/uart.md §8 (echo, add, read a sensor, stream telemetry, inject faults), and
// injects faults: bit flips, dropped bytes and noise bytes at a rate from a seed, a hang, an
// unplug (its pty closes and the symlink disappears, then a new one appears: a replug).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bridges/uart/board/vessel_serial.h"

namespace vessel::bridges::uart {

/// Faults injected on the line, per byte, from a seeded generator (one per direction).
struct fault_plan {
  double bit_flip_rate = 0;    ///< probability that a byte gets one random bit flipped
  double drop_rate = 0;        ///< probability that a byte never arrives
  double noise_rate = 0;       ///< probability that a random byte is inserted before a byte
  bool from_host_too = true;   ///< also damage the host's bytes (before the board's ring)
  std::uint64_t seed = 1;

  bool any() const noexcept { return bit_flip_rate > 0 || drop_rate > 0 || noise_rate > 0; }
};

/// Faults injected in one direction.
struct fault_counters {
  std::uint64_t bytes = 0;          ///< bytes offered to the line (before faults)
  std::uint64_t bits_flipped = 0;   ///< bytes with one bit flipped
  std::uint64_t bytes_dropped = 0;
  std::uint64_t noise_bytes = 0;
  std::uint64_t frames = 0;          ///< frames written (board to host only: one per write)
  std::uint64_t frames_damaged = 0;  ///< of those, frames with at least one fault
  std::uint64_t start_bytes_hit = 0; ///< damaged frames whose start byte was flipped or dropped
};

/// What the board did.
struct virtual_board_stats {
  fault_counters to_host, from_host;
  std::uint64_t requests = 0;  ///< requests run (a request delivered twice by the link: twice)
  std::uint64_t replies = 0;
  std::uint64_t events = 0;    ///< telemetry messages sent
  std::uint64_t bad_requests = 0;
  std::uint64_t unplugs = 0;
  std::uint64_t hangs = 0;
  std::uint64_t boots = 0;     ///< vsl_init calls: 1 + replugs
  vsl_stats link{};            ///< the board library's counters (of the current boot)
  vsl_parser_counters parser{};
};

/// How the board runs. Every key with its default.
struct virtual_board_config {
  std::filesystem::path link;  ///< symlink pointed at the pty slave; empty: none
  std::uint32_t baud = 115200;
  unsigned bits_per_char = 10;
  bool paced = true;  ///< false: bytes move as fast as the pty takes them (baud sets timeouts only)
  /// The board's millisecond clock runs this many times faster than real time, which shortens
  /// its retransmit and read timeouts: for fast tests on a pty, which has no USB-adapter latency.
  double time_scale = 1.0;
  fault_plan faults;
  std::uint8_t session = 1;  ///< session id of the first boot; each replug boots with the next
};

/// Commands the virtual board answers (docs/uart.md §8).
namespace board_command {
inline constexpr std::uint8_t echo = 0x01;       ///< reply body = request body
inline constexpr std::uint8_t add = 0x02;        ///< two int32 LE -> their int32 LE sum (wrapping)
inline constexpr std::uint8_t read_sensor = 0x03;///< u8 index (0 temperature m°C, 1 sample count) -> int32 LE
inline constexpr std::uint8_t telemetry = 0x04;  ///< u16 LE rate in Hz (0 stops) -> empty reply
inline constexpr std::uint8_t fault = 0x05;      ///< u8 kind + args (see fault_kind) -> empty reply
}  // namespace board_command

/// Topic of the telemetry events: body = u32 LE sample number, int32 LE temperature (m°C).
inline constexpr std::uint8_t telemetry_topic = 0x10;

/// First body byte of board_command::fault.
namespace fault_kind {
inline constexpr std::uint8_t hang = 1;    ///< u32 LE ms: the board stops reading and answering
inline constexpr std::uint8_t unplug = 2;  ///< u32 LE ms: the board is unplugged that long
inline constexpr std::uint8_t rates = 3;   ///< 3 x u32 LE per million: bit flips, drops, noise
}  // namespace fault_kind

class virtual_board {
 public:
  using clock = std::chrono::steady_clock;

  /// Opens the pty pair and points config.link at the slave. Throws std::runtime_error when the
  /// pty or the link cannot be made. Not running yet.
  explicit virtual_board(virtual_board_config config);
  /// Stops the thread and closes the pty (an unplug, as far as the host can tell).
  ~virtual_board();
  virtual_board(const virtual_board&) = delete;
  virtual_board& operator=(const virtual_board&) = delete;

  /// Boots the board library and starts the board thread.
  void start();
  /// Stops the board thread. Idempotent.
  void stop();

  /// The pty slave of the current plug (it changes at a replug; the link follows it).
  std::string slave_path() const;
  /// Unplugs now (the pty closes, the link disappears) and plugs in again after `down_for`.
  void unplug(std::chrono::milliseconds down_for);
  /// Stops reading, polling and writing for `duration`.
  void hang(std::chrono::milliseconds duration);
  /// Replaces the fault rates (the generators keep their state).
  void set_faults(double bit_flip_rate, double drop_rate, double noise_rate);
  /// Streams telemetry at `hz` per second (0 stops).
  void set_telemetry(unsigned hz);
  /// A consistent snapshot of the counters.
  virtual_board_stats stats() const;
  /// True while plugged in.
  bool plugged() const noexcept { return plugged_.load(); }

 private:
  struct unit {  // bytes that reach the host together, once the line has sent them
    std::vector<std::uint8_t> bytes;
    clock::time_point due;
  };

  static void write_cb(void* user, const std::uint8_t* bytes, std::size_t n);
  static void deliver_cb(void* user, const std::uint8_t* payload, std::size_t n, bool reliable);

  void run();
  void plug_in();   // opens a pty pair and points the link at it
  void pull_out();  // closes it and removes the link
  void boot();      // vsl_init with the next session: a power cycle
  std::uint32_t board_ms(clock::time_point now) const;
  void on_write(const std::uint8_t* bytes, std::size_t n);
  void on_deliver(const std::uint8_t* payload, std::size_t n, bool reliable);
  void reply(std::uint8_t command, std::uint16_t id, std::uint8_t status,
             const std::uint8_t* body, std::size_t n, bool reliable);
  void send_message(std::vector<std::uint8_t> message, bool reliable);
  void flush_reliable();
  void pump_rx(clock::time_point now);
  void pump_tx(clock::time_point now);
  void send_telemetry(clock::time_point now);
  std::vector<std::uint8_t> damage(const std::uint8_t* bytes, std::size_t n, bool to_host);

  virtual_board_config config_;
  std::chrono::nanoseconds byte_time_;
  clock::time_point t0_;

  // Owned by the board thread while it runs (and by the constructor/start before).
  int master_ = -1;
  int keeper_ = -1;  // a slave fd of the board's own: the master reads no EIO while the host reopens
  std::vector<std::uint8_t> ring_storage_;
  vsl_ring ring_{};
  vsl_ctx ctx_{};
  std::uint8_t next_session_;
  std::deque<unit> tx_;                        // paced units waiting for their due time
  clock::time_point tx_free_{};                // when the line has sent all handed to it
  std::deque<std::uint8_t> rx_backlog_;        // host bytes read, still "on the line" (paced)
  clock::time_point rx_front_due_{};            // when the backlog's first byte reaches the board
  std::deque<std::vector<std::uint8_t>> reliable_queue_;  // replies waiting for window room
  clock::time_point next_telemetry_{};
  std::uint32_t samples_ = 0;
  std::mt19937_64 rng_to_host_, rng_from_host_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> plugged_{false};

  mutable std::mutex mutex_;  // guards what follows: requests from other threads, the snapshot
  std::string slave_path_;
  clock::time_point hang_until_{};
  clock::time_point replug_at_{};
  bool unplug_requested_ = false;
  std::chrono::milliseconds unplug_for_{0};
  unsigned telemetry_hz_ = 0;
  virtual_board_stats stats_;
};

}  // namespace vessel::bridges::uart
