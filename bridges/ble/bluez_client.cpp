#include "bridges/ble/bluez_client.hpp"

#include <algorithm>
#include <cctype>

namespace vessel::bridges::ble {
namespace {

constexpr const char* bluez = "org.bluez";
constexpr const char* adapter_iface = "org.bluez.Adapter1";
constexpr const char* device_iface = "org.bluez.Device1";
constexpr const char* char_iface = "org.bluez.GattCharacteristic1";
constexpr const char* om_iface = "org.freedesktop.DBus.ObjectManager";

std::string lower(std::string_view s) {
  std::string out{s};
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

template <class T>
T prop_or(const std::map<std::string, sdbus::Variant>& p, const char* key, T fallback) {
  const auto it = p.find(key);
  if (it == p.end() || !it->second.containsValueOfType<T>()) return fallback;
  return it->second.get<T>();
}

bool is_child(std::string_view parent, std::string_view path) {
  return path.size() > parent.size() && path.substr(0, parent.size()) == parent &&
         path[parent.size()] == '/';
}

}  // namespace

std::string normalize_uuid(std::string_view uuid) {
  std::string u = lower(uuid);
  if (u.starts_with("0x")) u = u.substr(2);
  if (u.size() == 4) return "0000" + u + "-0000-1000-8000-00805f9b34fb";
  if (u.size() == 8) return u + "-0000-1000-8000-00805f9b34fb";
  return u;
}

bool scan_filter::matches(const device_info& d) const {
  if (!name.empty() && d.name != name) return false;
  if (!address.empty() && lower(d.address) != lower(address)) return false;
  if (service_uuids.empty()) return true;
  for (const auto& want : service_uuids)
    if (std::find(d.uuids.begin(), d.uuids.end(), normalize_uuid(want)) != d.uuids.end())
      return true;
  return false;
}

bluez_client::bluez_client(io::reactor& reactor, std::unique_ptr<sdbus::IConnection> bus)
    : reactor_{reactor}, bus_{std::move(bus)}, pump_{reactor, *bus_} {}

bluez_client::~bluez_client() {
  *alive_ = false;
  pump_.shutdown();
  matches_.clear();
  proxies_.clear();  // cancels pending calls: their callbacks never run after this
}

ble_result<std::unique_ptr<bluez_client>> bluez_client::open(io::reactor& reactor,
                                                             std::string adapter) {
  std::unique_ptr<bluez_client> c;
  try {
    c.reset(new bluez_client(reactor, sdbus::createSystemBusConnection()));
    auto* self = c.get();
    // Matches first, then the snapshot: an object added in between is seen twice, never missed.
    const std::string sender = "type='signal',sender='org.bluez',";
    self->matches_.push_back(self->bus_->addMatch(
        sender + "interface='org.freedesktop.DBus.ObjectManager',member='InterfacesAdded'",
        [self](sdbus::Message& m) { self->on_interfaces_added(m); }));
    self->matches_.push_back(self->bus_->addMatch(
        sender + "interface='org.freedesktop.DBus.ObjectManager',member='InterfacesRemoved'",
        [self](sdbus::Message& m) { self->on_interfaces_removed(m); }));
    self->matches_.push_back(self->bus_->addMatch(
        sender + "interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'",
        [self](sdbus::Message& m) { self->on_properties_changed(m); }));
    std::map<sdbus::ObjectPath, interfaces> tree;
    self->proxy("/")
        .callMethod("GetManagedObjects")
        .onInterface(om_iface)
        .withTimeout(std::chrono::seconds{5})
        .storeResultsTo(tree);
    for (auto& [path, ifaces] : tree) self->objects_[path] = std::move(ifaces);
  } catch (const sdbus::Error& e) {
    return ble_error{errc::bus_unavailable, {}, {}, e.getName() + ": " + e.getMessage()};
  }
  for (const auto& path : c->adapters()) {
    if (adapter.empty() || path == adapter || path == "/org/bluez/" + adapter) {
      c->adapter_ = path;
      break;
    }
  }
  if (c->adapter_.empty())
    return ble_error{errc::no_adapter, {}, {}, adapter.empty() ? "" : "asked for " + adapter};
  // Opened off the reactor (a device actor's worker: the round trips above must not block the
  // reactor), the first pump is posted; the ring is armed from its own thread only.
  if (reactor.is_reactor_thread())
    c->pump_.pump();
  else
    c->pump_.kick();
  return c;
}

std::vector<std::string> bluez_client::adapters() const {
  std::vector<std::string> out;
  for (const auto& [path, ifaces] : objects_)
    if (ifaces.contains(adapter_iface)) out.push_back(path);
  return out;
}

sdbus::IProxy& bluez_client::proxy(const std::string& path) {
  auto& p = proxies_[path];
  if (!p) p = sdbus::createProxy(*bus_, bluez, path);
  return *p;
}

device_info bluez_client::to_device(const std::string& path, const properties& p) const {
  device_info d;
  d.path = path;
  d.address = prop_or<std::string>(p, "Address", "");
  d.name = prop_or<std::string>(p, "Alias", prop_or<std::string>(p, "Name", ""));
  for (const auto& u : prop_or<std::vector<std::string>>(p, "UUIDs", {}))
    d.uuids.push_back(normalize_uuid(u));
  if (const auto it = p.find("RSSI");
      it != p.end() && it->second.containsValueOfType<std::int16_t>())
    d.rssi = it->second.get<std::int16_t>();
  d.paired = prop_or<bool>(p, "Paired", false);
  d.connected = prop_or<bool>(p, "Connected", false);
  d.services_resolved = prop_or<bool>(p, "ServicesResolved", false);
  return d;
}

std::vector<device_info> bluez_client::devices(const scan_filter& filter) const {
  std::vector<device_info> out;
  for (const auto& [path, ifaces] : objects_) {
    const auto it = ifaces.find(device_iface);
    if (it == ifaces.end() || !is_child(adapter_, path)) continue;
    auto d = to_device(path, it->second);
    if (filter.matches(d)) out.push_back(std::move(d));
  }
  return out;
}

std::optional<device_info> bluez_client::device(std::string_view path) const {
  const auto it = objects_.find(std::string{path});
  if (it == objects_.end()) return std::nullopt;
  const auto dev = it->second.find(device_iface);
  if (dev == it->second.end()) return std::nullopt;
  return to_device(it->first, dev->second);
}

std::optional<std::string> bluez_client::device_path(std::string_view address) const {
  for (const auto& d : devices())
    if (lower(d.address) == lower(address)) return d.path;
  return std::nullopt;
}

std::optional<characteristic_info> bluez_client::characteristic_at(
    std::string_view char_path) const {
  const auto it = objects_.find(std::string{char_path});
  if (it == objects_.end()) return std::nullopt;
  const auto ch = it->second.find(char_iface);
  if (ch == it->second.end()) return std::nullopt;
  characteristic_info info;
  info.path = it->first;
  info.uuid = normalize_uuid(prop_or<std::string>(ch->second, "UUID", ""));
  info.flags = prop_or<std::vector<std::string>>(ch->second, "Flags", {});
  info.notifying = prop_or<bool>(ch->second, "Notifying", false);
  info.mtu = prop_or<std::uint16_t>(ch->second, "MTU", 23);
  return info;
}

std::optional<characteristic_info> bluez_client::characteristic(std::string_view device_path,
                                                                std::string_view uuid) const {
  const auto want = normalize_uuid(uuid);
  for (const auto& [path, ifaces] : objects_) {
    if (!is_child(device_path, path) || !ifaces.contains(char_iface)) continue;
    auto info = characteristic_at(path);
    if (info && info->uuid == want) return info;
  }
  return std::nullopt;
}

std::vector<characteristic_info> bluez_client::characteristics(std::string_view device_path) const {
  std::vector<characteristic_info> out;
  for (const auto& [path, ifaces] : objects_)
    if (is_child(device_path, path) && ifaces.contains(char_iface))
      out.push_back(*characteristic_at(path));
  return out;
}

ble_error bluez_client::error_for(const sdbus::Error& e, const std::string& path) const {
  ble_error err{errc_from_dbus_name(e.getName()), {}, {}, e.getName() + ": " + e.getMessage()};
  // Name the device by address and the characteristic by UUID, whichever the path is.
  for (const auto& [dev_path, ifaces] : objects_) {
    if (!ifaces.contains(device_iface) || (dev_path != path && !is_child(dev_path, path))) continue;
    err.device = prop_or<std::string>(ifaces.at(device_iface), "Address", dev_path);
  }
  if (err.device.empty()) err.device = path;
  if (const auto ch = characteristic_at(path)) err.characteristic = ch->uuid;
  return err;
}

template <class... Args>
void bluez_client::call(const std::string& path, const char* iface, const char* method,
                        callback<void> done, std::chrono::microseconds timeout, Args&&... args) {
  try {
    auto& p = proxy(path);
    auto msg = p.createMethodCall(iface, method);
    ((msg << std::forward<Args>(args)), ...);
    std::weak_ptr<bool> alive = alive_;
    p.callMethod(
        msg,
        [this, alive, path, done = std::move(done)](sdbus::MethodReply&, const sdbus::Error* e) {
          if (alive.expired()) return;
          if (e != nullptr) return done(error_for(*e, path));
          done(outcome::success());
        },
        static_cast<std::uint64_t>(timeout.count()));
    pump_.kick();
  } catch (const sdbus::Error& e) {
    done(error_for(e, path));
  }
}

void bluez_client::start_discovery(const scan_filter& filter, callback<void> done) {
  // BlueZ filters on advertised service UUIDs itself; name/address are checked locally.
  std::map<std::string, sdbus::Variant> f;
  f["Transport"] = sdbus::Variant{std::string{"le"}};
  if (!filter.service_uuids.empty()) {
    std::vector<std::string> uuids;
    for (const auto& u : filter.service_uuids) uuids.push_back(normalize_uuid(u));
    f["UUIDs"] = sdbus::Variant{uuids};
  }
  const auto adapter = adapter_;
  call(
      adapter, adapter_iface, "SetDiscoveryFilter",
      [this, adapter, done = std::move(done)](ble_result<void> r) mutable {
        if (!r) return done(std::move(r));
        call(adapter, adapter_iface, "StartDiscovery", std::move(done),
             std::chrono::microseconds{0});
      },
      std::chrono::microseconds{0}, f);
}

void bluez_client::stop_discovery(callback<void> done) {
  call(adapter_, adapter_iface, "StopDiscovery", std::move(done), std::chrono::microseconds{0});
}

void bluez_client::connect(const std::string& device_path, std::chrono::milliseconds timeout,
                           callback<void> done) {
  call(device_path, device_iface, "Connect", std::move(done), timeout);
}

void bluez_client::disconnect(const std::string& device_path, callback<void> done) {
  call(device_path, device_iface, "Disconnect", std::move(done), std::chrono::microseconds{0});
}

void bluez_client::pair(const std::string& device_path, callback<void> done) {
  call(device_path, device_iface, "Pair", std::move(done), std::chrono::microseconds{0});
}

void bluez_client::read(const std::string& char_path, callback<std::vector<std::uint8_t>> done) {
  try {
    auto& p = proxy(char_path);
    auto msg = p.createMethodCall(char_iface, "ReadValue");
    msg << std::map<std::string, sdbus::Variant>{};
    ++reads_in_flight_[char_path];
    std::weak_ptr<bool> alive = alive_;
    p.callMethod(msg, [this, alive, char_path, done = std::move(done)](sdbus::MethodReply& reply,
                                                                       const sdbus::Error* e) {
      if (alive.expired()) return;
      if (--reads_in_flight_[char_path] <= 0) reads_in_flight_.erase(char_path);
      if (e != nullptr) return done(error_for(*e, char_path));
      std::vector<std::uint8_t> value;
      reply >> value;
      done(std::move(value));
    });
    pump_.kick();
  } catch (const sdbus::Error& e) {
    done(error_for(e, char_path));
  }
}

void bluez_client::write(const std::string& char_path, std::span<const std::uint8_t> data,
                         bool with_response, callback<void> done) {
  std::map<std::string, sdbus::Variant> options;
  options["type"] = sdbus::Variant{std::string{with_response ? "request" : "command"}};
  call(char_path, char_iface, "WriteValue", std::move(done), std::chrono::microseconds{0},
       std::vector<std::uint8_t>(data.begin(), data.end()), options);
}

void bluez_client::start_notify(const std::string& char_path, callback<void> done) {
  call(char_path, char_iface, "StartNotify", std::move(done), std::chrono::microseconds{0});
}

void bluez_client::stop_notify(const std::string& char_path, callback<void> done) {
  call(char_path, char_iface, "StopNotify", std::move(done), std::chrono::microseconds{0});
}

std::uint64_t bluez_client::on_device(device_listener fn) {
  device_listeners_.emplace(next_listener_, std::move(fn));
  return next_listener_++;
}
std::uint64_t bluez_client::on_value(value_listener fn) {
  value_listeners_.emplace(next_listener_, std::move(fn));
  return next_listener_++;
}
std::uint64_t bluez_client::on_removed(removed_listener fn) {
  removed_listeners_.emplace(next_listener_, std::move(fn));
  return next_listener_++;
}
void bluez_client::remove_listener(std::uint64_t id) {
  device_listeners_.erase(id);
  value_listeners_.erase(id);
  removed_listeners_.erase(id);
}

void bluez_client::notify_device(const std::string& path) {
  const auto d = device(path);
  if (!d || !is_child(adapter_, path)) return;
  // Copy: a listener may add or remove listeners.
  auto listeners = device_listeners_;
  for (auto& [id, fn] : listeners)
    if (device_listeners_.contains(id)) fn(*d);
}

void bluez_client::on_interfaces_added(sdbus::Message& msg) {
  sdbus::ObjectPath path;
  interfaces added;
  msg >> path >> added;
  auto& obj = objects_[path];
  for (auto& [iface, props] : added) obj[iface] = std::move(props);
  if (added.contains(device_iface)) notify_device(path);
}

void bluez_client::on_interfaces_removed(sdbus::Message& msg) {
  sdbus::ObjectPath path;
  std::vector<std::string> gone;
  msg >> path >> gone;
  const auto it = objects_.find(path);
  if (it == objects_.end()) return;
  for (const auto& iface : gone) it->second.erase(iface);
  if (it->second.empty()) objects_.erase(it);
  auto listeners = removed_listeners_;
  for (auto& [id, fn] : listeners)
    if (removed_listeners_.contains(id)) fn(path);
}

void bluez_client::on_properties_changed(sdbus::Message& msg) {
  std::string iface;
  properties changed;
  std::vector<std::string> invalidated;
  msg >> iface >> changed >> invalidated;
  const std::string path = msg.getPath();
  const auto it = objects_.find(path);
  if (it == objects_.end()) return;
  auto& props = it->second[iface];
  for (const auto& [k, v] : changed) props[k] = v;
  for (const auto& k : invalidated) props.erase(k);
  if (iface == device_iface) {
    notify_device(path);
  } else if (iface == char_iface && changed.contains("Value")) {
    // bluetoothd also announces the Value a ReadValue fetched, just before the reply: that one is
    // not a notification.
    if (reads_in_flight_.contains(path)) return;
    const auto value = changed.at("Value").get<std::vector<std::uint8_t>>();
    auto listeners = value_listeners_;
    for (auto& [id, fn] : listeners)
      if (value_listeners_.contains(id)) fn(path, value);
  }
}

}  // namespace vessel::bridges::ble
