//===- GemmTest.cpp - the CPU backend's GEMM entry points -----------------===//
//
// sgemm and gemmBf16 against f64 loops for every transpose, padded leading
// dimensions, alpha and beta; a cached primitive reused on other buffers;
// and gemmBf16 against sgemm on the widened operands (the same products,
// summed in f32).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Gemm.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/NumberFormat.h"
#include "gtest/gtest.h"

namespace md::cpu {
namespace {

struct Problem {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  std::vector<float> a, b, c;
};

Problem make(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int seed,
             bool bf16Values) {
  Problem p{ta, tb, m, n, k, 0, 0, 0, {}, {}, {}};
  // Leading dims wider than the rows, so strides are exercised.
  p.lda = (ta ? m : k) + 3;
  p.ldb = (tb ? k : n) + 2;
  p.ldc = n + 5;
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  auto fill = [&](std::vector<float> &v, int64_t size) {
    v.resize(size);
    for (float &x : v)
      x = bf16Values ? runtime::bf16ToF32(runtime::f32ToBf16(dist(gen)))
                     : dist(gen);
  };
  fill(p.a, (ta ? k : m) * p.lda);
  fill(p.b, (tb ? n : k) * p.ldb);
  fill(p.c, m * p.ldc);
  return p;
}

/// alpha op(A) op(B) + beta C in f64.
std::vector<double> reference(const Problem &p, float alpha, float beta) {
  std::vector<double> out(p.m * p.ldc);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      double s = 0;
      for (int64_t q = 0; q < p.k; ++q)
        s += double(p.ta ? p.a[q * p.lda + i] : p.a[i * p.lda + q]) *
             double(p.tb ? p.b[j * p.ldb + q] : p.b[q * p.ldb + j]);
      out[i * p.ldc + j] =
          alpha * s + (beta == 0 ? 0.0 : beta * double(p.c[i * p.ldc + j]));
    }
  return out;
}

void expectNear(const Problem &p, const std::vector<float> &got,
                const std::vector<double> &want, double tol) {
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j)
      ASSERT_NEAR(got[i * p.ldc + j], want[i * p.ldc + j], tol)
          << "at " << i << ", " << j << " ta=" << p.ta << " tb=" << p.tb;
}

std::vector<uint16_t> toBf16(const std::vector<float> &v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = runtime::f32ToBf16(v[i]);
  return out;
}

TEST(GemmTest, SgemmMatchesF64ForEveryLayoutAlphaAndBeta) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.25f, 1.0f},
                                 std::pair{-2.0f, 0.5f}}) {
        Problem p = make(ta, tb, 37, 19, 53, 1, false);
        std::vector<float> c = p.c;
        sgemm(ta, tb, p.m, p.n, p.k, alpha, p.a.data(), p.lda, p.b.data(),
              p.ldb, beta, c.data(), p.ldc);
        expectNear(p, c, reference(p, alpha, beta), 1e-4);
        // Padding columns of C are never written.
        for (int64_t i = 0; i < p.m; ++i)
          for (int64_t j = p.n; j < p.ldc; ++j)
            ASSERT_EQ(c[i * p.ldc + j], p.c[i * p.ldc + j]);
      }
}

TEST(GemmTest, AReusedShapeComputesOnTheNewBuffers) {
  // The second call of a shape reuses whatever the first built; it must
  // read and write the buffers it is given now.
  Problem p1 = make(false, true, 16, 8, 24, 2, false);
  Problem p2 = make(false, true, 16, 8, 24, 3, false);
  std::vector<float> c1 = p1.c, c2 = p2.c;
  sgemm(false, true, 16, 8, 24, 1.0f, p1.a.data(), p1.lda, p1.b.data(), p1.ldb,
        0.0f, c1.data(), p1.ldc);
  sgemm(false, true, 16, 8, 24, 1.0f, p2.a.data(), p2.lda, p2.b.data(), p2.ldb,
        0.0f, c2.data(), p2.ldc);
  expectNear(p1, c1, reference(p1, 1.0f, 0.0f), 1e-4);
  expectNear(p2, c2, reference(p2, 1.0f, 0.0f), 1e-4);
}

TEST(GemmTest, AnEmptyContractionIsBetaTimesC) {
  Problem p = make(false, false, 4, 3, 0, 4, false);
  p.c.assign(p.m * p.ldc, 2.0f);
  std::vector<float> c = p.c;
  sgemm(false, false, p.m, p.n, 0, 1.0f, nullptr, 1, nullptr, 1, 0.5f, c.data(),
        p.ldc);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j)
      ASSERT_EQ(c[i * p.ldc + j], 1.0f);
}

TEST(GemmTest, Bf16GemmIsSgemmOfTheWidenedOperands) {
  if (!haveGemmBf16())
    GTEST_SKIP() << "this build's GEMM library has no bf16 GEMM";
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      // bf16 values: products are exact in f32, so only the order of the
      // f32 sums may differ from sgemm's.
      Problem p = make(ta, tb, 33, 21, 64, 5, true);
      std::vector<float> viaF32 = p.c, viaBf16 = p.c;
      sgemm(ta, tb, p.m, p.n, p.k, 0.5f, p.a.data(), p.lda, p.b.data(), p.ldb,
            1.0f, viaF32.data(), p.ldc);
      std::vector<uint16_t> a = toBf16(p.a), b = toBf16(p.b);
      gemmBf16(ta, tb, p.m, p.n, p.k, 0.5f, a.data(), p.lda, b.data(), p.ldb,
               1.0f, viaBf16.data(), p.ldc);
      std::vector<double> want = reference(p, 0.5f, 1.0f);
      expectNear(p, viaBf16, want, 1e-4);
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j)
          ASSERT_NEAR(viaBf16[i * p.ldc + j], viaF32[i * p.ldc + j],
                      2e-6 * (1 + std::fabs(want[i * p.ldc + j])));
    }
}

// docs/runtime.md ("Determinism") says which GEMMs' bits depend on the BLAS
// thread count with the oneDNN build. A primitive is built per shape on the
// thread that runs it, with that thread's OpenMP thread count, so each count
// runs on a fresh thread (a fresh primitive cache), as each rank's process
// does. The GPT models' shapes (x = B * T rows: forward nt, the weight
// gradient tn over all rows, the input gradient nn) and an odd one give the
// same bits at 1, 2, 3, 4 and 8 threads; a small output with a long sum
// (64 x 64, K = 16384), which oneDNN splits over threads (f32 from 8, bf16
// from 3), only at 1 and 2.
TEST(GemmTest, OneDnnGivesTheSameBitsForAnyThreadCount) {
  if (std::string(blasName()).rfind("oneDNN", 0) != 0)
    GTEST_SKIP() << "the thread-count rule is oneDNN's; this build runs "
                 << blasName();
  struct Shape {
    bool ta, tb;
    int64_t m, n, k;
    int maxThreads; // the most threads that give the same bits as one
  };
  const Shape shapes[] = {{false, true, 2048, 768, 768, 8},
                          {true, false, 768, 3072, 2048, 8},
                          {false, false, 2048, 768, 3072, 8},
                          {true, false, 64, 64, 16384, 2},
                          {false, true, 333, 517, 291, 8}};
  // Each shape in f32 (sgemm) and, where the build has it, with bf16
  // operands (gemmBf16: the zero1 and fsdp presets' bf16 parameters).
  const bool bf16 = haveGemmBf16();
  auto run = [&](int threads) {
    std::vector<std::vector<float>> results;
    setBlasThreads(threads);
    std::thread worker([&] {
      for (const Shape &s : shapes) {
        Problem p = make(s.ta, s.tb, s.m, s.n, s.k, 11, false);
        sgemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, p.a.data(), p.lda, p.b.data(),
              p.ldb, 0.0f, p.c.data(), p.ldc);
        results.push_back(p.c);
        if (!bf16)
          continue;
        std::vector<uint16_t> a = toBf16(p.a), b = toBf16(p.b);
        gemmBf16(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), p.lda, b.data(),
                 p.ldb, 0.0f, p.c.data(), p.ldc);
        results.push_back(p.c);
      }
    });
    worker.join();
    return results;
  };
  std::vector<std::vector<float>> one = run(1);
  for (int threads : {2, 3, 4, 8}) {
    std::vector<std::vector<float>> many = run(threads);
    for (size_t i = 0; i < one.size(); ++i) {
      const Shape &s = shapes[bf16 ? i / 2 : i];
      if (threads > s.maxThreads)
        continue;
      EXPECT_EQ(std::memcmp(one[i].data(), many[i].data(),
                            one[i].size() * sizeof(float)),
                0)
          << (bf16 && i % 2 ? "bf16 " : "f32 ") << s.m << "x" << s.n << "x"
          << s.k << " with " << threads << " threads";
    }
  }
  setBlasThreads(0);
}

} // namespace
} // namespace md::cpu
