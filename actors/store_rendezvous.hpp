#pragma once
// How a rank finds the rendezvous store (the key-value store rank 0 serves, actors/kv_store_*):
// at VESSEL_STORE (or a launcher's address), else through a file rank 0 writes. The non-CAF
// runtime and launched_node start the same way.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "actors/detailed_error.hpp"
#include "actors/endpoint.hpp"
#include "actors/env.hpp"
#include "actors/kv_store_server.hpp"

namespace vessel::io {
class reactor;
}

namespace vessel::actors {

/// Where a rank finds the store when VESSEL_STORE is unset but a launcher started several ranks
/// (mpirun sets no address): rank 0 serves the store on an ephemeral port and writes "host:port"
/// into this file (atomically: a rename), the others read it. VESSEL_STORE_FILE names the file;
/// without it, under Open MPI, ${TMPDIR:-/tmp}/vessel-store-<OMPI_MCA_ess_base_jobid>, unique per
/// mpirun. Empty when neither applies.
std::string store_file_path(const env_view& env);

/// The store as one rank found it.
struct found_store {
  endpoint address;                          ///< where every rank connects
  std::unique_ptr<kv_store_server> server;   ///< rank 0's, unless vessel-run serves it
  std::string published_in;                  ///< the file rank 0 wrote (its owner removes it)
};

/// Rank 0 serves the store on `r` (at `configured`, else on an ephemeral loopback port) unless
/// VESSEL_STORE_SERVED=1 says that the launcher does, and publishes the address in
/// store_file_path() when none was configured; another rank without an address reads that file
/// until `deadline`. Errors say what to set.
detailed_result<found_store> find_store(const env_view& env, io::reactor& r, std::uint32_t rank,
                                        std::uint32_t world, std::optional<endpoint> configured,
                                        std::chrono::steady_clock::time_point deadline);

}  // namespace vessel::actors
