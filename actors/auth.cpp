#include "actors/auth.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "actors/errc.hpp"

namespace vessel::actors {
namespace {

std::string errno_text(int e) {
  return std::error_code{e, std::generic_category()}.message();
}

// Closes a descriptor on every path out of load_token_file.
struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

template <class T>
void put_le(std::byte*& out, T value) noexcept {
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    *out++ = static_cast<std::byte>((static_cast<std::uint64_t>(value) >> (8 * i)) & 0xffu);
  }
}

}  // namespace

detailed_result<cluster_token> cluster_token::from_bytes(std::span<const std::byte> bytes,
                                                         std::string source) {
  if (bytes.size() < min_token_bytes) {
    return fail(errc::token_too_short, "the cluster token from " + source + " has " +
                                           std::to_string(bytes.size()) + " bytes; at least " +
                                           std::to_string(min_token_bytes) +
                                           " are required (e.g. `openssl rand -hex 32`)");
  }
  return cluster_token{std::vector<std::byte>(bytes.begin(), bytes.end()), std::move(source)};
}

cluster_token::cluster_token(cluster_token&& other) noexcept
    : bytes_{std::move(other.bytes_)}, source_{std::move(other.source_)} {
  other.bytes_.clear();
}

cluster_token& cluster_token::operator=(cluster_token&& other) noexcept {
  if (this != &other) {
    wipe();
    bytes_ = std::move(other.bytes_);
    source_ = std::move(other.source_);
    other.bytes_.clear();
  }
  return *this;
}

cluster_token::~cluster_token() {
  wipe();
}

void cluster_token::wipe() noexcept {
  if (!bytes_.empty()) OPENSSL_cleanse(bytes_.data(), bytes_.size());
}

detailed_result<cluster_token> load_token(const env_view& env) {
  if (auto token = env.get("VESSEL_TOKEN")) {
    auto result = cluster_token::from_bytes(std::as_bytes(std::span{*token}), "VESSEL_TOKEN");
    OPENSSL_cleanse(token->data(), token->size());
    return result;
  }
  if (auto path = env.get("VESSEL_TOKEN_FILE")) return load_token_file(*path);
  return fail(errc::token_missing,
              "no cluster token: set VESSEL_TOKEN to a shared secret of at least " +
                  std::to_string(min_token_bytes) +
                  " bytes, or VESSEL_TOKEN_FILE to a file only its owner can read (chmod 600); "
                  "e.g. `openssl rand -hex 32 > ~/.vessel_token && chmod 600 ~/.vessel_token`");
}

detailed_result<cluster_token> load_token_file(const std::string& path, std::string_view variable) {
  const std::string named = std::string{variable} + "='" + path + "'";
  const fd_guard file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY)};
  if (file.fd < 0) {
    return fail(errc::token_file_unreadable,
                "cannot open the token file " + named + ": " + errno_text(errno));
  }
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) {
    return fail(errc::token_file_unreadable,
                "cannot stat the token file " + named + ": " + errno_text(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return fail(errc::token_file_unreadable, "the token file " + named + " is not a regular file");
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return fail(errc::token_file_permissions,
                std::string{"permissions "} + mode + " for the token file " + named +
                    " are too open: it must not be accessible by group or others (chmod 600 " +
                    path + ")");
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_token_file_bytes) {
    return fail(errc::token_file_unreadable, "the token file " + named + " has " +
                                                 std::to_string(st.st_size) +
                                                 " bytes; a token "
                                                 "file holds at most " +
                                                 std::to_string(max_token_file_bytes));
  }
  std::vector<std::byte> bytes(max_token_file_bytes);
  std::size_t got = 0;
  while (got < bytes.size()) {
    const auto n = ::read(file.fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      OPENSSL_cleanse(bytes.data(), bytes.size());
      return fail(errc::token_file_unreadable,
                  "cannot read the token file " + named + ": " + errno_text(e));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  while (got > 0 && (bytes[got - 1] == std::byte{'\n'} || bytes[got - 1] == std::byte{'\r'})) {
    --got;
  }
  auto result = cluster_token::from_bytes(std::span{bytes.data(), got}, named);
  OPENSSL_cleanse(bytes.data(), bytes.size());
  return result;
}

detailed_result<wire::nonce> make_challenge() {
  wire::nonce n{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1) {
    return fail(errc::random_unavailable,
                "RAND_bytes failed: OpenSSL's random generator is not "
                "seeded or not available");
  }
  return n;
}

result<wire::nonce> compute_response(const cluster_token& token, const wire::nonce& challenge,
                                     std::span<const std::byte> context) {
  // One-shot HMAC over a stack buffer: challenge || context (both small and bounded).
  std::array<std::byte, wire::nonce_bytes + 256> message{};
  if (context.size() > message.size() - challenge.size()) return errc::crypto_failure;
  std::memcpy(message.data(), challenge.data(), challenge.size());
  if (!context.empty())
    std::memcpy(message.data() + challenge.size(), context.data(), context.size());
  wire::nonce out{};
  unsigned int out_len = 0;
  const auto key = token.bytes();
  const unsigned char* mac = HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                                  reinterpret_cast<const unsigned char*>(message.data()),
                                  challenge.size() + context.size(),
                                  reinterpret_cast<unsigned char*>(out.data()), &out_len);
  OPENSSL_cleanse(message.data(), message.size());
  if (mac == nullptr || out_len != out.size()) return errc::crypto_failure;
  return out;
}

bool responses_equal(const wire::nonce& a, const wire::nonce& b) noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::array<std::byte, response_context::encoded_bytes> response_context::encode() const noexcept {
  static constexpr char label[16] = {'v', 'e', 's', 's', 'e', 'l', '/', 'h',
                                     'e', 'l', 'l', 'o', '/', 'v', '1', '\0'};
  std::array<std::byte, encoded_bytes> out{};
  std::memcpy(out.data(), label, sizeof label);
  std::byte* p = out.data() + sizeof label;
  put_le(p, static_cast<std::uint8_t>(answering));
  put_le(p, version);
  put_le(p, world_size);
  put_le(p, responder_rank);
  put_le(p, responder_incarnation);
  put_le(p, responder_last_seq_seen);
  put_le(p, challenger_rank);
  put_le(p, challenger_incarnation);
  return out;
}

result<wire::nonce> compute_response(const cluster_token& token, const wire::nonce& challenge,
                                     const response_context& ctx) {
  const auto bytes = ctx.encode();
  return compute_response(token, challenge, std::span<const std::byte>{bytes});
}

}  // namespace vessel::actors
