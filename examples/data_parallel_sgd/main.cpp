// data_parallel_sgd: linear regression trained data-parallel. Every rank generates its shard of
// one synthetic data set (fixed seed, so the data do not depend on the world size), computes the
// gradient of the mean squared error on its shard, and a sum-allreduce of (gradient, loss) makes
// every rank take the same step. At the end the ranks compare a hash of their weights (an
// allgather): bit-identical weights on every rank, a lower loss than at the start, or exit 1.
//
//   vessel-run -n 4 build/bin/data_parallel_sgd [--samples 8192] [--features 16] [--steps 300]
//                                                [--lr 0.1] [--seed 42] [--step-ms 0]
//
// --step-ms sleeps that long per step (a slow model, for watching the demo's progress bar).
// Bit-identical is not luck: the allreduce returns the same bits on every rank, and every rank
// applies it with the same arithmetic to the same previous weights.
//
// Restart (`vessel-run --restart N`): a collective that fails (a rank died, so its peers time out
// after --fail-timeout-ms) makes every rank regroup with point-to-point messages, without a
// coordinator: each rank sends every other one a report (survivors: the generation and how many
// steps they completed; they differ by one at most, and each keeps the weights before its last
// step) or a join (a restarted process: VESSEL_INCARNATION > 0), and hears one from each. Every
// rank then takes the same decision: the smallest step any survivor holds, the next generation,
// and the lowest surviving rank sends the joiners the weights of that step. Any rank may die,
// rank 0 included: vessel-run serves the rendezvous store, so a restarted rank 0 rejoins as the
// others do. Everyone then continues on a fresh communicator whose id is the generation, so no
// chunk of the failed collective can match the new ones. --kill-rank R --kill-step S makes rank
// R's first incarnation SIGKILL itself at step S (for tests and the demo).

#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "actors/comm.hpp"
#include "collectives/communicator.hpp"
#include "examples/common/support.hpp"

namespace {

namespace coll = vessel::collectives;
using vessel::examples::fixed;

/// splitmix64: a counter-based generator, so sample i is the same whichever rank makes it.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Uniform in [-1, 1) from (seed, stream, index).
double uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const std::uint64_t bits = mix(seed ^ mix(stream * 0x100000001b3ULL + index));
  return double(bits >> 11) * 0x1.0p-52 - 1.0;
}

struct problem {
  std::uint64_t seed;
  std::size_t features;
  std::size_t samples;

  /// The weights that generated the labels (the model should approach them).
  double true_weight(std::size_t j) const { return 2.0 * uniform(seed, 1, j); }
  double feature(std::size_t i, std::size_t j) const {
    return uniform(seed, 2, i * features + j);
  }
  double label(std::size_t i) const {
    double y = 0;
    for (std::size_t j = 0; j < features; ++j) y += feature(i, j) * true_weight(j);
    return y + 0.05 * uniform(seed, 3, i);  // a little noise: the loss floor is not zero
  }
};

/// A rank's rows, materialised once.
struct shard {
  std::vector<double> x;  // rows x features
  std::vector<double> y;
  std::size_t rows = 0;
};

shard make_shard(const problem& p, std::uint32_t rank, std::uint32_t world) {
  shard s;
  const std::size_t first = p.samples * rank / world, last = p.samples * (rank + 1) / world;
  s.rows = last - first;
  s.x.resize(s.rows * p.features);
  s.y.resize(s.rows);
  for (std::size_t r = 0; r < s.rows; ++r) {
    for (std::size_t j = 0; j < p.features; ++j) s.x[r * p.features + j] = p.feature(first + r, j);
    s.y[r] = p.label(first + r);
  }
  return s;
}

/// out[0..d) = sum over the shard of the MSE gradient's numerator, out[d] = sum of squared error.
void local_gradient(const shard& s, std::size_t d, const std::vector<double>& w,
                    std::vector<double>& out) {
  std::fill(out.begin(), out.end(), 0.0);
  for (std::size_t r = 0; r < s.rows; ++r) {
    const double* x = &s.x[r * d];
    double pred = 0;
    for (std::size_t j = 0; j < d; ++j) pred += x[j] * w[j];
    const double err = pred - s.y[r];
    for (std::size_t j = 0; j < d; ++j) out[j] += 2.0 * err * x[j];
    out[d] += err * err;
  }
}

/// Point-to-point tags of the regroup protocol (user tags: below actors::reserved_tag_base).
constexpr std::uint64_t regroup_tag = 1000;
constexpr std::uint64_t resume_tag = 1001;
constexpr std::uint64_t report_kind = 1, join_kind = 2;

/// What a rank trains; `prev` is the weights one step before (a survivor one step ahead of the
/// others rolls back to it).
struct training_state {
  std::uint64_t generation = 0;
  std::uint64_t step = 0;  ///< completed steps: w holds the weights after `step` updates
  std::vector<double> w, prev;
  double first_loss = 0, loss = 0;
  std::uint32_t weights_from = 0;  ///< the survivor that sent joiners the weights in the last regroup
};

std::vector<std::byte> pack(const std::vector<std::uint64_t>& head, const std::vector<double>& tail) {
  std::vector<std::byte> b((head.size() + tail.size()) * 8);
  std::memcpy(b.data(), head.data(), head.size() * 8);
  if (!tail.empty()) std::memcpy(b.data() + head.size() * 8, tail.data(), tail.size() * 8);
  return b;
}

std::uint64_t word(const std::vector<std::byte>& b, std::size_t i) {
  std::uint64_t v = 0;
  if ((i + 1) * 8 <= b.size()) std::memcpy(&v, b.data() + i * 8, 8);
  return v;
}

double real_at(const std::vector<std::byte>& b, std::size_t i) {
  double v = 0;
  if ((i + 1) * 8 <= b.size()) std::memcpy(&v, b.data() + i * 8, 8);
  return v;
}

/// A send to a rank that may be dead: its failure is not ours (the rank's next incarnation hears
/// from us again when its join arrives).
void send_if_alive(std::vector<vessel::comm_request>& sends, vessel::comm& world,
                   const std::vector<std::byte>& m, std::uint32_t to, std::uint64_t tag) {
  try {
    sends.push_back(world.isend(m, to, tag));
  } catch (const vessel::comm_error&) {
  }
}

/// The regroup (file comment): every rank tells every other one where it stands and hears the
/// same from all, so every rank takes the same decision without a coordinator. Survivors pass
/// joining = false. Returns the new communicator.
std::unique_ptr<coll::communicator> regroup(vessel::comm& world, training_state& st, bool joining,
                                            std::chrono::milliseconds timeout) {
  const std::uint32_t me = world.rank(), n = world.size();
  const std::size_t d = st.w.size();
  const auto mine = pack({joining ? join_kind : report_kind, st.generation, st.step}, {});
  std::vector<vessel::comm_request> sends;
  for (std::uint32_t r = 0; r < n; ++r) {
    if (r != me) send_if_alive(sends, world, mine, r, regroup_tag);
  }
  // One message from every other rank: a report of this generation, or a join. A report sent to
  // a dead rank's link may be dropped when its next incarnation connects, so a survivor sends its
  // report again to every joiner it hears from (a joiner may get it twice; the spare one is a
  // stale report at the next regroup, and skipped there).
  std::vector<std::uint64_t> kind(n, 0), gens(n, st.generation), steps(n, st.step);
  kind[me] = joining ? join_kind : report_kind;
  std::uint32_t heard = 0;
  while (heard + 1 < n) {
    vessel::recv_status from;
    const auto m = world.recv(vessel::any_source, regroup_tag, timeout, &from);
    const std::uint64_t k = word(m, 0), gen = word(m, 1);
    if (k != report_kind && k != join_kind) continue;
    if (k == report_kind && !joining && gen < st.generation) continue;  // from an older regroup
    if (kind[from.source] == 0) ++heard;
    kind[from.source] = k;
    gens[from.source] = gen;
    steps[from.source] = word(m, 2);
    if (k == join_kind && !joining) send_if_alive(sends, world, mine, from.source, regroup_tag);
  }
  // The same decision everywhere: the smallest step any survivor holds, the generation after
  // theirs, and the weights from the lowest survivor.
  std::uint32_t source = n;
  std::uint64_t target = UINT64_MAX, generation = 0;
  for (std::uint32_t r = 0; r < n; ++r) {
    if (kind[r] != report_kind) continue;
    if (source == n) source = r;
    target = std::min(target, steps[r]);
    generation = std::max(generation, gens[r]);
  }
  if (source == n) throw std::runtime_error("regroup: every rank restarted, no weights survive");
  ++generation;
  st.weights_from = source;
  if (joining) {
    const auto m = world.recv(source, resume_tag, timeout);
    st.step = word(m, 0);
    st.first_loss = real_at(m, 1);
    st.loss = real_at(m, 2);
    for (std::size_t j = 0; j < d; ++j) st.w[j] = real_at(m, 3 + j);
  } else {
    if (target + 1 == st.step) {
      st.w = st.prev;  // one step ahead of the slowest survivor: take that step back
      st.step = target;
    } else if (target != st.step) {
      throw std::runtime_error("regroup: the survivors agreed on step " + std::to_string(target) +
                               ", this rank is at step " + std::to_string(st.step));
    }
    if (me == source) {
      std::vector<double> state{st.first_loss, st.loss};
      state.insert(state.end(), st.w.begin(), st.w.end());
      const auto resume = pack({st.step}, state);
      for (std::uint32_t r = 0; r < n; ++r) {
        if (kind[r] == join_kind) send_if_alive(sends, world, resume, r, resume_tag);
      }
    }
  }
  st.generation = generation;
  for (auto& s : sends) {
    try {
      s.wait(timeout);
    } catch (const vessel::comm_error&) {
      // to a rank that died (again): the collectives of the new generation find out
    }
  }
  coll::communicator_options co;
  co.id = static_cast<std::uint32_t>(st.generation % coll::max_communicator_id);
  co.retry_on_restart = false;  // this example rejoins through its own regroup
  auto made = coll::communicator::create(world.runtime(), co);
  if (!made) throw vessel::comm_error(made.error(), "communicator after regroup");
  return std::move(made.value());
}

std::uint64_t fnv1a(const std::vector<double>& w) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  const auto* b = reinterpret_cast<const unsigned char*>(w.data());
  for (std::size_t i = 0; i < w.size() * sizeof(double); ++i) {
    h ^= b[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const vessel::examples::arguments args(
        argc, argv,
        {"samples", "features", "steps", "lr", "seed", "step-ms", "fail-timeout-ms", "kill-rank",
         "kill-step"});
    const problem p{args.size("seed", 42), args.size("features", 16), args.size("samples", 8192)};
    const std::uint64_t steps = args.size("steps", 300);
    const double lr = args.real("lr", 0.1);
    const auto step_sleep = std::chrono::milliseconds(args.size("step-ms", 0));
    // Long enough that a loaded machine never trips it, short enough that a restart is quick.
    const auto fail_timeout = std::chrono::milliseconds(args.size("fail-timeout-ms", 10000));
    const std::uint64_t kill_rank = args.size("kill-rank", UINT64_MAX);
    const std::uint64_t kill_step = args.size("kill-step", 0);
    if (p.features == 0 || p.samples == 0 || steps == 0 || !(lr > 0)) {
      std::fprintf(stderr, "data_parallel_sgd: want --features, --samples, --steps and --lr > 0\n");
      return 2;
    }
    const char* inc = std::getenv("VESSEL_INCARNATION");
    const bool restarted = inc != nullptr && std::strtoull(inc, nullptr, 10) > 0;

    vessel::comm world = vessel::comm::init();
    const std::uint32_t me = world.rank(), n = world.size();
    if (p.samples < n) {
      std::fprintf(stderr, "data_parallel_sgd: --samples %zu < %u ranks\n", p.samples, n);
      return 2;
    }
    const std::size_t d = p.features;
    training_state st;
    st.w.assign(d, 0.0);
    st.prev = st.w;
    std::unique_ptr<coll::communicator> c;
    if (restarted) {
      std::printf("rank %u restarted (incarnation %s): joining the survivors\n", me, inc);
      c = regroup(world, st, true, std::chrono::minutes{5});
      st.prev = st.w;
      std::printf("rank %u rejoined at step %llu, generation %llu, weights from rank %u\n", me,
                  static_cast<unsigned long long>(st.step),
                  static_cast<unsigned long long>(st.generation), st.weights_from);
    } else {
      coll::communicator_options co;
      co.retry_on_restart = false;  // a failed step regroups (file comment), it is not retried
      auto made = coll::communicator::create(world.runtime(), co);
      if (!made) throw vessel::comm_error(made.error(), "communicator");
      c = std::move(made.value());
    }
    vessel::examples::collective_stats colls;
    vessel::examples::progress bar("data_parallel_sgd", steps, me == 0);

    const shard data = make_shard(p, me, n);
    std::vector<double> local(d + 1), global(d + 1);
    coll::call_options o;
    o.timeout = fail_timeout;
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t report_every = std::max<std::uint64_t>(steps / 10, 1);
    std::vector<std::uint64_t> all(n);
    std::uint64_t mine = 0, regroups = 0;
    // Steps, then the weight check; a failed collective in either regroups and goes on from the
    // step everyone agreed on.
    for (;;) {
      vessel::result<void> r = vessel::outcome::success();
      if (st.step < steps) {
        if (me == kill_rank && st.step == kill_step && !restarted) {
          std::printf("rank %u: killing myself at step %llu (--kill-rank)\n", me,
                      static_cast<unsigned long long>(st.step));
          std::fflush(stdout);
          std::raise(SIGKILL);
        }
        local_gradient(data, d, st.w, local);
        const auto in = std::as_bytes(std::span<const double>(local));
        const auto out = std::as_writable_bytes(std::span<double>(global));
        r = colls.timed("allreduce", in.size(), [&] {
          return c->allreduce(in, out, coll::dtype::float64, coll::reduce_op::sum, o);
        });
        if (r) {
          // The loss of the weights this step started from (before the update).
          st.loss = global[d] / double(p.samples);
          if (st.step == 0) st.first_loss = st.loss;
          st.prev = st.w;
          for (std::size_t j = 0; j < d; ++j) st.w[j] -= lr * global[j] / double(p.samples);
          if (me == 0 && (st.step % report_every == 0 || st.step + 1 == steps)) {
            std::printf("step %5llu  loss %.6f\n", static_cast<unsigned long long>(st.step),
                        st.loss);
            std::fflush(stdout);
          }
          ++st.step;
          bar.update(st.step);
          if (step_sleep.count() > 0) std::this_thread::sleep_for(step_sleep);
          continue;
        }
      } else {
        // Every rank's weight hash, everywhere: one differing bit anywhere fails every rank.
        mine = fnv1a(st.w);
        r = colls.timed("allgather", sizeof mine, [&] {
          return c->allgather(std::as_bytes(std::span<const std::uint64_t>(&mine, 1)),
                              std::as_writable_bytes(std::span<std::uint64_t>(all)),
                              coll::dtype::uint64, o);
        });
        if (r) break;
      }
      std::printf("rank %u: %s at step %llu failed (%s): regrouping\n", me,
                  st.step < steps ? "allreduce" : "weight check",
                  static_cast<unsigned long long>(st.step), r.error().message().c_str());
      std::fflush(stdout);
      ++regroups;
      c.reset();
      c = regroup(world, st, false, std::chrono::minutes{5});
      if (me == st.weights_from) {
        std::printf("rank %u: regrouped at step %llu (generation %llu), leading the rejoin\n", me,
                    static_cast<unsigned long long>(st.step),
                    static_cast<unsigned long long>(st.generation));
      }
    }
    const double seconds = vessel::examples::collective_stats::seconds_since(t0);

    std::uint32_t differing = 0;
    for (std::uint32_t r = 0; r < n; ++r) differing += all[r] != all[0];
    double error = 0;
    for (std::size_t j = 0; j < d; ++j) error = std::max(error, std::fabs(st.w[j] - p.true_weight(j)));
    const bool decreased = st.loss < st.first_loss;

    if (me == 0) {
      std::printf("trained %llu steps on %zu samples x %zu features over %u ranks in %.2f s\n",
                  static_cast<unsigned long long>(steps), p.samples, d, n, seconds);
      std::printf("loss %.6f -> %.6f, max |w - w_true| = %.4f, weight hash %016llx on %u/%u ranks\n",
                  st.first_loss, st.loss, error, static_cast<unsigned long long>(all[0]),
                  n - differing, n);
      std::printf("@summary data_parallel_sgd ranks=%u steps=%llu loss_first=%s loss_last=%s "
                  "weights=%s regroups=%llu seconds=%s\n",
                  n, static_cast<unsigned long long>(steps), fixed(st.first_loss, 6).c_str(),
                  fixed(st.loss, 6).c_str(), differing == 0 ? "identical" : "DIFFERENT",
                  static_cast<unsigned long long>(regroups), fixed(seconds, 2).c_str());
    }
    vessel::examples::print_stats(world, colls);
    c.reset();
    world.finalize();
    if (differing != 0) {
      std::printf("FAIL data_parallel_sgd rank %u: %u rank(s) ended with other weights\n", me,
                  differing);
      return 1;
    }
    if (!decreased) {
      std::printf("FAIL data_parallel_sgd rank %u: loss %.6f did not go below %.6f\n", me, st.loss,
                  st.first_loss);
      return 1;
    }
    std::printf("OK data_parallel_sgd rank %u weights %016llx\n", me,
                static_cast<unsigned long long>(mine));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "data_parallel_sgd: %s\n", e.what());
    return 1;
  }
}
