//===- CpuBackend.cpp - memory, streams and threads of the CPU backend ----===//
//
// The kernels live in one file per op family (Matmul.cpp, Elementwise.cpp,
// Norms.cpp, Softmax.cpp, Reduce.cpp, Layout.cpp, Optimizer.cpp). Here:
// host memory, the stream/event API (every call runs to completion before
// it returns, so events have nothing to wait for) and the BLAS threads.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuBackend.h"

#include <sched.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_format.h"
#include "runtime/core/BackendChecks.h"
#include "runtime/core/Status.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/VecMath.h"

namespace md::cpu {

using namespace md::runtime;

CpuBackend::CpuBackend(int threads) {
  // A bad count cannot fail a constructor; fall back to every core.
  if (!setThreads(threads > 0 ? threads : usableCores()).ok())
    (void)setThreads(usableCores());
}

int CpuBackend::usableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0)
      return n;
  }
  return 1;
}

int CpuBackend::threadsPerRank(int ranksOnMachine) {
  if (ranksOnMachine < 1)
    ranksOnMachine = 1;
  int n = usableCores() / ranksOnMachine;
  return n < 1 ? 1 : n;
}

std::string CpuBackend::isaReport() {
  const GemmPaths &g = gemmPaths();
  return absl::StrFormat("isa %s; vector math %s; GEMM %s", g.isa,
                         VecMathVariant(), g.str());
}

std::vector<std::string> CpuBackend::isaWarnings() {
  std::vector<std::string> out;
  const GemmPaths &g = gemmPaths();
  for (const GemmRoute *r : {&g.f32, &g.bf16, &g.f16})
    if (!r->warning.empty())
      out.push_back(r->warning);
  return out;
}

absl::Status CpuBackend::setThreads(int threads) {
  if (threads < 1)
    return absl::InvalidArgumentError(
        absl::StrFormat("cpu backend: thread count must be >= 1, got %d",
                        threads));
  setBlasThreads(threads);
  threads_ = threads;
  return absl::OkStatus();
}

absl::StatusOr<Buffer> CpuBackend::allocate(int64_t bytes) {
  MD_ASSIGN_OR_RETURN(const int64_t rounded,
                      allocationBytes("cpu backend", bytes));
  void *p = std::aligned_alloc(kAllocAlignment, static_cast<size_t>(rounded));
  if (p == nullptr)
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cpu backend: out of host memory allocating %d bytes", bytes));
  std::memset(p, 0, static_cast<size_t>(rounded));
  return Buffer(p, bytes, [](void *q) { std::free(q); });
}

absl::Status CpuBackend::checkStream(Stream stream) const {
  return checkStreamId("cpu backend", stream, numStreams());
}

absl::Status CpuBackend::copy(void *dst, const void *src, int64_t bytes,
                              Stream stream) {
  if (absl::Status s = checkStream(stream); !s.ok())
    return s;
  if (absl::Status s = checkCopy("cpu backend", dst, src, bytes); !s.ok())
    return s;
  if (bytes > 0 && dst != src)
    std::memmove(dst, src, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status CpuBackend::zero(void *dst, int64_t bytes, Stream stream) {
  if (absl::Status s = checkStream(stream); !s.ok())
    return s;
  if (absl::Status s = checkZero("cpu backend", dst, bytes); !s.ok())
    return s;
  if (bytes > 0)
    std::memset(dst, 0, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::StatusOr<Event> CpuBackend::createEvent() {
  return Event{numEvents_++};
}

absl::Status CpuBackend::recordEvent(Stream stream, Event event) {
  if (absl::Status s = checkStream(stream); !s.ok())
    return s;
  if (absl::Status s = checkEventId("cpu backend", event, numEvents_); !s.ok())
    return s;
  // Everything recorded so far has already run: the event is complete.
  return absl::OkStatus();
}

absl::Status CpuBackend::waitEvent(Stream stream, Event event) {
  // Same checks; there is never anything to wait for.
  return recordEvent(stream, event);
}

absl::Status CpuBackend::synchronize(Stream stream) {
  return checkStream(stream);
}

} // namespace md::cpu
