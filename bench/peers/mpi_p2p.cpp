// Open MPI's side of `vessel-bench p2p`: MPI_Send/MPI_Recv ping-pong latency (half round trip)
// and one-way streaming bandwidth between ranks 0 and 1, with the same sizes, iteration counts and
// output lines as the vessel side (tests/integration/p2p_ranks.cpp, mode bench), so the two are
// measured the same way. Run with mpirun -n 2 --mca btl tcp,self (or vader,self).
//
//   mpi_p2p <runs>      prints "latency <bytes> <us>" and "bandwidth <bytes> <GB/s>" per run

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int runs = argc > 1 ? std::atoi(argv[1]) : 3;
  std::vector<char> buf(64u << 20);
  for (int run = 0; run < runs; ++run) {
    for (std::size_t size = 8; size <= (1u << 20); size *= 8) {
      const int iters = size <= 4096 ? 2000 : size <= 65536 ? 500 : 100;
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now_s();
      for (int i = 0; i < iters; ++i) {
        if (rank == 0) {
          MPI_Send(buf.data(), static_cast<int>(size), MPI_BYTE, 1, 1, MPI_COMM_WORLD);
          MPI_Recv(buf.data(), static_cast<int>(size), MPI_BYTE, 1, 1, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(buf.data(), static_cast<int>(size), MPI_BYTE, 0, 1, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
          MPI_Send(buf.data(), static_cast<int>(size), MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
      }
      const double dt = now_s() - t0;
      if (rank == 0) std::printf("latency %zu %.3f\n", size, dt / iters / 2 * 1e6);
    }
    for (std::size_t size = 64u << 10; size <= (64u << 20); size *= 4) {
      const std::size_t total = std::max<std::size_t>(size * 4, 256u << 20);
      const int iters = static_cast<int>(total / size);
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now_s();
      for (int i = 0; i < iters; ++i) {
        if (rank == 0) {
          MPI_Send(buf.data(), static_cast<int>(size), MPI_BYTE, 1, 2, MPI_COMM_WORLD);
        } else {
          MPI_Recv(buf.data(), static_cast<int>(size), MPI_BYTE, 0, 2, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
        }
      }
      char ack = 0;  // the stream ends when the receiver has everything
      if (rank == 0) {
        MPI_Recv(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Send(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
      }
      const double dt = now_s() - t0;
      if (rank == 0) std::printf("bandwidth %zu %.4f\n", size, double(size) * iters / dt / 1e9);
    }
  }
  std::fflush(stdout);
  MPI_Finalize();
  return 0;
}
