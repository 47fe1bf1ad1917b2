//===- Gemm.h - the one place the CPU backend calls a GEMM library -*- C++ -*-===//
//
// Row-major GEMMs for the matmul and attention kernels, with f32
// accumulation and an f32 result whatever the operands' type. Which
// libraries can run them is a build choice (oneDNN and OpenBLAS, one of
// them, or plain loops; Gemm.cpp); how each operand type runs is a run-time
// choice, made once per process from what the libraries can create on this
// CPU under the ISA cap (CpuIsa.h) and reported by gemmPaths():
//   - f32: oneDNN's f32 matmul, except at the avx2 level, where OpenBLAS's
//     Haswell kernels ran the GPT models' shapes up to 2.5x faster than
//     oneDNN 2.6.3's (docs/runtime-cpu.md has the table);
//   - bf16, f16: oneDNN's matmul on the data as stored where it has one
//     that runs on the CPU's own 16-bit dot-product instructions (bf16 on
//     AVX512-BF16 or AMX); everywhere else the operands are widened to f32
//     (exactly) a block of rows at a time and the f32 GEMM runs on them.
//     Either way the products of 16-bit values are exact in f32 and summed
//     in f32: the precision policy's meaning (16-bit storage, f32
//     accumulation) is the same on every CPU, only the order of the f32
//     sums, and so the last bits, differ between the paths.
// MD_CPU_GEMM_F32 = auto | onednn | openblas and MD_CPU_GEMM_BF16 /
// MD_CPU_GEMM_F16 = auto | onednn | widened choose a path by hand (e.g.
// `widened` on an AVX512-BF16 machine gives an AVX2 machine's bf16 path).
// Every library error comes back as a Status naming the kernel, the GEMM's
// shape and types, and the ISA; nothing throws or aborts.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CPU_GEMM_H
#define MD_RUNTIME_CPU_GEMM_H

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "runtime/core/Tensor.h"

namespace md::cpu {

/// How the GEMMs of one operand type run.
enum class GemmPath {
  onednn,    // oneDNN's matmul on the operands as stored
  openblas,  // cblas_sgemm (f32 only)
  widened,   // 16-bit operands widened to f32 in blocks, then the f32 path
  reference, // plain loops (f32 only)
};

/// One operand type's path, and its description for the banner
/// ("oneDNN 2.6.3 bf16 matmul (brg:avx512_core_bf16)").
struct GemmRoute {
  GemmPath path = GemmPath::reference;
  std::string text;
  /// A path chosen by hand (MD_CPU_GEMM_*) that cannot run as asked: why
  /// (its first GEMM fails, or it runs above the ISA cap), or a value of
  /// the variable that is not a path.
  std::string warning;
};

/// The paths of this process, probed once on first use: a small GEMM of
/// each operand type is built with the library under the ISA cap.
struct GemmPaths {
  GemmRoute f32, bf16, f16;
  /// md's ISA (CpuIsa().str()) and, with oneDNN, the ISA its kernels use.
  std::string isa;
  /// The route of operands of type `dtype` (f32 for any other type).
  const GemmRoute &of(runtime::DType dtype) const;
  /// "f32: ...; bf16: ...; f16: ..."
  std::string str() const;
};
const GemmPaths &gemmPaths();

/// One GEMM operand: f32, bf16 or f16 elements (bf16/f16 as the raw bits
/// runtime/core/NumberFormat.h stores), row-major with leading dim `ld`.
struct GemmOperand {
  runtime::DType dtype = runtime::DType::f32;
  const void *data = nullptr;
  int64_t ld = 0;
};

/// C[m, n] = alpha * op(A) op(B) + beta * C, all row-major, f32 C; op
/// transposes when the flag is set. The operands' types may differ (mixed
/// ones are widened). With beta = 0, C is not read (NaNs in it do not leak
/// through). `kernel` names the caller in errors ("matmul_grad").
absl::Status gemm(const char *kernel, bool transA, bool transB, int64_t m,
                  int64_t n, int64_t k, float alpha, const GemmOperand &a,
                  const GemmOperand &b, float beta, float *c, int64_t ldc);

/// gemm on f32 operands.
absl::Status sgemm(const char *kernel, bool transA, bool transB, int64_t m,
                   int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc);

/// gemm through a given path, whatever gemmPaths() chose (for tests and
/// benchmarks): `onednn` with two bf16 (or f16) operands runs oneDNN's
/// 16-bit matmul, and fails where oneDNN cannot create one; `widened`
/// widens every 16-bit operand. f32 operands (and widened ones) take the
/// f32 path of gemmPaths().
absl::Status gemmVia(GemmPath path, const char *kernel, bool transA,
                     bool transB, int64_t m, int64_t n, int64_t k, float alpha,
                     const GemmOperand &a, const GemmOperand &b, float beta,
                     float *c, int64_t ldc);

/// The GEMM library's thread count.
void setBlasThreads(int threads);

/// The build's GEMM libraries: "oneDNN 2.6.3 matmul" (with ", OpenBLAS
/// 0.3.21" beside it), "OpenBLAS 0.3.21 ..." or "none (reference loops)".
const char *blasName();

} // namespace md::cpu

#endif // MD_RUNTIME_CPU_GEMM_H
