// The simulated network's model (alpha-beta, serialised links, pipelining), its faults (link
// outage, delay, killed rank with the hang report), determinism under seeded randomness, and
// step_driver's handling of chunks from a peer a round ahead.

#include <gtest/gtest.h>

#include <cstring>

#include "collectives/algorithms/rabenseifner_allreduce.hpp"
#include "collectives/algorithms/recursive_doubling_allgather.hpp"
#include "collectives/algorithms/recursive_doubling_allreduce.hpp"
#include "collectives/algorithms/ring_allgather.hpp"
#include "collectives/algorithms/ring_allreduce.hpp"
#include "collectives/algorithms/ring_reduce_scatter.hpp"
#include "collectives/errc.hpp"
#include "collectives/sim/driver.hpp"
#include "sim_harness.hpp"

namespace vessel::collectives {
namespace {

using namespace vessel::collectives::testing;

template <class A>
factory make_factory() {
  return [](const algorithm_params& p) { return std::make_unique<A>(p); };
}

algorithm_params params_of(std::uint32_t size, std::size_t count, std::size_t chunk_bytes,
                           reduce_op op = reduce_op::sum) {
  algorithm_params p;
  p.size = size;
  p.count = count;
  p.type = dtype::int32;
  p.op = op;
  p.chunk_bytes = chunk_bytes;
  return p;
}

std::vector<bytes> inputs_of(const algorithm_params& p, std::size_t elements) {
  std::vector<bytes> inputs;
  for (std::uint32_t r = 0; r < p.size; ++r) {
    inputs.push_back(exact_input(p.type, p.op, r, p.size, elements));
  }
  return inputs;
}

void expect_reference(shape s, const algorithm_params& p, const sim_run& run) {
  const auto expected = expected_outputs(s, p, run.inputs);
  for (std::uint32_t r = 0; r < p.size; ++r) EXPECT_EQ(run.outputs[r], expected[r]) << r;
}

sim::network_config model(double alpha, double beta) {
  sim::network_config c;
  c.link.alpha_s = alpha;
  c.link.beta_s_per_byte = beta;
  return c;
}

TEST(CollectivesSimNetwork, OneMessageTakesAlphaPlusBytesTimesBeta) {
  // Two-rank allgather of 1000 int32 in one chunk: each rank sends one 4000-byte message.
  const auto p = params_of(2, 1000, 1 << 20);
  run_options options;
  options.config = model(1e-5, 1e-9);
  const auto run = run_collective(make_factory<ring_allgather>(), shape::allgather, p,
                                  inputs_of(p, 1000), options);
  ASSERT_TRUE(run.report.completed()) << run.report.explain();
  EXPECT_DOUBLE_EQ(run.report.completion_s, 1e-5 + 4000 * 1e-9);
  EXPECT_EQ(run.report.messages, 2u);
  EXPECT_EQ(run.report.bytes, 8000u);
}

TEST(CollectivesSimNetwork, ChunksOnOneLinkAreSerialisedButTheirLatencyOverlaps) {
  // Same 4000 bytes in 4 chunks: the last leaves after 4 transmissions, then flies alpha.
  const auto p = params_of(2, 1000, 1000);
  run_options options;
  options.config = model(1e-5, 1e-9);
  const auto run = run_collective(make_factory<ring_allgather>(), shape::allgather, p,
                                  inputs_of(p, 1000), options);
  ASSERT_TRUE(run.report.completed());
  EXPECT_DOUBLE_EQ(run.report.completion_s, 4 * 1000 * 1e-9 + 1e-5);
  EXPECT_EQ(run.report.messages, 8u);
}

/// Each rank sends its block to every other rank at once (a naive allgather): the one case in
/// this file where a rank uses several links at the same moment.
class send_to_all final : public algorithm {
 public:
  explicit send_to_all(const algorithm_params& p) : p_(p) {}
  std::string_view name() const noexcept override { return "send_to_all"; }
  result<void> start(const algorithm_buffers& b, std::vector<send_step>& out) override {
    const std::size_t block = p_.count * size_of(p_.type);
    std::memcpy(b.output.data() + p_.rank * block, b.input.data(), block);
    for (std::uint32_t peer = 0; peer < p_.size; ++peer) {
      if (peer != p_.rank) out.push_back({peer, 0, 0, buffer_id::input, 0, block});
    }
    output_ = b.output;
    return outcome::success();
  }
  result<receive_status> on_receive(std::uint32_t peer, std::uint32_t, std::uint32_t,
                                    std::span<const std::byte> data,
                                    std::vector<send_step>&) override {
    std::memcpy(output_.data() + peer * data.size(), data.data(), data.size());
    ++received_;
    return receive_status::consumed;
  }
  bool done() const noexcept override { return received_ + 1 == p_.size; }

 private:
  algorithm_params p_;
  std::span<std::byte> output_;
  std::uint32_t received_ = 0;
};

TEST(CollectivesSimNetwork, OnePortSerialisesARanksSendsOverAllItsLinks) {
  // 5 ranks, 4000-byte blocks: with a port per link every block arrives at alpha + 4000 beta;
  // with one port per rank the fourth leaves after 4 transmissions.
  const auto p = params_of(5, 1000, 1 << 20);
  run_options options;
  options.config = model(1e-5, 1e-9);
  const auto multi =
      run_collective(make_factory<send_to_all>(), shape::allgather, p, inputs_of(p, 1000), options);
  options.config.one_port = true;
  const auto single =
      run_collective(make_factory<send_to_all>(), shape::allgather, p, inputs_of(p, 1000), options);
  ASSERT_TRUE(multi.report.completed());
  ASSERT_TRUE(single.report.completed());
  expect_reference(shape::allgather, p, single);
  EXPECT_DOUBLE_EQ(multi.report.completion_s, 1e-5 + 4000 * 1e-9);
  EXPECT_DOUBLE_EQ(single.report.completion_s, 4 * 4000 * 1e-9 + 1e-5);
}

TEST(CollectivesSimNetwork, DroppedLinkDelaysButLosesNothing) {
  const auto p = params_of(6, 3001, 256);
  run_options options;
  options.config = model(1e-5, 1e-9);
  const auto baseline = run_collective(make_factory<ring_allreduce>(), shape::allreduce, p,
                                       inputs_of(p, 3001), options);
  ASSERT_TRUE(baseline.report.completed());
  options.faults = [](sim::network& net) { net.drop_link(2, 3, 2e-5, 1e-3); };
  const auto run = run_collective(make_factory<ring_allreduce>(), shape::allreduce, p,
                                  inputs_of(p, 3001), options);
  ASSERT_TRUE(run.report.completed()) << run.report.explain();
  expect_reference(shape::allreduce, p, run);
  EXPECT_GT(run.report.resent, 0u);
  EXPECT_EQ(run.report.messages, baseline.report.messages);
  EXPECT_GT(run.report.completion_s, 1e-3);  // nothing crossed 2 -> 3 before the link was back
}

TEST(CollectivesSimNetwork, EveryAlgorithmSurvivesOutagesAndDelays) {
  // Seven ranks (folded for the recursive ones), outages on two links and a delay on a third,
  // all while the collective is in flight: the right result, nothing lost.
  struct entry {
    factory make;
    shape kind;
  };
  const entry all[] = {{make_factory<ring_allreduce>(), shape::allreduce},
                       {make_factory<recursive_doubling_allreduce>(), shape::allreduce},
                       {make_factory<rabenseifner_allreduce>(), shape::allreduce},
                       {make_factory<ring_reduce_scatter>(), shape::reduce_scatter},
                       {make_factory<ring_allgather>(), shape::allgather},
                       {make_factory<recursive_doubling_allgather>(), shape::allgather}};
  for (const auto& e : all) {
    const auto p = params_of(7, 501, 128);
    const std::size_t elements = e.kind == shape::reduce_scatter ? 501 * 7 : 501;
    run_options options;
    options.config = model(1e-5, 1e-9);
    options.config.jitter_s = 3e-6;
    options.faults = [](sim::network& net) {
      net.drop_link(1, 3, 0, 4e-4);  // the fold's and the ring's links
      net.drop_link(2, 3, 1e-5, 2e-4);
      net.drop_link(3, 2, 1e-5, 3e-4);
      net.delay_link(5, 6, 1e-4, 0, 5e-4);
    };
    const auto run = run_collective(e.make, e.kind, p, inputs_of(p, elements), options);
    ASSERT_TRUE(run.report.completed()) << run.report.explain();
    expect_reference(e.kind, p, run);
    EXPECT_EQ(run.report.discarded, 0u);
  }
}

TEST(CollectivesSimNetwork, SixtyFourRanksNameTheKilledRank) {
  // Rabenseifner on 64: halving round k pairs r with r ^ (32 >> (k - 1)). Rank 5 waits for the
  // dead 37 in round 1, rank 36 in round 6 (bit 0); everyone else waits through them.
  const auto p = params_of(64, 640, 256);
  run_options options;
  options.faults = [](sim::network& net) { net.kill_rank(37, 0); };
  const auto run = run_collective(make_factory<rabenseifner_allreduce>(), shape::allreduce, p,
                                  inputs_of(p, 640), options);
  EXPECT_EQ(run.report.status, sim::run_report::outcome::blocked);
  EXPECT_EQ(run.report.root_causes(), (std::vector<std::uint32_t>{37}));
  EXPECT_EQ(run.report.ranks[5].waits_for, (std::vector<std::uint32_t>{37}));
  EXPECT_EQ(run.report.ranks[5].round, 1u);
  EXPECT_EQ(run.report.ranks[36].waits_for, (std::vector<std::uint32_t>{37}));
  EXPECT_EQ(run.report.ranks[36].round, 6u);
  EXPECT_EQ(run.report.blocked_ranks().size(), 63u);
}

TEST(CollectivesSimNetwork, DelayedLinkSlowsTheRingByTheDelay) {
  const auto p = params_of(4, 400, 1 << 20);
  run_options options;
  options.config = model(1e-5, 1e-9);
  const auto baseline = run_collective(make_factory<ring_allreduce>(), shape::allreduce, p,
                                       inputs_of(p, 400), options);
  options.faults = [](sim::network& net) { net.delay_link(1, 2, 5e-4); };
  const auto run = run_collective(make_factory<ring_allreduce>(), shape::allreduce, p,
                                  inputs_of(p, 400), options);
  ASSERT_TRUE(run.report.completed()) << run.report.explain();
  expect_reference(shape::allreduce, p, run);
  // Every one of the 2 (p - 1) steps crosses 1 -> 2 once on the critical path of some block;
  // the run is at least one delay longer.
  EXPECT_GE(run.report.completion_s, baseline.report.completion_s + 5e-4);
}

TEST(CollectivesSimNetwork, KilledRankLeavesPeersBlockedAndIsNamedAsTheCause) {
  const auto p = params_of(8, 64, 64);
  run_options options;
  options.faults = [](sim::network& net) { net.kill_rank(3, 0); };
  const auto run = run_collective(make_factory<ring_allreduce>(), shape::allreduce, p,
                                  inputs_of(p, 64), options);
  EXPECT_EQ(run.report.status, sim::run_report::outcome::blocked);
  EXPECT_EQ(run.report.blocked_ranks(), (std::vector<std::uint32_t>{0, 1, 2, 4, 5, 6, 7}));
  EXPECT_EQ(run.report.ranks[4].waits_for, (std::vector<std::uint32_t>{3}));
  EXPECT_EQ(run.report.ranks[5].waits_for, (std::vector<std::uint32_t>{4}));
  EXPECT_EQ(run.report.root_causes(), (std::vector<std::uint32_t>{3}));
  EXPECT_GT(run.report.discarded, 0u);  // rank 2's chunks to the dead rank 3
  const std::string text = run.report.explain();
  EXPECT_NE(text.find("rank 4 in round 0 waits for rank 3 (killed)"), std::string::npos) << text;
  EXPECT_NE(text.find("root cause: killed rank 3"), std::string::npos) << text;
}

TEST(CollectivesSimNetwork, RankKilledMidwayIsFoundThroughTheWaitChain) {
  // Recursive doubling on 8 (round k pairs r with r ^ 2^(k-1)): rank 5 sends its round-1 chunk
  // and dies before anything reaches it. Rank 7 waits for 5 in round 2, rank 3 for 7 in round
  // 3, rank 1 for 5 in round 3; everyone else finishes.
  const auto p = params_of(8, 16, 1024);
  run_options options;
  options.config = model(1e-5, 1e-9);
  options.faults = [](sim::network& net) { net.kill_rank(5, 0.5e-5); };
  const auto run = run_collective(make_factory<recursive_doubling_allreduce>(), shape::allreduce, p,
                                  inputs_of(p, 16), options);
  EXPECT_EQ(run.report.status, sim::run_report::outcome::blocked);
  EXPECT_TRUE(run.report.ranks[5].killed);
  EXPECT_EQ(run.report.blocked_ranks(), (std::vector<std::uint32_t>{1, 3, 7}));
  EXPECT_EQ(run.report.ranks[7].waits_for, (std::vector<std::uint32_t>{5}));
  EXPECT_EQ(run.report.ranks[3].waits_for, (std::vector<std::uint32_t>{7}));
  EXPECT_EQ(run.report.ranks[3].round, 3u);
  EXPECT_EQ(run.report.root_causes(), (std::vector<std::uint32_t>{5}));
  const std::string text = run.report.explain();
  EXPECT_EQ(text,
            "blocked at 30.192 us; 21 messages, 1344 bytes, 0 resent, 3 discarded\n"
            "rank 1 in round 3 waits for rank 5 (killed)\n"
            "rank 3 in round 3 waits for rank 7 (blocked)\n"
            "rank 5 was killed at 5 us\n"
            "rank 7 in round 2 waits for rank 5 (killed); chunks kept for later rounds: 1\n"
            "root cause: killed rank 5\n");
}

TEST(CollectivesSimNetwork, SeededJitterAndSkewAreDeterministic) {
  const auto p = params_of(13, 777, 128);
  auto once = [&](std::uint64_t seed) {
    run_options options;
    options.config = model(1e-5, 1e-9);
    options.config.seed = seed;
    options.config.jitter_s = 2e-5;
    options.config.start_skew_s = 1e-4;
    auto run = run_collective(make_factory<rabenseifner_allreduce>(), shape::allreduce, p,
                              inputs_of(p, 777), options);
    EXPECT_TRUE(run.report.completed()) << run.report.explain();
    expect_reference(shape::allreduce, p, run);
    return run.report;
  };
  const auto a = once(7);
  const auto b = once(7);
  const auto c = once(8);
  EXPECT_EQ(a.completion_s, b.completion_s);
  for (std::uint32_t r = 0; r < p.size; ++r) EXPECT_EQ(a.ranks[r].done_s, b.ranks[r].done_s);
  EXPECT_NE(a.completion_s, c.completion_s);
}

TEST(CollectivesSimNetwork, SkewedStartsExerciseChunksFromAPeerARoundAhead) {
  // Large skew: late ranks receive chunks before they start and from partners rounds ahead;
  // every algorithm still completes with the reference.
  for (std::uint32_t size : {5u, 8u, 12u}) {
    const auto p = params_of(size, 203, 64, reduce_op::max);
    run_options options;
    options.config = model(1e-6, 1e-10);
    options.config.seed = size;
    options.config.start_skew_s = 1e-3;
    options.config.jitter_s = 1e-5;
    for (const factory& f :
         {make_factory<recursive_doubling_allreduce>(), make_factory<rabenseifner_allreduce>(),
          make_factory<ring_allreduce>()}) {
      const auto run = run_collective(f, shape::allreduce, p, inputs_of(p, 203), options);
      ASSERT_TRUE(run.report.completed()) << run.report.explain();
      expect_reference(shape::allreduce, p, run);
    }
  }
}

TEST(CollectivesSimNetwork, MismatchedAlgorithmCountFails) {
  sim::network_config c;
  c.ranks = 3;
  sim::network net(c);
  const auto report = net.run({}, {});
  EXPECT_EQ(report.status, sim::run_report::outcome::failed);
  EXPECT_EQ(report.error, errc::invalid_argument);
}

struct owned_payload {
  bytes b;
  const std::byte* data() const noexcept { return b.data(); }
  std::size_t size() const noexcept { return b.size(); }
};

TEST(CollectivesStepDriver, KeepsAChunkFromARoundAheadAndOffersItAgain) {
  // Rank 0 of 4 in recursive doubling: round 1 with rank 1, round 2 with rank 2. Rank 2's
  // round-2 chunk arrives first: kept; once rank 1's round-1 chunk is in, both are consumed.
  auto params = params_of(4, 2, 1024);
  recursive_doubling_allreduce algo(params);
  bytes input = exact_input(dtype::int32, reduce_op::sum, 0, 4, 2);
  bytes output(8);
  algorithm_buffers buffers{input, output, {}};
  bytes scratch(algo.scratch_bytes());
  buffers.scratch = scratch;
  step_driver<owned_payload> driver(algo, buffers);
  std::vector<std::pair<send_step, bytes>> sent;
  auto emit = [&](const send_step& s, std::span<const std::byte> b) {
    sent.emplace_back(s, bytes(b.begin(), b.end()));
  };
  ASSERT_TRUE(driver.start(emit));
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].first.peer, 1u);
  EXPECT_EQ(sent[0].second, input);

  const bytes from1 = exact_input(dtype::int32, reduce_op::sum, 1, 4, 2);
  bytes from23 = exact_input(dtype::int32, reduce_op::sum, 2, 4, 2);
  const bytes in3 = exact_input(dtype::int32, reduce_op::sum, 3, 4, 2);
  ASSERT_TRUE(reduce_into(from23, in3, dtype::int32, reduce_op::sum));

  ASSERT_TRUE(driver.deliver(2, 2, 0, owned_payload{from23}, emit));
  EXPECT_EQ(driver.kept_count(), 1u);
  EXPECT_EQ(sent.size(), 1u);
  ASSERT_TRUE(driver.deliver(1, 1, 0, owned_payload{from1}, emit));
  EXPECT_EQ(driver.kept_count(), 0u);
  EXPECT_TRUE(driver.done());
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[1].first.peer, 2u);
  std::vector<bytes> all;
  for (std::uint32_t r = 0; r < 4; ++r)
    all.push_back(exact_input(dtype::int32, reduce_op::sum, r, 4, 2));
  EXPECT_EQ(output, serial_reduce(all, dtype::int32, reduce_op::sum));
}

// A driver over real links posts its receives in before_sends: the landing places must be fixed
// by then (start() fixed them), and no chunk may have gone out yet (a peer's answer would find
// no receive and be copied twice).
TEST(CollectivesStepDriver, BeforeSendsRunsOnceBetweenTheStartAndTheFirstSend) {
  auto params = params_of(2, 1024, 1024);  // 4 KiB per rank, 1 KiB chunks
  params.rank = 0;
  ring_allgather algo(params);
  bytes input(4096, std::byte{7}), output(8192);
  step_driver<owned_payload> driver(algo, {input, output, {}});
  std::size_t sends = 0, calls = 0, sends_before = 0;
  std::span<std::byte> landing;
  auto emit = [&](const send_step&, std::span<const std::byte>) { ++sends; };
  ASSERT_TRUE(driver.start(emit, [&] {
    ++calls;
    sends_before = sends;
    landing = algo.landing(1, 0, 0);  // rank 1's first chunk: its block of the output
  }));
  EXPECT_EQ(calls, 1u);
  EXPECT_EQ(sends_before, 0u);
  EXPECT_GT(sends, 0u);
  ASSERT_EQ(landing.size(), 1024u);
  EXPECT_EQ(landing.data(), output.data() + 4096);
}

TEST(CollectivesStepDriver, BrokenChunksAreProtocolViolations) {
  auto params = params_of(4, 100, 64);
  params.rank = 1;
  std::vector<std::pair<send_step, bytes>> sent;
  auto emit = [&](const send_step& s, std::span<const std::byte> b) {
    sent.emplace_back(s, bytes(b.begin(), b.end()));
  };
  bytes input(400), output(400);
  auto fresh = [&](ring_allreduce& algo) {
    step_driver<owned_payload> d(algo, {input, output, {}});
    EXPECT_TRUE(d.start(emit));
    return d;
  };
  {
    ring_allreduce algo(params);
    auto d = fresh(algo);
    EXPECT_EQ(d.deliver(2, 0, 0, owned_payload{bytes(64)}, emit).error(),
              errc::protocol_violation);  // rank 1 hears only from rank 0
  }
  {
    ring_allreduce algo(params);
    auto d = fresh(algo);
    EXPECT_EQ(d.deliver(0, 0, 0, owned_payload{bytes(60)}, emit).error(),
              errc::protocol_violation);  // wrong size
  }
  {
    ring_allreduce algo(params);
    auto d = fresh(algo);
    EXPECT_TRUE(d.deliver(0, 0, 0, owned_payload{bytes(64)}, emit));
    EXPECT_EQ(d.deliver(0, 0, 0, owned_payload{bytes(64)}, emit).error(),
              errc::protocol_violation);  // duplicate
  }
  {
    ring_allreduce algo(params);
    auto d = fresh(algo);
    EXPECT_EQ(d.deliver(0, 99, 0, owned_payload{bytes(64)}, emit).error(),
              errc::protocol_violation);  // unknown step
  }
  {
    recursive_doubling_allreduce algo(params);
    bytes scratch(algo.scratch_bytes());
    step_driver<owned_payload> d(algo, {input, output, scratch});
    ASSERT_TRUE(d.start(emit));
    EXPECT_EQ(d.deliver(3, 1, 0, owned_payload{bytes(64)}, emit).error(),
              errc::protocol_violation);  // rank 3 is not rank 1's round-1 partner
  }
}

TEST(CollectivesSimAlgorithmsParams, BadParametersAndShortBuffersAreErrors) {
  std::vector<send_step> out;
  bytes small(4), big(4096);
  {
    auto p = params_of(4, 100, 64);
    p.rank = 4;
    ring_allreduce algo(p);
    EXPECT_EQ(algo.start({big, big, {}}, out).error(), errc::invalid_argument);
  }
  {
    auto p = params_of(4, 100, 64);
    p.type = dtype::float32;
    p.op = reduce_op::bxor;
    rabenseifner_allreduce algo(p);
    EXPECT_EQ(algo.start({big, big, {}}, out).error(), errc::unsupported_op);
  }
  {
    auto p = params_of(4, 100, 64);
    recursive_doubling_allreduce algo(p);
    EXPECT_EQ(algo.start({small, big, big}, out).error(), errc::size_mismatch);
  }
  {
    auto p = params_of(4, std::numeric_limits<std::size_t>::max() / 2, 64);
    ring_allreduce algo(p);
    EXPECT_FALSE(algo.start({big, big, {}}, out));  // count * 4 wraps: refused, not trusted
  }
}

}  // namespace
}  // namespace vessel::collectives
