// Topology files: the examples parse, every rank gets its slice, and a bad file is refused with
// its file, line and key.

#include "tools/vessel_run/topology.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

using vessel::tools::load_topology;
using vessel::tools::rank_environment;

std::string example(const std::string& name) {
  return std::string{VESSEL_SOURCE_DIR} + "/examples/topologies/" + name;
}

std::string env_value(const std::vector<std::pair<std::string, std::string>>& env,
                      const std::string& key) {
  for (auto& [k, v] : env) {
    if (k == key) return v;
  }
  return "<unset>";
}

TEST(topology, the_examples_parse) {
  auto local = load_topology(example("local-4.toml"));
  ASSERT_TRUE(local) << local.error().message();
  EXPECT_EQ(local.value().world_size(), 4);

  auto two = load_topology(example("two-hosts.toml"));
  ASSERT_TRUE(two) << two.error().message();
  auto& t = two.value();
  ASSERT_EQ(t.hosts.size(), 2u);
  EXPECT_EQ(t.world_size(), 4);
  EXPECT_EQ(t.place(3), (std::pair<std::size_t, int>{1, 1}));
  EXPECT_EQ(t.hosts[1].netns.value_or(""), "vessel-b");
  auto env = rank_environment(t, 2);
  EXPECT_EQ(env_value(env, "VESSEL_HOST"), "node-b");
  EXPECT_EQ(env_value(env, "VESSEL_HOST_ADDRESS"), "10.77.0.2");
  EXPECT_EQ(env_value(env, "VESSEL_TRANSPORTS"), "cross_host=tcp,same_host=shm");
  EXPECT_EQ(env_value(env, "VESSEL_DEVICES"), "");
}

TEST(topology, a_rank_gets_only_its_own_devices) {
  auto board = load_topology(example("uart-board.toml"));
  ASSERT_TRUE(board) << board.error().message();
  EXPECT_EQ(env_value(rank_environment(board.value(), 0), "VESSEL_DEVICES"), "");
  EXPECT_EQ(env_value(rank_environment(board.value(), 1), "VESSEL_DEVICES"),
            "uart:port=/tmp/vessel-board,baud=115200,framing=reliable");
  EXPECT_EQ(env_value(rank_environment(board.value(), 1), "VESSEL_TOPOLOGY").front(), '/');
}

class topology_file : public ::testing::Test {
 protected:
  void TearDown() override { ::unlink(path_.c_str()); }
  std::string load_error(const std::string& text) {
    std::ofstream{path_} << text;
    auto t = load_topology(path_);
    return t ? "parsed" : t.error().message();
  }
  std::string path_ = "/tmp/vessel-topology-test-" + std::to_string(::getpid()) + ".toml";
};

TEST_F(topology_file, every_device_kind_is_read) {
  std::ofstream{path_} << R"([[hosts]]
name = "h"
address = "127.0.0.1"
ranks = 2
[[devices]]
rank = 0
type = "gpu"
index = 1
[[devices]]
rank = 0
type = "ble"
name = "vessel-sensor"
services = ["180d", "180f"]
[[devices]]
rank = 1
type = "uart"
port = "/dev/ttyUSB0"
)";
  auto t = load_topology(path_);
  ASSERT_TRUE(t) << t.error().message();
  EXPECT_EQ(env_value(rank_environment(t.value(), 0), "VESSEL_DEVICES"),
            "gpu:index=1;ble:name=vessel-sensor,services=180d+180f");
  EXPECT_EQ(env_value(rank_environment(t.value(), 1), "VESSEL_DEVICES"),
            "uart:port=/dev/ttyUSB0,baud=115200,framing=vessel");
}

TEST_F(topology_file, errors_name_the_file_line_and_key) {
  const std::string host = "[[hosts]]\nname = \"a\"\naddress = \"127.0.0.1\"\n";
  struct bad {
    std::string text;
    std::string expected;  ///< after "FILE:"
  };
  for (auto& [text, expected] : std::vector<bad>{
           {host + "ranks = -2\n", "4:9: hosts[0].ranks: must be an integer in [1, 4096], got -2"},
           {host + "ranks = \"two\"\n", "4:9: hosts[0].ranks: must be an integer"},
           {host + "rank = 2\n", "4:8: hosts[0].rank: unknown key"},
           {"[[hosts]]\nname = \"a\"\n", "1:1: hosts[0].address: missing"},
           {"", "1:1: hosts: missing"},
           {host + host, "5:8: hosts[1].name: 'a' named twice"},
           {host + "[transports]\ncross_host = \"shm\"\n",
            "5:14: transports.cross_host: shm cannot cross hosts"},
           {host + "[transports]\nsame_host = \"carrier-pigeon\"\n",
            "5:13: transports.same_host: must be"},
           {host + "[[devices]]\nrank = 1\ntype = \"gpu\"\nindex = 0\n",
            "5:8: devices[0].rank: must be an integer in [0, 0], got 1"},
           {host + "[[devices]]\nrank = 0\ntype = \"uart\"\nbaud = 9600\n",
            "4:1: devices[0].port: missing"},
           {host +
                "[[devices]]\nrank = 0\ntype = \"uart\"\nport = \"/dev/x\"\nframing = \"hdlc\"\n",
            "8:11: devices[0].framing: must be"},
           {host + "[[devices]]\nrank = 0\ntype = \"ble\"\n",
            "4:1: devices[0]: a ble device needs exactly one of address, name"},
           {host + "[[devices]]\nrank = 0\ntype = \"tape\"\n",
            "6:8: devices[0].type: must be \"uart\", \"ble\" or \"gpu\", got 'tape'"},
           {"[[hosts]\n", "1:9: "},
       }) {
    auto message = load_error(text);
    EXPECT_EQ(message.rfind(path_ + ":", 0), 0u) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << "got: " << message << "\nfor:\n"
                                                         << text;
  }
}

TEST(topology, a_missing_file_is_named) {
  auto t = load_topology("/nonexistent/topology.toml");
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message().find("/nonexistent/topology.toml"), std::string::npos);
}

}  // namespace
