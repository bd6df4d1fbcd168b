#pragma once
// Where a process learns its rank, the world size and the rendezvous store: from VESSEL_* or,
// failing that, from whatever launcher started it (Open MPI, PMI/Hydra, Slurm, torchrun).

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "actors/detailed_error.hpp"
#include "actors/endpoint.hpp"
#include "actors/env.hpp"

namespace vessel::actors {

/// The variables one launcher sets, in order of precedence (launch_sources()).
struct launch_source {
  std::string_view name;       ///< "VESSEL_*", "Open MPI", "PMI", "Slurm", "torchrun"
  std::string_view rank_var;   ///< this process's rank in the world
  std::string_view size_var;   ///< the world size
  std::string_view local_var;  ///< rank among the processes on this host
};

/// Every source detect_launch() consults, highest precedence first:
/// VESSEL_RANK/VESSEL_WORLD_SIZE/VESSEL_LOCAL_RANK, OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK,
/// PMI_RANK/PMI_SIZE/MPI_LOCALRANKID, SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID,
/// RANK/WORLD_SIZE/LOCAL_RANK.
std::span<const launch_source> launch_sources() noexcept;

/// Source name reported when no launcher variable is set: one process, rank 0 of 1 (as an MPI
/// singleton), so that `./app` runs without a launcher.
inline constexpr std::string_view singleton_source = "none (single process)";

/// What the launcher told this process.
struct launch_info {
  int rank = 0;
  int world_size = 1;
  int local_rank = -1;            ///< rank on this host; -1 when the source does not say
  std::optional<endpoint> store;  ///< VESSEL_STORE, else MASTER_ADDR:MASTER_PORT, else none
  std::string source;             ///< launch_source::name, or singleton_source
  std::string store_source;       ///< "VESSEL_STORE", "MASTER_ADDR/MASTER_PORT" or empty
};

/// Reads rank, world size, local rank and store from `env`. The first source (launch_sources()
/// order) with its rank or size variable set wins, and must then be complete and consistent: a
/// half-set source is an error, not a fall-through, because the user meant it. Lower sources that
/// disagree are ignored on purpose: mpirun inside an sbatch script legitimately leaves
/// SLURM_PROCID=0 beside a different OMPI_COMM_WORLD_RANK. Errors name the variable and value.
detailed_result<launch_info> detect_launch(const env_view& env);

/// detect_launch(), then the start-up line on the "actors" logger (io/log.hpp): describe() at info,
/// or the error's detail at error, so that every rank says where its rank came from.
detailed_result<launch_info> detect_launch_and_log(const env_view& env);

/// The start-up log line: "rank 2 of 4 (local 0) from Open MPI; store 127.0.0.1:29500
/// (VESSEL_STORE)".
std::string describe(const launch_info& info);

}  // namespace vessel::actors
