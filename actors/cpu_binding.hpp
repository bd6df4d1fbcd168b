#pragma once
// Binding a rank process to one core of its host, as Open MPI does by default (mpirun binds each
// rank to a core while a host runs no more ranks than it has cores, and binds nothing when
// oversubscribed).
//
// Why: a rank's caller and reactor threads then stay on the core whose caches hold its buffers,
// and a comparison with mpirun compares like with like. Measured on 2 vCPUs
// (docs/io_performance.md, "Ranks bound to cores"): the medians of 2-rank collectives move within
// the noise, the spread of the slow runs narrows (16 MiB allreduce over TCP: 9.5-10.5 ms
// bound, 9.0-11.7 unbound).
//
// VESSEL_BIND: auto (the default of comm::init: core when this host's ranks fit its cores, else
// none), core (always; more ranks than cores share them in runs of consecutive ranks, which puts
// a ring's or a pipeline's neighbours on one core: docs/collective_algorithms.md, "Oversubscribed
// ranks bound in runs of consecutive ranks"), none. The topology comes from hwloc, restricted to
// the CPUs this process may use (a cgroup or taskset), so a core is every hardware thread of one
// physical core.

#include <cstdint>
#include <string>
#include <string_view>

#include "actors/detailed_error.hpp"
#include "actors/env.hpp"
#include "wire/result.hpp"

namespace vessel::actors {

enum class cpu_binding : std::uint8_t { none, core, automatic };

/// "none", "core" or "auto"; anything else is an error naming VESSEL_BIND.
detailed_result<cpu_binding> parse_cpu_binding(std::string_view text);
std::string_view to_string(cpu_binding b) noexcept;
/// VESSEL_BIND parsed, or `fallback` when it is unset or empty.
detailed_result<cpu_binding> cpu_binding_from_env(const env_view& env, cpu_binding fallback);

/// The CPUs this process may run on (its affinity mask), at least 1: what the host's ranks share
/// before any is bound. More ranks on the host than this is oversubscribed.
unsigned usable_cpus() noexcept;

/// Which core (an index among the usable cores) a rank binds to, or -1 for none: a pure function
/// of the policy and the counts, so that the policy is tested without touching affinity.
int core_for_rank(cpu_binding policy, std::uint32_t local_rank, std::uint32_t local_ranks,
                  std::uint32_t cores) noexcept;

/// What bind_process() did, for the start-up log line.
struct binding_report {
  int core = -1;         ///< index among the usable cores; -1: not bound
  std::uint32_t cores = 0;  ///< usable cores on this host
  std::string cpus;      ///< the CPUs bound to ("2,34"), empty when not bound
  std::string reason;    ///< why not bound, when not
};

/// Binds every thread of this process (and the threads it starts later) to the core that
/// core_for_rank() names. Errors come from hwloc (topology or binding refused) and say so.
detailed_result<binding_report> bind_process(cpu_binding policy, std::uint32_t local_rank,
                                             std::uint32_t local_ranks);

/// bind_process() for a rank process, with the start-up log line (info) saying where rank `rank`
/// went or why it was not bound.
detailed_result<binding_report> bind_rank_process(cpu_binding policy, std::uint32_t rank,
                                                  std::uint32_t local_rank,
                                                  std::uint32_t local_ranks);

}  // namespace vessel::actors
