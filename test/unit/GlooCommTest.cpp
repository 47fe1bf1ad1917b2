//===- GlooCommTest.cpp - the Gloo comm on 127.0.0.1 ---------------------===//
//
// Ranks are forked processes (CommTestUtil.h) that meet on 127.0.0.1 at a
// port each test picks free, so tests run in parallel. The Gloo comm must
// give the shm comm's bits for every collective, dtype and group size
// (both comms run the same cases in the same processes and their results
// are compared byte for byte, and both against the reference); it must
// fail every rank with the reason, and never hang, when ranks disagree,
// go silent or die.
//
//===----------------------------------------------------------------------===//

#include "runtime/gloo/GlooComm.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "runtime/core/Reduce.h"
#include "runtime/net/Socket.h"
#include "runtime/shm/ShmComm.h"
#include "test/unit/CommTestUtil.h"

namespace md::gloo {
namespace {

using namespace md::runtime;
using namespace md::commtest;
using std::chrono::milliseconds;

/// A port nothing listens on right now.
int freePort() {
  absl::StatusOr<net::Listener> l = net::Listener::listen(0);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? l->port() : 0;
}

int64_t msSince(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
}

bool contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

GlooCommOptions gloo(int port, int rank, int world, int shardSize = 0,
                     milliseconds timeout = milliseconds(10000)) {
  GlooCommOptions o;
  o.masterPort = port;
  o.rank = rank;
  o.worldSize = world;
  o.shardSize = shardSize;
  o.fingerprint = "plan 1234";
  o.timeout = timeout;
  return o;
}

class GlooCommTest : public ::testing::Test {
protected:
  Ranks ranks_;
};

//===----------------------------------------------------------------------===//
// The Gloo comm: results
//===----------------------------------------------------------------------===//

class GlooConformance : public GlooCommTest,
                        public ::testing::WithParamInterface<int> {};

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooConformance, worldSizes(),
                         worldSizeName);

/// Every conformance case (every collective, dtype and reduction, in place
/// and not) through the shm comm and then through the Gloo comm: the two
/// records must be equal byte for byte, and the Gloo one must match the
/// reference.
TEST_P(GlooConformance, EveryCollectiveGivesTheShmCommsBits) {
  const int world = GetParam();
  const int port = freePort();
  const std::string job = uniqueJobId();
  std::string failures = ranks_.run(world, [&](int rank, Shared::Rank &out) {
    shm::ShmCommOptions so;
    so.jobId = job;
    so.rank = rank;
    so.worldSize = world;
    auto viaShm = shm::ShmComm::create(so);
    if (!viaShm.ok())
      return record(out, viaShm.status(), "shm create");
    std::vector<uint8_t> shmOut(Shared::kDataBytes);
    if (absl::Status s = runConformance(**viaShm, world, shmOut.data());
        !s.ok())
      return record(out, s, "shm collective");
    auto comm = GlooComm::create(gloo(port, rank, world));
    if (!comm.ok())
      return record(out, comm.status(), "create");
    if (absl::Status s = runConformance(**comm, world, out.data); !s.ok())
      return record(out, s, "gloo collective");
    if (std::memcmp(shmOut.data(), out.data, Shared::kDataBytes) != 0)
      return record(out, absl::InternalError("gloo and shm results differ"),
                    "compare");
    return true;
  });
  ASSERT_EQ(failures, "");
  checkConformance(ranks_, world, &ReduceInOrder);
}

class GlooMesh : public GlooCommTest,
                 public ::testing::WithParamInterface<MeshCase> {};

INSTANTIATE_TEST_SUITE_P(Meshes, GlooMesh, meshCases(), meshName);

TEST_P(GlooMesh, ShardAndReplicateGroupsRunSideBySide) {
  const MeshPattern pattern(GetParam().world, GetParam().shard);
  const int port = freePort();
  std::string failures =
      ranks_.run(pattern.world, [&](int rank, Shared::Rank &out) {
        auto comm = GlooComm::create(
            gloo(port, rank, pattern.world, pattern.shardSize));
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

class GlooLarge : public GlooCommTest,
                  public ::testing::WithParamInterface<int> {};

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooLarge, ::testing::Values(2, 3, 4),
                         worldSizeName);

/// Large enough for the sharded all-reduce (all-to-all, then all-gather)
/// with a ragged last shard, and a reduce-scatter of the same size: a long
/// f32 sum depends on the order of its terms, and both comms add in group
/// order.
TEST_P(GlooLarge, ShardedAllReduceAndReduceScatterGiveTheShmCommsBits) {
  const int world = GetParam();
  const int64_t n = (int64_t(1) << 18) + 4099;
  const int port = freePort();
  const std::string job = uniqueJobId();
  std::string failures = ranks_.run(world, [&](int rank, Shared::Rank &out) {
    auto g = GlooComm::create(gloo(port, rank, world));
    if (!g.ok())
      return record(out, g.status(), "gloo create");
    shm::ShmCommOptions so;
    so.jobId = job;
    so.rank = rank;
    so.worldSize = world;
    auto s = shm::ShmComm::create(so);
    if (!s.ok())
      return record(out, s.status(), "shm create");
    std::mt19937 gen(rank + 1);
    std::vector<float> x(n * world), viaGloo(n * world), viaShm(n * world);
    for (float &v : x)
      v = float(gen()) / 1e6f - 2000.0f;
    Group w = *(*g)->group(GroupKind::world);
    for (bool scatter : {false, true}) {
      absl::Status a = scatter
                           ? (*g)->reduceScatter(x.data(), viaGloo.data(), n,
                                                 DType::f32, ReduceOp::sum, w)
                           : (*g)->allReduce(x.data(), viaGloo.data(), n,
                                             DType::f32, ReduceOp::sum, w);
      if (!a.ok())
        return record(out, a, "gloo");
      absl::Status b = scatter
                           ? (*s)->reduceScatter(x.data(), viaShm.data(), n,
                                                 DType::f32, ReduceOp::sum, w)
                           : (*s)->allReduce(x.data(), viaShm.data(), n,
                                             DType::f32, ReduceOp::sum, w);
      if (!b.ok())
        return record(out, b, "shm");
      if (std::memcmp(viaGloo.data(), viaShm.data(), n * 4) != 0)
        return record(out, absl::InternalError("gloo and shm differ"),
                      scatter ? "reduce_scatter" : "all_reduce");
    }
    // In place, bf16: the executor's gradient buckets.
    std::vector<uint16_t> h(n), hs(n);
    for (int64_t i = 0; i < n; ++i)
      h[i] = hs[i] = f32ToBf16(x[i]);
    if (absl::Status a = (*g)->allReduce(h.data(), h.data(), n, DType::bf16,
                                         ReduceOp::avg, w);
        !a.ok())
      return record(out, a, "gloo bf16");
    if (absl::Status b = (*s)->allReduce(hs.data(), hs.data(), n, DType::bf16,
                                         ReduceOp::avg, w);
        !b.ok())
      return record(out, b, "shm bf16");
    if (h != hs)
      return record(out, absl::InternalError("bf16 results differ"), "bf16");
    return true;
  });
  ASSERT_EQ(failures, "");
}

class GlooReductionSweep : public GlooCommTest,
                           public ::testing::WithParamInterface<int> {};

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooReductionSweep,
                         ::testing::Values(2, 3, 4), worldSizeName);

/// Inputs whose reductions touch every class of value: for bf16 and f16
/// every bit pattern in turn, for f32 random bits (NaNs among them).
std::vector<uint8_t> sweepInput(DType dtype, int which, int64_t elems) {
  const int64_t es = dtypeSize(dtype);
  std::vector<uint8_t> bytes(elems * es);
  std::mt19937 gen(uint32_t(which) * 7919 + uint32_t(dtype) + 1);
  for (int64_t i = 0; i < elems; ++i) {
    uint32_t u = es == 2 ? uint32_t(i * (2 * which + 1) + which * 12345)
                         : uint32_t(gen());
    std::memcpy(bytes.data() + i * es, &u, es);
  }
  return bytes;
}

/// The all-reduce (whole below 64 KiB across the group, sharded and in
/// segments above) and the reduce-scatter of odd counts from one element
/// to more than a MiB, f32, bf16 and f16: every rank gets ReduceInOrder's
/// bits of the members' inputs in group order (ShmCommTest holds those to
/// the element-by-element loop), in place and not.
TEST_P(GlooReductionSweep, AllReduceAndReduceScatterGiveTheInOrderBits) {
  const int world = GetParam();
  const int port = freePort();
  std::string failures = ranks_.run(
      world,
      [&](int rank, Shared::Rank &out) {
        auto comm = GlooComm::create(gloo(port, rank, world));
        if (!comm.ok())
          return record(out, comm.status(), "create");
        Group g = *(*comm)->group(GroupKind::world);
        int caseNo = 0;
        for (DType t : {DType::f32, DType::bf16, DType::f16})
          for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
            for (int64_t count : {int64_t(1), int64_t(37), int64_t(8191),
                                  int64_t(16411), int64_t(300007)}) {
              const bool inPlace = ++caseNo % 2 == 0;
              const int64_t es = dtypeSize(t);
              for (bool scatter : {false, true}) {
                const int64_t elems = scatter ? count * world : count;
                std::vector<std::vector<uint8_t>> in;
                for (int r = 0; r < world; ++r)
                  in.push_back(sweepInput(t, r + caseNo, elems));
                std::vector<const void *> srcs;
                for (const auto &v : in)
                  srcs.push_back(v.data() + (scatter ? rank * count * es : 0));
                std::vector<uint8_t> want(count * es);
                ReduceInOrder(t, op, srcs, want.data(), count);
                std::vector<uint8_t> buf = in[rank], got(count * es, 0xee);
                uint8_t *dst = !inPlace  ? got.data()
                               : scatter ? buf.data() + rank * count * es
                                         : buf.data();
                absl::Status s =
                    scatter
                        ? (*comm)->reduceScatter(buf.data(), dst, count, t, op,
                                                 g)
                        : (*comm)->allReduce(buf.data(), dst, count, t, op, g);
                if (!s.ok())
                  return record(out, s, "collective");
                if (inPlace)
                  std::memcpy(got.data(), dst, count * es);
                if (std::memcmp(got.data(), want.data(), count * es) != 0)
                  return record(
                      out,
                      absl::InternalError(absl::StrFormat(
                          "%s %s %s x %d%s differs from the in-order "
                          "reduction",
                          scatter ? "reduce_scatter" : "all_reduce",
                          dtypeName(t), reduceOpName(op), count,
                          inPlace ? " in place" : "")),
                      "compare");
              }
            }
        return true;
      },
      std::chrono::seconds(120));
  ASSERT_EQ(failures, "");
}

TEST_F(GlooCommTest, RanksReachEachOtherByNameAndOverIpv6) {
  bool ipv6 = false;
  {
    absl::StatusOr<net::Listener> l = net::Listener::listen(0);
    if (l.ok())
      ipv6 = net::connectTo("::1", l->port(), Clock::now() + milliseconds(500))
                 .ok();
  }
  for (std::string master : {"localhost", "::1"}) {
    if (master == "::1" && !ipv6)
      continue;
    SCOPED_TRACE(master);
    const int port = freePort();
    std::string failures = ranks_.run(2, [&](int rank, Shared::Rank &out) {
      GlooCommOptions o = gloo(port, rank, 2);
      o.masterAddr = master;
      auto comm = GlooComm::create(o);
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
    // Rank 1 listens on the local end of its connection to rank 0.
    std::string addr = ranks_.rank(1).message;
    EXPECT_TRUE(contains(addr, master == "::1" ? "[::1]:" : "127.0.0.1:"))
        << addr;
  }
}

//===----------------------------------------------------------------------===//
// The Gloo comm: failures
//===----------------------------------------------------------------------===//

TEST_F(GlooCommTest, MismatchedCollectivesAreADesyncOnEveryRank) {
  const int port = freePort();
  std::string failures = ranks_.run(3, [&](int rank, Shared::Rank &out) {
    auto comm = GlooComm::create(gloo(port, rank, 3));
    if (!comm.ok())
      return record(out, comm.status(), "create");
    Group g = *(*comm)->group(GroupKind::world);
    std::vector<float> x(3 * 1024);
    absl::Status s = rank == 2
                         ? (*comm)->allGather(x.data() + 2 * 1024, x.data(),
                                              1024, DType::f32, g)
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
    EXPECT_TRUE(contains(msg, "gloo: collective mismatch on group world [0, 1, "
                              "2]: rank "))
        << msg;
    EXPECT_TRUE(contains(msg, rank == 2 ? "is in all_reduce #1 on world [0, 1, "
                                          "2] (f32 x 8, sum)"
                                        : "rank 2 is in all_gather #1 on world "
                                          "[0, 1, 2] (f32 x 1024)"))
        << msg;
  }
}

class GlooLostPeer : public GlooCommTest,
                     public ::testing::WithParamInterface<bool> {};

INSTANTIATE_TEST_SUITE_P(When, GlooLostPeer, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool> &info) {
                           return info.param ? "MidTransfer" : "BeforeItCalls";
                         });

TEST_P(GlooLostPeer, APeerThatDiesIsNamedLongBeforeTheTimeout) {
  const bool midTransfer = GetParam();
  const int port = freePort();
  // 64 MiB of f32: rank 1 is still sending when it dies.
  const int64_t n = midTransfer ? int64_t(16) << 20 : 64;
  std::string failures = ranks_.run(3, [&](int rank, Shared::Rank &out) {
    auto comm = GlooComm::create(gloo(port, rank, 3, 0, milliseconds(8000)));
    if (!comm.ok())
      return record(out, comm.status(), "create");
    Group g = *(*comm)->group(GroupKind::world);
    std::vector<float> x(n, 1.0f);
    if (absl::Status s = (*comm)->allReduce(x.data(), x.data(), 64, DType::f32,
                                            ReduceOp::sum, g);
        !s.ok())
      return record(out, s, "warm-up all_reduce");
    if (rank == 1) {
      if (!midTransfer)
        _exit(0);
      std::thread([] {
        std::this_thread::sleep_for(milliseconds(30));
        _exit(0);
      }).detach();
    }
    auto start = Clock::now();
    absl::Status s =
        (*comm)->allReduce(x.data(), x.data(), n, DType::f32, ReduceOp::sum, g);
    out.elapsedMs = msSince(start);
    if (rank == 1) { // finished before the thread ended it
      std::this_thread::sleep_for(milliseconds(1000));
      return true;
    }
    record(out, s, "all_reduce");
    // A survivor stays up a while, as a job's rank would until its next
    // collective: one that finished must not vanish under the other.
    std::this_thread::sleep_for(milliseconds(500));
    return true;
  });
  ASSERT_EQ(failures, "");
  int failed = 0;
  for (int rank : {0, 2}) {
    SCOPED_TRACE(rank);
    const Shared::Rank &r = ranks_.rank(rank);
    std::string msg = r.message;
    // Mid-transfer, a survivor whose share rank 1 had sent in full may
    // finish; every other fails at once, naming rank 1. One that failed
    // first closes its connections too, so the other may see both go.
    if (midTransfer && r.statusCode == 0)
      continue;
    ++failed;
    EXPECT_EQ(r.statusCode, int(absl::StatusCode::kUnavailable)) << msg;
    EXPECT_TRUE(
        contains(msg, "gloo: rank 1 closed its connection during all_reduce "
                      "#2 on world [0, 1, 2]") ||
        contains(msg, "gloo: ranks 0, 1 closed their connections during "
                      "all_reduce #2 on world [0, 1, 2]") ||
        contains(msg, "gloo: ranks 1, 2 closed their connections during "
                      "all_reduce #2 on world [0, 1, 2]"))
        << msg;
    EXPECT_LT(r.elapsedMs, 4000); // long before the 8 s timeout
  }
  EXPECT_GE(failed, 1);
  EXPECT_TRUE(contains(ranks_.rank(0).message, "rank 1 closed") ||
              contains(ranks_.rank(2).message, "rank 1 closed"))
      << ranks_.rank(0).message << "\n"
      << ranks_.rank(2).message;
}

TEST_F(GlooCommTest, ASilentPeerIsNamedAtTheTimeoutAndTheCommStaysFailed) {
  const int port = freePort();
  const milliseconds timeout(400);
  std::string failures = ranks_.run(3, [&](int rank, Shared::Rank &out) {
    auto comm = GlooComm::create(gloo(port, rank, 3, 0, timeout));
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
    EXPECT_TRUE(contains(
        msg, absl::StrFormat("gloo: all_reduce #1 on world [0, 1, 2] (f32 x "
                             "8, sum) (rank %d): timed out after 0.4 s "
                             "waiting for rank(s) 2 to arrive",
                             rank)))
        << msg;
    EXPECT_GE(r.elapsedMs, 300);
    EXPECT_LT(r.elapsedMs, 400 + 1500);
  }
}

TEST_F(GlooCommTest, RanksThatDisagreeOnTheMeshAreRefused) {
  const int port = freePort();
  std::string failures = ranks_.run(2, [&](int rank, Shared::Rank &out) {
    auto comm = GlooComm::create(gloo(port, rank, 2, rank == 0 ? 2 : 1));
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
    EXPECT_TRUE(contains(msg, "fingerprint mismatch: rank 1 has \"plan 1234; "
                              "gloo comm, mesh 2 x 1"))
        << msg;
  }
}

TEST_F(GlooCommTest, BadArgumentsFailOnTheCallingRankAlone) {
  auto comm = GlooComm::create(gloo(29500, 0, 1));
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_STREQ((*comm)->name(), "gloo");
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
  EXPECT_TRUE(contains(s.message(), "gloo: barrier: group world [0, 1] (index "
                                    "0) is not rank 0's world group"))
      << s;
  EXPECT_EQ((*comm)->sequence(GroupKind::world), 0u);
  EXPECT_TRUE((*comm)->allReduce(x, x, 4, DType::f32, ReduceOp::avg, g).ok());
  EXPECT_EQ(x[3], 4.0f);
  EXPECT_EQ((*comm)->sequence(GroupKind::world), 1u);

  for (GlooCommOptions bad :
       {gloo(29500, 2, 2), gloo(29500, 0, 4, 3), gloo(0, 0, 2),
        gloo(29500, 0, 2, 0, milliseconds(0))}) {
    auto c = GlooComm::create(bad);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument)
        << c.status();
  }
}

} // namespace
} // namespace md::gloo
