// Open MPI's side of `vessel-bench coll`: MPI_Allreduce, MPI_Bcast, MPI_Allgather and
// MPI_Reduce_scatter_block on float32 sums, with the sizes, warm-up and iteration counts of the
// vessel side (tools/vessel_bench/coll_plan.hpp) and its output lines (rank 0 only):
//
//   R <op> <size_bytes> mpi <seconds per call, slowest rank>
//
// Run with mpirun -n N --mca btl tcp,self (or vader,self); vessel-bench coll does.
//
//   mpi_coll <sizes,comma,separated> <iterations or 0 for the default>

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "tools/vessel_bench/coll_plan.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (argc < 3) {
    if (rank == 0) std::fprintf(stderr, "usage: mpi_coll SIZES ITERATIONS\n");
    MPI_Finalize();
    return 2;
  }
  const vessel::bench::coll_plan plan{argv[1], static_cast<std::size_t>(std::atol(argv[2])),
                                      static_cast<std::size_t>(world)};
  if (plan.sizes.empty()) {
    if (rank == 0) std::fprintf(stderr, "bad sizes '%s'\n", argv[1]);
    MPI_Finalize();
    return 2;
  }
  // Touched once and reused, as on the vessel side.
  const std::size_t largest = plan.largest_buffer_bytes();
  std::vector<float> in(largest / 4, 0.0f), out(largest / 4, 0.0f);
  const auto ops = vessel::bench::selected_coll_ops_from_env();
  if (ops.empty()) {
    if (rank == 0) std::fprintf(stderr, "VESSEL_BENCH_COLL_OPS: not a list of operations\n");
    MPI_Finalize();
    return 2;
  }
  for (const std::string_view op : ops) {
    for (const std::size_t size : plan.sizes) {
      const auto s = plan.shape_of(size);
      const int whole = static_cast<int>(s.whole_elements);
      const int block = static_cast<int>(s.block_elements);
      auto call = [&] {
        if (op == "allreduce")
          MPI_Allreduce(in.data(), out.data(), whole, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else if (op == "broadcast")
          MPI_Bcast(out.data(), whole, MPI_FLOAT, 0, MPI_COMM_WORLD);
        else if (op == "allgather")
          MPI_Allgather(in.data(), block, MPI_FLOAT, out.data(), block, MPI_FLOAT, MPI_COMM_WORLD);
        else
          MPI_Reduce_scatter_block(in.data(), out.data(), block, MPI_FLOAT, MPI_SUM,
                                   MPI_COMM_WORLD);
      };
      for (std::size_t i = 0; i < plan.warmup(size); ++i) call();
      MPI_Barrier(MPI_COMM_WORLD);
      const std::size_t iterations = plan.iterations_for(size);
      const double t0 = MPI_Wtime();
      for (std::size_t i = 0; i < iterations; ++i) call();
      double per_call = (MPI_Wtime() - t0) / static_cast<double>(iterations), slowest = 0;
      MPI_Reduce(&per_call, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        std::printf("R %.*s %zu mpi %.9g\n", static_cast<int>(op.size()), op.data(), size, slowest);
        std::fflush(stdout);
      }
    }
  }
  MPI_Finalize();
  return 0;
}
