//===- KernelTest.cpp - forward kernels against naive f64 references ------===//
//
// Every forward kernel of runtime::Backend on small odd shapes, compared
// with KernelReference.h. Tolerances: f32 results within a few f32 ulps of
// the f64 reference (rtol 1e-5 unless stated); bf16/f16 results within one
// ulp of their type of the reference computed from the rounded inputs;
// pure data movement and single f32 operations bit for bit.
//
//===----------------------------------------------------------------------===//

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "runtime/core/BackendChecks.h"
#include "runtime/core/OpChecks.h"
#include "runtime/core/OptimizerScalars.h"
#include "runtime/core/Strides.h"
#include "runtime/cpu/Rows.h"
#include "test/unit/BackendTestUtil.h"
#include "test/unit/KernelReference.h"
#include "test/unit/TestBackends.h"

namespace md::test {
namespace {

using namespace md::runtime;

class KernelTest : public ::testing::TestWithParam<BackendFactory> {
protected:
  void SetUp() override { MD_MAKE_BACKEND_OR_SKIP(GetParam(), backend_); }
  Backend &be() { return *backend_; }
  DeviceTensor floats(DType t, Shape s, const std::vector<double> &v) {
    return DeviceTensor::floats(be(), t, std::move(s), v);
  }
  DeviceTensor zeros(DType t, Shape s) { return DeviceTensor(be(), t, s); }
  DeviceTensor ids(DType t, Shape s, const std::vector<int64_t> &v) {
    return DeviceTensor::indices(be(), t, std::move(s), v);
  }
  std::unique_ptr<Backend> backend_;
};

INSTANTIATE_TEST_SUITE_P(Backends, KernelTest,
                         ::testing::ValuesIn(testBackends()), backendName);

/// Tolerance for a result of type t computed from inputs of type t.
double rtolFor(DType t) {
  return t == DType::f32 ? 1e-5 : t == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
}

//===----------------------------------------------------------------------===//
// Memory, streams, events
//===----------------------------------------------------------------------===//

TEST_P(KernelTest, AllocationsAreAlignedAndZeroed) {
  for (int64_t bytes : {1, 63, 64, 1000}) {
    auto buffer = be().allocate(bytes);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % kAllocAlignment,
              0u);
    EXPECT_EQ(buffer->bytes(), bytes);
    std::vector<uint8_t> host(bytes, 0xff);
    ASSERT_TRUE(
        be().copy(host.data(), buffer->data(), bytes, kComputeStream).ok());
    for (uint8_t b : host)
      ASSERT_EQ(b, 0);
  }
  EXPECT_EQ(be().allocate(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(KernelTest, ArenaHandsOutAlignedBlocksUntilFull) {
  auto buffer = be().allocate(256);
  ASSERT_TRUE(buffer.ok());
  char *base = static_cast<char *>(buffer->data());
  Arena arena(std::move(*buffer));
  auto a = arena.take(10), b = arena.take(64), c = arena.take(200);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(static_cast<char *>(*a), base);
  EXPECT_EQ(static_cast<char *>(*b), base + 64);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(arena.take(100).ok()); // 128..228 still fits
  EXPECT_EQ(arena.used(), 228);
  EXPECT_EQ(*arena.at(64, 64), base + 64);
  EXPECT_EQ(arena.at(32, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(arena.at(192, 128).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(KernelTest, EventsOrderTheTwoStreams) {
  ASSERT_GE(be().numStreams(), 2);
  auto e = be().createEvent();
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(be().recordEvent(kComputeStream, *e).ok());
  EXPECT_TRUE(be().waitEvent(kCommStream, *e).ok());
  EXPECT_TRUE(be().synchronize(kCommStream).ok());
  EXPECT_EQ(be().recordEvent(Stream{7}, *e).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be().waitEvent(kCommStream, Event{99}).code(),
            absl::StatusCode::kInvalidArgument);
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

struct MatmulCase {
  bool ta, tb, batchedB, bias;
};

TEST_P(KernelTest, MatmulMatchesReferenceForEveryLayout) {
  const int64_t b0 = 2, b1 = 3, m = 5, k = 7, n = 3;
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool batchedB : {false, true})
          for (bool withBias : {false, true}) {
            SCOPED_TRACE(testing::Message()
                         << dtypeName(dt) << " ta=" << ta << " tb=" << tb
                         << " batchedB=" << batchedB << " bias=" << withBias);
            Shape as = ta ? Shape{b0, b1, k, m} : Shape{b0, b1, m, k};
            Shape bs2 = tb ? Shape{n, k} : Shape{k, n};
            Shape bs = batchedB ? Shape{b0, b1, bs2[0], bs2[1]} : bs2;
            auto av = roundAll(dt, randomValues(numel(as), 1));
            auto bv = roundAll(dt, randomValues(numel(bs), 2));
            auto biasv = roundAll(dt, randomValues(n, 3));
            DeviceTensor a = floats(dt, as, av), b = floats(dt, bs, bv);
            DeviceTensor bias = floats(dt, {n}, biasv);
            DeviceTensor out = zeros(dt, {b0, b1, m, n});
            MatmulArgs args;
            args.a = a;
            args.b = b;
            if (withBias)
              args.bias = bias.ref();
            args.out = out;
            args.transposeA = ta;
            args.transposeB = tb;
            ASSERT_TRUE(be().matmul(args).ok());
            auto want = ref::matmul(av, bv, withBias ? &biasv : nullptr,
                                    b0 * b1, m, n, k, ta, tb, batchedB);
            EXPECT_TRUE(allClose(out.values(), roundAll(dt, want), rtolFor(dt),
                                 dt == DType::f32 ? 1e-6 : 1e-2));
          }
}

// md.matmul_gelu: pre is md.matmul's product (plus bias), out its GELU,
// for every layout, both GELU forms and every float type. The GELU of a
// bf16/f16 pre is within one ulp of the reference of the rounded pre; the
// CUDA backend's epilogue computes it inside the GEMM, so its out is
// compared with the GELU of the unrounded product, within the same ulp.
TEST_P(KernelTest, MatmulGeluMatchesReferenceForEveryLayout) {
  const int64_t b0 = 2, m = 5, k = 8, n = 8;
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool batchedB : {false, true})
          for (bool withBias : {false, true})
            for (bool approximate : {false, true}) {
              SCOPED_TRACE(testing::Message()
                           << dtypeName(dt) << " ta=" << ta << " tb=" << tb
                           << " batchedB=" << batchedB << " bias=" << withBias
                           << " approximate=" << approximate);
              Shape as = ta ? Shape{b0, k, m} : Shape{b0, m, k};
              Shape bs2 = tb ? Shape{n, k} : Shape{k, n};
              Shape bs = batchedB ? Shape{b0, bs2[0], bs2[1]} : bs2;
              auto av = roundAll(dt, randomValues(numel(as), 21));
              auto bv = roundAll(dt, randomValues(numel(bs), 22));
              auto biasv = roundAll(dt, randomValues(n, 23));
              DeviceTensor a = floats(dt, as, av), b = floats(dt, bs, bv);
              DeviceTensor bias = floats(dt, {n}, biasv);
              DeviceTensor out = zeros(dt, {b0, m, n}),
                           pre = zeros(dt, {b0, m, n});
              MatmulGeluArgs args;
              args.a = a;
              args.b = b;
              if (withBias)
                args.bias = bias.ref();
              args.out = out;
              args.pre = pre;
              args.transposeA = ta;
              args.transposeB = tb;
              args.approximate = approximate;
              ASSERT_TRUE(be().matmulGelu(args).ok());
              auto product = ref::matmul(av, bv, withBias ? &biasv : nullptr,
                                         b0, m, n, k, ta, tb, batchedB);
              const double atol = dt == DType::f32 ? 1e-6 : 1e-2;
              EXPECT_TRUE(allClose(pre.values(), roundAll(dt, product),
                                   rtolFor(dt), atol))
                  << "pre";
              std::vector<double> want;
              for (double v : product)
                want.push_back(roundTo(dt, ref::gelu(v, approximate)));
              EXPECT_TRUE(allClose(out.values(), want, 2 * rtolFor(dt), atol))
                  << "out";
            }
}

// On the CPU the fused op runs md.matmul's GEMM and md.gelu's vectorised
// GELU: its results are the unfused pair's, bit for bit, so that md-fuse
// changes no number of a CPU run. (The CUDA backend's epilogue need not,
// and is held to the tolerance above.)
TEST_P(KernelTest, MatmulGeluIsMatmulThenGeluBitForBitOnTheCpu) {
  if (GetParam().name != "cpu")
    GTEST_SKIP() << "bit-for-bit equality with the unfused ops is the CPU "
                    "backend's promise";
  const int64_t rows = 37, k = 48, n = 40;
  for (DType dt : {DType::f32, DType::bf16})
    for (bool approximate : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << dtypeName(dt) << " approximate=" << approximate);
      DeviceTensor a = floats(dt, {rows, k}, randomValues(rows * k, 24, -3, 3));
      DeviceTensor w = floats(dt, {n, k}, randomValues(n * k, 25));
      DeviceTensor bias = floats(dt, {n}, randomValues(n, 26));
      DeviceTensor out = zeros(dt, {rows, n}), pre = zeros(dt, {rows, n});
      MatmulGeluArgs fused;
      fused.a = a;
      fused.b = w;
      fused.bias = bias.ref();
      fused.out = out;
      fused.pre = pre;
      fused.transposeB = true;
      fused.approximate = approximate;
      ASSERT_TRUE(be().matmulGelu(fused).ok());

      DeviceTensor y = zeros(dt, {rows, n}), g = zeros(dt, {rows, n});
      MatmulArgs product;
      product.a = a;
      product.b = w;
      product.bias = bias.ref();
      product.out = y;
      product.transposeB = true;
      ASSERT_TRUE(be().matmul(product).ok());
      GeluArgs activation;
      activation.x = y;
      activation.out = g;
      activation.approximate = approximate;
      ASSERT_TRUE(be().gelu(activation).ok());
      EXPECT_EQ(pre.values(), y.values());
      EXPECT_EQ(out.values(), g.values());
    }
}

TEST_P(KernelTest, MatmulGeluRefusesAPreOfAnotherType) {
  DeviceTensor a = floats(DType::f32, {4, 3}, randomValues(12, 27));
  DeviceTensor b = floats(DType::f32, {3, 2}, randomValues(6, 28));
  DeviceTensor out = floats(DType::f32, {4, 2}, std::vector<double>(8, 7.0));
  DeviceTensor pre = zeros(DType::f32, {4, 3});
  MatmulGeluArgs args;
  args.a = a;
  args.b = b;
  args.out = out;
  args.pre = pre;
  absl::Status s = be().matmulGelu(args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("matmul_gelu: pre must be f32[4, 2]"),
            std::string::npos)
      << s;
  EXPECT_EQ(out.values(), std::vector<double>(8, 7.0));
}

TEST_P(KernelTest, MatmulWithEmptyContractionIsTheBias) {
  DeviceTensor a = zeros(DType::f32, {3, 0}), b = zeros(DType::f32, {0, 2});
  DeviceTensor bias = floats(DType::f32, {2}, {1.5, -2});
  DeviceTensor out = floats(DType::f32, {3, 2}, {9, 9, 9, 9, 9, 9});
  MatmulArgs args;
  args.a = a;
  args.b = b;
  args.bias = bias.ref();
  args.out = out;
  ASSERT_TRUE(be().matmul(args).ok());
  EXPECT_EQ(out.values(), (std::vector<double>{1.5, -2, 1.5, -2, 1.5, -2}));
}

TEST_P(KernelTest, MatmulRefusesBadShapesAndWritesNothing) {
  DeviceTensor a = floats(DType::f32, {4, 3}, randomValues(12, 4));
  DeviceTensor b = floats(DType::f32, {5, 2}, randomValues(10, 5));
  DeviceTensor out = floats(DType::f32, {4, 2}, std::vector<double>(8, 7.0));
  MatmulArgs args;
  args.a = a;
  args.b = b;
  args.out = out;
  absl::Status s = be().matmul(args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("contracting dims differ"), std::string::npos)
      << s;
  EXPECT_NE(s.message().find("K = 3"), std::string::npos) << s;
  EXPECT_EQ(out.values(), std::vector<double>(8, 7.0));

  DeviceTensor b2 = floats(DType::f32, {3, 2}, randomValues(6, 5));
  DeviceTensor wrongOut = zeros(DType::bf16, {4, 2});
  args.b = b2;
  args.out = wrongOut;
  s = be().matmul(args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("out must be f32[4, 2]"), std::string::npos) << s;

  DeviceTensor vec = floats(DType::f32, {3}, {1, 2, 3});
  args.a = vec;
  EXPECT_EQ(be().matmul(args).code(), absl::StatusCode::kInvalidArgument);

  // A null pointer on a non-empty tensor is an error, not a crash.
  args.a = TensorRef(nullptr, DType::f32, {4, 3});
  args.out = out;
  EXPECT_EQ(be().matmul(args).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(KernelTest, MatmulIsDeterministic) {
  DeviceTensor a =
      floats(DType::f32, {4, 33, 65}, randomValues(4 * 33 * 65, 6));
  DeviceTensor b = floats(DType::f32, {65, 17}, randomValues(65 * 17, 7));
  DeviceTensor o1 = zeros(DType::f32, {4, 33, 17}),
               o2 = zeros(DType::f32, {4, 33, 17});
  MatmulArgs args;
  args.a = a;
  args.b = b;
  args.out = o1;
  ASSERT_TRUE(be().matmul(args).ok());
  args.out = o2;
  ASSERT_TRUE(be().matmul(args).ok());
  EXPECT_TRUE(sameBits(o1.bytes(), o2.bytes()));
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

TEST_P(KernelTest, BinaryOpsBroadcastLikeNumpy) {
  struct Case {
    Shape l, r, out;
  };
  for (const Case &c :
       {Case{{2, 1, 4}, {3, 1}, {2, 3, 4}}, Case{{5}, {}, {5}},
        Case{{3, 4}, {3, 4}, {3, 4}}, Case{{1, 3}, {2, 1}, {2, 3}}})
    for (int op = 0; op < 6; ++op) {
      SCOPED_TRACE(testing::Message() << "op " << op << " " << shapeString(c.l)
                                      << " x " << shapeString(c.r));
      auto lv = roundAll(DType::f32, randomValues(numel(c.l), 10));
      auto rv = roundAll(DType::f32, randomValues(numel(c.r), 11));
      DeviceTensor l = floats(DType::f32, c.l, lv),
                   r = floats(DType::f32, c.r, rv);
      DeviceTensor out = zeros(DType::f32, c.out);
      BinaryArgs args;
      args.op = static_cast<BinaryOp>(op);
      args.lhs = l;
      args.rhs = r;
      args.out = out;
      ASSERT_TRUE(be().binary(args).ok());
      std::vector<int64_t> ls(c.l.begin(), c.l.end()),
          rs(c.r.begin(), c.r.end());
      // One f32 operation per element: exactly the f64 result rounded (a
      // quotient too: f64 holds twice f32's digits and more, so rounding it
      // again gives IEEE's f32 quotient).
      EXPECT_EQ(out.values(),
                roundAll(DType::f32, ref::binary(op, lv, ls, rv, rs)));
    }
}

TEST_P(KernelTest, MaximumAndMinimumPropagateNaNAndTies) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<double> lv = {1.0, nan, 2.0, -inf, 3.0, -1.0};
  std::vector<double> rv = {nan, 1.0, 2.0, 0.5, inf, -2.0};
  DeviceTensor l = floats(DType::f32, {6}, lv), r = floats(DType::f32, {6}, rv);
  for (BinaryOp op : {BinaryOp::maximum, BinaryOp::minimum}) {
    DeviceTensor out = zeros(DType::f32, {6});
    BinaryArgs args;
    args.op = op;
    args.lhs = l;
    args.rhs = r;
    args.out = out;
    ASSERT_TRUE(be().binary(args).ok());
    std::vector<double> got = out.values();
    EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1]));
    bool max = op == BinaryOp::maximum;
    EXPECT_EQ(got[2], 2.0);
    EXPECT_EQ(got[3], max ? 0.5 : -inf);
    EXPECT_EQ(got[4], max ? inf : 3.0);
    EXPECT_EQ(got[5], max ? -1.0 : -2.0);
  }
}

TEST_P(KernelTest, BinaryRefusesShapesThatDoNotBroadcast) {
  DeviceTensor l = zeros(DType::f32, {2, 3}), r = zeros(DType::f32, {4});
  DeviceTensor out = zeros(DType::f32, {2, 3});
  BinaryArgs args;
  args.lhs = l;
  args.rhs = r;
  args.out = out;
  absl::Status s = be().binary(args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("do not broadcast"), std::string::npos) << s;
}

TEST_P(KernelTest, BinaryInBf16RoundsOnceOnStore) {
  auto lv = roundAll(DType::bf16, randomValues(24, 12, -4, 4));
  auto rv = roundAll(DType::bf16, randomValues(6, 13, -4, 4));
  DeviceTensor l = floats(DType::bf16, {4, 6}, lv),
               r = floats(DType::bf16, {6}, rv);
  DeviceTensor out = zeros(DType::bf16, {4, 6});
  BinaryArgs args;
  args.op = BinaryOp::mul;
  args.lhs = l;
  args.rhs = r;
  args.out = out;
  ASSERT_TRUE(be().binary(args).ok());
  EXPECT_EQ(out.values(),
            roundAll(DType::bf16, ref::binary(2, lv, {4, 6}, rv, {6})));
}

TEST_P(KernelTest, ScaleMultipliesByTheFactorRoundedToF32) {
  auto xv = roundAll(DType::f32, randomValues(9, 14));
  DeviceTensor x = floats(DType::f32, {3, 3}, xv),
               out = zeros(DType::f32, {3, 3});
  ScaleArgs args;
  args.x = x;
  args.out = out;
  args.factor = 0.1;
  ASSERT_TRUE(be().scale(args).ok());
  std::vector<double> want;
  for (double v : xv)
    want.push_back(float(float(v) * 0.1f));
  EXPECT_EQ(out.values(), want);
  args.factor = std::numeric_limits<double>::infinity();
  EXPECT_EQ(be().scale(args).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(KernelTest, GeluExactAndTanhMatchTheirFormulas) {
  auto xv = roundAll(DType::f32, randomValues(37, 15, -6, 6));
  for (bool approximate : {false, true}) {
    DeviceTensor x = floats(DType::f32, {37}, xv),
                 out = zeros(DType::f32, {37});
    GeluArgs args;
    args.x = x;
    args.out = out;
    args.approximate = approximate;
    ASSERT_TRUE(be().gelu(args).ok());
    std::vector<double> want;
    for (double v : xv)
      want.push_back(ref::gelu(v, approximate));
    EXPECT_TRUE(allClose(out.values(), want, 4e-6, 1e-7)) << approximate;
  }
}

TEST_P(KernelTest, ReluZeroesNegativesAndKeepsNaN) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  DeviceTensor x = floats(DType::f32, {5}, {-1, 0, 2.5, nan, -0.0});
  DeviceTensor out = zeros(DType::f32, {5});
  ReluArgs args;
  args.x = x;
  args.out = out;
  ASSERT_TRUE(be().relu(args).ok());
  auto v = out.values();
  EXPECT_EQ(v[0], 0);
  EXPECT_EQ(v[1], 0);
  EXPECT_EQ(v[2], 2.5);
  EXPECT_TRUE(std::isnan(v[3]));
}

TEST_P(KernelTest, SiluMatchesItsFormulaInEveryFloatType) {
  // Far out on both sides too: exp(-x) overflows to inf for x < -88, where
  // silu is -0, and vanishes for large x, where it is x.
  std::vector<double> xv = randomValues(29, 25, -8, 8);
  xv.insert(xv.end(), {-100.0, -0.0, 0.0, 100.0});
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtypeName(dt));
    auto rounded = roundAll(dt, xv);
    const int64_t n = static_cast<int64_t>(rounded.size());
    DeviceTensor x = floats(dt, {n}, rounded), out = zeros(dt, {n});
    SiluArgs args;
    args.x = x;
    args.out = out;
    ASSERT_TRUE(be().silu(args).ok());
    std::vector<double> want;
    for (double v : rounded)
      want.push_back(v / (1.0 + std::exp(-v)));
    EXPECT_TRUE(allClose(out.values(), roundAll(dt, want),
                         dt == DType::f32 ? 4e-6 : 1.0 / 128, 1e-7));
  }
  // An integer tensor is refused, naming the op.
  DeviceTensor ids = zeros(DType::i32, {3}), out = zeros(DType::i32, {3});
  SiluArgs bad;
  bad.x = ids;
  bad.out = out;
  absl::Status s = be().silu(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("silu: x must be"), std::string::npos) << s;
}

/// Every function of md.elementwise, its reference in double, and inputs
/// inside its domain (log, sqrt and rsqrt: positive).
struct MathCase {
  ElementwiseFn fn;
  double (*ref)(double);
  double lo, hi;
};
const MathCase kMathCases[] = {
    {ElementwiseFn::exp, [](double v) { return std::exp(v); }, -8, 8},
    {ElementwiseFn::log, [](double v) { return std::log(v); }, 0.01, 50},
    {ElementwiseFn::sin, [](double v) { return std::sin(v); }, -10, 10},
    {ElementwiseFn::cos, [](double v) { return std::cos(v); }, -10, 10},
    {ElementwiseFn::tanh, [](double v) { return std::tanh(v); }, -6, 6},
    {ElementwiseFn::sigmoid,
     [](double v) { return 1.0 / (1.0 + std::exp(-v)); }, -12, 12},
    {ElementwiseFn::abs, [](double v) { return std::fabs(v); }, -5, 5},
    {ElementwiseFn::neg, [](double v) { return -v; }, -5, 5},
    {ElementwiseFn::sqrt, [](double v) { return std::sqrt(v); }, 0.01, 50},
    {ElementwiseFn::rsqrt, [](double v) { return 1.0 / std::sqrt(v); }, 0.01,
     50},
};

TEST_P(KernelTest, ElementwiseMathMatchesItsFormulaInEveryFloatType) {
  for (const MathCase &c : kMathCases) {
    SCOPED_TRACE(ElementwiseFnName(c.fn));
    // More than one chunk of the CPU's kernels (256 elements).
    std::vector<double> xv = randomValues(300, 40, c.lo, c.hi);
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(dtypeName(dt));
      auto rounded = roundAll(dt, xv);
      const int64_t n = static_cast<int64_t>(rounded.size());
      DeviceTensor x = floats(dt, {n}, rounded), out = zeros(dt, {n});
      ElementwiseArgs args;
      args.x = x;
      args.out = out;
      args.fn = c.fn;
      ASSERT_TRUE(be().elementwise(args).ok());
      std::vector<double> want;
      for (double v : rounded)
        want.push_back(c.ref(v));
      // f16 cannot hold exp(8) closely: relative tolerances.
      EXPECT_TRUE(allClose(out.values(), roundAll(dt, want),
                           dt == DType::f32 ? 4e-6 : 1.0 / 128, 1e-6));
    }
  }
  // Outside the domain, IEEE: log(0) = -inf, log(-1) and sqrt(-1) NaN.
  DeviceTensor x = floats(DType::f32, {3}, {0.0, -1.0, 4.0}),
               out = zeros(DType::f32, {3});
  ElementwiseArgs args;
  args.x = x;
  args.out = out;
  args.fn = ElementwiseFn::log;
  ASSERT_TRUE(be().elementwise(args).ok());
  EXPECT_TRUE(std::isinf(out.values()[0]) && out.values()[0] < 0);
  EXPECT_TRUE(std::isnan(out.values()[1]));
  args.fn = ElementwiseFn::sqrt;
  ASSERT_TRUE(be().elementwise(args).ok());
  EXPECT_TRUE(std::isnan(out.values()[1]));
  EXPECT_EQ(out.values()[2], 2.0);
  // An integer tensor is refused, naming the function.
  DeviceTensor ids = zeros(DType::i32, {3}), iout = zeros(DType::i32, {3});
  ElementwiseArgs bad;
  bad.x = ids;
  bad.out = iout;
  bad.fn = ElementwiseFn::tanh;
  absl::Status s = be().elementwise(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tanh: x must be"), std::string::npos) << s;
}

TEST_P(KernelTest, PowMatchesItsFormulaAndSquaresExactly) {
  std::vector<double> xv = randomValues(300, 41, 0.05, 6);
  for (double c : {2.0, 3.0, 0.5, -1.0, 0.0}) {
    SCOPED_TRACE(c);
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(dtypeName(dt));
      auto rounded = roundAll(dt, xv);
      const int64_t n = static_cast<int64_t>(rounded.size());
      DeviceTensor x = floats(dt, {n}, rounded), out = zeros(dt, {n});
      PowArgs args;
      args.x = x;
      args.out = out;
      args.exponent = c;
      ASSERT_TRUE(be().pow(args).ok());
      std::vector<double> want;
      for (double v : rounded)
        want.push_back(std::pow(v, c));
      EXPECT_TRUE(allClose(out.values(), roundAll(dt, want),
                           dt == DType::f32 ? 4e-6 : 1.0 / 128, 1e-6));
    }
  }
  // x ^ 2 is x * x, bit for bit; a negative x to a non-integer power NaN.
  DeviceTensor x = floats(DType::f32, {2}, {1.1, -2.0}),
               out = zeros(DType::f32, {2});
  PowArgs sq;
  sq.x = x;
  sq.out = out;
  sq.exponent = 2.0;
  ASSERT_TRUE(be().pow(sq).ok());
  const float f = 1.1f;
  EXPECT_EQ(out.values()[0], double(f * f));
  EXPECT_EQ(out.values()[1], 4.0);
  sq.exponent = 0.5;
  ASSERT_TRUE(be().pow(sq).ok());
  EXPECT_TRUE(std::isnan(out.values()[1]));
}

TEST_P(KernelTest, ClampLimitsEachElementAndKeepsNaN) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> xv = randomValues(200, 43, -3, 3);
  xv.push_back(-1.0); // the bounds themselves stay
  xv.push_back(1.5);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtypeName(dt));
    auto rounded = roundAll(dt, xv);
    const int64_t n = static_cast<int64_t>(rounded.size());
    for (auto [lo, hi] : {std::pair{-1.0, 1.5}, std::pair{-inf, 0.25},
                          std::pair{0.0, inf}, std::pair{0.5, 0.5}}) {
      SCOPED_TRACE(testing::Message() << lo << " " << hi);
      DeviceTensor x = floats(dt, {n}, rounded), out = zeros(dt, {n});
      ClampArgs args;
      args.x = x;
      args.out = out;
      args.min = lo;
      args.max = hi;
      ASSERT_TRUE(be().clamp(args).ok());
      std::vector<double> want;
      for (double v : rounded)
        want.push_back(v < lo ? lo : v > hi ? hi : v);
      // Every value is an element or a bound: exact in the element type.
      EXPECT_EQ(out.values(), roundAll(dt, want));
    }
  }
  DeviceTensor x = floats(DType::f32, {2}, {std::nan(""), 7.0}),
               out = zeros(DType::f32, {2});
  ClampArgs args;
  args.x = x;
  args.out = out;
  args.min = -1;
  args.max = 1;
  ASSERT_TRUE(be().clamp(args).ok());
  EXPECT_TRUE(std::isnan(out.values()[0]));
  EXPECT_EQ(out.values()[1], 1.0);
  // The gradient passes inside [min, max], bounds included, and nowhere else.
  DeviceTensor gx = floats(DType::f32, {5}, {-2.0, -1.0, 0.3, 1.0, 4.0}),
               dy = floats(DType::f32, {5}, {1, 2, 3, 4, 5}),
               dx = zeros(DType::f32, {5});
  ClampGradArgs grad;
  grad.dy = dy;
  grad.x = gx;
  grad.dx = dx;
  grad.min = -1;
  grad.max = 1;
  ASSERT_TRUE(be().clampGrad(grad).ok());
  EXPECT_EQ(dx.values(), (std::vector<double>{0, 2, 3, 4, 0}));
}

TEST_P(KernelTest, ElementwiseOpsMayRunInPlace) {
  auto xv = roundAll(DType::bf16, randomValues(10, 16));
  DeviceTensor x = floats(DType::bf16, {10}, xv);
  GeluArgs args;
  args.x = x;
  args.out = x;
  ASSERT_TRUE(be().gelu(args).ok());
  std::vector<double> want;
  for (double v : xv)
    want.push_back(roundTo(DType::bf16, ref::gelu(v, false)));
  EXPECT_TRUE(allClose(x.values(), want, 1.0 / 128, 1e-3));
}

TEST_P(KernelTest, AccumulateAddsABf16GradientIntoAnF32Accumulator) {
  auto accv = roundAll(DType::f32, randomValues(11, 17));
  auto gv = roundAll(DType::bf16, randomValues(11, 18));
  DeviceTensor acc = floats(DType::f32, {11}, accv),
               g = floats(DType::bf16, {11}, gv);
  AccumulateArgs args;
  args.acc = acc;
  args.g = g;
  args.out = acc;
  ASSERT_TRUE(be().accumulate(args).ok());
  std::vector<double> want;
  for (size_t i = 0; i < accv.size(); ++i)
    want.push_back(float(float(accv[i]) + float(gv[i])));
  EXPECT_EQ(acc.values(), want);
  DeviceTensor wrong = zeros(DType::f32, {12});
  args.g = wrong;
  EXPECT_EQ(be().accumulate(args).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(KernelTest, CastRoundsToNearestEven) {
  // 1 + 2^-8 is halfway between two bf16 values (1 and 1 + 2^-7): even
  // wins, so it rounds down; 1 + 3 * 2^-8 rounds up to 1 + 2^-6.
  std::vector<double> xv = {1.0 + 1.0 / 256, 1.0 + 3.0 / 256, -2.5,
                            65519.0,         65520.0,         1e-8};
  DeviceTensor x = floats(DType::f32, {6}, xv);
  DeviceTensor b = zeros(DType::bf16, {6}), h = zeros(DType::f16, {6});
  CastArgs args;
  args.x = x;
  args.out = b;
  ASSERT_TRUE(be().cast(args).ok());
  auto bv = b.values();
  EXPECT_EQ(bv[0], 1.0);
  EXPECT_EQ(bv[1], 1.0 + 1.0 / 64);
  EXPECT_EQ(bv[2], -2.5);
  args.out = h;
  ASSERT_TRUE(be().cast(args).ok());
  auto hv = h.values();
  EXPECT_EQ(hv[3], 65504.0);
  EXPECT_TRUE(std::isinf(hv[4]));
  EXPECT_EQ(hv[5], 0x1p-24 * std::round(1e-8 / 0x1p-24));
  // Widening back is exact, and f16 -> bf16 rounds once.
  DeviceTensor back = zeros(DType::f32, {6});
  args.x = h;
  args.out = back;
  ASSERT_TRUE(be().cast(args).ok());
  EXPECT_EQ(back.values(), hv);
  DeviceTensor hb = zeros(DType::bf16, {6});
  args.out = hb;
  ASSERT_TRUE(be().cast(args).ok());
  EXPECT_EQ(hb.values(), roundAll(DType::bf16, hv));
  DeviceTensor i = zeros(DType::i32, {6});
  args.out = i;
  EXPECT_EQ(be().cast(args).code(), absl::StatusCode::kInvalidArgument);
}

// md.cast of an index: the nearest f32 (exact below 2^24), then rounded once
// more to bf16 or f16, as float(x) then the narrower type.
TEST_P(KernelTest, CastConvertsIndicesToFloats) {
  // Small integers are exact in every float type (f16 up to 2048, bf16 up
  // to 256 and any multiple of a power of two with 8 significant bits).
  const std::vector<int64_t> small = {0, 1, -1, 7, -100, 255, 256, -2048, 3072};
  for (DType from : {DType::i32, DType::i64})
    for (DType to : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(testing::Message()
                   << dtypeName(from) << " to " << dtypeName(to));
      DeviceTensor x = ids(from, {3, 3}, small), out = zeros(to, {3, 3});
      CastArgs args;
      args.x = x;
      args.out = out;
      ASSERT_TRUE(be().cast(args).ok());
      EXPECT_EQ(out.values(), std::vector<double>(small.begin(), small.end()));
    }

  // Past 2^24: float(x), then the narrower type. 2^24 + 2^16 + 1 is f32's
  // 2^24 + 2^16 (a tie, to even), halfway between the bf16 neighbours 2^24
  // and 2^24 + 2^17: bf16 takes 2^24 (even), where a single rounding of
  // the integer would take 2^24 + 2^17. f16 overflows to inf.
  const int64_t p24 = int64_t(1) << 24;
  const std::vector<int64_t> large = {p24 + 1,
                                      p24 + 3,
                                      p24 + (1 << 16) + 1,
                                      -(p24 + (1 << 16) + 1),
                                      2147483647,
                                      -2147483647 - 1,
                                      2049,
                                      65519};
  for (DType from : {DType::i32, DType::i64})
    for (DType to : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(testing::Message()
                   << dtypeName(from) << " to " << dtypeName(to));
      DeviceTensor x = ids(from, {8}, large), out = zeros(to, {8});
      CastArgs args;
      args.x = x;
      args.out = out;
      ASSERT_TRUE(be().cast(args).ok());
      std::vector<double> want;
      for (int64_t v : large)
        want.push_back(roundTo(to, float(v)));
      EXPECT_TRUE(sameValues(out.values(), want));
      if (to == DType::f32) {
        EXPECT_EQ(out.values()[0], double(p24));
        EXPECT_EQ(out.values()[1], double(p24 + 4));
      }
      if (to == DType::bf16) {
        EXPECT_EQ(out.values()[2], double(p24));
        EXPECT_EQ(out.values()[3], -double(p24));
      }
      if (to == DType::f16) {
        EXPECT_TRUE(std::isinf(out.values()[0]));
        EXPECT_EQ(out.values()[6], 2048.0);
        EXPECT_EQ(out.values()[7], 65504.0);
      }
    }

  // i64 past i32 and past 2^53: the same, from the 64-bit integer itself.
  const int64_t p40 = int64_t(1) << 40;
  const std::vector<int64_t> wide = {p40 + 1, p40 + (int64_t(1) << 32) + 1,
                                     (int64_t(1) << 60) + 1,
                                     -(int64_t(1) << 53) - 1};
  for (DType to : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtypeName(to));
    DeviceTensor x = ids(DType::i64, {4}, wide), out = zeros(to, {4});
    CastArgs args;
    args.x = x;
    args.out = out;
    ASSERT_TRUE(be().cast(args).ok());
    std::vector<double> want;
    for (int64_t v : wide)
      want.push_back(roundTo(to, float(v)));
    EXPECT_TRUE(sameValues(out.values(), want));
    EXPECT_EQ(out.values()[0], double(p40));
    if (to == DType::bf16) {
      EXPECT_EQ(out.values()[1], double(p40)); // not p40 + 2^33
    }
  }
}

TEST_P(KernelTest, CastRefusesAnIndexOutAndAMissingIndexX) {
  DeviceTensor x = ids(DType::i32, {3}, {1, 2, 3});
  DeviceTensor idOut = zeros(DType::i64, {3}), longer = zeros(DType::f32, {4});
  CastArgs args;
  args.x = x;
  args.out = idOut;
  absl::Status s = be().cast(args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cast: out must be bf16, f16 or f32, got i64[3]"),
            std::string::npos)
      << s;
  args.out = longer;
  s = be().cast(args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      s.message().find("cast: out f32[4] must have the shape of x i32[3]"),
      std::string::npos)
      << s;
  // An index x is checked as a tensor too: no data is an error, not a
  // crash.
  DeviceTensor out = zeros(DType::f32, {3});
  args.x = TensorRef(nullptr, DType::i64, {3});
  args.out = out;
  s = be().cast(args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cast: x i64[3] has no data"), std::string::npos)
      << s;
}

//===----------------------------------------------------------------------===//
// Normalisation
//===----------------------------------------------------------------------===//

TEST_P(KernelTest, LayerNormMatchesReference) {
  for (DType dt : {DType::f32, DType::bf16})
    for (bool withBeta : {false, true}) {
      SCOPED_TRACE(testing::Message() << dtypeName(dt) << " beta=" << withBeta);
      // An offset mean checks that the variance does not cancel.
      auto xv = roundAll(dt, randomValues(3 * 5 * 7, 20, 99, 101));
      auto gv = roundAll(dt, randomValues(7, 21, 0.5, 1.5));
      auto bv = roundAll(dt, randomValues(7, 22));
      DeviceTensor x = floats(dt, {3, 5, 7}, xv), g = floats(dt, {7}, gv),
                   b = floats(dt, {7}, bv), out = zeros(dt, {3, 5, 7});
      LayerNormArgs args;
      args.x = x;
      args.gamma = g;
      if (withBeta)
        args.beta = b.ref();
      args.out = out;
      args.eps = 1e-5;
      ASSERT_TRUE(be().layerNorm(args).ok());
      auto want = ref::layerNorm(xv, 15, 7, gv, withBeta ? &bv : nullptr, 1e-5);
      EXPECT_TRUE(allClose(out.values(), roundAll(dt, want),
                           dt == DType::f32 ? 1e-4 : 1.0 / 128, 1e-4));
    }
}

TEST_P(KernelTest, LayerNormRefusesBadOperands) {
  DeviceTensor x = zeros(DType::f32, {2, 4}), g = zeros(DType::f32, {3});
  DeviceTensor out = zeros(DType::f32, {2, 4});
  LayerNormArgs args;
  args.x = x;
  args.gamma = g;
  args.out = out;
  absl::Status s = be().layerNorm(args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer_norm: gamma must be f32[4]"),
            std::string::npos)
      << s;
  DeviceTensor g4 = zeros(DType::f32, {4});
  args.gamma = g4;
  args.eps = 0;
  EXPECT_EQ(be().layerNorm(args).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(KernelTest, RmsNormMatchesReference) {
  auto xv = roundAll(DType::f32, randomValues(4 * 9, 23, -3, 3));
  auto gv = roundAll(DType::f32, randomValues(9, 24, 0.5, 1.5));
  DeviceTensor x = floats(DType::f32, {4, 9}, xv),
               g = floats(DType::f32, {9}, gv);
  DeviceTensor out = zeros(DType::f32, {4, 9});
  RmsNormArgs args;
  args.x = x;
  args.gamma = g;
  args.out = out;
  args.eps = 1e-6;
  ASSERT_TRUE(be().rmsNorm(args).ok());
  EXPECT_TRUE(
      allClose(out.values(), ref::rmsNorm(xv, 4, 9, gv, 1e-6), 1e-5, 1e-6));
}

TEST_P(KernelTest, BatchNormReturnsOutputAndBatchStatistics) {
  auto xv = roundAll(DType::f32, randomValues(2 * 3 * 5, 25, 9, 11));
  auto gv = roundAll(DType::f32, randomValues(5, 26, 0.5, 1.5));
  auto bv = roundAll(DType::f32, randomValues(5, 27));
  DeviceTensor x = floats(DType::f32, {2, 3, 5}, xv),
               g = floats(DType::f32, {5}, gv), b = floats(DType::f32, {5}, bv),
               out = zeros(DType::f32, {2, 3, 5}),
               mean = zeros(DType::f32, {5}), invstd = zeros(DType::f32, {5});
  BatchNormArgs args;
  args.x = x;
  args.gamma = g;
  args.beta = b;
  args.out = out;
  args.mean = mean;
  args.invstd = invstd;
  args.eps = 1e-5;
  ASSERT_TRUE(be().batchNorm(args).ok());
  auto want = ref::batchNorm(xv, 6, 5, gv, bv, 1e-5);
  EXPECT_TRUE(allClose(out.values(), want.y, 1e-4, 1e-5));
  EXPECT_TRUE(allClose(mean.values(), want.mean, 1e-6, 0));
  EXPECT_TRUE(allClose(invstd.values(), want.invstd, 1e-5, 0));
  // The statistics are f32 whatever x is.
  DeviceTensor badMean = zeros(DType::bf16, {5});
  args.mean = badMean;
  EXPECT_EQ(be().batchNorm(args).code(), absl::StatusCode::kInvalidArgument);
}

//===----------------------------------------------------------------------===//
// Softmax, attention, embedding, cross-entropy
//===----------------------------------------------------------------------===//

TEST_P(KernelTest, SoftmaxAlongEveryAxis) {
  Shape shape = {3, 4, 5};
  auto xv = roundAll(DType::f32, randomValues(60, 30, -5, 5));
  for (int64_t axis : {-1, 0, 1, 2, -3}) {
    SCOPED_TRACE(axis);
    DeviceTensor x = floats(DType::f32, shape, xv),
                 out = zeros(DType::f32, shape);
    SoftmaxArgs args;
    args.x = x;
    args.out = out;
    args.axis = axis;
    ASSERT_TRUE(be().softmax(args).ok());
    int64_t a = axis < 0 ? axis + 3 : axis;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < a; ++i)
      outer *= shape[i];
    for (int64_t i = a + 1; i < 3; ++i)
      inner *= shape[i];
    EXPECT_TRUE(allClose(out.values(), ref::softmax(xv, outer, shape[a], inner),
                         1e-5, 1e-7));
  }
  DeviceTensor x = floats(DType::f32, shape, xv),
               out = zeros(DType::f32, shape);
  SoftmaxArgs args;
  args.x = x;
  args.out = out;
  args.axis = 3;
  EXPECT_EQ(be().softmax(args).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(KernelTest, SoftmaxSubtractsTheMaximum) {
  // exp(1002) overflows f32 (and f64): only x - max keeps this finite.
  DeviceTensor x = floats(DType::f32, {1, 3}, {-50, 1000, 1002});
  DeviceTensor out = zeros(DType::f32, {1, 3});
  SoftmaxArgs args;
  args.x = x;
  args.out = out;
  args.axis = -1;
  ASSERT_TRUE(be().softmax(args).ok());
  EXPECT_TRUE(
      allClose(out.values(), ref::softmax({-1052, -2, 0}, 1, 3, 1), 1e-6, 0));
}

TEST_P(KernelTest, CausalAttentionMatchesReference) {
  const int64_t b = 2, t = 5, c = 6;
  for (int64_t heads : {1, 2, 3})
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(testing::Message() << heads << " heads " << dtypeName(dt));
      auto qv = roundAll(dt, randomValues(b * t * c, 31));
      auto kv = roundAll(dt, randomValues(b * t * c, 32));
      auto vv = roundAll(dt, randomValues(b * t * c, 33));
      DeviceTensor q = floats(dt, {b, t, c}, qv), k = floats(dt, {b, t, c}, kv),
                   v = floats(dt, {b, t, c}, vv), out = zeros(dt, {b, t, c});
      CausalAttentionArgs args;
      args.q = q;
      args.k = k;
      args.v = v;
      args.out = out;
      args.numHeads = heads;
      ASSERT_TRUE(be().causalAttention(args).ok());
      EXPECT_TRUE(allClose(
          out.values(),
          roundAll(dt, ref::causalAttention(qv, kv, vv, b, t, c, heads)),
          rtolFor(dt), dt == DType::f32 ? 1e-6 : 1e-2));
    }
  DeviceTensor q = zeros(DType::f32, {1, 2, 6}),
               out = zeros(DType::f32, {1, 2, 6});
  CausalAttentionArgs args;
  args.q = args.k = args.v = q;
  args.out = out;
  args.numHeads = 4;
  absl::Status s = be().causalAttention(args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not divisible by num_heads = 4"),
            std::string::npos)
      << s;
}

TEST_P(KernelTest, CausalAttentionFirstPositionSeesOnlyItself) {
  // Row 0 attends to position 0 alone, whatever the scores: out[0] = v[0].
  auto qv = randomValues(12, 34, -30, 30), kv = randomValues(12, 35, -30, 30);
  auto vv = roundAll(DType::f32, randomValues(12, 36));
  DeviceTensor q = floats(DType::f32, {1, 3, 4}, qv),
               k = floats(DType::f32, {1, 3, 4}, kv),
               v = floats(DType::f32, {1, 3, 4}, vv),
               out = zeros(DType::f32, {1, 3, 4});
  CausalAttentionArgs args;
  args.q = q;
  args.k = k;
  args.v = v;
  args.out = out;
  args.numHeads = 2;
  ASSERT_TRUE(be().causalAttention(args).ok());
  auto o = out.values();
  for (int j = 0; j < 4; ++j)
    EXPECT_EQ(o[j], vv[j]);
}

TEST_P(KernelTest, CausalAttentionAcrossTiles) {
  // Longer rows than the case above: T is not a multiple of the CUDA
  // kernels' 32- or 64-row tiles, so their online softmax rescales over
  // several key tiles, and the head dims fall in each of their widths
  // (<= 32, <= 64, <= 128), odd ones included.
  struct Size {
    int64_t t, heads, hd;
  };
  const int64_t b = 2;
  for (Size sz : {Size{130, 3, 17}, Size{100, 2, 64}, Size{70, 1, 100}})
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(testing::Message()
                   << "T " << sz.t << " heads " << sz.heads << " hd " << sz.hd
                   << " " << dtypeName(dt));
      const int64_t c = sz.heads * sz.hd, n = b * sz.t * c;
      auto qv = roundAll(dt, randomValues(n, 37)),
           kv = roundAll(dt, randomValues(n, 38)),
           vv = roundAll(dt, randomValues(n, 39));
      DeviceTensor q = floats(dt, {b, sz.t, c}, qv),
                   k = floats(dt, {b, sz.t, c}, kv),
                   v = floats(dt, {b, sz.t, c}, vv),
                   out = zeros(dt, {b, sz.t, c});
      CausalAttentionArgs args;
      args.q = q;
      args.k = k;
      args.v = v;
      args.out = out;
      args.numHeads = sz.heads;
      ASSERT_TRUE(be().causalAttention(args).ok());
      EXPECT_TRUE(allClose(
          out.values(),
          roundAll(dt, ref::causalAttention(qv, kv, vv, b, sz.t, c, sz.heads)),
          rtolFor(dt), dt == DType::f32 ? 1e-6 : 1e-2));
    }
}

TEST_P(KernelTest, SlidingWindowAttentionMatchesReference) {
  // Row i sees the keys (i - W, i]: windows of one row, shorter than a
  // tile, across tile edges and past T; T within one tile and over several.
  struct Size {
    int64_t t, heads, hd, window;
  };
  const int64_t b = 2;
  for (Size sz :
       {Size{5, 2, 3, 1}, Size{5, 3, 2, 2}, Size{130, 3, 17, 5},
        Size{150, 2, 16, 70}, Size{100, 1, 64, 64}, Size{20, 2, 8, 300}})
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(testing::Message()
                   << "T " << sz.t << " heads " << sz.heads << " hd " << sz.hd
                   << " window " << sz.window << " " << dtypeName(dt));
      const int64_t c = sz.heads * sz.hd, n = b * sz.t * c;
      auto qv = roundAll(dt, randomValues(n, 51)),
           kv = roundAll(dt, randomValues(n, 52)),
           vv = roundAll(dt, randomValues(n, 53));
      DeviceTensor q = floats(dt, {b, sz.t, c}, qv),
                   k = floats(dt, {b, sz.t, c}, kv),
                   v = floats(dt, {b, sz.t, c}, vv),
                   out = zeros(dt, {b, sz.t, c}),
                   plain = zeros(dt, {b, sz.t, c});
      CausalAttentionArgs args;
      args.q = q;
      args.k = k;
      args.v = v;
      args.out = out;
      args.numHeads = sz.heads;
      args.window = sz.window;
      ASSERT_TRUE(be().causalAttention(args).ok());
      EXPECT_TRUE(
          allClose(out.values(),
                   roundAll(dt, ref::causalAttention(qv, kv, vv, b, sz.t, c,
                                                     sz.heads, sz.window)),
                   rtolFor(dt), dt == DType::f32 ? 1e-6 : 1e-2));
      // A window of T or more is plain causal attention, bit for bit.
      args.out = plain;
      args.window.reset();
      ASSERT_TRUE(be().causalAttention(args).ok());
      if (sz.window >= sz.t)
        EXPECT_EQ(out.values(), plain.values());
      else
        EXPECT_NE(out.values(), plain.values());
    }
  // A window of one row: each position sees itself only, out = v.
  auto vv = roundAll(DType::f32, randomValues(24, 54));
  DeviceTensor q = floats(DType::f32, {1, 4, 6}, randomValues(24, 55)),
               v = floats(DType::f32, {1, 4, 6}, vv),
               out = zeros(DType::f32, {1, 4, 6});
  CausalAttentionArgs args;
  args.q = args.k = q;
  args.v = v;
  args.out = out;
  args.numHeads = 2;
  args.window = 1;
  ASSERT_TRUE(be().causalAttention(args).ok());
  EXPECT_EQ(out.values(), vv);
  args.window = 0;
  absl::Status s = be().causalAttention(args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("window must be positive, got 0"),
            std::string::npos)
      << s;
}

TEST_P(KernelTest, EmbeddingCopiesRowsExactly) {
  auto tv = roundAll(DType::bf16, randomValues(7 * 3, 40));
  for (DType idt : {DType::i32, DType::i64}) {
    DeviceTensor table = floats(DType::bf16, {7, 3}, tv);
    DeviceTensor id = ids(idt, {2, 2}, {6, 0, 6, 3});
    DeviceTensor out = zeros(DType::bf16, {2, 2, 3});
    EmbeddingArgs args;
    args.table = table;
    args.ids = id;
    args.out = out;
    ASSERT_TRUE(be().embedding(args).ok());
    auto o = out.values();
    int64_t rows[] = {6, 0, 6, 3};
    for (int p = 0; p < 4; ++p)
      for (int j = 0; j < 3; ++j)
        EXPECT_EQ(o[p * 3 + j], tv[rows[p] * 3 + j]);
  }
}

TEST_P(KernelTest, EmbeddingRefusesOutOfRangeIds) {
  DeviceTensor table = zeros(DType::f32, {4, 2});
  DeviceTensor out = floats(DType::f32, {3, 2}, std::vector<double>(6, 5.0));
  for (int64_t bad : {4, -1}) {
    DeviceTensor id = ids(DType::i64, {3}, {0, bad, 1});
    EmbeddingArgs args;
    args.table = table;
    args.ids = id;
    args.out = out;
    absl::Status s = be().embedding(args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("ids[1]"), std::string::npos) << s;
    EXPECT_EQ(out.values(), std::vector<double>(6, 5.0));
  }
}

TEST_P(KernelTest, CrossEntropyIsTheMeanOverTargetsNotIgnored) {
  const int64_t rows = 6, classes = 5;
  auto lv = roundAll(DType::f32, randomValues(rows * classes, 41, -4, 4));
  std::vector<int64_t> tv = {1, -100, 4, 0, -100, 2};
  for (DType dt : {DType::f32, DType::bf16}) {
    auto lr = roundAll(dt, lv);
    DeviceTensor logits = floats(dt, {2, 3, classes}, lr);
    DeviceTensor targets = ids(DType::i32, {2, 3}, tv);
    DeviceTensor loss = zeros(DType::f32, {});
    CrossEntropyArgs args;
    args.logits = logits;
    args.targets = targets;
    args.out = loss;
    args.ignoreIndex = -100;
    ASSERT_TRUE(be().crossEntropy(args).ok());
    EXPECT_NEAR(loss.scalar(), ref::crossEntropy(lr, rows, classes, tv, -100),
                1e-6);
    // Without ignore_index, -100 is an out-of-range target.
    args.ignoreIndex.reset();
    absl::Status s = be().crossEntropy(args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("targets[1] = -100"), std::string::npos) << s;
  }
}

TEST_P(KernelTest, CrossEntropyOfLargeLogitsAndAllIgnored) {
  DeviceTensor logits =
      floats(DType::f32, {2, 3}, {1000, 0, -1000, 500, 501, 502});
  DeviceTensor targets = ids(DType::i64, {2}, {0, 1});
  DeviceTensor loss = zeros(DType::f32, {});
  CrossEntropyArgs args;
  args.logits = logits;
  args.targets = targets;
  args.out = loss;
  ASSERT_TRUE(be().crossEntropy(args).ok());
  EXPECT_NEAR(loss.scalar(),
              ref::crossEntropy({1000, 0, -1000, 500, 501, 502}, 2, 3, {0, 1},
                                std::nullopt),
              1e-6);
  DeviceTensor ignored = ids(DType::i64, {2}, {-1, -1});
  args.targets = ignored;
  args.ignoreIndex = -1;
  ASSERT_TRUE(be().crossEntropy(args).ok());
  EXPECT_TRUE(std::isnan(loss.scalar()));
}

//===----------------------------------------------------------------------===//
// Reductions and layout
//===----------------------------------------------------------------------===//

TEST_P(KernelTest, SumAndMeanOverDims) {
  Shape shape = {3, 4, 5};
  std::vector<int64_t> s3 = {3, 4, 5};
  auto xv = roundAll(DType::f32, randomValues(60, 50));
  struct Case {
    std::vector<int64_t> dims;
    std::vector<bool> reduced;
    bool keepdim;
    Shape out;
  };
  for (const Case &c : {Case{{0, 2}, {true, false, true}, false, {4}},
                        Case{{-1}, {false, false, true}, true, {3, 4, 1}},
                        Case{{0, 1, 2}, {true, true, true}, false, {}},
                        Case{{1}, {false, true, false}, false, {3, 5}}})
    for (ReduceKind kind : {ReduceKind::sum, ReduceKind::mean}) {
      DeviceTensor x = floats(DType::f32, shape, xv),
                   out = zeros(DType::f32, c.out);
      ReduceArgs args;
      args.kind = kind;
      args.x = x;
      args.out = out;
      args.dims = c.dims;
      args.keepdim = c.keepdim;
      ASSERT_TRUE(be().reduce(args).ok()) << shapeString(c.out);
      EXPECT_TRUE(
          allClose(out.values(),
                   ref::reduce(xv, s3, c.reduced, kind == ReduceKind::mean),
                   1e-6, 1e-6));
    }
  DeviceTensor x = floats(DType::f32, shape, xv), out = zeros(DType::f32, {3});
  ReduceArgs args;
  args.x = x;
  args.out = out;
  args.dims = {1, -2};
  absl::Status s = be().reduce(args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("appears twice"), std::string::npos) << s;
  args.dims = {};
  EXPECT_EQ(be().reduce(args).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(KernelTest, SumToUndoesBroadcasting) {
  std::vector<int64_t> gs = {4, 3, 5};
  auto gv = roundAll(DType::f32, randomValues(60, 51));
  for (const Shape &to :
       {Shape{3, 1}, Shape{1}, Shape{}, Shape{4, 1, 5}, Shape{3, 5}}) {
    DeviceTensor g = floats(DType::f32, {4, 3, 5}, gv),
                 out = zeros(DType::f32, to);
    SumToArgs args;
    args.g = g;
    args.out = out;
    ASSERT_TRUE(be().sumTo(args).ok()) << shapeString(to);
    EXPECT_TRUE(
        allClose(out.values(),
                 ref::sumTo(gv, gs, std::vector<int64_t>(to.begin(), to.end())),
                 1e-6, 1e-6));
  }
  DeviceTensor g = floats(DType::f32, {4, 3, 5}, gv),
               out = zeros(DType::f32, {2, 5});
  SumToArgs args;
  args.g = g;
  args.out = out;
  EXPECT_EQ(be().sumTo(args).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(KernelTest, TransposeMovesElementsOfEveryType) {
  std::vector<int64_t> xv(2 * 3 * 4);
  for (size_t i = 0; i < xv.size(); ++i)
    xv[i] = int64_t(i) * 1000003;
  DeviceTensor x = ids(DType::i64, {2, 3, 4}, xv),
               out = zeros(DType::i64, {4, 2, 3});
  TransposeArgs args;
  args.x = x;
  args.out = out;
  args.perm = {2, 0, 1};
  ASSERT_TRUE(be().transpose(args).ok());
  auto o = out.indexValues();
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 3; ++k)
        EXPECT_EQ(o[(i * 2 + j) * 3 + k], xv[(j * 3 + k) * 4 + i]);
  auto fv = roundAll(DType::bf16, randomValues(6, 52));
  DeviceTensor f = floats(DType::bf16, {2, 3}, fv),
               ft = zeros(DType::bf16, {3, 2});
  args.x = f;
  args.out = ft;
  args.perm = {1, 0};
  ASSERT_TRUE(be().transpose(args).ok());
  EXPECT_EQ(ft.values(),
            (std::vector<double>{fv[0], fv[3], fv[1], fv[4], fv[2], fv[5]}));
  args.perm = {0, 0};
  EXPECT_EQ(be().transpose(args).code(), absl::StatusCode::kInvalidArgument);
}

/// A tensor of any element type whose elements all differ (and are not 0
/// for first >= 1): floats the integers from `first` with the odd ones
/// negated (-1, 2, -3, ... from 1; exact in bf16 below 256), indices those
/// times a large odd factor (past 2^32 in i64), so a misplaced element
/// shows in the bits.
DeviceTensor distinct(Backend &be, DType t, const Shape &s, int64_t first) {
  std::vector<double> f;
  std::vector<int64_t> id;
  for (int64_t i = first; i < first + numel(s); ++i) {
    const int64_t v = i % 2 ? -i : i;
    f.push_back(double(v));
    id.push_back(v * (t == DType::i64 ? int64_t(10000000019) : 1000003));
  }
  return isIndex(t) ? DeviceTensor::indices(be, t, s, id)
                    : DeviceTensor::floats(be, t, s, f);
}

/// A download as one bit pattern per element.
std::vector<uint64_t> elementBits(const DeviceTensor &t) {
  std::vector<uint8_t> bytes = t.bytes();
  const int64_t es = dtypeSize(t.ref().dtype);
  std::vector<uint64_t> bits(bytes.size() / es, 0);
  for (size_t i = 0; i < bits.size(); ++i)
    std::memcpy(&bits[i], bytes.data() + i * es, es);
  return bits;
}

std::vector<int64_t> dimsOf(const Shape &s) {
  return std::vector<int64_t>(s.begin(), s.end());
}

const DType kEveryType[] = {DType::f32, DType::bf16, DType::f16, DType::i32,
                            DType::i64};

/// A slice along `axis`: `count` elements from `start`, `step` apart.
struct SliceCase {
  int64_t axis, start, step, count;
};
// Along the first, a middle and the last axis of [4, 5, 6], step 1 (one
// run per row) and step > 1, a single element, the whole dim and slices
// that end on the dim's last element.
const SliceCase kSliceCases[] = {
    {0, 1, 1, 3}, {0, 0, 2, 2}, {0, 3, 1, 1}, {1, 1, 1, 3}, {1, 0, 1, 5},
    {1, 0, 3, 2}, {1, 4, 1, 1}, {2, 2, 1, 4}, {2, 1, 2, 3}, {2, 0, 5, 2},
};

TEST_P(KernelTest, SliceTakesEveryStepthElementAlongAnyAxis) {
  const Shape xs = {4, 5, 6};
  for (DType t : kEveryType)
    for (const SliceCase &c : kSliceCases) {
      SCOPED_TRACE(testing::Message()
                   << dtypeName(t) << " axis " << c.axis << " start " << c.start
                   << " step " << c.step << " count " << c.count);
      Shape os = xs;
      os[c.axis] = c.count;
      DeviceTensor x = distinct(be(), t, xs, 1), out = zeros(t, os);
      SliceArgs args;
      args.x = x;
      args.out = out;
      args.axis = c.axis;
      args.start = c.start;
      args.step = c.step;
      ASSERT_TRUE(be().slice(args).ok());
      EXPECT_EQ(elementBits(out), ref::slice(elementBits(x), dimsOf(xs), c.axis,
                                             c.start, c.step, c.count));
    }
}

TEST_P(KernelTest, SliceGradIsZeroButWhereTheSliceRead) {
  const Shape xs = {4, 5, 6};
  for (DType t : kEveryType)
    for (const SliceCase &c : kSliceCases) {
      SCOPED_TRACE(testing::Message()
                   << dtypeName(t) << " axis " << c.axis << " start " << c.start
                   << " step " << c.step << " count " << c.count);
      Shape ys = xs;
      ys[c.axis] = c.count;
      // dx starts non-zero: every element of it is written.
      DeviceTensor dy = distinct(be(), t, ys, 1), dx = distinct(be(), t, xs, 1);
      SliceGradArgs args;
      args.dy = dy;
      args.dx = dx;
      args.axis = c.axis;
      args.start = c.start;
      args.step = c.step;
      ASSERT_TRUE(be().sliceGrad(args).ok());
      EXPECT_EQ(elementBits(dx),
                ref::sliceGrad(elementBits(dy), dimsOf(xs), c.axis, c.start,
                               c.step, c.count));
    }
}

TEST_P(KernelTest, ConcatPutsInputsOfDifferentSizesOneAfterAnother) {
  struct Case {
    int64_t axis;
    std::vector<Shape> inputs;
  };
  const Case cases[] = {
      {0, {{2, 3, 4}, {1, 3, 4}}}, {0, {{2, 3, 4}, {1, 3, 4}, {3, 3, 4}}},
      {1, {{2, 3, 4}, {2, 1, 4}}}, {1, {{2, 3, 4}, {2, 1, 4}, {2, 2, 4}}},
      {2, {{2, 3, 4}, {2, 3, 1}}}, {2, {{2, 3, 4}, {2, 3, 1}, {2, 3, 2}}},
      {0, {{5}, {2}, {3}}},
  };
  for (DType t : kEveryType)
    for (const Case &c : cases) {
      SCOPED_TRACE(testing::Message() << dtypeName(t) << " axis " << c.axis
                                      << " " << c.inputs.size() << " inputs");
      std::vector<DeviceTensor> ins;
      std::vector<std::vector<uint64_t>> bits;
      std::vector<std::vector<int64_t>> shapes;
      Shape os = c.inputs[0];
      os[c.axis] = 0;
      int64_t first = 1;
      for (const Shape &s : c.inputs) {
        ins.push_back(distinct(be(), t, s, first));
        first += numel(s);
        bits.push_back(elementBits(ins.back()));
        shapes.push_back(dimsOf(s));
        os[c.axis] += s[c.axis];
      }
      DeviceTensor out = zeros(t, os);
      ConcatArgs args;
      for (const DeviceTensor &in : ins)
        args.inputs.push_back(in.ref());
      args.out = out;
      args.axis = c.axis;
      ASSERT_TRUE(be().concat(args).ok());
      EXPECT_EQ(elementBits(out), ref::concat(bits, shapes, c.axis));
    }
}

TEST_P(KernelTest, ExpandBroadcastsLikeNumpy) {
  struct Case {
    Shape x, out;
  };
  const Case cases[] = {
      {{3}, {2, 4, 3}}, // new leading dims
      {{3, 1}, {3, 4}}, // a size-1 dim stretched
      {{1}, {3, 4}},    // one element everywhere
      {{2, 1, 3}, {5, 2, 4, 3}},
      {{1, 3, 1}, {2, 3, 2}},
      {{}, {2, 3}},     // a scalar
      {{2, 3}, {2, 3}}, // nothing to do
  };
  for (DType t : kEveryType)
    for (const Case &c : cases) {
      SCOPED_TRACE(testing::Message() << dtypeName(t) << " " << shapeString(c.x)
                                      << " to " << shapeString(c.out));
      DeviceTensor x = distinct(be(), t, c.x, 1), out = zeros(t, c.out);
      ExpandArgs args;
      args.x = x;
      args.out = out;
      ASSERT_TRUE(be().expand(args).ok());
      EXPECT_EQ(elementBits(out),
                ref::expand(elementBits(x), dimsOf(c.x), dimsOf(c.out)));
    }
}

/// The status is InvalidArgument and its message holds `part`.
::testing::AssertionResult refused(const absl::Status &s,
                                   const std::string &part) {
  if (s.code() != absl::StatusCode::kInvalidArgument)
    return ::testing::AssertionFailure() << "not InvalidArgument: " << s;
  if (s.message().find(part) == std::string::npos)
    return ::testing::AssertionFailure()
           << "\"" << s.message() << "\" lacks \"" << part << "\"";
  return ::testing::AssertionSuccess();
}

TEST_P(KernelTest, SliceAndSliceGradRefuseWhatDoesNotFit) {
  DeviceTensor x = distinct(be(), DType::f32, {4, 5, 6}, 1);
  DeviceTensor fits = zeros(DType::f32, {4, 3, 6});
  DeviceTensor out = floats(DType::f32, {4, 3, 6}, std::vector<double>(72, 7));
  SliceArgs args;
  args.x = x;
  args.out = fits;
  args.axis = 1;
  args.start = 0;
  args.step = 2;
  ASSERT_TRUE(be().slice(args).ok()); // elements 0, 2, 4: the last fits
  args.out = out;
  args.axis = 3;
  EXPECT_TRUE(refused(be().slice(args),
                      "slice: axis 3 is out of range for x f32[4, 5, 6]"));
  args.axis = 1;
  args.step = 0;
  EXPECT_TRUE(refused(be().slice(args), "slice: step 0 must be at least 1"));
  args.step = 1;
  args.start = -1;
  EXPECT_TRUE(
      refused(be().slice(args), "slice: start -1 must not be negative"));
  // A slice running past x: 2, 4, 6 of a dim of 5.
  args.start = 2;
  args.step = 2;
  EXPECT_TRUE(refused(be().slice(args),
                      "slice: 3 elements from 2 by 2 along axis 1 end at 6, "
                      "past x f32[4, 5, 6]"));
  // Nothing was written.
  EXPECT_EQ(out.values(), std::vector<double>(72, 7));
  DeviceTensor empty = zeros(DType::f32, {4, 0, 6});
  args.out = empty;
  args.start = 0;
  EXPECT_TRUE(refused(be().slice(args), "slice: out f32[4, 0, 6] takes no "
                                        "element along axis 1"));
  // out must have x's element type and its other dims.
  DeviceTensor otherType = zeros(DType::bf16, {4, 3, 6});
  args.out = otherType;
  EXPECT_TRUE(refused(be().slice(args),
                      "slice: out must be f32[4, 3, 6], got bf16[4, 3, 6]"));
  DeviceTensor otherDims = zeros(DType::f32, {4, 3, 5});
  args.out = otherDims;
  EXPECT_TRUE(refused(be().slice(args),
                      "slice: out must be f32[4, 3, 6], got f32[4, 3, 5]"));
  DeviceTensor otherRank = zeros(DType::f32, {4, 3});
  args.out = otherRank;
  EXPECT_TRUE(refused(be().slice(args), "slice: out f32[4, 3] must have the "
                                        "rank of x f32[4, 5, 6]"));

  SliceGradArgs grad;
  DeviceTensor dy = zeros(DType::f32, {4, 3, 6}),
               dx = zeros(DType::f32, {4, 5, 6});
  grad.dy = dy;
  grad.dx = dx;
  grad.axis = 1;
  grad.start = 3;
  grad.step = 1;
  EXPECT_TRUE(refused(be().sliceGrad(grad),
                      "slice_grad: 3 elements from 3 by 1 along axis 1 end "
                      "at 5, past dx f32[4, 5, 6]"));
  grad.axis = -1;
  EXPECT_TRUE(refused(be().sliceGrad(grad),
                      "slice_grad: axis -1 is out of range for dx "
                      "f32[4, 5, 6]"));
  grad.axis = 1;
  grad.start = 0;
  grad.step = -2;
  EXPECT_TRUE(
      refused(be().sliceGrad(grad), "slice_grad: step -2 must be at least 1"));
  DeviceTensor dyType = zeros(DType::f16, {4, 3, 6});
  grad.dy = dyType;
  grad.step = 1;
  EXPECT_TRUE(refused(be().sliceGrad(grad),
                      "slice_grad: dy must be f32[4, 3, 6], got f16[4, 3, 6]"));
}

TEST_P(KernelTest, ConcatRefusesInputsThatDoNotLineUp) {
  DeviceTensor a = zeros(DType::f32, {2, 3, 4}),
               b = zeros(DType::f32, {2, 1, 4});
  DeviceTensor out = zeros(DType::f32, {2, 4, 4});
  ConcatArgs args;
  args.inputs = {a.ref(), b.ref()};
  args.out = out;
  args.axis = 1;
  ASSERT_TRUE(be().concat(args).ok());
  args.axis = 3;
  EXPECT_TRUE(refused(be().concat(args),
                      "concat: axis 3 is out of range for inputs[0] "
                      "f32[2, 3, 4]"));
  // Another dim than the axis differs, or the rank.
  DeviceTensor wide = zeros(DType::f32, {2, 1, 5}),
               flat = zeros(DType::f32, {2, 1});
  args.axis = 1;
  args.inputs = {a.ref(), b.ref(), wide.ref()};
  EXPECT_TRUE(refused(be().concat(args),
                      "concat: inputs[2] f32[2, 1, 5] must have the dims of "
                      "inputs[0] f32[2, 3, 4] but at axis 1"));
  args.inputs = {a.ref(), flat.ref()};
  EXPECT_TRUE(refused(be().concat(args),
                      "concat: inputs[1] f32[2, 1] must have the dims of "
                      "inputs[0] f32[2, 3, 4] but at axis 1"));
  // Another element type.
  DeviceTensor half = zeros(DType::bf16, {2, 1, 4});
  args.inputs = {a.ref(), half.ref()};
  EXPECT_TRUE(refused(be().concat(args),
                      "concat: inputs[1] bf16[2, 1, 4] must have the element "
                      "type of inputs[0] f32[2, 3, 4]"));
  // out is their concatenation, of their element type.
  DeviceTensor shortOut = zeros(DType::f32, {2, 3, 4});
  args.inputs = {a.ref(), b.ref()};
  args.out = shortOut;
  EXPECT_TRUE(refused(be().concat(args),
                      "concat: out must be f32[2, 4, 4], got f32[2, 3, 4]"));
  DeviceTensor idsOut = zeros(DType::i32, {2, 4, 4});
  args.out = idsOut;
  EXPECT_TRUE(refused(be().concat(args),
                      "concat: out must be f32[2, 4, 4], got i32[2, 4, 4]"));
  args.inputs.clear();
  EXPECT_TRUE(refused(be().concat(args), "concat: needs at least one input"));
}

TEST_P(KernelTest, ExpandRefusesAShapeXDoesNotBroadcastTo) {
  struct Case {
    Shape x, out;
    DType outType;
  };
  const Case cases[] = {
      {{3}, {2, 4}, DType::f32},    // 3 against 4
      {{2, 3}, {3}, DType::f32},    // fewer dims than x
      {{3, 1}, {1, 4}, DType::f32}, // out's 1 cannot take x's 3
      {{3}, {2, 3}, DType::bf16},   // another element type
  };
  for (const Case &c : cases) {
    DeviceTensor x = zeros(DType::f32, c.x), out = zeros(c.outType, c.out);
    ExpandArgs args;
    args.x = x;
    args.out = out;
    const std::string want = absl::StrCat("expand: out ", out.ref().str(),
                                          " must be a shape that x ",
                                          x.ref().str(), " broadcasts to");
    EXPECT_TRUE(refused(be().expand(args), want));
  }
}

TEST_P(KernelTest, ReshapeArangeFlattenView) {
  auto xv = roundAll(DType::f32, randomValues(12, 53));
  DeviceTensor x = floats(DType::f32, {3, 4}, xv),
               r = zeros(DType::f32, {2, 6});
  ReshapeArgs rs;
  rs.x = x;
  rs.out = r;
  ASSERT_TRUE(be().reshape(rs).ok());
  EXPECT_EQ(r.values(), xv);
  DeviceTensor bad = zeros(DType::f32, {5});
  rs.out = bad;
  EXPECT_EQ(be().reshape(rs).code(), absl::StatusCode::kInvalidArgument);

  for (DType t : {DType::i32, DType::i64}) {
    DeviceTensor pos = zeros(t, {5});
    ArangeArgs ar;
    ar.out = pos;
    ar.start = -2;
    ar.end = 3;
    ASSERT_TRUE(be().arange(ar).ok());
    EXPECT_EQ(pos.indexValues(), (std::vector<int64_t>{-2, -1, 0, 1, 2}));
    ar.end = 4;
    EXPECT_EQ(be().arange(ar).code(), absl::StatusCode::kInvalidArgument);
  }

  DeviceTensor w = floats(DType::f32, {2, 2}, {1, 2, 3, 4}),
               b = floats(DType::f32, {3}, {5, 6, 7});
  DeviceTensor flat = floats(DType::f32, {10}, std::vector<double>(10, 9.0));
  FlattenArgs fl;
  fl.inputs = {w.ref(), b.ref()};
  fl.out = flat;
  ASSERT_TRUE(be().flatten(fl).ok());
  EXPECT_EQ(flat.values(), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 0, 0, 0}));
  DeviceTensor small = zeros(DType::f32, {6});
  fl.out = small;
  EXPECT_EQ(be().flatten(fl).code(), absl::StatusCode::kInvalidArgument);

  DeviceTensor v = zeros(DType::f32, {3});
  ViewArgs vw;
  vw.source = flat;
  vw.out = v;
  vw.offset = 4;
  ASSERT_TRUE(be().view(vw).ok());
  EXPECT_EQ(v.values(), (std::vector<double>{5, 6, 7}));
  vw.offset = 8;
  EXPECT_EQ(be().view(vw).code(), absl::StatusCode::kInvalidArgument);
}

//===----------------------------------------------------------------------===//
// What the backends share: argument checks, strides, softmax rows
//===----------------------------------------------------------------------===//

TEST(BackendChecks, MessagesNameTheBackendAndTheBadArgument) {
  auto message = [](const absl::Status &s) { return std::string(s.message()); };
  EXPECT_TRUE(checkStreamId("b", Stream{1}, 2).ok());
  EXPECT_EQ(message(checkStreamId("b", Stream{2}, 2)),
            "b: stream 2 does not exist (2 streams)");
  EXPECT_TRUE(checkEventId("b", Event{0}, 1).ok());
  EXPECT_EQ(message(checkEventId("b", Event{-1}, 1)),
            "b: event -1 was not created (1 events)");
  EXPECT_EQ(*allocationBytes("b", 0), kAllocAlignment);
  EXPECT_EQ(*allocationBytes("b", 1), kAllocAlignment);
  EXPECT_EQ(*allocationBytes("b", kAllocAlignment), kAllocAlignment);
  EXPECT_EQ(*allocationBytes("b", kAllocAlignment + 1), 2 * kAllocAlignment);
  EXPECT_EQ(message(allocationBytes("b", -1).status()),
            "b: cannot allocate -1 bytes");
  int x = 0;
  EXPECT_TRUE(checkCopy("b", nullptr, nullptr, 0).ok());
  EXPECT_TRUE(checkCopy("b", &x, &x, 4).ok());
  EXPECT_EQ(checkCopy("b", &x, nullptr, 4).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(checkCopy("b", &x, &x, -1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(checkZero("b", nullptr, 0).ok());
  EXPECT_EQ(checkZero("b", nullptr, 4).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(KernelTest, CopyAndZeroRefuseBadArgumentsAlike) {
  std::vector<uint8_t> host(8);
  EXPECT_EQ(be().copy(host.data(), nullptr, 8, kComputeStream).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be().copy(host.data(), host.data(), -1, kComputeStream).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be().copy(host.data(), host.data(), 8, Stream{5}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be().zero(nullptr, 8, kComputeStream).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(be().zero(nullptr, 0, kComputeStream).ok());
}

TEST(Strides, RowMajorBroadcastAndReduced) {
  EXPECT_EQ(rowMajorStrides(Shape{2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_TRUE(rowMajorStrides(Shape{}).empty());
  // [3, 1] seen as [2, 3, 4]: no leading dim, the 1 broadcasts.
  EXPECT_EQ(broadcastStrides(Shape{3, 1}, Shape{2, 3, 4}),
            (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(broadcastStrides(Shape{2, 3, 4}, Shape{2, 3, 4}),
            rowMajorStrides(Shape{2, 3, 4}));
  const std::vector<bool> middle = {false, true, false};
  EXPECT_EQ(keptShape(Shape{2, 3, 4}, middle), (Shape{2, 1, 4}));
  EXPECT_EQ(reducedCount(Shape{2, 3, 4}, middle), 3);
  EXPECT_EQ(reducedCount(Shape{2, 3, 4}, {true, false, true}), 8);
  EXPECT_EQ(reducedCount(Shape{}, {}), 1);
}

TEST(OptimizerScalars, DerivedInDoubleAndRoundedOnce) {
  AdamWArgs adam;
  adam.lr = 1e-3f;
  adam.step = 2;
  adam.beta1 = 0.9;
  adam.beta2 = 0.999;
  adam.eps = 1e-8;
  adam.weightDecay = 0.1;
  const double lr = adam.lr; // the f32 lr, widened
  AdamWScalars a = adamwScalars(adam);
  EXPECT_EQ(a.decay, float(1.0 - lr * 0.1));
  EXPECT_EQ(a.beta1, 0.9f);
  EXPECT_EQ(a.oneMinusBeta1, float(1.0 - 0.9));
  EXPECT_EQ(a.oneMinusBeta2, float(1.0 - 0.999));
  EXPECT_EQ(a.stepSize, float(lr / (1.0 - std::pow(0.9, 2.0))));
  EXPECT_EQ(a.bc2Sqrt, float(std::sqrt(1.0 - std::pow(0.999, 2.0))));
  EXPECT_EQ(a.eps, float(1e-8));
  SgdArgs sgd;
  sgd.lr = 0.5f;
  sgd.step = 1;
  sgd.momentum = 0.9;
  sgd.dampening = 0.25;
  sgd.nesterov = true;
  SgdScalars first = sgdScalars(sgd);
  EXPECT_EQ(first.lr, 0.5f);
  EXPECT_EQ(first.oneMinusDampening, 0.75f);
  EXPECT_TRUE(first.firstStep && first.useMomentum && first.nesterov);
  EXPECT_FALSE(first.applyDecay);
  sgd.step = 3;
  sgd.momentum = 0.0;
  sgd.weightDecay = 1e-4;
  sgd.nesterov = false;
  SgdScalars plain = sgdScalars(sgd);
  EXPECT_FALSE(plain.firstStep || plain.useMomentum || plain.nesterov);
  EXPECT_TRUE(plain.applyDecay);
  EXPECT_EQ(plain.weightDecay, float(1e-4));
}

TEST(CpuRows, SoftmaxRowMatchesTheDefinitionAtAnyStride) {
  // Two rows interleaved at stride 2; the second must stay untouched.
  std::vector<float> x = {1.0f, 9.0f, -2.0f, 9.0f, 30.0f, 9.0f, 0.5f, 9.0f};
  std::vector<float> y(x.size(), -1.0f);
  cpu::softmaxRow(x.data(), y.data(), 4, 2);
  double sum = 0;
  for (int j = 0; j < 4; ++j)
    sum += std::exp(double(x[2 * j]) - 30.0);
  for (int j = 0; j < 4; ++j) {
    EXPECT_NEAR(y[2 * j], std::exp(double(x[2 * j]) - 30.0) / sum, 1e-7);
    EXPECT_EQ(y[2 * j + 1], -1.0f);
  }
  // In place gives the same bits.
  std::vector<float> z = x;
  cpu::softmaxRow(z.data(), z.data(), 4, 2);
  for (int j = 0; j < 4; ++j)
    EXPECT_EQ(z[2 * j], y[2 * j]);
}

TEST(CpuRows, SoftmaxGradRowIsYTimesDyMinusTheirDot) {
  const std::vector<float> y = {0.1f, 0.2f, 0.7f};
  const std::vector<float> dy = {1.0f, -2.0f, 0.5f};
  std::vector<float> dx(3);
  cpu::softmaxGradRow(dy.data(), y.data(), dx.data(), 3);
  const double dot = 0.1 * 1.0 + 0.2 * -2.0 + 0.7 * 0.5;
  for (int j = 0; j < 3; ++j)
    EXPECT_NEAR(dx[j], y[j] * (dy[j] - dot), 1e-7);
  std::vector<float> inPlace = dy;
  cpu::softmaxGradRow(inPlace.data(), y.data(), inPlace.data(), 3);
  EXPECT_EQ(inPlace, dx);
}

//===----------------------------------------------------------------------===//
// The CPU backend's threads
//===----------------------------------------------------------------------===//

TEST(CpuBackendThreads, RanksTimesThreadsFitTheCores) {
  int cores = cpu::CpuBackend::usableCores();
  ASSERT_GE(cores, 1);
  EXPECT_EQ(cpu::CpuBackend::threadsPerRank(1), cores);
  for (int ranks : {2, 3, 4, 64}) {
    int t = cpu::CpuBackend::threadsPerRank(ranks);
    EXPECT_GE(t, 1);
    EXPECT_TRUE(ranks * t <= cores || t == 1) << ranks << " ranks";
  }
  cpu::CpuBackend be(1);
  EXPECT_EQ(be.threads(), 1);
  EXPECT_EQ(be.setThreads(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be.threads(), 1);
}

TEST(CpuBackendThreads, GemmBitsAreReproducibleAtAFixedThreadCount) {
  // OpenBLAS may change the last bits between thread counts, but never
  // between runs at the same count (docs/runtime-cpu.md).
  cpu::CpuBackend be(2);
  DeviceTensor a = DeviceTensor::floats(be, DType::f32, {133, 217},
                                        randomValues(133 * 217, 8));
  DeviceTensor b = DeviceTensor::floats(be, DType::f32, {217, 91},
                                        randomValues(217 * 91, 9));
  std::vector<uint8_t> first;
  for (int run = 0; run < 3; ++run) {
    DeviceTensor out(be, DType::f32, {133, 91});
    MatmulArgs args;
    args.a = a;
    args.b = b;
    args.out = out;
    ASSERT_TRUE(be.matmul(args).ok());
    if (run == 0)
      first = out.bytes();
    else
      EXPECT_TRUE(sameBits(first, out.bytes())) << "run " << run;
  }
}

} // namespace
} // namespace md::test
