#include "actors/auth.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "actors/errc.hpp"

namespace vessel::actors {
namespace {

using vars = std::map<std::string, std::string, std::less<>>;

std::vector<std::byte> repeated(std::uint8_t value, std::size_t n) {
  return std::vector<std::byte>(n, std::byte{value});
}

std::string hex(std::span<const std::byte> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (auto b : bytes) {
    out += digits[std::to_integer<unsigned>(b) >> 4];
    out += digits[std::to_integer<unsigned>(b) & 0xf];
  }
  return out;
}

cluster_token token_of(std::string_view text) {
  return cluster_token::from_bytes(std::as_bytes(std::span{text}), "test").value();
}

// A temporary file with `contents` and `mode`, removed at the end of the test.
class temp_file {
 public:
  temp_file(std::string_view contents, mode_t mode) {
    const int fd = ::mkstemp(path_.data());
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::write(fd, contents.data(), contents.size()), static_cast<ssize_t>(contents.size()));
    ::close(fd);
    EXPECT_EQ(::chmod(path_.c_str(), mode), 0);
  }
  ~temp_file() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_ = "/tmp/vessel_token_XXXXXX";
};

// RFC 4231 test case 3: key = 0xaa x 20, data = 0xdd x 50. The data is split at 32 bytes into
// the challenge and the context, exactly as compute_response concatenates them.
TEST(auth, hmac_sha256_matches_rfc4231_test_case_3) {
  auto key = repeated(0xaa, 20);
  auto token = cluster_token::from_bytes(key, "rfc4231").value();
  wire::nonce challenge;
  challenge.fill(std::byte{0xdd});
  auto context = repeated(0xdd, 18);
  auto mac = compute_response(token, challenge, std::span<const std::byte>{context});
  ASSERT_TRUE(mac);
  EXPECT_EQ(hex(mac.value()), "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
}

// RFC 4231 test case 4: key = 0x01..0x19, data = 0xcd x 50.
TEST(auth, hmac_sha256_matches_rfc4231_test_case_4) {
  std::vector<std::byte> key;
  for (int i = 1; i <= 25; ++i) key.push_back(static_cast<std::byte>(i));
  auto token = cluster_token::from_bytes(key, "rfc4231").value();
  wire::nonce challenge;
  challenge.fill(std::byte{0xcd});
  auto context = repeated(0xcd, 18);
  auto mac = compute_response(token, challenge, std::span<const std::byte>{context});
  ASSERT_TRUE(mac);
  EXPECT_EQ(hex(mac.value()), "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
}

TEST(auth, every_context_field_changes_the_response) {
  auto token = token_of("0123456789abcdef0123");
  wire::nonce challenge;
  challenge.fill(std::byte{7});
  response_context base;
  base.world_size = 4;
  base.responder_rank = 1;
  base.responder_incarnation = 3;
  base.responder_last_seq_seen = 10;
  base.challenger_rank = 2;
  base.challenger_incarnation = 5;
  const auto reference = compute_response(token, challenge, base).value();
  std::vector<response_context> variants(8, base);
  variants[0].answering = response_context::role::initiator_answers;
  variants[1].version = 2;
  variants[2].world_size = 5;
  variants[3].responder_rank = 3;
  variants[4].responder_incarnation = 4;
  variants[5].responder_last_seq_seen = 11;
  variants[6].challenger_rank = 0;
  variants[7].challenger_incarnation = 6;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    EXPECT_FALSE(
        responses_equal(reference, compute_response(token, challenge, variants[i]).value()))
        << "context field " << i << " is not bound into the response";
  }
  EXPECT_TRUE(responses_equal(reference, compute_response(token, challenge, base).value()));
  EXPECT_FALSE(responses_equal(
      reference, compute_response(token_of("0123456789abcdef0124"), challenge, base).value()))
      << "another token gives another response";
}

TEST(auth, responses_equal_compares_every_byte) {
  wire::nonce a;
  a.fill(std::byte{1});
  wire::nonce b = a;
  EXPECT_TRUE(responses_equal(a, b));
  b.back() = std::byte{2};
  EXPECT_FALSE(responses_equal(a, b));
  b = a;
  b.front() = std::byte{0};
  EXPECT_FALSE(responses_equal(a, b));
}

TEST(auth, challenges_are_random) {
  auto a = make_challenge();
  auto b = make_challenge();
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  EXPECT_NE(a.value(), b.value());
  EXPECT_NE(a.value(), wire::nonce{});
}

TEST(auth, token_comes_from_vessel_token_first) {
  temp_file file{"file-token-0123456789", 0600};
  auto t = load_token(env_view::from_map(
      {{"VESSEL_TOKEN", "env-token-0123456789"}, {"VESSEL_TOKEN_FILE", file.path()}}));
  ASSERT_TRUE(t) << t.error().detail;
  EXPECT_EQ(t.value().source(), "VESSEL_TOKEN");
  EXPECT_EQ(t.value().bytes().size(), 20u);
}

TEST(auth, token_comes_from_the_file_when_vessel_token_is_unset) {
  temp_file file{"file-token-0123456789\n", 0600};
  auto t = load_token(env_view::from_map({{"VESSEL_TOKEN_FILE", file.path()}}));
  ASSERT_TRUE(t) << t.error().detail;
  EXPECT_EQ(t.value().bytes().size(), 21u) << "the trailing newline is not part of the token";
  EXPECT_NE(t.value().source().find(file.path()), std::string::npos);
  // Same bytes as the same text given directly.
  wire::nonce c{};
  EXPECT_EQ(
      compute_response(t.value(), c, std::span<const std::byte>{}).value(),
      compute_response(token_of("file-token-0123456789"), c, std::span<const std::byte>{}).value());
}

TEST(auth, missing_token_says_how_to_set_one) {
  auto t = load_token(env_view::from_map({}));
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, make_error_code(errc::token_missing));
  EXPECT_NE(t.error().detail.find("VESSEL_TOKEN"), std::string::npos);
  EXPECT_NE(t.error().detail.find("VESSEL_TOKEN_FILE"), std::string::npos);
  EXPECT_NE(t.error().detail.find("chmod 600"), std::string::npos);
}

TEST(auth, short_tokens_are_refused) {
  auto t = load_token(env_view::from_map({{"VESSEL_TOKEN", "fifteen-bytes!!"}}));
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, make_error_code(errc::token_too_short));
  EXPECT_NE(t.error().detail.find("15 bytes"), std::string::npos) << t.error().detail;
  EXPECT_EQ(t.error().detail.find("fifteen"), std::string::npos) << "the secret must not be logged";

  auto empty = load_token(env_view::from_map({{"VESSEL_TOKEN", ""}}));
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, make_error_code(errc::token_too_short));

  temp_file file{"short\n", 0600};
  auto f = load_token_file(file.path());
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, make_error_code(errc::token_too_short));
  EXPECT_TRUE(load_token(env_view::from_map({{"VESSEL_TOKEN", "exactly-16-bytes"}})));
}

TEST(auth, token_file_readable_by_group_or_others_is_refused_like_ssh) {
  for (mode_t mode : {0644, 0640, 0604, 0620, 0602, 0610}) {
    temp_file file{"file-token-0123456789", mode};
    auto t = load_token_file(file.path());
    ASSERT_FALSE(t) << "mode " << std::oct << mode;
    EXPECT_EQ(t.error().code, make_error_code(errc::token_file_permissions));
    EXPECT_NE(t.error().detail.find("chmod 600 " + file.path()), std::string::npos)
        << t.error().detail;
    EXPECT_NE(t.error().detail.find("VESSEL_TOKEN_FILE='" + file.path() + "'"), std::string::npos)
        << t.error().detail;
  }
  for (mode_t mode : {0600, 0400}) {
    temp_file file{"file-token-0123456789", mode};
    EXPECT_TRUE(load_token_file(file.path())) << "mode " << std::oct << mode;
  }
}

TEST(auth, unreadable_token_files_are_refused_with_their_path) {
  auto missing = load_token_file("/nonexistent/vessel/token");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, make_error_code(errc::token_file_unreadable));
  EXPECT_NE(missing.error().detail.find("/nonexistent/vessel/token"), std::string::npos);

  auto directory = load_token_file("/tmp");
  ASSERT_FALSE(directory);
  EXPECT_EQ(directory.error().code, make_error_code(errc::token_file_unreadable));

  temp_file huge{std::string(max_token_file_bytes + 1, 'x'), 0600};
  auto big = load_token_file(huge.path());
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, make_error_code(errc::token_file_unreadable));
}

TEST(auth, a_moved_token_keeps_its_bytes) {
  auto a = token_of("0123456789abcdef-moved");
  const auto size = a.bytes().size();
  cluster_token b = std::move(a);
  EXPECT_EQ(b.bytes().size(), size);
  cluster_token c = token_of("another-token-0123456");
  c = std::move(b);
  EXPECT_EQ(c.bytes().size(), size);
}

}  // namespace
}  // namespace vessel::actors
