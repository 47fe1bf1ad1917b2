//===- collective_bench.cpp - md's comms timed like nccl-tests ------------===//
//
//   md-collective-bench --comm NAME [--ranks N] [--min_bytes B]
//                       [--max_bytes B] [--collectives LIST] [--iters N]
//                       [--warmup N] [--port P] [--timeout S]
//
// Forks N ranks (default 2) on this machine that make the comm, any of the
// runtime's registry (runtime/rank/Registry.h: shm, gloo, nccl,
// shm-staged) on its backend, as mdrun does, and run each collective
// (all_reduce, all_gather, reduce_scatter, broadcast; f32, sum, root 0)
// at every power-of-two size from --min_bytes (default 8) to
// --max_bytes (default 256 MiB). Sizes are nccl-tests': the whole buffer,
// all_gather's output and reduce_scatter's input. `memcpy` in --collectives
// adds the machine's copy bandwidth as the ranks see it, timed the same
// way: every rank copies its send buffer of the size into its receive
// buffer at the same time (std::memcpy, or the device's copy on GPUs), so
// that a comm's busbw can be read against it (bench/collectives.sh prints
// the ratio). Per size the ranks warm
// up, meet in a barrier and time --iters calls (default: as many as take
// about 64 MiB of traffic, 5 to 200); a size's time is the slowest rank's
// mean. Bandwidths follow nccl-tests' PERFORMANCE.md: algbw = size / time,
// busbw = algbw x 2(n-1)/n for all_reduce, x (n-1)/n for all_gather and
// reduce_scatter, x 1 for broadcast and memcpy.
//
// Every result is checked: after the timed calls each rank runs the
// collective once more on inputs whose sums are exact in f32 and compares
// every element with the value it must have. A wrong element makes the
// row's check "wrong" and the exit status 1.
//
// A comm of the GPUs needs the CUDA build and a usable GPU (nccl: one per
// rank); without them the bench says why and exits 77 (skipped). Output:
// '#' comment lines, then one line per collective and size:
//
//   COMM COLLECTIVE RANKS BYTES COUNT ITERS TIME_US ALGBW_GBS BUSBW_GBS CHECK
//
//===----------------------------------------------------------------------===//

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/core/Backend.h"
#include "runtime/core/Comm.h"
#include "runtime/core/Status.h"
#include "runtime/net/Socket.h"
#include "runtime/rank/Builtin.h"
#include "runtime/rank/Choice.h"
#include "runtime/rank/Rank.h"

ABSL_FLAG(std::string, comm, "gloo",
          "the comm, by the runtime's name: shm, gloo, nccl, ...");
ABSL_FLAG(int, ranks, 2, "ranks to fork on this machine");
ABSL_FLAG(int64_t, min_bytes, 8, "the smallest size, in bytes");
ABSL_FLAG(int64_t, max_bytes, int64_t(256) << 20,
          "the largest size, in bytes (caps the run)");
ABSL_FLAG(std::string, collectives,
          "all_reduce,all_gather,reduce_scatter,broadcast",
          "which collectives, comma-separated");
ABSL_FLAG(int, iters, 0, "timed calls per size (0: by size, 5 to 200)");
ABSL_FLAG(int, warmup, 3, "untimed calls per size before the timed ones");
ABSL_FLAG(int, port, 0, "the rendezvous port (0: a free one)");
ABSL_FLAG(double, timeout, 120, "how long a collective may wait, seconds");

namespace md::bench {
namespace {

using namespace md::runtime;
using Clock = std::chrono::steady_clock;

constexpr int kMaxRanks = 16;
constexpr int kMaxRows = 512;

/// The collectives the bench measures: all of Comm's but the barrier, which
/// moves no data.
constexpr Collective kMeasured[] = {
    Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
    Collective::broadcast};

/// One collective at one size, as every rank runs it; `copy` is the memcpy
/// row instead (kind is then unused).
struct Row {
  Collective kind;
  bool copy;
  int64_t bytes; // nccl-tests' size: the whole buffer
  int64_t count; // the Comm call's count (per rank for gather/scatter)
  int iters;
};

const char *rowName(const Row &row) {
  return row.copy ? "memcpy" : collectiveName(row.kind);
}

/// nccl-tests' bus bandwidth factor at n ranks.
double busFactor(const Row &row, int n) {
  if (row.copy)
    return 1.0;
  switch (row.kind) {
  case Collective::all_reduce:
    return 2.0 * (n - 1) / n;
  case Collective::all_gather:
  case Collective::reduce_scatter:
    return double(n - 1) / n;
  case Collective::broadcast:
  case Collective::barrier: // not measured (kMeasured)
    return 1.0;
  }
  return 1.0;
}

/// What the children report to the parent, in shared memory.
struct Report {
  struct PerRank {
    double seconds[kMaxRows]; // mean per call
    int wrong[kMaxRows];      // elements that differ
    char error[1024];
  } ranks[kMaxRanks];
};

/// Element i of rank r's input: small integers, so every sum is exact in
/// f32 whatever the order of its terms.
float inputValue(int r, int64_t i) { return float(r + 1 + i % 13); }

int64_t sendElems(const Row &row, int n) {
  return !row.copy && row.kind == Collective::reduce_scatter ? row.count * n
                                                             : row.count;
}
int64_t recvElems(const Row &row, int n) {
  return !row.copy && row.kind == Collective::all_gather ? row.count * n
                                                         : row.count;
}

/// Element j of rank r's result.
float expectedValue(const Row &row, int r, int n, int64_t j) {
  if (row.copy)
    return inputValue(r, j);
  switch (row.kind) {
  case Collective::all_reduce: {
    float s = 0;
    for (int q = 0; q < n; ++q)
      s += inputValue(q, j);
    return s;
  }
  case Collective::reduce_scatter: {
    float s = 0;
    for (int q = 0; q < n; ++q)
      s += inputValue(q, r * row.count + j);
    return s;
  }
  case Collective::all_gather:
    return inputValue(int(j / row.count), j % row.count);
  case Collective::broadcast:
    return inputValue(0, j);
  case Collective::barrier: // not measured (kMeasured)
    break;
  }
  return 0;
}

/// Host or device memory for the buffers, with the comm's stream.
class Memory {
public:
  explicit Memory(Backend *device) : device_(device) {}
  absl::StatusOr<void *> allocate(int64_t bytes) {
    if (device_ == nullptr) {
      host_.emplace_back(std::max<int64_t>(bytes, 4));
      return static_cast<void *>(host_.back().data());
    }
    absl::StatusOr<Buffer> b = device_->allocate(std::max<int64_t>(bytes, 4));
    if (!b.ok())
      return b.status();
    buffers_.push_back(std::move(*b));
    return buffers_.back().data();
  }
  absl::Status copy(void *dst, const void *src, int64_t bytes) {
    if (device_ != nullptr)
      return device_->copy(dst, src, bytes, kCommStream);
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status sync() {
    return device_ != nullptr ? device_->synchronize(kCommStream)
                              : absl::OkStatus();
  }

private:
  Backend *device_;
  std::vector<std::vector<float>> host_;
  std::vector<Buffer> buffers_;
};

absl::Status call(Comm &comm, Memory &memory, const Group &g, const Row &row,
                  const void *send, void *recv) {
  if (row.copy)
    return memory.copy(recv, send, row.bytes);
  switch (row.kind) {
  case Collective::all_reduce:
    return comm.allReduce(send, recv, row.count, DType::f32, ReduceOp::sum, g);
  case Collective::all_gather:
    return comm.allGather(send, recv, row.count, DType::f32, g);
  case Collective::reduce_scatter:
    return comm.reduceScatter(send, recv, row.count, DType::f32, ReduceOp::sum,
                              g);
  case Collective::broadcast:
    return comm.broadcast(send, recv, row.count, DType::f32, 0, g);
  case Collective::barrier:
    return comm.barrier(g);
  }
  return absl::OkStatus();
}

std::chrono::milliseconds timeoutMs() {
  return std::chrono::milliseconds(
      int64_t(absl::GetFlag(FLAGS_timeout) * 1000));
}

/// Exit status 77: the comm cannot run here (nccl without a GPU per rank).
struct Skip {
  std::string why;
};

/// The comm `kind` of the runtime's registry, or why the bench cannot run
/// it (exit 2, or a skip).
absl::StatusOr<const rank::CommInfo *> commOf(const std::string &kind,
                                              Skip *skip) {
  const rank::Registry &registry = rank::BuiltinRegistry();
  if (const rank::CommInfo *comm = registry.comm(kind))
    return comm;
#if !MD_ENABLE_CUDA
  if (kind == "nccl") {
    skip->why = "this md-collective-bench was built without CUDA";
    return absl::UnavailableError(skip->why);
  }
#endif
  (void)skip;
  std::vector<std::string> names;
  for (const rank::CommInfo *comm : registry.comms())
    names.push_back(comm->name);
  return absl::InvalidArgumentError(
      absl::StrCat("--comm ", kind, ": expected ", absl::StrJoin(names, ", ")));
}

/// Rank `rank`'s backend and comm, made through the runtime's registry as
/// mdrun makes them: the comm's backend (the first it runs on), on device
/// rank % GPUs of a GPU backend, where the comm's needs are met.
absl::StatusOr<rank::Rank> makeRank(const std::string &kind, int rank, int n,
                                    int port, const std::string &job,
                                    Skip *skip) {
  const rank::Registry &registry = rank::BuiltinRegistry();
  MD_ASSIGN_OR_RETURN(const rank::CommInfo *comm, commOf(kind, skip));
  rank::RankSpec spec;
  spec.backend = comm->needs.backends.front();
  spec.comm = comm->name;
  const rank::BackendInfo *backend = registry.backend(spec.backend);
  if (backend != nullptr && backend->probe) {
    const rank::DeviceProbe probe = backend->probe();
    const bool perRank = comm->needs.devices == rank::DeviceUse::OnePerRank;
    if (probe.count == 0 || (perRank && probe.count < n)) {
      skip->why = probe.count == 0
                      ? probe.unusableReason
                      : absl::StrFormat("%d ranks need %d GPUs, found %d", n, n,
                                        probe.count);
      return absl::UnavailableError(skip->why);
    }
    spec.device = rank % probe.count;
  }
  spec.rank = rank;
  spec.worldSize = n;
  spec.localRank = rank;
  spec.localWorldSize = n;
  spec.shardSize = n;
  spec.threads = 1;
  spec.jobId = job;
  spec.masterPort = port;
  // Keeps another job on the port out.
  spec.fingerprint = absl::StrCat("md-collective-bench ", kind);
  spec.timeout = timeoutMs();
  return rank::MakeRank(registry, spec);
}

/// Rank `rank`'s whole run; its times and checks land in `out`.
absl::Status runRank(const std::string &kind, int rank, int n, int port,
                     const std::string &job, const std::vector<Row> &rows,
                     Report::PerRank &out, Skip *skip) {
  absl::StatusOr<rank::Rank> rc = makeRank(kind, rank, n, port, job, skip);
  if (!rc.ok())
    return rc.status();
  Comm &comm = *rc->comm;
  absl::StatusOr<Group> g = comm.group(GroupKind::world);
  if (!g.ok())
    return g.status();
  int64_t maxSend = 0, maxRecv = 0;
  for (const Row &row : rows) {
    maxSend = std::max(maxSend, sendElems(row, n));
    maxRecv = std::max(maxRecv, recvElems(row, n));
  }
  // Host buffers (and std::memcpy) on the host backend, the device's
  // memory on a GPU backend.
  const rank::BackendInfo *backend =
      rank::BuiltinRegistry().backend(rc->backend->name());
  Memory memory(backend != nullptr && backend->probe ? rc->backend.get()
                                                     : nullptr);
  absl::StatusOr<void *> send = memory.allocate(maxSend * 4);
  if (!send.ok())
    return send.status();
  absl::StatusOr<void *> recv = memory.allocate(maxRecv * 4);
  if (!recv.ok())
    return recv.status();
  std::vector<float> host(std::max(maxSend, maxRecv));
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row &row = rows[i];
    const int64_t in = sendElems(row, n), outElems = recvElems(row, n);
    for (int64_t j = 0; j < in; ++j)
      host[j] = inputValue(rank, j);
    if (absl::Status s = memory.copy(*send, host.data(), in * 4); !s.ok())
      return s;
    for (int w = 0; w < absl::GetFlag(FLAGS_warmup); ++w)
      if (absl::Status s = call(comm, memory, *g, row, *send, *recv); !s.ok())
        return s;
    if (absl::Status s = memory.sync(); !s.ok())
      return s;
    if (absl::Status s = comm.barrier(*g); !s.ok())
      return s;
    const auto start = Clock::now();
    for (int it = 0; it < row.iters; ++it)
      if (absl::Status s = call(comm, memory, *g, row, *send, *recv); !s.ok())
        return s;
    if (absl::Status s = memory.sync(); !s.ok())
      return s;
    out.seconds[i] =
        std::chrono::duration<double>(Clock::now() - start).count() / row.iters;
    // The check: a fresh output, one more call, every element.
    std::fill(host.begin(), host.begin() + outElems, -1.0f);
    if (absl::Status s = memory.copy(*recv, host.data(), outElems * 4); !s.ok())
      return s;
    if (absl::Status s = call(comm, memory, *g, row, *send, *recv); !s.ok())
      return s;
    if (absl::Status s = memory.copy(host.data(), *recv, outElems * 4); !s.ok())
      return s;
    if (absl::Status s = memory.sync(); !s.ok())
      return s;
    int wrong = 0;
    for (int64_t j = 0; j < outElems; ++j)
      wrong += host[j] != expectedValue(row, rank, n, j);
    out.wrong[i] = wrong;
  }
  return absl::OkStatus();
}

/// --collectives: each a collective, or memcpy (copy = true).
std::vector<std::pair<Collective, bool>> parseKinds(const std::string &list) {
  std::vector<std::pair<Collective, bool>> kinds;
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    bool found = false;
    if (name == "memcpy") {
      kinds.push_back({Collective::broadcast, true});
      found = true;
    }
    for (Collective k : kMeasured)
      if (name == collectiveName(k)) {
        kinds.push_back({k, false});
        found = true;
      }
    if (!found) {
      std::fprintf(stderr,
                   "md-collective-bench: --collectives: unknown '%s' "
                   "(all_reduce, all_gather, reduce_scatter, broadcast, "
                   "memcpy)\n",
                   std::string(name).c_str());
      std::exit(2);
    }
  }
  return kinds;
}

int freePort() {
  absl::StatusOr<net::Listener> l = net::Listener::listen(0);
  return l.ok() ? l->port() : 29500;
}

int run() {
  const std::string kind = absl::GetFlag(FLAGS_comm);
  const int n = absl::GetFlag(FLAGS_ranks);
  const int64_t minBytes = absl::GetFlag(FLAGS_min_bytes);
  const int64_t maxBytes = absl::GetFlag(FLAGS_max_bytes);
  if (n < 1 || n > kMaxRanks || minBytes < 4 || maxBytes < minBytes ||
      absl::GetFlag(FLAGS_warmup) < 0 || absl::GetFlag(FLAGS_iters) < 0 ||
      absl::GetFlag(FLAGS_timeout) <= 0) {
    std::fprintf(stderr,
                 "md-collective-bench: need 1 <= --ranks <= %d, 4 <= "
                 "--min_bytes <= --max_bytes, --iters, --warmup >= 0 and a "
                 "positive --timeout\n",
                 kMaxRanks);
    return 2;
  }
  std::vector<Row> rows;
  for (auto [k, copy] : parseKinds(absl::GetFlag(FLAGS_collectives)))
    for (int64_t bytes = minBytes; bytes <= maxBytes; bytes *= 2) {
      Row row{k, copy, 0, 0, 0};
      // The per-rank count of the gather and the scatter is a whole number
      // of elements: their sizes round down to a multiple of 4n.
      const int64_t elems = bytes / 4;
      const bool perRank =
          !copy &&
          (k == Collective::all_gather || k == Collective::reduce_scatter);
      row.count = perRank ? std::max<int64_t>(1, elems / n)
                          : std::max<int64_t>(1, elems);
      row.bytes = 4 * (perRank ? row.count * n : row.count);
      row.iters =
          absl::GetFlag(FLAGS_iters) > 0
              ? absl::GetFlag(FLAGS_iters)
              : int(std::clamp<int64_t>((int64_t(64) << 20) / bytes, 5, 200));
      rows.push_back(row);
    }
  if (rows.size() > size_t(kMaxRows)) {
    std::fprintf(stderr, "md-collective-bench: more than %d rows\n", kMaxRows);
    return 2;
  }

  void *p = mmap(nullptr, sizeof(Report), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("md-collective-bench: mmap");
    return 1;
  }
  auto *report = static_cast<Report *>(p);
  std::memset(report, 0, sizeof(Report));
  const int port =
      absl::GetFlag(FLAGS_port) > 0 ? absl::GetFlag(FLAGS_port) : freePort();
  const std::string job = absl::StrFormat("bench-%d", getpid());
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      Skip skip;
      absl::Status s =
          runRank(kind, r, n, port, job, rows, report->ranks[r], &skip);
      if (!s.ok())
        std::snprintf(report->ranks[r].error, sizeof report->ranks[r].error,
                      "%s", std::string(s.message()).c_str());
      std::fflush(nullptr);
      _exit(!skip.why.empty() ? 77 : s.ok() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  bool failed = false, skipped = false;
  for (int r = 0; r < n; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    if (code == 77)
      skipped = true;
    else if (code != 0)
      failed = true;
  }
  if (skipped) {
    std::printf("# %s: skipped: %s\n", kind.c_str(), report->ranks[0].error);
    return 77;
  }
  if (failed) {
    for (int r = 0; r < n; ++r)
      if (report->ranks[r].error[0] != '\0')
        std::fprintf(stderr, "md-collective-bench: rank %d: %s\n", r,
                     report->ranks[r].error);
    return 1;
  }
  std::printf("# md-collective-bench: comm %s, %d ranks on this machine, f32, "
              "sum, root 0; time is the slowest rank's mean\n",
              kind.c_str(), n);
  std::printf("# comm collective ranks bytes count iters time_us algbw_GB/s "
              "busbw_GB/s check\n");
  int wrongRows = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row &row = rows[i];
    double t = 0;
    int wrong = 0;
    for (int r = 0; r < n; ++r) {
      t = std::max(t, report->ranks[r].seconds[i]);
      wrong += report->ranks[r].wrong[i];
    }
    const double algbw = t > 0 ? row.bytes / t / 1e9 : 0;
    wrongRows += wrong > 0;
    std::printf("%s %s %d %lld %lld %d %.2f %.3f %.3f %s\n", kind.c_str(),
                rowName(row), n, static_cast<long long>(row.bytes),
                static_cast<long long>(row.count), row.iters, t * 1e6, algbw,
                algbw * busFactor(row, n),
                wrong > 0 ? absl::StrCat("wrong(", wrong, ")").c_str() : "ok");
  }
  if (wrongRows > 0) {
    std::fprintf(stderr, "md-collective-bench: %d row(s) with wrong results\n",
                 wrongRows);
    return 1;
  }
  return 0;
}

} // namespace
} // namespace md::bench

int main(int argc, char **argv) {
  absl::SetProgramUsageMessage(
      "times md's comms like nccl-tests: md-collective-bench --comm "
      "shm|gloo|nccl [--ranks N] [--max_bytes B] ...");
  std::vector<char *> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "md-collective-bench: unexpected argument '%s'\n",
                 rest[1]);
    return 2;
  }
  return md::bench::run();
}
