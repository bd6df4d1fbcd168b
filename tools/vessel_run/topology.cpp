#include "tools/vessel_run/topology.hpp"

#include <filesystem>
#include <set>
#include <string_view>

#include <toml++/toml.h>

namespace vessel::tools {
namespace {

using actors::detailed_error;

/// Validation failure located at `node` (or `fallback` when the node is absent).
struct located_error {
  std::string text;
};

std::string where(const std::string& file, const toml::source_region& region) {
  return file + ":" + std::to_string(region.begin.line) + ":" + std::to_string(region.begin.column);
}

class reader {
 public:
  explicit reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const toml::source_region& region, const std::string& key,
                         const std::string& why) const {
    throw located_error{where(file_, region) + ": " + key + ": " + why};
  }

  std::string string_at(const toml::table& table, std::string_view name, const std::string& key,
                        bool required) const {
    const toml::node* node = table.get(name);
    if (node == nullptr) {
      if (required) fail(table.source(), key, "missing (a string)");
      return {};
    }
    auto value = node->value<std::string>();
    if (!node->is_string() || !value || value->empty())
      fail(node->source(), key, "must be a non-empty string");
    return *value;
  }

  std::optional<long long> integer_at(const toml::table& table, std::string_view name,
                                      const std::string& key, long long min, long long max,
                                      bool required) const {
    const toml::node* node = table.get(name);
    if (node == nullptr) {
      if (required) fail(table.source(), key, "missing (an integer)");
      return std::nullopt;
    }
    if (!node->is_integer()) fail(node->source(), key, "must be an integer");
    long long v = node->as_integer()->get();
    if (v < min || v > max) {
      fail(node->source(), key,
           "must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
               "], got " + std::to_string(v));
    }
    return v;
  }

  void only_keys(const toml::table& table, const std::string& key,
                 std::initializer_list<std::string_view> allowed) const {
    for (auto&& [name, node] : table) {
      bool known = false;
      for (auto a : allowed) known |= name.str() == a;
      if (!known) fail(node.source(), key + "." + std::string{name.str()}, "unknown key");
    }
  }

  const toml::array& array_of_tables(const toml::table& root, std::string_view name,
                                     bool required) const {
    static const toml::array empty;
    const toml::node* node = root.get(name);
    if (node == nullptr) {
      if (required)
        fail(root.source(), std::string{name},
             "missing (at least one [[" + std::string{name} + "]])");
      return empty;
    }
    if (!node->is_array_of_tables())
      fail(node->source(), std::string{name}, "must be [[" + std::string{name} + "]] tables");
    return *node->as_array();
  }

  topology read(const toml::table& root) const {
    topology t;
    only_keys(root, "(top level)", {"hosts", "transports", "devices"});

    const toml::array& hosts = array_of_tables(root, "hosts", true);
    std::set<std::string> names;
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      const toml::table& h = *hosts[i].as_table();
      std::string key = "hosts[" + std::to_string(i) + "]";
      only_keys(h, key, {"name", "address", "ranks", "netns"});
      host_entry e;
      e.name = string_at(h, "name", key + ".name", true);
      if (!names.insert(e.name).second)
        fail(h.get("name")->source(), key + ".name", "'" + e.name + "' named twice");
      e.address = string_at(h, "address", key + ".address", true);
      e.ranks =
          static_cast<int>(integer_at(h, "ranks", key + ".ranks", 1, 4096, false).value_or(1));
      if (h.get("netns")) e.netns = string_at(h, "netns", key + ".netns", true);
      t.hosts.push_back(std::move(e));
    }

    t.transports = {{"same_host", "shm"}, {"cross_host", "tcp"}};
    if (const toml::node* node = root.get("transports")) {
      if (!node->is_table()) fail(node->source(), "transports", "must be a table");
      const toml::table& tr = *node->as_table();
      only_keys(tr, "transports", {"same_host", "cross_host"});
      for (auto&& [name, value] : tr) {
        std::string key = "transports." + std::string{name.str()};
        auto s = value.value<std::string>();
        if (!value.is_string() || (*s != "shm" && *s != "tcp" && *s != "rdma")) {
          fail(value.source(), key, "must be \"shm\", \"tcp\" or \"rdma\"");
        }
        if (name.str() == "cross_host" && *s == "shm")
          fail(value.source(), key, "shm cannot cross hosts");
        t.transports[std::string{name.str()}] = *s;
      }
    }

    int world = t.world_size();
    const toml::array& devices = array_of_tables(root, "devices", false);
    for (std::size_t i = 0; i < devices.size(); ++i) {
      const toml::table& d = *devices[i].as_table();
      std::string key = "devices[" + std::to_string(i) + "]";
      device_entry e;
      e.rank = static_cast<int>(*integer_at(d, "rank", key + ".rank", 0, world - 1, true));
      e.kind = string_at(d, "type", key + ".type", true);
      if (e.kind == "uart") {
        only_keys(d, key, {"rank", "type", "port", "baud", "framing"});
        e.settings.emplace_back("port", string_at(d, "port", key + ".port", true));
        auto baud = integer_at(d, "baud", key + ".baud", 50, 16'000'000, false).value_or(115200);
        e.settings.emplace_back("baud", std::to_string(baud));
        std::string framing =
            d.get("framing") ? string_at(d, "framing", key + ".framing", true) : "vessel";
        if (framing != "vessel" && framing != "reliable") {
          fail(d.get("framing")->source(), key + ".framing", "must be \"vessel\" or \"reliable\"");
        }
        e.settings.emplace_back("framing", framing);
      } else if (e.kind == "ble") {
        only_keys(d, key, {"rank", "type", "address", "name", "services"});
        bool has_address = d.get("address") != nullptr, has_name = d.get("name") != nullptr;
        if (has_address == has_name)
          fail(d.source(), key, "a ble device needs exactly one of address, name");
        if (has_address)
          e.settings.emplace_back("address", string_at(d, "address", key + ".address", true));
        if (has_name) e.settings.emplace_back("name", string_at(d, "name", key + ".name", true));
        if (const toml::node* s = d.get("services")) {
          const toml::array* list = s->as_array();
          if (list == nullptr)
            fail(s->source(), key + ".services", "must be an array of UUID strings");
          std::string joined;
          for (std::size_t k = 0; k < list->size(); ++k) {
            auto uuid = (*list)[k].value<std::string>();
            if (!uuid)
              fail((*list)[k].source(), key + ".services[" + std::to_string(k) + "]",
                   "must be a string");
            joined += (joined.empty() ? "" : "+") + *uuid;
          }
          e.settings.emplace_back("services", joined);
        }
      } else if (e.kind == "gpu") {
        only_keys(d, key, {"rank", "type", "index"});
        e.settings.emplace_back(
            "index", std::to_string(*integer_at(d, "index", key + ".index", 0, 1023, true)));
      } else {
        fail(d.get("type")->source(), key + ".type",
             "must be \"uart\", \"ble\" or \"gpu\", got '" + e.kind + "'");
      }
      t.devices.push_back(std::move(e));
    }
    return t;
  }

 private:
  std::string file_;
};

}  // namespace

int topology::world_size() const noexcept {
  int n = 0;
  for (auto& h : hosts) n += h.ranks;
  return n;
}

std::pair<std::size_t, int> topology::place(int rank) const noexcept {
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    if (rank < hosts[i].ranks) return {i, rank};
    rank -= hosts[i].ranks;
  }
  return {hosts.size(), -1};
}

actors::detailed_result<topology> load_topology(const std::string& path) {
  auto invalid = std::make_error_code(std::errc::invalid_argument);
  try {
    toml::table root = toml::parse_file(path);
    topology t = reader{path}.read(root);
    std::error_code ec;
    auto absolute = std::filesystem::absolute(path, ec);
    t.path = ec ? path : absolute.string();
    return t;
  } catch (const toml::parse_error& e) {
    if (e.source().begin.line == 0)
      return actors::fail(invalid, path + ": " + std::string{e.description()});
    return actors::fail(invalid, where(path, e.source()) + ": " + std::string{e.description()});
  } catch (const located_error& e) {
    return actors::fail(invalid, e.text);
  }
}

std::vector<std::pair<std::string, std::string>> rank_environment(const topology& t, int rank) {
  auto [host_index, local] = t.place(rank);
  const host_entry& host = t.hosts.at(host_index);
  std::string transports;
  for (auto& [link_class, transport] : t.transports) {
    transports += (transports.empty() ? "" : ",") + link_class + "=" + transport;
  }
  std::string devices;
  for (auto& d : t.devices) {
    if (d.rank != rank) continue;
    devices += (devices.empty() ? "" : ";") + d.kind + ":";
    for (std::size_t i = 0; i < d.settings.size(); ++i) {
      devices += (i ? "," : "") + d.settings[i].first + "=" + d.settings[i].second;
    }
  }
  return {{"VESSEL_TOPOLOGY", t.path},
          {"VESSEL_HOST", host.name},
          {"VESSEL_HOST_ADDRESS", host.address},
          {"VESSEL_TRANSPORTS", transports},
          {"VESSEL_DEVICES", devices}};
}

}  // namespace vessel::tools
