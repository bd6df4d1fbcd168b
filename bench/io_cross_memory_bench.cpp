// One message's copy between two processes on this host, the ways it can be made
// (docs/io_performance.md, "Both sides copy"): the receiver reads all of it (BM_pull_whole:
// process_vm_readv, as Open MPI's vader does), the receiver reads the front while the sender
// writes the back into it (BM_pull_front_push_back: a pulled vessel::comm send), and, the peer,
// memcpy of the same bytes within one process. The sender is a forked child that spins on a
// shared page for its turn, as a sender blocked in send() spins on its loop. Run with
// --benchmark_repetitions=5 --benchmark_report_aggregates_only=true and read the medians.

#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "io/cpu_relax.hpp"
#include "io/cross_memory.hpp"

namespace {

namespace io = vessel::io;

constexpr std::size_t max_bytes = std::size_t{64} << 20;

/// What the two processes share: the child's token, and one push per `command` generation.
struct shared_page {
  std::atomic<std::uint64_t> command{0};
  std::atomic<std::uint64_t> done{0};
  std::atomic<std::uint64_t> push_from{0};
  std::atomic<std::uint64_t> push_bytes{0};
  std::atomic<bool> quit{false};
  std::atomic<bool> ready{false};
  io::process_token_offer child;
};

/// The sender: a child forked once, holding `source` (the same address in both processes, its
/// own pattern), writing into the parent's `destination` on command.
class sender_process {
 public:
  sender_process() : source_(max_bytes), destination_(max_bytes, std::byte{0}) {
    void* page = ::mmap(nullptr, sizeof(shared_page), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return;
    shared_ = new (page) shared_page{};
    const io::process_token_offer parent = io::this_process_token();
    pid_ = ::fork();
    if (pid_ == 0) serve(parent);
    if (pid_ < 0) return;
    while (!shared_->ready.load(std::memory_order_acquire)) io::cpu_relax();
  }
  ~sender_process() {
    if (pid_ <= 0) return;
    shared_->quit.store(true, std::memory_order_release);
    ::waitpid(pid_, nullptr, 0);
  }
  sender_process(const sender_process&) = delete;
  sender_process& operator=(const sender_process&) = delete;

  bool up() const { return pid_ > 0; }
  const io::process_token_offer& child() const { return shared_->child; }
  std::uint64_t source_address() const { return reinterpret_cast<std::uintptr_t>(source_.data()); }
  std::span<std::byte> destination(std::size_t n) { return std::span{destination_}.first(n); }
  std::span<const std::byte> source_here(std::size_t n) const {
    return std::span{source_}.first(n);
  }

  /// Asks the child to write destination[from, from + n) and returns at once.
  std::uint64_t start_push(std::size_t from, std::size_t n) {
    shared_->push_from.store(from, std::memory_order_relaxed);
    shared_->push_bytes.store(n, std::memory_order_relaxed);
    return shared_->command.fetch_add(1, std::memory_order_release) + 1;
  }
  void await_push(std::uint64_t generation) const {
    while (shared_->done.load(std::memory_order_acquire) != generation) io::cpu_relax();
  }

 private:
  [[noreturn]] void serve(const io::process_token_offer& parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (std::size_t i = 0; i < source_.size(); ++i) source_[i] = std::byte(i * 7 + 3);
    shared_->child = io::this_process_token();
    shared_->ready.store(true, std::memory_order_release);
    std::uint64_t seen = 0;
    const auto to = reinterpret_cast<std::uintptr_t>(destination_.data());
    for (;;) {
      std::uint64_t now = seen;
      while ((now = shared_->command.load(std::memory_order_acquire)) == seen) {
        if (shared_->quit.load(std::memory_order_relaxed)) ::_exit(0);
        io::cpu_relax();
      }
      seen = now;
      const std::size_t from = shared_->push_from.load(std::memory_order_relaxed);
      const std::size_t n = shared_->push_bytes.load(std::memory_order_relaxed);
      if (io::push_to_process(parent, to + from, std::span{source_}.subspan(from, n))) ::_exit(1);
      shared_->done.store(seen, std::memory_order_release);
    }
  }

  std::vector<std::byte> source_;
  std::vector<std::byte> destination_;
  shared_page* shared_ = nullptr;
  pid_t pid_ = -1;
};

sender_process& sender() {
  static sender_process s;
  return s;
}

void size_args(benchmark::internal::Benchmark* b) {
  for (std::int64_t n : {256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}) b->Arg(n);
  b->UseRealTime();
}

bool skip_without_reads(benchmark::State& state, sender_process& s, std::size_t n) {
  if (!s.up()) {
    state.SkipWithError("could not fork the sender");
    return true;
  }
  if (const std::error_code ec =
          io::pull_from_process(s.child(), s.source_address(), s.destination(n))) {
    state.SkipWithError(("this process may not read another's memory: " + ec.message()).c_str());
    return true;
  }
  return false;
}

void BM_pull_whole(benchmark::State& state) {
  sender_process& s = sender();
  const auto n = static_cast<std::size_t>(state.range(0));
  if (skip_without_reads(state, s, n)) return;
  for (auto _ : state) {
    if (io::pull_from_process(s.child(), s.source_address(), s.destination(n))) {
      state.SkipWithError("a pull failed");
      break;
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK(BM_pull_whole)->Apply(size_args);

void BM_pull_front_push_back(benchmark::State& state) {
  sender_process& s = sender();
  const auto n = static_cast<std::size_t>(state.range(0));
  if (skip_without_reads(state, s, n)) return;
  const std::size_t half = n / 2;  // the buffers are page-aligned: so is the middle
  for (auto _ : state) {
    const std::uint64_t generation = s.start_push(half, n - half);
    if (io::pull_from_process(s.child(), s.source_address(), s.destination(n).first(half))) {
      state.SkipWithError("a pull failed");
      s.await_push(generation);
      break;
    }
    s.await_push(generation);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK(BM_pull_front_push_back)->Apply(size_args);

// The peer: the same bytes copied within one process (this one's copy of the source).
void BM_memcpy(benchmark::State& state) {
  sender_process& s = sender();
  const auto n = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    std::memcpy(s.destination(n).data(), s.source_here(n).data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK(BM_memcpy)->Apply(size_args);

}  // namespace

BENCHMARK_MAIN();
