#pragma once
// The rendezvous store of a job that vessel-run launches itself, served by vessel-run: it outlives
// every rank, so a restarted rank 0 finds the keys of the job (the mesh addresses, anything the
// program set) where it left them, and publishes its new address where the survivors look for it.
// Without vessel-run (mpirun, srun, torchrun) rank 0 serves the store (actors/node_launch.cpp).

#include <memory>
#include <string>

#include "wire/result.hpp"

namespace vessel::tools {

/// Environment variable that tells the ranks "the store at VESSEL_STORE is served for you": rank 0
/// connects to it as a client instead of serving it.
inline constexpr const char* store_served_env = "VESSEL_STORE_SERVED";

class job_store {
 public:
  /// Serves a store on `host` (an address of this machine) at an ephemeral port. Its reactor thread
  /// takes no signals: vessel-run's main thread reads them from a signalfd.
  static result<std::unique_ptr<job_store>> serve(const std::string& host);
  ~job_store();
  job_store(const job_store&) = delete;
  job_store& operator=(const job_store&) = delete;

  /// host:port for VESSEL_STORE.
  const std::string& address() const noexcept { return address_; }

 private:
  struct parts;
  job_store();
  std::unique_ptr<parts> parts_;
  std::string address_;
};

}  // namespace vessel::tools
