// mesh_config::apply_env: the VESSEL_* timeouts and the transport a rank's mesh runs with.

#include <gtest/gtest.h>

#include <chrono>

#include "actors/env.hpp"
#include "actors/mesh.hpp"

namespace {

using namespace std::chrono_literals;
using vessel::actors::env_view;
using vessel::actors::mesh_config;
using vessel::actors::mesh_transport;

TEST(mesh_config_env, unset_variables_keep_the_defaults) {
  mesh_config c;
  ASSERT_TRUE(c.apply_env(env_view::from_map({})));
  const mesh_config defaults;
  EXPECT_EQ(c.liveness.peer_deadline, defaults.liveness.peer_deadline);
  EXPECT_EQ(c.liveness.heartbeat_interval, defaults.liveness.heartbeat_interval);
  EXPECT_EQ(c.reconnect_deadline, defaults.reconnect_deadline);
  EXPECT_EQ(c.handshake_timeout, defaults.handshake_timeout);
  EXPECT_EQ(c.shm.handshake_timeout, defaults.shm.handshake_timeout);
  EXPECT_EQ(c.transport, mesh_transport::automatic);
}

TEST(mesh_config_env, reads_every_timeout_and_the_transport) {
  mesh_config c;
  ASSERT_TRUE(c.apply_env(env_view::from_map({{"VESSEL_PEER_TIMEOUT_MS", "2500"},
                                              {"VESSEL_HEARTBEAT_MS", "250"},
                                              {"VESSEL_RECONNECT_TIMEOUT_MS", "1500"},
                                              {"VESSEL_HANDSHAKE_TIMEOUT_MS", "20000"},
                                              {"VESSEL_TRANSPORT", "shm"}})));
  EXPECT_EQ(c.liveness.peer_deadline, 2500ms);
  EXPECT_EQ(c.liveness.heartbeat_interval, 250ms);
  EXPECT_EQ(c.reconnect_deadline, 1500ms);
  EXPECT_EQ(c.transport, mesh_transport::shm);
  // Both handshakes of a link (shm's descriptor exchange, then the authenticated hello) wait as
  // long: a loaded host slows both.
  EXPECT_EQ(c.handshake_timeout, 20000ms);
  EXPECT_EQ(c.shm.handshake_timeout, 20000ms);
}

TEST(mesh_config_env, the_handshake_setting_overrides_a_shm_timeout_set_in_code) {
  mesh_config c;
  c.shm.handshake_timeout = 800ms;
  ASSERT_TRUE(c.apply_env(env_view::from_map({})));
  EXPECT_EQ(c.shm.handshake_timeout, 800ms);
  ASSERT_TRUE(c.apply_env(env_view::from_map({{"VESSEL_HANDSHAKE_TIMEOUT_MS", "5000"}})));
  EXPECT_EQ(c.handshake_timeout, 5000ms);
  EXPECT_EQ(c.shm.handshake_timeout, 5000ms);
}

TEST(mesh_config_env, a_malformed_value_is_an_error_naming_the_variable_and_changes_nothing) {
  for (const char* bad : {"0", "-5", "5s", "abc"}) {
    SCOPED_TRACE(bad);
    mesh_config c;
    auto applied = c.apply_env(env_view::from_map(
        {{"VESSEL_RECONNECT_TIMEOUT_MS", "1500"}, {"VESSEL_HANDSHAKE_TIMEOUT_MS", bad}}));
    ASSERT_FALSE(applied);
    EXPECT_NE(applied.error().detail.find("VESSEL_HANDSHAKE_TIMEOUT_MS"), std::string::npos)
        << applied.error().detail;
    EXPECT_EQ(c.reconnect_deadline, mesh_config{}.reconnect_deadline);
    EXPECT_EQ(c.handshake_timeout, mesh_config{}.handshake_timeout);
  }
}

}  // namespace
