#pragma once
// A BlueZ client on sdbus-c++ 1.2, driven by an io::reactor (bus_pump). It mirrors bluetoothd's
// object tree (GetManagedObjects once, then InterfacesAdded/Removed and PropertiesChanged), so
// device and characteristic lookups are local, and issues every operation as an async call whose
// callback runs on the reactor thread. All methods: reactor thread only (after open()).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <sdbus-c++/sdbus-c++.h>

#include "bridges/ble/bus_pump.hpp"
#include "bridges/ble/errc.hpp"
#include "io/reactor.hpp"

namespace vessel::bridges::ble {

/// What BlueZ says about a device (org.bluez.Device1).
struct device_info {
  std::string path;     ///< /org/bluez/hci0/dev_C0_FF_EE_00_00_01
  std::string address;  ///< C0:FF:EE:00:00:01
  std::string name;     ///< Alias (BlueZ falls back to the address when the device has no name)
  std::vector<std::string> uuids;    ///< advertised or resolved service UUIDs, lower case
  std::optional<std::int16_t> rssi;  ///< only for devices seen advertising in this session
  bool paired = false;
  bool connected = false;
  bool services_resolved = false;
};

/// Which devices a scan reports; empty fields match everything.
struct scan_filter {
  std::string name;                        ///< exact Alias/Name
  std::string address;                     ///< case-insensitive
  std::vector<std::string> service_uuids;  ///< any of them (case-insensitive, 128-bit form)
  bool matches(const device_info& d) const;
};

/// One GATT characteristic of a connected device.
struct characteristic_info {
  std::string path;
  std::string uuid;
  std::vector<std::string>
      flags;  ///< read, write, write-without-response, notify, encrypt-read, ...
  bool notifying = false;
  std::uint16_t mtu = 23;  ///< ATT MTU of the link (BlueZ >= 5.62; 23 when BlueZ does not say)
};

/// "0x2a19"/"2A19"/"00002a19-..." -> "00002a19-0000-1000-8000-00805f9b34fb".
std::string normalize_uuid(std::string_view uuid);

class bluez_client {
 public:
  template <class T>
  using callback = std::function<void(ble_result<T>)>;
  using device_listener = std::function<void(const device_info&)>;
  using value_listener =
      std::function<void(const std::string& char_path, std::span<const std::uint8_t>)>;
  using removed_listener = std::function<void(const std::string& path)>;

  /// Connects to the system bus (DBUS_SYSTEM_BUS_ADDRESS), installs the signal matches and loads
  /// the object tree. Set-up, like opening a socket: these calls are synchronous, so call it
  /// before the reactor serves traffic (or accept one round trip of latency on it).
  static ble_result<std::unique_ptr<bluez_client>> open(io::reactor& reactor,
                                                        std::string adapter = {});

  ~bluez_client();

  /// The adapter in use ("/org/bluez/hci0").
  const std::string& adapter_path() const noexcept { return adapter_; }
  /// Every adapter BlueZ has.
  std::vector<std::string> adapters() const;

  /// Devices known now (bonded, cached or discovered), filtered.
  std::vector<device_info> devices(const scan_filter& filter = {}) const;
  std::optional<device_info> device(std::string_view path) const;
  /// The path of the device with this address, if BlueZ knows it.
  std::optional<std::string> device_path(std::string_view address) const;
  /// The characteristic with this UUID on a device whose services are resolved.
  std::optional<characteristic_info> characteristic(std::string_view device_path,
                                                    std::string_view uuid) const;
  std::optional<characteristic_info> characteristic_at(std::string_view char_path) const;

  void start_discovery(const scan_filter& filter, callback<void> done);
  void stop_discovery(callback<void> done);
  void connect(const std::string& device_path, std::chrono::milliseconds timeout,
               callback<void> done);
  void disconnect(const std::string& device_path, callback<void> done);
  void pair(const std::string& device_path, callback<void> done);
  void read(const std::string& char_path, callback<std::vector<std::uint8_t>> done);
  void write(const std::string& char_path, std::span<const std::uint8_t> data, bool with_response,
             callback<void> done);
  void start_notify(const std::string& char_path, callback<void> done);
  void stop_notify(const std::string& char_path, callback<void> done);

  /// Called for every Device1 that appears or changes (discovery results, Connected,
  /// ServicesResolved). Returns an id for remove_listener().
  std::uint64_t on_device(device_listener fn);
  /// Called for each notification (Value changes not caused by our own ReadValue).
  std::uint64_t on_value(value_listener fn);
  /// Called when an object (device, service, characteristic) goes away.
  std::uint64_t on_removed(removed_listener fn);
  void remove_listener(std::uint64_t id);

  /// Characteristics of a device whose services are resolved.
  std::vector<characteristic_info> characteristics(std::string_view device_path) const;

  bus_pump& pump() noexcept { return pump_; }
  io::reactor& reactor() noexcept { return reactor_; }

 private:
  using properties = std::map<std::string, sdbus::Variant>;
  using interfaces = std::map<std::string, properties>;

  bluez_client(io::reactor& reactor, std::unique_ptr<sdbus::IConnection> bus);
  void on_interfaces_added(sdbus::Message& msg);
  void on_interfaces_removed(sdbus::Message& msg);
  void on_properties_changed(sdbus::Message& msg);
  void notify_device(const std::string& path);
  device_info to_device(const std::string& path, const properties& p) const;
  ble_error error_for(const sdbus::Error& e, const std::string& path) const;
  sdbus::IProxy& proxy(const std::string& path);
  template <class... Args>
  void call(const std::string& path, const char* iface, const char* method, callback<void> done,
            std::chrono::microseconds timeout, Args&&... args);

  io::reactor& reactor_;
  std::unique_ptr<sdbus::IConnection> bus_;
  bus_pump pump_;
  std::string adapter_;
  std::map<std::string, interfaces> objects_;
  std::map<std::string, std::unique_ptr<sdbus::IProxy>> proxies_;
  std::map<std::string, int> reads_in_flight_;  // per characteristic path
  std::vector<sdbus::Slot> matches_;
  std::uint64_t next_listener_ = 1;
  std::map<std::uint64_t, device_listener> device_listeners_;
  std::map<std::uint64_t, value_listener> value_listeners_;
  std::map<std::uint64_t, removed_listener> removed_listeners_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace vessel::bridges::ble
