#include "bridges/uart/virtual_board/virtual_board.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "bridges/uart/command.hpp"
#include "wire/serial_timing.hpp"

namespace vessel::bridges::uart {
namespace {

constexpr std::size_t ring_bytes = 4096;  // 16 largest frames: a host burst while the board waits
constexpr std::size_t max_reliable_queue = 256;
constexpr std::size_t rx_backlog_cap = 8192;  // host bytes read but not yet arrived (paced)

std::uint32_t get_u32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
void put_u32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

bool chance(std::mt19937_64& rng, double p) {
  if (p <= 0) return false;
  return static_cast<double>(rng() >> 11) * 0x1.0p-53 < p;
}

}  // namespace

virtual_board::virtual_board(virtual_board_config config)
    : config_(std::move(config)),
      byte_time_(wire::serial_byte_time(config_.baud, config_.bits_per_char)),
      t0_(clock::now()),
      ring_storage_(ring_bytes),
      next_session_(config_.session),
      rng_to_host_(config_.faults.seed),
      rng_from_host_(config_.faults.seed ^ 0x9E3779B97F4A7C15ull) {
  if (config_.baud == 0) throw std::invalid_argument("virtual_board: baud must be > 0");
  if (config_.time_scale <= 0) throw std::invalid_argument("virtual_board: time_scale must be > 0");
  plug_in();
}

virtual_board::~virtual_board() {
  stop();
  pull_out();
}

void virtual_board::plug_in() {
  char name[256] = {};
  if (::openpty(&master_, &keeper_, name, nullptr, nullptr) != 0) {
    throw std::runtime_error(std::string("virtual_board: openpty: ") + std::strerror(errno));
  }
  ::fcntl(master_, F_SETFL, ::fcntl(master_, F_GETFL) | O_NONBLOCK);
  ::fcntl(master_, F_SETFD, FD_CLOEXEC);
  ::fcntl(keeper_, F_SETFD, FD_CLOEXEC);
  // Raw until the host configures it: no echo of what the host writes before its own termios.
  termios t{};
  if (::tcgetattr(keeper_, &t) == 0) {
    ::cfmakeraw(&t);
    ::tcsetattr(keeper_, TCSANOW, &t);
  }
  slave_path_ = name;  // mutex_ is held by the board thread, or there is no thread yet
  if (!config_.link.empty()) {
    // Replace the link atomically: a host polling for it never sees a half-made one.
    auto tmp = config_.link;
    tmp += ".new";
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    std::filesystem::create_symlink(name, tmp, ec);
    if (!ec) std::filesystem::rename(tmp, config_.link, ec);
    if (ec) throw std::runtime_error("virtual_board: cannot link " + config_.link.string());
  }
  tx_.clear();
  rx_backlog_.clear();
  tx_free_ = clock::now();
  plugged_.store(true);
}

void virtual_board::pull_out() {
  if (!config_.link.empty()) {
    std::error_code ec;
    std::filesystem::remove(config_.link, ec);  // the device node goes away: reopens get ENOENT
  }
  if (master_ >= 0) ::close(master_);
  if (keeper_ >= 0) ::close(keeper_);
  master_ = keeper_ = -1;
  tx_.clear();
  rx_backlog_.clear();
  plugged_.store(false);
}

std::uint32_t virtual_board::board_ms(clock::time_point now) const {
  const double ms = std::chrono::duration<double, std::milli>(now - t0_).count() * config_.time_scale;
  return static_cast<std::uint32_t>(static_cast<std::uint64_t>(ms));
}

void virtual_board::boot() {
  vsl_ring_init(&ring_, ring_storage_.data(), static_cast<std::uint32_t>(ring_storage_.size()));
  reliable_queue_.clear();
  vsl_config cfg{};
  cfg.baud = config_.baud;
  cfg.bits_per_char = config_.bits_per_char;
  cfg.rx = &ring_;
  cfg.write = &virtual_board::write_cb;
  cfg.deliver = &virtual_board::deliver_cb;
  cfg.user = this;
  cfg.session = next_session_++;
  ++stats_.boots;
  if (vsl_init(&ctx_, &cfg, board_ms(clock::now())) != VSL_OK) {
    throw std::runtime_error("virtual_board: vsl_init failed");
  }
}

void virtual_board::start() {
  std::lock_guard lock{mutex_};
  boot();
  thread_ = std::thread([this] { run(); });
}

void virtual_board::stop() {
  stopping_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::string virtual_board::slave_path() const {
  std::lock_guard lock{mutex_};
  return slave_path_;
}

void virtual_board::unplug(std::chrono::milliseconds down_for) {
  std::lock_guard lock{mutex_};
  unplug_requested_ = true;
  unplug_for_ = down_for;
}

void virtual_board::hang(std::chrono::milliseconds duration) {
  std::lock_guard lock{mutex_};
  hang_until_ = clock::now() + duration;
  ++stats_.hangs;
}

void virtual_board::set_faults(double bit_flip_rate, double drop_rate, double noise_rate) {
  std::lock_guard lock{mutex_};
  config_.faults.bit_flip_rate = bit_flip_rate;
  config_.faults.drop_rate = drop_rate;
  config_.faults.noise_rate = noise_rate;
}

void virtual_board::set_telemetry(unsigned hz) {
  std::lock_guard lock{mutex_};
  telemetry_hz_ = hz;
  next_telemetry_ = clock::now();
}

virtual_board_stats virtual_board::stats() const {
  std::lock_guard lock{mutex_};
  virtual_board_stats s = stats_;
  s.link = ctx_.stats;
  s.parser = ctx_.parser.counters;
  return s;
}

// -- The board library's callbacks (board thread, mutex_ held) ---------------------------------

void virtual_board::write_cb(void* user, const std::uint8_t* bytes, std::size_t n) {
  static_cast<virtual_board*>(user)->on_write(bytes, n);
}

void virtual_board::deliver_cb(void* user, const std::uint8_t* payload, std::size_t n, bool reliable) {
  static_cast<virtual_board*>(user)->on_deliver(payload, n, reliable);
}

std::vector<std::uint8_t> virtual_board::damage(const std::uint8_t* bytes, std::size_t n, bool to_host) {
  fault_counters& c = to_host ? stats_.to_host : stats_.from_host;
  auto& rng = to_host ? rng_to_host_ : rng_from_host_;
  const fault_plan& f = config_.faults;
  const bool active = to_host || f.from_host_too;
  std::vector<std::uint8_t> out;
  out.reserve(n + 4);
  bool damaged = false;
  c.bytes += n;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint8_t b = bytes[i];
    if (active && chance(rng, f.noise_rate)) {
      out.push_back(static_cast<std::uint8_t>(rng()));
      ++c.noise_bytes;
      damaged = true;
    }
    if (active && chance(rng, f.drop_rate)) {
      ++c.bytes_dropped;
      damaged = true;
      if (i == 0 && to_host) ++c.start_bytes_hit;
      continue;
    }
    if (active && chance(rng, f.bit_flip_rate)) {
      b = static_cast<std::uint8_t>(b ^ (1u << (rng() % 8)));
      ++c.bits_flipped;
      damaged = true;
      if (i == 0 && to_host) ++c.start_bytes_hit;
    }
    out.push_back(b);
  }
  if (to_host) {
    ++c.frames;
    if (damaged) ++c.frames_damaged;
  }
  return out;
}

void virtual_board::on_write(const std::uint8_t* bytes, std::size_t n) {
  if (master_ < 0) return;  // unplugged: the UART drives a dead line
  auto out = damage(bytes, n, true);
  const auto now = clock::now();
  const auto start = config_.paced ? std::max(tx_free_, now) : now;
  const auto due = config_.paced ? start + byte_time_ * static_cast<long>(n) : now;
  tx_free_ = due;
  tx_.push_back(unit{std::move(out), due});
}

void virtual_board::send_message(std::vector<std::uint8_t> message, bool reliable) {
  if (!reliable) {
    (void)vsl_send_unreliable(&ctx_, message.data(), message.size());
    return;
  }
  if (reliable_queue_.size() < max_reliable_queue) reliable_queue_.push_back(std::move(message));
  flush_reliable();
}

void virtual_board::flush_reliable() {
  // Firmware holds a reply until the window has room (vsl_send never drops: it refuses).
  while (!reliable_queue_.empty() && vsl_send_room(&ctx_) > 0) {
    const auto& m = reliable_queue_.front();
    if (vsl_send(&ctx_, m.data(), m.size()) != VSL_OK) break;
    reliable_queue_.pop_front();
  }
}

void virtual_board::reply(std::uint8_t command, std::uint16_t id, std::uint8_t status,
                          const std::uint8_t* body, std::size_t n, bool reliable) {
  if (id == 0) return;  // fire-and-forget
  std::vector<std::uint8_t> m(reply_header_bytes + n);
  const auto len = encode_reply(command, id, static_cast<reply_status>(status),
                                {reinterpret_cast<const std::byte*>(body), n},
                                {reinterpret_cast<std::byte*>(m.data()), m.size()});
  if (!len) return;
  ++stats_.replies;
  send_message(std::move(m), reliable);
}

void virtual_board::on_deliver(const std::uint8_t* payload, std::size_t n, bool reliable) {
  const auto msg = parse_message({reinterpret_cast<const std::byte*>(payload), n});
  // From a host, request id 0 (which parses as an event) is a fire-and-forget command.
  if (!msg || msg->what == board_message::kind::reply) {
    ++stats_.bad_requests;
    return;
  }
  ++stats_.requests;
  const auto* body = reinterpret_cast<const std::uint8_t*>(msg->body.data());
  const std::size_t len = msg->body.size();
  const auto ok = static_cast<std::uint8_t>(reply_status::ok);
  const auto bad = static_cast<std::uint8_t>(reply_status::bad_request);
  std::uint8_t out[8];
  switch (msg->command) {
    case board_command::echo:
      reply(msg->command, msg->request_id, ok, body, len, reliable);
      return;
    case board_command::add:
      if (len != 8) break;
      put_u32(out, get_u32(body) + get_u32(body + 4));  // int32 wrap-around, in unsigned
      reply(msg->command, msg->request_id, ok, out, 4, reliable);
      return;
    case board_command::read_sensor: {
      if (len != 1 || body[0] > 1) break;
      // Temperature: 21.0 C with a slow +-0.5 C swing over the board's clock; or the sample count.
      const double t = board_ms(clock::now()) / 10000.0;
      const auto milli = static_cast<std::int32_t>(21000 + std::lround(500 * std::sin(t)));
      put_u32(out, body[0] == 0 ? static_cast<std::uint32_t>(milli) : samples_++);
      reply(msg->command, msg->request_id, ok, out, 4, reliable);
      return;
    }
    case board_command::telemetry:
      if (len != 2) break;
      telemetry_hz_ = static_cast<unsigned>(body[0]) | (static_cast<unsigned>(body[1]) << 8);
      next_telemetry_ = clock::now();
      reply(msg->command, msg->request_id, ok, nullptr, 0, reliable);
      return;
    case board_command::fault: {
      if (len == 5 && body[0] == fault_kind::hang) {
        reply(msg->command, msg->request_id, ok, nullptr, 0, reliable);
        hang_until_ = clock::now() + std::chrono::milliseconds{get_u32(body + 1)};
        ++stats_.hangs;
        return;
      }
      if (len == 5 && body[0] == fault_kind::unplug) {
        reply(msg->command, msg->request_id, ok, nullptr, 0, reliable);
        unplug_requested_ = true;  // after this turn, once the reply has left
        unplug_for_ = std::chrono::milliseconds{get_u32(body + 1)};
        return;
      }
      if (len == 13 && body[0] == fault_kind::rates) {
        config_.faults.bit_flip_rate = get_u32(body + 1) / 1e6;
        config_.faults.drop_rate = get_u32(body + 5) / 1e6;
        config_.faults.noise_rate = get_u32(body + 9) / 1e6;
        reply(msg->command, msg->request_id, ok, nullptr, 0, reliable);
        return;
      }
      break;
    }
    default:
      reply(msg->command, msg->request_id, static_cast<std::uint8_t>(reply_status::unknown_command),
            nullptr, 0, reliable);
      return;
  }
  ++stats_.bad_requests;
  reply(msg->command, msg->request_id, bad, nullptr, 0, reliable);
}

// -- The board thread ------------------------------------------------------------------------

void virtual_board::pump_rx(clock::time_point now) {
  // Read what the host wrote into a backlog that models the line: its bytes reach the board one
  // byte time apart, the first a byte time after it was read (paced); unpaced, at once.
  if (rx_backlog_.size() < rx_backlog_cap) {
    std::uint8_t buf[512];
    const auto want = std::min(sizeof buf, rx_backlog_cap - rx_backlog_.size());
    const auto r = ::read(master_, buf, want);
    if (r > 0) {  // EAGAIN: nothing; EIO: no slave open (the host is between opens)
      if (rx_backlog_.empty()) rx_front_due_ = now + byte_time_;
      const auto in = damage(buf, static_cast<std::size_t>(r), false);
      rx_backlog_.insert(rx_backlog_.end(), in.begin(), in.end());
    }
  }
  std::size_t ready = rx_backlog_.size();
  if (config_.paced) {
    if (rx_backlog_.empty() || now < rx_front_due_) return;
    ready = std::min<std::size_t>(ready, static_cast<std::size_t>((now - rx_front_due_) / byte_time_) + 1);
  }
  ready = std::min<std::size_t>(ready, vsl_ring_free(&ring_));
  std::uint8_t chunk[512];
  std::size_t moved = 0;
  while (moved < ready) {
    const std::size_t n = std::min(sizeof chunk, ready - moved);
    std::copy_n(rx_backlog_.begin() + static_cast<long>(moved), n, chunk);
    vsl_rx_push_chunk(&ring_, chunk, n);
    moved += n;
  }
  rx_backlog_.erase(rx_backlog_.begin(), rx_backlog_.begin() + static_cast<long>(moved));
  rx_front_due_ += byte_time_ * static_cast<long>(moved);
}

void virtual_board::pump_tx(clock::time_point now) {
  while (!tx_.empty() && tx_.front().due <= now) {
    auto& u = tx_.front();
    std::size_t off = 0;
    while (off < u.bytes.size()) {
      const auto w = ::write(master_, u.bytes.data() + off, u.bytes.size() - off);
      if (w < 0 && errno == EAGAIN) {
        // The pty buffer is full (the host is not reading): keep the rest for the next turn.
        u.bytes.erase(u.bytes.begin(), u.bytes.begin() + static_cast<long>(off));
        return;
      }
      if (w <= 0) break;
      off += static_cast<std::size_t>(w);
    }
    tx_.pop_front();
  }
}

void virtual_board::send_telemetry(clock::time_point now) {
  if (telemetry_hz_ == 0 || now < next_telemetry_) return;
  next_telemetry_ += std::chrono::nanoseconds{1'000'000'000 / telemetry_hz_};
  if (next_telemetry_ < now) next_telemetry_ = now;  // fell behind: do not burst to catch up
  std::uint8_t body[8];
  put_u32(body, samples_++);
  const double t = board_ms(now) / 10000.0;
  put_u32(body + 4, static_cast<std::uint32_t>(21000 + std::lround(500 * std::sin(t))));
  std::vector<std::uint8_t> m(command_header_bytes + sizeof body);
  const auto len = encode_event(telemetry_topic, {reinterpret_cast<const std::byte*>(body), sizeof body},
                                {reinterpret_cast<std::byte*>(m.data()), m.size()});
  if (!len) return;
  ++stats_.events;
  send_message(std::move(m), false);  // telemetry: the latest sample matters, not each one
}

void virtual_board::run() {
  while (!stopping_.load()) {
    auto now = clock::now();
    std::unique_lock lock{mutex_};
    if (unplug_requested_ && tx_.empty()) {
      unplug_requested_ = false;
      ++stats_.unplugs;
      pull_out();
      replug_at_ = now + unplug_for_;
    }
    if (!plugged_.load()) {
      if (now >= replug_at_) {
        plug_in();
        boot();  // a replugged board powers up again
      } else {
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds{1});
        continue;
      }
    }
    if (now < hang_until_) {
      lock.unlock();
      std::this_thread::sleep_for(std::min<clock::duration>(hang_until_ - now, std::chrono::milliseconds{2}));
      continue;
    }
    pump_rx(now);
    vsl_poll(&ctx_, board_ms(now));
    flush_reliable();
    send_telemetry(now);
    pump_tx(clock::now());
    // Sleep until the next unit is due, a byte arrives, or 1 ms (the board's poll period).
    auto wake = now + std::chrono::milliseconds{1};
    if (!tx_.empty()) wake = std::min(wake, tx_.front().due);
    if (!rx_backlog_.empty()) wake = std::min(wake, rx_front_due_);
    const int fd = master_;
    const bool more_rx = vsl_ring_count(&ring_) > 0 || (!config_.paced && !rx_backlog_.empty());
    // A full backlog is read no further: waiting for POLLIN would then spin.
    const bool rx_busy = rx_backlog_.size() >= rx_backlog_cap;
    lock.unlock();
    if (more_rx) continue;
    now = clock::now();
    if (wake <= now) continue;
    if (rx_busy) {
      std::this_thread::sleep_until(wake);
      continue;
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wake - now).count();
    const timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    pollfd p{fd, POLLIN, 0};
    ::ppoll(&p, 1, &ts, nullptr);
  }
}

}  // namespace vessel::bridges::uart
