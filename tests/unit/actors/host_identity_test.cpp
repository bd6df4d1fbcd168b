#include "actors/host_identity.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "actors/errc.hpp"

namespace vessel::actors {
namespace {

const host_identity node1{"node1", "8c3e2c6a-1111-4c1e-9a7b-000000000001"};
const host_identity node1_rebooted{"node1", "8c3e2c6a-2222-4c1e-9a7b-000000000002"};
const host_identity node2{"node2", "8c3e2c6a-1111-4c1e-9a7b-000000000001"};

transport_kind choose(const host_identity& self, const host_identity& peer, transport_override o,
                      bool rdma = false) {
  auto r = choose_transport(self, peer, o, rdma);
  EXPECT_TRUE(r) << r.error().detail;
  return r ? r.value().kind : transport_kind::tcp;
}

TEST(host_identity, same_hostname_and_boot_id_is_the_same_host) {
  EXPECT_TRUE(same_host(node1, node1));
  EXPECT_FALSE(same_host(node1, node2)) << "another hostname is another host";
  EXPECT_FALSE(same_host(node1, node1_rebooted)) << "another boot id is another host (or a VM)";
}

TEST(host_identity, without_a_boot_id_no_peer_counts_as_local) {
  const host_identity bare{"localhost", ""};
  EXPECT_FALSE(same_host(bare, bare));
  EXPECT_EQ(choose(bare, bare, transport_override::automatic), transport_kind::tcp);
}

TEST(host_identity, key_round_trips) {
  EXPECT_EQ(node1.key(), "node1/8c3e2c6a-1111-4c1e-9a7b-000000000001");
  EXPECT_EQ(host_identity::from_key(node1.key()), node1);
  EXPECT_EQ(host_identity::from_key("lonely"), (host_identity{"lonely", ""}));
}

TEST(host_identity, local_identity_reads_hostname_and_boot_id) {
  auto id = local_host_identity();
  ASSERT_TRUE(id) << id.error().detail;
  EXPECT_FALSE(id.value().hostname.empty());
  std::ifstream boot{std::string{default_boot_id_path}};
  if (boot) {
    std::string expected;
    std::getline(boot, expected);
    EXPECT_EQ(id.value().boot_id, expected);
  } else {
    EXPECT_TRUE(id.value().boot_id.empty());
  }
}

TEST(host_identity, a_custom_boot_id_file_is_read_and_a_missing_one_leaves_it_empty) {
  char path[] = "/tmp/vessel_boot_id_XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  {
    std::ofstream out{path};
    out << "0123-abcd\n";
  }
  auto id = local_host_identity(path);
  ::unlink(path);
  ASSERT_TRUE(id) << id.error().detail;
  EXPECT_EQ(id.value().boot_id, "0123-abcd");

  auto missing = local_host_identity("/nonexistent/vessel/boot_id");
  ASSERT_TRUE(missing) << missing.error().detail;
  EXPECT_TRUE(missing.value().boot_id.empty());
}

TEST(host_identity, automatic_choice_is_shm_on_the_same_host_and_tcp_across_hosts) {
  EXPECT_EQ(choose(node1, node1, transport_override::automatic), transport_kind::shm);
  EXPECT_EQ(choose(node1, node2, transport_override::automatic), transport_kind::tcp);
  EXPECT_EQ(choose(node1, node1_rebooted, transport_override::automatic), transport_kind::tcp);
}

TEST(host_identity, automatic_choice_uses_rdma_across_hosts_when_configured) {
  EXPECT_EQ(choose(node1, node2, transport_override::automatic, true), transport_kind::rdma);
  EXPECT_EQ(choose(node1, node1, transport_override::automatic, true), transport_kind::shm)
      << "shared memory beats the NIC loopback on one host";
}

TEST(host_identity, override_forces_tcp_even_on_the_same_host) {
  auto r = choose_transport(node1, node1, transport_override::tcp);
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r.value().kind, transport_kind::tcp);
  EXPECT_NE(r.value().reason.find("VESSEL_TRANSPORT=tcp"), std::string::npos) << r.value().reason;
}

TEST(host_identity, override_to_shm_across_hosts_or_rdma_unconfigured_is_an_error) {
  auto shm = choose_transport(node1, node2, transport_override::shm);
  ASSERT_FALSE(shm);
  EXPECT_EQ(shm.error().code, make_error_code(errc::transport_unavailable));
  EXPECT_NE(shm.error().detail.find("node2"), std::string::npos) << shm.error().detail;
  EXPECT_EQ(choose(node1, node1, transport_override::shm), transport_kind::shm);

  auto rdma = choose_transport(node1, node2, transport_override::rdma, false);
  ASSERT_FALSE(rdma);
  EXPECT_EQ(rdma.error().code, make_error_code(errc::transport_unavailable));
  EXPECT_EQ(choose(node1, node2, transport_override::rdma, true), transport_kind::rdma);
}

TEST(host_identity, vessel_transport_variable_is_parsed) {
  using vars = std::map<std::string, std::string, std::less<>>;
  const auto read = [](vars v) {
    return read_transport_override(env_view::from_map(std::move(v)));
  };
  EXPECT_EQ(read({}).value(), transport_override::automatic);
  EXPECT_EQ(read({{"VESSEL_TRANSPORT", "auto"}}).value(), transport_override::automatic);
  EXPECT_EQ(read({{"VESSEL_TRANSPORT", "tcp"}}).value(), transport_override::tcp);
  EXPECT_EQ(read({{"VESSEL_TRANSPORT", "shm"}}).value(), transport_override::shm);
  EXPECT_EQ(read({{"VESSEL_TRANSPORT", "rdma"}}).value(), transport_override::rdma);
  auto bad = read({{"VESSEL_TRANSPORT", "udp"}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, make_error_code(errc::bad_transport_override));
  EXPECT_NE(bad.error().detail.find("VESSEL_TRANSPORT='udp'"), std::string::npos);
}

}  // namespace
}  // namespace vessel::actors
