//===- NumberFormat.h - bf16 and f16 to and from f32 -*- C++ -*-===//
//
// md stores bf16 and f16 tensors as their IEEE bit patterns and computes in
// f32: loads widen exactly, stores round to nearest, ties to even (what
// PyTorch's Tensor.to(dtype) and CUDA's __float2bfloat16_rn do). NaNs stay
// NaNs (quiet, sign and leading payload bits kept) instead of turning into
// infinities, which is what plain truncation can do. Header only, and below
// every backend: the executor's host scalars, the host comms' reductions
// (Reduce.cpp), the CPU kernels and the CUDA kernels (compiled for the
// device too) all round the same way, so the backends store identical bits.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_NUMBERFORMAT_H
#define MD_RUNTIME_CORE_NUMBERFORMAT_H

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define MD_HOST_DEVICE __host__ __device__
#else
#define MD_HOST_DEVICE
#endif

namespace md::runtime {

/// The bits of `from` read as a `To` of the same size (std::bit_cast, which
/// C++17 lacks). memcpy compiles to a register move on the host and on the
/// device alike.
template <typename To, typename From>
MD_HOST_DEVICE inline To bitCast(From from) {
  static_assert(sizeof(To) == sizeof(From), "bitCast needs equal sizes");
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

MD_HOST_DEVICE inline uint32_t floatBits(float f) {
  return bitCast<uint32_t>(f);
}
MD_HOST_DEVICE inline float bitsFloat(uint32_t u) { return bitCast<float>(u); }

/// bf16 is the top half of an f32: widening is a shift.
MD_HOST_DEVICE inline float bf16ToF32(uint16_t h) {
  return bitsFloat(uint32_t(h) << 16);
}

MD_HOST_DEVICE inline uint16_t f32ToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)    // NaN: set the quiet bit so dropping
    return uint16_t((u >> 16) | 0x0040u); // the low payload keeps it a NaN
  // Round to nearest even on the 16 bits dropped: add just under half an
  // ulp, plus one when the kept part is odd, and truncate. A carry out of
  // the mantissa bumps the exponent, which is the right answer (including
  // the overflow to infinity past bf16's largest finite value); f32
  // subnormals round to bf16 subnormals the same way.
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

MD_HOST_DEVICE inline float f16ToF32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) // inf or NaN, payload kept
    return bitsFloat(sign | 0x7f800000u | (man << 13));
  if (exp == 0) { // zero or subnormal: man * 2^-24, exact in f32
    float v = float(man) * 0x1p-24f;
    return sign ? -v : v;
  }
  return bitsFloat(sign | ((exp + 112) << 23) | (man << 13));
}

MD_HOST_DEVICE inline uint16_t f32ToF16(float f) {
  uint32_t u = floatBits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) // NaN: quiet, leading payload bits kept
    return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  // 65520 is halfway between 65504 (the largest f16, odd mantissa) and
  // 65536: it and everything above round to infinity.
  if (a >= 0x477ff000u)
    return uint16_t(sign | 0x7c00u);
  if (a >= 0x38800000u) { // a normal f16: rebias, round the 13 dropped bits
    uint32_t h = (a >> 13) - ((127u - 15u) << 10);
    uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
      ++h; // a carry into the exponent is correct rounding
    return uint16_t(sign | h);
  }
  // Subnormal f16 (multiples of 2^-24) or zero. 2^-25 itself is a tie
  // between 0 and 2^-24 and goes to 0, the even one.
  if (a <= 0x33000000u)
    return sign;
  uint32_t exp = a >> 23; // biased, 102..112 here
  uint32_t man = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126 - exp; // value / 2^-24 = man >> shift
  uint32_t h = man >> shift;
  uint32_t rest = man & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u)))
    ++h; // 0x3ff + 1 = 0x400 is the smallest normal: still right
  return uint16_t(sign | h);
}

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_NUMBERFORMAT_H
