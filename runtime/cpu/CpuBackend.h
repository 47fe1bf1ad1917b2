//===- CpuBackend.h - the reference backend: f32 loops and OpenBLAS -*- C++ -*-===//
//
// Runs every kernel of the md dialect on the host, in f32 arithmetic, with
// bf16 and f16 tensors rounded to nearest even (core/NumberFormat.h). GEMMs go
// to the GEMM library (Gemm.h: oneDNN, else OpenBLAS), on the paths the
// CPU's instruction set allows (CpuIsa.h); everything else is a loop on the
// calling thread, vectorised where VecMath.h is. It is the backend of machines without a GPU and the reference the
// CUDA backend is tested against, so it favours exactness and determinism
// over speed: the same inputs give the same bits, run after run, whatever
// the data (docs/runtime-cpu.md).
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CPU_CPUBACKEND_H
#define MD_RUNTIME_CPU_CPUBACKEND_H

#include <string>
#include <vector>

#include "runtime/core/Backend.h"

namespace md::cpu {

class CpuBackend : public runtime::Backend {
public:
  /// `threads` is the number of OpenBLAS threads; 0 means every core this
  /// process may run on. With several ranks per machine pass
  /// threadsPerRank(ranks) so that ranks x threads <= cores.
  explicit CpuBackend(int threads = 0);

  /// Cores this process may run on (its CPU affinity mask), at least 1.
  static int usableCores();
  /// max(1, usableCores() / ranksOnMachine).
  static int threadsPerRank(int ranksOnMachine);

  /// What this process's CPU backend runs on, for banners: "isa avx2
  /// (MD_CPU_ISA=avx2; the CPU has avx512_bf16), oneDNN avx2; vector math
  /// avx2+fma; GEMM f32: ...; bf16: ...; f16: ...".
  static std::string isaReport();
  /// The warnings of the GEMM paths chosen by hand (MD_CPU_GEMM_BF16/F16).
  static std::vector<std::string> isaWarnings();

  /// Sets OpenBLAS's thread count (process-wide). GEMM results depend on
  /// it only through OpenBLAS's blocking, so keep it fixed for a run that
  /// must be reproducible bit for bit.
  absl::Status setThreads(int threads);
  int threads() const { return threads_; }

  const char *name() const override { return "cpu"; }

  absl::StatusOr<runtime::Buffer> allocate(int64_t bytes) override;

  int numStreams() const override { return 2; }
  // copy, zero, createEvent, recordEvent, waitEvent, synchronize.
  MD_BACKEND_STREAM_OVERRIDES

  // The kernels, one override per row of BackendOps.def.
#define MD_BACKEND_OP(entry, Args)                                             \
  absl::Status entry(const runtime::Args &args) override;
#include "runtime/core/BackendOps.def"

private:
  absl::Status checkStream(runtime::Stream stream) const;

  int threads_ = 1;
  int numEvents_ = 0;
};

} // namespace md::cpu

#endif // MD_RUNTIME_CPU_CPUBACKEND_H
