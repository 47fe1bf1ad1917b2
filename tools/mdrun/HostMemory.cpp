//===- HostMemory.cpp - does a node's share of a job fit in its memory ---===//

#include "tools/mdrun/HostMemory.h"

#include <algorithm>

#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "runtime/plan/MemoryFormat.h"

namespace md::mdrun {

absl::StatusOr<int64_t> ReadMemAvailable(const std::string &meminfoPath) {
  std::ifstream in(meminfoPath);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat("cannot read ", meminfoPath, " for MemAvailable"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "MemAvailable:"))
      continue;
    // "MemAvailable:   24129408 kB"
    std::vector<absl::string_view> words =
        absl::StrSplit(rest, ' ', absl::SkipWhitespace());
    int64_t kib = 0;
    if (words.size() != 2 || words[1] != "kB" ||
        !absl::SimpleAtoi(words[0], &kib) || kib < 0 || kib > INT64_MAX / 1024)
      return absl::InvalidArgumentError(absl::StrCat(
          meminfoPath, ": cannot read the MemAvailable line '", line, "'"));
    return kib * 1024;
  }
  return absl::NotFoundError(
      absl::StrCat(meminfoPath, " has no MemAvailable line"));
}

namespace {

/// OK when `need` fits; else FailedPrecondition with the numbers: `what`
/// ("host memory") is needed, and `has` ("this node has 22.6 GiB available
/// (MemAvailable)") says what there is; `fewer` whom to start fewer of.
absl::Status checkFits(const NodeMemoryNeed &need, int64_t availableBytes,
                       const std::string &what, const std::string &has,
                       const char *fewer) {
  const int64_t peak = need.perRank.peak;
  int64_t total = 0;
  const bool overflow = __builtin_mul_overflow(peak, need.ranksOnNode, &total);
  if (!overflow && total <= availableBytes)
    return absl::OkStatus();
  std::string message = absl::StrFormat(
      "the plan needs %d rank%s x %s = %s of %s at its peak, but %s",
      need.ranksOnNode, need.ranksOnNode == 1 ? "" : "s", plan::BytesText(peak),
      overflow ? std::string("more than 8 EiB") : plan::BytesText(total), what,
      has);
  absl::StrAppend(&message, "; per rank:");
  const char *sep = " ";
  for (const plan::MemoryRow &row : plan::MemoryRows(need.perRank)) {
    if (std::string(row.name) == "peak")
      continue;
    absl::StrAppend(&message, sep, row.name, " ", plan::BytesText(row.bytes));
    sep = ", ";
  }
  if (!need.largest.empty()) {
    absl::StrAppend(&message, "; the largest buffers:");
    sep = " ";
    for (const BufferBytes &b : need.largest) {
      absl::StrAppend(&message, sep, "'", b.name, "' ",
                      plan::BytesText(b.bytes));
      sep = ", ";
    }
  }
  absl::StrAppend(&message, ". Start fewer ranks ", fewer,
                  ", lower micro_batch, shard more (fsdp-full) or checkpoint "
                  "activations; --skip-memory-check starts it anyway");
  return absl::FailedPreconditionError(message);
}

} // namespace

absl::Status CheckHostMemory(const NodeMemoryNeed &need,
                             int64_t availableBytes) {
  return checkFits(need, availableBytes, "host memory",
                   absl::StrFormat("this node has %s available (MemAvailable)",
                                   plan::BytesText(availableBytes)),
                   "on this node");
}

absl::Status CheckDeviceMemory(const NodeMemoryNeed &need,
                               const std::string &device, int64_t freeBytes,
                               int64_t totalBytes) {
  return checkFits(need, freeBytes, absl::StrCat("GPU memory on ", device),
                   absl::StrFormat("it has %s free of %s (cudaMemGetInfo)",
                                   plan::BytesText(freeBytes),
                                   plan::BytesText(totalBytes)),
                   "per GPU");
}

absl::Status CheckCpuRankCount(int64_t ranks, int cores) {
  cores = std::max(cores, 1);
  const int64_t most = int64_t{kMaxCpuRanksPerCore} * cores;
  if (ranks <= most)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%d ranks on this node's %d core%s is more than %d per core: each rank "
      "is a process with its own copy of the model's state, all of them "
      "taking turns on %d core%s; start at most %d ranks on this node, or "
      "spread them over nodes (--nnodes)",
      ranks, cores, cores == 1 ? "" : "s", kMaxCpuRanksPerCore, cores,
      cores == 1 ? "" : "s", most));
}

absl::Status CheckNodeMemory(const NodeMemoryNeed &need,
                             const std::string &meminfoPath) {
  absl::StatusOr<int64_t> available = ReadMemAvailable(meminfoPath);
  if (!available.ok())
    return absl::Status(
        available.status().code(),
        absl::StrCat("cannot check that the ranks fit in memory: ",
                     available.status().message(),
                     " (--skip-memory-check starts them without the check)"));
  return CheckHostMemory(need, *available);
}

} // namespace md::mdrun
