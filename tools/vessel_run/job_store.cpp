#include "tools/vessel_run/job_store.hpp"

#include <pthread.h>
#include <signal.h>

#include "actors/kv_store_server.hpp"
#include "io/reactor.hpp"
#include "io/tcp_socket.hpp"

namespace vessel::tools {

struct job_store::parts {
  io::reactor reactor;
  std::unique_ptr<actors::kv_store_server> server;
};

job_store::job_store() : parts_{std::make_unique<parts>()} {}

job_store::~job_store() {
  if (parts_->server) parts_->server->stop();
  parts_->reactor.stop();
  parts_->server.reset();
}

result<std::unique_ptr<job_store>> job_store::serve(const std::string& host) {
  auto addresses = io::resolve(host, 0);
  if (!addresses) return addresses.error();
  if (addresses.value().empty()) return make_error_code(std::errc::address_not_available);
  std::unique_ptr<job_store> s{new job_store};
  // Threads inherit the mask: the reactor's thread is born with every signal blocked, so SIGCHLD
  // and SIGINT reach the launcher's signalfd and never this thread.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  auto started = s->parts_->reactor.start();
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (!started) return started.error();
  s->parts_->server = std::make_unique<actors::kv_store_server>(s->parts_->reactor);
  if (auto listened = s->parts_->server->listen(addresses.value().front()); !listened) {
    return listened.error();
  }
  if (auto serving = s->parts_->server->start(); !serving) return serving.error();
  const bool v6 = host.find(':') != std::string::npos;
  s->address_ = (v6 ? "[" + host + "]" : host) + ":" + std::to_string(s->parts_->server->port());
  return s;
}

}  // namespace vessel::tools
