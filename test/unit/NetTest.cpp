//===- NetTest.cpp - sockets and the rendezvous on 127.0.0.1 -------------===//
//
// Ranks are forked processes (CommTestUtil.h) that meet on 127.0.0.1 at a
// port each test picks free, so tests run in parallel. The rendezvous must
// fail every rank with the reason, and never hang, when ranks disagree, go
// missing or reach something else; ReduceInOrder, which the host comms
// reduce with, must match the independent reference.
//
//===----------------------------------------------------------------------===//

#include "runtime/net/Rendezvous.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "runtime/core/Reduce.h"
#include "runtime/net/RendezvousStore.h"
#include "runtime/net/Socket.h"
#include "runtime/net/Wire.h"
#include "test/unit/CommTestUtil.h"

namespace md::net {
namespace {

using namespace md::runtime;
using namespace md::commtest;
using std::chrono::milliseconds;

/// A port nothing listens on right now.
int freePort() {
  absl::StatusOr<Listener> l = Listener::listen(0);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? l->port() : 0;
}

int64_t msSince(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
}

bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}
bool contains(absl::string_view haystack, const std::string &needle) {
  return contains(std::string(haystack), needle);
}

RendezvousOptions rdzv(int port, int rank, int world,
                       milliseconds timeout = milliseconds(10000)) {
  RendezvousOptions o;
  o.masterPort = port;
  o.rank = rank;
  o.worldSize = world;
  o.fingerprint = "plan 1234";
  o.timeout = timeout;
  return o;
}

/// Rank r's payload: sizes from empty to the 1 MiB limit.
std::string payloadOf(int rank, int world) {
  if (rank == 0)
    return "";
  size_t n = rank == world - 1 && world == 4 ? kMaxRendezvousPayload
                                             : size_t(rank) * 1000 + 7;
  std::string p(n, '\0');
  for (size_t i = 0; i < n; ++i)
    p[i] = char((i * 31 + rank) & 0xff);
  return p;
}

class NetTest : public ::testing::Test {
protected:
  Ranks ranks_;
};

//===----------------------------------------------------------------------===//
// Sockets
//===----------------------------------------------------------------------===//

TEST(Socket, HostPortRoundTrips) {
  EXPECT_EQ(formatHostPort("node01", 29500), "node01:29500");
  EXPECT_EQ(formatHostPort("fe80::1%eth0", 80), "[fe80::1%eth0]:80");
  auto hp = parseHostPort("[::1]:4000");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->first, "::1");
  EXPECT_EQ(hp->second, 4000);
  hp = parseHostPort("10.0.0.1:29500");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->first, "10.0.0.1");
  for (const char *bad :
       {"node01", "::1:80", ":80", "host:", "host:70000", "[::1]80"})
    EXPECT_FALSE(parseHostPort(bad).ok()) << bad;
}

TEST(Socket, ConnectRetriesUntilTheDeadlineAndNamesThePeer) {
  const int port = freePort();
  auto start = Clock::now();
  absl::StatusOr<Socket> s =
      connectTo("127.0.0.1", port, Clock::now() + milliseconds(300));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(contains(s.status().message(),
                       absl::StrFormat("connect to 127.0.0.1:%d: Connection "
                                       "refused (retried for",
                                       port)))
      << s.status();
  EXPECT_GE(msSince(start), 250);
  EXPECT_LT(msSince(start), 2000);
}

TEST(Socket, APeerThatClosesIsUnavailableNotSigpipe) {
  absl::StatusOr<Listener> l = Listener::listen(0);
  ASSERT_TRUE(l.ok()) << l.status();
  const Deadline deadline = Clock::now() + milliseconds(2000);
  absl::StatusOr<Socket> client = connectTo("127.0.0.1", l->port(), deadline);
  ASSERT_TRUE(client.ok()) << client.status();
  Socket server;
  while (!server.valid() && Clock::now() < deadline)
    server = *l->acceptNow();
  ASSERT_TRUE(server.valid());
  server.close();
  std::vector<char> big(1 << 20, 'x');
  absl::Status s;
  for (int i = 0; i < 8 && s.ok(); ++i)
    s = client->sendAll(big.data(), big.size(), deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  char c;
  EXPECT_EQ(client->recvAll(&c, 1, deadline).code(),
            absl::StatusCode::kUnavailable);
}

//===----------------------------------------------------------------------===//
// Rendezvous
//===----------------------------------------------------------------------===//

class RendezvousWorld : public NetTest,
                        public ::testing::WithParamInterface<int> {};

INSTANTIATE_TEST_SUITE_P(WorldSizes, RendezvousWorld, worldSizes(),
                         worldSizeName);

TEST_P(RendezvousWorld, EveryRankGetsEveryPayload) {
  const int world = GetParam();
  const int port = freePort();
  std::string failures = ranks_.run(world, [&](int rank, Shared::Rank &out) {
    auto got = Rendezvous(rdzv(port, rank, world), payloadOf(rank, world));
    if (!got.ok())
      return record(out, got.status(), "rendezvous");
    if (int(got->size()) != world)
      return record(out, absl::InternalError("wrong count"), "rendezvous");
    for (int r = 0; r < world; ++r)
      if ((*got)[r] != payloadOf(r, world))
        return record(out,
                      absl::InternalError(
                          absl::StrFormat("payload of rank %d differs", r)),
                      "rendezvous");
    return true;
  });
  EXPECT_EQ(failures, "");
}

TEST_F(NetTest, RendezvousPortIsFreeAgainWhenItEnds) {
  // Rank 0 closes its listener: a second rendezvous on the same port works
  // at once, and so does a rank that started before rank 0.
  const int port = freePort();
  std::string failures = ranks_.run(2, [&](int rank, Shared::Rank &out) {
    for (int round = 0; round < 3; ++round) {
      if (rank == 0 && round == 2)
        std::this_thread::sleep_for(milliseconds(300));
      std::string mine = absl::StrFormat("round %d rank %d", round, rank);
      auto got = Rendezvous(rdzv(port, rank, 2), mine);
      if (!got.ok())
        return record(out, got.status(), "rendezvous");
      if ((*got)[rank] != mine ||
          (*got)[1 - rank] !=
              absl::StrFormat("round %d rank %d", round, 1 - rank))
        return record(out, absl::InternalError("wrong payloads"), "rendezvous");
    }
    return true;
  });
  EXPECT_EQ(failures, "");
}

TEST_F(NetTest, AFingerprintMismatchFailsEveryRankNamingTheOddOne) {
  const int port = freePort();
  std::string failures = ranks_.run(3, [&](int rank, Shared::Rank &out) {
    RendezvousOptions o = rdzv(port, rank, 3);
    if (rank == 2)
      o.fingerprint = "plan 9999";
    auto got = Rendezvous(o, "x");
    if (got.ok())
      return record(out, absl::InternalError("succeeded"), "rendezvous");
    record(out, got.status(), "rendezvous");
    return true;
  });
  ASSERT_EQ(failures, "");
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE(rank);
    std::string msg = ranks_.rank(rank).message;
    EXPECT_EQ(ranks_.rank(rank).statusCode,
              int(absl::StatusCode::kFailedPrecondition))
        << msg;
    EXPECT_TRUE(contains(msg, "fingerprint mismatch: rank 2 has \"plan 9999\", "
                              "but rank 0 has \"plan 1234\""))
        << msg;
    EXPECT_EQ(contains(msg, "rendezvous: rank 0: rendezvous: fingerprint"),
              rank != 0)
        << msg;
  }
}

TEST_F(NetTest, AMissingRankIsNamedWithinTheTimeout) {
  const int port = freePort();
  const milliseconds timeout(500);
  std::string failures = ranks_.run(3, [&](int rank, Shared::Rank &out) {
    if (rank == 2)
      return true; // never comes
    auto start = Clock::now();
    auto got = Rendezvous(rdzv(port, rank, 3, timeout), "x");
    out.elapsedMs = msSince(start);
    if (got.ok())
      return record(out, absl::InternalError("succeeded"), "rendezvous");
    record(out, got.status(), "rendezvous");
    return true;
  });
  ASSERT_EQ(failures, "");
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    std::string msg = ranks_.rank(rank).message;
    EXPECT_EQ(ranks_.rank(rank).statusCode,
              int(absl::StatusCode::kDeadlineExceeded))
        << msg;
    EXPECT_TRUE(contains(msg, absl::StrFormat("rank(s) 2 did not arrive at "
                                              "rank 0 (port %d) within 0.5 s",
                                              port)))
        << msg;
    EXPECT_EQ(contains(msg, "rendezvous: rank 0: rendezvous:"), rank == 1)
        << msg;
    EXPECT_LT(ranks_.rank(rank).elapsedMs, 500 + 1500);
  }

  // Without rank 0 a rank says whom it could not reach.
  auto got = Rendezvous(rdzv(port, 1, 2, milliseconds(200)), "x");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(contains(got.status().message(),
                       absl::StrFormat("rendezvous: rank 1: connect to "
                                       "127.0.0.1:%d: Connection refused",
                                       port)))
      << got.status();
}

TEST_F(NetTest, AStrayClientIsRefusedAndTheRendezvousGoesOn) {
  const int port = freePort();
  std::string failures = ranks_.run(3, [&](int rank, Shared::Rank &out) {
    if (rank == 2) {
      // Not a rank: an idle connection, an HTTP client, an md of another
      // wire version.
      const Deadline deadline = Clock::now() + milliseconds(5000);
      auto idle = connectTo("127.0.0.1", port, deadline);
      if (!idle.ok())
        return record(out, idle.status(), "connect");
      std::string replies;
      for (std::string hello : {std::string("GET / HTTP/1.0\r\n\r\n"),
                                WireWriter()
                                    .bytes(std::string_view("md-rdzv\n", 8))
                                    .u32(2)
                                    .u32(1)
                                    .bytes(std::string(28, '\0'))
                                    .take()}) {
        auto s = connectTo("127.0.0.1", port, deadline);
        if (!s.ok())
          return record(out, s.status(), "connect");
        if (absl::Status st = s->sendAll(hello.data(), hello.size(), deadline);
            !st.ok())
          return record(out, st, "send");
        char buf[512];
        for (;;) { // until rank 0 closes
          auto k = s->recvSome(buf, sizeof buf);
          if (!k.ok() || Clock::now() > deadline)
            break;
          if (*k == 0)
            std::this_thread::sleep_for(milliseconds(1));
          replies.append(buf, *k);
        }
      }
      // The refusals are binary frames; keep their text.
      std::string text;
      for (char c : replies)
        if (c >= 32 && c < 127)
          text += c;
      std::snprintf(out.message, sizeof out.message, "%s", text.c_str());
      return true;
    }
    if (rank == 1)
      std::this_thread::sleep_for(milliseconds(300)); // after the strays
    auto got = Rendezvous(rdzv(port, rank, 2), absl::StrCat("rank ", rank));
    if (!got.ok())
      return record(out, got.status(), "rendezvous");
    return (*got)[1] == "rank 1" ||
           record(out, absl::InternalError("wrong payload"), "rendezvous");
  });
  ASSERT_EQ(failures, "");
  std::string replies = ranks_.rank(2).message;
  EXPECT_TRUE(contains(replies, "not an md rendezvous hello (wrong magic)"))
      << replies;
  EXPECT_TRUE(contains(replies, "a hello of wire version 2, not 1")) << replies;
}

TEST_F(NetTest, ADuplicateRankOrAnotherWorldSizeIsInvalid) {
  const int port = freePort();
  // Processes: rank 0, rank 1, rank 1 again, rank 2.
  std::string failures = ranks_.run(4, [&](int child, Shared::Rank &out) {
    int rank = child == 0 ? 0 : child == 3 ? 2 : 1;
    if (rank == 2) // after both rank 1s, or the rendezvous ends without one
      std::this_thread::sleep_for(milliseconds(300));
    auto got = Rendezvous(rdzv(port, rank, 3), "x");
    if (!got.ok())
      record(out, got.status(), "rendezvous");
    return true;
  });
  ASSERT_EQ(failures, "");
  for (int child = 0; child < 4; ++child) {
    std::string msg = ranks_.rank(child).message;
    EXPECT_EQ(ranks_.rank(child).statusCode,
              int(absl::StatusCode::kInvalidArgument))
        << child << ": " << msg;
    EXPECT_TRUE(contains(msg, "rank 1 arrived twice, from 127.0.0.1:"))
        << child << ": " << msg;
  }

  const int port2 = freePort();
  failures = ranks_.run(2, [&](int rank, Shared::Rank &out) {
    auto got = Rendezvous(rdzv(port2, rank, 2 + rank), "x");
    if (!got.ok())
      record(out, got.status(), "rendezvous");
    return true;
  });
  ASSERT_EQ(failures, "");
  for (int rank = 0; rank < 2; ++rank) {
    std::string msg = ranks_.rank(rank).message;
    EXPECT_EQ(ranks_.rank(rank).statusCode,
              int(absl::StatusCode::kInvalidArgument))
        << msg;
    EXPECT_TRUE(contains(msg, "has world size 3, rank 0 has 2")) << msg;
  }
}

TEST_F(NetTest, ARankThatReachesAnotherProgramSaysSo) {
  absl::StatusOr<Listener> l = Listener::listen(0);
  ASSERT_TRUE(l.ok()) << l.status();
  std::thread server([&] {
    const Deadline deadline = Clock::now() + milliseconds(3000);
    while (Clock::now() < deadline) {
      absl::StatusOr<Socket> s = l->acceptNow();
      if (s.ok() && s->valid()) {
        std::string banner = "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n";
        banner.resize(64, ' ');
        (void)s->sendAll(banner.data(), banner.size(), deadline);
        std::this_thread::sleep_for(milliseconds(200));
        return;
      }
      std::this_thread::sleep_for(milliseconds(1));
    }
  });
  auto got = Rendezvous(rdzv(l->port(), 1, 2, milliseconds(2000)), "x");
  server.join();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(got.status().message(),
                       "answered with something that is not md's rendezvous"))
      << got.status();
}

TEST(Rendezvous, AHostThatDoesNotResolveFailsAtOnceNamingIt) {
  // Not a timeout 30 s later: the name is resolved once, before retrying.
  RendezvousOptions o = rdzv(freePort(), 1, 2, std::chrono::seconds(30));
  o.masterAddr = "bogus.invalid";
  auto start = Clock::now();
  auto got = Rendezvous(o, "x");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(got.status().message(),
                       "rendezvous: rank 1: rank 0's host bogus.invalid: "
                       "cannot resolve it: "))
      << got.status();
  EXPECT_LT(msSince(start), 5000);
  EXPECT_TRUE(resolveHost("localhost", "localhost").ok());
  EXPECT_TRUE(resolveHost("::1", "::1").ok());
}

TEST(Rendezvous, BadOptionsAreInvalidArguments) {
  RendezvousOptions o = rdzv(29500, 0, 2);
  std::string big(kMaxRendezvousPayload + 1, 'x');
  EXPECT_EQ(Rendezvous(o, big).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (RendezvousOptions bad :
       {rdzv(29500, 2, 2), rdzv(29500, -1, 2), rdzv(0, 0, 2), rdzv(70000, 1, 2),
        rdzv(29500, 0, 2, milliseconds(0))})
    EXPECT_EQ(Rendezvous(bad, "x").status().code(),
              absl::StatusCode::kInvalidArgument);
  // World size 1 needs no network.
  auto one = Rendezvous(rdzv(1, 0, 1), "alone");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, std::vector<std::string>{"alone"});
}

//===----------------------------------------------------------------------===//
// Rank 0's key-value store
//===----------------------------------------------------------------------===//

TEST_F(NetTest, TheStoreAnswersWaitsInAnyOrderAndEndsWhenAllAreDone) {
  const int port = freePort();
  std::string failures = ranks_.run(3, [&](int rank, Shared::Rank &out) {
    if (rank == 1) {
      // A stray that speaks something else is dropped; the store goes on.
      absl::StatusOr<Socket> stray =
          connectTo("127.0.0.1", port, Clock::now() + milliseconds(5000));
      if (stray.ok())
        (void)stray->sendAll("GET / HTTP/1.0\r\n\r\n", 18,
                             Clock::now() + milliseconds(1000));
    }
    auto store = RendezvousStore::open(rdzv(port, rank, 3));
    if (!store.ok())
      return record(out, store.status(), "open");
    RendezvousStore &s = **store;
    // Gloo's pattern: each waits for the lower ranks' keys only, then for
    // everyone's second key; the last rank sets its keys late.
    if (rank == 2)
      std::this_thread::sleep_for(milliseconds(100));
    if (absl::Status st = s.set(absl::StrCat("host/", rank), "h"); !st.ok())
      return record(out, st, "set");
    for (int r = 0; r < rank; ++r)
      if (absl::Status st = s.wait({absl::StrCat("host/", r)}); !st.ok())
        return record(out, st, "wait");
    if (absl::Status st =
            s.set(absl::StrCat("addr/", rank), std::string(1000 * rank, 'a'));
        !st.ok())
      return record(out, st, "set");
    for (int r = 0; r < 3; ++r) {
      absl::StatusOr<std::string> v = s.get(absl::StrCat("addr/", r));
      if (!v.ok())
        return record(out, v.status(), "get");
      if (*v != std::string(1000 * r, 'a'))
        return record(out, absl::InternalError("wrong value"), "get");
    }
    if (absl::Status st = s.close(); !st.ok())
      return record(out, st, "close");
    return true;
  });
  ASSERT_EQ(failures, "");
  // Rank 0 stopped serving once all were done: the port is free again.
  EXPECT_TRUE(Listener::listen(port).ok());
}

TEST_F(NetTest, AKeyNoRankSetsIsNamedAtTheTimeout) {
  const int port = freePort();
  std::string failures = ranks_.run(2, [&](int rank, Shared::Rank &out) {
    auto store = RendezvousStore::open(rdzv(port, rank, 2, milliseconds(300)));
    if (!store.ok())
      return record(out, store.status(), "open");
    if (rank == 1) {
      record(out, (*store)->get("nobody").status(), "get");
      (void)(*store)->close();
      return true;
    }
    if (absl::Status st = (*store)->close(); !st.ok())
      return record(out, st, "close");
    return true;
  });
  ASSERT_EQ(failures, "");
  EXPECT_EQ(ranks_.rank(1).statusCode,
            int(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(contains(std::string(ranks_.rank(1).message),
                       "rendezvous store: rank 1: waited 0.3 s for key "
                       "'nobody', which no rank set"))
      << ranks_.rank(1).message;
}

TEST_F(NetTest, ARankThatDiesBeforeItIsDoneFailsTheStoreNamingIt) {
  const int port = freePort();
  std::string failures = ranks_.run(3, [&](int rank, Shared::Rank &out) {
    auto start = Clock::now();
    auto store = RendezvousStore::open(rdzv(port, rank, 3));
    if (rank == 2) {
      if (!store.ok())
        return record(out, store.status(), "open");
      _exit(0); // its key never comes
    }
    // The others learn why whenever they ask: at open when rank 2 was
    // gone by then, else while they wait for its key.
    absl::Status s =
        store.ok() ? (*store)->get("from 2").status() : store.status();
    out.elapsedMs = msSince(start);
    record(out, s, store.ok() ? "get" : "open");
    return true;
  });
  ASSERT_EQ(failures, "");
  for (int rank : {0, 1}) {
    SCOPED_TRACE(rank);
    const Shared::Rank &r = ranks_.rank(rank);
    EXPECT_EQ(r.statusCode, int(absl::StatusCode::kUnavailable)) << r.message;
    EXPECT_TRUE(contains(std::string(r.message),
                         "rank 2 closed its connection to rank 0's "
                         "store before it was done (did it die?)"))
        << r.message;
    EXPECT_LT(r.elapsedMs, 5000); // long before the 10 s timeout
  }
}

//===----------------------------------------------------------------------===//
// The host comms' reduction
//===----------------------------------------------------------------------===//

TEST(ReduceInOrder, MatchesTheReferenceAndItsEdgeCases) {
  // The shm and gloo comms reduce with ReduceInOrder; their tests compare
  // against it (gloo) and against an independent reference (shm).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float a[3] = {1.0f, nan, 2.0f}, b[3] = {nan, 3.0f, -1.0f}, out[3];
  ReduceInOrder(DType::f32, ReduceOp::max, {a, b}, out, 3);
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
  EXPECT_EQ(out[2], 2.0f);
  int32_t big[1] = {INT32_MAX}, one[1] = {1}, sum[1];
  ReduceInOrder(DType::i32, ReduceOp::sum, {big, one}, sum, 1);
  EXPECT_EQ(sum[0], INT32_MIN); // wraps
  int64_t m[1] = {-7}, z[1] = {0}, avg[1];
  ReduceInOrder(DType::i64, ReduceOp::avg, {m, z}, avg, 1);
  EXPECT_EQ(avg[0], -3); // toward zero
  // In place: the output may be a source.
  float x[2] = {1, 2}, y[2] = {10, 20};
  ReduceInOrder(DType::f32, ReduceOp::sum, {x, y}, x, 2);
  EXPECT_EQ(x[1], 22.0f);
  // Every dtype and reduction over random inputs.
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max,
                        ReduceOp::min, ReduceOp::prod}) {
      Case c{Kind::allReduce, t, op, 101, 0, false};
      std::vector<std::vector<uint8_t>> in;
      for (int r = 0; r < 5; ++r)
        in.push_back(makeInput(c, 7, r, 5));
      EXPECT_EQ(expected(c, 0, in, &ReduceInOrder), expected(c, 0, in))
          << dtypeName(t) << " " << reduceOpName(op);
    }
}

} // namespace
} // namespace md::net
