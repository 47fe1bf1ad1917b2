//===- ControlLinkTest.cpp - the launchers' control connection ------------===//
//
// tools/mdrun/ControlLink between a hub and spokes in one process over
// 127.0.0.1: a node's failure reaches the hub and, passed on, the other
// node; the hub's reaches the nodes; a launcher that finished is no
// failure, one that vanished is; a hub nobody can reach is a warning; a
// stranger's bytes are dropped. After a failed attempt the launchers agree
// on a restart (every node restarts, on the hub's port, with every node's
// cause) or on none (a node that cannot, a launcher gone, options that
// differ).
//
//===----------------------------------------------------------------------===//

#include "tools/mdrun/ControlLink.h"

#include <chrono>
#include <functional>
#include <future>
#include <thread>

#include "gtest/gtest.h"

namespace md::mdrun {
namespace {

using namespace std::chrono_literals;

/// Polls every link until `until` says so or 5 s pass; what each poll
/// returned last, by link.
bool pollUntil(const std::vector<ControlLink *> &links,
               std::vector<std::optional<ControlLink::Failure>> &got,
               const std::function<bool()> &until) {
  got.resize(links.size());
  auto end = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < end) {
    for (size_t i = 0; i < links.size(); ++i)
      if (std::optional<ControlLink::Failure> f = links[i]->poll())
        got[i] = f;
    if (until())
      return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

struct Job {
  std::unique_ptr<ControlLink> hub, node1, node2;
  std::vector<std::optional<ControlLink::Failure>> got;

  void start(int64_t restarts = 0) {
    auto h = ControlLink::Hub(0, 3, restarts);
    ASSERT_TRUE(h.ok()) << h.status();
    hub = std::move(*h);
    node1 = ControlLink::Spoke("127.0.0.1", hub->port(), 1, 5000ms, restarts);
    node2 = ControlLink::Spoke("127.0.0.1", hub->port(), 2, 5000ms, restarts);
    // Connected once a heartbeat went both ways: a second of polling.
    auto t = std::chrono::steady_clock::now() + 1200ms;
    ASSERT_TRUE(pollUntil(
        links(), got, [&] { return std::chrono::steady_clock::now() > t; }));
    for (auto &g : got)
      EXPECT_FALSE(g.has_value()) << g->why;
  }
  std::vector<ControlLink *> links() {
    return {hub.get(), node1.get(), node2.get()};
  }
};

TEST(ControlLink, NodeFailureReachesEveryNode) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.start());
  job.node1->abort("rank 3 was killed by signal 9 (Killed)");
  ASSERT_TRUE(pollUntil({job.hub.get(), job.node2.get()}, job.got, [&] {
    return job.got[0].has_value() && job.got[1].has_value();
  }));
  EXPECT_EQ(job.got[0]->why, "node 1: rank 3 was killed by signal 9 (Killed)");
  EXPECT_FALSE(job.got[0]->lost);
  EXPECT_EQ(job.got[1]->why, "node 1: rank 3 was killed by signal 9 (Killed)");
  EXPECT_FALSE(job.got[1]->lost);
}

TEST(ControlLink, HubFailureReachesEveryNode) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.start());
  job.hub->abort("no rank completed a collective\nor a step");
  job.hub.reset(); // the hub's launcher exits right after
  ASSERT_TRUE(pollUntil({job.node1.get(), job.node2.get()}, job.got, [&] {
    return job.got[0].has_value() && job.got[1].has_value();
  }));
  for (auto &g : job.got) {
    EXPECT_EQ(g->why, "node 0: no rank completed a collective or a step");
    EXPECT_FALSE(g->lost);
  }
}

TEST(ControlLink, FinishedIsNotFailedButVanishedIs) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.start());
  job.node1->done();
  job.node1.reset();
  auto t = std::chrono::steady_clock::now() + 300ms;
  EXPECT_TRUE(pollUntil({job.hub.get(), job.node2.get()}, job.got,
                        [&] { return std::chrono::steady_clock::now() > t; }));
  EXPECT_FALSE(job.got[0].has_value()) << job.got[0]->why;

  job.node2.reset(); // without DONE: killed, say
  ASSERT_TRUE(pollUntil({job.hub.get()}, job.got,
                        [&] { return job.got[0].has_value(); }));
  EXPECT_TRUE(job.got[0]->lost);
  EXPECT_NE(job.got[0]->why.find("node 2's launcher is gone"),
            std::string::npos)
      << job.got[0]->why;
}

TEST(ControlLink, UnreachableHubIsAWarning) {
  // A port just released: nothing listens there.
  int port = 0;
  {
    auto l = net::Listener::listen(0);
    ASSERT_TRUE(l.ok()) << l.status();
    port = l->port();
  }
  auto node = ControlLink::Spoke("127.0.0.1", port, 1, 300ms);
  std::vector<std::optional<ControlLink::Failure>> got;
  std::optional<std::string> warning;
  ASSERT_TRUE(pollUntil({node.get()}, got, [&] {
    if (!warning)
      warning = node->takeWarning();
    return warning.has_value();
  }));
  EXPECT_FALSE(got[0].has_value());
  EXPECT_NE(warning->find("no control connection to node 0's launcher"),
            std::string::npos)
      << *warning;
  EXPECT_FALSE(node->takeWarning().has_value()); // once
}

TEST(ControlLink, StrangerIsDropped) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.start());
  auto s = net::connectTo("127.0.0.1", job.hub->port(), net::Clock::now() + 2s);
  ASSERT_TRUE(s.ok()) << s.status();
  std::string junk(8192, 'x');
  ASSERT_TRUE(
      s->sendAll(junk.data(), junk.size(), net::Clock::now() + 2s).ok());
  auto t = std::chrono::steady_clock::now() + 300ms;
  EXPECT_TRUE(pollUntil(job.links(), job.got,
                        [&] { return std::chrono::steady_clock::now() > t; }));
  for (auto &g : job.got)
    EXPECT_FALSE(g.has_value()) << g->why;
}

/// Each link's agree() after attempt `attempt`, at once on threads of
/// their own (each waits for the others), with `ends` by link; the hub
/// offers port 4242.
std::vector<ControlLink::Verdict>
agreeAll(const std::vector<ControlLink *> &links,
         const std::vector<ControlLink::AttemptEnd> &ends, int attempt = 0) {
  std::vector<std::future<ControlLink::Verdict>> pending;
  for (size_t i = 0; i < links.size(); ++i)
    pending.push_back(std::async(std::launch::async, [&, i] {
      return links[i]->agree(
          attempt, ends[i], [] { return absl::StatusOr<int>(4242); }, 5000ms,
          [] { return false; });
    }));
  std::vector<ControlLink::Verdict> verdicts;
  for (auto &p : pending)
    verdicts.push_back(p.get());
  return verdicts;
}

TEST(ControlLink, EveryNodeRestartsWithEveryCause) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.start(2));
  // Node 2's rank died, node 0's saw its peer go; node 1 only followed.
  std::vector<ControlLink::AttemptEnd> ends(3);
  ends[0].cause = "rank 0 failed: gloo: rank 5 closed its connection";
  ends[2].cause = "rank 5 was killed by signal 9 (Killed)";
  std::vector<ControlLink::Verdict> v = agreeAll(job.links(), ends);
  for (const ControlLink::Verdict &verdict : v) {
    EXPECT_TRUE(verdict.restart) << verdict.why;
    EXPECT_EQ(verdict.port, 4242);
    EXPECT_EQ(verdict.cause,
              "node 0: rank 0 failed: gloo: rank 5 closed its connection; "
              "node 2: rank 5 was killed by signal 9 (Killed)");
  }
  // The next attempt's failure is news again, and the attempt after it
  // restarts too.
  job.node1->abort("rank 2 was killed by signal 9 (Killed)");
  ASSERT_TRUE(pollUntil({job.hub.get(), job.node2.get()}, job.got, [&] {
    return job.got[0].has_value() && job.got[1].has_value();
  }));
  EXPECT_EQ(job.got[1]->why, "node 1: rank 2 was killed by signal 9 (Killed)");
  ends.assign(3, {});
  ends[1].cause = "rank 2 was killed by signal 9 (Killed)";
  v = agreeAll(job.links(), ends, 1);
  for (const ControlLink::Verdict &verdict : v) {
    EXPECT_TRUE(verdict.restart) << verdict.why;
    EXPECT_EQ(verdict.cause, "node 1: rank 2 was killed by signal 9 (Killed)");
  }
}

TEST(ControlLink, NoRestartWhenANodeCannot) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.start(2));
  std::vector<ControlLink::AttemptEnd> ends(3);
  ends[1].cause = "rank 1 was killed by signal 9 (Killed)";
  ends[2].noRestart = "interrupted by SIGINT; stopped 1 rank";
  std::vector<ControlLink::Verdict> v = agreeAll(job.links(), ends);
  EXPECT_FALSE(v[0].restart);
  EXPECT_EQ(v[0].why,
            "node 2 cannot restart: interrupted by SIGINT; stopped 1 rank");
  EXPECT_FALSE(v[1].restart);
  EXPECT_EQ(v[1].why, v[0].why);
  // Node 2 said why itself: nothing more to add.
  EXPECT_FALSE(v[2].restart);
  EXPECT_EQ(v[2].why, "");
}

TEST(ControlLink, NoRestartWithoutEveryLauncher) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.start(2));
  job.node2.reset(); // its launcher was killed
  std::vector<ControlLink::AttemptEnd> ends(2);
  ends[1].cause = "rank 1 failed: gloo: rank 2 closed its connection";
  auto t0 = std::chrono::steady_clock::now();
  std::vector<ControlLink::Verdict> v =
      agreeAll({job.hub.get(), job.node1.get()}, ends);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  for (const ControlLink::Verdict &verdict : v) {
    EXPECT_FALSE(verdict.restart);
    EXPECT_NE(verdict.why.find("node 2's launcher is gone"), std::string::npos)
        << verdict.why;
  }
}

TEST(ControlLink, NodesStopAtTheHubsWord) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.start(2));
  // Node 0 ran out of restarts: the nodes stop at its word, not their wait.
  std::vector<ControlLink::AttemptEnd> ends(3);
  ends[0].noRestart = "no restart left (--max-restarts 2)";
  std::vector<ControlLink::Verdict> v = agreeAll(job.links(), ends);
  EXPECT_FALSE(v[0].restart);
  EXPECT_EQ(v[0].why, "");
  for (int n : {1, 2}) {
    EXPECT_FALSE(v[n].restart);
    EXPECT_EQ(v[n].why,
              "node 0 cannot restart: no restart left (--max-restarts 2)");
  }
}

TEST(ControlLink, DifferentMaxRestartsAreRefused) {
  auto h = ControlLink::Hub(0, 2, 2);
  ASSERT_TRUE(h.ok()) << h.status();
  std::unique_ptr<ControlLink> hub = std::move(*h);
  auto node = ControlLink::Spoke("127.0.0.1", hub->port(), 1, 5000ms, 0);
  std::vector<std::optional<ControlLink::Failure>> got;
  ASSERT_TRUE(pollUntil({hub.get(), node.get()}, got, [&] {
    return got[0].has_value() && got[1].has_value();
  }));
  const std::string why = "node 1's launcher has --max-restarts 0, node 0's "
                          "2: every node's launcher needs the same options";
  EXPECT_EQ(got[0]->why, why);
  EXPECT_EQ(got[1]->why, "node 0: " + why);
  // And such a job never restarts.
  std::vector<ControlLink::AttemptEnd> ends(2);
  std::vector<ControlLink::Verdict> v = agreeAll({hub.get(), node.get()}, ends);
  EXPECT_FALSE(v[0].restart);
  EXPECT_EQ(v[0].why, why);
  EXPECT_FALSE(v[1].restart);
  EXPECT_EQ(v[1].why, why);
}

} // namespace
} // namespace md::mdrun
