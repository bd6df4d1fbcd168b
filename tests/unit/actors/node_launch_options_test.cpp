// node_launch_options: a default-constructed value is the documented defaults, and their receive
// pool holds what a rank actor may make it hold: its unexpected queue up to the bound (counted in
// pool blocks), then one link window per peer past it (credit is withheld there) and a message in
// progress. The mesh's own default pool (256 blocks of 64 KiB) fell short, and a 64 KiB stream
// to an actor app that fell behind made its link reconnect to shed messages it had no block for.

#include "actors/node_launch.hpp"

#include <algorithm>
#include <cstddef>

#include <gtest/gtest.h>

#include "actors/link_credit.hpp"

namespace vessel {
namespace {

void expect_same_classes(const io::buffer_pool_config& a, const io::buffer_pool_config& b) {
  ASSERT_EQ(a.classes.size(), b.classes.size());
  for (std::size_t i = 0; i < a.classes.size(); ++i) {
    EXPECT_EQ(a.classes[i].block_size, b.classes[i].block_size) << "class " << i;
    EXPECT_EQ(a.classes[i].block_count, b.classes[i].block_count) << "class " << i;
  }
  EXPECT_EQ(a.populate, b.populate);
}

/// Blocks of a class a receiving rank actor may hold from `peers` senders of messages that fill
/// that class's blocks (the common case: a stream of one size).
std::size_t blocks_needed(const node_launch_options& o, const io::size_class_config& c,
                          std::size_t peers) {
  const actors::matcher_config& m = o.node.matching;
  const std::size_t queued =
      std::min<std::size_t>(m.max_unexpected_messages, m.max_unexpected_bytes / c.block_size);
  const std::size_t window = o.mesh.window_bytes / actors::message_credit(c.block_size);
  return queued + peers * (window + 1);
}

TEST(node_launch_options_test, a_default_constructed_value_is_the_defaults) {
  const node_launch_options made{};
  const node_launch_options defaults = node_launch_options::defaults();
  expect_same_classes(made.node.pool, defaults.node.pool);
  expect_same_classes(made.mesh.pool, defaults.mesh.pool);
}

TEST(node_launch_options_test, the_receive_pool_holds_the_unexpected_queue_and_a_window) {
  const node_launch_options o = node_launch_options::defaults();
  for (const io::size_class_config& c : o.mesh.pool.classes) {
    EXPECT_GE(c.block_count, blocks_needed(o, c, 7))
        << "class of " << c.block_size << "-byte blocks, 7 sending peers (8 ranks)";
  }
}

TEST(node_launch_options_test, the_mesh_pool_alone_would_not) {
  // What the check above guards against: the mesh's default pool under the same bound.
  node_launch_options o = node_launch_options::defaults();
  o.mesh.pool = io::buffer_pool_config::defaults();
  const auto& c =
      *std::find_if(o.mesh.pool.classes.begin(), o.mesh.pool.classes.end(),
                    [](const io::size_class_config& k) { return k.block_size == 65536; });
  EXPECT_LT(c.block_count, blocks_needed(o, c, 1));
}

}  // namespace
}  // namespace vessel
