//===- AttentionTest.cpp - the CPU backend's blocked causal attention -----===//
//
// The CPU backend computes causal attention in tiles of query rows, each
// against the keys up to its last row (runtime/cpu/Attention.cpp). These
// tests hold it to the kernel it replaced: per head, S = Q K^T / sqrt(d)
// for the whole [T, T] square through sgemm, masked afterwards, softmax by
// Rows.h, then the full-width products of the forward and the gradient.
// Both sum in f32 inside the GEMMs, in different orders, so they agree to
// rounding: within 2e-6 of the largest magnitude of the compared tensor
// (a few f32 ulps of it; the sums run over at most T = 97 terms). Sizes
// cover T = 1, T below, at and above the tile, several heads and batch
// entries. The tiled kernel must also give the same bits on every call,
// and with one tile (T <= 64) the very bits of the full-square kernel.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/core/Backend.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/Rows.h"
#include "gtest/gtest.h"

namespace md::cpu {
namespace {

using runtime::DType;
using runtime::TensorRef;

/// Gemm.h's sgemm, which must succeed.
void gemmOk(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
            const float *a, int64_t lda, const float *b, int64_t ldb,
            float beta, float *c, int64_t ldc) {
  absl::Status s = sgemm("reference attention", ta, tb, m, n, k, alpha, a, lda,
                         b, ldb, beta, c, ldc);
  ASSERT_TRUE(s.ok()) << s;
}

/// The attention kernel before tiling, kept here as the reference.
struct Reference {
  int64_t b, t, c, heads;
  int64_t hd() const { return c / heads; }
  float scale() const { return float(1.0 / std::sqrt(double(hd()))); }

  void probs(const float *q, const float *k, float *p) const {
    gemmOk(false, true, t, t, hd(), scale(), q, c, k, c, 0.0f, p, t);
    for (int64_t i = 0; i < t; ++i) {
      float *row = p + i * t;
      softmaxRow(row, row, i + 1);
      std::fill(row + i + 1, row + t, 0.0f);
    }
  }

  std::vector<float> forward(const std::vector<float> &q,
                             const std::vector<float> &k,
                             const std::vector<float> &v) const {
    std::vector<float> out(q.size()), p(t * t);
    for (int64_t e = 0; e < b; ++e)
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t off = e * t * c + h * hd();
        probs(q.data() + off, k.data() + off, p.data());
        gemmOk(false, false, t, hd(), t, 1.0f, p.data(), t, v.data() + off, c,
              0.0f, out.data() + off, c);
      }
    return out;
  }

  void backward(const std::vector<float> &dout, const std::vector<float> &q,
                const std::vector<float> &k, const std::vector<float> &v,
                std::vector<float> &dq, std::vector<float> &dk,
                std::vector<float> &dv) const {
    dq.assign(q.size(), 0.0f);
    dk.assign(q.size(), 0.0f);
    dv.assign(q.size(), 0.0f);
    std::vector<float> p(t * t), ds(t * t);
    for (int64_t e = 0; e < b; ++e)
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t off = e * t * c + h * hd();
        probs(q.data() + off, k.data() + off, p.data());
        gemmOk(true, false, t, hd(), t, 1.0f, p.data(), t, dout.data() + off, c,
              0.0f, dv.data() + off, c);
        gemmOk(false, true, t, t, hd(), 1.0f, dout.data() + off, c,
              v.data() + off, c, 0.0f, ds.data(), t);
        for (int64_t i = 0; i < t; ++i) {
          float *dr = ds.data() + i * t;
          softmaxGradRow(dr, p.data() + i * t, dr, i + 1);
          std::fill(dr + i + 1, dr + t, 0.0f);
        }
        gemmOk(false, false, t, hd(), t, scale(), ds.data(), t, k.data() + off,
              c, 0.0f, dq.data() + off, c);
        gemmOk(true, false, t, hd(), t, scale(), ds.data(), t, q.data() + off, c,
              0.0f, dk.data() + off, c);
      }
  }
};

std::vector<float> randomValues(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

/// |a - b| <= 2e-6 * max|b| elementwise; names the first element that is
/// not.
testing::AssertionResult closeToReference(const std::vector<float> &a,
                                          const std::vector<float> &b) {
  float scale = 0;
  for (float x : b)
    scale = std::max(scale, std::fabs(x));
  const float tol = 2e-6f * std::max(scale, 1e-30f);
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= tol))
      return testing::AssertionFailure()
             << "element " << i << ": " << a[i] << " vs reference " << b[i]
             << " (tolerance " << tol << ")";
  return testing::AssertionSuccess();
}

/// The kernel's tile (kTile in Attention.cpp): up to this T it runs the
/// full-square kernel's GEMMs.
constexpr int64_t kOneTile = 64;

struct Size {
  int64_t b, t, c, heads;
};

class AttentionTest : public testing::TestWithParam<Size> {
protected:
  CpuBackend backend_{1};
};

TEST_P(AttentionTest, ForwardMatchesFullReference) {
  const Size s = GetParam();
  const Reference ref{s.b, s.t, s.c, s.heads};
  const int64_t n = s.b * s.t * s.c;
  std::vector<float> q = randomValues(n, 1), k = randomValues(n, 2),
                     v = randomValues(n, 3), out(n, NAN), again(n, NAN);
  const runtime::Shape shape{s.b, s.t, s.c};
  runtime::CausalAttentionArgs args;
  args.q = TensorRef(q.data(), DType::f32, shape);
  args.k = TensorRef(k.data(), DType::f32, shape);
  args.v = TensorRef(v.data(), DType::f32, shape);
  args.out = TensorRef(out.data(), DType::f32, shape);
  args.numHeads = s.heads;
  ASSERT_TRUE(backend_.causalAttention(args).ok());
  const std::vector<float> full = ref.forward(q, k, v);
  EXPECT_TRUE(closeToReference(out, full));
  if (s.t <= kOneTile) {
    EXPECT_EQ(0, std::memcmp(out.data(), full.data(), n * sizeof(float)));
  }
  args.out = TensorRef(again.data(), DType::f32, shape);
  ASSERT_TRUE(backend_.causalAttention(args).ok());
  EXPECT_EQ(0, std::memcmp(out.data(), again.data(), n * sizeof(float)));
}

TEST_P(AttentionTest, GradientMatchesFullReference) {
  const Size s = GetParam();
  const Reference ref{s.b, s.t, s.c, s.heads};
  const int64_t n = s.b * s.t * s.c;
  std::vector<float> q = randomValues(n, 4), k = randomValues(n, 5),
                     v = randomValues(n, 6), dout = randomValues(n, 7);
  // NaN-filled: the kernel must write every element of its results.
  std::vector<float> dq(n, NAN), dk(n, NAN), dv(n, NAN);
  const runtime::Shape shape{s.b, s.t, s.c};
  auto run = [&](std::vector<float> &gq, std::vector<float> &gk,
                 std::vector<float> &gv) {
    runtime::CausalAttentionGradArgs args;
    args.dout = TensorRef(dout.data(), DType::f32, shape);
    args.q = TensorRef(q.data(), DType::f32, shape);
    args.k = TensorRef(k.data(), DType::f32, shape);
    args.v = TensorRef(v.data(), DType::f32, shape);
    args.dq = TensorRef(gq.data(), DType::f32, shape);
    args.dk = TensorRef(gk.data(), DType::f32, shape);
    args.dv = TensorRef(gv.data(), DType::f32, shape);
    args.numHeads = s.heads;
    return backend_.causalAttentionGrad(args);
  };
  ASSERT_TRUE(run(dq, dk, dv).ok());
  std::vector<float> rq, rk, rv;
  ref.backward(dout, q, k, v, rq, rk, rv);
  EXPECT_TRUE(closeToReference(dq, rq)) << "dq";
  EXPECT_TRUE(closeToReference(dk, rk)) << "dk";
  EXPECT_TRUE(closeToReference(dv, rv)) << "dv";
  if (s.t <= kOneTile) {
    EXPECT_EQ(0, std::memcmp(dq.data(), rq.data(), n * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(dk.data(), rk.data(), n * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(dv.data(), rv.data(), n * sizeof(float)));
  }
  std::vector<float> q2(n, NAN), k2(n, NAN), v2(n, NAN);
  ASSERT_TRUE(run(q2, k2, v2).ok());
  EXPECT_EQ(0, std::memcmp(dq.data(), q2.data(), n * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dk.data(), k2.data(), n * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dv.data(), v2.data(), n * sizeof(float)));
}

// T = 1; below, at and above the 64-row tile; several tiles with a ragged
// last one; one and several heads; head dims 1 to 16.
INSTANTIATE_TEST_SUITE_P(Sizes, AttentionTest,
                         testing::Values(Size{1, 1, 4, 1}, Size{2, 1, 6, 3},
                                         Size{2, 5, 6, 3}, Size{1, 63, 8, 2},
                                         Size{1, 64, 8, 1}, Size{2, 65, 12, 3},
                                         Size{1, 97, 48, 3},
                                         Size{1, 130, 16, 4}));

} // namespace
} // namespace md::cpu
