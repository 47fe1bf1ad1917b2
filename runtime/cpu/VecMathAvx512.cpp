//===- VecMathAvx512.cpp - VecMath's AVX-512F loops -----------------------===//
//
// Compiled with -mavx512f (CMake sets it for this file alone); called only
// after the CPU said it has AVX-512F.
//
//===----------------------------------------------------------------------===//

#include <immintrin.h>
#include <sleef.h>

#define VM_WIDTH 16
#define VM_LOAD _mm512_loadu_ps
#define VM_STORE _mm512_storeu_ps
#include "runtime/cpu/VecMathIsa.h"

namespace md::cpu::detail {

void ExpAvx512(const float *x, float *y, int64_t n) {
  mapArray(x, y, n, [](__m512 v) { return Sleef_expf16_u10avx512f(v); });
}
void TanhAvx512(const float *x, float *y, int64_t n) {
  mapArray(x, y, n, [](__m512 v) { return Sleef_tanhf16_u10avx512f(v); });
}

} // namespace md::cpu::detail
