#pragma once
// Which algorithm runs a collective, from (operation, world size, message bytes).
//
// Precedence: a name given for the call, then VESSEL_ALGO_<OP> (e.g. VESSEL_ALGO_ALLREDUCE=ring;
// "auto" means the table), then the threshold table. A rule may hold only for communicators whose
// links are all shared memory (link_class): there the crossovers differ from TCP's. The default
// table is the crossovers measured with `vessel-bench coll` on 2 and 4 ranks over loopback TCP
// and shared memory (measured_rules(); docs/collective_algorithms.md has the numbers and how
// they were taken), and for every other world size the crossovers of the alpha-beta-gamma cost
// model (Thakur, Rabenseifner & Gropp, "Optimization of collective communication operations in
// MPICH", 2005) with the loopback figures below. Tables measured on other links go first
// through algorithm_selector::from_table().
//
// Message bytes mean the bytes of the buffer algorithm_params::count describes: the whole vector
// for allreduce, reduce and broadcast; one rank's block for allgather, gather, scatter,
// reduce_scatter and alltoall; 0 for barrier.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/operation.hpp"
#include "wire/result.hpp"

namespace vessel::collectives {

/// Cost of one message of n bytes: alpha + n * beta; reducing n bytes costs n * gamma.
struct link_model {
  double alpha_s = 0;
  double beta_s_per_byte = 0;
  double gamma_s_per_byte = 0;
  /// The pipelining chunk of the chain broadcast (algorithm_params::chunk_bytes' default).
  std::size_t chunk_bytes = std::size_t{1} << 20;
};

/// Loopback on the 2-vCPU VMs, from /work/shared/notes/PEERS.md: alpha = raw TCP ping-pong half
/// round trip (11.6 us), beta = 1 / iperf3 single-stream loopback (1.63 GB/s); gamma = float32
/// sum at 10 GB/s per operand byte (bench_collectives_reduce: 4.5 GB/s from memory to 16 GB/s in
/// cache, per operand).
inline constexpr link_model loopback_tcp_model{11.6e-6, 1.0 / 1.63e9, 1.0 / 10e9};

/// The algorithms known for `op`, in order of preference when the model ties.
std::span<const std::string_view> algorithm_names(collective_op op) noexcept;

/// Modelled seconds of `algorithm` for `op`; nullopt for a name `op` does not know.
std::optional<double> modelled_seconds(collective_op op, std::string_view algorithm,
                                       std::uint32_t world, std::size_t bytes,
                                       const link_model& model) noexcept;

/// What carries a communicator's messages, as far as selection cares.
enum class link_class : std::uint8_t {
  mixed,          ///< TCP or RDMA to some member, or not known
  shared_memory,  ///< every other member by shared memory
};

/// Worlds of [min_world, max_world] ranks and messages of at most max_bytes use `algorithm`;
/// with shared_memory_only, only on communicators of link_class::shared_memory.
struct selection_rule {
  collective_op op = collective_op::allreduce;
  std::uint32_t min_world = 1;
  std::uint32_t max_world = UINT32_MAX;
  std::size_t max_bytes = SIZE_MAX;
  std::string algorithm;
  bool shared_memory_only = false;
  bool operator==(const selection_rule&) const = default;
};

/// The thresholds measured on this project's machines (2-vCPU VMs, loopback TCP and shared
/// memory, 2 and 4 ranks; docs/collective_algorithms.md), consulted before the model's.
std::span<const selection_rule> measured_rules() noexcept;

/// Reads one environment variable (nullopt when unset); actors::env_view::get fits.
using env_lookup = std::function<std::optional<std::string>(std::string_view name)>;
/// ::getenv.
env_lookup process_env();

class algorithm_selector {
 public:
  /// measured_rules(), then the rules from the model's crossovers: exact for worlds of 1 to 64
  /// ranks and powers of two up to 65536, buckets between those evaluated at their middle.
  explicit algorithm_selector(const link_model& model = loopback_tcp_model);

  /// The model's rules alone (what the measured table is compared against).
  static algorithm_selector model_only(const link_model& model = loopback_tcp_model);

  /// `rules`, consulted in order before measured_rules() and the model's; unknown names are
  /// unknown_algorithm.
  static result<algorithm_selector> from_table(std::vector<selection_rule> rules,
                                               const link_model& model = loopback_tcp_model);

  /// Forces VESSEL_ALGO_<OP> for each operation where it is set ("auto": the table). A name
  /// the operation does not know is unknown_algorithm, and nothing is changed.
  result<void> apply_env(const env_lookup& lookup);

  /// Forces `algorithm` for every call of `op` (empty or "auto": back to the table).
  result<void> force(collective_op op, std::string_view algorithm);

  /// The algorithm for one call. `per_call` (if not empty or "auto") wins over everything.
  /// `links` must be the same on every member (communicator::links() is).
  /// Errors: unknown_algorithm (per_call unknown for op), invalid_argument (world 0).
  result<std::string_view> select(collective_op op, std::uint32_t world, std::size_t bytes,
                                  std::string_view per_call = {},
                                  link_class links = link_class::mixed) const;

  /// The rules of `op` in the order they are consulted, measured ones first.
  std::span<const selection_rule> rules(collective_op op) const noexcept;

  /// "VESSEL_ALGO_ALLREDUCE" for allreduce.
  static std::string env_name(collective_op op);

 private:
  std::vector<std::vector<selection_rule>> rules_;  // per op index
  std::vector<std::string> forced_;                 // per op index; empty: the table
};

}  // namespace vessel::collectives
