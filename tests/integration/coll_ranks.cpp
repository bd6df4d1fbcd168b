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
//
// Values: integers are small (exact sums in every order); floats are non-integers checked
// against a float64 reference within |ref| * eps * world + eps (eps: 2^-20 for float32, 2^-45
// for float64); bfloat16 values are integers in [-2, 2] (exact in bfloat16 for every sum here).

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "actors/comm.hpp"
#include "collectives/communicator.hpp"
#include "collectives/errc.hpp"
#include "collectives/selection.hpp"

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

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "quick";
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
    const bool full = mode == "full";
    const std::vector<dtype> types =
        full ? std::vector<dtype>{dtype::int32, dtype::float32, dtype::float64, dtype::bfloat16}
             : std::vector<dtype>{dtype::int32, dtype::float32};
    const std::vector<std::size_t> sizes =
        full ? std::vector<std::size_t>{0, 1, 7, 1000} : std::vector<std::size_t>{0, 7, 1000};
    for (collective_op op : all_collective_ops) {
      std::vector<std::string_view> algos;
      if (full) {
        for (std::string_view a : algorithm_names(op)) algos.push_back(a);
      } else {
        algos.push_back("auto");
      }
      for (std::string_view a : algos) {
        for (dtype t : types) {
          for (std::size_t n : sizes) run_case(c, ck, op, a, t, n);
        }
        const bool big_four = op == collective_op::allreduce || op == collective_op::broadcast ||
                              op == collective_op::allgather || op == collective_op::reduce_scatter;
        if (big_four) {
          const std::size_t big = full ? std::size_t{1} << 20 : std::size_t{1} << 18;
          // Block operations: the 1<<20 elements are the whole result, split over the ranks.
          const bool block = op == collective_op::allgather || op == collective_op::reduce_scatter;
          const std::size_t n = block ? big / c.size() : big;
          run_case(c, ck, op, a, dtype::int32, n);
          run_case(c, ck, op, a, dtype::float32, n);
        }
      }
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
