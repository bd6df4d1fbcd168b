// rank_port: an app actor resident on the rank actor's reactor thread sends, and receives
// messages already here, as calls whenever the rank actor would answer at once; a receive whose
// message is not here waits in the rank actor and completes without a message, its handler run
// between the app's runs (timeouts, the app's end, quit() and exceptions in that handler
// included); while one of its requests is unanswered, later sends (receives) go as requests too,
// so nothing overtakes; an app elsewhere, or a rank actor on CAF's workers, gets requests, as
// before. Every message arrives once, in order.

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <caf/all.hpp>

#include "actors/actor_errc.hpp"
#include "actors/node.hpp"
#include "actors/rank_port.hpp"
#include "actors/reactor_hosted.hpp"
#include "tests/unit/actors/caf_test_support.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t tag = 9;
constexpr std::uint32_t out_of_range = 5;  // in a world of one

using burst_atom = caf::atom_constant<caf::atom("burst")>;

/// What one burst did: each send's status, and the replies that came for those requested.
struct burst_report {
  std::vector<bool> direct;  // per send: went as a call
  std::uint32_t replies = 0;
  std::uint32_t errors = 0;
};

/// Sends each text of a burst to itself (rank 0) through a rank_port, all from one handler; a
/// text "!" goes to a rank out of range instead (its request is answered with an error). Answers
/// once every requested send was answered.
template <class Base>
class sender : public Base {
 public:
  template <class... Host>
  sender(caf::actor_config& cfg, rank_actor rank, vessel::node* n, Host... host)
      : Base{cfg, host...}, port_{std::move(rank)}, node_{n} {}

  caf::behavior make_behavior() override {
    return {[this](burst_atom, const std::vector<std::string>& texts)
                -> caf::result<std::vector<bool>, std::uint32_t, std::uint32_t> {
      auto promise =
          this->template make_response_promise<std::vector<bool>, std::uint32_t, std::uint32_t>();
      auto report = std::make_shared<burst_report>();
      auto outstanding = std::make_shared<std::uint32_t>(0);
      auto answer_when_all_replied = [=]() mutable {
        if (*outstanding == 0) promise.deliver(report->direct, report->replies, report->errors);
      };
      for (const auto& text : texts) {
        const std::uint32_t dst = text == "!" ? out_of_range : 0;
        auto sent = port_.send(
            this, dst, tag, payload::copy_of(node_->pool(), text).value(),
            [=]() mutable {
              ++report->replies;
              --*outstanding;
              answer_when_all_replied();
            },
            [=](caf::error&) mutable {
              ++report->errors;
              --*outstanding;
              answer_when_all_replied();
            });
        EXPECT_TRUE(sent) << describe(sent.error());
        const bool direct = sent && *sent == rank_port::status::sent;
        report->direct.push_back(direct);
        if (!direct) ++*outstanding;
      }
      answer_when_all_replied();
      return promise;
    }};
  }

 private:
  rank_port port_;
  vessel::node* node_;
};

using take_atom = caf::atom_constant<caf::atom("take")>;
using counts_atom = caf::atom_constant<caf::atom("counts")>;

/// A tag that the receiver takes from a rank out of range instead (answered with an error).
constexpr std::uint64_t from_nowhere = 999;

/// Receives from rank 0 with each tag of a list, all from one handler, through a rank_port.
/// Answers, once every receive has its message, with which went as calls and what each took.
/// A message "quit" makes the handler that takes it quit; one "throw" makes it throw.
class resident_receiver final : public on_reactor_thread<caf::event_based_actor> {
 public:
  resident_receiver(caf::actor_config& cfg, reactor_execution_unit* unit, rank_actor rank)
      : on_reactor_thread{cfg, unit}, port_{std::move(rank)} {}

  caf::behavior make_behavior() override {
    using answer = caf::result<std::vector<bool>, std::vector<std::string>>;
    return {
        [this](take_atom, const std::vector<std::uint64_t>& tags) -> answer {
          return take(tags, caf::timespan{5s});
        },
        [this](take_atom, const std::vector<std::uint64_t>& tags, caf::timespan timeout) -> answer {
          return take(tags, timeout);
        },
        [this](counts_atom) {
          return std::vector<std::uint64_t>{port_.direct_receives(), port_.requested_receives(),
                                            port_.waited_receives()};
        },
    };
  }

 private:
  caf::result<std::vector<bool>, std::vector<std::string>> take(
      const std::vector<std::uint64_t>& tags, caf::timespan timeout) {
    auto promise = make_response_promise<std::vector<bool>, std::vector<std::string>>();
    struct taken {
      std::vector<bool> direct;
      std::vector<std::string> texts;
      std::size_t waiting = 0;
    };
    auto t = std::make_shared<taken>();
    t->texts.resize(tags.size());
    auto answer_when_all_came = [=]() mutable {
      if (t->waiting == 0) promise.deliver(t->direct, t->texts);
    };
    for (std::size_t i = 0; i < tags.size(); ++i) {
      const std::uint32_t source = tags[i] == from_nowhere ? out_of_range : 0;
      auto got = port_.receive(
          this, source, tags[i], timeout,
          [=, this](const envelope& e) mutable {
            t->texts[i] = std::string{e.data.view()};
            if (t->texts[i] == "quit") return quit(caf::exit_reason::user_shutdown);
            if (t->texts[i] == "throw") throw std::runtime_error{"thrown by a receive's handler"};
            --t->waiting;
            answer_when_all_came();
          },
          [=](caf::error& e) mutable {
            t->texts[i] = "error: " + describe(e);
            --t->waiting;
            answer_when_all_came();
          });
      t->direct.push_back(got.has_value());
      if (got)
        t->texts[i] = std::string{got->data.view()};
      else
        ++t->waiting;
    }
    answer_when_all_came();
    return promise;
  }

  rank_port port_;
};

caf::actor spawn_receiver(vessel::node& n) {
  return caf::actor_cast<caf::actor>(
      n.system().spawn<resident_receiver>(n.reactor_host(), n.rank_actor()));
}

using resident_sender = sender<on_reactor_thread<caf::event_based_actor>>;
using worker_sender = sender<caf::event_based_actor>;

node_config small_config() {
  node_config cfg;
  cfg.pool.classes = {io::size_class_config{4096, 512}};
  return cfg;
}

burst_report burst(caf::scoped_actor& self, const caf::actor& app,
                   const std::vector<std::string>& texts) {
  burst_report out;
  self->request(app, 10s, burst_atom::value, texts)
      .receive(
          [&](std::vector<bool>& direct, std::uint32_t replies, std::uint32_t errors) {
            out = {std::move(direct), replies, errors};
          },
          [](caf::error& e) { ADD_FAILURE() << describe(e); });
  return out;
}

std::string receive(caf::scoped_actor& self, const rank_actor& rank) {
  std::string got;
  self->request(rank, caf::infinite, recv_atom::value, std::uint32_t{0}, tag, caf::timespan{5s})
      .receive([&](const envelope& e) { got = std::string{e.data.view()}; },
               [](caf::error& e) { ADD_FAILURE() << describe(e); });
  return got;
}

TEST(rank_port_test, a_resident_app_sends_as_calls_and_holds_them_back_behind_its_requests) {
  vessel::node n{small_config()};
  ASSERT_NE(n.reactor_host(), nullptr);
  EXPECT_TRUE(rank_port{n.rank_actor()}.has_direct_entry());
  {
    caf::scoped_actor self{n.system()};
    auto app = caf::actor_cast<caf::actor>(
        n.system().spawn<resident_sender>(n.rank_actor(), &n, n.reactor_host()));

    auto first = burst(self, app, {"a", "b", "c"});
    EXPECT_EQ(first.direct, (std::vector<bool>{true, true, true}));

    // "!" cannot be answered at once (no such rank): it goes as a request, and every send of the
    // same handler after it too, or "d" and "e" would overtake it and each other.
    auto second = burst(self, app, {"!", "d", "e"});
    EXPECT_EQ(second.direct, (std::vector<bool>{false, false, false}));
    EXPECT_EQ(second.replies, 2u);
    EXPECT_EQ(second.errors, 1u);

    // Every reply came: calls again.
    auto third = burst(self, app, {"f"});
    EXPECT_EQ(third.direct, (std::vector<bool>{true}));

    for (const char* want : {"a", "b", "c", "d", "e", "f"})
      EXPECT_EQ(receive(self, n.rank_actor()), want);
    testing::kill_and_wait(self, app);
  }
  n.stop();
}

void send_to_self(caf::scoped_actor& self, vessel::node& n, std::uint64_t with_tag,
                  const std::string& text) {
  self->request(n.rank_actor(), caf::infinite, send_atom::value, std::uint32_t{0}, with_tag,
                payload::copy_of(n.pool(), text).value())
      .receive([](sent_atom) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
}

// Returns once the rank actor's stats say `count` of what `field` counts (now), up or down.
void await_stat(caf::scoped_actor& self, vessel::node& n, std::uint64_t rank_stats::*field,
                std::uint64_t count) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    std::uint64_t now = 0;
    self->request(n.rank_actor(), caf::infinite, stats_atom::value)
        .receive([&](const rank_stats& s) { now = s.*field; },
                 [](caf::error& e) { ADD_FAILURE() << describe(e); });
    if (now == count || std::chrono::steady_clock::now() > deadline) {
      ASSERT_EQ(now, count);
      return;
    }
    std::this_thread::sleep_for(1ms);
  }
}

void await_unexpected(caf::scoped_actor& self, vessel::node& n, std::uint64_t count) {
  await_stat(self, n, &rank_stats::unexpected, count);
}

// Returns once `count` receives wait in the rank actor: what the app asked for is posted.
void await_pending(caf::scoped_actor& self, vessel::node& n, std::uint64_t count) {
  await_stat(self, n, &rank_stats::pending_receives, count);
}

using take_result = std::pair<std::vector<bool>, std::vector<std::string>>;

// Asks `app` to take one message per tag, each waiting up to `timeout`; `more` runs while it
// waits (it sends what is missing).
template <class More>
take_result take(caf::scoped_actor& self, const caf::actor& app, std::vector<std::uint64_t> tags,
                 caf::timespan timeout, More more) {
  take_result out;
  self->send(app, take_atom::value, std::move(tags), timeout);
  more();
  self->receive([&](std::vector<bool>& direct, std::vector<std::string>& texts) {
    out = {std::move(direct), std::move(texts)};
  });
  return out;
}

template <class More>
take_result take(caf::scoped_actor& self, const caf::actor& app, std::vector<std::uint64_t> tags,
                 More more) {
  return take(self, app, std::move(tags), caf::timespan{5s}, std::move(more));
}

// The receiver's port counts: direct, requested, waited receives.
std::vector<std::uint64_t> counts(caf::scoped_actor& self, const caf::actor& app) {
  std::vector<std::uint64_t> out;
  self->request(app, 5s, counts_atom::value)
      .receive([&](std::vector<std::uint64_t>& c) { out = std::move(c); },
               [](caf::error& e) { ADD_FAILURE() << describe(e); });
  return out;
}

TEST(rank_port_test, a_resident_app_takes_what_is_here_as_calls_and_waits_for_the_rest) {
  vessel::node n{small_config()};
  {
    caf::scoped_actor self{n.system()};
    auto app = spawn_receiver(n);
    send_to_self(self, n, tag, "a");
    send_to_self(self, n, tag, "b");
    await_unexpected(self, n, 2);
    auto got = take(self, app, {tag, tag, tag}, [&] {
      await_pending(self, n, 1);
      send_to_self(self, n, tag, "c");
    });
    EXPECT_EQ(got.first, (std::vector<bool>{true, true, false}));
    EXPECT_EQ(got.second, (std::vector<std::string>{"a", "b", "c"}));
    // The one that waited was posted by a call and completed without a request.
    EXPECT_EQ(counts(self, app), (std::vector<std::uint64_t>{2, 0, 1}));
    testing::kill_and_wait(self, app);
  }
  n.stop();
}

TEST(rank_port_test, a_receive_that_waits_without_a_request_times_out_as_a_request_does) {
  vessel::node n{small_config()};
  {
    caf::scoped_actor self{n.system()};
    auto app = spawn_receiver(n);
    const auto started = std::chrono::steady_clock::now();
    auto got = take(self, app, {tag}, caf::timespan{50ms}, [] {});
    EXPECT_GE(std::chrono::steady_clock::now() - started, 50ms);
    EXPECT_EQ(got.first, (std::vector<bool>{false}));
    ASSERT_EQ(got.second.size(), 1u);
    EXPECT_NE(got.second[0].find("no message from rank 0 with tag 9 arrived in time"),
              std::string::npos)
        << got.second[0];
    EXPECT_EQ(counts(self, app), (std::vector<std::uint64_t>{0, 0, 1}));
    await_pending(self, n, 0);
    // What comes later waits as unexpected for the next receive.
    send_to_self(self, n, tag, "late");
    await_unexpected(self, n, 1);
    got = take(self, app, {tag}, [] {});
    EXPECT_EQ(got.second, (std::vector<std::string>{"late"}));
    testing::kill_and_wait(self, app);
  }
  n.stop();
}

// Spawns a receiver, has it wait for one message with `tag`, and sends it `text`; returns how
// the receiver ended.
caf::error end_of_a_receiver_given(caf::scoped_actor& self, vessel::node& n,
                                   const std::string& text) {
  auto app = spawn_receiver(n);
  self->monitor(app);
  self->send(app, take_atom::value, std::vector<std::uint64_t>{tag});
  await_pending(self, n, 1);
  send_to_self(self, n, tag, text);
  caf::error reason;
  self->receive([&](const caf::down_msg& d) { reason = d.reason; },
                caf::after(std::chrono::seconds{5}) >> [] { ADD_FAILURE() << "the app lives"; });
  return reason;
}

TEST(rank_port_test, quit_or_an_exception_in_a_handler_run_without_a_message_ends_the_app) {
  vessel::node n{small_config()};
  {
    caf::scoped_actor self{n.system()};
    EXPECT_EQ(end_of_a_receiver_given(self, n, "quit"), caf::exit_reason::user_shutdown);
    auto thrown = end_of_a_receiver_given(self, n, "throw");
    EXPECT_EQ(thrown, caf::sec::runtime_error);
    EXPECT_NE(describe(thrown).find("thrown by a receive's handler"), std::string::npos)
        << describe(thrown);
    // Its rank actor goes on.
    send_to_self(self, n, tag, "after");
    EXPECT_EQ(receive(self, n.rank_actor()), "after");
  }
  n.stop();
}

TEST(rank_port_test, an_app_that_ends_while_its_receive_waits_is_not_called_and_the_rank_goes_on) {
  vessel::node n{small_config()};
  {
    caf::scoped_actor self{n.system()};
    auto app = spawn_receiver(n);
    self->send(app, take_atom::value, std::vector<std::uint64_t>{tag});
    await_pending(self, n, 1);
    testing::kill_and_wait(self, app);
    app = nullptr;
    // The receive it posted takes this one, as its request would have, and the result goes
    // nowhere (under ASan: the port, gone with its actor, is not touched).
    send_to_self(self, n, tag, "to no one");
    await_pending(self, n, 0);
    send_to_self(self, n, tag, "next");
    EXPECT_EQ(receive(self, n.rank_actor()), "next");
  }
  n.stop();
}

TEST(rank_port_test, while_a_receive_request_is_out_later_receives_are_requests_too) {
  vessel::node n{small_config()};
  {
    caf::scoped_actor self{n.system()};
    auto app = spawn_receiver(n);
    constexpr std::uint64_t later = tag + 1;
    send_to_self(self, n, later, "here already");
    await_unexpected(self, n, 1);
    // A receive from a rank out of range goes as a request (answered with the error); the one
    // for `later`, whose message is here, goes behind it.
    auto got = take(self, app, {from_nowhere, later}, [] {});
    EXPECT_EQ(got.first, (std::vector<bool>{false, false}));
    ASSERT_EQ(got.second.size(), 2u);
    EXPECT_EQ(got.second[0].rfind("error: ", 0), 0u) << got.second[0];
    EXPECT_EQ(got.second[1], "here already");
    EXPECT_EQ(counts(self, app), (std::vector<std::uint64_t>{0, 2, 0}));
    // Both answered: a message here is a call again.
    send_to_self(self, n, tag, "again");
    await_unexpected(self, n, 1);
    got = take(self, app, {tag}, [] {});
    EXPECT_EQ(got.first, (std::vector<bool>{true}));
    EXPECT_EQ(got.second, (std::vector<std::string>{"again"}));
    testing::kill_and_wait(self, app);
  }
  n.stop();
}

TEST(rank_port_test, an_app_on_cafs_workers_sends_as_requests) {
  vessel::node n{small_config()};
  {
    caf::scoped_actor self{n.system()};
    auto app = caf::actor_cast<caf::actor>(n.system().spawn<worker_sender>(n.rank_actor(), &n));
    auto sent = burst(self, app, {"x", "y"});
    EXPECT_EQ(sent.direct, (std::vector<bool>{false, false}));
    EXPECT_EQ(sent.replies, 2u);
    EXPECT_EQ(receive(self, n.rank_actor()), "x");
    EXPECT_EQ(receive(self, n.rank_actor()), "y");
    testing::kill_and_wait(self, app);
  }
  n.stop();
}

TEST(rank_port_test, a_rank_actor_on_cafs_workers_has_no_direct_entry) {
  node_config cfg = small_config();
  cfg.rank_actor_on_reactor = false;
  vessel::node n{cfg};
  EXPECT_FALSE(rank_port{n.rank_actor()}.has_direct_entry());
  n.stop();
}

}  // namespace
}  // namespace vessel::actors
