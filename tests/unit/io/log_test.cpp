#include "io/log.hpp"

#include <gtest/gtest.h>

namespace {

using vessel::log::level_for;
using lvl = spdlog::level::level_enum;

TEST(log, empty_spec_gives_warn_so_tests_stay_quiet) {
  EXPECT_EQ(level_for("", "io"), lvl::warn);
}

TEST(log, global_level_applies_to_every_module) {
  EXPECT_EQ(level_for("info", "io"), lvl::info);
  EXPECT_EQ(level_for("info", "wire"), lvl::info);
}

TEST(log, module_override_beats_global_level_in_any_order) {
  EXPECT_EQ(level_for("info,io=debug", "io"), lvl::debug);
  EXPECT_EQ(level_for("io=trace,error", "io"), lvl::trace);
  EXPECT_EQ(level_for("info,io=debug", "wire"), lvl::info);
}

TEST(log, unknown_words_are_ignored_rather_than_muting) {
  EXPECT_EQ(level_for("verbose,io=loud", "io"), lvl::warn);
  EXPECT_EQ(level_for("off", "io"), lvl::off);
}

TEST(log, same_module_gives_same_logger) {
  auto& a = vessel::log::get("io");
  auto& b = vessel::log::get("io");
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(a.name(), "io");
  EXPECT_NE(&vessel::log::get("wire"), &a);
}

}  // namespace
