// One rank of the vessel-run network namespace test: rank 0 listens on its host's address at the
// store port vessel-run chose, rank 1 connects there, and each prints what the other sent. Raw
// sockets, so that the test depends on nothing but the launcher.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

sockaddr_in address_of(const std::string& host, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  return a;
}

bool exchange(int fd, const std::string& mine) {
  std::string line = mine + "\n";
  if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return false;
  std::string got;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') got.push_back(c);
  std::printf("got: %s\n", got.c_str());
  return !got.empty();
}

}  // namespace

int main() {
  std::string store = env("VESSEL_STORE");
  auto colon = store.rfind(':');
  if (colon == std::string::npos) return 3;
  auto addr = address_of(store.substr(0, colon), std::atoi(store.c_str() + colon + 1));
  std::string hello = "hello from " + env("VESSEL_HOST");
  int rank = std::atoi(env("VESSEL_RANK").c_str());

  if (rank == 0) {
    int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listener, 1) != 0) {
      std::perror("bind/listen");
      return 4;
    }
    int peer = ::accept(listener, nullptr, nullptr);
    return peer >= 0 && exchange(peer, hello) ? 0 : 5;
  }
  // The listener may not be up yet: retry for up to 10 s.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      return exchange(fd, hello) ? 0 : 5;
    }
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::perror("connect");
  return 6;
}
