#include "io/single_copy_probe.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/forbid_process_reads.hpp"

namespace vessel::io {
namespace {

using std::chrono::nanoseconds;

single_copy_rate rate(nanoseconds kernel, nanoseconds user) {
  single_copy_rate r;
  r.kernel_copy = kernel;
  r.user_copy = user;
  return r;
}

TEST(single_copy_probe, pulls_pay_while_the_kernel_copy_takes_at_most_1_85_user_copies) {
  EXPECT_TRUE(rate(nanoseconds{20'000}, nanoseconds{25'000}).pays());
  EXPECT_TRUE(rate(nanoseconds{37'000}, nanoseconds{20'000}).pays());
  EXPECT_FALSE(rate(nanoseconds{37'001}, nanoseconds{20'000}).pays());
  // The Intel Xeon KVM guest, where pulled collectives ran 1.2-1.4x faster.
  EXPECT_TRUE(rate(nanoseconds{54'900}, nanoseconds{31'000}).pays());
  // The AMD EPYC PVM guests, where a pulled ring ran at half speed.
  EXPECT_FALSE(rate(nanoseconds{52'000}, nanoseconds{23'000}).pays());
}

TEST(single_copy_probe, split_copies_pay_while_the_kernel_copy_takes_at_most_2_5_user_copies) {
  EXPECT_TRUE(rate(nanoseconds{50'000}, nanoseconds{20'000}).pays_split());
  EXPECT_FALSE(rate(nanoseconds{50'001}, nanoseconds{20'000}).pays_split());
  // The Intel Xeon KVM guest on 2026-12-06 (2.29: no single pull, but lending won 2.5x).
  EXPECT_FALSE(rate(nanoseconds{68'700}, nanoseconds{30'000}).pays());
  EXPECT_TRUE(rate(nanoseconds{68'700}, nanoseconds{30'000}).pays_split());
  // The AMD EPYC PVM guests at their slowest reading (3.8).
  EXPECT_FALSE(rate(nanoseconds{87'400}, nanoseconds{23'000}).pays_split());
}

TEST(single_copy_probe, a_refused_or_unmeasured_read_never_pays) {
  single_copy_rate refused = rate(nanoseconds{1}, nanoseconds{1'000});
  refused.error = std::make_error_code(std::errc::operation_not_permitted);
  EXPECT_FALSE(refused.pays());
  EXPECT_FALSE(refused.pays_split());
  EXPECT_FALSE(rate(nanoseconds{0}, nanoseconds{1'000}).pays());
  EXPECT_FALSE(rate(nanoseconds{0}, nanoseconds{1'000}).pays_split());
}

TEST(single_copy_probe, measures_both_copies_of_this_process) {
  const single_copy_rate r = measure_single_copy();
  ASSERT_FALSE(r.error) << r.error.message();
  EXPECT_GT(r.kernel_copy.count(), 0);
  EXPECT_GT(r.user_copy.count(), 0);
  std::printf("%zu KiB: process_vm_readv %.1f us, memcpy %.1f us: pulls %s\n",
              single_copy_probe_bytes >> 10, r.kernel_copy.count() / 1e3, r.user_copy.count() / 1e3,
              r.pays() ? "pay" : "do not pay");
}

TEST(single_copy_probe, is_measured_once_per_process) {
  const single_copy_rate& first = single_copy_rate_here();
  EXPECT_EQ(&first, &single_copy_rate_here());
  EXPECT_EQ(first.kernel_copy, single_copy_rate_here().kernel_copy);
}

TEST(single_copy_probe, a_process_that_may_not_read_memory_is_told_so) {
  // The filter cannot be lifted again: in a child.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!test::forbid_reading_other_processes()) ::_exit(2);
    const single_copy_rate r = measure_single_copy();
    ::_exit(r.error == std::errc::operation_not_permitted && !r.pays() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: no seccomp filter here, 1: the probe did not see EPERM";
}

}  // namespace
}  // namespace vessel::io
