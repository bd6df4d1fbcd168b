// VESSEL_BIND: the policy (which core a rank gets, when it gets none) and the binding itself,
// which runs in a forked child (a death test) so that this test process keeps every CPU.
#include "actors/cpu_binding.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "actors/errc.hpp"

namespace vessel::actors {
namespace {

TEST(cpu_binding, parses_the_three_policies_and_names_the_variable_on_anything_else) {
  EXPECT_EQ(parse_cpu_binding("auto").value(), cpu_binding::automatic);
  EXPECT_EQ(parse_cpu_binding("core").value(), cpu_binding::core);
  EXPECT_EQ(parse_cpu_binding("none").value(), cpu_binding::none);
  auto bad = parse_cpu_binding("cores");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, make_error_code(errc::bad_binding_override));
  EXPECT_NE(bad.error().detail.find("VESSEL_BIND='cores'"), std::string::npos);
}

TEST(cpu_binding, auto_gives_each_rank_its_own_core_while_the_ranks_fit_and_none_beyond) {
  EXPECT_EQ(core_for_rank(cpu_binding::automatic, 0, 2, 2), 0);
  EXPECT_EQ(core_for_rank(cpu_binding::automatic, 1, 2, 2), 1);
  EXPECT_EQ(core_for_rank(cpu_binding::automatic, 1, 2, 8), 1);
  // Oversubscribed (as mpirun -n 4 on two cores): nobody is bound.
  for (std::uint32_t r = 0; r < 4; ++r) EXPECT_EQ(core_for_rank(cpu_binding::automatic, r, 4, 2), -1);
}

TEST(cpu_binding, core_binds_even_when_oversubscribed_consecutive_ranks_together) {
  // Four ranks on two cores: 0 and 1 share core 0, 2 and 3 core 1.
  EXPECT_EQ(core_for_rank(cpu_binding::core, 0, 4, 2), 0);
  EXPECT_EQ(core_for_rank(cpu_binding::core, 1, 4, 2), 0);
  EXPECT_EQ(core_for_rank(cpu_binding::core, 2, 4, 2), 1);
  EXPECT_EQ(core_for_rank(cpu_binding::core, 3, 4, 2), 1);
  // Uneven: five ranks on two cores are three and two; eight on three cores 3, 3, 2.
  const int five[] = {0, 0, 0, 1, 1};
  for (std::uint32_t r = 0; r < 5; ++r) {
    EXPECT_EQ(core_for_rank(cpu_binding::core, r, 5, 2), five[r]) << r;
  }
  const int eight[] = {0, 0, 0, 1, 1, 1, 2, 2};
  for (std::uint32_t r = 0; r < 8; ++r) {
    EXPECT_EQ(core_for_rank(cpu_binding::core, r, 8, 3), eight[r]) << r;
  }
  // Room for every rank: the n-th core, as auto does.
  EXPECT_EQ(core_for_rank(cpu_binding::core, 1, 2, 8), 1);
}

TEST(cpu_binding, none_never_binds_nor_does_a_host_without_cores) {
  EXPECT_EQ(core_for_rank(cpu_binding::none, 0, 1, 2), -1);
  EXPECT_EQ(core_for_rank(cpu_binding::core, 0, 1, 0), -1);  // no topology: nothing to bind to
}

cpu_set_t affinity_of(pthread_t t) {
  cpu_set_t set;
  CPU_ZERO(&set);
  (void)pthread_getaffinity_np(t, sizeof set, &set);
  return set;
}

TEST(cpu_binding, none_leaves_the_affinity_alone) {
  const cpu_set_t before = affinity_of(pthread_self());
  auto report = bind_process(cpu_binding::none, 0, 1);
  ASSERT_TRUE(report) << report.error().detail;
  EXPECT_EQ(report.value().core, -1);
  EXPECT_EQ(report.value().reason, "VESSEL_BIND=none");
  const cpu_set_t after = affinity_of(pthread_self());
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

// In a child: the last core of this machine, for a thread started before the binding (the
// reactor's, CAF's) and one started after; the child exits 0 only if all of it held.
TEST(cpu_binding, binds_every_thread_of_the_process_to_one_core) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::atomic<bool> stop{false};
        std::thread before([&] {
          while (!stop.load()) std::this_thread::yield();
        });
        // local_rank 1 of 2: core 1 where there are two cores or more, core 0 on one.
        auto report = bind_process(cpu_binding::core, 1, 2);
        bool ok = report && report.value().core >= 0 && !report.value().cpus.empty();
        cpu_set_t mine = affinity_of(pthread_self());
        cpu_set_t theirs = affinity_of(before.native_handle());
        cpu_set_t later_set;
        std::thread later([&] { later_set = affinity_of(pthread_self()); });
        later.join();
        stop = true;
        before.join();
        ok = ok && CPU_EQUAL(&mine, &theirs) && CPU_EQUAL(&mine, &later_set);
        // One core: its hardware threads only (two at most on the machines we know).
        ok = ok && CPU_COUNT(&mine) >= 1 && CPU_COUNT(&mine) <= 2;
        if (report && report.value().cores >= 2) ok = ok && report.value().core == 1;
        std::_Exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(cpu_binding, auto_with_more_ranks_than_cores_says_why_it_did_not_bind) {
  const cpu_set_t before = affinity_of(pthread_self());
  auto report = bind_process(cpu_binding::automatic, 0, 100000);
  ASSERT_TRUE(report) << report.error().detail;
  EXPECT_EQ(report.value().core, -1);
  EXPECT_GE(report.value().cores, 1u);
  EXPECT_NE(report.value().reason.find("oversubscribed"), std::string::npos) << report.value().reason;
  const cpu_set_t after = affinity_of(pthread_self());
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

}  // namespace
}  // namespace vessel::actors
