// vessel-run across two "hosts" that are network namespaces joined by a veth pair: each host's
// rank starts under `ip netns exec`, and the ranks talk over TCP between the namespaces' own
// addresses, which exist nowhere else. Needs root and iproute2; skips otherwise.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

/// Runs a shell command; its exit status (-1 if it could not run).
int sh(const std::string& command) {
  int status = std::system(command.c_str());
  return status == -1 || !WIFEXITED(status) ? -1 : WEXITSTATUS(status);
}

std::string capture(const std::string& command, int& status) {
  std::string out;
  std::FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) {
    status = -1;
    return out;
  }
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, p)) > 0) out.append(buffer, n);
  int raw = ::pclose(p);
  status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return out;
}

class vessel_run_netns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    if (sh("ip netns list >/dev/null 2>&1") != 0) GTEST_SKIP() << "no iproute2 (`ip netns`)";
    std::string id = std::to_string(::getpid());
    ns_a_ = "vessel-t" + id + "a";
    ns_b_ = "vessel-t" + id + "b";
    // Namespaces exist from here on: TearDown removes them whatever happens below.
    created_ = true;
    std::string veth_a = "vr" + id + "a", veth_b = "vr" + id + "b";
    std::string setup = "set -e; ip netns add " + ns_a_ + "; ip netns add " + ns_b_ +
                        "; ip link add " + veth_a + " netns " + ns_a_ + " type veth peer name " +
                        veth_b + " netns " + ns_b_ + "; ip -n " + ns_a_ + " addr add " + addr_a_ +
                        "/24 dev " + veth_a + "; ip -n " + ns_b_ + " addr add " + addr_b_ +
                        "/24 dev " + veth_b + "; ip -n " + ns_a_ + " link set " + veth_a +
                        " up; ip -n " + ns_b_ + " link set " + veth_b + " up; ip -n " + ns_a_ +
                        " link set lo up; ip -n " + ns_b_ + " link set lo up";
    if (sh(setup) != 0) GTEST_SKIP() << "could not create namespaces and a veth pair here";
  }

  void TearDown() override {
    if (!created_) return;
    sh("ip netns del " + ns_a_ + " 2>/dev/null");
    sh("ip netns del " + ns_b_ + " 2>/dev/null");
    EXPECT_NE(sh("ip netns list | grep -q " + ns_a_), 0) << "namespace left behind";
    std::remove(topology_.c_str());
  }

  std::string ns_a_, ns_b_;
  std::string addr_a_ = "10.231.77.1", addr_b_ = "10.231.77.2";
  std::string topology_ = "/tmp/vessel-netns-test-" + std::to_string(::getpid()) + ".toml";
  bool created_ = false;
};

TEST_F(vessel_run_netns, two_hosts_exchange_a_message_over_tcp_across_namespaces) {
  std::ofstream{topology_} << "[[hosts]]\nname = \"node-a\"\naddress = \"" << addr_a_
                           << "\"\nnetns = \"" << ns_a_ << "\"\n\n[[hosts]]\nname = \"node-b\"\n"
                           << "address = \"" << addr_b_ << "\"\nnetns = \"" << ns_b_ << "\"\n";
  int status = 0;
  auto out = capture(std::string{VESSEL_RUN_PATH} + " --timeout 30 --topology " + topology_ + " " +
                         NETNS_RANK_PATH + " 2>&1",
                     status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("[0] got: hello from node-b\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[1] got: hello from node-a\n"), std::string::npos) << out;
}

TEST_F(vessel_run_netns, the_host_addresses_exist_only_inside_their_namespaces) {
  // The control for the test above: the ranks could only have met inside the namespaces.
  EXPECT_NE(sh("ip -o addr show | grep -q 'inet " + addr_a_ + "/'"), 0)
      << addr_a_ << " is an address of vessel-run's own namespace";
  EXPECT_EQ(sh("ip -n " + ns_a_ + " -o addr show | grep -q 'inet " + addr_a_ + "/'"), 0);
  EXPECT_EQ(sh("ip -n " + ns_b_ + " -o addr show | grep -q 'inet " + addr_b_ + "/'"), 0);
}

}  // namespace
