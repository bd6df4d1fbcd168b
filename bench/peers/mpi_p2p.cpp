// Open MPI's side of `vessel-bench p2p`: MPI_Send/MPI_Recv ping-pong latency (half round trip)
// and one-way streaming bandwidth between ranks 0 and 1, with the same points, warm-up and output
// lines as the vessel side (tools/vessel_bench/p2p_ranks.cpp), so the two are measured the same
// way. Run with mpirun -n 2 --mca btl self,tcp (or self,vader).
//
//   mpi_p2p <runs> [<latency points> <bandwidth points>]
//     points: "size:iterations,..." or "-" for none; without them the default sweep
//     (latency 8 B .. 1 MiB by 8x, bandwidth 64 KiB .. 64 MiB by 4x).
//   Rank 0 prints "latency <bytes> <us>" and "bandwidth <bytes> <GB/s>" per point and run.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace {

using points = std::vector<std::pair<std::size_t, std::size_t>>;  // (size, iterations)

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

points parse_points(const std::string& s) {
  points out;
  if (s == "-") return out;
  std::size_t at = 0;
  while (at < s.size()) {
    const auto comma = std::min(s.find(',', at), s.size());
    const auto item = s.substr(at, comma - at);
    const auto colon = item.find(':');
    if (colon == std::string::npos) {
      std::fprintf(stderr, "mpi_p2p: bad point '%s' (want size:iterations)\n", item.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    out.emplace_back(std::stoull(item.substr(0, colon)), std::stoull(item.substr(colon + 1)));
    at = comma + 1;
  }
  return out;
}

void ping_pong(int rank, char* buf, std::size_t size, std::size_t iters) {
  for (std::size_t i = 0; i < iters; ++i) {
    if (rank == 0) {
      MPI_Send(buf, static_cast<int>(size), MPI_BYTE, 1, 1, MPI_COMM_WORLD);
      MPI_Recv(buf, static_cast<int>(size), MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf, static_cast<int>(size), MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, static_cast<int>(size), MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    }
  }
}

void stream(int rank, char* buf, std::size_t size, std::size_t iters) {
  for (std::size_t i = 0; i < iters; ++i) {
    if (rank == 0)
      MPI_Send(buf, static_cast<int>(size), MPI_BYTE, 1, 2, MPI_COMM_WORLD);
    else
      MPI_Recv(buf, static_cast<int>(size), MPI_BYTE, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  char ack = 0;  // the stream ends when the receiver has everything
  if (rank == 0)
    MPI_Recv(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  else
    MPI_Send(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
}

template <class Loop>
double timed(Loop loop, int rank, char* buf, std::size_t size, std::size_t iters) {
  loop(rank, buf, size, iters / 10 + 1);  // warm-up, as the vessel side does
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now_s();
  loop(rank, buf, size, iters);
  return now_s() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int runs = argc > 1 ? std::atoi(argv[1]) : 3;
  points latency, bandwidth;
  if (argc > 3) {
    latency = parse_points(argv[2]);
    bandwidth = parse_points(argv[3]);
  } else {
    for (std::size_t s = 8; s <= (1u << 20); s *= 8)
      latency.emplace_back(s, s <= 4096 ? 2000 : std::max<std::size_t>(20, (32u << 20) / s));
    latency.emplace_back(1u << 20, 32);
    for (std::size_t s = 64u << 10; s <= (64u << 20); s *= 4)
      bandwidth.emplace_back(s, std::max<std::size_t>(4, (256u << 20) / s));
  }
  std::size_t max_size = 1;
  for (const auto& p : latency) max_size = std::max(max_size, p.first);
  for (const auto& p : bandwidth) max_size = std::max(max_size, p.first);
  std::vector<char> buf(max_size, 0x5a);  // touched once, reused
  for (int run = 0; run < runs; ++run) {
    for (const auto& [size, iters] : latency) {
      const double dt = timed(ping_pong, rank, buf.data(), size, iters);
      if (rank == 0) std::printf("latency %zu %.6g\n", size, dt / double(iters) / 2 * 1e6);
    }
    for (const auto& [size, iters] : bandwidth) {
      const double dt = timed(stream, rank, buf.data(), size, iters);
      if (rank == 0)
        std::printf("bandwidth %zu %.6g\n", size, double(size) * double(iters) / dt / 1e9);
    }
  }
  std::fflush(stdout);
  MPI_Finalize();
  return 0;
}
