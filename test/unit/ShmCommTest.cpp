//===- ShmCommTest.cpp - conformance of the shared-memory comm ------------===//
//
// Ranks are forked processes (CommTestUtil.h). Each child runs its side of
// the collectives and writes its results (or the first error) into memory
// shared with the test process, which checks everything: the results
// against a reference computed from every rank's inputs in group order (bit
// for bit), equality across ranks, and the errors a lost or desynchronised
// peer produces.
//
//===----------------------------------------------------------------------===//

#include "runtime/shm/ShmComm.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <random>
#include <thread>
#include <type_traits>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "runtime/core/CollectiveComm.h"
#include "runtime/core/Reduce.h"
#include "test/unit/CommTestUtil.h"

namespace md::shm {
namespace {

using namespace md::runtime;
using namespace md::commtest;

bool segmentExists(const std::string &jobId) {
  int fd = shm_open(ShmComm::segmentName(jobId).c_str(), O_RDONLY, 0);
  if (fd < 0)
    return false;
  close(fd);
  return true;
}

ShmCommOptions options(const std::string &jobId, int rank, int world,
                       int64_t slotBytes = 96, int shardSize = 0) {
  ShmCommOptions o;
  o.jobId = jobId;
  o.rank = rank;
  o.worldSize = world;
  o.shardSize = shardSize;
  o.slotBytes = slotBytes;
  o.timeout = std::chrono::milliseconds(10000);
  return o;
}

class ShmCommTest : public ::testing::Test {
protected:
  Ranks ranks_;
};

//===----------------------------------------------------------------------===//
// Conformance
//===----------------------------------------------------------------------===//

class ShmConformance : public ShmCommTest,
                       public ::testing::WithParamInterface<int> {};

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmConformance, worldSizes(),
                         worldSizeName);

TEST_P(ShmConformance, EveryCollectiveMatchesTheReferenceOnEveryRank) {
  const int world = GetParam();
  const std::string job = uniqueJobId();
  std::string failures = ranks_.run(world, [&](int rank, Shared::Rank &out) {
    // A 96-byte slot: every case with more than a few elements is chunked.
    auto comm = ShmComm::create(options(job, rank, world));
    if (!comm.ok())
      return record(out, comm.status(), "create");
    absl::Status s = runConformance(**comm, world, out.data);
    if (!s.ok())
      return record(out, s, "collective");
    return true;
  });
  ASSERT_EQ(failures, "");
  EXPECT_FALSE(segmentExists(job));
  checkConformance(ranks_, world);
}

TEST_F(ShmCommTest, ReductionsAreTheSameBitsOnEveryRankAndEveryRun) {
  // Sums of many f32 values depend on the order; the fixed group order
  // makes every rank, and every run, produce the same bits.
  const int world = 3;
  const int64_t n = 4099;
  std::vector<std::vector<uint8_t>> runs;
  for (int run = 0; run < 2; ++run) {
    const std::string job = uniqueJobId();
    std::string failures = ranks_.run(world, [&](int rank, Shared::Rank &out) {
      auto comm = ShmComm::create(options(job, rank, world, 1000));
      if (!comm.ok())
        return record(out, comm.status(), "create");
      std::mt19937 gen(rank + 1);
      std::vector<float> x(n);
      for (float &v : x)
        v = float(gen()) / 1e6f - 2000.0f;
      absl::Status s =
          (*comm)->allReduce(x.data(), x.data(), n, DType::f32, ReduceOp::sum,
                             *(*comm)->group(GroupKind::world));
      if (!s.ok())
        return record(out, s, "all_reduce");
      std::memcpy(out.data, x.data(), n * 4);
      return true;
    });
    ASSERT_EQ(failures, "");
    for (int r = 1; r < world; ++r)
      EXPECT_EQ(std::memcmp(ranks_.rank(0).data, ranks_.rank(r).data, n * 4), 0)
          << "rank " << r;
    runs.emplace_back(ranks_.rank(0).data, ranks_.rank(0).data + n * 4);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

//===----------------------------------------------------------------------===//
// The bits of the reductions
//===----------------------------------------------------------------------===//

/// The element-by-element loop ReduceInOrder was before it ran in blocks,
/// kept as the reference for its bits: each element reads every source in
/// order, and max/min let a NaN win.
void loopReduce(DType dtype, ReduceOp op, const std::vector<const void *> &srcs,
                void *out, int64_t len) {
  const int n = int(srcs.size());
  auto floats = [&](auto load, auto store, auto *typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    for (int64_t j = 0; j < len; ++j) {
      float acc = load(static_cast<const T *>(srcs[0])[j]);
      for (int i = 1; i < n; ++i) {
        float x = load(static_cast<const T *>(srcs[i])[j]);
        switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg:
          acc = acc + x;
          break;
        case ReduceOp::prod:
          acc = acc * x;
          break;
        case ReduceOp::max:
          if (x > acc || std::isnan(x))
            acc = x;
          break;
        case ReduceOp::min:
          if (x < acc || std::isnan(x))
            acc = x;
          break;
        }
      }
      if (op == ReduceOp::avg)
        acc = acc / float(n);
      static_cast<T *>(out)[j] = store(acc);
    }
  };
  auto ints = [&](auto *typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    using U = std::make_unsigned_t<T>;
    for (int64_t j = 0; j < len; ++j) {
      T acc = static_cast<const T *>(srcs[0])[j];
      for (int i = 1; i < n; ++i) {
        T x = static_cast<const T *>(srcs[i])[j];
        switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg:
          acc = T(U(acc) + U(x));
          break;
        case ReduceOp::prod:
          acc = T(U(acc) * U(x));
          break;
        case ReduceOp::max:
          acc = std::max(acc, x);
          break;
        case ReduceOp::min:
          acc = std::min(acc, x);
          break;
        }
      }
      if (op == ReduceOp::avg)
        acc = acc / T(n);
      static_cast<T *>(out)[j] = acc;
    }
  };
  switch (dtype) {
  case DType::f32:
    return floats([](float v) { return v; }, [](float v) { return v; },
                  static_cast<float *>(nullptr));
  case DType::bf16:
    return floats(bf16ToF32, f32ToBf16, static_cast<uint16_t *>(nullptr));
  case DType::f16:
    return floats(f16ToF32, f32ToF16, static_cast<uint16_t *>(nullptr));
  case DType::i32:
    return ints(static_cast<int32_t *>(nullptr));
  case DType::i64:
    return ints(static_cast<int64_t *>(nullptr));
  }
}

/// `elems` elements of `dtype` for source `which`: for bf16 and f16 every
/// bit pattern in turn (each source starting elsewhere, so that all pairs
/// of classes meet: NaNs, infinities, subnormals, zeros of both signs),
/// for f32 random bits with the special values mixed in, for integers
/// random values.
std::vector<uint8_t> sweepInput(DType dtype, int which, int64_t elems) {
  const int64_t es = dtypeSize(dtype);
  std::vector<uint8_t> bytes(elems * es);
  std::mt19937_64 gen(uint64_t(which) * 7919 + uint64_t(dtype) + 1);
  for (int64_t i = 0; i < elems; ++i) {
    uint8_t *dst = bytes.data() + i * es;
    if (es == 2) {
      uint16_t h = uint16_t(i * (2 * which + 1) + which * 12345);
      std::memcpy(dst, &h, 2);
    } else if (dtype == DType::f32) {
      static const uint32_t specials[] = {
          0x7fc00000u, 0x7fa00001u, 0xffc12345u, 0x7f800000u, 0xff800000u,
          0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu,
          0x33000000u, 0x38800000u, 0x477ff000u, 0x3f800000u};
      uint32_t u = gen() % 5 == 0 ? specials[gen() % std::size(specials)]
                                  : uint32_t(gen());
      std::memcpy(dst, &u, 4);
    } else {
      uint64_t v = gen();
      std::memcpy(dst, &v, es);
    }
  }
  return bytes;
}

TEST(ReduceInOrder, GivesTheBitsOfTheElementByElementLoop) {
  // Every dtype and reduction, 1 to 5 sources, lengths around the block
  // and vector widths, in place and not; both the kernels this CPU runs and
  // the baseline ones.
  const int64_t elems = 65536 + 37;
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::prod,
                        ReduceOp::max, ReduceOp::min})
      for (int n = 1; n <= 5; ++n) {
        SCOPED_TRACE(absl::StrFormat("%s %s, %d sources", dtypeName(t),
                                     reduceOpName(op), n));
        const int64_t es = dtypeSize(t);
        std::vector<std::vector<uint8_t>> in;
        std::vector<const void *> srcs;
        for (int i = 0; i < n; ++i)
          in.push_back(sweepInput(t, i, elems));
        for (const auto &v : in)
          srcs.push_back(v.data());
        for (int64_t len : {int64_t(1), int64_t(7), int64_t(513), elems}) {
          std::vector<uint8_t> want(len * es), got(len * es, 0xee),
              base(len * es, 0xee);
          loopReduce(t, op, srcs, want.data(), len);
          ReduceInOrder(t, op, srcs, got.data(), len);
          ReduceInOrderBaseline(t, op, srcs.data(), n, base.data(), len);
          ASSERT_EQ(difference(got, want), "") << "length " << len;
          ASSERT_EQ(difference(base, want), "") << "baseline, length " << len;
        }
        // In place: the output is the last source, then the first.
        for (int into : {n - 1, 0}) {
          std::vector<uint8_t> copy = in[into];
          std::vector<const void *> s2 = srcs;
          s2[into] = copy.data();
          std::vector<uint8_t> want(elems * es);
          loopReduce(t, op, srcs, want.data(), elems);
          ReduceInOrder(t, op, s2, copy.data(), elems);
          ASSERT_EQ(difference(copy, want), "") << "in place into " << into;
        }
      }
}

/// The all-reduce and reduce-scatter of every size class: one chunk
/// reduced whole by every member (below 32 KiB), one split into slices
/// (reduce-scatter and all-gather), several chunks through one buffer or
/// two; f32, bf16 and f16 with odd counts and their special values.
struct SweepCase {
  int world;
  int64_t slotBytes;
};
void PrintTo(const SweepCase &c, std::ostream *os) {
  *os << c.world << " ranks, slots of " << c.slotBytes << " bytes";
}

class ShmReductionSweep : public ShmCommTest,
                          public ::testing::WithParamInterface<SweepCase> {};

INSTANTIATE_TEST_SUITE_P(
    Slots, ShmReductionSweep,
    ::testing::Values(SweepCase{2, int64_t(4) << 20},
                      SweepCase{3, int64_t(4) << 20},
                      SweepCase{4, int64_t(4) << 20},
                      SweepCase{2, int64_t(64) << 10},
                      SweepCase{3, int64_t(100) << 10},
                      SweepCase{3, 200}),
    [](const ::testing::TestParamInfo<SweepCase> &info) {
      return absl::StrFormat("W%dSlot%d", info.param.world,
                             info.param.slotBytes);
    });

TEST_P(ShmReductionSweep, AllReduceAndReduceScatterGiveTheLoopsBitsOnEveryRank) {
  const int world = GetParam().world;
  const int64_t slotBytes = GetParam().slotBytes;
  const std::string job = uniqueJobId();
  const bool small = slotBytes < 4096;
  std::string failures = ranks_.run(
      world,
      [&](int rank, Shared::Rank &out) {
        auto comm = ShmComm::create(options(job, rank, world, slotBytes));
        if (!comm.ok())
          return record(out, comm.status(), "create");
        Group g = *(*comm)->group(GroupKind::world);
        int caseNo = 0;
        for (DType t : {DType::f32, DType::bf16, DType::f16})
          for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
            for (int64_t count :
                 {int64_t(1), int64_t(37), int64_t(8191), int64_t(16411),
                  small ? int64_t(2053) : int64_t(300007)}) {
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
                loopReduce(t, op, srcs, want.data(), count);
                std::vector<uint8_t> buf = in[rank], got(count * es, 0xee);
                absl::Status s;
                if (scatter) {
                  uint8_t *dst = inPlace ? buf.data() + rank * count * es
                                         : got.data();
                  s = (*comm)->reduceScatter(buf.data(), dst, count, t, op, g);
                  if (inPlace)
                    std::memcpy(got.data(), dst, count * es);
                } else {
                  uint8_t *dst = inPlace ? buf.data() : got.data();
                  s = (*comm)->allReduce(buf.data(), dst, count, t, op, g);
                  if (inPlace)
                    std::memcpy(got.data(), dst, count * es);
                }
                if (!s.ok())
                  return record(out, s, "collective");
                if (std::string d = difference(got, want); !d.empty())
                  return record(
                      out,
                      absl::InternalError(absl::StrFormat(
                          "%s %s %s x %d%s: %s",
                          scatter ? "reduce_scatter" : "all_reduce",
                          dtypeName(t), reduceOpName(op), count,
                          inPlace ? " in place" : "", d)),
                      "compare");
              }
            }
        return true;
      },
      std::chrono::seconds(120));
  ASSERT_EQ(failures, "");
}

//===----------------------------------------------------------------------===//
// Sub-groups of the 2-D mesh
//===----------------------------------------------------------------------===//

class ShmMesh : public ShmCommTest,
                public ::testing::WithParamInterface<MeshCase> {};

INSTANTIATE_TEST_SUITE_P(Meshes, ShmMesh, meshCases(), meshName);

TEST_P(ShmMesh, ShardAndReplicateGroupsRunSideBySide) {
  const MeshPattern pattern(GetParam().world, GetParam().shard);
  const std::string job = uniqueJobId();
  std::string failures =
      ranks_.run(pattern.world, [&](int rank, Shared::Rank &out) {
        auto comm = ShmComm::create(
            options(job, rank, pattern.world, 64, pattern.shardSize));
        if (!comm.ok())
          return record(out, comm.status(), "create");
        absl::Status s = pattern.run(**comm, out.data);
        if (!s.ok())
          return record(out, s, "collective");
        return true;
      });
  ASSERT_EQ(failures, "");
  pattern.check(ranks_);
}

//===----------------------------------------------------------------------===//
// Failures
//===----------------------------------------------------------------------===//

TEST_F(ShmCommTest, ALostPeerIsNamedWithinTheTimeout) {
  const int world = 3;
  const std::string job = uniqueJobId();
  std::string failures = ranks_.run(world, [&](int rank, Shared::Rank &out) {
    ShmCommOptions o = options(job, rank, world);
    o.timeout = std::chrono::milliseconds(400);
    auto comm = ShmComm::create(o);
    if (!comm.ok())
      return record(out, comm.status(), "create");
    if (rank == 2)
      _exit(0); // attached, then gone before the first collective
    Group g = *(*comm)->group(GroupKind::world);
    float x[8] = {};
    auto start = Clock::now();
    absl::Status s = (*comm)->allReduce(x, x, 8, DType::f32, ReduceOp::sum, g);
    out.elapsedMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                        Clock::now() - start)
                        .count();
    record(out, s, "all_reduce");
    // The comm stays failed: the next collective returns the same error at
    // once instead of waiting again.
    auto again = Clock::now();
    absl::Status next = (*comm)->barrier(g);
    if (next.code() != s.code() ||
        Clock::now() - again > std::chrono::milliseconds(100))
      out.statusCode = -1;
    return true;
  });
  ASSERT_EQ(failures, "");
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    const Shared::Rank &r = ranks_.rank(rank);
    std::string msg = r.message;
    EXPECT_EQ(r.statusCode, int(absl::StatusCode::kDeadlineExceeded)) << msg;
    EXPECT_NE(msg.find("all_reduce #1 on group world (f32 x 8, sum)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("waiting for rank(s) 2 to arrive"), std::string::npos)
        << msg;
    EXPECT_LT(r.elapsedMs, 400 + 1500);
  }
}

TEST_F(ShmCommTest, ALostPeerMidJobFailsTheNextCollectiveInTime) {
  const int world = 3;
  const std::string job = uniqueJobId();
  const auto timeout = std::chrono::milliseconds(400);
  std::string failures = ranks_.run(world, [&](int rank, Shared::Rank &out) {
    ShmCommOptions o = options(job, rank, world);
    o.timeout = timeout;
    auto comm = ShmComm::create(o);
    if (!comm.ok())
      return record(out, comm.status(), "create");
    Group g = *(*comm)->group(GroupKind::world);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int i = 0; i < 3; ++i)
      if (absl::Status s =
              (*comm)->allReduce(x, x, 8, DType::f32, ReduceOp::sum, g);
          !s.ok())
        return record(out, s, "warm-up all_reduce");
    if (rank == 1)
      _exit(0); // dies after three good collectives
    auto start = Clock::now();
    absl::Status s = (*comm)->allReduce(x, x, 8, DType::f32, ReduceOp::sum, g);
    out.elapsedMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                        Clock::now() - start)
                        .count();
    record(out, s, "all_reduce");
    return true;
  });
  ASSERT_EQ(failures, "");
  for (int rank : {0, 2}) {
    SCOPED_TRACE(rank);
    const Shared::Rank &r = ranks_.rank(rank);
    std::string msg = r.message;
    EXPECT_EQ(r.statusCode, int(absl::StatusCode::kDeadlineExceeded)) << msg;
    EXPECT_NE(msg.find("all_reduce #4 on group world"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("waiting for rank(s) 1 to arrive"), std::string::npos)
        << msg;
    EXPECT_GE(r.elapsedMs, 200);        // it did wait for the peer...
    EXPECT_LT(r.elapsedMs, 400 + 1500); // ...and no longer than the timeout
  }
}

TEST_F(ShmCommTest, MismatchedCollectivesAreADesync) {
  const std::string job = uniqueJobId();
  std::string failures = ranks_.run(2, [&](int rank, Shared::Rank &out) {
    auto comm = ShmComm::create(options(job, rank, 2));
    if (!comm.ok())
      return record(out, comm.status(), "create");
    Group g = *(*comm)->group(GroupKind::world);
    float x[16] = {};
    absl::Status s =
        rank == 0 ? (*comm)->allReduce(x, x, 8, DType::f32, ReduceOp::sum, g)
                  : (*comm)->allGather(x, x + 8, 8, DType::f32, g);
    record(out, s, "collective");
    return true;
  });
  ASSERT_EQ(failures, "");
  for (int rank = 0; rank < 2; ++rank) {
    std::string msg = ranks_.rank(rank).message;
    EXPECT_EQ(ranks_.rank(rank).statusCode,
              int(absl::StatusCode::kFailedPrecondition))
        << msg;
    EXPECT_NE(msg.find("collective mismatch"), std::string::npos) << msg;
    EXPECT_NE(msg.find("all_reduce #1 on group world (f32 x 8, sum)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("all_gather #1 on group world (f32 x 8)"),
              std::string::npos)
        << msg;
  }
}

TEST_F(ShmCommTest, RanksThatNeverAttachAreNamedAndTheSegmentIsRemoved) {
  const std::string job = uniqueJobId();
  ShmCommOptions o = options(job, 0, 3);
  o.timeout = std::chrono::milliseconds(200);
  auto start = Clock::now();
  auto comm = ShmComm::create(o);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(comm.status().message().find("rank(s) 1, 2 did not attach"),
            std::string::npos)
      << comm.status();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_FALSE(segmentExists(job));

  // A rank other than 0 waits for rank 0's segment, for the timeout only.
  o.rank = 1;
  comm = ShmComm::create(o);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(comm.status().message().find("rank 1: found no /md-" + job),
            std::string::npos)
      << comm.status();
}

TEST_F(ShmCommTest, ATakenNameIsRefusedAndCanBeRemoved) {
  const std::string job = uniqueJobId();
  int fd = shm_open(ShmComm::segmentName(job).c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  auto comm = ShmComm::create(options(job, 0, 1));
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kAlreadyExists)
      << comm.status();
  EXPECT_TRUE(segmentExists(job)); // not ours: left alone
  EXPECT_TRUE(ShmComm::removeSegment(job).ok());
  EXPECT_FALSE(segmentExists(job));
  EXPECT_TRUE(ShmComm::removeSegment(job).ok()); // nothing there: fine
  comm = ShmComm::create(options(job, 0, 1));
  EXPECT_TRUE(comm.ok()) << comm.status();
}

TEST_F(ShmCommTest, RanksThatDisagreeOnTheLayoutAreRefused) {
  const std::string job = uniqueJobId();
  std::string failures = ranks_.run(2, [&](int rank, Shared::Rank &out) {
    ShmCommOptions o = options(job, rank, 2, rank == 0 ? 96 : 128);
    o.timeout = std::chrono::milliseconds(500);
    auto comm = ShmComm::create(o);
    if (!comm.ok())
      record(out, comm.status(), "create");
    return true;
  });
  ASSERT_EQ(failures, "");
  EXPECT_EQ(ranks_.rank(1).statusCode,
            int(absl::StatusCode::kFailedPrecondition))
      << ranks_.rank(1).message;
  EXPECT_NE(std::string(ranks_.rank(1).message).find("slot size 128"),
            std::string::npos)
      << ranks_.rank(1).message;
  // Rank 0 is left waiting for rank 1 and gives up at the timeout.
  EXPECT_EQ(ranks_.rank(0).statusCode, int(absl::StatusCode::kDeadlineExceeded))
      << ranks_.rank(0).message;
  EXPECT_FALSE(segmentExists(job));
}

TEST_F(ShmCommTest, RanksWithAnotherPlanFailEveryRankAtOnce) {
  // Rank 2 loaded another plan (its file was replaced while the ranks
  // started): it fails naming both fingerprints, and ranks 0 and 1 fail at
  // once with its message, long before their attach timeout.
  const std::string job = uniqueJobId();
  auto start = std::chrono::steady_clock::now();
  std::string failures = ranks_.run(3, [&](int rank, Shared::Rank &out) {
    ShmCommOptions o = options(job, rank, 3);
    o.fingerprint =
        rank == 2 ? "plan 00000000000000bb" : "plan 00000000000000aa";
    // Rank 2 comes last, once ranks 0 and 1 wait in the segment: a rank
    // that starts after the job has failed finds no segment (rank 0 removed
    // it) and waits for its attach timeout, which under mdrun's launcher
    // never comes (it ends the other ranks at the first failure).
    if (rank == 2)
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto comm = ShmComm::create(o);
    if (!comm.ok())
      record(out, comm.status(), "create");
    return true;
  });
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  ASSERT_EQ(failures, "");
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ranks_.rank(r).statusCode,
              int(absl::StatusCode::kFailedPrecondition))
        << "rank " << r << ": " << ranks_.rank(r).message;
    std::string m = ranks_.rank(r).message;
    EXPECT_NE(m.find("rank 2 has plan 00000000000000bb, but rank 0 has plan "
                     "00000000000000aa"),
              std::string::npos)
        << "rank " << r << ": " << m;
  }
  EXPECT_LT(seconds, 5.0) << "the other ranks waited for their timeout";
  EXPECT_FALSE(segmentExists(job));
}

TEST_F(ShmCommTest, BadArgumentsFailOnTheCallingRankAlone) {
  const std::string job = uniqueJobId();
  auto comm = ShmComm::create(options(job, 0, 1));
  ASSERT_TRUE(comm.ok()) << comm.status();
  Group g = *(*comm)->group(GroupKind::world);
  float x[4] = {1, 2, 3, 4};
  EXPECT_EQ((*comm)->allReduce(x, x, -1, DType::f32, ReduceOp::sum, g).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      (*comm)->allReduce(nullptr, x, 4, DType::f32, ReduceOp::sum, g).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*comm)->broadcast(x, x, 4, DType::f32, 1, g).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*comm)->broadcast(nullptr, x, 4, DType::f32, 0, g).code(),
            absl::StatusCode::kInvalidArgument); // the root's send is read
  Group wrong = g;
  wrong.ranks = {0, 1};
  absl::Status s = (*comm)->barrier(wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("is not rank 0's world group"), std::string::npos)
      << s;
  // None of that counted as a collective or broke the comm.
  EXPECT_EQ((*comm)->sequence(GroupKind::world), 0u);
  EXPECT_TRUE((*comm)->allReduce(x, x, 4, DType::f32, ReduceOp::avg, g).ok());
  EXPECT_EQ(x[3], 4.0f);

  for (ShmCommOptions bad :
       {options("a/b", 0, 1), options(job, 2, 2), options(job, 0, 4, 96, 3),
        options(job, 0, 4, 16)}) {
    auto c = ShmComm::create(bad);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument)
        << c.status();
  }
}

//===----------------------------------------------------------------------===//
// Mesh arithmetic
//===----------------------------------------------------------------------===//

TEST(Mesh, GroupsOfATwoByThreeMesh) {
  Mesh mesh{6, 3};
  Group s = *meshGroup(mesh, GroupKind::shard, 4);
  EXPECT_EQ(s.ranks, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(s.index, 1);
  Group r = *meshGroup(mesh, GroupKind::replicate, 4);
  EXPECT_EQ(r.ranks, (std::vector<int>{1, 4}));
  EXPECT_EQ(r.index, 1);
  Group w = *meshGroup(mesh, GroupKind::world, 4);
  EXPECT_EQ(w.size(), 6);
  EXPECT_EQ(w.index, 4);
  EXPECT_EQ(s.str(), "shard [3, 4, 5]");
  EXPECT_EQ(meshGroup({6, 4}, GroupKind::shard, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(meshGroup(mesh, GroupKind::shard, 6).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Mesh, ShardLayoutPadsToAMultipleOfTheParts) {
  std::optional<ShardLayout> l = ShardLayout::of(37, 4);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->shardNumel(), 10);
  EXPECT_EQ(l->paddedNumel(), 40);
  EXPECT_EQ(l->shardOffset(3), 30);
  EXPECT_EQ(l->validNumel(0), 10);
  EXPECT_EQ(l->validNumel(3), 7);
  std::optional<ShardLayout> tiny = ShardLayout::of(2, 4);
  ASSERT_TRUE(tiny.has_value());
  EXPECT_EQ(tiny->shardNumel(), 1);
  EXPECT_EQ(tiny->validNumel(1), 1);
  EXPECT_EQ(tiny->validNumel(2), 0);
  EXPECT_EQ(tiny->validNumel(3), 0);
}

//===----------------------------------------------------------------------===//
// What every comm shares (CollectiveComm.h)
//===----------------------------------------------------------------------===//

/// Keeps the last collective that reached run().
class RecordingComm final : public CollectiveComm {
public:
  const char *name() const override { return "recording"; }
  int rank() const override { return 0; }
  int worldSize() const override { return 1; }
  absl::StatusOr<Group> group(GroupKind kind) const override {
    return meshGroup({1, 1}, kind, 0);
  }
  CollectiveArgs last;
  int calls = 0;

private:
  absl::Status run(const CollectiveArgs &args, const Group &) override {
    last = args;
    ++calls;
    return absl::OkStatus();
  }
};

bool sameArgs(const CollectiveArgs &a, const CollectiveArgs &b) {
  return a.kind == b.kind && a.send == b.send && a.recv == b.recv &&
         a.count == b.count && a.dtype == b.dtype && a.op == b.op &&
         a.root == b.root;
}

TEST(CollectiveComm, EveryTypedCallReachesRunWithItsArguments) {
  float buf[8] = {};
  const std::vector<CollectiveArgs> calls = {
      CollectiveArgs::allGather(buf, buf + 4, 3, DType::bf16),
      CollectiveArgs::reduceScatter(buf, buf + 1, 2, DType::f16, ReduceOp::max),
      CollectiveArgs::allReduce(buf, buf, 8, DType::f32, ReduceOp::avg),
      CollectiveArgs::broadcast(nullptr, buf, 5, DType::i64, 0),
      CollectiveArgs::barrier()};
  RecordingComm comm;
  Group g = *comm.group(GroupKind::world);
  for (const CollectiveArgs &args : calls) {
    // runCollective calls the typed method, which comes back to run().
    comm.last = CollectiveArgs::allReduce(nullptr, nullptr, -1, DType::i32,
                                          ReduceOp::prod);
    ASSERT_TRUE(runCollective(comm, args, g).ok());
    EXPECT_TRUE(sameArgs(comm.last, args)) << collectiveName(args.kind);
  }
  EXPECT_EQ(comm.calls, 5);
  ASSERT_TRUE(
      comm.allReduce(buf, buf + 2, 2, DType::f32, ReduceOp::min, g).ok());
  EXPECT_TRUE(
      sameArgs(comm.last, CollectiveArgs::allReduce(buf, buf + 2, 2, DType::f32,
                                                    ReduceOp::min)));
}

TEST(CollectiveComm, ArgumentsDescribeTheCallAsTheFactoriesDo) {
  int x = 0;
  EXPECT_TRUE(CollectiveArgs::allGather(&x, &x, 3, DType::bf16).desc() ==
              CollectiveDesc::allGather(DType::bf16, 3));
  EXPECT_TRUE(
      CollectiveArgs::reduceScatter(&x, &x, 4, DType::f32, ReduceOp::max)
          .desc() ==
      CollectiveDesc::reduceScatter(DType::f32, 4, ReduceOp::max));
  EXPECT_TRUE(
      CollectiveArgs::allReduce(&x, &x, 5, DType::i64, ReduceOp::avg).desc() ==
      CollectiveDesc::allReduce(DType::i64, 5, ReduceOp::avg));
  EXPECT_TRUE(CollectiveArgs::broadcast(&x, &x, 6, DType::f16, 2).desc() ==
              CollectiveDesc::broadcast(DType::f16, 6, 2));
  EXPECT_TRUE(CollectiveArgs::barrier().desc() == CollectiveDesc::barrier());
  EXPECT_EQ(CollectiveArgs::broadcast(&x, &x, 6, DType::f16, 2).desc().args(),
            "f16 x 6, root 2");
}

TEST(CollectiveComm, BufferElementsPerKind) {
  int x = 0;
  auto ag = CollectiveArgs::allGather(&x, &x, 5, DType::f32);
  auto rs = CollectiveArgs::reduceScatter(&x, &x, 5, DType::f32, ReduceOp::sum);
  auto ar = CollectiveArgs::allReduce(&x, &x, 5, DType::f32, ReduceOp::sum);
  EXPECT_EQ(sendElements(ag, 4), 5);
  EXPECT_EQ(recvElements(ag, 4), 20);
  EXPECT_EQ(sendElements(rs, 4), 20);
  EXPECT_EQ(recvElements(rs, 4), 5);
  EXPECT_EQ(sendElements(ar, 4), 5);
  EXPECT_EQ(recvElements(ar, 4), 5);
  EXPECT_EQ(sendElements(CollectiveArgs::barrier(), 4), 0);
  EXPECT_EQ(recvElements(CollectiveArgs::barrier(), 4), 0);
}

TEST(CollectiveComm, CommOptionsAreCheckedAlikeForEveryComm) {
  using std::chrono::milliseconds;
  absl::StatusOr<Mesh> mesh = commMesh("x", 3, 4, 0, milliseconds(1));
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->worldSize, 4);
  EXPECT_EQ(mesh->shardSize, 4);
  EXPECT_EQ(commMesh("x", 3, 4, 2, milliseconds(1))->shardSize, 2);
  struct Bad {
    int rank, world, shard;
    milliseconds timeout;
    std::string message;
  };
  for (const Bad &b : std::vector<Bad>{
           {4, 4, 0, milliseconds(1),
            "x: rank 4 is out of range for world "
            "size 4"},
           {-1, 4, 0, milliseconds(1), "x: rank -1 is out of range"},
           {0, 4, 3, milliseconds(1),
            "x: shard group size 3 does not divide "
            "world size 4"},
           {0, 0, 0, milliseconds(1), "x: world size must be >= 1"},
           {0, 4, 0, milliseconds(0), "x: the timeout must be positive"}}) {
    absl::StatusOr<Mesh> m = commMesh("x", b.rank, b.world, b.shard, b.timeout);
    ASSERT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(b.message), std::string::npos)
        << m.status();
  }
}

} // namespace
} // namespace md::shm
