//===- ControlLinkTest.cpp - the launchers' control connection ------------===//
//
// tools/mdrun/ControlLink between a hub and spokes in one process over
// 127.0.0.1: a node's failure reaches the hub and, passed on, the other
// node; the hub's reaches the nodes; a launcher that finished is no
// failure, one that vanished is; a hub nobody can reach is a warning; a
// stranger's bytes are dropped.
//
//===----------------------------------------------------------------------===//

#include "tools/mdrun/ControlLink.h"

#include <chrono>
#include <functional>
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

  void start() {
    auto h = ControlLink::Hub(0, 3);
    ASSERT_TRUE(h.ok()) << h.status();
    hub = std::move(*h);
    node1 = ControlLink::Spoke("127.0.0.1", hub->port(), 1, 5000ms);
    node2 = ControlLink::Spoke("127.0.0.1", hub->port(), 2, 5000ms);
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

} // namespace
} // namespace md::mdrun
