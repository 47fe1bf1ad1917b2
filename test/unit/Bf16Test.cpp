//===- Bf16Test.cpp - f32 <-> bf16 / f16 rounding -------------------------===//
//
// Edge cases by bit pattern (ties, overflow, NaN, infinities, subnormals),
// exhaustive round trips of every bf16 and f16 value, and random f32
// values against a reference that picks the nearer neighbour in f64.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/NumberFormat.h"

#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

namespace md::runtime {
namespace {

float fromBits(uint32_t u) { return bitsFloat(u); }

TEST(Bf16, TiesRoundToEven) {
  EXPECT_EQ(f32ToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 0x3f80 (even) and 0x3f81: down.
  EXPECT_EQ(f32ToBf16(fromBits(0x3f808000)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 0x3f81 (odd) and 0x3f82: up.
  EXPECT_EQ(f32ToBf16(fromBits(0x3f818000)), 0x3f82);
  // Just above and below the halfway point.
  EXPECT_EQ(f32ToBf16(fromBits(0x3f808001)), 0x3f81);
  EXPECT_EQ(f32ToBf16(fromBits(0x3f817fff)), 0x3f81);
  // Negative values round by magnitude.
  EXPECT_EQ(f32ToBf16(fromBits(0xbf818000)), 0xbf82);
}

TEST(Bf16, OverflowInfinityAndZeros) {
  // The largest finite bf16 is 0x7f7f; the halfway point to the next
  // binade rounds (to even) to infinity.
  EXPECT_EQ(f32ToBf16(fromBits(0x7f7f7fff)), 0x7f7f);
  EXPECT_EQ(f32ToBf16(fromBits(0x7f7f8000)), 0x7f80);
  EXPECT_EQ(f32ToBf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32ToBf16(-INFINITY), 0xff80);
  EXPECT_EQ(f32ToBf16(0.0f), 0x0000);
  EXPECT_EQ(f32ToBf16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isinf(bf16ToF32(0x7f80)));
}

TEST(Bf16, NaNStaysNaN) {
  EXPECT_EQ(f32ToBf16(fromBits(0x7fc00000)), 0x7fc0);
  // A NaN whose payload is all in the dropped bits would truncate to
  // infinity; it must stay a (quiet) NaN, sign kept.
  uint16_t h = f32ToBf16(fromBits(0x7f800001));
  EXPECT_TRUE(std::isnan(bf16ToF32(h)));
  EXPECT_EQ(h & 0x0040, 0x0040);
  uint16_t neg = f32ToBf16(fromBits(0xff800001));
  EXPECT_TRUE(std::isnan(bf16ToF32(neg)));
  EXPECT_EQ(neg & 0x8000, 0x8000);
  // Leading payload bits survive.
  EXPECT_EQ(f32ToBf16(fromBits(0x7fd50000)), 0x7fd5);
}

TEST(Bf16, SubnormalsRoundLikeEverythingElse) {
  EXPECT_EQ(f32ToBf16(fromBits(0x00010000)), 0x0001); // exact
  EXPECT_EQ(f32ToBf16(fromBits(0x00000001)), 0x0000); // tiny: to zero
  EXPECT_EQ(f32ToBf16(fromBits(0x00008000)), 0x0000); // tie, even 0
  EXPECT_EQ(f32ToBf16(fromBits(0x00018000)), 0x0002); // tie, even 2
  EXPECT_EQ(f32ToBf16(fromBits(0x007fffff)), 0x0080); // up to the min normal
  EXPECT_EQ(bf16ToF32(0x0001), fromBits(0x00010000));
}

// The midpoint of two neighbouring bf16 values is an f32; it must go to
// the one with the even pattern.
TEST(Bf16, EveryTieRoundsToEven) {
  for (uint32_t h = 0; h < 0x7f80; ++h) {
    uint32_t mid = (h << 16) | 0x8000;
    uint16_t even = (h & 1) ? uint16_t(h + 1) : uint16_t(h);
    ASSERT_EQ(f32ToBf16(fromBits(mid)), even) << std::hex << h;
    ASSERT_EQ(f32ToBf16(fromBits(mid | 0x80000000u)), even | 0x8000)
        << std::hex << h;
  }
}

TEST(Bf16, EveryBf16ValueRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    float f = bf16ToF32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16ToF32(f32ToBf16(f))));
      continue;
    }
    ASSERT_EQ(f32ToBf16(f), h) << std::hex << h;
  }
}

/// The nearer of the two values of a 16-bit format around f, ties to the
/// even pattern, by plain f64 comparisons.
template <typename ToF32>
uint16_t nearest(float f, uint16_t lo, uint16_t hi, ToF32 toF32,
                 double overflow) {
  double x = f, a = toF32(lo), b = toF32(hi);
  // Rounding works as if the exponent were unbounded: past the largest
  // finite value the next candidate is the next power of two (which then
  // overflows to infinity).
  if (std::isinf(b))
    b = std::copysign(overflow, b);
  double da = std::fabs(x - a), db = std::fabs(x - b);
  if (da < db)
    return lo;
  if (db < da)
    return hi;
  return (lo & 1) ? hi : lo;
}

TEST(Bf16, RandomValuesRoundToTheNearest) {
  std::mt19937 gen(7);
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = gen();
    float f = fromBits(u);
    if (std::isnan(f) || std::isinf(f))
      continue;
    uint16_t lo = uint16_t(u >> 16); // truncation: toward zero
    uint16_t hi = uint16_t(lo + 1);  // next away from zero
    if ((u & 0xffff) == 0) {
      ASSERT_EQ(f32ToBf16(f), lo);
      continue;
    }
    ASSERT_EQ(f32ToBf16(f), nearest(f, lo, hi, bf16ToF32, 0x1p128))
        << std::hex << u;
  }
}

TEST(F16, EdgeCases) {
  EXPECT_EQ(f32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(f32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(f32ToF16(65519.996f), 0x7bff);
  EXPECT_EQ(f32ToF16(65520.0f), 0x7c00); // tie with an odd 0x7bff: up, to inf
  EXPECT_EQ(f32ToF16(-1e6f), 0xfc00);
  EXPECT_EQ(f32ToF16(INFINITY), 0x7c00);
  EXPECT_EQ(f32ToF16(-0.0f), 0x8000);
  // 1 + 2^-11 is a tie between 0x3c00 (even) and 0x3c01.
  EXPECT_EQ(f32ToF16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(f32ToF16(1.0f + 3 * 0x1p-11f), 0x3c02);
  // Subnormals: multiples of 2^-24.
  EXPECT_EQ(f32ToF16(0x1p-24f), 0x0001);
  EXPECT_EQ(f32ToF16(0x1p-25f), 0x0000);          // tie, even 0
  EXPECT_EQ(f32ToF16(1.5f * 0x1p-25f), 0x0001);   // above the tie
  EXPECT_EQ(f32ToF16(3 * 0x1p-25f), 0x0002);      // tie between 1 and 2
  EXPECT_EQ(f32ToF16(5 * 0x1p-25f), 0x0002);      // tie between 2 and 3
  EXPECT_EQ(f32ToF16(0x1p-14f - 0x1p-25f), 0x0400); // tie, to the min normal
  EXPECT_EQ(f32ToF16(1e-10f), 0x0000);
  EXPECT_EQ(f16ToF32(0x0001), 0x1p-24f);
  EXPECT_EQ(f16ToF32(0x8001), -0x1p-24f);
  EXPECT_EQ(f16ToF32(0x03ff), 1023 * 0x1p-24f);
  // NaN stays NaN, quiet, with its sign.
  uint16_t n = f32ToF16(fromBits(0xff800001));
  EXPECT_TRUE(std::isnan(f16ToF32(n)));
  EXPECT_EQ(n & 0x8000, 0x8000);
  EXPECT_TRUE(std::isnan(f16ToF32(0x7c01)));
}

TEST(F16, EveryTieRoundsToEven) {
  // Midpoints of neighbouring f16 values (subnormals included) are exact
  // in f32; the one past the largest finite value goes to infinity.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    double a = f16ToF32(uint16_t(h));
    double b = h == 0x7bff ? 65536.0 : f16ToF32(uint16_t(h + 1));
    float mid = float((a + b) / 2);
    ASSERT_EQ(double(mid), (a + b) / 2);
    uint16_t even = (h & 1) ? uint16_t(h + 1) : uint16_t(h);
    ASSERT_EQ(f32ToF16(mid), even) << std::hex << h;
    ASSERT_EQ(f32ToF16(-mid), even | 0x8000) << std::hex << h;
  }
}

TEST(F16, EveryF16ValueRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    float f = f16ToF32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16ToF32(f32ToF16(f))));
      continue;
    }
    ASSERT_EQ(f32ToF16(f), h) << std::hex << h;
  }
}

TEST(F16, RandomValuesRoundToTheNearest) {
  std::mt19937 gen(8);
  std::uniform_real_distribution<float> mag(-30.0f, 17.0f);
  for (int i = 0; i < 200000; ++i) {
    float f = std::ldexp(1.0f + float(gen() >> 8) * 0x1p-24f, int(mag(gen)));
    if (gen() & 1)
      f = -f;
    uint16_t got = f32ToF16(f);
    if (std::fabs(f) >= 65520.0f) {
      ASSERT_EQ(got & 0x7fff, 0x7c00);
      continue;
    }
    // Candidates: the largest f16 magnitude <= |f| (binary search over
    // the ordered positive patterns) and the next one up.
    uint16_t sign = f < 0 ? 0x8000 : 0;
    float a = std::fabs(f);
    uint32_t lo = 0, hi = 0x7bff;
    while (lo < hi) {
      uint32_t mid = (lo + hi + 1) / 2;
      if (f16ToF32(uint16_t(mid)) <= a)
        lo = mid;
      else
        hi = mid - 1;
    }
    uint16_t want = f16ToF32(uint16_t(lo)) == a
                        ? uint16_t(lo)
                        : nearest(a, uint16_t(lo), uint16_t(lo + 1), f16ToF32, 65536.0);
    ASSERT_EQ(got, uint16_t(sign | want)) << f;
  }
}

#ifdef __FLT16_MAX__
// Where the compiler has _Float16, its conversions (IEEE, nearest even)
// must agree on every f16 and on random f32 bit patterns.
TEST(F16, AgreesWithTheCompilersFloat16) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    _Float16 x;
    uint16_t bits = uint16_t(h);
    std::memcpy(&x, &bits, 2);
    float f = float(x);
    if (std::isnan(f))
      continue;
    ASSERT_EQ(floatBits(f16ToF32(bits)), floatBits(f)) << std::hex << h;
  }
  std::mt19937 gen(9);
  for (int i = 0; i < 500000; ++i) {
    float f = fromBits(gen());
    if (std::isnan(f))
      continue;
    _Float16 x = _Float16(f);
    uint16_t want;
    std::memcpy(&want, &x, 2);
    ASSERT_EQ(f32ToF16(f), want) << std::hexfloat << f;
  }
}
#endif

} // namespace
} // namespace md::runtime
