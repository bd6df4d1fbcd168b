#include "actors/cpu_binding.hpp"

#include <hwloc.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "actors/errc.hpp"
#include "io/log.hpp"

namespace vessel::actors {

detailed_result<cpu_binding> parse_cpu_binding(std::string_view text) {
  if (text == "auto") return cpu_binding::automatic;
  if (text == "core") return cpu_binding::core;
  if (text == "none") return cpu_binding::none;
  return fail(make_error_code(errc::bad_binding_override),
              "VESSEL_BIND='" + std::string{text} + "' is not one of auto, core, none");
}

detailed_result<cpu_binding> cpu_binding_from_env(const env_view& env, cpu_binding fallback) {
  auto v = env.get("VESSEL_BIND");
  if (!v || v->empty()) return fallback;
  return parse_cpu_binding(*v);
}

std::string_view to_string(cpu_binding b) noexcept {
  switch (b) {
    case cpu_binding::none: return "none";
    case cpu_binding::core: return "core";
    case cpu_binding::automatic: return "auto";
  }
  return "?";
}

unsigned usable_cpus() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) {
    return static_cast<unsigned>(CPU_COUNT(&set));
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : hw;
}

int core_for_rank(cpu_binding policy, std::uint32_t local_rank, std::uint32_t local_ranks,
                  std::uint32_t cores) noexcept {
  if (policy == cpu_binding::none || cores == 0) return -1;
  // Oversubscribed: a rank bound to a shared core could not move off a busy neighbour, and the
  // waiters yield there anyway (caller_progress_config::yield_when_idle).
  if (policy == cpu_binding::automatic && local_ranks > cores) return -1;
  if (local_ranks <= cores || local_rank >= local_ranks) {
    return static_cast<int>(local_rank % cores);
  }
  // More ranks than cores: consecutive ranks share a core (0 and 1, then 2 and 3 on four ranks
  // and two cores), so a ring's or a chain's neighbour is often on the same core, where what one
  // sends is still in the cache the other copies it from and the sender's wait hands the core to
  // the receiver.
  return static_cast<int>(std::uint64_t{local_rank} * cores / local_ranks);
}

namespace {

struct topology_deleter {
  void operator()(hwloc_topology* t) const noexcept { hwloc_topology_destroy(t); }
};
using topology_ptr = std::unique_ptr<hwloc_topology, topology_deleter>;

detailed_error hwloc_failure(const char* what) {
  return fail(make_error_code(errc::cpu_binding_failed),
              std::string{"VESSEL_BIND: hwloc "} + what + " failed: " + std::strerror(errno));
}

}  // namespace

detailed_result<binding_report> bind_process(cpu_binding policy, std::uint32_t local_rank,
                                             std::uint32_t local_ranks) {
  binding_report report;
  if (policy == cpu_binding::none) {
    report.reason = "VESSEL_BIND=none";
    return report;
  }
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return hwloc_failure("topology_init");
  topology_ptr topology{raw};
  // CPUs and cores only: I/O discovery (PCI, GPUs) costs milliseconds and tells us nothing here.
  (void)hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_NONE);
  if (hwloc_topology_load(raw) != 0) return hwloc_failure("topology_load");
  // The loaded topology holds only what this process may use (cgroup, taskset): hwloc drops the
  // disallowed CPUs unless told to keep them.
  int cores = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_CORE);
  hwloc_obj_type_t unit = HWLOC_OBJ_CORE;
  if (cores <= 0) {  // no core level reported (some VMs): a hardware thread is a core
    cores = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_PU);
    unit = HWLOC_OBJ_PU;
  }
  report.cores = cores > 0 ? static_cast<std::uint32_t>(cores) : 0;
  report.core = core_for_rank(policy, local_rank, local_ranks, report.cores);
  if (report.core < 0) {
    report.reason = std::to_string(local_ranks) + " rank(s) on this host, " +
                    std::to_string(report.cores) + " core(s): oversubscribed, not bound";
    return report;
  }
  hwloc_obj_t core = hwloc_get_obj_by_type(raw, unit, static_cast<unsigned>(report.core));
  if (core == nullptr || core->cpuset == nullptr) return hwloc_failure("get_obj_by_type");
  // Every thread there is (reactor, CAF workers, the store's) and every one started later.
  if (hwloc_set_cpubind(raw, core->cpuset, HWLOC_CPUBIND_PROCESS) != 0) {
    return hwloc_failure("set_cpubind");
  }
  char* list = nullptr;
  if (hwloc_bitmap_list_asprintf(&list, core->cpuset) >= 0 && list != nullptr) {
    report.cpus = list;
    std::free(list);
  }
  return report;
}

detailed_result<binding_report> bind_rank_process(cpu_binding policy, std::uint32_t rank,
                                                  std::uint32_t local_rank,
                                                  std::uint32_t local_ranks) {
  auto bound = bind_process(policy, local_rank, local_ranks);
  if (!bound) return bound;
  const auto& r = bound.value();
  if (r.core >= 0) {
    log::get("actors").info(
        "rank {}: bound to core {} of {} (CPUs {}), rank {} of {} on this host (VESSEL_BIND={})",
        rank, r.core, r.cores, r.cpus, local_rank, local_ranks, to_string(policy));
  } else if (policy != cpu_binding::none) {
    log::get("actors").info("rank {}: not bound to a core: {}", rank, r.reason);
  }
  return bound;
}

}  // namespace vessel::actors
