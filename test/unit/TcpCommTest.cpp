//===- TcpCommTest.cpp - the rendezvous and the tcp comm on 127.0.0.1 ----===//
//
// Ranks are forked processes (CommTestUtil.h) that meet on 127.0.0.1 at a
// port each test picks free, so tests run in parallel. The tcp comm must
// match the same reference as the shm comm, computed with ReduceInOrder, bit
// for bit; the rendezvous and the comm must fail every rank with the
// reason, and never hang, when ranks disagree, go missing or die.
//
//===----------------------------------------------------------------------===//

#include "runtime/net/TcpComm.h"

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
#include "runtime/net/Rendezvous.h"
#include "runtime/net/Socket.h"
#include "runtime/net/Wire.h"
#include "runtime/shm/ShmComm.h"
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

TcpCommOptions tcp(int port, int rank, int world, int shardSize = 0,
                   milliseconds timeout = milliseconds(10000)) {
  TcpCommOptions o;
  o.masterPort = port;
  o.rank = rank;
  o.worldSize = world;
  o.shardSize = shardSize;
  o.fingerprint = "plan 1234";
  o.timeout = timeout;
  o.chunkBytes = 96; // every case with more than a few elements is chunked
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

class TcpCommTest : public ::testing::Test {
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

class RendezvousWorld : public TcpCommTest,
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

TEST_F(TcpCommTest, RendezvousPortIsFreeAgainWhenItEnds) {
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

TEST_F(TcpCommTest, AFingerprintMismatchFailsEveryRankNamingTheOddOne) {
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

TEST_F(TcpCommTest, AMissingRankIsNamedWithinTheTimeout) {
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

TEST_F(TcpCommTest, AStrayClientIsRefusedAndTheRendezvousGoesOn) {
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

TEST_F(TcpCommTest, ADuplicateRankOrAnotherWorldSizeIsInvalid) {
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

TEST_F(TcpCommTest, ARankThatReachesAnotherProgramSaysSo) {
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
// The tcp comm: conformance
//===----------------------------------------------------------------------===//

TEST(ReduceInOrder, MatchesTheReferenceAndItsEdgeCases) {
  // The shm and tcp comms reduce with ReduceInOrder; their tests compare
  // against it (tcp) and against an independent reference (shm).
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

class TcpConformance : public TcpCommTest,
                       public ::testing::WithParamInterface<int> {};

INSTANTIATE_TEST_SUITE_P(WorldSizes, TcpConformance, worldSizes(),
                         worldSizeName);

TEST_P(TcpConformance, EveryCollectiveMatchesReduceInOrderOnEveryRank) {
  const int world = GetParam();
  const int port = freePort();
  std::string failures = ranks_.run(world, [&](int rank, Shared::Rank &out) {
    auto comm = TcpComm::create(tcp(port, rank, world));
    if (!comm.ok())
      return record(out, comm.status(), "create");
    absl::Status s = runConformance(**comm, world, out.data);
    if (!s.ok())
      return record(out, s, "collective");
    return true;
  });
  ASSERT_EQ(failures, "");
  checkConformance(ranks_, world, &ReduceInOrder);
}

class TcpMesh : public TcpCommTest,
                public ::testing::WithParamInterface<MeshCase> {};

INSTANTIATE_TEST_SUITE_P(Meshes, TcpMesh, meshCases(), meshName);

TEST_P(TcpMesh, ShardAndReplicateGroupsRunSideBySide) {
  const MeshPattern pattern(GetParam().world, GetParam().shard);
  const int port = freePort();
  std::string failures =
      ranks_.run(pattern.world, [&](int rank, Shared::Rank &out) {
        auto comm =
            TcpComm::create(tcp(port, rank, pattern.world, pattern.shardSize));
        if (!comm.ok())
          return record(out, comm.status(), "create");
        absl::Status s = pattern.run(**comm, out.data);
        if (!s.ok())
          return record(out, s, "collective");
        return true;
      });
  ASSERT_EQ(failures, "");
  pattern.check(ranks_, &ReduceInOrder);
}

TEST_F(TcpCommTest, SameBitsAsTheShmCommForTheSameInputs) {
  // A long f32 sum depends on the order of its terms; both comms add in
  // group order, so they agree bit for bit, on every rank. Large enough
  // for several default-sized chunks.
  const int world = 3;
  const int64_t n = (int64_t(3) << 20) / 4 + 4099;
  const int port = freePort();
  const std::string job = absl::StrFormat("tcp-test-%d", getpid());
  std::string failures = ranks_.run(world, [&](int rank, Shared::Rank &out) {
    TcpCommOptions o = tcp(port, rank, world);
    o.chunkBytes = int64_t(1) << 20;
    auto t = TcpComm::create(o);
    if (!t.ok())
      return record(out, t.status(), "tcp create");
    shm::ShmCommOptions so;
    so.jobId = job;
    so.rank = rank;
    so.worldSize = world;
    auto s = shm::ShmComm::create(so);
    if (!s.ok())
      return record(out, s.status(), "shm create");
    std::mt19937 gen(rank + 1);
    std::vector<float> x(n), viaTcp(n), viaShm(n);
    for (float &v : x)
      v = float(gen()) / 1e6f - 2000.0f;
    Group g = *(*t)->group(GroupKind::world);
    if (absl::Status st = (*t)->allReduce(x.data(), viaTcp.data(), n,
                                          DType::f32, ReduceOp::sum, g);
        !st.ok())
      return record(out, st, "tcp all_reduce");
    if (absl::Status st = (*s)->allReduce(x.data(), viaShm.data(), n,
                                          DType::f32, ReduceOp::sum, g);
        !st.ok())
      return record(out, st, "shm all_reduce");
    if (std::memcmp(viaTcp.data(), viaShm.data(), n * 4) != 0)
      return record(out, absl::InternalError("tcp and shm differ"), "compare");
    // A short hash of the result, to compare across ranks.
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n * 4; ++i)
      h = (h ^ reinterpret_cast<const uint8_t *>(viaTcp.data())[i]) *
          1099511628211ull;
    std::memcpy(out.data, &h, 8);
    return true;
  });
  ASSERT_EQ(failures, "");
  for (int r = 1; r < world; ++r)
    EXPECT_EQ(std::memcmp(ranks_.rank(0).data, ranks_.rank(r).data, 8), 0);
}

TEST_F(TcpCommTest, RanksReachEachOtherByNameAndOverIpv6) {
  bool ipv6 = false;
  {
    absl::StatusOr<Listener> l = Listener::listen(0);
    if (l.ok())
      ipv6 = connectTo("::1", l->port(), Clock::now() + milliseconds(500)).ok();
  }
  for (std::string master : {"localhost", "::1"}) {
    if (master == "::1" && !ipv6)
      continue;
    SCOPED_TRACE(master);
    const int port = freePort();
    std::string failures = ranks_.run(2, [&](int rank, Shared::Rank &out) {
      TcpCommOptions o = tcp(port, rank, 2);
      o.masterAddr = master;
      auto comm = TcpComm::create(o);
      if (!comm.ok())
        return record(out, comm.status(), "create");
      int64_t x[2] = {rank + 1, 10 * (rank + 1)};
      if (absl::Status s =
              (*comm)->allReduce(x, x, 2, DType::i64, ReduceOp::sum,
                                 *(*comm)->group(GroupKind::world));
          !s.ok())
        return record(out, s, "all_reduce");
      std::snprintf(out.message, sizeof out.message, "%s",
                    (*comm)->addresses()[1].c_str());
      std::memcpy(out.data, x, sizeof x);
      return true;
    });
    ASSERT_EQ(failures, "");
    int64_t want[2] = {3, 30};
    EXPECT_EQ(std::memcmp(ranks_.rank(1).data, want, sizeof want), 0);
    // Rank 1's address is the local end of its connection to rank 0.
    std::string addr = ranks_.rank(1).message;
    EXPECT_TRUE(contains(addr, master == "::1" ? "[::1]:" : "127.0.0.1:"))
        << addr;
  }
}

//===----------------------------------------------------------------------===//
// The tcp comm: failures
//===----------------------------------------------------------------------===//

TEST_F(TcpCommTest, MismatchedCollectivesAreADesyncOnEveryRank) {
  const int port = freePort();
  // Rank 2's contribution is far larger than a socket buffer: the hub
  // tells it while it is still sending.
  const int64_t big = int64_t(1) << 20;
  std::string failures = ranks_.run(3, [&](int rank, Shared::Rank &out) {
    TcpCommOptions o = tcp(port, rank, 3);
    o.chunkBytes = int64_t(4) << 20;
    auto comm = TcpComm::create(o);
    if (!comm.ok())
      return record(out, comm.status(), "create");
    Group g = *(*comm)->group(GroupKind::world);
    std::vector<float> x(3 * big);
    absl::Status s = rank == 2
                         ? (*comm)->allGather(x.data() + 2 * big, x.data(), big,
                                              DType::f32, g)
                         : (*comm)->allReduce(x.data(), x.data(), 8, DType::f32,
                                              ReduceOp::sum, g);
    record(out, s, "collective");
    return true;
  });
  ASSERT_EQ(failures, "");
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE(rank);
    std::string msg = ranks_.rank(rank).message;
    EXPECT_EQ(ranks_.rank(rank).statusCode,
              int(absl::StatusCode::kFailedPrecondition))
        << msg;
    EXPECT_TRUE(contains(msg, "tcp: collective mismatch: rank 2 called "
                              "all_gather(f32 x 1048576) #1 on world [0, 1, "
                              "2] while rank 0 called all_reduce(f32 x 8, "
                              "sum) #1 on world [0, 1, 2]"))
        << msg;
  }
}

class TcpLostPeer : public TcpCommTest,
                    public ::testing::WithParamInterface<int> {};

INSTANTIATE_TEST_SUITE_P(WhoDies, TcpLostPeer, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int> &info) {
                           return info.param == 0 ? "TheHub" : "AMember";
                         });

TEST_P(TcpLostPeer, APeerThatDiesMidCollectiveIsAnErrorNotAHang) {
  const int dies = GetParam();
  const int port = freePort();
  const int64_t n = int64_t(4) << 20; // 16 MiB of f32: mid-send when it dies
  std::string failures = ranks_.run(3, [&](int rank, Shared::Rank &out) {
    TcpCommOptions o = tcp(port, rank, 3, 0, milliseconds(8000));
    o.chunkBytes = int64_t(4) << 20;
    auto comm = TcpComm::create(o);
    if (!comm.ok())
      return record(out, comm.status(), "create");
    Group g = *(*comm)->group(GroupKind::world);
    std::vector<float> x(n, 1.0f);
    if (absl::Status s = (*comm)->allReduce(x.data(), x.data(), 64, DType::f32,
                                            ReduceOp::sum, g);
        !s.ok())
      return record(out, s, "warm-up all_reduce");
    // Another rank comes late, so that the one that dies is still in the
    // collective: a member partway through sending, the hub waiting.
    const int late = dies == 0 ? 2 : 0;
    if (rank == dies) {
      std::thread([] {
        std::this_thread::sleep_for(milliseconds(100));
        _exit(0);
      }).detach();
    } else if (rank == late) {
      std::this_thread::sleep_for(milliseconds(300));
    }
    auto start = Clock::now();
    absl::Status s =
        (*comm)->allReduce(x.data(), x.data(), n, DType::f32, ReduceOp::sum, g);
    out.elapsedMs = msSince(start);
    if (rank == dies) { // finished before the thread killed it
      std::this_thread::sleep_for(milliseconds(1000));
      return true;
    }
    record(out, s, "all_reduce");
    return true;
  });
  ASSERT_EQ(failures, "");
  for (int rank = 0; rank < 3; ++rank) {
    if (rank == dies)
      continue;
    SCOPED_TRACE(rank);
    const Shared::Rank &r = ranks_.rank(rank);
    std::string msg = r.message;
    EXPECT_EQ(r.statusCode, int(absl::StatusCode::kUnavailable)) << msg;
    EXPECT_TRUE(contains(
        msg, absl::StrFormat("tcp: rank %d closed its connection during "
                             "all_reduce(f32 x %d, sum) #2 on world [0, 1, "
                             "2] (did it die?)",
                             dies, n)))
        << msg;
    EXPECT_LT(r.elapsedMs, 4000); // long before the 8 s timeout
  }
}

TEST_F(TcpCommTest, ASilentPeerIsNamedAtTheTimeoutAndTheCommStaysFailed) {
  const int port = freePort();
  const milliseconds timeout(400);
  std::string failures = ranks_.run(3, [&](int rank, Shared::Rank &out) {
    auto comm = TcpComm::create(tcp(port, rank, 3, 0, timeout));
    if (!comm.ok())
      return record(out, comm.status(), "create");
    if (rank == 2) { // alive, connected, never calls
      std::this_thread::sleep_for(milliseconds(1500));
      return true;
    }
    Group g = *(*comm)->group(GroupKind::world);
    float x[8] = {};
    auto start = Clock::now();
    absl::Status s = (*comm)->allReduce(x, x, 8, DType::f32, ReduceOp::sum, g);
    out.elapsedMs = msSince(start);
    record(out, s, "all_reduce");
    auto again = Clock::now();
    absl::Status next = (*comm)->barrier(g);
    if (next.code() != s.code() || Clock::now() - again > milliseconds(100))
      out.statusCode = -1;
    return true;
  });
  ASSERT_EQ(failures, "");
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    const Shared::Rank &r = ranks_.rank(rank);
    std::string msg = r.message;
    EXPECT_EQ(r.statusCode, int(absl::StatusCode::kDeadlineExceeded)) << msg;
    EXPECT_TRUE(contains(msg, "tcp: all_reduce(f32 x 8, sum) #1 on world [0, "
                              "1, 2]: rank 0 timed out after 0.4 s waiting "
                              "for rank(s) 2"))
        << msg;
    EXPECT_GE(r.elapsedMs, 300);
    EXPECT_LT(r.elapsedMs, 400 + 1500);
  }
}

TEST_F(TcpCommTest, ASilentHubIsNamedAtTheTimeout) {
  const int port = freePort();
  const milliseconds timeout(400);
  std::string failures = ranks_.run(2, [&](int rank, Shared::Rank &out) {
    auto comm = TcpComm::create(tcp(port, rank, 2, 0, timeout));
    if (!comm.ok())
      return record(out, comm.status(), "create");
    if (rank == 0) {
      std::this_thread::sleep_for(milliseconds(1500));
      return true;
    }
    auto start = Clock::now();
    absl::Status s = (*comm)->barrier(*(*comm)->group(GroupKind::world));
    out.elapsedMs = msSince(start);
    record(out, s, "barrier");
    return true;
  });
  ASSERT_EQ(failures, "");
  const Shared::Rank &r = ranks_.rank(1);
  std::string msg = r.message;
  EXPECT_EQ(r.statusCode, int(absl::StatusCode::kDeadlineExceeded)) << msg;
  EXPECT_TRUE(contains(msg, "tcp: barrier #1 on world [0, 1]: rank 1 timed "
                            "out after 0.8 s waiting for rank 0"))
      << msg;
  EXPECT_LT(r.elapsedMs, 800 + 1500);
}

TEST_F(TcpCommTest, RanksThatDisagreeOnTheMeshAreRefused) {
  const int port = freePort();
  std::string failures = ranks_.run(2, [&](int rank, Shared::Rank &out) {
    auto comm = TcpComm::create(tcp(port, rank, 2, rank == 0 ? 2 : 1));
    if (!comm.ok())
      record(out, comm.status(), "create");
    return true;
  });
  ASSERT_EQ(failures, "");
  for (int rank = 0; rank < 2; ++rank) {
    std::string msg = ranks_.rank(rank).message;
    EXPECT_EQ(ranks_.rank(rank).statusCode,
              int(absl::StatusCode::kFailedPrecondition))
        << msg;
    EXPECT_TRUE(contains(msg, "fingerprint mismatch: rank 1 has \"tcp comm v1"))
        << msg;
    EXPECT_TRUE(contains(msg, "shard size 1")) << msg;
  }
}

TEST_F(TcpCommTest, BadArgumentsFailOnTheCallingRankAlone) {
  auto comm = TcpComm::create(tcp(29500, 0, 1));
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_STREQ((*comm)->name(), "tcp");
  Group g = *(*comm)->group(GroupKind::world);
  float x[4] = {1, 2, 3, 4};
  EXPECT_EQ((*comm)->allReduce(x, x, -1, DType::f32, ReduceOp::sum, g).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      (*comm)->allReduce(nullptr, x, 4, DType::f32, ReduceOp::sum, g).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*comm)->broadcast(x, x, 4, DType::f32, 1, g).code(),
            absl::StatusCode::kInvalidArgument);
  Group wrong = g;
  wrong.ranks = {0, 1};
  absl::Status s = (*comm)->barrier(wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "tcp: barrier: group world [0, 1] (index "
                                    "0) is not rank 0's world group"))
      << s;
  EXPECT_EQ((*comm)->sequence(GroupKind::world), 0u);
  EXPECT_TRUE((*comm)->allReduce(x, x, 4, DType::f32, ReduceOp::avg, g).ok());
  EXPECT_EQ(x[3], 4.0f);
  EXPECT_EQ((*comm)->sequence(GroupKind::world), 1u);

  TcpCommOptions tiny = tcp(29500, 0, 1);
  tiny.chunkBytes = 8;
  for (TcpCommOptions bad :
       {tcp(29500, 2, 2), tcp(29500, 0, 4, 3), tcp(0, 0, 2),
        tcp(29500, 0, 2, 0, milliseconds(0)), tiny}) {
    auto c = TcpComm::create(bad);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument)
        << c.status();
  }
}

} // namespace
} // namespace md::net
