#include "actors/store_rendezvous.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "actors/errc.hpp"
#include "io/log.hpp"
#include "io/tcp_socket.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

/// Reads "host:port" that rank 0 wrote into `path`, waiting for the file until `deadline`.
detailed_result<endpoint> read_store_file(const std::string& path, clock::time_point deadline) {
  for (;;) {
    std::ifstream in{path};
    std::string line;
    if (in && std::getline(in, line) && !line.empty()) {
      return parse_endpoint(line, "store file " + path);
    }
    if (clock::now() >= deadline) {
      return fail(make_error_code(errc::store_unreachable),
                  "rank 0 did not write the store address into " + path +
                      " in time (set VESSEL_STORE, or VESSEL_STORE_FILE on a shared directory)");
    }
    std::this_thread::sleep_for(10ms);
  }
}

detailed_result<void> write_store_file(const std::string& path, const endpoint& e) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out{tmp, std::ios::trunc};
    out << e.to_string() << "\n";
    if (!out) {
      return fail(make_error_code(errc::store_unreachable), "cannot write the store file " + tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return fail(make_error_code(errc::store_unreachable), "cannot rename " + tmp + " to " + path);
  }
  return outcome::success();
}

}  // namespace

std::string store_file_path(const env_view& env) {
  if (auto f = env.get("VESSEL_STORE_FILE"); f && !f->empty()) return *f;
  if (auto job = env.get("OMPI_MCA_ess_base_jobid"); job && !job->empty()) {
    std::string dir = "/tmp";
    if (auto t = env.get("TMPDIR"); t && !t->empty()) dir = *t;
    return dir + "/vessel-store-" + *job;
  }
  return {};
}

detailed_result<found_store> find_store(const env_view& env, io::reactor& r, std::uint32_t rank,
                                        std::uint32_t world, std::optional<endpoint> configured,
                                        clock::time_point deadline) {
  std::string file;
  if (!configured) {
    file = store_file_path(env);
    if (file.empty() && world > 1) {
      return fail(make_error_code(errc::store_unreachable),
                  "no rendezvous store: set VESSEL_STORE=host:port (rank 0 serves it), or "
                  "VESSEL_STORE_FILE=<path on a shared directory>");
    }
  }
  // vessel-run serves the store itself (it outlives every rank, so a restarted rank 0 finds it):
  // rank 0 is then a client like the others.
  const auto served = env.get("VESSEL_STORE_SERVED");
  const bool served_for_us = configured && served && *served == "1";
  found_store found;
  if (rank == 0 && !served_for_us) {
    io::socket_address bind_at = io::socket_address::loopback_v4(0);
    if (configured) {
      auto addresses = io::resolve(configured->host, configured->port);
      if (!addresses || addresses.value().empty()) {
        return fail(make_error_code(errc::store_unreachable),
                    "cannot resolve the store address " + configured->to_string());
      }
      bind_at = addresses.value().front();
    }
    found.server = std::make_unique<kv_store_server>(r);
    // From here on an error stops the server first: it may have work on the reactor.
    auto stopped = [&](detailed_error e) {
      found.server->stop();
      return e;
    };
    if (auto listened = found.server->listen(bind_at); !listened) {
      return stopped(fail(listened.error(), "rank 0 cannot serve the store at " +
                                                bind_at.to_string() + ": " +
                                                listened.error().message()));
    }
    if (auto started = found.server->start(); !started) {
      return stopped(
          fail(started.error(), "rank 0 cannot start the store: " + started.error().message()));
    }
    found.address = configured ? *configured : endpoint{"127.0.0.1", found.server->port()};
    if (!file.empty()) {
      if (auto written = write_store_file(file, found.address); !written) {
        return stopped(written.error());
      }
      found.published_in = file;
      log::get("actors").info("rank 0 serves the store at {} (published in {})",
                              found.address.to_string(), file);
    }
  } else if (configured) {
    found.address = *configured;
  } else {
    auto read = read_store_file(file, deadline);
    if (!read) return read.error();
    found.address = read.value();
  }
  return found;
}

}  // namespace vessel::actors
