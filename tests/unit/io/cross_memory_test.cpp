#include "io/cross_memory.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "io/errc.hpp"

namespace vessel::io {
namespace {

/// A forked child that fills `bytes` with its own pattern, tells us its token through a pipe and
/// waits until we close the other pipe: its memory stays there to read until then.
class child_process {
 public:
  explicit child_process(std::vector<std::byte>& bytes) {
    int up[2], down[2];
    EXPECT_EQ(::pipe(up), 0);
    EXPECT_EQ(::pipe(down), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(up[0]);
      ::close(down[1]);
      for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(i * 7 + 3);
      const process_token_offer offer = this_process_token();
      if (::write(up[1], &offer, sizeof offer) != sizeof offer) ::_exit(2);
      char c;
      (void)::read(down[0], &c, 1);  // returns at EOF: the parent is done
      ::_exit(0);
    }
    ::close(up[1]);
    ::close(down[0]);
    release_ = down[1];
    EXPECT_EQ(::read(up[0], &offer_, sizeof offer_), static_cast<ssize_t>(sizeof offer_));
    ::close(up[0]);
  }
  ~child_process() { reap(); }

  const process_token_offer& offer() const { return offer_; }

  /// Lets the child exit and waits for it: its pid then names nobody.
  void reap() {
    if (pid_ <= 0) return;
    ::close(release_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int release_ = -1;
  process_token_offer offer_;
};

TEST(cross_memory, a_pull_copies_what_the_other_process_holds) {
  std::vector<std::byte> bytes(3 << 20);  // the same address in the child after fork
  child_process child{bytes};
  std::vector<std::byte> into(bytes.size());
  const auto address = reinterpret_cast<std::uintptr_t>(bytes.data());
  ASSERT_FALSE(pull_from_process(child.offer(), address, into));
  for (std::size_t i = 0; i < into.size(); ++i) {
    ASSERT_EQ(into[i], std::byte(i * 7 + 3)) << "at " << i;  // the child's bytes, not ours (0)
  }
}

TEST(cross_memory, a_forked_child_draws_a_token_of_its_own) {
  std::vector<std::byte> bytes(16);
  child_process child{bytes};
  const process_token_offer mine = this_process_token();
  EXPECT_NE(child.offer().pid, mine.pid);
  EXPECT_NE(child.offer().token, mine.token);
  EXPECT_EQ(this_process_token().token, mine.token);  // drawn once per process
}

TEST(cross_memory, a_pid_that_names_another_process_is_caught_by_its_token) {
  std::vector<std::byte> bytes(4096);
  child_process child{bytes};
  process_token_offer wrong = child.offer();
  wrong.token.words[1] ^= 1;  // as if the pid were reused by a process that drew its own
  std::vector<std::byte> into(bytes.size());
  EXPECT_EQ(pull_from_process(wrong, reinterpret_cast<std::uintptr_t>(bytes.data()), into),
            make_error_code(errc::not_that_process));
}

TEST(cross_memory, an_unmapped_range_is_a_bad_address) {
  std::vector<std::byte> bytes(4096);
  child_process child{bytes};
  std::vector<std::byte> into(4096);
  EXPECT_EQ(pull_from_process(child.offer(), 4096, into),  // page 1 is never mapped
            std::make_error_code(std::errc::bad_address));
}

TEST(cross_memory, a_process_that_exited_is_gone) {
  std::vector<std::byte> bytes(4096);
  child_process child{bytes};
  const process_token_offer offer = child.offer();
  child.reap();
  std::vector<std::byte> into(bytes.size());
  EXPECT_EQ(pull_from_process(offer, reinterpret_cast<std::uintptr_t>(bytes.data()), into),
            std::make_error_code(std::errc::no_such_process));
}

TEST(cross_memory, an_empty_pull_only_checks_the_token) {
  const process_token_offer self = this_process_token();
  EXPECT_FALSE(pull_from_process(self, 0, {}));
}

TEST(cross_memory, a_push_writes_into_the_other_process) {
  std::vector<std::byte> bytes(3 << 20);
  child_process child{bytes};
  const auto address = reinterpret_cast<std::uintptr_t>(bytes.data());
  std::vector<std::byte> ours(bytes.size() / 2 + 5);
  for (std::size_t i = 0; i < ours.size(); ++i) ours[i] = std::byte(i * 13 + 1);
  const std::size_t at = 4096 + 3;  // neither end on a page boundary
  ASSERT_FALSE(push_to_process(child.offer(), address + at, ours));
  std::vector<std::byte> back(bytes.size());
  ASSERT_FALSE(pull_from_process(child.offer(), address, back));
  for (std::size_t i = 0; i < back.size(); ++i) {
    const bool pushed = i >= at && i < at + ours.size();
    ASSERT_EQ(back[i], pushed ? ours[i - at] : std::byte(i * 7 + 3)) << "at " << i;
  }
}

TEST(cross_memory, a_push_to_a_pid_that_names_another_process_writes_nothing) {
  std::vector<std::byte> bytes(4096);
  child_process child{bytes};
  process_token_offer wrong = child.offer();
  wrong.token.words[0] ^= 1;
  const auto address = reinterpret_cast<std::uintptr_t>(bytes.data());
  const std::vector<std::byte> ours(bytes.size(), std::byte{0xee});
  EXPECT_EQ(push_to_process(wrong, address, ours), make_error_code(errc::not_that_process));
  std::vector<std::byte> back(bytes.size());
  ASSERT_FALSE(pull_from_process(child.offer(), address, back));
  for (std::size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], std::byte(i * 7 + 3));
}

TEST(cross_memory, a_push_to_an_unmapped_range_or_a_process_gone_fails) {
  std::vector<std::byte> bytes(4096);
  child_process child{bytes};
  const std::vector<std::byte> ours(4096, std::byte{1});
  EXPECT_EQ(push_to_process(child.offer(), 4096, ours),
            std::make_error_code(std::errc::bad_address));
  const process_token_offer offer = child.offer();
  child.reap();
  EXPECT_EQ(push_to_process(offer, reinterpret_cast<std::uintptr_t>(bytes.data()), ours),
            std::make_error_code(std::errc::no_such_process));
}

}  // namespace
}  // namespace vessel::io
