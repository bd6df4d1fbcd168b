#include "actors/bootstrap.hpp"

#include <array>
#include <charconv>
#include <limits>

#include "actors/errc.hpp"
#include "io/log.hpp"

namespace vessel::actors {
namespace {

constexpr std::array<launch_source, 5> sources{{
    {"VESSEL_*", "VESSEL_RANK", "VESSEL_WORLD_SIZE", "VESSEL_LOCAL_RANK"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    // MPICH's Hydra (and Intel MPI) set PMI_RANK/PMI_SIZE; the local rank is MPI_LOCALRANKID.
    {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
}};

std::string quoted(std::string_view variable, std::string_view text) {
  return std::string{variable} + "='" + std::string{text} + "'";
}

// A whole decimal int: no sign, no spaces, no trailing text (from_chars alone accepts "3abc").
detailed_result<int> parse_int(std::string_view variable, std::string_view text) {
  int value = 0;
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), last, value);
  if (text.empty() || ec != std::errc{} || ptr != last || text.front() == '-') {
    return fail(errc::malformed_number,
                quoted(variable, text) + " is not a non-negative decimal integer");
  }
  return value;
}

detailed_result<int> read_int(const env_view& env, std::string_view variable) {
  auto text = env.get(variable);
  if (!text) return fail(errc::malformed_number, std::string{variable} + " is not set");
  return parse_int(variable, *text);
}

detailed_result<launch_info> from_source(const env_view& env, const launch_source& src) {
  launch_info info;
  info.source = std::string{src.name};
  const bool has_rank = env.has(src.rank_var);
  const bool has_size = env.has(src.size_var);
  if (!has_size) {
    return fail(errc::missing_world_size, quoted(src.rank_var, *env.get(src.rank_var)) +
                                              " is set but " + std::string{src.size_var} +
                                              " is not (" + info.source + ")");
  }
  if (!has_rank) {
    return fail(errc::missing_rank, quoted(src.size_var, *env.get(src.size_var)) + " is set but " +
                                        std::string{src.rank_var} + " is not (" + info.source +
                                        ")");
  }
  VESSEL_TRY(size, read_int(env, src.size_var));
  VESSEL_TRY(rank, read_int(env, src.rank_var));
  if (size < 1) {
    return fail(errc::invalid_world_size, quoted(src.size_var, *env.get(src.size_var)) +
                                              ": the world size must be at least 1");
  }
  if (rank >= size) {
    return fail(errc::rank_out_of_range, quoted(src.rank_var, *env.get(src.rank_var)) +
                                             " is not below " +
                                             quoted(src.size_var, *env.get(src.size_var)));
  }
  info.rank = rank;
  info.world_size = size;
  if (auto local = env.get(src.local_var)) {
    VESSEL_TRY(l, parse_int(src.local_var, *local));
    if (l >= size) {
      return fail(errc::rank_out_of_range, quoted(src.local_var, *local) + " is not below " +
                                               quoted(src.size_var, *env.get(src.size_var)));
    }
    info.local_rank = l;
  }
  return info;
}

detailed_result<void> read_store(const env_view& env, launch_info& info) {
  if (auto store = env.get("VESSEL_STORE")) {
    VESSEL_TRY(ep, parse_endpoint(*store, "VESSEL_STORE"));
    info.store = std::move(ep);
    info.store_source = "VESSEL_STORE";
    return outcome::success();
  }
  // torchrun's rendezvous convention (also what PyTorch's env:// init reads), used whatever the
  // rank source: Slurm scripts for PyTorch commonly export MASTER_ADDR/MASTER_PORT themselves.
  auto addr = env.get("MASTER_ADDR");
  auto port = env.get("MASTER_PORT");
  if (!addr && !port) return outcome::success();
  if (!addr) {
    return fail(errc::missing_store_port,
                quoted("MASTER_PORT", *port) + " is set but MASTER_ADDR is not");
  }
  if (!port) {
    return fail(errc::missing_store_port,
                quoted("MASTER_ADDR", *addr) + " is set but MASTER_PORT is not");
  }
  if (addr->empty()) return fail(errc::malformed_endpoint, "MASTER_ADDR is set but empty");
  VESSEL_TRY(p, parse_port(*port, "MASTER_PORT"));
  // MASTER_ADDR is a bare host: an IPv6 literal comes without brackets; accept it with them too.
  std::string host = *addr;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  info.store = endpoint{std::move(host), p};
  info.store_source = "MASTER_ADDR/MASTER_PORT";
  return outcome::success();
}

}  // namespace

std::span<const launch_source> launch_sources() noexcept {
  return sources;
}

detailed_result<launch_info> detect_launch(const env_view& env) {
  launch_info info;
  info.source = std::string{singleton_source};
  info.local_rank = 0;
  for (const auto& src : sources) {
    if (!env.has(src.rank_var) && !env.has(src.size_var)) continue;
    VESSEL_TRY(found, from_source(env, src));
    info = std::move(found);
    break;
  }
  VESSEL_TRY(read_store(env, info));
  return info;
}

detailed_result<launch_info> detect_launch_and_log(const env_view& env) {
  auto info = detect_launch(env);
  auto& logger = log::get("actors");
  if (info) {
    logger.info("bootstrap: {}", describe(info.value()));
  } else {
    logger.error("bootstrap failed: {}", info.error().detail);
  }
  return info;
}

std::string describe(const launch_info& info) {
  std::string line = "rank " + std::to_string(info.rank) + " of " + std::to_string(info.world_size);
  if (info.local_rank >= 0) line += " (local " + std::to_string(info.local_rank) + ")";
  line += " from " + info.source;
  if (info.store) {
    line += "; store " + info.store->to_string() + " (" + info.store_source + ")";
  } else {
    line += "; no store";
  }
  return line;
}

}  // namespace vessel::actors
