//===- Reduce.cpp - in-order reductions for the host comms ----------------===//
//
// Every element sees the operations of the element-by-element loop, in its
// order (acc = x0; acc = acc op x1; ...; avg's division; the rounding to
// bf16/f16), so the bits are that loop's, which ReduceInOrder was until it
// ran at 0.4-1.7 GB/s (f16-f32 sums of two members). Now it runs them a
// block at a time without branches: with two members (or one) a single
// pass over the sources; with more, member 0's and 1's values combined
// into an f32 (or integer) accumulator block of kBlock elements, each
// further member's combined into it, the last one's stored straight to
// `out`. Those loops vectorise; on x86-64 with AVX2 the float types run
// an AVX2 kernel (bf16 and f16 8 at a time with intrinsics), chosen once
// from the CPU. Two-member sums of 1 MiB on the 2-core EPYC of
// docs/bench.md: f32 1.6 -> 25 GB/s, bf16 1.0 -> 7.3, f16 0.4 -> 11.
//
// ShmCommTest's ReduceInOrder test holds both kernels to the loop, every
// dtype and reduction, NaN payloads included.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Reduce.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "runtime/core/NumberFormat.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace md::runtime {
namespace {

constexpr int64_t kBlock = 512;
constexpr int kMaxTail = 16;

/// `a` where `c`, else `b`: a mask, not a branch, so that it vectorises.
inline uint32_t select(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - uint32_t(c);
  return (a & m) | (b & ~m);
}

// Loads and stores of each element type, to and from the f32 accumulator.
// They give exactly NumberFormat.h's values (compared for all 2^32 f32 and
// 2^16 bf16/f16 inputs when they were written), without branches so that
// a block of them vectorises. The compares are signed, as SSE2 has no
// unsigned ones; both sides are below 2^31.
struct F32 {
  using T = float;
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};
struct Bf16 {
  using T = uint16_t;
  static float load(uint16_t h) { return bf16ToF32(h); }
  static uint16_t store(float f) {
    // f32ToBf16: round to nearest even on the 16 bits dropped; a NaN keeps
    // its leading payload and gets the quiet bit.
    const uint32_t u = floatBits(f);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u >> 16) | 0x0040u;
    return uint16_t(
        select(int32_t(u & 0x7fffffffu) > 0x7f800000, nan, rounded));
  }
};
struct F16 {
  using T = uint16_t;
  static float load(uint16_t h) {
    // f16ToF32's three cases side by side: inf/NaN (payload kept), a
    // subnormal (man * 2^-24, a normal f32, so exact), a normal.
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    const uint32_t special = sign | 0x7f800000u | (man << 13);
    const uint32_t normal = sign | ((exp + 112) << 23) | (man << 13);
    const uint32_t sub = sign | floatBits(float(int32_t(man)) * 0x1p-24f);
    return bitsFloat(
        select(exp == 0x1f, special, select(exp == 0, sub, normal)));
  }
  static uint16_t store(float f) {
    // f32ToF16's cases side by side. A normal f16 rounds its 13 dropped
    // bits to nearest even by adding just under half of them plus the kept
    // part's lowest bit (a carry into the exponent is right, up to the
    // largest finite f16; 65520 and above are infinity). A subnormal f16
    // or zero is |f| + 0.5 in f32, whose ulp there, 2^-24, is f16's
    // subnormal step: the f32 adder rounds |f| to a multiple of 2^-24, ties
    // to even (the default rounding mode, which md never changes), and the
    // bits above 0.5's are the f16's.
    const uint32_t u = floatBits(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    const int32_t sa = int32_t(a);
    const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
    const uint32_t normal =
        ((a + 0xfffu + ((a >> 13) & 1u)) >> 13) - ((127u - 15u) << 10);
    const uint32_t sub = floatBits(bitsFloat(a) + 0.5f) - 0x3f000000u;
    const uint32_t h =
        select(sa > 0x7f800000, nan,
               select(sa >= 0x477ff000, 0x7c00u,
                      select(sa >= 0x38800000, normal, sub)));
    return uint16_t(sign | h);
  }
};

/// acc op x for sum and prod, where a NaN in acc is the result (quieted)
/// whatever x is: what the x86 instruction gives with acc as its first
/// operand, which the element-by-element loop always had (its accumulator
/// register), but which a vectorised loop may swap, as the compiler takes
/// the operation for commutative, and with two NaNs it is not.
inline float nanFirst(float acc, float r) {
  return bitsFloat(select(acc != acc, floatBits(acc) | 0x00400000u,
                          floatBits(r)));
}

template <ReduceOp Op> inline float combine(float acc, float x) {
  if constexpr (Op == ReduceOp::sum || Op == ReduceOp::avg)
    return nanFirst(acc, acc + x);
  else if constexpr (Op == ReduceOp::prod)
    return nanFirst(acc, acc * x);
  else if constexpr (Op == ReduceOp::max) // NaN wins, as in torch.max
    return x > acc || x != x ? x : acc;
  else
    return x < acc || x != x ? x : acc;
}

template <ReduceOp Op, typename T> inline T combineInt(T acc, T x) {
  using U = std::make_unsigned_t<T>;
  if constexpr (Op == ReduceOp::sum || Op == ReduceOp::avg)
    return T(U(acc) + U(x)); // two's complement wrap-around, as in NCCL
  else if constexpr (Op == ReduceOp::prod)
    return T(U(acc) * U(x));
  else if constexpr (Op == ReduceOp::max)
    return std::max(acc, x);
  else
    return std::min(acc, x);
}

/// avg's division, then the element type's rounding.
template <typename F, ReduceOp Op>
inline typename F::T finish(float acc, float divisor) {
  // nanFirst: the division quiets a NaN, also where the compiler folds the
  // division by 1 away (one source).
  if constexpr (Op == ReduceOp::avg)
    acc = nanFirst(acc, acc / divisor);
  return F::store(acc);
}
template <typename T, ReduceOp Op> inline T finishInt(T acc, T n) {
  if constexpr (Op == ReduceOp::avg)
    return T(acc / n); // truncates toward zero
  else
    return acc;
}

// The kernels. Each block reads every source before `out` is written (the
// last source in the same iteration), which is what makes `out` ==
// srcs[i] safe; `ivdep` tells the compiler so (no iteration depends on
// another), where it would otherwise test the pointers for overlap and
// run a scalar loop for the in-place case.
template <typename F, ReduceOp Op>
[[gnu::always_inline]] inline void
reduceFloatsBody(const void *const *srcs, int n, void *outV, int64_t len) {
  using T = typename F::T;
  const float divisor = float(n);
  T *out = static_cast<T *>(outV);
  const T *a = static_cast<const T *>(srcs[0]);
  if (n == 1) {
#pragma GCC ivdep
    for (int64_t j = 0; j < len; ++j)
      out[j] = finish<F, Op>(F::load(a[j]), divisor);
    return;
  }
  const T *b = static_cast<const T *>(srcs[1]);
  if (n == 2) {
#pragma GCC ivdep
    for (int64_t j = 0; j < len; ++j)
      out[j] = finish<F, Op>(combine<Op>(F::load(a[j]), F::load(b[j])),
                             divisor);
    return;
  }
  alignas(64) float acc[kBlock];
  const T *last = static_cast<const T *>(srcs[n - 1]);
  for (int64_t begin = 0; begin < len; begin += kBlock) {
    const int64_t m = std::min(kBlock, len - begin);
    for (int64_t j = 0; j < m; ++j)
      acc[j] = combine<Op>(F::load(a[begin + j]), F::load(b[begin + j]));
    for (int i = 2; i < n - 1; ++i) {
      const T *x = static_cast<const T *>(srcs[i]) + begin;
      for (int64_t j = 0; j < m; ++j)
        acc[j] = combine<Op>(acc[j], F::load(x[j]));
    }
    T *o = out + begin;
    const T *z = last + begin;
#pragma GCC ivdep
    for (int64_t j = 0; j < m; ++j)
      o[j] = finish<F, Op>(combine<Op>(acc[j], F::load(z[j])), divisor);
  }
}

template <typename T, ReduceOp Op>
[[gnu::always_inline]] inline void
reduceIntsBody(const void *const *srcs, int n, void *outV, int64_t len) {
  T *out = static_cast<T *>(outV);
  const T *a = static_cast<const T *>(srcs[0]);
  if (n == 1) {
#pragma GCC ivdep
    for (int64_t j = 0; j < len; ++j)
      out[j] = finishInt<T, Op>(a[j], T(n));
    return;
  }
  alignas(64) T acc[kBlock];
  const T *last = static_cast<const T *>(srcs[n - 1]);
  for (int64_t begin = 0; begin < len; begin += kBlock) {
    const int64_t m = std::min(kBlock, len - begin);
    for (int64_t j = 0; j < m; ++j)
      acc[j] = a[begin + j];
    for (int i = 1; i < n - 1; ++i) {
      const T *x = static_cast<const T *>(srcs[i]) + begin;
      for (int64_t j = 0; j < m; ++j)
        acc[j] = combineInt<Op>(acc[j], x[j]);
    }
    T *o = out + begin;
    const T *z = last + begin;
#pragma GCC ivdep
    for (int64_t j = 0; j < m; ++j)
      o[j] = finishInt<T, Op>(combineInt<Op>(acc[j], z[j]), T(n));
  }
}

/// One kernel for the baseline ISA and, on x86-64, one for AVX2, chosen
/// once by what the CPU has. They run the same operations on the same
/// values, only more of them per instruction, so the bits do not depend on
/// which one runs.
using Kernel = void (*)(const void *const *, int, void *, int64_t);

template <typename F, ReduceOp Op>
void floatsBase(const void *const *s, int n, void *out, int64_t len) {
  reduceFloatsBody<F, Op>(s, n, out, len);
}
template <typename T, ReduceOp Op>
void intsBase(const void *const *s, int n, void *out, int64_t len) {
  reduceIntsBody<T, Op>(s, n, out, len);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define MD_REDUCE_AVX2 1
#define MD_AVX2 [[gnu::target("avx2,f16c")]]

// The AVX2 kernels of the float types take 8 elements at a time with
// intrinsics: the conversions to and from bf16 and f16 that the compiler
// makes of the scalar code above take 3 to 10 times the instructions. They
// give the scalar code's bits: the stores and the bf16 load were compared
// for every input (all 2^32 f32 values, all 2^16 bf16/f16 ones); the f16
// load (F16C) differs only in quieting a signalling NaN, which the
// reduction or the store then quiets the same way in both.
struct F32x8 {
  MD_AVX2 static __m256 load(const float *p) { return _mm256_loadu_ps(p); }
  MD_AVX2 static void store(float *p, __m256 v) { _mm256_storeu_ps(p, v); }
};
struct Bf16x8 {
  MD_AVX2 static __m256 load(const uint16_t *p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  MD_AVX2 static void store(uint16_t *p, __m256 v) {
    // Bf16::store: round to nearest even, or keep a NaN's top bits with
    // the quiet bit set; then the top halves, packed.
    const __m256i u = _mm256_castps_si256(v);
    const __m256i odd =
        _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd));
    const __m256i nan = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    const __m256 isNan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256i r = _mm256_srli_epi32(
        _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(rounded),
                                             _mm256_castsi256_ps(nan), isNan)),
        16);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p),
                     _mm_packus_epi32(_mm256_castsi256_si128(r),
                                      _mm256_extracti128_si256(r, 1)));
  }
};
struct F16x8 {
  MD_AVX2 static __m256 load(const uint16_t *p) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
  }
  MD_AVX2 static void store(uint16_t *p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
};
template <typename F> struct Wide;
template <> struct Wide<F32> { using V = F32x8; };
template <> struct Wide<Bf16> { using V = Bf16x8; };
template <> struct Wide<F16> { using V = F16x8; };

/// nanFirst and combine, 8 at a time.
MD_AVX2 inline __m256 nanFirst8(__m256 acc, __m256 r) {
  const __m256 quiet =
      _mm256_or_ps(acc, _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000)));
  return _mm256_blendv_ps(r, quiet, _mm256_cmp_ps(acc, acc, _CMP_UNORD_Q));
}
template <ReduceOp Op> MD_AVX2 inline __m256 combine8(__m256 acc, __m256 x) {
  if constexpr (Op == ReduceOp::sum || Op == ReduceOp::avg)
    return nanFirst8(acc, _mm256_add_ps(acc, x));
  else if constexpr (Op == ReduceOp::prod)
    return nanFirst8(acc, _mm256_mul_ps(acc, x));
  else {
    const __m256 better = Op == ReduceOp::max
                              ? _mm256_cmp_ps(x, acc, _CMP_GT_OQ)
                              : _mm256_cmp_ps(x, acc, _CMP_LT_OQ);
    return _mm256_blendv_ps(
        acc, x, _mm256_or_ps(better, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
  }
}

template <typename F, ReduceOp Op>
MD_AVX2 void floatsAvx2(const void *const *s, int n, void *outV,
                        int64_t len) {
  using T = typename F::T;
  using V = typename Wide<F>::V;
  if constexpr (std::is_same_v<F, F32>) {
    // f32 needs no conversions: the compiler's vectorisation of the
    // blocked loops (with AVX2 here) is as fast.
    return reduceFloatsBody<F, Op>(s, n, outV, len);
  }
  T *out = static_cast<T *>(outV);
  const __m256 divisor = _mm256_set1_ps(float(n));
  // Element-major: every source's 8 elements, then the 8 results, so that
  // out may be one of the sources.
  int64_t j = 0;
  for (; j + 8 <= len; j += 8) {
    __m256 acc = V::load(static_cast<const T *>(s[0]) + j);
    for (int i = 1; i < n; ++i)
      acc = combine8<Op>(acc, V::load(static_cast<const T *>(s[i]) + j));
    if constexpr (Op == ReduceOp::avg)
      acc = nanFirst8(acc, _mm256_div_ps(acc, divisor));
    V::store(out + j, acc);
  }
  if (j == len)
    return;
  // The last few, with the scalar code.
  const void *rest[kMaxTail];
  std::vector<const void *> many;
  const void **r = rest;
  if (n > kMaxTail) {
    many.resize(n);
    r = many.data();
  }
  for (int i = 0; i < n; ++i)
    r[i] = static_cast<const T *>(s[i]) + j;
  reduceFloatsBody<F, Op>(r, n, out + j, len - j);
}
template <typename T, ReduceOp Op>
MD_AVX2 void intsAvx2(const void *const *s, int n, void *out, int64_t len) {
  reduceIntsBody<T, Op>(s, n, out, len);
}
bool haveAvx2() {
  static const bool have =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return have;
}
#endif

template <typename F, ReduceOp Op> Kernel floatKernel(bool wide) {
#ifdef MD_REDUCE_AVX2
  if (wide && haveAvx2())
    return &floatsAvx2<F, Op>;
#endif
  (void)wide;
  return &floatsBase<F, Op>;
}
template <typename T, ReduceOp Op> Kernel intKernel(bool wide) {
#ifdef MD_REDUCE_AVX2
  if (wide && haveAvx2())
    return &intsAvx2<T, Op>;
#endif
  (void)wide;
  return &intsBase<T, Op>;
}

template <typename F> Kernel floatKernel(ReduceOp op, bool wide) {
  switch (op) {
  case ReduceOp::sum:
    return floatKernel<F, ReduceOp::sum>(wide);
  case ReduceOp::avg:
    return floatKernel<F, ReduceOp::avg>(wide);
  case ReduceOp::prod:
    return floatKernel<F, ReduceOp::prod>(wide);
  case ReduceOp::max:
    return floatKernel<F, ReduceOp::max>(wide);
  case ReduceOp::min:
    break;
  }
  return floatKernel<F, ReduceOp::min>(wide);
}

template <typename T> Kernel intKernel(ReduceOp op, bool wide) {
  switch (op) {
  case ReduceOp::sum:
    return intKernel<T, ReduceOp::sum>(wide);
  case ReduceOp::avg:
    return intKernel<T, ReduceOp::avg>(wide);
  case ReduceOp::prod:
    return intKernel<T, ReduceOp::prod>(wide);
  case ReduceOp::max:
    return intKernel<T, ReduceOp::max>(wide);
  case ReduceOp::min:
    break;
  }
  return intKernel<T, ReduceOp::min>(wide);
}

Kernel kernelFor(DType dtype, ReduceOp op, bool wide) {
  switch (dtype) {
  case DType::f32:
    return floatKernel<F32>(op, wide);
  case DType::bf16:
    return floatKernel<Bf16>(op, wide);
  case DType::f16:
    return floatKernel<F16>(op, wide);
  case DType::i32:
    return intKernel<int32_t>(op, wide);
  case DType::i64:
    break;
  }
  return intKernel<int64_t>(op, wide);
}

} // namespace

void ReduceInOrder(DType dtype, ReduceOp op, const void *const *srcs, int n,
                   void *out, int64_t len) {
  if (n <= 0 || len <= 0)
    return;
  kernelFor(dtype, op, /*wide=*/true)(srcs, n, out, len);
}

void ReduceInOrderBaseline(DType dtype, ReduceOp op, const void *const *srcs,
                           int n, void *out, int64_t len) {
  if (n <= 0 || len <= 0)
    return;
  kernelFor(dtype, op, /*wide=*/false)(srcs, n, out, len);
}

void ReduceInOrder(DType dtype, ReduceOp op,
                   const std::vector<const void *> &srcs, void *out,
                   int64_t len) {
  ReduceInOrder(dtype, op, srcs.data(), int(srcs.size()), out, len);
}

} // namespace md::runtime
