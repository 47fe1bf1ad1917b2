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
#include "runtime/cpu/Gemm.h"

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
  if (bytes < 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("cpu backend: cannot allocate %d bytes", bytes));
  // aligned_alloc wants a multiple of the alignment; never ask for 0.
  int64_t rounded =
      (bytes + kAllocAlignment - 1) / kAllocAlignment * kAllocAlignment;
  if (rounded == 0)
    rounded = kAllocAlignment;
  void *p = std::aligned_alloc(kAllocAlignment, static_cast<size_t>(rounded));
  if (p == nullptr)
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cpu backend: out of host memory allocating %d bytes", bytes));
  std::memset(p, 0, static_cast<size_t>(rounded));
  return Buffer(p, bytes, [](void *q) { std::free(q); });
}

absl::Status CpuBackend::checkStream(Stream stream) const {
  if (stream.id < 0 || stream.id >= numStreams())
    return absl::InvalidArgumentError(absl::StrFormat(
        "cpu backend: stream %d does not exist (%d streams)", stream.id,
        numStreams()));
  return absl::OkStatus();
}

absl::Status CpuBackend::copy(void *dst, const void *src, int64_t bytes,
                              Stream stream) {
  if (absl::Status s = checkStream(stream); !s.ok())
    return s;
  if (bytes < 0 || (bytes > 0 && (dst == nullptr || src == nullptr)))
    return absl::InvalidArgumentError(absl::StrFormat(
        "cpu backend: bad copy of %d bytes from %p to %p", bytes, src, dst));
  if (bytes > 0 && dst != src)
    std::memmove(dst, src, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status CpuBackend::zero(void *dst, int64_t bytes, Stream stream) {
  if (absl::Status s = checkStream(stream); !s.ok())
    return s;
  if (bytes < 0 || (bytes > 0 && dst == nullptr))
    return absl::InvalidArgumentError(absl::StrFormat(
        "cpu backend: bad zero of %d bytes at %p", bytes, dst));
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
  if (event.id < 0 || event.id >= numEvents_)
    return absl::InvalidArgumentError(absl::StrFormat(
        "cpu backend: event %d was not created (%d events)", event.id,
        numEvents_));
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
