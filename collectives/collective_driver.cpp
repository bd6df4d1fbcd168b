#include "collectives/collective_driver.hpp"

#include <algorithm>
#include <span>
#include <utility>

#include "actors/actor_errc.hpp"
#include "actors/message_matcher.hpp"
#include "actors/runtime.hpp"
#include "collectives/errc.hpp"

namespace vessel::collectives {

namespace {

// The nudger's receive: the last sequence number of the last communicator id and attempt, a
// tag no collective reaches (2^40 calls on id 16383), posted and cancelled at once.
constexpr std::uint64_t nudge_tag =
    collective_tag(max_communicator_id, (std::uint64_t{1} << attempt_shift) - 1, max_attempt);

std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  const auto now = std::chrono::steady_clock::now();
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::time_point::max() - now)) {
    return std::chrono::steady_clock::time_point::max();
  }
  return now + timeout;
}

}  // namespace

result<std::size_t> collective_driver::output_bytes(const collective_call& call,
                                                    std::uint32_t size) {
  const std::size_t element = size_of(call.type);
  if (element == 0) return errc::unsupported_type;
  const std::size_t in = call.input.size();
  if (in % element != 0) return errc::size_mismatch;
  const std::size_t n = size;
  switch (call.op) {
    case collective_op::barrier: return std::size_t{0};
    case collective_op::broadcast:
    case collective_op::reduce:
    case collective_op::allreduce: return in;
    case collective_op::allgather:
    case collective_op::gather: return in * n;
    case collective_op::reduce_scatter:
    case collective_op::scatter:
      if ((in / element) % n != 0) return errc::size_mismatch;
      return in / n;
    case collective_op::alltoall:
      if ((in / element) % n != 0) return errc::size_mismatch;
      return in;
  }
  return errc::invalid_argument;
}

collective_driver::collective_driver(communicator& comm, actors::runtime& rt,
                                     collective_driver_config config)
    : comm_{comm}, rt_{rt}, config_{config}, rank_{comm.rank()}, size_{comm.size()} {
  nudger_ = std::thread{[this] { nudge_loop(); }};
  thread_ = std::thread{[this] { run(); }};
}

collective_driver::~collective_driver() {
  {
    std::lock_guard lock{mutex_};
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  nudger_.join();
}

void collective_driver::submit(collective_call call, completion done) {
  {
    std::lock_guard lock{mutex_};
    if (!stopping_) {
      queued_.push_back(job{std::move(call), std::move(done), {}, {}, {}});
      done = nullptr;
    }
  }
  if (done) {
    done(collective_outcome{make_error_code(actors::actor_errc::node_stopped),
                            "the collective driver is stopping",
                            {}});
    return;
  }
  wake_.notify_all();
}

collective_driver_stats collective_driver::stats() const {
  std::lock_guard lock{mutex_};
  return stats_;
}

void collective_driver::start(job& j) {
  const collective_call& c = j.call;
  auto out = output_bytes(c, size_);
  if (!out) {
    j.done(collective_outcome{out.error(), "bad call: " + out.error().message(), {}});
    j.done = nullptr;
    return;
  }
  j.output.assign(out.value(), std::byte{0});
  j.deadline = deadline_after(c.timeout);
  call_options o;
  o.algorithm = c.algorithm;
  o.root = c.root;
  o.timeout = c.timeout;
  const std::span<const std::byte> in{c.input};
  const std::span<std::byte> output{j.output};
  switch (c.op) {
    case collective_op::barrier: j.request = comm_.ibarrier(o); break;
    case collective_op::broadcast: j.request = comm_.ibroadcast(in, output, c.type, o); break;
    case collective_op::reduce:
      j.request = comm_.ireduce(in, output, c.type, c.reduction, o);
      break;
    case collective_op::allreduce:
      j.request = comm_.iallreduce(in, output, c.type, c.reduction, o);
      break;
    case collective_op::allgather: j.request = comm_.iallgather(in, output, c.type, o); break;
    case collective_op::reduce_scatter:
      j.request = comm_.ireduce_scatter(in, output, c.type, c.reduction, o);
      break;
    case collective_op::gather: j.request = comm_.igather(in, output, c.type, o); break;
    case collective_op::scatter: j.request = comm_.iscatter(in, output, c.type, o); break;
    case collective_op::alltoall: j.request = comm_.ialltoall(in, output, c.type, o); break;
  }
}

void collective_driver::finish(job& j) {
  // Done already: wait() returns the outcome at once (or, for a forced job, fails it).
  auto r = j.request.wait();
  collective_outcome o;
  if (!r) {
    o.error = r.error();
    o.detail = j.request.detail();
  } else {
    if (j.call.op == collective_op::gather && rank_ != j.call.root) j.output.clear();
    o.output = std::move(j.output);
  }
  {
    std::lock_guard lock{mutex_};
    ++(o.error ? stats_.failed : stats_.succeeded);
  }
  j.done(std::move(o));
  j.done = nullptr;
}

void collective_driver::run() {
  for (;;) {
    // Read before looking: a completion after this moves it and cuts the sleep below short.
    const std::uint32_t seen = rt_.events();
    std::deque<job> arrived;
    bool stop = false;
    {
      std::unique_lock lock{mutex_};
      if (in_flight_.empty()) {
        wake_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
      }
      arrived.swap(queued_);
      stop = stopping_;
    }
    for (job& j : arrived) {
      if (stop) {
        j.done(collective_outcome{make_error_code(actors::actor_errc::node_stopped),
                                  "the collective driver is stopping",
                                  {}});
        std::lock_guard lock{mutex_};
        ++stats_.failed;
        continue;
      }
      start(j);
      if (!j.done) {  // refused before it started
        std::lock_guard lock{mutex_};
        ++stats_.failed;
        continue;
      }
      in_flight_.push_back(std::move(j));
      std::lock_guard lock{mutex_};
      ++stats_.started;
    }
    if (stop && in_flight_.empty()) {
      std::lock_guard lock{mutex_};
      driver_done_ = true;
      wake_.notify_all();
      return;
    }

    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      if (it->request.test()) {
        finish(*it);
        it = in_flight_.erase(it);
      } else {
        ++it;
      }
    }
    {
      std::lock_guard lock{mutex_};
      stats_.in_flight = in_flight_.size();
    }
    if (in_flight_.empty()) continue;

    // Failures test() does not see: a job past its timeout, or a member gone for good.
    const auto now = std::chrono::steady_clock::now();
    const bool member_down = !comm_.dead_ranks().empty();
    auto stuck = std::find_if(in_flight_.begin(), in_flight_.end(),
                              [&](const job& j) { return member_down || now >= j.deadline; });
    if (stuck != in_flight_.end()) {
      {
        std::lock_guard lock{mutex_};
        nudging_ = true;
        ++stats_.forced;
      }
      wake_.notify_all();
      finish(*stuck);
      in_flight_.erase(stuck);
      {
        std::lock_guard lock{mutex_};
        nudging_ = false;
      }
      continue;
    }
    auto until = now + config_.poll_period;
    for (const job& j : in_flight_) until = std::min(until, j.deadline);
    (void)rt_.wait_events(seen, until);
  }
}

void collective_driver::nudge_loop() {
  std::unique_lock lock{mutex_};
  for (;;) {
    wake_.wait(lock, [this] { return driver_done_ || nudging_; });
    if (driver_done_) return;
    lock.unlock();
    poke();
    std::this_thread::sleep_for(config_.poll_period);
    lock.lock();
  }
}

void collective_driver::poke() {
  actors::p2p_request r;
  actors::p2p_request::make_receive(r, rt_.rank(), nudge_tag);
  r.signal_events(true);
  rt_.submit(r);
  rt_.cancel(r);  // completes it (receive_cancelled), which moves the events word
}

}  // namespace vessel::collectives
