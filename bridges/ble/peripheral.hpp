#pragma once
// The engine behind one BLE peripheral: it connects (with a deadline), waits for ServicesResolved,
// pairs when a characteristic demands it, and keeps the link: on link loss it reconnects with
// backoff, re-subscribes every notification it had, re-reads the usable payload size (ATT MTU - 3)
// and reports the outage. Requests made while the link is down wait for it (up to their deadline);
// a request in flight when the link drops is retried once and otherwise failed with a typed error
// naming the device and characteristic. Reactor thread only; the device actor is a shell on top.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bridges/ble/bluez_client.hpp"
#include "io/backoff.hpp"

namespace vessel::bridges::ble {

/// How a peripheral is reached and kept. Every key with its default.
struct peripheral_config {
  std::string address;  ///< C0:FF:EE:00:00:01; empty: the device is found by `name`
  std::string name;     ///< its advertised name (Alias), when no address is given
  std::vector<std::string> services;  ///< it must advertise one of these service UUIDs (if any)
  std::chrono::milliseconds connect_timeout{10'000};    ///< Connect + ServicesResolved
  std::chrono::milliseconds discovery_timeout{10'000};  ///< to find a device BlueZ does not know
  std::chrono::milliseconds request_timeout{15'000};  ///< a request's whole life, outages included
  io::reconnect_policy reconnect{std::chrono::milliseconds{100}, std::chrono::seconds{5}, 2.0, 0,
                                 true};
  unsigned retries_after_link_loss = 1;  ///< resends of a request whose link dropped under it
  bool pair_when_required = true;        ///< on NotAuthorized: Pair, then retry once
};

enum class link_state : std::uint8_t { idle, discovering, connecting, ready, outage, closed };
const char* to_string(link_state s) noexcept;

/// What a peripheral has done since it was created.
struct peripheral_counters {
  std::uint64_t connects = 0;       ///< links that reached ServicesResolved
  std::uint64_t disconnects = 0;    ///< links lost or closed
  std::uint64_t reconnects = 0;     ///< connects after the first
  std::uint64_t notifications = 0;  ///< notifications delivered to subscribers
  std::uint64_t bytes_in = 0;       ///< bytes read or notified
  std::uint64_t bytes_out = 0;      ///< bytes written
  std::uint64_t errors = 0;         ///< requests failed, connect attempts failed
  std::uint64_t retries = 0;        ///< requests resent after a link loss
};

/// An outage as reported to subscribers: begin (restored == false) and end.
struct outage_event {
  bool restored = false;
  std::chrono::steady_clock::duration duration{};  ///< on restore: how long the link was down
  std::string reason;                              ///< why it went down
};

class peripheral {
 public:
  using done_fn = std::function<void(ble_result<void>)>;
  using read_fn = std::function<void(ble_result<std::vector<std::uint8_t>>)>;
  using notify_fn = std::function<void(std::span<const std::uint8_t>)>;
  using outage_fn = std::function<void(const outage_event&)>;

  peripheral(bluez_client& client, peripheral_config config);
  peripheral(const peripheral&) = delete;
  peripheral& operator=(const peripheral&) = delete;
  ~peripheral();

  /// Finds the device (BlueZ's known devices first, then discovery), connects and resolves.
  /// `ready` runs once: on the first ready link, or with the error that stopped the first attempt
  /// (later losses are handled by reconnecting).
  void start(done_fn ready);
  /// Disconnects and fails every pending request with errc::closed.
  void close();

  void read(std::string uuid, read_fn done);
  void write(std::string uuid, std::vector<std::uint8_t> data, bool with_response, done_fn done);
  /// Subscribes to notifications of `uuid`; kept across reconnects until unsubscribe().
  void subscribe(std::string uuid, notify_fn on_value, done_fn done);
  void unsubscribe(std::string uuid, done_fn done);
  void on_outage(outage_fn fn) { outage_listeners_.push_back(std::move(fn)); }

  /// Which devices are this peripheral: address, or name, and services.
  scan_filter wanted() const { return scan_filter{config_.name, config_.address, config_.services}; }
  /// How errors name the device: its address once known, else the configured name.
  const std::string& label() const noexcept { return label_; }

  link_state state() const noexcept { return state_; }
  /// Bytes one write or notification carries on the current link: ATT MTU - 3.
  std::size_t payload_size() const noexcept { return payload_size_; }
  const peripheral_counters& counters() const noexcept { return counters_; }
  const std::string& device_path() const noexcept { return device_path_; }
  const peripheral_config& config() const noexcept { return config_; }

 private:
  enum class op : std::uint8_t { read, write, write_command, subscribe, unsubscribe };
  struct request {
    op kind;
    std::string uuid;
    std::vector<std::uint8_t> data;
    read_fn on_read;
    done_fn on_done;
    std::chrono::steady_clock::time_point deadline;
    unsigned retries_left;
    bool paired_once = false;
    std::uint64_t id = 0;
  };

  void locate();
  void found(const device_info& d);
  void begin_connect();
  void on_device(const device_info& d);
  void link_ready();
  void link_lost(std::string reason);
  void schedule_reconnect(std::string reason);
  void fail_start(ble_error e);
  void enqueue(request r);
  void pump_queue();
  void issue(std::shared_ptr<request> r);
  void finish(const std::shared_ptr<request>& r, ble_result<std::vector<std::uint8_t>> result);
  void expire_requests();
  void resubscribe();
  ble_error error(errc e, std::string uuid = {}, std::string detail = {}) const;

  bluez_client& client_;
  peripheral_config config_;
  io::backoff backoff_;
  link_state state_ = link_state::idle;
  std::string device_path_;
  std::string label_;
  std::size_t payload_size_ = 20;
  std::uint64_t link_generation_ = 0;  // bumps on every link up/down: stale callbacks check it
  done_fn on_first_ready_;
  std::chrono::steady_clock::time_point outage_since_{};
  std::string outage_reason_;
  bool had_link_ = false;
  std::deque<std::shared_ptr<request>> queue_;
  std::map<std::uint64_t, std::shared_ptr<request>> in_flight_;
  std::uint64_t next_request_ = 1;
  std::map<std::string, notify_fn> subscriptions_;  // uuid -> handler
  std::map<std::string, std::string> char_paths_;   // uuid -> path on the current link
  std::vector<outage_fn> outage_listeners_;
  std::vector<std::uint64_t> listener_ids_;
  io::timer_id connect_timer_{};
  bool connect_timer_armed_ = false;
  io::timer_id expiry_timer_{};
  bool expiry_timer_armed_ = false;
  peripheral_counters counters_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace vessel::bridges::ble
