//===- VecMath.cpp - picking VecMath's variant; its SSE2 and scalar loops -===//
//
// The AVX-512F and AVX2 loops live in files of their own, compiled with those
// ISAs' flags; this file is compiled for the baseline and holds the SSE2
// loop (every x86-64 CPU has SSE2) and, off x86-64, SLEEF's scalar
// functions. The variant is chosen once, from what the CPU reports, under
// the cap MD_CPU_ISA (CpuIsa.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/VecMath.h"

#include <initializer_list>

#include <sleef.h>

#include "runtime/cpu/CpuIsa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define VM_WIDTH 4
#define VM_LOAD _mm_loadu_ps
#define VM_STORE _mm_storeu_ps
#include "runtime/cpu/VecMathIsa.h"
#endif

namespace md::cpu {

#if defined(__x86_64__)
namespace detail {
void ExpAvx512(const float *x, float *y, int64_t n);
void TanhAvx512(const float *x, float *y, int64_t n);
void ExpAvx2(const float *x, float *y, int64_t n);
void TanhAvx2(const float *x, float *y, int64_t n);
} // namespace detail
#endif

namespace {

using ArrayFn = void (*)(const float *, float *, int64_t);

void expScalar(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = Sleef_expf_u10(x[i]);
}
void tanhScalar(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = Sleef_tanhf_u10(x[i]);
}

#if defined(__x86_64__)
void expSse2(const float *x, float *y, int64_t n) {
  mapArray(x, y, n, [](__m128 v) { return Sleef_expf4_u10sse2(v); });
}
void tanhSse2(const float *x, float *y, int64_t n) {
  mapArray(x, y, n, [](__m128 v) { return Sleef_tanhf4_u10sse2(v); });
}
#endif

struct Variant {
  VecIsa isa;
  const char *name;
  ArrayFn exp, tanh;
};

Variant variantFor(VecIsa isa) {
  switch (isa) {
#if defined(__x86_64__)
  case VecIsa::avx512f:
    return {isa, "avx512f", detail::ExpAvx512, detail::TanhAvx512};
  case VecIsa::avx2fma:
    return {isa, "avx2+fma", detail::ExpAvx2, detail::TanhAvx2};
  case VecIsa::sse2:
    return {isa, "sse2", expSse2, tanhSse2};
#else
  case VecIsa::avx512f:
  case VecIsa::avx2fma:
  case VecIsa::sse2:
#endif
  case VecIsa::scalar:
    break;
  }
  return {VecIsa::scalar, "scalar", expScalar, tanhScalar};
}

const Variant &chosen() {
  static const Variant v = [] {
    for (VecIsa isa : {VecIsa::avx512f, VecIsa::avx2fma, VecIsa::sse2})
      if (VecIsaSupported(isa))
        return variantFor(isa);
    return variantFor(VecIsa::scalar);
  }();
  return v;
}

} // namespace

bool VecIsaSupported(VecIsa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // MD_CPU_ISA caps the variants as it caps oneDNN (CpuIsa.h).
  const std::optional<IsaLevel> &cap = CpuIsa().cap;
  auto capped = [&](IsaLevel level) { return cap && *cap < level; };
  switch (isa) {
  case VecIsa::avx512f:
    return __builtin_cpu_supports("avx512f") && !capped(IsaLevel::avx512);
  case VecIsa::avx2fma:
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           !capped(IsaLevel::avx2);
  case VecIsa::sse2:
  case VecIsa::scalar:
    return true;
  }
  return false;
#else
  return isa == VecIsa::scalar;
#endif
}

void VecExp(const float *x, float *y, int64_t n) { chosen().exp(x, y, n); }
void VecTanh(const float *x, float *y, int64_t n) { chosen().tanh(x, y, n); }
const char *VecMathVariant() { return chosen().name; }

void VecExpWith(VecIsa isa, const float *x, float *y, int64_t n) {
  variantFor(isa).exp(x, y, n);
}
void VecTanhWith(VecIsa isa, const float *x, float *y, int64_t n) {
  variantFor(isa).tanh(x, y, n);
}

} // namespace md::cpu
