//===- CommTestUtil.h - forked ranks and the conformance cases of the comms -*- C++ -*-===//
//
// What the comm suites (ShmCommTest, GlooCommTest, NcclCommTest) share:
// ranks as forked processes that report through shared memory, the
// collective cases with every rank's inputs, and the reference they must
// match. Children never touch gtest; a child that hangs is killed and
// reported. A case's buffers are host memory, or a backend's (device memory
// for a device comm).
//
//===----------------------------------------------------------------------===//

#ifndef MD_TEST_UNIT_COMMTESTUTIL_H
#define MD_TEST_UNIT_COMMTESTUTIL_H

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Backend.h"
#include "runtime/core/Comm.h"
#include "runtime/core/Status.h"
#include "runtime/core/NumberFormat.h"

namespace md::commtest {

using namespace md::runtime;
using Clock = std::chrono::steady_clock;

/// A job id no other test (or test process) uses at the same time.
inline std::string uniqueJobId() {
  static std::atomic<int> counter{0};
  return absl::StrFormat("test-%d-%d", getpid(), counter++);
}

//===----------------------------------------------------------------------===//
// Forked ranks
//===----------------------------------------------------------------------===//

/// Memory shared by the test process and its rank children.
struct Shared {
  static constexpr int kMaxRanks = 8;
  static constexpr int64_t kDataBytes = 1 << 20;
  struct Rank {
    int exitCode;
    int statusCode; // of the last error, for the tests that expect one
    int64_t elapsedMs;
    char message[2048];
    uint8_t data[kDataBytes];
  } ranks[kMaxRanks];
};

class Ranks {
public:
  Ranks() {
    void *p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    shared_ = static_cast<Shared *>(p);
  }
  ~Ranks() { munmap(shared_, sizeof(Shared)); }

  /// Runs body(rank, its shared record) in `world` children; a child whose
  /// body returns false exits 1. Children still running after `limit` are
  /// killed. Returns a description of every child that failed or hung.
  std::string run(int world, const std::function<bool(int, Shared::Rank &)> &body,
                  std::chrono::seconds limit = std::chrono::seconds(30)) {
    std::memset(shared_, 0, sizeof(Shared));
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) {
      pid_t pid = fork();
      if (pid == 0) {
        bool ok = body(r, shared_->ranks[r]);
        _exit(ok ? 0 : 1);
      }
      pids.push_back(pid);
    }
    std::string failures;
    const auto deadline = Clock::now() + limit;
    std::vector<bool> done(world, false);
    for (int left = world; left > 0;) {
      for (int r = 0; r < world; ++r) {
        if (done[r])
          continue;
        int status = 0;
        if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
          done[r] = true;
          --left;
          if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failures += absl::StrFormat("rank %d failed (status %d): %s\n", r,
                                        status, shared_->ranks[r].message);
        }
      }
      if (left > 0 && Clock::now() > deadline) {
        for (int r = 0; r < world; ++r)
          if (!done[r]) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], nullptr, 0);
            failures += absl::StrFormat("rank %d hung\n", r);
          }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return failures;
  }

  Shared::Rank &rank(int r) { return shared_->ranks[r]; }

private:
  Shared *shared_ = nullptr;
};

/// Records a failed status in a child's record; returns false.
inline bool record(Shared::Rank &out, const absl::Status &s, const char *what) {
  out.statusCode = static_cast<int>(s.code());
  std::snprintf(out.message, sizeof out.message, "%s: %s", what,
                std::string(s.message()).c_str());
  return false;
}

//===----------------------------------------------------------------------===//
// Inputs and the reference
//===----------------------------------------------------------------------===//

enum class Kind { allReduce, reduceScatter, allGather, broadcast };

struct Case {
  Kind kind;
  DType dtype;
  ReduceOp op;
  int64_t count; // NCCL's: per rank for all-gather/reduce-scatter
  int root;
  bool inPlace;
};

inline int64_t inputElems(const Case &c, int n) {
  return c.kind == Kind::reduceScatter ? n * c.count : c.count;
}
inline int64_t outputElems(const Case &c, int n) {
  return c.kind == Kind::allGather ? n * c.count : c.count;
}

/// Rank `rank`'s input for case `index`, as bytes of c.dtype. Products use
/// values near 1 so they neither overflow nor vanish.
inline std::vector<uint8_t> makeInput(const Case &c, int index, int rank, int n) {
  std::mt19937 gen(uint32_t(index * 131 + rank * 7 + 1));
  int64_t elems = inputElems(c, n), es = dtypeSize(c.dtype);
  std::vector<uint8_t> bytes(elems * es);
  bool prod = c.op == ReduceOp::prod;
  for (int64_t i = 0; i < elems; ++i) {
    double u = gen() / 4294967296.0;
    double f = prod ? 0.5 + u : -2.0 + 4.0 * u;
    int64_t k = prod ? 1 + int64_t(u * 3) : int64_t(u * 101) - 50;
    uint8_t *dst = bytes.data() + i * es;
    switch (c.dtype) {
    case DType::f32: {
      float v = float(f);
      std::memcpy(dst, &v, 4);
      break;
    }
    case DType::bf16: {
      uint16_t v = runtime::f32ToBf16(float(f));
      std::memcpy(dst, &v, 2);
      break;
    }
    case DType::f16: {
      uint16_t v = runtime::f32ToF16(float(f));
      std::memcpy(dst, &v, 2);
      break;
    }
    case DType::i32: {
      int32_t v = int32_t(k);
      std::memcpy(dst, &v, 4);
      break;
    }
    case DType::i64: {
      int64_t v = k * 1000000007ll; // beyond i32
      std::memcpy(dst, &v, 8);
      break;
    }
    }
  }
  return bytes;
}

/// Element i of each input reduced in group order: f32 arithmetic for the
/// float types (rounded once to bf16/f16), wrap-around for integers, avg
/// as the sum divided by n.
inline void referenceReduce(DType dtype, ReduceOp op,
                     const std::vector<const uint8_t *> &in, int64_t i,
                     uint8_t *out) {
  const int n = int(in.size());
  auto loadF = [&](const uint8_t *p) {
    if (dtype == DType::f32) {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return dtype == DType::bf16 ? runtime::bf16ToF32(h) : runtime::f16ToF32(h);
  };
  if (dtype == DType::i32 || dtype == DType::i64) {
    auto load = [&](const uint8_t *p) -> int64_t {
      if (dtype == DType::i32) {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        return v;
      }
      int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      return v;
    };
    int64_t acc = load(in[0]);
    for (int r = 1; r < n; ++r) {
      int64_t x = load(in[r]);
      switch (op) {
      case ReduceOp::sum: // wraps, in unsigned arithmetic to say so
      case ReduceOp::avg:
        acc = int64_t(uint64_t(acc) + uint64_t(x));
        break;
      case ReduceOp::prod:
        acc = int64_t(uint64_t(acc) * uint64_t(x));
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
      acc /= n;
    if (dtype == DType::i32) {
      int32_t v = int32_t(acc);
      std::memcpy(out, &v, 4);
    } else {
      std::memcpy(out, &acc, 8);
    }
    return;
  }
  float acc = loadF(in[0]);
  for (int r = 1; r < n; ++r) {
    float x = loadF(in[r]);
    switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      acc += x;
      break;
    case ReduceOp::prod:
      acc *= x;
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
    acc /= float(n);
  if (dtype == DType::f32) {
    std::memcpy(out, &acc, 4);
  } else {
    uint16_t h = dtype == DType::bf16 ? runtime::f32ToBf16(acc) : runtime::f32ToF16(acc);
    std::memcpy(out, &h, 2);
  }
}

/// referenceReduce over `len` elements, with ReduceInOrder's signature.
inline void referenceReduceAll(DType dtype, ReduceOp op,
                               const std::vector<const void *> &srcs,
                               void *out, int64_t len) {
  std::vector<const uint8_t *> in;
  for (const void *p : srcs)
    in.push_back(static_cast<const uint8_t *>(p));
  const int64_t es = dtypeSize(dtype);
  for (int64_t i = 0; i < len; ++i)
    referenceReduce(dtype, op, in, i, static_cast<uint8_t *>(out) + i * es);
}

using Reducer = void (*)(DType, ReduceOp, const std::vector<const void *> &,
                         void *, int64_t);

/// What member `index` of a group whose members had inputs `in` must get,
/// the reductions computed by `reduce`.
inline std::vector<uint8_t>
expected(const Case &c, int index, const std::vector<std::vector<uint8_t>> &in,
         Reducer reduce = referenceReduceAll) {
  const int n = int(in.size());
  const int64_t es = dtypeSize(c.dtype);
  std::vector<uint8_t> out(outputElems(c, n) * es);
  std::vector<const void *> ptrs;
  switch (c.kind) {
  case Kind::allReduce:
    for (const auto &v : in)
      ptrs.push_back(v.data());
    reduce(c.dtype, c.op, ptrs, out.data(), c.count);
    break;
  case Kind::reduceScatter:
    for (const auto &v : in)
      ptrs.push_back(v.data() + index * c.count * es);
    reduce(c.dtype, c.op, ptrs, out.data(), c.count);
    break;
  case Kind::allGather:
    for (int r = 0; r < n; ++r)
      std::memcpy(out.data() + r * c.count * es, in[r].data(), c.count * es);
    break;
  case Kind::broadcast:
    std::memcpy(out.data(), in[c.root].data(), c.count * es);
    break;
  }
  return out;
}

/// "all_reduce bf16 sum x 37 in place".
inline std::string describe(const Case &c) {
  const char *kinds[] = {"all_reduce", "reduce_scatter", "all_gather",
                         "broadcast"};
  return absl::StrFormat("%s %s %s x %d%s", kinds[int(c.kind)],
                         dtypeName(c.dtype), reduceOpName(c.op), c.count,
                         c.inPlace ? " in place" : "");
}

/// "" when `got` equals `want`, else where they first differ.
inline std::string difference(const std::vector<uint8_t> &got,
                              const std::vector<uint8_t> &want) {
  if (got.size() != want.size())
    return absl::StrFormat("%d bytes instead of %d", got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      return absl::StrFormat("byte %d is 0x%02x instead of 0x%02x", i, got[i],
                             want[i]);
  return "";
}

/// Where runCase keeps a case's buffers: host vectors, or with a backend
/// (the CUDA one for a device comm) that backend's memory, written and read
/// through it. Each buffer is its own allocation, so that a comm that
/// strays past one does not land in another.
class CaseMemory {
public:
  explicit CaseMemory(Backend *backend) : backend_(backend) {}

  /// `bytes` of 0xee, so that what the comm leaves unwritten shows.
  absl::StatusOr<uint8_t *> poisoned(int64_t bytes) {
    if (backend_ == nullptr) {
      host_.emplace_back(bytes, 0xee);
      return host_.back().data();
    }
    absl::StatusOr<Buffer> b = backend_->allocate(bytes);
    if (!b.ok())
      return b.status();
    auto *p = static_cast<uint8_t *>(b->data());
    device_.push_back(std::move(*b));
    const std::vector<uint8_t> poison(bytes, 0xee);
    MD_RETURN_IF_ERROR(copy(p, poison.data(), bytes));
    return p;
  }
  absl::Status copy(void *dst, const void *src, int64_t bytes) {
    if (backend_ != nullptr)
      return backend_->copy(dst, src, bytes, kCommStream);
    if (bytes > 0)
      std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  /// Waits for the comm stream, before the results are read.
  absl::Status finish() {
    return backend_ != nullptr ? backend_->synchronize(kCommStream)
                               : absl::OkStatus();
  }

private:
  Backend *backend_;
  std::vector<std::vector<uint8_t>> host_;
  std::vector<Buffer> device_;
};

/// Runs one case on this rank with its buffers in host memory, or in
/// `memory`'s (see CaseMemory); the output lands in `out`. In place uses
/// NCCL's layouts: the shard sits at this rank's block of the full buffer.
inline absl::Status runCase(Comm &comm, const Group &g, const Case &c,
                            const std::vector<uint8_t> &input,
                            std::vector<uint8_t> &out,
                            Backend *memory = nullptr) {
  const int n = g.size();
  const int64_t es = dtypeSize(c.dtype);
  const int64_t inBytes = inputElems(c, n) * es;
  const int64_t outBytes = outputElems(c, n) * es;
  CaseMemory buffers(memory);
  uint8_t *send = nullptr, *recv = nullptr;
  if (c.inPlace) {
    MD_ASSIGN_OR_RETURN(uint8_t *buf,
                        buffers.poisoned(std::max(inBytes, outBytes)));
    send = buf + (c.kind == Kind::allGather ? g.index * c.count * es : 0);
    recv = buf + (c.kind == Kind::reduceScatter ? g.index * c.count * es : 0);
  } else {
    MD_ASSIGN_OR_RETURN(send, buffers.poisoned(inBytes));
    MD_ASSIGN_OR_RETURN(recv, buffers.poisoned(outBytes));
  }
  MD_RETURN_IF_ERROR(buffers.copy(send, input.data(), inBytes));
  absl::Status s;
  switch (c.kind) {
  case Kind::allReduce:
    s = comm.allReduce(send, recv, c.count, c.dtype, c.op, g);
    break;
  case Kind::reduceScatter:
    s = comm.reduceScatter(send, recv, c.count, c.dtype, c.op, g);
    break;
  case Kind::allGather:
    s = comm.allGather(send, recv, c.count, c.dtype, g);
    break;
  case Kind::broadcast:
    // Only the root's send buffer matters; the others pass none.
    s = comm.broadcast(g.index == c.root || c.inPlace ? send : nullptr, recv,
                       c.count, c.dtype, c.root, g);
    break;
  }
  MD_RETURN_IF_ERROR(s);
  MD_RETURN_IF_ERROR(buffers.finish());
  out.assign(outBytes, 0);
  return buffers.copy(out.data(), recv, outBytes);
}

/// Every dtype x every reduction for all-reduce and reduce-scatter, and the
/// data movers, on an uneven n = 37 padded to n * ceil(37 / n); then a few
/// in-place cases and one that needs hundreds of chunks.
inline std::vector<Case> conformanceCases(int n) {
  const int64_t shard = (37 + n - 1) / n;
  std::vector<Case> cases;
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max,
                        ReduceOp::min, ReduceOp::prod}) {
      cases.push_back({Kind::allReduce, t, op, 37, 0, false});
      cases.push_back({Kind::reduceScatter, t, op, shard, 0, false});
    }
    cases.push_back({Kind::allGather, t, ReduceOp::sum, shard, 0, false});
    cases.push_back({Kind::broadcast, t, ReduceOp::sum, 37, n - 1, false});
  }
  cases.push_back({Kind::allReduce, DType::bf16, ReduceOp::sum, 37, 0, true});
  cases.push_back({Kind::reduceScatter, DType::f32, ReduceOp::sum, shard, 0, true});
  cases.push_back({Kind::allGather, DType::f16, ReduceOp::sum, shard, 0, true});
  cases.push_back({Kind::broadcast, DType::i64, ReduceOp::sum, 37, 0, true});
  cases.push_back({Kind::allReduce, DType::f32, ReduceOp::sum, 0, 0, false});
  cases.push_back({Kind::allReduce, DType::f32, ReduceOp::sum, 5000, 0, false});
  return cases;
}

/// Runs `cases` on the world group, case i with makeInput(i), its buffers
/// as runCase's; the results are concatenated into `out` (a rank's
/// Shared::Rank::data).
inline absl::Status runCases(Comm &comm, const std::vector<Case> &cases,
                             uint8_t *out, Backend *memory = nullptr) {
  auto g = comm.group(GroupKind::world);
  if (!g.ok())
    return g.status();
  int64_t offset = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case &c = cases[i];
    std::vector<uint8_t> result;
    absl::Status s =
        runCase(comm, *g, c, makeInput(c, int(i), comm.rank(), g->size()),
                result, memory);
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat(describe(c), " over ",
                                                 g->str(), ": ", s.message()));
    if (offset + int64_t(result.size()) > Shared::kDataBytes)
      return absl::ResourceExhaustedError(
          "the results do not fit the shared record");
    if (!result.empty())
      std::memcpy(out + offset, result.data(), result.size());
    offset += int64_t(result.size());
  }
  return absl::OkStatus();
}

/// Checks what runCases(`cases`) left in the record of every rank of
/// `world`, bit for bit against the reference computed by `reduce`.
inline void checkCases(Ranks &ranks, int world, const std::vector<Case> &cases,
                       Reducer reduce = referenceReduceAll) {
  int64_t offset = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case &c = cases[i];
    SCOPED_TRACE(absl::StrFormat("case %d: %s", i, describe(c)));
    std::vector<std::vector<uint8_t>> inputs;
    for (int r = 0; r < world; ++r)
      inputs.push_back(makeInput(c, int(i), r, world));
    const int64_t bytes = outputElems(c, world) * dtypeSize(c.dtype);
    for (int r = 0; r < world; ++r) {
      std::vector<uint8_t> got(ranks.rank(r).data + offset,
                               ranks.rank(r).data + offset + bytes);
      ASSERT_EQ(difference(got, expected(c, r, inputs, reduce)), "")
          << "rank " << r;
    }
    offset += bytes;
  }
}

/// runCases and checkCases for the conformance cases of `world` ranks.
inline absl::Status runConformance(Comm &comm, int world, uint8_t *out) {
  return runCases(comm, conformanceCases(world), out);
}
inline void checkConformance(Ranks &ranks, int world,
                             Reducer reduce = referenceReduceAll) {
  checkCases(ranks, world, conformanceCases(world), reduce);
}

/// The world sizes the conformance suites run at, and their test names
/// ("W3").
inline auto worldSizes() { return ::testing::Values(1, 2, 3, 4); }
inline std::string worldSizeName(const ::testing::TestParamInfo<int> &info) {
  return absl::StrFormat("W%d", info.param);
}

//===----------------------------------------------------------------------===//
// Sub-groups of the 2-D mesh
//===----------------------------------------------------------------------===//

struct MeshCase {
  int world, shard;
};
inline void PrintTo(const MeshCase &c, std::ostream *os) {
  *os << "world " << c.world << ", shard groups of " << c.shard;
}

/// The meshes the sub-group suites run on, and their test names ("W4S2").
inline auto meshCases() {
  return ::testing::Values(MeshCase{4, 2}, MeshCase{6, 3}, MeshCase{4, 1},
                           MeshCase{3, 3});
}
inline std::string meshName(const ::testing::TestParamInfo<MeshCase> &info) {
  return absl::StrFormat("W%dS%d", info.param.world, info.param.shard);
}

/// HSDP's pattern: reduce-scatter in the shard group, all-reduce of the
/// shard across replicas, all-gather in the shard group, then a barrier and
/// an all-reduce of the world, and a broadcast across replicas.
struct MeshPattern {
  int world, shardSize;
  Case rs{Kind::reduceScatter, DType::f32, ReduceOp::sum, 5, 0, false};
  Case ar{Kind::allReduce, DType::f32, ReduceOp::avg, 5, 0, false};
  Case ag{Kind::allGather, DType::bf16, ReduceOp::sum, 5, 0, false};
  Case arw{Kind::allReduce, DType::i64, ReduceOp::max, 3, 0, false};
  Case bc{Kind::broadcast, DType::f16, ReduceOp::sum, 4, 0, false};

  MeshPattern(int world, int shardSize) : world(world), shardSize(shardSize) {
    bc.root = world / shardSize - 1;
  }

  /// Runs the pattern on this rank; the results land in `out`.
  absl::Status run(Comm &comm, uint8_t *out) const {
    const int rank = comm.rank();
    const int shardN = shardSize, replN = world / shardSize;
    auto shard = comm.group(GroupKind::shard);
    auto repl = comm.group(GroupKind::replicate);
    auto all = comm.group(GroupKind::world);
    if (!shard.ok() || !repl.ok() || !all.ok())
      return absl::InternalError("no groups");
    std::vector<uint8_t> r1, r2, r3, r4, r5;
    absl::Status s =
        runCase(comm, *shard, rs, makeInput(rs, 1, rank, shardN), r1);
    if (s.ok())
      s = runCase(comm, *repl, ar, makeInput(ar, 2, rank, replN), r2);
    if (s.ok())
      s = runCase(comm, *shard, ag, makeInput(ag, 3, rank, shardN), r3);
    if (s.ok())
      s = comm.barrier(*all);
    if (s.ok())
      s = runCase(comm, *all, arw, makeInput(arw, 4, rank, world), r4);
    if (s.ok())
      s = runCase(comm, *repl, bc, makeInput(bc, 5, rank, replN), r5);
    if (!s.ok())
      return s;
    for (auto *r : {&r1, &r2, &r3, &r4, &r5}) {
      std::memcpy(out, r->data(), r->size());
      out += r->size();
    }
    return absl::OkStatus();
  }

  /// What `rank` must have got.
  std::vector<uint8_t> expectedFor(int rank,
                                   Reducer reduce = referenceReduceAll) const {
    Mesh mesh{world, shardSize};
    Group shard = *meshGroup(mesh, GroupKind::shard, rank);
    Group repl = *meshGroup(mesh, GroupKind::replicate, rank);
    Group all = *meshGroup(mesh, GroupKind::world, rank);
    auto inputsOf = [](const Case &c, int index, const Group &g) {
      std::vector<std::vector<uint8_t>> in;
      for (int member : g.ranks)
        in.push_back(makeInput(c, index, member, g.size()));
      return in;
    };
    std::vector<uint8_t> want;
    for (auto part :
         {expected(rs, shard.index, inputsOf(rs, 1, shard), reduce),
          expected(ar, repl.index, inputsOf(ar, 2, repl), reduce),
          expected(ag, shard.index, inputsOf(ag, 3, shard), reduce),
          expected(arw, all.index, inputsOf(arw, 4, all), reduce),
          expected(bc, repl.index, inputsOf(bc, 5, repl), reduce)})
      want.insert(want.end(), part.begin(), part.end());
    return want;
  }

  /// Checks what run() left in every rank's record.
  void check(Ranks &ranks, Reducer reduce = referenceReduceAll) const {
    for (int rank = 0; rank < world; ++rank) {
      SCOPED_TRACE(rank);
      std::vector<uint8_t> want = expectedFor(rank, reduce);
      EXPECT_EQ(std::memcmp(ranks.rank(rank).data, want.data(), want.size()),
                0);
    }
  }
};

} // namespace md::commtest

#endif // MD_TEST_UNIT_COMMTESTUTIL_H
