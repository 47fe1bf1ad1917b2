//===- NcclCommTest.cpp - the NCCL comm, the staged comm, their checks ----===//
//
// Two parts. The argument checks, the type mapping, version names, unique
// ids and option validation need no GPU and run everywhere. The rest needs
// device 0: it skips, with the reason, on a machine without a GPU, and fails
// when a GPU is there but cannot be used.
//
// Every GPU case runs its CUDA work in forked children (CommTestUtil.h) and
// this process never initialises CUDA: a child cannot use CUDA once its
// parent has, and a child stuck in NCCL is killed and reported instead of
// hanging the suite. Even whether a GPU is usable is asked in a child.
//
//===----------------------------------------------------------------------===//

#include "runtime/nccl/NcclComm.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Device.h"
#include "runtime/nccl/NcclArgs.h"
#include "runtime/nccl/StagedComm.h"
#include "runtime/shm/ShmComm.h"
#include "test/unit/CommTestUtil.h"

namespace md::nccl {
namespace {

using namespace md::runtime;
using namespace md::commtest;
using std::chrono::milliseconds;

bool contains(const absl::Status &s, const std::string &text) {
  return s.message().find(text) != absl::string_view::npos;
}

//===----------------------------------------------------------------------===//
// Without a GPU: mapping, names, argument checks, options
//===----------------------------------------------------------------------===//

TEST(NcclArgs, EveryElementTypeMapsToNcclsOwn) {
  EXPECT_EQ(*toNcclDataType(DType::f32), ncclFloat32);
  EXPECT_EQ(*toNcclDataType(DType::bf16), ncclBfloat16);
  EXPECT_EQ(*toNcclDataType(DType::f16), ncclFloat16);
  EXPECT_EQ(*toNcclDataType(DType::i32), ncclInt32);
  EXPECT_EQ(*toNcclDataType(DType::i64), ncclInt64);
  absl::StatusOr<ncclDataType_t> bad = toNcclDataType(static_cast<DType>(42));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(bad.status(), "element type 42")) << bad.status();
}

TEST(NcclArgs, EveryReductionMapsToNcclsOwn) {
  EXPECT_EQ(*toNcclRedOp(ReduceOp::sum), ncclSum);
  EXPECT_EQ(*toNcclRedOp(ReduceOp::avg), ncclAvg);
  EXPECT_EQ(*toNcclRedOp(ReduceOp::max), ncclMax);
  EXPECT_EQ(*toNcclRedOp(ReduceOp::min), ncclMin);
  EXPECT_EQ(*toNcclRedOp(ReduceOp::prod), ncclProd);
  absl::StatusOr<ncclRedOp_t> bad = toNcclRedOp(static_cast<ReduceOp>(9));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NcclArgs, VersionCodesOfBothEncodingsAreNamed) {
  EXPECT_EQ(ncclVersionName(22809), "NCCL 2.28.9");
  EXPECT_EQ(ncclVersionName(21803), "NCCL 2.18.3");
  EXPECT_EQ(ncclVersionName(2708), "NCCL 2.7.8"); // 2.8 and earlier
  EXPECT_EQ(
      ncclVersionName(NCCL_VERSION_CODE),
      absl::StrFormat("NCCL %d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH));
}

TEST(NcclArgs, GroupsOfConsecutiveRanksAreNamedAsRanges) {
  Mesh mesh{8, 2};
  EXPECT_EQ(groupName(*meshGroup(mesh, GroupKind::world, 3)), "world [0..7]");
  EXPECT_EQ(groupName(*meshGroup(mesh, GroupKind::shard, 3)), "shard [2, 3]");
  EXPECT_EQ(groupName(*meshGroup(mesh, GroupKind::replicate, 3)),
            "replicate [1, 3, 5, 7]");
  EXPECT_EQ(groupName(*meshGroup(Mesh{1, 1}, GroupKind::world, 0)),
            "world [0]");
}

TEST(NcclArgs, ElementCountsFollowNcclsConventions) {
  int x = 0;
  EXPECT_EQ(sendElements(CollectiveArgs::allGather(&x, &x, 5, DType::f32), 4),
            5);
  EXPECT_EQ(recvElements(CollectiveArgs::allGather(&x, &x, 5, DType::f32), 4),
            20);
  auto rs = CollectiveArgs::reduceScatter(&x, &x, 5, DType::f32, ReduceOp::sum);
  EXPECT_EQ(sendElements(rs, 4), 20);
  EXPECT_EQ(recvElements(rs, 4), 5);
  auto ar = CollectiveArgs::allReduce(&x, &x, 5, DType::f32, ReduceOp::sum);
  EXPECT_EQ(sendElements(ar, 4), 5);
  EXPECT_EQ(recvElements(ar, 4), 5);
  EXPECT_EQ(recvElements(CollectiveArgs::barrier(), 4), 0);
}

class CheckCollective : public ::testing::Test {
protected:
  absl::Status check(const CollectiveArgs &a) {
    return checkCollective("nccl", a, mine, mine);
  }
  Group mine = *meshGroup(Mesh{4, 2}, GroupKind::shard, 3); // [2, 3], index 1
  float buf[64] = {};
};

TEST_F(CheckCollective, AcceptsWellFormedCalls) {
  EXPECT_TRUE(
      check(CollectiveArgs::allReduce(buf, buf, 8, DType::bf16, ReduceOp::prod))
          .ok());
  EXPECT_TRUE(check(CollectiveArgs::allGather(buf, buf, 8, DType::i64)).ok());
  EXPECT_TRUE(check(CollectiveArgs::reduceScatter(buf, buf, 8, DType::f16,
                                                  ReduceOp::avg))
                  .ok());
  // Only the root's send buffer is read.
  EXPECT_TRUE(
      check(CollectiveArgs::broadcast(nullptr, buf, 8, DType::i32, 0)).ok());
  // Nothing to move, nothing to point at.
  EXPECT_TRUE(check(CollectiveArgs::allReduce(nullptr, nullptr, 0, DType::f32,
                                              ReduceOp::sum))
                  .ok());
  EXPECT_TRUE(check(CollectiveArgs::barrier()).ok());
}

TEST_F(CheckCollective, RefusesAGroupThatIsNotThisRanksOwn) {
  Group other = *meshGroup(Mesh{4, 2}, GroupKind::shard, 0); // [0, 1]
  absl::Status s = checkCollective(
      "nccl", CollectiveArgs::allReduce(buf, buf, 8, DType::f32, ReduceOp::sum),
      other, mine);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s, "nccl: all_reduce: group shard [0, 1] (index 0) is "
                          "not this rank's shard group shard [2, 3] (index 1)"))
      << s;
  Group wrongIndex = mine;
  wrongIndex.index = 0;
  EXPECT_EQ(
      checkCollective("shm-staged", CollectiveArgs::barrier(), wrongIndex, mine)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(CheckCollective, RefusesBadCountsTypesReductionsRootsAndBuffers) {
  struct Bad {
    CollectiveArgs args;
    std::string message;
  };
  const Bad cases[] = {
      {CollectiveArgs::allReduce(buf, buf, -1, DType::f32, ReduceOp::sum),
       "all_reduce: bad element count -1"},
      {CollectiveArgs::allGather(buf, buf, INT64_MAX / 4, DType::f32),
       "all_gather: bad element count"},
      {CollectiveArgs::allReduce(buf, buf, 8, static_cast<DType>(7),
                                 ReduceOp::sum),
       "all_reduce: element type 7 has no NCCL equivalent"},
      {CollectiveArgs::reduceScatter(buf, buf, 8, DType::f32,
                                     static_cast<ReduceOp>(5)),
       "reduce_scatter: reduction 5 has no NCCL equivalent"},
      {CollectiveArgs::broadcast(buf, buf, 8, DType::f32, 2),
       "broadcast: root 2 is not an index of group shard [2, 3]"},
      {CollectiveArgs::broadcast(buf, buf, 8, DType::f32, -1),
       "broadcast: root -1"},
      {CollectiveArgs::broadcast(nullptr, buf, 8, DType::f32, 1),
       "broadcast: null buffer for 8 elements"},
      {CollectiveArgs::allGather(nullptr, buf, 8, DType::f32),
       "all_gather: null buffer"},
      {CollectiveArgs::allReduce(buf, nullptr, 8, DType::f32, ReduceOp::sum),
       "all_reduce: null buffer"},
  };
  for (const Bad &b : cases) {
    absl::Status s = check(b.args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.message;
    EXPECT_TRUE(contains(s, "nccl: " + b.message)) << s;
  }
}

TEST(NcclComm, VersionStringNamesTheLoadedLibrary) {
  const std::string v = NcclVersionString();
  EXPECT_TRUE(v.rfind("NCCL 2.", 0) == 0) << v;
  EXPECT_EQ(std::count(v.begin(), v.end(), '.'), 2) << v;
}

TEST(NcclComm, UniqueIdsNeedNoGpuAndDiffer) {
  absl::StatusOr<UniqueId> a = NewUniqueId();
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<UniqueId> b = NewUniqueId();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(*a, *b);
  EXPECT_NE(*a, UniqueId{});
}

TEST(NcclComm, CreateRefusesBadOptionsBeforeTouchingADevice) {
  struct Bad {
    int rank, world, shard;
    milliseconds timeout;
    std::string message;
  };
  const Bad cases[] = {
      {0, 0, 1, milliseconds(1000), "nccl: world size must be >= 1, got 0"},
      {0, 4, 3, milliseconds(1000),
       "nccl: shard group size 3 does not divide world size 4"},
      {4, 4, 2, milliseconds(1000),
       "nccl: rank 4 is out of range for world size 4"},
      {0, 4, 2, milliseconds(0), "nccl: the timeout must be positive"},
      {0, 4, 2, milliseconds(1000), "nccl: no CUDA backend given"},
  };
  for (const Bad &b : cases) {
    NcclCommOptions o;
    o.rank = b.rank;
    o.worldSize = b.world;
    o.shardSize = b.shard;
    o.timeout = b.timeout;
    absl::StatusOr<std::unique_ptr<NcclComm>> comm = NcclComm::create(o);
    ASSERT_FALSE(comm.ok()) << b.message;
    EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.status().message(), b.message);
  }
}

//===----------------------------------------------------------------------===//
// With a GPU: every CUDA call in forked children
//===----------------------------------------------------------------------===//

/// Whether device 0 can run md's kernels: `why` is empty when it can; else
/// `absent` says whether the machine has no GPU at all (the cases skip) or
/// has one that fails (they fail, naming the cause; a crashed probe child
/// too). Asked in a child, so that this process never initialises CUDA.
struct GpuVerdict {
  bool absent = false;
  std::string why;
};

/// The probe child's statusCode when the machine has no GPU.
constexpr int kNoDevice = -77;

const GpuVerdict &gpuVerdict() {
  static const GpuVerdict verdict = [] {
    Ranks probe;
    std::string failures = probe.run(1, [](int, Shared::Rank &out) {
      if (std::optional<std::string> none = cuda::noDeviceReason()) {
        out.statusCode = kNoDevice;
        std::snprintf(out.message, sizeof out.message, "%s", none->c_str());
        return false;
      }
      absl::StatusOr<std::unique_ptr<cuda::CudaBackend>> b =
          cuda::CudaBackend::create(0);
      if (!b.ok())
        return record(out, b.status(), "CUDA backend on device 0");
      return true;
    });
    GpuVerdict v;
    if (failures.empty())
      return v;
    const Shared::Rank &r = probe.rank(0);
    v.absent = r.statusCode == kNoDevice;
    v.why = r.message[0] != '\0' ? std::string(r.message)
                                 : "the GPU probe failed: " + failures;
    return v;
  }();
  return verdict;
}

#define MD_REQUIRE_GPU()                                                       \
  do {                                                                         \
    const GpuVerdict &gpu_ = gpuVerdict();                                     \
    if (gpu_.absent)                                                           \
      GTEST_SKIP() << gpu_.why;                                                \
    if (!gpu_.why.empty())                                                     \
      FAIL() << "a GPU is present but unusable: " << gpu_.why;                 \
  } while (0)

/// Writes a failure into the child's record; returns false.
bool fail(Shared::Rank &out, const std::string &message) {
  std::snprintf(out.message, sizeof out.message, "%s", message.c_str());
  return false;
}

/// Rank 0 alone on device 0: its backend and, once open()ed, its comm
/// (destroyed first).
struct RankZero {
  std::unique_ptr<cuda::CudaBackend> backend;
  NcclCommOptions options;
  std::unique_ptr<NcclComm> comm;

  /// The backend, and options for rank 0 of `worldSize` with a fresh id.
  absl::Status prepare(milliseconds timeout, int worldSize = 1) {
    absl::StatusOr<std::unique_ptr<cuda::CudaBackend>> b =
        cuda::CudaBackend::create(0);
    if (!b.ok())
      return b.status();
    backend = std::move(*b);
    absl::StatusOr<UniqueId> id = NewUniqueId();
    if (!id.ok())
      return id.status();
    options.rank = 0;
    options.worldSize = worldSize;
    options.shardSize = worldSize;
    options.uniqueId = *id;
    options.backend = backend.get();
    options.timeout = timeout;
    return absl::OkStatus();
  }
  /// prepare() for a world of one, then the comm.
  absl::Status open(milliseconds timeout) {
    if (absl::Status s = prepare(timeout); !s.ok())
      return s;
    absl::StatusOr<std::unique_ptr<NcclComm>> c = NcclComm::create(options);
    if (!c.ok())
      return c.status();
    comm = std::move(*c);
    return absl::OkStatus();
  }
};

/// Every dtype x reduction, the data movers, in place and empty, plus
/// uneven sizes up to more than a NCCL chunk.
std::vector<Case> singleRankCases() {
  std::vector<Case> cases = conformanceCases(1);
  for (int64_t n : {1, 7, 1001, 65537, 1 << 20}) {
    cases.push_back({Kind::allReduce, DType::f32, ReduceOp::sum, n, 0, false});
    cases.push_back({Kind::allReduce, DType::bf16, ReduceOp::avg, n, 0, true});
    cases.push_back({Kind::allGather, DType::f16, ReduceOp::sum, n, 0, false});
    cases.push_back(
        {Kind::reduceScatter, DType::i64, ReduceOp::max, n, 0, true});
    cases.push_back({Kind::broadcast, DType::i32, ReduceOp::sum, n, 0, false});
  }
  return cases;
}

TEST(NcclCommGpu, OneRankRunsEveryCollectiveLikeTheHostReference) {
  MD_REQUIRE_GPU();
  const std::vector<Case> cases = singleRankCases();
  Ranks ranks;
  std::string failures = ranks.run(
      1,
      [&](int, Shared::Rank &out) {
        RankZero r;
        if (absl::Status s = r.open(milliseconds(60'000)); !s.ok())
          return record(out, s, "open");
        if (std::string(r.comm->name()) != "nccl")
          return fail(out, "name is not nccl");
        // At one rank every group kind is the world communicator.
        for (GroupKind kind :
             {GroupKind::world, GroupKind::shard, GroupKind::replicate}) {
          Group g = *r.comm->group(kind);
          for (size_t i = 0; i < cases.size(); ++i) {
            if (kind != GroupKind::world && i % 7 != 0)
              continue;
            const Case &c = cases[i];
            const std::string what = describe(c) + " over " + g.str();
            std::vector<uint8_t> input = makeInput(c, int(i), 0, 1), got;
            absl::Status s =
                runCase(*r.comm, g, c, input, got, r.backend.get());
            if (!s.ok())
              return record(out, s, what.c_str());
            std::string diff = difference(got, expected(c, 0, {input}));
            if (!diff.empty())
              return fail(out, what + ": " + diff);
          }
          if (absl::Status s = r.comm->barrier(g); !s.ok())
            return record(out, s, "barrier");
        }
        if (!r.comm->status().ok())
          return record(out, r.comm->status(), "status");
        return true;
      },
      std::chrono::seconds(240));
  EXPECT_EQ(failures, "");
}

TEST(NcclCommGpu, ArgumentsWrongOnThisRankFailWithoutHarmingTheComm) {
  MD_REQUIRE_GPU();
  Ranks ranks;
  std::string failures = ranks.run(1, [&](int, Shared::Rank &out) {
    RankZero r;
    if (absl::Status s = r.open(milliseconds(60'000)); !s.ok())
      return record(out, s, "open");
    auto buf = r.backend->allocate(1024);
    if (!buf.ok())
      return record(out, buf.status(), "allocate");
    NcclComm &c = *r.comm;
    Group world = *c.group(GroupKind::world);
    Group notMine = world;
    notMine.ranks = {1};
    void *p = buf->data();
    const absl::Status bad[] = {
        c.allReduce(p, p, -1, DType::f32, ReduceOp::sum, world),
        c.allReduce(p, p, 4, static_cast<DType>(9), ReduceOp::sum, world),
        c.reduceScatter(p, p, 4, DType::f32, static_cast<ReduceOp>(8), world),
        c.broadcast(p, p, 4, DType::f32, 1, world),
        c.allGather(nullptr, p, 4, DType::f32, world),
        c.allGather(p, p, 4, DType::f32, notMine),
        c.barrier(notMine),
    };
    for (const absl::Status &s : bad)
      if (s.code() != absl::StatusCode::kInvalidArgument)
        return record(out, s, "expected InvalidArgument, got");
    if (c.sequence(GroupKind::world) != 0)
      return fail(out, "a refused call counted as a collective");
    if (absl::Status s = c.allReduce(p, p, 4, DType::f32, ReduceOp::sum, world);
        !s.ok())
      return record(out, s, "all_reduce after the refusals");
    if (absl::Status s = r.backend->synchronize(kCommStream); !s.ok())
      return record(out, s, "synchronize");
    if (c.sequence(GroupKind::world) != 1)
      return fail(out, "sequence is not 1");
    return true;
  });
  EXPECT_EQ(failures, "");
}

void sleepOnStream(void *ms) {
  std::this_thread::sleep_for(milliseconds(reinterpret_cast<intptr_t>(ms)));
}

/// Queues a host function that holds `stream` for `ms` milliseconds.
absl::Status blockStream(cuda::CudaBackend &backend, Stream stream,
                         intptr_t ms) {
  auto s = static_cast<cudaStream_t>(backend.nativeStream(stream));
  return cuda::cudaStatus(
      cudaLaunchHostFunc(s, sleepOnStream, reinterpret_cast<void *>(ms)),
      "cudaLaunchHostFunc");
}

TEST(NcclCommGpu, SyncPollTurnsABlockedWaitIntoThePollsError) {
  MD_REQUIRE_GPU();
  Ranks ranks;
  std::string failures = ranks.run(1, [&](int, Shared::Rank &out) {
    auto backend = cuda::CudaBackend::create(0);
    if (!backend.ok())
      return record(out, backend.status(), "backend");
    cuda::CudaBackend &b = **backend;
    // A healthy poll: the wait ends when the stream is idle.
    int polls = 0;
    b.setSyncPoll([&] {
      ++polls;
      return absl::OkStatus();
    });
    if (absl::Status s = blockStream(b, kCommStream, 200); !s.ok())
      return record(out, s, "block");
    if (absl::Status s = b.synchronize(kCommStream); !s.ok())
      return record(out, s, "synchronize with a healthy poll");
    if (polls < 2)
      return fail(out, "the poll was not called while waiting");
    // A poll that fails after a while: the wait fails long before the
    // stream is idle.
    const auto start = Clock::now();
    b.setSyncPoll([&] {
      return Clock::now() - start > milliseconds(100)
                 ? absl::AbortedError("comm failed")
                 : absl::OkStatus();
    });
    if (absl::Status s = blockStream(b, kCommStream, 3000); !s.ok())
      return record(out, s, "block");
    absl::Status s = b.synchronize(kCommStream);
    const auto waited = Clock::now() - start;
    if (s.code() != absl::StatusCode::kAborted || s.message() != "comm failed")
      return record(out, s, "expected the poll's error, got");
    if (waited > milliseconds(2000))
      return fail(out, "the failing poll did not end the wait early");
    b.setSyncPoll(nullptr);
    if (absl::Status s = b.synchronize(kCommStream); !s.ok())
      return record(out, s, "synchronize without a poll");
    return true;
  });
  EXPECT_EQ(failures, "");
}

TEST(NcclCommGpu, WatchdogTurnsACollectiveThatNeverCompletesIntoDeadline) {
  MD_REQUIRE_GPU();
  Ranks ranks;
  std::string failures = ranks.run(1, [&](int, Shared::Rank &out) {
    RankZero r;
    if (absl::Status s = r.open(milliseconds(500)); !s.ok())
      return record(out, s, "open");
    auto buf = r.backend->allocate(1024);
    if (!buf.ok())
      return record(out, buf.status(), "allocate");
    NcclComm &c = *r.comm;
    Group world = *c.group(GroupKind::world);
    void *p = buf->data();
    // The comm stream is held for 4 s: the all-reduce queued behind it
    // cannot complete within the 0.5 s timeout.
    if (absl::Status s = blockStream(*r.backend, kCommStream, 4000); !s.ok())
      return record(out, s, "block");
    const auto start = Clock::now();
    if (absl::Status s =
            c.allReduce(p, p, 16, DType::f32, ReduceOp::sum, world);
        !s.ok())
      return record(out, s, "enqueueing the all_reduce");
    absl::Status s = r.backend->synchronize(kCommStream);
    const auto waited = Clock::now() - start;
    const std::string want = "nccl: all_reduce #1 over world [0] did not "
                             "complete in 0.5 s: a rank is missing or the "
                             "ranks diverged";
    if (s.code() != absl::StatusCode::kDeadlineExceeded || s.message() != want)
      return record(out, s, "synchronize: expected the watchdog's error, got");
    if (waited > milliseconds(3000))
      return fail(out, "the watchdog's error came only once the stream ran");
    // Every later call returns it.
    absl::Status later =
        c.allReduce(p, p, 16, DType::f32, ReduceOp::sum, world);
    if (later != s || c.status() != s ||
        r.backend->synchronize(kComputeStream) != s)
      return record(out, later, "a later call");
    return true;
  });
  EXPECT_EQ(failures, "");
}

TEST(NcclCommGpu, CreateFailsWithDeadlineExceededWhenARankNeverJoins) {
  MD_REQUIRE_GPU();
  Ranks ranks;
  std::string failures = ranks.run(1, [&](int, Shared::Rank &out) {
    RankZero r;
    // Rank 1 never comes.
    if (absl::Status s = r.prepare(milliseconds(2000), 2); !s.ok())
      return record(out, s, "prepare");
    const auto start = Clock::now();
    auto comm = NcclComm::create(r.options);
    const auto waited = Clock::now() - start;
    if (comm.ok())
      return fail(out, "create succeeded without rank 1");
    const absl::Status &s = comm.status();
    if (s.code() != absl::StatusCode::kDeadlineExceeded ||
        !contains(s, "the communicator of world [0, 1] was not ready within "
                     "2 s"))
      return record(out, s, "expected DeadlineExceeded, got");
    if (waited > milliseconds(15000))
      return fail(out, "create took far longer than its timeout");
    return true;
  });
  EXPECT_EQ(failures, "");
}

//===----------------------------------------------------------------------===//
// The staged comm: ranks sharing GPU 0
//===----------------------------------------------------------------------===//

TEST(StagedCommGpu, TwoRanksOnOneGpuMatchTheHostReferenceBitForBit) {
  MD_REQUIRE_GPU();
  const int world = 2;
  const std::string job = uniqueJobId();
  std::vector<Case> cases = conformanceCases(world);
  cases.push_back({Kind::allReduce, DType::bf16, ReduceOp::sum, 100'000, 0,
                   false}); // several times the 64 KiB first staging
  Ranks ranks;
  std::string failures = ranks.run(
      world,
      [&](int rank, Shared::Rank &out) {
        auto backend = cuda::CudaBackend::create(0);
        if (!backend.ok())
          return record(out, backend.status(), "backend");
        shm::ShmCommOptions o;
        o.jobId = job;
        o.rank = rank;
        o.worldSize = world;
        o.timeout = milliseconds(30'000);
        auto host = shm::ShmComm::create(o);
        if (!host.ok())
          return record(out, host.status(), "shm create");
        StagedComm comm(std::move(*host), **backend);
        if (std::string(comm.name()) != "shm-staged")
          return fail(out, "name is not shm-staged");
        if (absl::Status s = runCases(comm, cases, out.data, backend->get());
            !s.ok())
          return record(out, s, "collective");
        if (absl::Status s = comm.barrier(*comm.group(GroupKind::world));
            !s.ok())
          return record(out, s, "barrier");
        return true;
      },
      std::chrono::seconds(120));
  ASSERT_EQ(failures, "");
  checkCases(ranks, world, cases);
}

} // namespace
} // namespace md::nccl
