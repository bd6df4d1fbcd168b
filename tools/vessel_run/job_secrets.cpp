#include "tools/vessel_run/job_secrets.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/rand.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <vector>

namespace vessel::tools {
namespace {

std::error_code last_error() {
  return {errno, std::system_category()};
}

}  // namespace

result<token_file> token_file::create() {
  std::array<unsigned char, 32> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    return std::make_error_code(std::errc::io_error);
  }
  static constexpr char hex_digits[] = "0123456789abcdef";
  std::string hex;
  for (auto b : bytes) {
    hex.push_back(hex_digits[b >> 4]);
    hex.push_back(hex_digits[b & 15]);
  }
  hex.push_back('\n');

  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string{tmp && *tmp ? tmp : "/tmp"} + "/vessel-run-XXXXXX";
  std::vector<char> dir(pattern.begin(), pattern.end());
  dir.push_back('\0');
  if (::mkdtemp(dir.data()) == nullptr) return last_error();  // mkdtemp makes it 0700
  std::string dir_path{dir.data()};
  std::string path = dir_path + "/token";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    auto e = last_error();
    ::rmdir(dir_path.c_str());
    return e;
  }
  bool written = ::write(fd, hex.data(), hex.size()) == static_cast<ssize_t>(hex.size());
  auto e = last_error();
  ::close(fd);
  if (!written) {
    ::unlink(path.c_str());
    ::rmdir(dir_path.c_str());
    return e;
  }
  return token_file{std::move(dir_path), std::move(path)};
}

token_file::token_file(token_file&& other) noexcept
    : dir_(std::move(other.dir_)), path_(std::move(other.path_)) {
  other.dir_.clear();
  other.path_.clear();
}

token_file::~token_file() {
  if (!path_.empty()) ::unlink(path_.c_str());
  if (!dir_.empty()) ::rmdir(dir_.c_str());
}

result<std::uint16_t> pick_free_port(const std::string& bind_address) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, bind_address.c_str(), &addr.sin_addr) != 1) {
    return std::make_error_code(std::errc::invalid_argument);
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return last_error();
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    auto e = last_error();
    ::close(fd);
    return e;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace vessel::tools
