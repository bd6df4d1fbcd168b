// One rank of the collective matrix: vessel::comm::init() from the environment, a
// collectives::communicator over its runtime, then every operation x its algorithms x element
// types x sizes, each result checked on this rank. Exit code 0 and "OK rank <r> coll <n>" mean
// every check passed; a failure prints what differed and exits 1.
//
//   coll_ranks full    every algorithm, int32/float32/float64/bfloat16, 0/1/7/1000 elements, 1<<20
//                      for int32 and float32 on the big four (allreduce, broadcast, allgather,
//                      reduce_scatter)
//   coll_ranks timeout rank 0 runs an allreduce that rank 1 never joins: errc::timed_out
//   coll_ranks quick   the default algorithm per op, int32 and float32, 0/7/1000 and 1<<18
//   coll_ranks odd     for world sizes that are no power of two (6, 7, 8 ranks): the default
//                      algorithm per op and every algorithm whose shape depends on the world
//                      size (recursive doubling/halving, Rabenseifner, dissemination,
//                      binomial trees), int32 and float32, 0/7/1000 and 1<<16; then
//                      vessel::comm's own barrier and allreduce (fold + recursive doubling)
//   coll_ranks pull [refuse]  over shm: large calls whose chunks the receivers read from the
//                      senders' memory (run_pulled); with refuse, rank 1 cannot (seccomp)
//   coll_ranks comms   split/dup: ranks, ids, sizes; then non-blocking collectives on world, a
//                      dup and a split in flight together, waited in a rank-dependent order
//   coll_ranks linkdrop  rank 0 drops its connection to rank 1 (drop_connection) while a large
//                      allreduce is in progress, several times: every result right, no error
//   coll_ranks sscut   allreduces until rank 0 saw its link to rank 1 reconnect (the test kills
//                      the sockets with ss -K until rank 0 sets the store key coll/cut/done)
//   coll_ranks rankdeath  the last rank SIGKILLs itself inside an allreduce, the others start
//                      theirs once it is gone: they get errc::rank_failed naming it, shrink()
//                      and allreduce on the rest
//
// Values: integers are small (exact sums in every order); floats are non-integers checked
// against a float64 reference within |ref| * eps * world + eps (eps: 2^-20 for float32, 2^-45
// for float64); bfloat16 values are integers in [-2, 2] (exact in bfloat16 for every sum here).

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "actors/comm.hpp"
#include "actors/env.hpp"
#include "actors/kv_store_client.hpp"
#include "actors/runtime.hpp"
#include "collectives/communicator.hpp"
#include "collectives/errc.hpp"
#include "collectives/selection.hpp"
#include "tests/integration/forbid_process_reads.hpp"

namespace {

using namespace vessel::collectives;
using bytes = std::vector<std::byte>;

double value(dtype t, std::uint32_t rank, std::size_t i) {
  switch (t) {
    case dtype::int32: return double(static_cast<int>((rank * 31 + i * 7) % 1000) - 500);
    case dtype::bfloat16: return double(static_cast<int>((rank + i) % 5) - 2);
    default: return 0.25 + double(rank + 1) * 0.001 * double(i % 97) + double(i % 13) * 1.5;
  }
}

void put(bytes& b, dtype t, std::size_t i, double v) {
  std::byte* p = b.data() + i * size_of(t);
  switch (t) {
    case dtype::int32: {
      const auto x = static_cast<std::int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case dtype::float32: {
      const auto x = static_cast<float>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case dtype::float64: std::memcpy(p, &v, 8); break;
    case dtype::bfloat16: {
      const auto f = static_cast<float>(v);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      const auto h = static_cast<std::uint16_t>(u >> 16);  // exact for the values used
      std::memcpy(p, &h, 2);
      break;
    }
    default: break;
  }
}

double get(const bytes& b, dtype t, std::size_t i) {
  const std::byte* p = b.data() + i * size_of(t);
  switch (t) {
    case dtype::int32: {
      std::int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case dtype::float32: {
      float x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case dtype::float64: {
      double x;
      std::memcpy(&x, p, 8);
      return x;
    }
    case dtype::bfloat16: {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      const std::uint32_t u = std::uint32_t{h} << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    default: return 0;
  }
}

/// Elements [first, first + n) of rank r's contribution.
bytes make(dtype t, std::uint32_t r, std::size_t first, std::size_t n) {
  bytes b(n * size_of(t));
  for (std::size_t i = 0; i < n; ++i) put(b, t, i, value(t, r, first + i));
  return b;
}

double tolerance(dtype t, double ref, std::uint32_t world) {
  const double eps = t == dtype::float32   ? std::ldexp(1.0, -20)
                     : t == dtype::float64 ? std::ldexp(1.0, -45)
                                           : 0.0;
  return std::fabs(ref) * eps * world + eps;
}

struct checker {
  std::uint32_t rank;
  int failures = 0;
  int runs = 0;
  std::string what;

  void expect(const bytes& got, std::size_t i, dtype t, double ref) {
    const double g = get(got, t, i);
    if (std::fabs(g - ref) <= tolerance(t, ref, 4)) return;
    if (++failures <= 20) {
      std::printf("FAIL rank %u %s: element %zu is %.17g, want %.17g\n", rank, what.c_str(), i, g,
                  ref);
    }
  }
  void ok(vessel::result<void> r) {
    ++runs;
    if (r) return;
    ++failures;
    std::printf("FAIL rank %u %s: %s\n", rank, what.c_str(), r.error().message().c_str());
  }
};

void run_case(communicator& c, checker& ck, collective_op op, std::string_view algo, dtype t,
              std::size_t n) {
  const std::uint32_t p = c.size();
  const std::uint32_t me = c.rank();
  const std::size_t es = size_of(t);
  call_options o;
  o.algorithm = algo;
  o.root = p - 1;  // a root other than 0 where there is one
  o.timeout = std::chrono::seconds{30};
  ck.what = std::string{to_string(op)} + "/" + std::string{algo} + "/" + std::string{to_string(t)} +
            "/" + std::to_string(n);
  auto sum_at = [&](std::size_t idx) {
    double s = 0;
    for (std::uint32_t r = 0; r < p; ++r) s += value(t, r, idx);
    return s;
  };
  switch (op) {
    case collective_op::barrier: ck.ok(c.barrier(o)); break;
    case collective_op::broadcast: {
      bytes in = me == o.root ? make(t, me, 0, n) : bytes{};
      bytes out(n * es);
      ck.ok(c.broadcast(in, out, t, o));
      for (std::size_t i = 0; i < n; ++i) ck.expect(out, i, t, value(t, o.root, i));
      break;
    }
    case collective_op::reduce: {
      bytes in = make(t, me, 0, n);
      bytes out(me == o.root ? n * es : 0);
      ck.ok(c.reduce(in, out, t, reduce_op::sum, o));
      if (me == o.root) {
        for (std::size_t i = 0; i < n; ++i) ck.expect(out, i, t, sum_at(i));
      }
      break;
    }
    case collective_op::allreduce: {
      bytes in = make(t, me, 0, n);
      bytes out(n * es);
      ck.ok(c.allreduce(in, out, t, reduce_op::sum, o));
      for (std::size_t i = 0; i < n; ++i) ck.expect(out, i, t, sum_at(i));
      // In place.
      ck.ok(c.allreduce(in, in, t, reduce_op::sum, o));
      for (std::size_t i = 0; i < n; ++i) ck.expect(in, i, t, sum_at(i));
      break;
    }
    case collective_op::allgather: {
      bytes in = make(t, me, 0, n);
      bytes out(n * es * p);
      ck.ok(c.allgather(in, out, t, o));
      for (std::uint32_t r = 0; r < p; ++r) {
        for (std::size_t i = 0; i < n; ++i) ck.expect(out, r * n + i, t, value(t, r, i));
      }
      // In place: our block already sits in the output.
      bytes all(n * es * p);
      if (n != 0) std::memcpy(all.data() + me * n * es, in.data(), n * es);
      ck.ok(c.allgather(std::span<const std::byte>(all).subspan(me * n * es, n * es), all, t, o));
      for (std::uint32_t r = 0; r < p; ++r) {
        for (std::size_t i = 0; i < n; ++i) ck.expect(all, r * n + i, t, value(t, r, i));
      }
      break;
    }
    case collective_op::reduce_scatter: {
      bytes in = make(t, me, 0, n * p);
      bytes out(n * es);
      ck.ok(c.reduce_scatter(in, out, t, reduce_op::sum, o));
      for (std::size_t i = 0; i < n; ++i) ck.expect(out, i, t, sum_at(me * n + i));
      break;
    }
    case collective_op::gather: {
      bytes in = make(t, me, 0, n);
      bytes out(me == o.root ? n * es * p : 0);
      ck.ok(c.gather(in, out, t, o));
      if (me == o.root) {
        for (std::uint32_t r = 0; r < p; ++r) {
          for (std::size_t i = 0; i < n; ++i) ck.expect(out, r * n + i, t, value(t, r, i));
        }
      }
      break;
    }
    case collective_op::scatter: {
      bytes in = me == o.root ? make(t, me, 0, n * p) : bytes{};
      bytes out(n * es);
      ck.ok(c.scatter(in, out, t, o));
      for (std::size_t i = 0; i < n; ++i) ck.expect(out, i, t, value(t, o.root, me * n + i));
      break;
    }
    case collective_op::alltoall: {
      bytes in = make(t, me, 0, n * p);
      bytes out(n * es * p);
      ck.ok(c.alltoall(in, out, t, o));
      for (std::uint32_t r = 0; r < p; ++r) {
        for (std::size_t i = 0; i < n; ++i) ck.expect(out, r * n + i, t, value(t, r, me * n + i));
      }
      break;
    }
  }
}

/// Two non-blocking allreduces and an allgather in flight at once, waited in reverse order.
void run_overlapped(communicator& c, checker& ck) {
  const std::uint32_t p = c.size();
  const std::size_t n = 5000;
  ck.what = "overlapped";
  bytes a = make(dtype::int32, c.rank(), 0, n), ra(a.size());
  bytes b = make(dtype::int32, c.rank() + 7, 0, n), rb(b.size());
  bytes g = make(dtype::int32, c.rank(), 0, n), rg(g.size() * p);
  call_options ring;
  ring.algorithm = "ring";
  auto ha = c.iallreduce(a, ra, dtype::int32, reduce_op::sum, ring);
  auto hb = c.iallreduce(b, rb, dtype::int32, reduce_op::sum);
  auto hg = c.iallgather(g, rg, dtype::int32);
  ck.ok(hg.wait());
  ck.ok(hb.wait());
  ck.ok(ha.wait());
  for (std::size_t i = 0; i < n; ++i) {
    double sa = 0, sb = 0;
    for (std::uint32_t r = 0; r < p; ++r) {
      sa += value(dtype::int32, r, i);
      sb += value(dtype::int32, r + 7, i);
    }
    ck.expect(ra, i, dtype::int32, sa);
    ck.expect(rb, i, dtype::int32, sb);
    for (std::uint32_t r = 0; r < p; ++r)
      ck.expect(rg, r * n + i, dtype::int32, value(dtype::int32, r, i));
  }
}

/// Sum over `ranks` of value(int32, r + offset, i).
double sum_over(const std::vector<std::uint32_t>& ranks, std::uint32_t offset, std::size_t i) {
  double s = 0;
  for (std::uint32_t r : ranks) s += value(dtype::int32, r + offset, i);
  return s;
}

std::vector<std::uint32_t> members_of(const communicator& c) {
  std::vector<std::uint32_t> m;
  for (std::uint32_t r = 0; r < c.size(); ++r) m.push_back(c.world_rank(r));
  return m;
}

void expect_true(checker& ck, bool ok, const std::string& what) {
  ++ck.runs;
  if (ok) return;
  ++ck.failures;
  std::printf("FAIL rank %u %s\n", ck.rank, what.c_str());
}

/// The algorithms that count the chunks they receive (algorithm::chunks_to_receive).
bool counts_its_chunks(collective_op op, std::string_view algo) {
  return algo == "ring" ||
         (op == collective_op::broadcast && (algo == "binomial" || algo == "chain"));
}

/// Their calls keep a receive posted for each message still due (offers' answers and refused
/// offers' resends included), so none is left over at the end to cancel (`calls`' receives
/// cancelled: none).
void expect_nothing_cancelled(vessel::actors::runtime& rt, checker& ck, std::string_view what,
                              const std::function<void()>& calls) {
  const std::uint64_t before = rt.matching_stats().cancelled;
  calls();
  const std::uint64_t cancelled = rt.matching_stats().cancelled - before;
  expect_true(ck, cancelled == 0,
              std::string{what} + ": " + std::to_string(cancelled) + " receive(s) cancelled");
}

/// Large calls over shm, whose chunks go as offers that the receiving rank reads from the
/// sender's memory: the big four, every algorithm that lends its chunks, whole and odd sizes
/// (a last chunk shorter than the others; a broadcast's only up to 1 MiB). With `refuse`, rank 1
/// cannot read anybody's memory (seccomp): it refuses its first offer from each peer, those chunks
/// and every later one come the ordinary way, and every result is still right.
void run_pulled(communicator& c, vessel::actors::runtime& rt, checker& ck, bool refuse) {
  const std::uint32_t p = c.size();
  const std::size_t whole = std::size_t{1} << 18;      // 1 MiB of int32
  const std::size_t odd = 3 * (std::size_t{1} << 18) + 7;  // 3 MiB + 28 B: chunks and a tail
  const std::pair<collective_op, std::string_view> cases[] = {
      {collective_op::allreduce, "ring"},       {collective_op::allgather, "ring"},
      {collective_op::reduce_scatter, "ring"},  {collective_op::broadcast, "binomial"},
      {collective_op::broadcast, "chain"},
  };
  std::uint64_t refused_in_first_round = 0;
  for (int round = 0; round < 2; ++round) {  // again: a refusing rank is offered nothing more
    if (round == 1) refused_in_first_round = c.pull_stats().refused;
    for (const auto& [op, algo] : cases) {
      const bool block = op == collective_op::allgather || op == collective_op::reduce_scatter;
      for (std::size_t n : {whole, odd}) {
        auto calls = [&] {
          run_case(c, ck, op, algo, dtype::int32, block ? n / p : n);
          run_case(c, ck, op, algo, dtype::float32, block ? n / p : n);
        };
        if (counts_its_chunks(op, algo)) {
          expect_nothing_cancelled(
              rt, ck, std::string{to_string(op)} + "/" + std::string{algo} + " offered", calls);
        } else {
          calls();
        }
      }
    }
  }
  // A broadcast moves data one way and is offered only up to actors::max_one_way_pull_bytes:
  // the root (run_case's: the last rank) offers its 1 MiB, nobody offers any of 3 MiB.
  for (std::size_t n : {whole, odd}) {
    const std::uint64_t before = c.pull_stats().offered;
    run_case(c, ck, collective_op::broadcast, "binomial", dtype::int32, n);
    const std::uint64_t offered = c.pull_stats().offered - before;
    if (n * sizeof(std::int32_t) > vessel::actors::max_one_way_pull_bytes) {
      expect_true(ck, offered == 0, "a broadcast of " + std::to_string(n * 4) + " B offered");
    } else if (c.rank() == p - 1 && !refuse) {
      expect_true(ck, offered > 0, "the root offered nothing of a 1 MiB broadcast");
    }
  }
  const chunk_pull_stats st = c.pull_stats();
  std::printf("rank %u pulls: offered %llu, pulled %llu, refused %llu\n", c.rank(),
              static_cast<unsigned long long>(st.offered),
              static_cast<unsigned long long>(st.pulled),
              static_cast<unsigned long long>(st.refused));
  expect_true(ck, st.offered > 0, "no chunk offered");
  if (refuse && c.rank() == 1) {
    expect_true(ck, st.pulled == 0 && st.refused > 0, "rank 1 refused no offer");
    // The same calls again: its peers knew by then, and offered it nothing.
    expect_true(ck, st.refused == refused_in_first_round, "rank 1 offered chunks after refusing");
  } else {
    expect_true(ck, st.pulled > 0, "no offer pulled");
    expect_true(ck, st.refused == 0, "an offer refused");
  }
}

/// split/dup, then collectives on three communicators in flight at once.
// Whether process `pid` has exited (gone, or a zombie its launcher has not reaped yet) within
// `limit`.
bool wait_until_gone(const std::string& pid, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  const std::string stat_path = "/proc/" + pid + "/stat";
  while (std::chrono::steady_clock::now() < until) {
    std::FILE* f = std::fopen(stat_path.c_str(), "r");
    if (f == nullptr) return true;
    char line[512] = {};
    const bool read = std::fgets(line, sizeof line, f) != nullptr;
    std::fclose(f);
    // The state follows the parenthesised command name: "pid (comm) S ...".
    const char* close = read ? std::strrchr(line, ')') : nullptr;
    if (close != nullptr && (close[2] == 'Z' || close[2] == 'X')) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
  return false;
}

// The links a communicator sees and what they select: over shm every link is shared memory, so a
// table's shared-memory-only rule (here: 1 MiB allreduce as whole halves) holds; over TCP the
// measured table's ring runs. Children see what their parent does.
void run_links(communicator& world, checker& ck) {
  const char* transport = std::getenv("VESSEL_TRANSPORT");
  const bool shm = transport != nullptr && std::string_view{transport} == "shm";
  const link_class want = shm ? link_class::shared_memory : link_class::mixed;
  expect_true(ck, world.links() == want,
              std::string{"world: links do not match VESSEL_TRANSPORT="} +
                  (transport != nullptr ? transport : "(unset)"));
  ck.what = "links dup";
  auto dup = world.dup();
  ck.ok(dup.has_value() ? vessel::result<void>{vessel::outcome::success()} : dup.error());
  if (dup) expect_true(ck, dup.value()->links() == want, "dup: links differ from the world's");

  auto shm_table = algorithm_selector::from_table(
      {{collective_op::allreduce, 2, 8, SIZE_MAX, "rabenseifner", /*shared_memory_only=*/true}});
  ck.what = "links table";
  ck.ok(shm_table.has_value() ? vessel::result<void>{vessel::outcome::success()}
                              : shm_table.error());
  if (!shm_table) return;
  const algorithm_selector measured = world.selector();
  world.selector() = std::move(shm_table.value());
  const std::size_t n = (std::size_t{1} << 20) / sizeof(float);
  const auto algorithm = world.algorithm_for(collective_op::allreduce, n * sizeof(float));
  const std::string_view expected = shm ? "rabenseifner" : "ring";
  expect_true(ck, algorithm && algorithm.value() == expected,
              "1 MiB allreduce selects " +
                  (algorithm ? std::string{algorithm.value()} : algorithm.error().message()) +
                  ", want " + std::string{expected});
  run_case(world, ck, collective_op::allreduce, {}, dtype::float32, n);
  world.selector() = measured;
}

void run_comms(communicator& world, checker& ck) {
  const std::uint32_t p = world.size();
  const std::uint32_t me = world.rank();
  ck.what = "dup";
  auto dup = world.dup();
  ck.ok(dup.has_value() ? vessel::result<void>{vessel::outcome::success()} : dup.error());
  if (!dup) return;
  communicator& d = *dup.value();
  expect_true(ck, d.size() == p && d.rank() == me && d.id() != world.id(),
              "dup: size " + std::to_string(d.size()) + " rank " + std::to_string(d.rank()) +
                  " id " + std::to_string(d.id()));

  // Colors by parity, keys reversed: color c holds the ranks r % 2 == c, highest rank first.
  ck.what = "split";
  auto split = world.split(int(me % 2), -int(me));
  ck.ok(split.has_value() ? vessel::result<void>{vessel::outcome::success()} : split.error());
  if (!split) return;
  communicator& sp = *split.value();
  std::vector<std::uint32_t> expected;
  for (std::uint32_t r = p; r-- > 0;) {
    if (r % 2 == me % 2) expected.push_back(r);
  }
  expect_true(ck, members_of(sp) == expected && sp.world_rank(sp.rank()) == me,
              "split: members differ (size " + std::to_string(sp.size()) + ")");
  expect_true(ck, sp.id() != world.id() && sp.id() != d.id(), "split: id reused");

  // Rank 0 opts out; the rest form one communicator.
  ck.what = "split undefined";
  auto rest = world.split(me == 0 ? undefined_color : 7, int(me));
  ck.ok(rest.has_value() ? vessel::result<void>{vessel::outcome::success()} : rest.error());
  if (rest) {
    expect_true(ck,
                me == 0 ? rest.value() == nullptr
                        : rest.value() != nullptr && rest.value()->size() == p - 1 &&
                              rest.value()->rank() == me - 1,
                "split undefined: wrong membership");
    if (rest.value()) {
      bytes in = make(dtype::int32, me, 0, 64), out(in.size());
      ck.ok(rest.value()->allreduce(in, out, dtype::int32, reduce_op::sum));
      std::vector<std::uint32_t> m;
      for (std::uint32_t r = 1; r < p; ++r) m.push_back(r);
      for (std::size_t i = 0; i < 64; ++i) ck.expect(out, i, dtype::int32, sum_over(m, 0, i));
    }
  }

  // In flight together: two on each communicator, waited in an order that differs by rank.
  ck.what = "interleaved";
  const std::size_t n = 60000;
  call_options small_chunks;
  small_chunks.chunk_bytes = 16384;  // many chunks each, so that they really overlap
  small_chunks.algorithm = "ring";
  small_chunks.timeout = std::chrono::seconds{60};
  call_options dflt;
  dflt.timeout = std::chrono::seconds{60};
  const std::vector<std::uint32_t> wm = members_of(world), dm = members_of(d), sm = members_of(sp);
  bytes wa = make(dtype::int32, me, 0, n), wr(wa.size());
  bytes da = make(dtype::int32, me + 100, 0, n), dr(da.size());
  bytes sa = make(dtype::int32, me + 200, 0, n), sr(sa.size());
  bytes wg = make(dtype::int32, me + 300, 0, 1000), wgr(wg.size() * p);
  bytes db = me == 0 ? make(dtype::int32, 400, 0, 5000) : bytes{}, dbr(5000 * 4);
  bytes sg = make(dtype::int32, me + 500, 0, 1000), sgr(sg.size() * sp.size());
  std::vector<collective_request> reqs;
  reqs.push_back(world.iallreduce(wa, wr, dtype::int32, reduce_op::sum, small_chunks));
  reqs.push_back(d.iallreduce(da, dr, dtype::int32, reduce_op::sum, small_chunks));
  reqs.push_back(sp.iallreduce(sa, sr, dtype::int32, reduce_op::sum, small_chunks));
  reqs.push_back(world.iallgather(wg, wgr, dtype::int32, dflt));
  reqs.push_back(d.ibroadcast(db, dbr, dtype::int32, dflt));
  reqs.push_back(sp.iallgather(sg, sgr, dtype::int32, dflt));
  for (std::size_t k = 0; k < reqs.size(); ++k) {
    const std::size_t which = (k * (me + 1) + me) % reqs.size();  // a permutation when gcd = 1
    if (reqs[which].valid()) ck.ok(reqs[which].wait());
  }
  for (auto& r : reqs) ck.ok(r.wait());  // those the permutation missed; finished ones at once
  for (std::size_t i = 0; i < n; ++i) {
    ck.expect(wr, i, dtype::int32, sum_over(wm, 0, i));
    ck.expect(dr, i, dtype::int32, sum_over(dm, 100, i));
    ck.expect(sr, i, dtype::int32, sum_over(sm, 200, i));
  }
  for (std::uint32_t r = 0; r < p; ++r) {
    for (std::size_t i = 0; i < 1000; ++i) {
      ck.expect(wgr, r * 1000 + i, dtype::int32, value(dtype::int32, r + 300, i));
    }
  }
  for (std::size_t i = 0; i < 5000; ++i)
    ck.expect(dbr, i, dtype::int32, value(dtype::int32, 400, i));
  for (std::uint32_t r = 0; r < sp.size(); ++r) {
    for (std::size_t i = 0; i < 1000; ++i) {
      ck.expect(sgr, r * 1000 + i, dtype::int32, value(dtype::int32, sm[r] + 500, i));
    }
  }
  // A dup of a split, then blocking collectives on all four: same sequence numbers, new ids.
  ck.what = "dup of split";
  auto dsp = sp.dup();
  ck.ok(dsp.has_value() ? vessel::result<void>{vessel::outcome::success()} : dsp.error());
  if (dsp) {
    expect_true(ck, dsp.value()->id() != sp.id() && dsp.value()->size() == sp.size(),
                "dup of split: id or size");
    bytes in = make(dtype::int32, me, 0, 100), out(in.size());
    ck.ok(dsp.value()->allreduce(in, out, dtype::int32, reduce_op::sum));
    for (std::size_t i = 0; i < 100; ++i) ck.expect(out, i, dtype::int32, sum_over(sm, 0, i));
  }
  ck.ok(world.barrier());
}

/// One large allreduce on `c`, checked; rank 0 runs `mid` while it is still in progress (once
/// test() said not done). Returns whether `mid` ran.
bool checked_allreduce(communicator& c, checker& ck, std::size_t n,
                       const std::function<void()>& mid, std::size_t chunk_bytes = 65536) {
  call_options o;
  o.algorithm = "ring";
  o.chunk_bytes = chunk_bytes;
  o.timeout = std::chrono::seconds{60};
  bytes in = make(dtype::int32, c.rank(), 0, n), out(in.size());
  auto h = c.iallreduce(in, out, dtype::int32, reduce_op::sum, o);
  bool ran = false;
  if (c.rank() == 0 && !h.test()) {
    mid();
    ran = true;
  }
  ck.ok(h.wait());
  const std::vector<std::uint32_t> m = members_of(c);
  for (std::size_t i = 0; i < n; ++i) ck.expect(out, i, dtype::int32, sum_over(m, 0, i));
  return ran;
}

/// Mode "odd": what a world size that is no power of two changes. Ring, chain and pairwise
/// algorithms treat every size alike (and 3 and 5 ranks run them all in "full" and "quick"); the
/// ones here fold extra ranks in, halve unevenly or prune a tree.
void run_odd_sizes(communicator& c, checker& ck) {
  constexpr std::array<std::string_view, 4> shaped_by_size{"recursive_doubling", "rabenseifner",
                                                           "dissemination", "binomial"};
  for (collective_op op : all_collective_ops) {
    std::vector<std::string_view> algos{"auto"};
    for (std::string_view a : algorithm_names(op)) {
      if (std::find(shaped_by_size.begin(), shaped_by_size.end(), a) != shaped_by_size.end()) {
        algos.push_back(a);
      }
    }
    for (std::string_view a : algos) {
      for (dtype t : {dtype::int32, dtype::float32}) {
        for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{1000}}) {
          run_case(c, ck, op, a, t, n);
        }
      }
      const bool big_four = op == collective_op::allreduce || op == collective_op::broadcast ||
                            op == collective_op::allgather || op == collective_op::reduce_scatter;
      if (big_four) {
        const bool block = op == collective_op::allgather || op == collective_op::reduce_scatter;
        const std::size_t big = std::size_t{1} << 16;
        run_case(c, ck, op, a, dtype::float32, block ? big / c.size() : big);
      }
    }
  }
}

/// vessel::comm's own collectives (actors/comm.cpp): the ranks past the largest power of two
/// fold in before the recursive doubling and get the result after it.
void run_world_collectives(vessel::comm& world, checker& ck) {
  const std::uint32_t p = world.size();
  const std::uint32_t me = world.rank();
  ck.what = "comm.barrier";
  world.barrier(std::chrono::seconds{30});
  ++ck.runs;
  for (std::size_t n :
       {std::size_t{1}, std::size_t{1000}, std::size_t{40'000}, std::size_t{300'000}}) {
    // 40'000 int64: 320 KB, a size that vessel::comm's sends pull over shm on any machine (its
    // collectives must not: their receives have no buffer to pull into). 300'000: 2.4 MB, cut
    // into several chunks per round.
    std::vector<std::int64_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = std::int64_t(me + 1) * std::int64_t(i % 97 + 1);
    world.allreduce(std::span<std::int64_t>(v), vessel::reduce_op::sum, std::chrono::seconds{30});
    ck.what = "comm.allreduce/int64/" + std::to_string(n);
    ++ck.runs;
    const std::int64_t ranks_sum = std::int64_t(p) * (p + 1) / 2;
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t want = ranks_sum * std::int64_t(i % 97 + 1);
      if (v[i] != want && ++ck.failures <= 20) {
        std::printf("FAIL rank %u %s: element %zu is %lld, want %lld\n", me, ck.what.c_str(), i,
                    static_cast<long long>(v[i]), static_cast<long long>(want));
      }
    }
    std::vector<double> m(n);
    for (std::size_t i = 0; i < n; ++i) m[i] = double(me) + 0.25 * double(i % 5);
    world.allreduce(std::span<double>(m), vessel::reduce_op::max, std::chrono::seconds{30});
    ck.what = "comm.allreduce/float64 max/" + std::to_string(n);
    ++ck.runs;
    for (std::size_t i = 0; i < n; ++i) {
      const double want = double(p - 1) + 0.25 * double(i % 5);
      if (m[i] != want && ++ck.failures <= 20) {
        std::printf("FAIL rank %u %s: element %zu is %.17g, want %.17g\n", me, ck.what.c_str(), i,
                    m[i], want);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "quick";
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // a rank that aborts still shows what it printed
  const bool refuse_pulls = mode == "pull" && argc > 2 && std::string_view{argv[2]} == "refuse";
  if (const char* r = std::getenv("VESSEL_RANK");
      refuse_pulls && r != nullptr && std::string_view{r} == "1" &&
      !vessel::test::forbid_reading_other_processes()) {
    std::printf("FAIL seccomp filter: %s\n", std::strerror(errno));
    return 1;
  }
  try {
    vessel::comm world = vessel::comm::init();
    auto made = communicator::create(world.runtime());
    if (!made) {
      std::printf("FAIL communicator: %s\n", made.error().message().c_str());
      return 1;
    }
    communicator& c = *made.value();
    if (mode == "timeout") {  // rank 1 never joins: rank 0's allreduce must fail, typed
      if (c.rank() == 0) {
        bytes in = make(dtype::int32, 0, 0, 100), out(in.size());
        call_options o;
        o.timeout = std::chrono::milliseconds{300};
        auto r = c.allreduce(in, out, dtype::int32, reduce_op::sum, o);
        if (r || r.error() !=
                     vessel::collectives::make_error_code(vessel::collectives::errc::timed_out)) {
          std::printf("FAIL rank 0 timeout: %s\n", r ? "succeeded" : r.error().message().c_str());
          return 1;
        }
      }
      made.value().reset();
      world.finalize();
      std::printf("OK rank %u coll timeout\n", world.rank());
      return 0;
    }
    checker ck{c.rank(), 0, 0, {}};
    auto report = [&](const char* name) {
      if (ck.failures != 0) {
        std::printf("FAILED rank %u %s: %d failure(s) in %d checks\n", ck.rank, name, ck.failures,
                    ck.runs);
        return 1;
      }
      std::printf("OK rank %u coll %s %d\n", ck.rank, name, ck.runs);
      return 0;
    };
    if (mode == "pull") {
      run_pulled(c, world.runtime(), ck, refuse_pulls);
      made.value().reset();
      world.finalize();
      return report("pull");
    }
    if (mode == "links") {
      run_links(c, ck);
      made.value().reset();
      world.finalize();
      return report("links");
    }
    if (mode == "comms") {
      run_comms(c, ck);
      made.value().reset();
      world.finalize();
      return report("comms");
    }
    if (mode == "linkdrop") {
      // Rank 0 cuts its link to rank 1 inside each of 4 large allreduces; the mesh resends. The
      // last two send 1 MiB chunks, split: a copied head and a tail lent from the caller's
      // buffers, resent from there after the cut.
      vessel::actors::runtime& rt = world.runtime();
      int cuts = 0;
      for (int iter = 0; iter < 4; ++iter) {
        ck.what = "linkdrop " + std::to_string(iter);
        const bool split = iter >= 2;
        cuts += checked_allreduce(
                    c, ck, split ? std::size_t{1} << 20 : std::size_t{1} << 18,
                    [&] { rt.drop_connection(1); }, split ? std::size_t{1} << 20 : 65536)
                    ? 1
                    : 0;
      }
      if (c.rank() == 0) {
        // Each cut must have been survived by a reconnect (not by luck before the cut landed).
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds{60};
        while (rt.link_stats(1).reconnects == 0 && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::milliseconds{10});
        }
        const auto st = rt.link_stats(1);
        std::printf("rank 0: cuts inside a collective %d, reconnects %llu, retransmits %llu\n",
                    cuts, static_cast<unsigned long long>(st.reconnects),
                    static_cast<unsigned long long>(st.retransmits));
        expect_true(ck, cuts > 0 && st.reconnects > 0, "linkdrop: no cut landed mid-collective");
      }
      ck.ok(c.barrier());
      made.value().reset();
      world.finalize();
      return report("linkdrop");
    }
    if (mode == "sscut") {
      // The test kills the sockets from outside until rank 0 says it saw a reconnect; rank 0
      // tells the others through a broadcast whether to go on.
      vessel::actors::runtime& rt = world.runtime();
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds{90};
      int iterations = 0;
      for (;;) {
        ck.what = "sscut " + std::to_string(iterations);
        checked_allreduce(c, ck, std::size_t{1} << 17, [] {});
        ++iterations;
        std::int32_t go = 0;
        if (c.rank() == 0) {
          go = rt.link_stats(1).reconnects == 0 && std::chrono::steady_clock::now() < until;
        }
        bytes flag(4), got(4);
        std::memcpy(flag.data(), &go, 4);
        ck.ok(c.broadcast(flag, got, dtype::int32));
        std::memcpy(&go, got.data(), 4);
        if (go == 0) break;
      }
      if (c.rank() == 0) {
        const auto st = rt.link_stats(1);
        std::printf("rank 0: %d allreduces, reconnects %llu, retransmits %llu\n", iterations,
                    static_cast<unsigned long long>(st.reconnects),
                    static_cast<unsigned long long>(st.retransmits));
        (void)rt.store().set("coll/cut/done", std::string_view{"1"});
        expect_true(ck, st.reconnects > 0, "sscut: the link never reconnected");
      }
      ck.ok(c.barrier());
      made.value().reset();
      world.finalize();
      return report("sscut");
    }
    if (mode == "rankdeath") {
      // The last rank dies for good inside an allreduce; the others must fail, typed and named,
      // then continue on the survivors.
      // The survivors start theirs only once the victim's process is gone: had they started
      // together, the victim's threads could finish the whole allreduce (every step had its
      // data) before its main thread reached kill() on a loaded machine.
      const std::uint32_t victim = c.size() - 1;
      vessel::actors::kv_store_client& store = world.runtime().store();
      if (c.rank() == victim) {
        expect_true(ck, store.set("coll/rankdeath/pid", std::to_string(::getpid())).has_value(),
                    "rankdeath: publishing the victim's pid");
      }
      ck.what = "rankdeath warm-up";
      ck.ok(c.barrier());
      const std::size_t n = std::size_t{1} << 18;
      bytes in = make(dtype::int32, c.rank(), 0, n), out(in.size());
      call_options o;
      o.timeout = std::chrono::seconds{120};  // far beyond the reconnect deadline
      if (c.rank() == victim) {
        auto h = c.iallreduce(in, out, dtype::int32, reduce_op::sum, o);
        std::fflush(stdout);
        ::kill(::getpid(), SIGKILL);
      }
      auto pid = store.get("coll/rankdeath/pid");
      expect_true(ck, pid.has_value(), "rankdeath: reading the victim's pid");
      if (pid) {
        const std::string p(reinterpret_cast<const char*>(pid.value().data()), pid.value().size());
        expect_true(ck, wait_until_gone(p, std::chrono::seconds{30}),
                    "rankdeath: the victim (pid " + p + ") still runs");
      }
      auto h = c.iallreduce(in, out, dtype::int32, reduce_op::sum, o);
      ck.what = "rankdeath allreduce";
      auto r = h.wait();
      const std::string detail = h.detail();
      std::printf("rank %u: allreduce: %s; %s\n", c.rank(),
                  r ? "succeeded" : r.error().message().c_str(), detail.c_str());
      const std::string named = "world rank(s) [" + std::to_string(victim) + "]";
      expect_true(ck,
                  !r && r.error() == make_error_code(errc::rank_failed) &&
                      detail.find(named) != std::string::npos,
                  "rankdeath: want rank_failed naming " + named);
      expect_true(ck, c.dead_ranks() == std::vector<std::uint32_t>{victim}, "dead_ranks()");
      // Later collectives fail at once, same error.
      ck.what = "rankdeath barrier";
      auto b = c.barrier(o);
      expect_true(ck, !b && b.error() == make_error_code(errc::rank_failed),
                  "rankdeath: a later barrier did not fail with rank_failed");
      ck.what = "shrink";
      call_options so;
      so.timeout = std::chrono::seconds{60};
      auto shrunk = c.shrink(so);
      ck.ok(shrunk.has_value() ? vessel::result<void>{vessel::outcome::success()} : shrunk.error());
      if (shrunk) {
        communicator& s = *shrunk.value();
        expect_true(ck, s.size() == victim && s.rank() == c.rank(), "shrink: size or rank");
        bytes out2(in.size());
        ck.what = "allreduce after shrink";
        ck.ok(s.allreduce(in, out2, dtype::int32, reduce_op::sum, so));
        const std::vector<std::uint32_t> m = members_of(s);
        for (std::size_t i = 0; i < n; ++i) ck.expect(out2, i, dtype::int32, sum_over(m, 0, i));
        ck.ok(s.barrier(so));
        std::printf("rank %u: shrunk to %u ranks (communicator %u)\n", c.rank(), s.size(), s.id());
      }
      if (shrunk) shrunk.value().reset();  // the child goes before its parent
      made.value().reset();
      world.abort();  // finalize() would wait in a barrier for the dead rank
      return report("rankdeath");
    }
    if (mode == "odd") {
      run_odd_sizes(c, ck);
      run_world_collectives(world, ck);
      made.value().reset();
      world.finalize();
      return report("odd");
    }
    const bool full = mode == "full";
    const std::vector<dtype> types =
        full ? std::vector<dtype>{dtype::int32, dtype::float32, dtype::float64, dtype::bfloat16}
             : std::vector<dtype>{dtype::int32, dtype::float32};
    const std::vector<std::size_t> sizes =
        full ? std::vector<std::size_t>{0, 1, 7, 1000} : std::vector<std::size_t>{0, 7, 1000};
    const std::uint64_t landed_before = world.runtime().matching_stats().claimed;
    auto combined = [&world] {
      std::uint64_t n = 0;
      for (std::uint32_t peer = 0; peer < world.size(); ++peer) {
        if (peer != world.rank()) n += world.runtime().link_stats(peer).combined_on_arrival;
      }
      return n;
    };
    const std::uint64_t combined_before = combined();
    for (collective_op op : all_collective_ops) {
      std::vector<std::string_view> algos;
      if (full) {
        for (std::string_view a : algorithm_names(op)) algos.push_back(a);
      } else {
        algos.push_back("auto");
      }
      for (std::string_view a : algos) {
        auto calls = [&] {
          for (dtype t : types) {
            for (std::size_t n : sizes) run_case(c, ck, op, a, t, n);
          }
          const bool big_four = op == collective_op::allreduce || op == collective_op::broadcast ||
                                op == collective_op::allgather ||
                                op == collective_op::reduce_scatter;
          if (big_four) {
            const std::size_t big = full ? std::size_t{1} << 20 : std::size_t{1} << 18;
            // Block operations: the 1<<20 elements are the whole result, split over the ranks.
            const bool block =
                op == collective_op::allgather || op == collective_op::reduce_scatter;
            const std::size_t n = block ? big / c.size() : big;
            run_case(c, ck, op, a, dtype::int32, n);
            run_case(c, ck, op, a, dtype::float32, n);
          }
        };
        if (counts_its_chunks(op, a)) {
          expect_nothing_cancelled(world.runtime(), ck,
                                   std::string{to_string(op)} + "/" + std::string{a}, calls);
        } else {
          calls();
        }
      }
    }
    if (full && c.size() >= 2) {
      // The ring's copying steps at 1 Mi elements: chunks whose receive was posted before they
      // came landed straight in the output (algorithm::landing), and the results above held.
      expect_true(ck, world.runtime().matching_stats().claimed > landed_before,
                  "no ring chunk landed in place");
      // Its reducing steps' chunks were reduced into the output as they arrived.
      expect_true(ck, combined() > combined_before, "no ring chunk reduced as it landed");
    }
    run_overlapped(c, ck);
    made.value().reset();
    world.finalize();
    if (ck.failures != 0) {
      std::printf("FAILED rank %u: %d failure(s) in %d collectives\n", ck.rank, ck.failures,
                  ck.runs);
      return 1;
    }
    std::printf("OK rank %u coll %d\n", ck.rank, ck.runs);
    return 0;
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
}
