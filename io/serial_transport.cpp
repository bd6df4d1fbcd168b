#include "io/serial_transport.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "io/errc.hpp"
#include "io/log.hpp"
#include "wire/errc.hpp"
#include "wire/serial_timing.hpp"

namespace vessel::io {
namespace {

// A raw tty read fails with these when the device is gone: EIO after a hang-up (a pty whose master
// closed, a USB adapter pulled out while a read was parked), ENXIO/ENODEV when the driver is gone.
bool is_unplug(int res) noexcept { return res == -EIO || res == -ENXIO || res == -ENODEV; }

}  // namespace

result<std::unique_ptr<serial_transport>> serial_transport::open(reactor& r, serial_config config,
                                                                 serial_handler& handler,
                                                                 serial_transport_config tconfig) {
  VESSEL_TRY(config.validate());
  if (tconfig.send_queue_bytes < wire::serial_max_frame_bytes) {
    return std::make_error_code(std::errc::invalid_argument);  // a largest frame must fit
  }
  std::unique_ptr<serial_transport> t{
      new serial_transport(r, std::move(config), handler, tconfig)};
  VESSEL_TRY(t->open_port());
  return t;
}

serial_transport::serial_transport(reactor& r, serial_config config, serial_handler& handler,
                                   serial_transport_config tconfig)
    : reactor_(r),
      config_(std::move(config)),
      handler_(handler),
      tconfig_(tconfig),
      decoder_(config_.baud, config_.bits_per_char()),
      tx_(new std::byte[tconfig.send_queue_bytes]) {}

serial_transport::~serial_transport() {
  // Destroying an op with a completion still to come would let the reactor call freed memory.
  if (read_op_.in_flight() || write_op_.in_flight() || hangup_op_.in_flight()) {
    vessel::log::get("io").critical("serial_transport destroyed with operations in flight: {}",
                                    config_.path);
    std::abort();
  }
  if (timer_ != 0) reactor_.cancel_timer(timer_);
}

result<void> serial_transport::open_port() {
  auto port = serial_port::open(config_);
  if (!port) return port.error();
  port_ = std::move(port).value();
  state_ = state::open;
  close_reason_ = {};
  last_rx_ = clock::now();
  ++stats_.opens;
  // POLLHUP and POLLERR are always reported whatever the mask asks; asking for nothing else keeps
  // this op parked until the line hangs up (a parked READ alone may not see a hang-up on every
  // driver, and a write-only link has no READ to see it).
  reactor_.poll_add(hangup_op_, port_.fd(), POLLHUP | POLLERR);
  reactor_.read(read_op_, port_.fd(), rx_buf_, 0);  // offset 0: ignored by ttys
  vessel::log::get("io").info("serial open {}", config_.to_string());
  return outcome::success();
}

result<void> serial_transport::reopen() {
  if (state_ != state::closed || read_op_.in_flight() || write_op_.in_flight() ||
      hangup_op_.in_flight()) {
    return std::make_error_code(std::errc::operation_in_progress);
  }
  fold_decoder_counters();
  decoder_ = wire::serial_decoder(config_.baud, config_.bits_per_char());
  return open_port();
}

result<void> serial_transport::send_frame(std::span<const std::byte> payload) {
  if (state_ != state::open) return errc::transport_closed;
  if (payload.size() > wire::serial_max_payload) return wire::errc::serial_payload_too_large;
  const std::size_t need = wire::serial_frame_size(payload.size());
  const std::size_t cap = tconfig_.send_queue_bytes;
  if (cap - tx_size_ < need) {
    ++stats_.send_queue_full;
    want_writable_ = true;
    return errc::send_queue_full;
  }
  std::array<std::byte, wire::serial_max_frame_bytes> frame;
  const auto encoded = wire::encode_serial_frame(payload, frame);
  if (!encoded) return encoded.error();
  const std::size_t n = encoded.value();
  // Copy into the ring at its tail, in two pieces when it wraps.
  const std::size_t tail = (tx_head_ + tx_size_) % cap;
  const std::size_t first = std::min(n, cap - tail);
  std::memcpy(tx_.get() + tail, frame.data(), first);
  std::memcpy(tx_.get(), frame.data() + first, n - first);
  tx_size_ += n;
  ++stats_.frames_queued;
  stats_.send_queue_high_water = std::max<std::uint64_t>(stats_.send_queue_high_water, tx_size_);
  if (!write_op_.in_flight()) arm_write();
  return outcome::success();
}

void serial_transport::arm_write() {
  // The contiguous bytes at the head; what wrapped goes in the next write.
  const std::size_t len = std::min(tx_size_, tconfig_.send_queue_bytes - tx_head_);
  reactor_.write(write_op_, port_.fd(), {tx_.get() + tx_head_, len}, 0);
}

void serial_transport::on_write(int res, std::uint32_t /*flags*/) {
  if (state_ != state::open) {
    finish_if_idle();
    return;
  }
  if (res < 0) {
    if (res == -EINTR || res == -EAGAIN) {
      arm_write();
    } else {
      begin_close(is_unplug(res) ? make_error_code(errc::device_unplugged) : error_from_errno(res));
    }
    return;
  }
  const auto n = static_cast<std::size_t>(res);
  stats_.bytes_sent += n;
  tx_head_ = (tx_head_ + n) % tconfig_.send_queue_bytes;
  tx_size_ -= n;
  if (tx_size_ > 0) arm_write();  // the rest of a partial write, or what was queued meanwhile
  if (want_writable_ && tconfig_.send_queue_bytes - tx_size_ >= wire::serial_max_frame_bytes) {
    want_writable_ = false;
    handler_.on_writable();
  }
}

void serial_transport::on_read(int res, std::uint32_t /*flags*/) {
  if (state_ != state::open) {
    finish_if_idle();
    return;
  }
  if (res > 0) {
    const auto now = clock::now();
    stats_.bytes_received += static_cast<std::size_t>(res);
    last_rx_ = now;
    deliver({rx_buf_.data(), static_cast<std::size_t>(res)}, now);
    if (state_ != state::open) {  // the handler closed the link
      finish_if_idle();
      return;
    }
    arm_timer();
    reactor_.read(read_op_, port_.fd(), rx_buf_, 0);
  } else if (res == 0 || is_unplug(res)) {
    // With VMIN=1 a raw tty returns 0 bytes only after a hang-up.
    begin_close(errc::device_unplugged);
  } else if (res == -EINTR || res == -EAGAIN) {
    reactor_.read(read_op_, port_.fd(), rx_buf_, 0);
  } else if (res == -ECANCELED) {
    begin_close(errc::transport_closed);  // nobody asked here: the reactor is stopping
  } else {
    begin_close(error_from_errno(res));
  }
}

void serial_transport::on_hangup(int res, std::uint32_t /*flags*/) {
  if (state_ != state::open) {
    finish_if_idle();
    return;
  }
  if (res == -ECANCELED) {
    begin_close(errc::transport_closed);
  } else if (res < 0) {
    begin_close(error_from_errno(res));
  } else {
    // POLLHUP, POLLERR, or POLLNVAL (the fd went bad under us): the line is gone either way.
    begin_close(errc::device_unplugged);
  }
}

void serial_transport::deliver(std::span<const std::byte> bytes, clock::time_point now) {
  while (!bytes.empty() && state_ == state::open) {
    const std::size_t took = decoder_.feed(bytes, now);
    bytes = bytes.subspan(took);
    drain();
    // Cannot happen: the ring holds four largest frames, and draining always frees the bytes of a
    // decided candidate. Guarded so that a decoder bug costs bytes, not a spinning reactor.
    if (took == 0 && decoder_.free_space() == 0) break;
  }
}

void serial_transport::drain() {
  while (state_ == state::open) {
    const auto payload = decoder_.next();
    if (!payload) break;
    ++stats_.frames_received;
    handler_.on_serial_frame(*payload);
  }
}

void serial_transport::arm_timer() {
  if (timer_ != 0 || decoder_.buffered() == 0) return;
  // One timer per silence, not one per read: it fires at the earliest moment the partial frame can
  // be stale and re-arms itself if bytes kept coming. The decoder calls a candidate stale only when
  // the silence is strictly longer than its timeout, hence the extra microsecond.
  const auto deadline = last_rx_ + decoder_.read_timeout() + std::chrono::microseconds{1};
  const auto delay = std::max(clock::duration::zero(), deadline - clock::now());
  timer_ = reactor_.add_timer(delay, [this] { on_timer(); });
}

void serial_transport::on_timer() {
  timer_ = 0;
  if (state_ != state::open) return;
  decoder_.poll(clock::now());
  drain();
  if (state_ == state::open) arm_timer();
}

void serial_transport::close() noexcept {
  if (state_ != state::open) return;
  begin_close(errc::transport_closed);
}

void serial_transport::begin_close(std::error_code why) noexcept {
  state_ = state::closing;
  close_reason_ = why;
  if (why == errc::device_unplugged) {
    ++stats_.unplugs;
    vessel::log::get("io").warn("serial device unplugged: {}", config_.path);
  }
  if (timer_ != 0) {
    reactor_.cancel_timer(timer_);
    timer_ = 0;
  }
  want_writable_ = false;
  reactor_.cancel(read_op_);
  reactor_.cancel(write_op_);
  reactor_.cancel(hangup_op_);
  finish_if_idle();
}

void serial_transport::finish_if_idle() {
  if (state_ != state::closing) return;
  if (read_op_.in_flight() || write_op_.in_flight() || hangup_op_.in_flight()) return;
  port_.close();
  tx_head_ = 0;
  tx_size_ = 0;
  state_ = state::closed;
  // Last: the handler may reopen() or destroy this transport.
  handler_.on_closed(close_reason_);
}

void serial_transport::fold_decoder_counters() noexcept {
  const auto& c = decoder_.counters();
  decoder_base_.frames_ok += c.frames_ok;
  decoder_base_.crc_errors += c.crc_errors;
  decoder_base_.bad_length += c.bad_length;
  decoder_base_.truncated += c.truncated;
  decoder_base_.resync_bytes += c.resync_bytes;
  decoder_base_.bytes_in += c.bytes_in;
}

serial_stats serial_transport::stats() const noexcept {
  serial_stats s = stats_;
  const auto& c = decoder_.counters();
  s.crc_errors = decoder_base_.crc_errors + c.crc_errors;
  s.bad_length = decoder_base_.bad_length + c.bad_length;
  s.truncated = decoder_base_.truncated + c.truncated;
  s.resync_bytes = decoder_base_.resync_bytes + c.resync_bytes;
  return s;
}

}  // namespace vessel::io
