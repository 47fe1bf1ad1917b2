//===- HostMemory.h - does a node's share of a job fit in its memory -*- C++
//-*-===//
//
// Before it starts any rank on the CPU backend, the launcher compares what
// the plan predicts (the per-rank peak of runtime/plan/Memory.h, times the
// ranks it places on this node) with the memory the node has available, and
// refuses a job that cannot fit with the numbers and the buffers that make
// it big, instead of letting the kernel's OOM killer end it a minute later
// as "killed by signal 9". --skip-memory-check turns the check off.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_MDRUN_HOSTMEMORY_H
#define MD_TOOLS_MDRUN_HOSTMEMORY_H

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/plan/Memory.h"

namespace md::mdrun {

/// One plan buffer and the bytes it takes on a rank.
struct BufferBytes {
  std::string name;
  int64_t bytes = 0;
};

/// What this node's ranks need, as the plan predicts it.
struct NodeMemoryNeed {
  plan::MemoryTotals perRank;
  int64_t ranksOnNode = 1;
  /// The largest buffers of one rank, largest first (a few).
  std::vector<BufferBytes> largest;
};

/// MemAvailable of a /proc/meminfo-format file, in bytes.
absl::StatusOr<int64_t>
ReadMemAvailable(const std::string &meminfoPath = "/proc/meminfo");

/// OK when `need` fits in `availableBytes`; else FailedPrecondition saying
/// how much is needed, how much is there, the per-rank categories, the
/// largest buffers and what to change.
absl::Status CheckHostMemory(const NodeMemoryNeed &need,
                             int64_t availableBytes);

/// The same for the ranks that share one GPU (`need.ranksOnNode` of them):
/// OK when they fit in the `freeBytes` cudaMemGetInfo reported for `device`
/// ("cuda:0 (NVIDIA H100 80GB HBM3)").
absl::Status CheckDeviceMemory(const NodeMemoryNeed &need,
                               const std::string &device, int64_t freeBytes,
                               int64_t totalBytes);

/// Ranks per core beyond which a CPU job is refused.
inline constexpr int kMaxCpuRanksPerCore = 16;

/// OK when `ranks` CPU-backend ranks on a node of `cores` cores (its
/// affinity mask) are at most kMaxCpuRanksPerCore per core; else
/// InvalidArgument with the numbers. A thousand ranks on two cores would
/// start hundreds of processes before something gives out.
absl::Status CheckCpuRankCount(int64_t ranks, int cores);

/// Reads MemAvailable from `meminfoPath` and checks `need` against it; a file
/// that cannot be read is an error that says how to start without the check.
absl::Status CheckNodeMemory(const NodeMemoryNeed &need,
                             const std::string &meminfoPath = "/proc/meminfo");

} // namespace md::mdrun

#endif // MD_TOOLS_MDRUN_HOSTMEMORY_H
