//===- CpuIsa.h - which vector instructions the CPU backend may use -*- C++ -*-===//
//
// The CPU backend dispatches on the CPU's vector ISA in two places: md's own
// vectorised math (VecMath.h) and the GEMM library (oneDNN's JIT kernels,
// Gemm.h). Both read the level from here, once per process: what the CPU
// has, lowered by the cap MD_CPU_ISA when it is set, so that one machine
// can run, and test, the code paths of an older one. The cap is applied to
// oneDNN too (dnnl_set_max_cpu_isa, before its first primitive), so an
// AVX-512 machine capped at avx2 runs the AVX2 kernels of both.
//
//   MD_CPU_ISA = sse41 | avx2 | avx512 | avx512_bf16 | amx | native
//
// The levels are cumulative, each with what oneDNN's level of that name
// needs: avx2 is AVX2 + FMA; avx512 is AVX-512 F, CD, BW, DQ and VL
// (oneDNN's avx512_core); avx512_bf16 adds AVX512-BF16 and VNNI; amx adds
// AMX-BF16 and AMX-TILE. sse41 is the x86-64 baseline md runs on. A cap
// above what the CPU has changes nothing; `native` (or unset) is no cap.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CPU_CPUISA_H
#define MD_RUNTIME_CPU_CPUISA_H

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace md::cpu {

/// Cumulative x86-64 vector ISA levels (off x86-64, always sse41: the
/// portable loops).
enum class IsaLevel : int {
  sse41 = 0,
  avx2 = 1,
  avx512 = 2,
  avx512_bf16 = 3,
  amx = 4,
};

/// "sse41", "avx2", "avx512", "avx512_bf16", "amx".
const char *IsaLevelName(IsaLevel level);

/// A level by its name (as MD_CPU_ISA spells it, any case); `native` is
/// std::nullopt (no cap). An unknown name is InvalidArgument listing the
/// names.
absl::StatusOr<std::optional<IsaLevel>> ParseIsaCap(std::string_view name);

/// The highest level this CPU (and its OS: the vector registers' state must
/// be enabled) supports.
IsaLevel DetectCpuIsa();

/// The process's ISA: read once, on first use, from the CPU and MD_CPU_ISA.
struct CpuIsaConfig {
  IsaLevel cpu = IsaLevel::sse41;   // what the CPU has
  std::optional<IsaLevel> cap;      // MD_CPU_ISA, when set and valid
  IsaLevel effective = IsaLevel::sse41; // min(cpu, cap): what md uses
  /// MD_CPU_ISA's value is not a level: the tools refuse to run with it
  /// (CheckCpuIsaCap); the backend meanwhile ignores the cap.
  absl::Status error;

  /// Whether the backend may use `level`'s instructions.
  bool allows(IsaLevel level) const {
    return static_cast<int>(level) <= static_cast<int>(effective);
  }
  /// "avx2 (MD_CPU_ISA=avx2; the CPU has avx512_bf16)", or "avx512_bf16".
  std::string str() const;
};
const CpuIsaConfig &CpuIsa();

/// OK, or MD_CPU_ISA's error naming the variable and the levels; what a
/// tool calls before it starts the CPU backend.
absl::Status CheckCpuIsaCap();

/// OpenBLAS's name for the core type of a cap (OPENBLAS_CORETYPE, which
/// OpenBLAS reads when it is loaded, so a launcher sets it for the
/// processes it starts): "Penryn", "Haswell", "SkylakeX", "Cooperlake",
/// "SapphireRapids".
const char *OpenBlasCoreType(IsaLevel level);

} // namespace md::cpu

#endif // MD_RUNTIME_CPU_CPUISA_H
