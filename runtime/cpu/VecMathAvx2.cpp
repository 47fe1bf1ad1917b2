//===- VecMathAvx2.cpp - VecMath's AVX2 + FMA loops -----------------------===//
//
// Compiled with -mavx2 -mfma (CMake sets them for this file alone); called
// only after the CPU said it has both.
//
//===----------------------------------------------------------------------===//

#include <immintrin.h>
#include <sleef.h>

#define VM_WIDTH 8
#define VM_LOAD _mm256_loadu_ps
#define VM_STORE _mm256_storeu_ps
#include "runtime/cpu/VecMathIsa.h"

namespace md::cpu::detail {

void ExpAvx2(const float *x, float *y, int64_t n) {
  mapArray(x, y, n, [](__m256 v) { return Sleef_expf8_u10avx2(v); });
}
void TanhAvx2(const float *x, float *y, int64_t n) {
  mapArray(x, y, n, [](__m256 v) { return Sleef_tanhf8_u10avx2(v); });
}

} // namespace md::cpu::detail
