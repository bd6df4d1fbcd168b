#include "actors/bootstrap.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

#include <string>

#include "actors/errc.hpp"
#include "io/log.hpp"

namespace vessel::actors {
namespace {

using vars = std::map<std::string, std::string, std::less<>>;

detailed_result<launch_info> detect(vars v) {
  return detect_launch(env_view::from_map(std::move(v)));
}

// The error's code, and a detail that names every given fragment (variable names and values).
void expect_error(const detailed_result<launch_info>& r, errc code,
                  std::initializer_list<std::string_view> named) {
  ASSERT_FALSE(r) << "expected " << make_error_code(code).message();
  EXPECT_EQ(r.error().code, make_error_code(code)) << r.error().detail;
  for (auto fragment : named) {
    EXPECT_NE(r.error().detail.find(fragment), std::string::npos)
        << "'" << r.error().detail << "' does not name '" << fragment << "'";
  }
}

TEST(bootstrap, vessel_variables_give_rank_world_local_rank_and_store) {
  auto r = detect({{"VESSEL_RANK", "2"},
                   {"VESSEL_WORLD_SIZE", "4"},
                   {"VESSEL_LOCAL_RANK", "0"},
                   {"VESSEL_STORE", "127.0.0.1:29500"}});
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r.value().rank, 2);
  EXPECT_EQ(r.value().world_size, 4);
  EXPECT_EQ(r.value().local_rank, 0);
  EXPECT_EQ(r.value().source, "VESSEL_*");
  ASSERT_TRUE(r.value().store);
  EXPECT_EQ(*r.value().store, (endpoint{"127.0.0.1", 29500}));
  EXPECT_EQ(describe(r.value()),
            "rank 2 of 4 (local 0) from VESSEL_*; store 127.0.0.1:29500 (VESSEL_STORE)");
}

TEST(bootstrap, open_mpi_variables_are_read) {
  auto r = detect({{"OMPI_COMM_WORLD_RANK", "3"},
                   {"OMPI_COMM_WORLD_SIZE", "8"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"VESSEL_STORE", "node1:7000"}});
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r.value().rank, 3);
  EXPECT_EQ(r.value().world_size, 8);
  EXPECT_EQ(r.value().local_rank, 1);
  EXPECT_EQ(r.value().source, "Open MPI");
  EXPECT_EQ(describe(r.value()),
            "rank 3 of 8 (local 1) from Open MPI; store node1:7000 (VESSEL_STORE)");
}

TEST(bootstrap, pmi_variables_are_read_with_hydra_local_rank) {
  auto r = detect({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}});
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r.value().rank, 1);
  EXPECT_EQ(r.value().world_size, 2);
  EXPECT_EQ(r.value().local_rank, 1);
  EXPECT_EQ(r.value().source, "PMI");
  EXPECT_FALSE(r.value().store);
  EXPECT_EQ(describe(r.value()), "rank 1 of 2 (local 1) from PMI; no store");
}

TEST(bootstrap, slurm_variables_are_read) {
  auto r = detect({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "2"}});
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r.value().rank, 5);
  EXPECT_EQ(r.value().world_size, 6);
  EXPECT_EQ(r.value().local_rank, 2);
  EXPECT_EQ(r.value().source, "Slurm");
}

TEST(bootstrap, torchrun_variables_give_rank_and_store_from_master_addr_and_port) {
  auto r = detect({{"RANK", "0"},
                   {"WORLD_SIZE", "2"},
                   {"LOCAL_RANK", "0"},
                   {"MASTER_ADDR", "10.0.0.1"},
                   {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r.value().rank, 0);
  EXPECT_EQ(r.value().world_size, 2);
  EXPECT_EQ(r.value().source, "torchrun");
  ASSERT_TRUE(r.value().store);
  EXPECT_EQ(*r.value().store, (endpoint{"10.0.0.1", 29500}));
  EXPECT_EQ(r.value().store_source, "MASTER_ADDR/MASTER_PORT");
}

TEST(bootstrap, local_rank_is_unknown_when_the_launcher_does_not_give_it) {
  auto r = detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r.value().local_rank, -1);
  EXPECT_EQ(describe(r.value()), "rank 1 of 2 from torchrun; no store");
}

TEST(bootstrap, vessel_store_wins_over_master_addr) {
  auto r = detect({{"RANK", "0"},
                   {"WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "10.0.0.1"},
                   {"MASTER_PORT", "29500"},
                   {"VESSEL_STORE", "10.0.0.2:7000"}});
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(*r.value().store, (endpoint{"10.0.0.2", 7000}));
  EXPECT_EQ(r.value().store_source, "VESSEL_STORE");
}

TEST(bootstrap, precedence_is_vessel_then_open_mpi_then_pmi_then_slurm_then_torchrun) {
  // Every source set, each with its own rank; removing the winner hands over to the next one.
  vars all{{"VESSEL_RANK", "0"},
           {"VESSEL_WORLD_SIZE", "8"},
           {"OMPI_COMM_WORLD_RANK", "1"},
           {"OMPI_COMM_WORLD_SIZE", "8"},
           {"PMI_RANK", "2"},
           {"PMI_SIZE", "8"},
           {"SLURM_PROCID", "3"},
           {"SLURM_NTASKS", "8"},
           {"RANK", "4"},
           {"WORLD_SIZE", "8"}};
  const std::pair<const char*, const char*> order[] = {
      {"VESSEL_RANK", "VESSEL_WORLD_SIZE"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"},
      {"RANK", "WORLD_SIZE"}};
  const char* names[] = {"VESSEL_*", "Open MPI", "PMI", "Slurm", "torchrun"};
  for (int i = 0; i < 5; ++i) {
    auto r = detect(all);
    ASSERT_TRUE(r) << r.error().detail;
    EXPECT_EQ(r.value().rank, i);
    EXPECT_EQ(r.value().source, names[i]);
    all.erase(order[i].first);
    all.erase(order[i].second);
  }
  auto none = detect(all);
  ASSERT_TRUE(none);
  EXPECT_EQ(none.value().source, singleton_source);
}

TEST(bootstrap, no_launcher_means_a_single_process_of_rank_zero) {
  auto r = detect({});
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r.value().rank, 0);
  EXPECT_EQ(r.value().world_size, 1);
  EXPECT_EQ(describe(r.value()), "rank 0 of 1 (local 0) from none (single process); no store");
}

TEST(bootstrap, a_half_set_source_is_an_error_not_a_fall_through) {
  // The user set VESSEL_RANK on purpose: falling through to Open MPI would silently ignore it.
  expect_error(
      detect({{"VESSEL_RANK", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
      errc::missing_world_size, {"VESSEL_RANK='1'", "VESSEL_WORLD_SIZE"});
}

TEST(bootstrap, missing_rank_names_the_rank_variable) {
  expect_error(detect({{"SLURM_NTASKS", "4"}}), errc::missing_rank,
               {"SLURM_NTASKS='4'", "SLURM_PROCID", "Slurm"});
}

TEST(bootstrap, missing_world_size_names_the_size_variable) {
  expect_error(detect({{"PMI_RANK", "0"}}), errc::missing_world_size,
               {"PMI_RANK='0'", "PMI_SIZE", "PMI"});
}

TEST(bootstrap, malformed_numbers_name_the_variable_and_value) {
  for (const char* bad : {"abc", "3x", "-1", "", " 1", "+1", "99999999999", "0x2"}) {
    expect_error(detect({{"VESSEL_RANK", bad}, {"VESSEL_WORLD_SIZE", "4"}}), errc::malformed_number,
                 {std::string{"VESSEL_RANK='"} + bad + "'"});
  }
  expect_error(detect({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "four"}}),
               errc::malformed_number, {"OMPI_COMM_WORLD_SIZE='four'"});
  expect_error(detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "x"}}),
               errc::malformed_number, {"SLURM_LOCALID='x'"});
}

TEST(bootstrap, world_size_zero_is_refused) {
  expect_error(detect({{"WORLD_SIZE", "0"}, {"RANK", "0"}}), errc::invalid_world_size,
               {"WORLD_SIZE='0'"});
}

TEST(bootstrap, rank_out_of_range_names_rank_and_size) {
  expect_error(detect({{"VESSEL_RANK", "4"}, {"VESSEL_WORLD_SIZE", "4"}}), errc::rank_out_of_range,
               {"VESSEL_RANK='4'", "VESSEL_WORLD_SIZE='4'"});
  expect_error(detect({{"OMPI_COMM_WORLD_RANK", "0"},
                       {"OMPI_COMM_WORLD_SIZE", "2"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}}),
               errc::rank_out_of_range, {"OMPI_COMM_WORLD_LOCAL_RANK='2'"});
}

TEST(bootstrap, ipv6_store_addresses_are_parsed) {
  auto r =
      detect({{"VESSEL_RANK", "0"}, {"VESSEL_WORLD_SIZE", "1"}, {"VESSEL_STORE", "[::1]:29500"}});
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(*r.value().store, (endpoint{"::1", 29500}));
  EXPECT_EQ(r.value().store->to_string(), "[::1]:29500");

  auto full = parse_endpoint("[fd00:1:2::17]:65535", "X");
  ASSERT_TRUE(full) << full.error().detail;
  EXPECT_EQ(full.value(), (endpoint{"fd00:1:2::17", 65535}));

  // torchrun writes MASTER_ADDR without brackets; both spellings work.
  for (const char* addr : {"::1", "[::1]"}) {
    auto t = detect(
        {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", addr}, {"MASTER_PORT", "1234"}});
    ASSERT_TRUE(t) << t.error().detail;
    EXPECT_EQ(*t.value().store, (endpoint{"::1", 1234}));
  }
}

TEST(bootstrap, malformed_store_addresses_name_the_variable_and_value) {
  for (const char* bad : {"localhost", "localhost:", ":29500", "host:0", "host:65536", "host:http",
                          "::1:29500", "[::1]", "[::1]29500", "[::1:29500", "[host]:1", ""}) {
    expect_error(detect({{"VESSEL_STORE", bad}}), errc::malformed_endpoint,
                 {std::string{"VESSEL_STORE='"} + bad + "'"});
  }
}

TEST(bootstrap, master_addr_without_port_and_bad_master_port_are_errors) {
  expect_error(detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}}),
               errc::missing_store_port, {"MASTER_ADDR='h'", "MASTER_PORT"});
  expect_error(detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "1"}}),
               errc::missing_store_port, {"MASTER_PORT='1'", "MASTER_ADDR"});
  expect_error(
      detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "x"}}),
      errc::malformed_endpoint, {"MASTER_PORT='x'"});
}

TEST(bootstrap, value_on_an_error_throws_with_the_detail) {
  auto r = detect({{"VESSEL_RANK", "x"}, {"VESSEL_WORLD_SIZE", "2"}});
  try {
    (void)r.value();
    FAIL() << "value() did not throw";
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string{e.what()}.find("VESSEL_RANK='x'"), std::string::npos) << e.what();
    EXPECT_EQ(e.code(), make_error_code(errc::malformed_number));
  }
}

TEST(bootstrap, the_process_environment_view_reads_getenv) {
  // Reads only: PATH is set in every test environment, and a name nobody sets is absent.
  auto env = env_view::process();
  EXPECT_TRUE(env.has("PATH"));
  EXPECT_FALSE(env.has("VESSEL_TEST_SURELY_UNSET_3f9a"));
}

TEST(bootstrap, start_up_line_names_the_source_or_the_error) {
  std::ostringstream captured;
  auto& logger = log::get("actors");
  const auto level = logger.level();
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(captured);
  logger.sinks().push_back(sink);
  logger.set_level(spdlog::level::info);
  auto ok = detect_launch_and_log(env_view::from_map({{"OMPI_COMM_WORLD_RANK", "2"},
                                                      {"OMPI_COMM_WORLD_SIZE", "4"},
                                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                                      {"VESSEL_STORE", "127.0.0.1:29500"}}));
  auto bad = detect_launch_and_log(env_view::from_map({{"PMI_RANK", "x"}, {"PMI_SIZE", "2"}}));
  logger.flush();
  logger.sinks().pop_back();
  logger.set_level(level);
  EXPECT_TRUE(ok);
  EXPECT_FALSE(bad);
  const auto text = captured.str();
  EXPECT_NE(text.find("rank 2 of 4 (local 0) from Open MPI; store 127.0.0.1:29500"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("PMI_RANK='x'"), std::string::npos) << text;
}

}  // namespace
}  // namespace vessel::actors
