//===- GemmTest.cpp - the CPU backend's GEMM entry points -----------------===//
//
// sgemm against f64 loops for every transpose, padded leading dimensions,
// alpha and beta; a cached primitive reused on other buffers; every path of
// every 16-bit operand type (the library's own where it has one, widened
// everywhere) against f64 and against sgemm on the widened operands (the
// same products, summed in f32); the paths gemmPaths() chooses under the
// ISA cap; a library failure as a Status naming the kernel, the shape, the
// types and the ISA. CTest runs this suite natively and under each cap
// below the CPU's (MD_CPU_ISA=avx2, sse41; test/CMakeLists.txt).
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
#include "runtime/cpu/CpuIsa.h"
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

using runtime::DType;

/// The 16-bit bits of `v` (whose values are exact in that type).
std::vector<uint16_t> to16(DType t, const std::vector<float> &v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = t == DType::bf16 ? runtime::f32ToBf16(v[i])
                              : runtime::f32ToF16(v[i]);
  return out;
}

/// Values exact in type t: rounded through it.
void roundThrough(DType t, std::vector<float> &v) {
  for (float &x : v)
    x = t == DType::bf16 ? runtime::bf16ToF32(runtime::f32ToBf16(x))
                         : runtime::f16ToF32(runtime::f32ToF16(x));
}

/// sgemm, which must succeed.
void sgemmOk(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
             const float *a, int64_t lda, const float *b, int64_t ldb,
             float beta, float *c, int64_t ldc) {
  absl::Status s =
      sgemm("test", ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  ASSERT_TRUE(s.ok()) << s;
}

/// Whether this process's library GEMM of 16-bit type t exists.
bool libraryHas(DType t) {
  return gemmPaths().of(t).path == GemmPath::onednn &&
         gemmPaths().of(t).warning.empty();
}

TEST(GemmTest, SgemmMatchesF64ForEveryLayoutAlphaAndBeta) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.25f, 1.0f},
                                 std::pair{-2.0f, 0.5f}}) {
        Problem p = make(ta, tb, 37, 19, 53, 1, false);
        std::vector<float> c = p.c;
        sgemmOk(ta, tb, p.m, p.n, p.k, alpha, p.a.data(), p.lda, p.b.data(),
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
  sgemmOk(false, true, 16, 8, 24, 1.0f, p1.a.data(), p1.lda, p1.b.data(),
          p1.ldb, 0.0f, c1.data(), p1.ldc);
  sgemmOk(false, true, 16, 8, 24, 1.0f, p2.a.data(), p2.lda, p2.b.data(),
          p2.ldb, 0.0f, c2.data(), p2.ldc);
  expectNear(p1, c1, reference(p1, 1.0f, 0.0f), 1e-4);
  expectNear(p2, c2, reference(p2, 1.0f, 0.0f), 1e-4);
}

TEST(GemmTest, AnEmptyContractionIsBetaTimesC) {
  Problem p = make(false, false, 4, 3, 0, 4, false);
  p.c.assign(p.m * p.ldc, 2.0f);
  std::vector<float> c = p.c;
  sgemmOk(false, false, p.m, p.n, 0, 1.0f, nullptr, 1, nullptr, 1, 0.5f,
          c.data(), p.ldc);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j)
      ASSERT_EQ(c[i * p.ldc + j], 1.0f);
}

// Every path a 16-bit type can take here, for both types, every layout,
// and M large enough that the widened path works in several blocks of rows
// (with a tail): within f32 rounding of f64, and of sgemm on the widened
// values (the same exact products, summed in another order).
TEST(GemmTest, EverySixteenBitPathIsSgemmOfTheWidenedOperands) {
  for (DType t : {DType::bf16, DType::f16})
    for (GemmPath path : {GemmPath::onednn, GemmPath::widened}) {
      if (path == GemmPath::onednn && !libraryHas(t))
        continue; // GemmTest.ALibraryFailureIsAStatus covers it
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          // K = 1100: the widened path's blocks hold 59 rows of A, so
          // M = 133 is two full blocks and a tail.
          Problem p = make(ta, tb, 133, 21, 1100, 5, false);
          roundThrough(t, p.a);
          roundThrough(t, p.b);
          std::vector<float> viaF32 = p.c, via16 = p.c;
          sgemmOk(ta, tb, p.m, p.n, p.k, 0.5f, p.a.data(), p.lda, p.b.data(),
                  p.ldb, 1.0f, viaF32.data(), p.ldc);
          std::vector<uint16_t> a = to16(t, p.a), b = to16(t, p.b);
          absl::Status s = gemmVia(path, "test", ta, tb, p.m, p.n, p.k, 0.5f,
                                   {t, a.data(), p.lda}, {t, b.data(), p.ldb},
                                   1.0f, via16.data(), p.ldc);
          ASSERT_TRUE(s.ok()) << s;
          std::vector<double> want = reference(p, 0.5f, 1.0f);
          SCOPED_TRACE(::testing::Message()
                       << runtime::dtypeName(t) << " "
                       << (path == GemmPath::onednn ? "onednn" : "widened"));
          expectNear(p, via16, want, 1e-3);
          for (int64_t i = 0; i < p.m; ++i)
            for (int64_t j = 0; j < p.n; ++j)
              ASSERT_NEAR(via16[i * p.ldc + j], viaF32[i * p.ldc + j],
                          2e-6 * (std::sqrt(double(p.k)) +
                                  std::fabs(want[i * p.ldc + j])))
                  << i << ", " << j;
        }
    }
}

// Mixed operand types (a bf16 weight against an f32 gradient) widen the
// 16-bit one alone.
TEST(GemmTest, MixedOperandTypesWidenTheSixteenBitOne) {
  Problem p = make(false, true, 70, 9, 33, 6, false);
  roundThrough(DType::bf16, p.b);
  std::vector<uint16_t> b = to16(DType::bf16, p.b);
  std::vector<float> c = p.c, viaF32 = p.c;
  absl::Status s =
      gemm("test", false, true, p.m, p.n, p.k, 1.0f,
           {DType::f32, p.a.data(), p.lda}, {DType::bf16, b.data(), p.ldb},
           0.0f, c.data(), p.ldc);
  ASSERT_TRUE(s.ok()) << s;
  sgemmOk(false, true, p.m, p.n, p.k, 1.0f, p.a.data(), p.lda, p.b.data(),
          p.ldb, 0.0f, viaF32.data(), p.ldc);
  expectNear(p, c, reference(p, 1.0f, 0.0f), 1e-4);
  // B widened whole and A as it is: the very sgemm.
  EXPECT_EQ(std::memcmp(c.data(), viaF32.data(), c.size() * sizeof(float)), 0);
}

// What the paths are under the ISA in force (natively, or under the cap
// CTest sets): bf16 on the library only with bf16 dot products; every
// path's text in the report; the cap reaches oneDNN.
TEST(GemmTest, ThePathsFollowTheIsa) {
  const GemmPaths &p = gemmPaths();
  const CpuIsaConfig &isa = CpuIsa();
  ASSERT_TRUE(isa.error.ok()) << isa.error;
  EXPECT_FALSE(p.f32.text.empty());
  EXPECT_NE(p.str().find("bf16: "), std::string::npos) << p.str();
  EXPECT_NE(p.isa.find(IsaLevelName(isa.effective)), std::string::npos)
      << p.isa;
  // f32: OpenBLAS at the avx2 level while it runs its AVX2 kernels (as
  // test/isa/capped.sh and mdrun's launcher have it), oneDNN elsewhere.
  const char *f32Forced = std::getenv("MD_CPU_GEMM_F32");
  const char *core = std::getenv("OPENBLAS_CORETYPE");
  const std::string blas = blasName();
  if ((f32Forced == nullptr || std::string(f32Forced).empty()) &&
      blas.rfind("oneDNN", 0) == 0) {
    if (isa.effective != IsaLevel::avx2)
      EXPECT_EQ(p.f32.path, GemmPath::onednn) << p.f32.text;
    else if (blas.find("OpenBLAS") != std::string::npos && core != nullptr &&
             std::string(core) == "Haswell")
      EXPECT_EQ(p.f32.path, GemmPath::openblas) << p.f32.text;
  }
  const char *forced = std::getenv("MD_CPU_GEMM_BF16");
  if (forced == nullptr || std::string(forced).empty() ||
      std::string(forced) == "auto") {
    if (!isa.allows(IsaLevel::avx512_bf16))
      EXPECT_EQ(p.bf16.path, GemmPath::widened) << p.bf16.text;
  }
  if (std::string(blasName()).rfind("oneDNN", 0) == 0 && isa.cap) {
    // oneDNN's own ISA is named after md's: capped at avx2, "oneDNN avx2".
    const std::string want =
        isa.effective == IsaLevel::sse41    ? "oneDNN sse41"
        : isa.effective == IsaLevel::avx2   ? "oneDNN avx2"
        : isa.effective == IsaLevel::avx512 ? "oneDNN avx512_core"
                                            : "oneDNN avx512_core_";
    EXPECT_NE(p.isa.find(want), std::string::npos) << p.isa;
  }
}

// A bf16 GEMM runs on every ISA: the job that aborted at step 1 on AVX2.
TEST(GemmTest, ABf16GemmRunsUnderEveryIsa) {
  Problem p = make(false, true, 64, 48, 96, 8, true);
  std::vector<uint16_t> a = to16(DType::bf16, p.a), b = to16(DType::bf16, p.b);
  std::vector<float> c = p.c;
  absl::Status s = gemm("matmul", false, true, p.m, p.n, p.k, 1.0f,
                        {DType::bf16, a.data(), p.lda},
                        {DType::bf16, b.data(), p.ldb}, 0.0f, c.data(), p.ldc);
  ASSERT_TRUE(s.ok()) << s << " (" << gemmPaths().str() << ")";
  expectNear(p, c, reference(p, 1.0f, 0.0f), 1e-3);
}

// The library refusing a GEMM (here: oneDNN asked for a 16-bit matmul it
// cannot create under this ISA) is a Status that names the kernel, the
// shape, the types and the ISA; nothing throws.
TEST(GemmTest, ALibraryFailureIsAStatus) {
  if (std::string(blasName()).rfind("oneDNN", 0) != 0)
    GTEST_SKIP() << "the failure is oneDNN's; this build runs " << blasName();
  DType t = DType::f16;
  if (libraryHas(DType::f16)) {
    if (libraryHas(DType::bf16))
      GTEST_SKIP() << "oneDNN creates every 16-bit matmul on this CPU ("
                   << gemmPaths().str() << ")";
    t = DType::bf16;
  }
  Problem p = make(true, false, 12, 10, 8, 9, true);
  std::vector<uint16_t> a = to16(t, p.a), b = to16(t, p.b);
  std::vector<float> c = p.c;
  absl::Status s = gemmVia(GemmPath::onednn, "matmul_grad", true, false, p.m,
                           p.n, p.k, 1.0f, {t, a.data(), p.lda},
                           {t, b.data(), p.ldb}, 0.0f, c.data(), p.ldc);
  ASSERT_FALSE(s.ok());
  const std::string m(s.message());
  const std::string ty = runtime::dtypeName(t);
  EXPECT_EQ(m.rfind("matmul_grad: oneDNN ", 0), 0) << m;
  EXPECT_NE(m.find("C f32[12, 10] = A^T " + ty + "[8, 12] x B " + ty +
                   "[8, 10] (lda 15, ldb 12, ldc 15"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(std::string("on ISA ") + IsaLevelName(CpuIsa().effective)),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("could not create"), std::string::npos) << m;
  // C is untouched.
  EXPECT_EQ(std::memcmp(c.data(), p.c.data(), c.size() * sizeof(float)), 0);
}

// docs/runtime.md ("Determinism") says which GEMMs' bits depend on the BLAS
// thread count with the oneDNN build. A primitive is built per shape on the
// thread that runs it, with that thread's OpenMP thread count, so each count
// runs on a fresh thread (a fresh primitive cache), as each rank's process
// does. Everywhere, a thread count gives the same bits run after run. With
// AVX-512 (oneDNN's brgemm kernels) the GPT models' shapes (x = B * T rows:
// forward nt, the weight gradient tn over all rows, the input gradient nn)
// and an odd one also give the same bits at 1, 2, 3, 4 and 8 threads; a
// small output with a long sum (64 x 64, K = 16384), which oneDNN splits
// over threads (f32 from 8, bf16 from 3), only at 1 and 2. Below AVX-512
// (oneDNN's gemm:jit kernels) the split over threads changes the bits of
// some shapes from 2 threads on, so no count but one's own is claimed.
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
  // Each shape in f32 and with bf16 operands (the zero1 and fsdp presets'
  // bf16 parameters), on whichever path bf16 takes here.
  auto run = [&](int threads) {
    std::vector<std::vector<float>> results;
    setBlasThreads(threads);
    std::thread worker([&] {
      for (const Shape &s : shapes) {
        Problem p = make(s.ta, s.tb, s.m, s.n, s.k, 11, false);
        sgemmOk(s.ta, s.tb, s.m, s.n, s.k, 1.0f, p.a.data(), p.lda,
                p.b.data(), p.ldb, 0.0f, p.c.data(), p.ldc);
        results.push_back(p.c);
        std::vector<uint16_t> a = to16(DType::bf16, p.a),
                              b = to16(DType::bf16, p.b);
        absl::Status st =
            gemm("test", s.ta, s.tb, s.m, s.n, s.k, 1.0f,
                 {DType::bf16, a.data(), p.lda}, {DType::bf16, b.data(), p.ldb},
                 0.0f, p.c.data(), p.ldc);
        ASSERT_TRUE(st.ok()) << st;
        results.push_back(p.c);
      }
    });
    worker.join();
    return results;
  };
  std::vector<std::vector<float>> one = run(1);
  for (int threads : {1, 3}) {
    std::vector<std::vector<float>> again = run(threads), first = run(threads);
    ASSERT_EQ(again.size(), first.size());
    for (size_t i = 0; i < again.size(); ++i)
      EXPECT_EQ(std::memcmp(again[i].data(), first[i].data(),
                            again[i].size() * sizeof(float)),
                0)
          << "run twice with " << threads << " threads: result " << i;
  }
  if (!CpuIsa().allows(IsaLevel::avx512)) {
    setBlasThreads(0);
    return; // only a thread count's own bits are claimed here
  }
  for (int threads : {2, 3, 4, 8}) {
    std::vector<std::vector<float>> many = run(threads);
    ASSERT_EQ(many.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      const Shape &s = shapes[i / 2];
      if (threads > s.maxThreads)
        continue;
      EXPECT_EQ(std::memcmp(one[i].data(), many[i].data(),
                            one[i].size() * sizeof(float)),
                0)
          << (i % 2 ? "bf16 " : "f32 ") << s.m << "x" << s.n << "x" << s.k
          << " with " << threads << " threads (" << gemmPaths().bf16.text
          << ")";
    }
  }
  setBlasThreads(0);
}

} // namespace
} // namespace md::cpu
