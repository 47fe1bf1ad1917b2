//===- VecMathTest.cpp - the CPU kernels' vectorised exp and tanh ---------===//
//
// Every variant this CPU can run against libm in f64 (accuracy, special
// values), the FMA variants against each other bit for bit (VecMath.h's
// promise of the same bits on every CPU with FMA), and an element's bits
// independent of the array's length and the element's position.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/VecMath.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace md::cpu {
namespace {

constexpr VecIsa kAll[] = {VecIsa::avx512f, VecIsa::avx2fma, VecIsa::sse2,
                           VecIsa::scalar};

const char *name(VecIsa isa) {
  switch (isa) {
  case VecIsa::avx512f:
    return "avx512f";
  case VecIsa::avx2fma:
    return "avx2fma";
  case VecIsa::sse2:
    return "sse2";
  case VecIsa::scalar:
    return "scalar";
  }
  return "?";
}

std::vector<float> inputs(float lo, float hi, int n) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> x(n);
  for (float &v : x)
    v = dist(gen);
  return x;
}

bool sameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

TEST(VecMathTest, ExpIsWithinTwoUlpOfLibmInEveryVariant) {
  // Softmax and cross-entropy take exp of x - max <= 0; the range covers
  // that and the positive side up to near overflow.
  std::vector<float> x = inputs(-87.0f, 88.0f, 20000);
  std::vector<float> y(x.size());
  for (VecIsa isa : kAll) {
    if (!VecIsaSupported(isa))
      continue;
    VecExpWith(isa, x.data(), y.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      double want = std::exp(double(x[i]));
      ASSERT_NEAR(y[i], want, 2.5e-7 * want)
          << name(isa) << " exp(" << x[i] << ")";
    }
  }
}

TEST(VecMathTest, ExpSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f,   -inf,
                          inf,    -200.0f,
                          200.0f, std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> y(x.size());
  for (VecIsa isa : kAll) {
    if (!VecIsaSupported(isa))
      continue;
    VecExpWith(isa, x.data(), y.data(), x.size());
    EXPECT_EQ(y[0], 1.0f) << name(isa);
    EXPECT_EQ(y[1], 0.0f) << name(isa);
    EXPECT_EQ(y[2], inf) << name(isa);
    EXPECT_EQ(y[3], 0.0f) << name(isa);
    EXPECT_EQ(y[4], inf) << name(isa);
    EXPECT_TRUE(std::isnan(y[5])) << name(isa);
  }
}

TEST(VecMathTest, TanhIsWithinTwoUlpOfLibmInEveryVariant) {
  // GELU's u = k (x + c x^3) for activations of a few units.
  std::vector<float> x = inputs(-12.0f, 12.0f, 20000);
  x.push_back(0.0f);
  x.push_back(1e-6f);
  x.push_back(-30.0f);
  std::vector<float> y(x.size());
  for (VecIsa isa : kAll) {
    if (!VecIsaSupported(isa))
      continue;
    VecTanhWith(isa, x.data(), y.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      double want = std::tanh(double(x[i]));
      ASSERT_NEAR(y[i], want, 2.5e-7 * std::fabs(want) + 1e-30)
          << name(isa) << " tanh(" << x[i] << ")";
    }
  }
}

TEST(VecMathTest, FmaVariantsAgreeBitForBit) {
  if (!VecIsaSupported(VecIsa::avx512f) || !VecIsaSupported(VecIsa::avx2fma))
    GTEST_SKIP() << "this CPU lacks AVX-512F or AVX2+FMA: nothing to compare";
  // Bit patterns across the whole float range, NaNs and denormals included.
  std::vector<float> x;
  for (uint64_t b = 0; b < (1ull << 32); b += 65537) {
    uint32_t u = static_cast<uint32_t>(b);
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  std::vector<float> a(x.size()), b(x.size());
  for (bool tanh : {false, true}) {
    auto run = tanh ? VecTanhWith : VecExpWith;
    run(VecIsa::avx512f, x.data(), a.data(), x.size());
    run(VecIsa::avx2fma, x.data(), b.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_TRUE(sameBits(a[i], b[i])) << (tanh ? "tanh(" : "exp(") << x[i]
                                        << "): " << a[i] << " vs " << b[i];
  }
}

TEST(VecMathTest, AnElementsBitsDoNotDependOnTheArray) {
  std::vector<float> x = inputs(-20.0f, 5.0f, 37);
  std::vector<float> whole(x.size());
  VecExp(x.data(), whole.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    float one;
    VecExp(&x[i], &one, 1);
    EXPECT_TRUE(sameBits(one, whole[i])) << "element " << i;
  }
  // In place, and a length that leaves a tail in every variant.
  std::vector<float> inPlace = x;
  VecExp(inPlace.data(), inPlace.data(), inPlace.size());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_TRUE(sameBits(inPlace[i], whole[i])) << "element " << i;
}

TEST(VecMathTest, NamesTheVariantInUse) {
  std::string v = VecMathVariant();
  EXPECT_TRUE(v == "avx512f" || v == "avx2+fma" || v == "sse2" || v == "scalar")
      << v;
}

} // namespace
} // namespace md::cpu
