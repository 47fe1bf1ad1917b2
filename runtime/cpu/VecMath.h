//===- VecMath.h - exp and tanh over arrays, vectorised -*- C++ -*-===//
//
// The CPU kernels' transcendental functions, applied to whole arrays with
// SLEEF's vectorised functions (1.0-ulp accuracy), the library PyTorch's CPU
// kernels use for the same purpose. libm's scalar expf/tanhf were a third of
// the tiny GPT's step time (its GELU, softmax and cross-entropy).
//
// Bits: the widest variant the CPU has is picked once (AVX-512F, else AVX2
// with FMA, else SSE2). The FMA variants (AVX-512F, AVX2) return the same
// bits as each other for every input (checked over a billion inputs when this
// was chosen; VecMathTest checks the variants this machine can run), so every
// x86-64 CPU with FMA (Intel since 2013, AMD since 2015) gives the same
// results. A CPU without FMA runs the SSE2 variant, whose exp can differ in
// the last bit. Every element goes through the vector function, the tail of
// an array too (padded), so results do not depend on an element's position
// or the array's length.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CPU_VECMATH_H
#define MD_RUNTIME_CPU_VECMATH_H

#include <cstdint>

namespace md::cpu {

/// y[i] = exp(x[i]) for i < n; y may be x.
void VecExp(const float *x, float *y, int64_t n);
/// y[i] = tanh(x[i]) for i < n; y may be x.
void VecTanh(const float *x, float *y, int64_t n);

/// The variant in use: "avx512f", "avx2+fma", "sse2" or "scalar".
const char *VecMathVariant();

/// The variants this CPU can run, widest first (for tests), under the cap
/// MD_CPU_ISA (CpuIsa.h): with MD_CPU_ISA=avx2, avx512f is not supported.
enum class VecIsa { avx512f, avx2fma, sse2, scalar };
bool VecIsaSupported(VecIsa isa);
/// VecExp / VecTanh through one given variant (for tests; it must be
/// supported).
void VecExpWith(VecIsa isa, const float *x, float *y, int64_t n);
void VecTanhWith(VecIsa isa, const float *x, float *y, int64_t n);

} // namespace md::cpu

#endif // MD_RUNTIME_CPU_VECMATH_H
