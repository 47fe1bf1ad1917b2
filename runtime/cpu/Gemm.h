//===- Gemm.h - the one place the CPU backend calls BLAS -*- C++ -*-===//
//
// Row-major sgemm for the matmul and attention kernels. With OpenBLAS (the
// normal build) it is cblas_sgemm; a build without it (-DMD_CPU_BLAS=OFF,
// or no OpenBLAS found) gets plain loops with the same interface, so the
// CPU backend exists everywhere, only slower.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CPU_GEMM_H
#define MD_RUNTIME_CPU_GEMM_H

#include <cstdint>

namespace md::cpu {

/// C[m, n] = alpha * op(A) op(B) + beta * C, all row-major; op transposes
/// when the flag is set. Dims must fit in int (callers check). With
/// beta = 0, C is not read (NaNs in it do not leak through).
void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, float beta, float *c, int64_t ldc);

/// Whether gemmBf16 exists: the GEMMs run on oneDNN (its bf16 matmul uses
/// AVX512-BF16 where the CPU has it, and converts where it does not).
bool haveGemmBf16();

/// sgemm's contract with bf16 A and B (raw bits, as runtime/core/
/// NumberFormat.h stores them) and f32 C: products of bf16 values are exact
/// in f32 and are summed in f32, so this is sgemm on the widened operands up
/// to the order of the sums, without widening them first. Only when
/// haveGemmBf16().
void gemmBf16(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
              float alpha, const uint16_t *a, int64_t lda, const uint16_t *b,
              int64_t ldb, float beta, float *c, int64_t ldc);

/// The GEMM library's thread count.
void setBlasThreads(int threads);

/// "OpenBLAS 0.3.21 ..." or "none (reference loops)".
const char *blasName();

} // namespace md::cpu

#endif // MD_RUNTIME_CPU_GEMM_H
