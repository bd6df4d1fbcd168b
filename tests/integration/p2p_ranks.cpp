// One rank of the multi-process point-to-point tests (tests/integration/p2p_launch_test.cpp starts
// N of these; tests/integration/mpirun_test.cpp starts them under mpirun). Bootstraps with
// vessel::comm::init() from the environment and runs one scenario; exit code 0 means every check
// of this rank passed, anything else prints why on stderr.
//
//   p2p_ranks allpairs <messages per pair> <max bytes> <seed>   all-pairs, random sizes and tags
//   p2p_ranks cut <messages> <bytes> <cuts> [<min reconnects>]  rank 0 -> 1 with connection cuts
//   p2p_ranks flood <messages> <sleep ms>     rank 0 sends 8-byte messages, rank 1 sleeps first
//   p2p_ranks backpressure <total MiB> <sleep ms> <max RSS MiB> rank 0 pushes, rank 1 sleeps first
//   p2p_ranks collectives                                       barrier + allreduce checks
//   p2p_ranks serve <ms>                                        stay up, then a final exchange
//   p2p_ranks pull [refuse|refuse-push]                         single-copy sends, 2 ranks

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/comm.hpp"
#include "actors/kv_store_client.hpp"
#include "io/single_copy_probe.hpp"
#include "tests/integration/forbid_process_reads.hpp"

namespace {

using namespace std::chrono_literals;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "FAIL: %s\n", why.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

void check(bool ok, const std::string& why) {
  if (!ok) die(why);
}

/// Peak resident set (VmHWM) of this process, in KiB.
long peak_rss_kib() {
  std::ifstream in{"/proc/self/status"};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

std::uint64_t fnv1a(std::span<const std::byte> bytes) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::byte b : bytes) {
    h ^= static_cast<std::uint8_t>(b);
    h *= 1099511628211ull;
  }
  return h;
}

/// Deterministic content: both sides can rebuild (and so check) every message.
void fill(std::vector<std::byte>& buf, std::uint64_t seed) {
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (std::size_t i = 0; i < buf.size(); ++i) {
    if (i % 8 == 0) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
    buf[i] = static_cast<std::byte>(x >> ((i % 8) * 8));
  }
}

/// What rank `src` sends rank `dst` as its `i`-th message: size and tag from one seeded stream.
struct planned {
  std::size_t size;
  std::uint64_t tag;
};
std::vector<planned> plan(std::uint32_t src, std::uint32_t dst, int count, std::size_t max_bytes,
                          std::uint64_t seed) {
  std::mt19937_64 rng{seed ^ (std::uint64_t{src} << 32) ^ (std::uint64_t{dst} << 48)};
  std::vector<planned> out;
  for (int i = 0; i < count; ++i) {
    // Mostly small, some large: sizes spread over orders of magnitude, as real traffic.
    const int shift = static_cast<int>(rng() % 23);  // up to 4 MiB
    std::size_t size = std::min<std::size_t>(max_bytes, rng() % ((std::size_t{1} << shift) + 1));
    if (i % 7 == 3) size = std::min<std::size_t>(max_bytes, max_bytes - rng() % 1024);  // big
    out.push_back({size, rng() % 4});
  }
  return out;
}
std::uint64_t content_seed(std::uint32_t src, std::uint32_t dst, int i, std::uint64_t seed) {
  return seed * 1000003 + src * 7919 + dst * 104729 + static_cast<std::uint64_t>(i);
}

int allpairs(vessel::comm& c, int count, std::size_t max_bytes, std::uint64_t seed) {
  const std::uint32_t me = c.rank();
  const std::uint32_t n = c.size();
  // Send on a thread while this one receives: neither side waits for the other to finish.
  std::atomic<std::uint64_t> bytes_sent{0};
  std::thread sender{[&] {
    std::vector<std::byte> buf;
    for (std::uint32_t step = 1; step < n; ++step) {
      const std::uint32_t dst = (me + step) % n;
      auto p = plan(me, dst, count, max_bytes, seed);
      for (int i = 0; i < count; ++i) {
        buf.resize(p[i].size);
        fill(buf, content_seed(me, dst, i, seed));
        c.send(buf, dst, p[i].tag);
        bytes_sent += buf.size();
      }
    }
  }};

  // Expected order per (src, tag): the indices src sends with that tag, in send order.
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::vector<int>> expected;
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::size_t> next;
  std::map<std::uint32_t, std::vector<planned>> plans;
  for (std::uint32_t src = 0; src < n; ++src) {
    if (src == me) continue;
    plans[src] = plan(src, me, count, max_bytes, seed);
    for (int i = 0; i < count; ++i) expected[{src, plans[src][i].tag}].push_back(i);
  }
  std::uint64_t bytes_received = 0;
  std::vector<std::byte> want;
  const int total = count * static_cast<int>(n - 1);
  for (int k = 0; k < total; ++k) {
    vessel::recv_status st;
    // Alternate wildcard and specific receives so both matching paths carry traffic.
    std::vector<std::byte> got;
    if (k % 3 == 0) {
      got = c.recv(vessel::any_source, vessel::any_tag, 60s, &st);
    } else {
      // The next message of some source that still owes one, any tag.
      std::uint32_t src = (me + 1 + static_cast<std::uint32_t>(k) % (n - 1)) % n;
      for (std::uint32_t tries = 0; tries < n; ++tries) {
        bool owes = false;
        for (std::uint64_t t = 0; t < 4; ++t) {
          auto it = expected.find({src, t});
          if (it != expected.end() && next[{src, t}] < it->second.size()) owes = true;
        }
        if (owes && src != me) break;
        src = (src + 1) % n;
      }
      got = c.recv(src, vessel::any_tag, 60s, &st);
    }
    auto key = std::make_pair(st.source, st.tag);
    auto it = expected.find(key);
    check(it != expected.end(),
          "unexpected (source, tag) " + std::to_string(st.source) + "," + std::to_string(st.tag));
    std::size_t& pos = next[key];
    check(pos < it->second.size(), "more messages than sent for source " +
                                       std::to_string(st.source) + " tag " +
                                       std::to_string(st.tag));
    const int index = it->second[pos++];
    const planned& p = plans[st.source][index];
    check(got.size() == p.size, "size of message " + std::to_string(index) + " from rank " +
                                    std::to_string(st.source) + ": " + std::to_string(got.size()) +
                                    " != " + std::to_string(p.size) + " (order or loss)");
    want.resize(p.size);
    fill(want, content_seed(st.source, me, index, seed));
    check(fnv1a(got) == fnv1a(want), "checksum of message " + std::to_string(index) +
                                         " from rank " + std::to_string(st.source));
    bytes_received += got.size();
  }
  sender.join();
  for (auto& [key, order] : expected) {
    check(next[key] == order.size(), "missing messages from rank " + std::to_string(key.first));
  }
  std::printf("OK rank %u allpairs: received %d messages, %llu bytes; sent %llu bytes\n", me, total,
              static_cast<unsigned long long>(bytes_received),
              static_cast<unsigned long long>(bytes_sent.load()));
  return 0;
}

// Each message starts with its index and a flag that says it is the last one, so that rank 1
// needs no agreed count when rank 0 streams until it has seen `min_reconnects` reconnects.
struct cut_header {
  int index;
  int last;
};

int cut(vessel::comm& c, int count, std::size_t bytes, int cuts, int min_reconnects) {
  check(c.size() >= 2, "cut needs 2 ranks");
  check(bytes >= sizeof(cut_header), "cut needs messages of at least 8 bytes");
  std::vector<std::byte> buf(bytes);
  if (c.rank() == 0) {
    // Outside killers (ss -K) cannot aim at a moment: stream on until they hit, within a bound.
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    int sent = 0;
    for (bool last = false; !last; ++sent) {
      const bool enough = sent + 1 >= count &&
                          c.link_stats(1).reconnects >= static_cast<std::uint64_t>(min_reconnects);
      check(sent + 1 < count || enough || std::chrono::steady_clock::now() < deadline,
            "no reconnect seen within 60 s while streaming");
      last = enough;
      const cut_header h{sent, last ? 1 : 0};
      std::memcpy(buf.data(), &h, sizeof h);
      c.send(buf, 1, 5);
      // Cut the TCP connection from this side, as the network would, several times mid-stream.
      if (cuts > 0 && sent > 0 && sent % (count / (cuts + 1)) == 0) c.runtime().drop_connection(1);
    }
    auto st = c.link_stats(1);
    std::printf("OK rank 0 cut: sent %d, reconnects %llu, retransmits %llu\n", sent,
                static_cast<unsigned long long>(st.reconnects),
                static_cast<unsigned long long>(st.retransmits));
    // Tells an outside killer to stop (the store lives in this process until it exits).
    (void)c.runtime().store().set("p2p/cut/done", "1");
  } else if (c.rank() == 1) {
    int received = 0;
    for (bool last = false; !last; ++received) {
      vessel::recv_status st = c.recv(buf, 0, 5, 60s);
      cut_header h{-1, 0};
      std::memcpy(&h, buf.data(), sizeof h);
      check(h.index == received, "expected message " + std::to_string(received) + ", got " +
                                     std::to_string(h.index) + " (lost, duplicated or reordered)");
      check(st.bytes == bytes, "size");
      last = h.last != 0;
    }
    // Exactly once: nothing more may be waiting.
    bool extra = false;
    try {
      c.recv(buf, 0, 5, 300ms);
      extra = true;
    } catch (const vessel::comm_timeout&) {
    }
    check(!extra, "a message arrived twice");
    auto st = c.link_stats(0);
    std::printf("OK rank 1 cut: received %d exactly once, in order (duplicates dropped %llu)\n",
                received, static_cast<unsigned long long>(st.duplicates));
  }
  return 0;
}

/// Rank 1 is blocked in recv before rank 0 sends (rank 0 waits first), so each message's first
/// chunk lands in the receive's buffer (runtime: make_receive_into) with no pool copy: sizes of
/// one chunk, several, lent or copied (VESSEL_LEND_BYTES), empty, and one that does not fit
/// (refused whole; the next message still arrives).
int land(vessel::comm& c) {
  check(c.size() >= 2, "land needs 2 ranks");
  const std::vector<std::size_t> sizes = {std::size_t{1} << 20, (std::size_t{3} << 20) + 1,
                                          (std::size_t{9} << 20) + 5, 100, 0,
                                          std::size_t{2} << 20, 4096};
  const std::size_t too_big_at = 5;  // sizes[5] goes to a 1 MiB buffer
  if (c.rank() == 0) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::vector<std::byte> out(sizes[i]);
      fill(out, 40 + i);
      // Rank 1 is in recv by then: it checks each message over 16 MiB first, which under ASan,
      // with the suite's other ranks on both cores, once took longer than 100 ms.
      std::this_thread::sleep_for(250ms);
      c.send(out, 1, 7);
    }
    std::printf("OK rank 0 land: sent %zu\n", sizes.size());
  } else if (c.rank() == 1) {
    std::vector<std::byte> in(std::size_t{16} << 20);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::vector<std::byte> want(sizes[i]);
      fill(want, 40 + i);
      if (i == too_big_at) {
        bool refused = false;
        try {
          c.recv(std::span{in}.first(std::size_t{1} << 20), 0, 7, 30s);
        } catch (const vessel::comm_error& e) {
          refused = e.code() == vessel::actors::comm_errc::buffer_too_small;
        }
        check(refused, "a message larger than the buffer must be refused");
        continue;
      }
      std::fill(in.begin(), in.end(), std::byte{0x5a});
      const vessel::recv_status st = c.recv(in, 0, 7, 30s);
      check(st.bytes == sizes[i], "size of message " + std::to_string(i));
      check(std::equal(want.begin(), want.end(), in.begin()), "bytes of message " + std::to_string(i));
      check(in[sizes[i]] == std::byte{0x5a}, "nothing written past message " + std::to_string(i));
    }
    const auto m = c.matching_stats();
    std::printf("OK rank 1 land: chunks arrived %llu, landed in place %llu\n",
                static_cast<unsigned long long>(m.arrived),
                static_cast<unsigned long long>(m.claimed));
    // Every message's first chunk but the refused one's was posted before it arrived.
    check(m.claimed >= sizes.size() - 1, "first chunks landed in place");
  }
  return 0;
}

/// Rank 1 receives a stream of large messages with receives that time out every millisecond:
/// many time out while a message is landing in their buffer, whose cancel must then wait for
/// that message (and return it) rather than leave the link writing into a buffer the caller
/// reuses. Every message arrives once, in order, intact.
int timeouts(vessel::comm& c, int count, std::size_t bytes) {
  check(c.size() >= 2, "timeouts needs 2 ranks");
  check(bytes >= 16, "timeouts needs messages of at least 16 bytes");
  // One pattern, stamped with the message's index at both ends: cheap to make and to check.
  // A receiver that falls behind stays behind (what waits in the pool costs it a copy more), so
  // the sender also pauses: most receives are then posted before their message arrives.
  std::vector<std::byte> pattern(bytes);
  fill(pattern, 1000);
  auto stamp = [&](std::vector<std::byte>& m, int i) {
    std::memcpy(m.data(), &i, sizeof i);
    std::memcpy(m.data() + m.size() - sizeof i, &i, sizeof i);
  };
  if (c.rank() == 0) {
    std::vector<std::byte> out = pattern;
    for (int i = 0; i < count; ++i) {
      stamp(out, i);
      // Paced: timeouts fall before, during and after the messages' arrival.
      std::this_thread::sleep_for(std::chrono::microseconds{(i % 5) * 4000});
      c.send(out, 1, 5);
    }
    std::printf("OK rank 0 timeouts: sent %d\n", count);
  } else if (c.rank() == 1) {
    std::vector<std::byte> in(bytes), want = pattern;
    long timed_out = 0;
    for (int i = 0; i < count;) {
      try {
        const vessel::recv_status st = c.recv(in, 0, 5, 1ms);
        stamp(want, i);
        check(st.bytes == bytes && in == want, "message " + std::to_string(i) +
                                                   " lost, reordered or corrupt");
        ++i;
      } catch (const vessel::comm_timeout&) {
        ++timed_out;
      }
    }
    bool extra = false;
    try {
      c.recv(in, 0, 5, 300ms);
      extra = true;
    } catch (const vessel::comm_timeout&) {
    }
    check(!extra, "a message arrived twice");
    const auto m = c.matching_stats();
    std::printf("OK rank 1 timeouts: %d messages, %ld receives timed out, %llu chunks landed\n",
                count, timed_out, static_cast<unsigned long long>(m.claimed));
  }
  return 0;
}

int backpressure(vessel::comm& c, long total_mib, long sleep_ms, long max_rss_mib) {
  check(c.size() >= 2, "backpressure needs 2 ranks");
  const std::size_t chunk = 1u << 20;
  const long messages = total_mib;
  std::vector<std::byte> buf(chunk, std::byte{0x5a});
  if (c.rank() == 0) {
    const long before = peak_rss_kib();
    for (long i = 0; i < messages; ++i) {
      std::memcpy(buf.data(), &i, sizeof i);
      c.send(buf, 1, 9);
    }
    const long peak = peak_rss_kib();
    std::printf(
        "OK rank 0 backpressure: pushed %ld MiB; VmHWM %ld MiB (at start %ld MiB), "
        "bound %ld MiB\n",
        total_mib, peak / 1024, before / 1024, max_rss_mib);
    check(peak / 1024 <= max_rss_mib, "sender peak RSS " + std::to_string(peak / 1024) +
                                          " MiB exceeds the bound " + std::to_string(max_rss_mib));
  } else if (c.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds{sleep_ms});
    for (long i = 0; i < messages; ++i) {
      c.recv(buf, 0, 9, 120s);
      long got = -1;
      std::memcpy(&got, buf.data(), sizeof got);
      check(got == i, "backpressure stream out of order at " + std::to_string(i));
    }
    auto ms = c.matching_stats();
    std::printf("OK rank 1 backpressure: received %ld MiB, unexpected peak %zu MiB\n", total_mib,
                ms.unexpected_peak_bytes >> 20);
  }
  return 0;
}

// Many small messages towards a receiver that sleeps first: each one it holds unexpected takes a
// pool block however small it is, so the sender's credit must run out before the blocks do.
// Rank 0 prints its link's reconnects (a receiver out of blocks sheds a message by reconnecting).
int flood(vessel::comm& c, long messages, long sleep_ms) {
  check(c.size() >= 2, "flood needs 2 ranks");
  if (c.rank() == 0) {
    for (long i = 0; i < messages; ++i) c.send(std::as_bytes(std::span{&i, 1}), 1, 10);
    std::byte done{};
    c.recv({&done, 1}, 1, 11, 120s);
    const auto s = c.link_stats(1);
    std::printf("OK rank 0 flood: sent %ld, reconnects %llu, credit stalls %llu\n", messages,
                static_cast<unsigned long long>(s.reconnects),
                static_cast<unsigned long long>(s.credit_stalls));
  } else if (c.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds{sleep_ms});
    for (long i = 0; i < messages; ++i) {
      long got = -1;
      c.recv(std::as_writable_bytes(std::span{&got, 1}), 0, 10, 120s);
      check(got == i,
            "flood out of order at " + std::to_string(i) + ": got " + std::to_string(got));
    }
    const std::byte done{1};
    c.send({&done, 1}, 0, 11);
    const auto m = c.matching_stats();
    std::printf("OK rank 1 flood: received %ld in order, unexpected peak %zu bytes, "
                "%llu withheld\n",
                messages, m.unexpected_peak_bytes,
                static_cast<unsigned long long>(m.credit_withheld));
  }
  return 0;
}

/// Rank 0 sends `messages` of `kib` KiB while rank 1 sleeps, so they queue as unexpected
/// messages, each in a block of the receive pool's class for its size. The queue's bound must
/// stop the sender (credit withheld) before that class runs dry: a link that finds no block
/// reconnects to shed the message. Both ranks check that their link never reconnected.
int queued(vessel::comm& c, long kib, long messages, long sleep_ms) {
  check(c.size() >= 2, "queued needs 2 ranks");
  std::vector<std::byte> buf(static_cast<std::size_t>(kib) << 10, std::byte{0x3c});
  if (c.rank() == 0) {
    for (long i = 0; i < messages; ++i) {
      std::memcpy(buf.data(), &i, sizeof i);
      c.send(buf, 1, 12);
    }
    std::byte done{};
    c.recv({&done, 1}, 1, 13, 120s);
  } else if (c.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds{sleep_ms});
    for (long i = 0; i < messages; ++i) {
      const vessel::recv_status st = c.recv(buf, 0, 12, 120s);
      long got = -1;
      std::memcpy(&got, buf.data(), sizeof got);
      check(st.bytes == buf.size() && got == i, "queued stream out of order at " + std::to_string(i));
    }
    const std::byte done{1};
    c.send({&done, 1}, 0, 13);
  }
  if (c.rank() > 1) return 0;
  const auto s = c.link_stats(1 - c.rank());
  const auto m = c.matching_stats();
  std::printf("OK rank %u queued: %ld messages of %ld KiB, reconnects %llu, unexpected peak %zu "
              "KiB, %llu withheld\n",
              c.rank(), messages, kib, static_cast<unsigned long long>(s.reconnects),
              m.unexpected_peak_bytes >> 10, static_cast<unsigned long long>(m.credit_withheld));
  check(s.reconnects == 0, "the link reconnected (its receive pool ran out of blocks)");
  return 0;
}

int collectives(vessel::comm& c) {
  const std::uint32_t n = c.size();
  for (int round = 0; round < 5; ++round) c.barrier(60s);
  std::vector<std::int64_t> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>(c.rank() * 1000 + i);
  c.allreduce<std::int64_t>(v, vessel::reduce_op::sum, 60s);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::int64_t want =
        1000 * static_cast<std::int64_t>(n) * (n - 1) / 2 + static_cast<std::int64_t>(i * n);
    check(v[i] == want, "allreduce sum at " + std::to_string(i));
  }
  std::vector<double> d{static_cast<double>(c.rank()), -static_cast<double>(c.rank())};
  c.allreduce<double>(d, vessel::reduce_op::max, 60s);
  check(d[0] == n - 1.0 && d[1] == 0.0, "allreduce max");
  std::vector<float> f(3, 0.1f * static_cast<float>(c.rank() + 1));
  c.allreduce<float>(f, vessel::reduce_op::sum, 60s);
  // Every rank must hold the same bits: gather them at rank 0 and compare.
  std::uint32_t bits = 0;
  std::memcpy(&bits, f.data(), sizeof bits);
  std::vector<std::uint64_t> mine{bits};
  std::vector<std::uint64_t> lo{bits}, hi{bits};
  c.allreduce<std::uint64_t>(lo, vessel::reduce_op::min, 60s);
  c.allreduce<std::uint64_t>(hi, vessel::reduce_op::max, 60s);
  check(lo[0] == hi[0], "float allreduce differs across ranks");
  std::printf("OK rank %u collectives\n", c.rank());
  return 0;
}

/// The vessel side of `vessel-bench p2p`: the same loops and output lines as
/// bench/peers/mpi_p2p.cpp (ping-pong half round trip; one-way stream ended by an ack).
int bench(vessel::comm& c, int runs) {
  check(c.size() == 2, "bench runs on 2 ranks");
  const double to_s = 1e-9;
  auto now = [] { return std::chrono::steady_clock::now(); };
  std::vector<std::byte> buf(64u << 20);
  const std::uint32_t peer = 1 - c.rank();
  for (int run = 0; run < runs; ++run) {
    for (std::size_t size = 8; size <= (1u << 20); size *= 8) {
      const int iters = size <= 4096 ? 2000 : size <= 65536 ? 500 : 100;
      const std::span<std::byte> msg{buf.data(), size};
      c.barrier();
      const auto t0 = now();
      for (int i = 0; i < iters; ++i) {
        if (c.rank() == 0) {
          c.send(msg, peer, 1);
          c.recv(msg, peer, 1);
        } else {
          c.recv(msg, peer, 1);
          c.send(msg, peer, 1);
        }
      }
      const double dt = std::chrono::duration<double>(now() - t0).count();
      if (c.rank() == 0) std::printf("latency %zu %.3f\n", size, dt / iters / 2 * 1e6);
    }
    for (std::size_t size = 64u << 10; size <= (64u << 20); size *= 4) {
      const std::size_t total = std::max<std::size_t>(size * 4, 256u << 20);
      const int iters = static_cast<int>(total / size);
      const std::span<std::byte> msg{buf.data(), size};
      c.barrier();
      const auto t0 = now();
      for (int i = 0; i < iters; ++i) {
        if (c.rank() == 0)
          c.send(msg, peer, 2);
        else
          c.recv(msg, peer, 2);
      }
      std::byte ack{};
      if (c.rank() == 0)
        c.recv(std::span{&ack, 1}, peer, 3);
      else
        c.send(std::span{&ack, 1}, peer, 3);
      const double dt = std::chrono::duration<double>(now() - t0).count();
      if (c.rank() == 0) {
        std::printf("bandwidth %zu %.4f\n", size, double(size) * iters / dt * to_s);
      }
    }
  }
  std::printf("OK rank %u bench\n", c.rank());
  return 0;
}

int serve(vessel::comm& c, long ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds{ms});
  // Still working after whatever the test did meanwhile: a ring exchange.
  const std::uint32_t n = c.size();
  std::uint64_t x = c.rank();
  c.send(std::as_bytes(std::span{&x, 1}), (c.rank() + 1) % n, 1);
  std::uint64_t got = 0;
  c.recv(std::as_writable_bytes(std::span{&got, 1}), (c.rank() + n - 1) % n, 1, 30s);
  check(got == (c.rank() + n - 1) % n, "ring exchange");
  std::printf("OK rank %u serve\n", c.rank());
  return 0;
}

/// Single-copy sends between 2 ranks over shm (sizes from VESSEL_PULL_BYTES, 256 KiB, to 512 KiB):
/// a receiver already waiting reads each message from the sender's memory, and the sender writes
/// the back half into the receiver's buffer; one that comes late (the sender waited 1 ms) gets it
/// the ordinary way; two ranks that both send first, then receive, do not wait for each other; a
/// buffer too small refuses the message whole. With `refuse` rank 1 cannot read rank 0's memory
/// (seccomp): rank 0 offers until the refusal reaches it, then sends the ordinary way. With
/// `refuse-push` rank 0 cannot write into rank 1's: rank 1 reads whole messages. Every message
/// arrives intact either way.
int pull(vessel::comm& c, bool refuse, bool refuse_push) {
  check(c.size() == 2, "pull needs 2 ranks");
  const std::uint32_t me = c.rank();
  const std::uint32_t peer = 1 - me;
  const std::vector<std::size_t> sizes = {std::size_t{256} << 10, (std::size_t{384} << 10) + 3,
                                          std::size_t{512} << 10};
  std::uint64_t seed = 900;
  auto expect_message = [&](std::span<const std::byte> got, std::size_t size, std::uint64_t s,
                            const std::string& what) {
    std::vector<std::byte> want(size);
    fill(want, s);
    check(got.size() >= size && std::equal(want.begin(), want.end(), got.begin()), what);
  };
  std::vector<std::byte> in(std::size_t{4} << 20);
  // Both past start-up before the sender's 20 ms start counting: one rank's init may end
  // milliseconds after the other's (its links' pages are touched as they come up).
  c.barrier();

  // The receiver waits first.
  for (std::size_t size : sizes) {
    ++seed;
    if (me == 0) {
      std::vector<std::byte> out(size);
      fill(out, seed);
      std::this_thread::sleep_for(20ms);  // rank 1 is in recv by then
      c.send(out, 1, 5);
    } else {
      const vessel::recv_status st = c.recv(in, 0, 5, 30s);
      check(st.bytes == size, "size of a waited-for message");
      expect_message(in, size, seed, "bytes of a waited-for message of " + std::to_string(size));
    }
  }
  c.barrier();

  // The receiver comes late: each offer waits 1 ms, then the message goes the ordinary way.
  for (std::size_t size : sizes) {
    ++seed;
    if (me == 0) {
      std::vector<std::byte> out(size);
      fill(out, seed);
      c.send(out, 1, 6);
    } else {
      std::this_thread::sleep_for(20ms);
      std::vector<std::byte> got = c.recv(0, 6, 30s);
      check(got.size() == size, "size of a late message");
      expect_message(got, size, seed, "bytes of a late message of " + std::to_string(size));
    }
  }
  c.barrier();

  // Both send first, then receive.
  {
    ++seed;
    std::vector<std::byte> out(std::size_t{320} << 10);
    fill(out, seed * 2 + me);
    c.send(out, peer, 7);
    const vessel::recv_status st = c.recv(in, peer, 7, 30s);
    check(st.bytes == out.size(), "size of a crossed message");
    expect_message(in, out.size(), seed * 2 + peer, "bytes of a crossed message");
  }
  c.barrier();

  // A buffer too small: refused whole, and the next message still arrives.
  ++seed;
  if (me == 0) {
    std::vector<std::byte> out(std::size_t{512} << 10);
    fill(out, seed);
    std::this_thread::sleep_for(20ms);
    c.send(out, 1, 8);
    std::this_thread::sleep_for(20ms);
    c.send(std::span{out}.first(std::size_t{300} << 10), 1, 8);
  } else {
    bool refused = false;
    try {
      c.recv(std::span{in}.first(std::size_t{384} << 10), 0, 8, 30s);
    } catch (const vessel::comm_error& e) {
      refused = e.code() == vessel::actors::comm_errc::buffer_too_small;
    }
    check(refused, "a pulled message larger than the buffer must be refused");
    const vessel::recv_status st = c.recv(in, 0, 8, 30s);
    check(st.bytes == std::size_t{300} << 10, "size of the message after a refused one");
    expect_message(in, st.bytes, seed, "bytes of the message after a refused one");
  }
  c.barrier();

  // Past 512 KiB a message is offered only where this machine's probe says a pull pays (the
  // sender's process measured it at init; single_copy_rate_here() keeps that reading).
  for (const std::size_t size : {std::size_t{1} << 20, (std::size_t{3} << 20) + 5}) {
    ++seed;
    if (me == 0) {
      std::vector<std::byte> out(size);
      fill(out, seed);
      const std::uint64_t offered_before = c.pull_stats().offered;
      std::this_thread::sleep_for(20ms);
      c.send(out, 1, 9);
      const bool offered = c.pull_stats().offered > offered_before;
      const bool expected = !refuse && vessel::io::single_copy_rate_here().pays();
      check(offered == expected, "a message of " + std::to_string(size) +
                                     (expected ? " must be offered" : " must not be offered"));
    } else {
      const vessel::recv_status st = c.recv(in, 0, 9, 30s);
      check(st.bytes == size, "size of a message of " + std::to_string(size));
      expect_message(in, size, seed, "bytes of a message of " + std::to_string(size));
    }
    c.barrier();
  }

  const vessel::pull_stats p = c.pull_stats();
  std::printf(
      "OK rank %u pull: offered %llu, pulled %llu (%llu half pushed), taken late %llu, "
      "refused %llu, discarded %llu, read %llu\n",
      me, static_cast<unsigned long long>(p.offered), static_cast<unsigned long long>(p.pulled),
      static_cast<unsigned long long>(p.pushed), static_cast<unsigned long long>(p.taken_late),
      static_cast<unsigned long long>(p.refused), static_cast<unsigned long long>(p.discarded),
      static_cast<unsigned long long>(p.pulls_done));
  if (refuse) {
    if (me == 0) {
      // The refusal reached us. How many offers went before it depends on the receiver: one
      // descheduled for 1 ms on a loaded machine takes offers late, and until it refuses one,
      // the next send offers again; an offer of the too-large message then comes back
      // discarded (the receiver, with nowhere to put it, reads nothing: its pulls_done is 0).
      check(p.refused >= 1, "a refusal (offered " + std::to_string(p.offered) + ", refused " +
                                std::to_string(p.refused) + ", taken late " +
                                std::to_string(p.taken_late) + ", pulled " +
                                std::to_string(p.pulled) + ")");
    }
    check(me == 0 || p.pulls_done == 0, "nothing read by a rank that may not");
  } else if (me == 0) {
    // Any offer may come late on a loaded machine (a receiver descheduled for 1 ms); the 3 of
    // the late phase always do.
    check(p.pulled >= 1 && p.taken_late >= 3 && p.refused == 0, "offers taken and late ones");
    // The too-large message was refused whole: discarded if its offer was taken, else it went
    // the ordinary way (late); never counted as pulled.
    check(p.discarded <= 1 && p.pulled + p.taken_late + p.discarded == p.offered,
          "every offer counted once (discarded " + std::to_string(p.discarded) + ")");
    // Every message taken is split: the receiver reads the front, we write the back.
    if (refuse_push) {
      check(p.pushed == 0, "no half pushed by a rank that may not write into its peer");
    } else {
      check(p.pushed == p.pulled, "the back half of every pulled message pushed by its sender");
    }
  } else {
    check(p.pulls_done >= 1, "messages read from the sender's memory");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    die("usage: p2p_ranks allpairs|cut|land|timeouts|backpressure|flood|queued|collectives|serve|"
        "pull ...");
  }
  const std::string mode = argv[1];
  auto arg = [&](int i, long fallback) { return argc > i ? std::atol(argv[i]) : fallback; };
  try {
    const std::string pull_variant = mode == "pull" && argc > 2 ? argv[2] : "";
    const bool refuse_pulls = pull_variant == "refuse";
    const bool refuse_pushes = pull_variant == "refuse-push";
    const char* rank_env = std::getenv("VESSEL_RANK");
    const std::string rank_name = rank_env != nullptr ? rank_env : "";
    if (refuse_pulls && rank_name == "1") {
      check(vessel::test::forbid_reading_other_processes(), "seccomp filter");
    }
    if (refuse_pushes && rank_name == "0") {
      check(vessel::test::forbid_writing_into_other_processes(), "seccomp filter");
    }
    vessel::comm c = vessel::comm::init();
    std::printf("rank %u of %u up (%s)\n", c.rank(), c.size(), c.runtime().launch().source.c_str());
    std::fflush(stdout);
    int rc = 0;
    if (mode == "allpairs") {
      rc = allpairs(c, static_cast<int>(arg(2, 20)), static_cast<std::size_t>(arg(3, 1 << 20)),
                    static_cast<std::uint64_t>(arg(4, 1)));
    } else if (mode == "cut") {
      rc = cut(c, static_cast<int>(arg(2, 2000)), static_cast<std::size_t>(arg(3, 4096)),
               static_cast<int>(arg(4, 3)), static_cast<int>(arg(5, 0)));
    } else if (mode == "timeouts") {
      rc = timeouts(c, static_cast<int>(arg(2, 100)), static_cast<std::size_t>(arg(3, 2 << 20)));
    } else if (mode == "land") {
      rc = land(c);
    } else if (mode == "backpressure") {
      rc = backpressure(c, arg(2, 1024), arg(3, 2000), arg(4, 256));
    } else if (mode == "flood") {
      rc = flood(c, arg(2, 100000), arg(3, 1000));
    } else if (mode == "queued") {
      rc = queued(c, arg(2, 200), arg(3, 200), arg(4, 300));
    } else if (mode == "collectives") {
      rc = collectives(c);
    } else if (mode == "bench") {
      rc = bench(c, static_cast<int>(arg(2, 3)));
    } else if (mode == "serve") {
      rc = serve(c, arg(2, 1000));
    } else if (mode == "pull") {
      rc = pull(c, refuse_pulls, refuse_pushes);
    } else {
      die("unknown mode " + mode);
    }
    std::fflush(stdout);
    c.finalize();
    return rc;
  } catch (const std::exception& e) {
    die(std::string{"exception: "} + e.what());
  }
}
