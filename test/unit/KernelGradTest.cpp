//===- KernelGradTest.cpp - every gradient kernel against finite differences
//===//
//
// Each gradient kernel (f32) is compared with the central-difference
// vector-Jacobian product of the op's f64 reference forward
// (KernelReference.h): for L = sum(dy * f(x)), dL/dx_i is
// (L(x + h e_i) - L(x - h e_i)) / 2h with h = 1e-6 max(1, |x_i|). Its
// error is far below f32's, so the tolerance is the kernel's f32 rounding:
// rtol 1e-4 and atol 1e-5 (on values of order 1) unless a case says
// otherwise. Inputs are rounded to f32 first so both sides see the same x.
// The ops without a _grad op (add/sub/mul, transpose, broadcasting,
// concat, expand) are checked through the VJPs the dialect composes from
// forward ops.
//
//===----------------------------------------------------------------------===//

#include <cmath>

#include <gtest/gtest.h>

#include "test/unit/BackendTestUtil.h"
#include "test/unit/KernelReference.h"
#include "test/unit/TestBackends.h"

namespace md::test {
namespace {

using namespace md::runtime;
using ref::Vec;

class GradTest : public ::testing::TestWithParam<BackendFactory> {
protected:
  void SetUp() override { MD_MAKE_BACKEND_OR_SKIP(GetParam(), backend_); }
  Backend &be() { return *backend_; }
  DeviceTensor f32(Shape s, const Vec &v) {
    return DeviceTensor::floats(be(), DType::f32, std::move(s), v);
  }
  DeviceTensor zeros(Shape s) { return DeviceTensor(be(), DType::f32, s); }
  std::unique_ptr<Backend> backend_;
};

INSTANTIATE_TEST_SUITE_P(Backends, GradTest,
                         ::testing::ValuesIn(testBackends()), backendName);

Vec inputs(int64_t n, uint32_t seed, double lo = -1, double hi = 1) {
  return roundAll(DType::f32, randomValues(n, seed, lo, hi));
}

/// The kernel's gradient `got` for input `which` against finite differences.
::testing::AssertionResult matchesNumeric(const Vec &got, const RefForward &f,
                                          const std::vector<Vec> &in,
                                          size_t which, const Vec &dy,
                                          double rtol = 1e-4,
                                          double atol = 1e-5) {
  return allClose(got, numericGrad(f, in, which, dy), rtol, atol);
}

TEST_P(GradTest, MatmulGradForEveryLayout) {
  const int64_t b0 = 2, m = 3, k = 4, n = 5;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool batchedB : {false, true}) {
        SCOPED_TRACE(testing::Message() << "ta=" << ta << " tb=" << tb
                                        << " batchedB=" << batchedB);
        Shape as = ta ? Shape{b0, k, m} : Shape{b0, m, k};
        Shape bs2 = tb ? Shape{n, k} : Shape{k, n};
        Shape bs = batchedB ? Shape{b0, bs2[0], bs2[1]} : bs2;
        Vec av = inputs(numel(as), 1), bv = inputs(numel(bs), 2),
            biasv = inputs(n, 3), dyv = inputs(b0 * m * n, 4);
        DeviceTensor a = f32(as, av), b = f32(bs, bv),
                     dy = f32({b0, m, n}, dyv);
        DeviceTensor da = zeros(as), db = zeros(bs), dbias = zeros({n});
        MatmulGradArgs args;
        args.dy = dy;
        args.a = a;
        args.b = b;
        args.da = da;
        args.db = db;
        args.dbias = dbias.ref();
        args.transposeA = ta;
        args.transposeB = tb;
        ASSERT_TRUE(be().matmulGrad(args).ok());
        RefForward f = [&](const std::vector<Vec> &in) {
          return ref::matmul(in[0], in[1], &in[2], b0, m, n, k, ta, tb,
                             batchedB);
        };
        std::vector<Vec> in = {av, bv, biasv};
        EXPECT_TRUE(matchesNumeric(da.values(), f, in, 0, dyv)) << "da";
        EXPECT_TRUE(matchesNumeric(db.values(), f, in, 1, dyv)) << "db";
        EXPECT_TRUE(matchesNumeric(dbias.values(), f, in, 2, dyv)) << "dbias";
      }
}

// md.matmul_gelu's gradient, as md-autodiff builds it: md.gelu_grad of
// out's gradient and pre, then md.matmul_grad, against the finite
// differences of gelu(a · b + bias).
TEST_P(GradTest, MatmulGeluGradIsGeluGradThenMatmulGrad) {
  const int64_t m = 3, k = 4, n = 5;
  for (bool approximate : {false, true}) {
    SCOPED_TRACE(testing::Message() << "approximate=" << approximate);
    Vec av = inputs(m * k, 31), bv = inputs(n * k, 32), biasv = inputs(n, 33),
        dyv = inputs(m * n, 34);
    DeviceTensor a = f32({m, k}, av), b = f32({n, k}, bv),
                 bias = f32({n}, biasv);
    DeviceTensor out = zeros({m, n}), pre = zeros({m, n});
    MatmulGeluArgs forward;
    forward.a = a;
    forward.b = b;
    forward.bias = bias.ref();
    forward.out = out;
    forward.pre = pre;
    forward.transposeB = true;
    forward.approximate = approximate;
    ASSERT_TRUE(be().matmulGelu(forward).ok());

    DeviceTensor dy = f32({m, n}, dyv), dpre = zeros({m, n});
    GeluGradArgs gelu;
    gelu.dy = dy;
    gelu.x = pre;
    gelu.dx = dpre;
    gelu.approximate = approximate;
    ASSERT_TRUE(be().geluGrad(gelu).ok());
    DeviceTensor da = zeros({m, k}), db = zeros({n, k}), dbias = zeros({n});
    MatmulGradArgs grad;
    grad.dy = dpre;
    grad.a = a;
    grad.b = b;
    grad.da = da;
    grad.db = db;
    grad.dbias = dbias.ref();
    grad.transposeB = true;
    ASSERT_TRUE(be().matmulGrad(grad).ok());

    RefForward f = [&](const std::vector<Vec> &in) {
      Vec y = ref::matmul(in[0], in[1], &in[2], 1, m, n, k, false, true, false);
      for (double &v : y)
        v = ref::gelu(v, approximate);
      return y;
    };
    std::vector<Vec> in = {av, bv, biasv};
    EXPECT_TRUE(matchesNumeric(da.values(), f, in, 0, dyv)) << "da";
    EXPECT_TRUE(matchesNumeric(db.values(), f, in, 1, dyv)) << "db";
    EXPECT_TRUE(matchesNumeric(dbias.values(), f, in, 2, dyv)) << "dbias";
  }
}

TEST_P(GradTest, MatmulGradWithoutBiasLeavesNoDbias) {
  Vec av = inputs(6, 5), bv = inputs(6, 6), dyv = inputs(4, 7);
  DeviceTensor a = f32({2, 3}, av), b = f32({3, 2}, bv), dy = f32({2, 2}, dyv);
  DeviceTensor da = zeros({2, 3}), db = zeros({3, 2});
  MatmulGradArgs args;
  args.dy = dy;
  args.a = a;
  args.b = b;
  args.da = da;
  args.db = db;
  ASSERT_TRUE(be().matmulGrad(args).ok());
  RefForward f = [&](const std::vector<Vec> &in) {
    return ref::matmul(in[0], in[1], nullptr, 1, 2, 2, 3, false, false, false);
  };
  EXPECT_TRUE(matchesNumeric(da.values(), f, {av, bv}, 0, dyv));
  // dy of the wrong shape is refused.
  DeviceTensor wrong = zeros({2, 3});
  args.dy = wrong;
  EXPECT_EQ(be().matmulGrad(args).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(GradTest, GeluGradExactAndTanh) {
  Vec xv = inputs(23, 8, -4, 4), dyv = inputs(23, 9);
  for (bool approximate : {false, true}) {
    DeviceTensor x = f32({23}, xv), dy = f32({23}, dyv), dx = zeros({23});
    GeluGradArgs args;
    args.dy = dy;
    args.x = x;
    args.dx = dx;
    args.approximate = approximate;
    ASSERT_TRUE(be().geluGrad(args).ok());
    RefForward f = [&](const std::vector<Vec> &in) {
      Vec y;
      for (double v : in[0])
        y.push_back(ref::gelu(v, approximate));
      return y;
    };
    EXPECT_TRUE(matchesNumeric(dx.values(), f, {xv}, 0, dyv)) << approximate;
  }
}

TEST_P(GradTest, SiluGrad) {
  Vec xv = inputs(23, 26, -6, 6), dyv = inputs(23, 27);
  DeviceTensor x = f32({23}, xv), dy = f32({23}, dyv), dx = zeros({23});
  SiluGradArgs args;
  args.dy = dy;
  args.x = x;
  args.dx = dx;
  ASSERT_TRUE(be().siluGrad(args).ok());
  RefForward f = [](const std::vector<Vec> &in) {
    Vec y;
    for (double v : in[0])
      y.push_back(v / (1.0 + std::exp(-v)));
    return y;
  };
  EXPECT_TRUE(matchesNumeric(dx.values(), f, {xv}, 0, dyv));
  // dx of another shape is refused.
  DeviceTensor wrong = zeros({22});
  args.dx = wrong;
  EXPECT_EQ(be().siluGrad(args).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(GradTest, ElementwiseGradOfEveryFunction) {
  struct Case {
    ElementwiseFn fn;
    double (*ref)(double);
    double lo, hi;
  };
  // Inputs inside each domain and away from abs's kink at 0.
  const Case cases[] = {
      {ElementwiseFn::exp, [](double v) { return std::exp(v); }, -3, 3},
      {ElementwiseFn::log, [](double v) { return std::log(v); }, 0.5, 5},
      {ElementwiseFn::sin, [](double v) { return std::sin(v); }, -4, 4},
      {ElementwiseFn::cos, [](double v) { return std::cos(v); }, -4, 4},
      {ElementwiseFn::tanh, [](double v) { return std::tanh(v); }, -3, 3},
      {ElementwiseFn::sigmoid,
       [](double v) { return 1.0 / (1.0 + std::exp(-v)); }, -6, 6},
      {ElementwiseFn::abs, [](double v) { return std::fabs(v); }, 0.2, 3},
      {ElementwiseFn::neg, [](double v) { return -v; }, -3, 3},
      {ElementwiseFn::sqrt, [](double v) { return std::sqrt(v); }, 0.5, 5},
      {ElementwiseFn::rsqrt, [](double v) { return 1.0 / std::sqrt(v); }, 0.5,
       5},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(ElementwiseFnName(c.fn));
    Vec xv = inputs(21, 30, c.lo, c.hi), dyv = inputs(21, 31);
    if (c.fn == ElementwiseFn::abs) // both sides of the kink
      for (size_t i = 0; i < xv.size(); i += 2)
        xv[i] = -xv[i];
    DeviceTensor x = f32({21}, xv), dy = f32({21}, dyv), dx = zeros({21});
    ElementwiseGradArgs args;
    args.dy = dy;
    args.x = x;
    args.dx = dx;
    args.fn = c.fn;
    ASSERT_TRUE(be().elementwiseGrad(args).ok());
    auto ref = c.ref;
    RefForward f = [ref](const std::vector<Vec> &in) {
      Vec y;
      for (double v : in[0])
        y.push_back(ref(v));
      return y;
    };
    EXPECT_TRUE(matchesNumeric(dx.values(), f, {xv}, 0, dyv));
  }
  // dx of another shape is refused.
  DeviceTensor x = f32({4}, {1, 2, 3, 4}), dy = f32({4}, {1, 1, 1, 1}),
               wrong = zeros({3});
  ElementwiseGradArgs args;
  args.dy = dy;
  args.x = x;
  args.dx = wrong;
  args.fn = ElementwiseFn::exp;
  EXPECT_EQ(be().elementwiseGrad(args).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(GradTest, PowGrad) {
  for (double c : {2.0, 3.0, 0.5, -1.5, 0.0}) {
    SCOPED_TRACE(c);
    Vec xv = inputs(19, 32, 0.5, 3), dyv = inputs(19, 33);
    DeviceTensor x = f32({19}, xv), dy = f32({19}, dyv), dx = zeros({19});
    PowGradArgs args;
    args.dy = dy;
    args.x = x;
    args.dx = dx;
    args.exponent = c;
    ASSERT_TRUE(be().powGrad(args).ok());
    RefForward f = [c](const std::vector<Vec> &in) {
      Vec y;
      for (double v : in[0])
        y.push_back(std::pow(v, c));
      return y;
    };
    EXPECT_TRUE(matchesNumeric(dx.values(), f, {xv}, 0, dyv));
  }
}

TEST_P(GradTest, ClampGradAwayFromTheBounds) {
  Vec xv = inputs(23, 34, -2, 2), dyv = inputs(23, 35);
  for (double &v : xv)
    if (std::fabs(std::fabs(v) - 0.75) < 0.01)
      v = 0.0; // the bounds are kinks, not differentiable
  DeviceTensor x = f32({23}, xv), dy = f32({23}, dyv), dx = zeros({23});
  ClampGradArgs args;
  args.dy = dy;
  args.x = x;
  args.dx = dx;
  args.min = -0.75;
  args.max = 0.75;
  ASSERT_TRUE(be().clampGrad(args).ok());
  RefForward f = [](const std::vector<Vec> &in) {
    Vec y;
    for (double v : in[0])
      y.push_back(std::clamp(v, -0.75, 0.75));
    return y;
  };
  EXPECT_TRUE(matchesNumeric(dx.values(), f, {xv}, 0, dyv));
}

TEST_P(GradTest, ReluGradAwayFromZero) {
  Vec xv = inputs(17, 10), dyv = inputs(17, 11);
  for (double &v : xv)
    if (std::fabs(v) < 0.01)
      v = 0.5; // the kink is not differentiable
  DeviceTensor x = f32({17}, xv), dy = f32({17}, dyv), dx = zeros({17});
  ReluGradArgs args;
  args.dy = dy;
  args.x = x;
  args.dx = dx;
  ASSERT_TRUE(be().reluGrad(args).ok());
  RefForward f = [](const std::vector<Vec> &in) {
    Vec y;
    for (double v : in[0])
      y.push_back(std::max(v, 0.0));
    return y;
  };
  EXPECT_TRUE(matchesNumeric(dx.values(), f, {xv}, 0, dyv));
}

TEST_P(GradTest, LayerNormGradWithAndWithoutBeta) {
  const int64_t rows = 6, d = 7;
  Vec xv = inputs(rows * d, 12, -2, 3), gv = inputs(d, 13, 0.5, 1.5),
      bv = inputs(d, 14), dyv = inputs(rows * d, 15);
  for (bool hasBeta : {false, true}) {
    SCOPED_TRACE(hasBeta);
    DeviceTensor x = f32({2, 3, d}, xv), g = f32({d}, gv),
                 dy = f32({2, 3, d}, dyv);
    DeviceTensor dx = zeros({2, 3, d}), dg = zeros({d}), db = zeros({d});
    LayerNormGradArgs args;
    args.dy = dy;
    args.x = x;
    args.gamma = g;
    args.dx = dx;
    args.dgamma = dg;
    if (hasBeta)
      args.dbeta = db.ref();
    args.eps = 1e-5;
    ASSERT_TRUE(be().layerNormGrad(args).ok());
    RefForward f = [&](const std::vector<Vec> &in) {
      return ref::layerNorm(in[0], rows, d, in[1], &in[2], 1e-5);
    };
    std::vector<Vec> in = {xv, gv, bv};
    EXPECT_TRUE(matchesNumeric(dx.values(), f, in, 0, dyv)) << "dx";
    EXPECT_TRUE(matchesNumeric(dg.values(), f, in, 1, dyv)) << "dgamma";
    if (hasBeta) {
      EXPECT_TRUE(matchesNumeric(db.values(), f, in, 2, dyv)) << "dbeta";
    }
  }
}

TEST_P(GradTest, RmsNormGrad) {
  const int64_t rows = 5, d = 6;
  Vec xv = inputs(rows * d, 16, -2, 2), gv = inputs(d, 17, 0.5, 1.5),
      dyv = inputs(rows * d, 18);
  DeviceTensor x = f32({rows, d}, xv), g = f32({d}, gv),
               dy = f32({rows, d}, dyv);
  DeviceTensor dx = zeros({rows, d}), dg = zeros({d});
  RmsNormGradArgs args;
  args.dy = dy;
  args.x = x;
  args.gamma = g;
  args.dx = dx;
  args.dgamma = dg;
  args.eps = 1e-6;
  ASSERT_TRUE(be().rmsNormGrad(args).ok());
  RefForward f = [&](const std::vector<Vec> &in) {
    return ref::rmsNorm(in[0], rows, d, in[1], 1e-6);
  };
  EXPECT_TRUE(matchesNumeric(dx.values(), f, {xv, gv}, 0, dyv)) << "dx";
  EXPECT_TRUE(matchesNumeric(dg.values(), f, {xv, gv}, 1, dyv)) << "dgamma";
}

TEST_P(GradTest, BatchNormGradFromTheForwardStatistics) {
  const int64_t rows = 3 * 4, c = 5;
  Vec xv = inputs(rows * c, 19, -1, 2), gv = inputs(c, 20, 0.5, 1.5),
      bv = inputs(c, 21), dyv = inputs(rows * c, 22);
  DeviceTensor x = f32({3, 4, c}, xv), g = f32({c}, gv), b = f32({c}, bv),
               dy = f32({3, 4, c}, dyv);
  DeviceTensor y = zeros({3, 4, c}), mean = zeros({c}), invstd = zeros({c});
  BatchNormArgs fwd;
  fwd.x = x;
  fwd.gamma = g;
  fwd.beta = b;
  fwd.out = y;
  fwd.mean = mean;
  fwd.invstd = invstd;
  fwd.eps = 1e-5;
  ASSERT_TRUE(be().batchNorm(fwd).ok());
  DeviceTensor dx = zeros({3, 4, c}), dg = zeros({c}), db = zeros({c});
  BatchNormGradArgs args;
  args.dy = dy;
  args.x = x;
  args.gamma = g;
  args.mean = mean;
  args.invstd = invstd;
  args.dx = dx;
  args.dgamma = dg;
  args.dbeta = db;
  ASSERT_TRUE(be().batchNormGrad(args).ok());
  // The statistics depend on x too; the dialect's dx accounts for that.
  RefForward f = [&](const std::vector<Vec> &in) {
    return ref::batchNorm(in[0], rows, c, in[1], in[2], 1e-5).y;
  };
  std::vector<Vec> in = {xv, gv, bv};
  EXPECT_TRUE(matchesNumeric(dx.values(), f, in, 0, dyv)) << "dx";
  EXPECT_TRUE(matchesNumeric(dg.values(), f, in, 1, dyv)) << "dgamma";
  EXPECT_TRUE(matchesNumeric(db.values(), f, in, 2, dyv)) << "dbeta";
}

TEST_P(GradTest, SoftmaxGradAlongEveryAxis) {
  Shape shape = {3, 4, 5};
  Vec xv = inputs(60, 23, -2, 2), dyv = inputs(60, 24);
  for (int64_t axis : {-1, 0, 1}) {
    SCOPED_TRACE(axis);
    DeviceTensor x = f32(shape, xv), y = zeros(shape), dy = f32(shape, dyv),
                 dx = zeros(shape);
    SoftmaxArgs fwd;
    fwd.x = x;
    fwd.out = y;
    fwd.axis = axis;
    ASSERT_TRUE(be().softmax(fwd).ok());
    SoftmaxGradArgs args;
    args.dy = dy;
    args.y = y;
    args.dx = dx;
    args.axis = axis;
    ASSERT_TRUE(be().softmaxGrad(args).ok());
    int64_t a = axis < 0 ? axis + 3 : axis;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < a; ++i)
      outer *= shape[i];
    for (int64_t i = a + 1; i < 3; ++i)
      inner *= shape[i];
    RefForward f = [&](const std::vector<Vec> &in) {
      return ref::softmax(in[0], outer, shape[a], inner);
    };
    EXPECT_TRUE(matchesNumeric(dx.values(), f, {xv}, 0, dyv));
  }
}

TEST_P(GradTest, CausalAttentionGrad) {
  const int64_t b = 2, t = 4, c = 6;
  for (int64_t heads : {1, 3}) {
    SCOPED_TRACE(heads);
    Vec qv = inputs(b * t * c, 25), kv = inputs(b * t * c, 26),
        vv = inputs(b * t * c, 27), dov = inputs(b * t * c, 28);
    DeviceTensor q = f32({b, t, c}, qv), k = f32({b, t, c}, kv),
                 v = f32({b, t, c}, vv), dout = f32({b, t, c}, dov);
    DeviceTensor dq = zeros({b, t, c}), dk = zeros({b, t, c}),
                 dv = zeros({b, t, c});
    CausalAttentionGradArgs args;
    args.dout = dout;
    args.q = q;
    args.k = k;
    args.v = v;
    args.dq = dq;
    args.dk = dk;
    args.dv = dv;
    args.numHeads = heads;
    ASSERT_TRUE(be().causalAttentionGrad(args).ok());
    RefForward f = [&](const std::vector<Vec> &in) {
      return ref::causalAttention(in[0], in[1], in[2], b, t, c, heads);
    };
    std::vector<Vec> in = {qv, kv, vv};
    EXPECT_TRUE(matchesNumeric(dq.values(), f, in, 0, dov)) << "dq";
    EXPECT_TRUE(matchesNumeric(dk.values(), f, in, 1, dov)) << "dk";
    EXPECT_TRUE(matchesNumeric(dv.values(), f, in, 2, dov)) << "dv";
  }
}

TEST_P(GradTest, CausalAttentionGradAcrossTiles) {
  // Sizes where finite differences would cost too much: T not a multiple
  // of the CUDA kernels' 32- or 64-row tiles (so several query and key
  // tiles), head dims in each of their widths. Checked against the
  // analytic gradient, which the case above checks at small sizes.
  struct Size {
    int64_t t, heads, hd;
  };
  const int64_t b = 2;
  for (Size sz : {Size{130, 3, 17}, Size{100, 2, 64}, Size{70, 1, 100}}) {
    SCOPED_TRACE(testing::Message()
                 << "T " << sz.t << " heads " << sz.heads << " hd " << sz.hd);
    const int64_t c = sz.heads * sz.hd, n = b * sz.t * c;
    Vec qv = inputs(n, 41), kv = inputs(n, 42), vv = inputs(n, 43),
        dov = inputs(n, 44);
    DeviceTensor q = f32({b, sz.t, c}, qv), k = f32({b, sz.t, c}, kv),
                 v = f32({b, sz.t, c}, vv), dout = f32({b, sz.t, c}, dov);
    DeviceTensor dq = zeros({b, sz.t, c}), dk = zeros({b, sz.t, c}),
                 dv = zeros({b, sz.t, c});
    CausalAttentionGradArgs args;
    args.dout = dout;
    args.q = q;
    args.k = k;
    args.v = v;
    args.dq = dq;
    args.dk = dk;
    args.dv = dv;
    args.numHeads = sz.heads;
    ASSERT_TRUE(be().causalAttentionGrad(args).ok());
    std::vector<Vec> want =
        ref::causalAttentionGrad(qv, kv, vv, dov, b, sz.t, c, sz.heads);
    EXPECT_TRUE(allClose(dq.values(), want[0], 1e-4, 1e-5)) << "dq";
    EXPECT_TRUE(allClose(dk.values(), want[1], 1e-4, 1e-5)) << "dk";
    EXPECT_TRUE(allClose(dv.values(), want[2], 1e-4, 1e-5)) << "dv";
  }
}

TEST_P(GradTest, SlidingWindowAttentionGrad) {
  // Numeric gradients at small sizes, then the analytic f64 gradient over
  // several tiles, windows shorter than and across the tiles.
  const int64_t b = 2;
  for (int64_t window : {1, 2, 4}) {
    const int64_t t = 6, c = 6, heads = 3;
    SCOPED_TRACE(testing::Message() << "window " << window);
    Vec qv = inputs(b * t * c, 61), kv = inputs(b * t * c, 62),
        vv = inputs(b * t * c, 63), dov = inputs(b * t * c, 64);
    DeviceTensor q = f32({b, t, c}, qv), k = f32({b, t, c}, kv),
                 v = f32({b, t, c}, vv), dout = f32({b, t, c}, dov);
    DeviceTensor dq = zeros({b, t, c}), dk = zeros({b, t, c}),
                 dv = zeros({b, t, c});
    CausalAttentionGradArgs args;
    args.dout = dout;
    args.q = q;
    args.k = k;
    args.v = v;
    args.dq = dq;
    args.dk = dk;
    args.dv = dv;
    args.numHeads = heads;
    args.window = window;
    ASSERT_TRUE(be().causalAttentionGrad(args).ok());
    RefForward f = [&](const std::vector<Vec> &in) {
      return ref::causalAttention(in[0], in[1], in[2], b, t, c, heads, window);
    };
    std::vector<Vec> in = {qv, kv, vv};
    EXPECT_TRUE(matchesNumeric(dq.values(), f, in, 0, dov)) << "dq";
    EXPECT_TRUE(matchesNumeric(dk.values(), f, in, 1, dov)) << "dk";
    EXPECT_TRUE(matchesNumeric(dv.values(), f, in, 2, dov)) << "dv";
  }
  struct Size {
    int64_t t, heads, hd, window;
  };
  for (Size sz :
       {Size{130, 3, 17, 5}, Size{150, 2, 16, 70}, Size{100, 1, 40, 64}}) {
    SCOPED_TRACE(testing::Message()
                 << "T " << sz.t << " heads " << sz.heads << " hd " << sz.hd
                 << " window " << sz.window);
    const int64_t c = sz.heads * sz.hd, n = b * sz.t * c;
    Vec qv = inputs(n, 65), kv = inputs(n, 66), vv = inputs(n, 67),
        dov = inputs(n, 68);
    DeviceTensor q = f32({b, sz.t, c}, qv), k = f32({b, sz.t, c}, kv),
                 v = f32({b, sz.t, c}, vv), dout = f32({b, sz.t, c}, dov);
    DeviceTensor dq = zeros({b, sz.t, c}), dk = zeros({b, sz.t, c}),
                 dv = zeros({b, sz.t, c});
    CausalAttentionGradArgs args;
    args.dout = dout;
    args.q = q;
    args.k = k;
    args.v = v;
    args.dq = dq;
    args.dk = dk;
    args.dv = dv;
    args.numHeads = sz.heads;
    args.window = sz.window;
    ASSERT_TRUE(be().causalAttentionGrad(args).ok());
    std::vector<Vec> want = ref::causalAttentionGrad(qv, kv, vv, dov, b, sz.t,
                                                     c, sz.heads, sz.window);
    EXPECT_TRUE(allClose(dq.values(), want[0], 1e-4, 1e-5)) << "dq";
    EXPECT_TRUE(allClose(dk.values(), want[1], 1e-4, 1e-5)) << "dk";
    EXPECT_TRUE(allClose(dv.values(), want[2], 1e-4, 1e-5)) << "dv";
  }
}

TEST_P(GradTest, CrossEntropyGradIgnoresRows) {
  const int64_t rows = 5, classes = 4;
  Vec lv = inputs(rows * classes, 29, -3, 3);
  std::vector<int64_t> tv = {3, 7, 0, 7, 1};
  DeviceTensor logits = f32({rows, classes}, lv);
  DeviceTensor targets = DeviceTensor::indices(be(), DType::i64, {rows}, tv);
  DeviceTensor dloss = f32({}, {1.75}), dlogits = zeros({rows, classes});
  CrossEntropyGradArgs args;
  args.dloss = dloss;
  args.logits = logits;
  args.targets = targets;
  args.dlogits = dlogits;
  args.ignoreIndex = 7;
  ASSERT_TRUE(be().crossEntropyGrad(args).ok());
  RefForward f = [&](const std::vector<Vec> &in) {
    return Vec{ref::crossEntropy(in[0], rows, classes, tv, 7)};
  };
  Vec got = dlogits.values();
  EXPECT_TRUE(matchesNumeric(got, f, {lv}, 0, {1.75}));
  for (int64_t j = 0; j < classes; ++j) {
    EXPECT_EQ(got[1 * classes + j], 0.0);
    EXPECT_EQ(got[3 * classes + j], 0.0);
  }
}

TEST_P(GradTest, EmbeddingGradScatterAddsRepeatedIds) {
  const int64_t v = 6, d = 3;
  std::vector<int64_t> idv = {4, 1, 4, 4, 0, 1};
  Vec tv = inputs(v * d, 30), dyv = inputs(6 * d, 31);
  DeviceTensor ids = DeviceTensor::indices(be(), DType::i32, {2, 3}, idv);
  DeviceTensor dy = f32({2, 3, d}, dyv), out = zeros({v, d});
  EmbeddingGradArgs args;
  args.dy = dy;
  args.ids = ids;
  args.out = out;
  ASSERT_TRUE(be().embeddingGrad(args).ok());
  RefForward f = [&](const std::vector<Vec> &in) {
    Vec y;
    for (int64_t id : idv)
      for (int64_t j = 0; j < d; ++j)
        y.push_back(in[0][id * d + j]);
    return y;
  };
  Vec got = out.values();
  EXPECT_TRUE(matchesNumeric(got, f, {tv}, 0, dyv));
  for (int64_t j = 0; j < d; ++j) { // rows 2, 3, 5 are never looked up
    EXPECT_EQ(got[2 * d + j], 0.0);
    EXPECT_EQ(got[5 * d + j], 0.0);
  }
  DeviceTensor bad =
      DeviceTensor::indices(be(), DType::i32, {2, 3}, {0, 1, 2, 3, 4, 6});
  args.ids = bad;
  EXPECT_EQ(be().embeddingGrad(args).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(GradTest, SumAndMeanGrad) {
  std::vector<int64_t> shape = {3, 4, 5};
  Vec xv = inputs(60, 32);
  struct Case {
    std::vector<int64_t> dims;
    std::vector<bool> reduced;
    bool keepdim;
    Shape dyShape;
  };
  for (const Case &c : {Case{{0, 2}, {true, false, true}, false, {4}},
                        Case{{-1}, {false, false, true}, true, {3, 4, 1}}})
    for (ReduceKind kind : {ReduceKind::sum, ReduceKind::mean}) {
      Vec dyv = inputs(numel(c.dyShape), 33);
      DeviceTensor dy = f32(c.dyShape, dyv), dx = zeros({3, 4, 5});
      ReduceGradArgs args;
      args.kind = kind;
      args.dy = dy;
      args.dx = dx;
      args.dims = c.dims;
      args.keepdim = c.keepdim;
      ASSERT_TRUE(be().reduceGrad(args).ok());
      RefForward f = [&](const std::vector<Vec> &in) {
        return ref::reduce(in[0], shape, c.reduced, kind == ReduceKind::mean);
      };
      EXPECT_TRUE(matchesNumeric(dx.values(), f, {xv}, 0, dyv));
    }
  DeviceTensor dy = zeros({5}), dx = zeros({3, 4, 5});
  ReduceGradArgs args;
  args.dy = dy;
  args.dx = dx;
  args.dims = {0, 2};
  EXPECT_EQ(be().reduceGrad(args).code(), absl::StatusCode::kInvalidArgument);
}

// The VJP of broadcasting x to g's shape is sum_to: every element of x gets
// the sum of the dy it was copied into.
TEST_P(GradTest, SumToIsTheGradientOfBroadcasting) {
  std::vector<int64_t> full = {4, 3, 5}, small = {3, 1};
  Vec xv = inputs(3, 34), dyv = inputs(60, 35);
  DeviceTensor dy = f32({4, 3, 5}, dyv), dx = zeros({3, 1});
  SumToArgs args;
  args.g = dy;
  args.out = dx;
  ASSERT_TRUE(be().sumTo(args).ok());
  RefForward f = [&](const std::vector<Vec> &in) {
    return ref::binary(0, in[0], small, Vec(60, 0.0), full);
  };
  EXPECT_TRUE(matchesNumeric(dx.values(), f, {xv}, 0, dyv));
}

// md.mul has no _grad op: d(lhs) = sum_to(dy * rhs), d(rhs) = sum_to(dy * lhs).
TEST_P(GradTest, MulVjpComposedFromForwardOps) {
  std::vector<int64_t> ls = {2, 1, 4}, rs = {3, 1};
  Vec lv = inputs(8, 36), rv = inputs(3, 37), dyv = inputs(24, 38);
  DeviceTensor l = f32({2, 1, 4}, lv), r = f32({3, 1}, rv),
               dy = f32({2, 3, 4}, dyv);
  DeviceTensor t = zeros({2, 3, 4}), dl = zeros({2, 1, 4}), dr = zeros({3, 1});
  BinaryArgs mul;
  mul.op = BinaryOp::mul;
  SumToArgs sum;
  mul.lhs = dy;
  mul.rhs = r;
  mul.out = t;
  ASSERT_TRUE(be().binary(mul).ok());
  sum.g = t;
  sum.out = dl;
  ASSERT_TRUE(be().sumTo(sum).ok());
  mul.rhs = l;
  ASSERT_TRUE(be().binary(mul).ok());
  sum.out = dr;
  ASSERT_TRUE(be().sumTo(sum).ok());
  RefForward f = [&](const std::vector<Vec> &in) {
    return ref::binary(2, in[0], ls, in[1], rs);
  };
  EXPECT_TRUE(matchesNumeric(dl.values(), f, {lv, rv}, 0, dyv)) << "dlhs";
  EXPECT_TRUE(matchesNumeric(dr.values(), f, {lv, rv}, 1, dyv)) << "drhs";
}

// md.div has no _grad op: d(lhs) = sum_to(dy / rhs), d(rhs) =
// -sum_to((dy * y) / rhs), y = lhs / rhs (VjpRules.cpp).
TEST_P(GradTest, DivVjpComposedFromForwardOps) {
  std::vector<int64_t> ls = {2, 1, 4}, rs = {3, 1};
  Vec lv = inputs(8, 40), rv = inputs(3, 41), dyv = inputs(24, 42);
  for (double &v : rv)
    v = v < 0 ? v - 0.5 : v + 0.5; // away from 0, where 1 / rhs is steep
  DeviceTensor l = f32({2, 1, 4}, lv), r = f32({3, 1}, rv),
               dy = f32({2, 3, 4}, dyv);
  DeviceTensor y = zeros({2, 3, 4}), t = zeros({2, 3, 4}), q = zeros({2, 3, 4});
  DeviceTensor dl = zeros({2, 1, 4}), dr = zeros({3, 1});
  BinaryArgs op;
  op.op = BinaryOp::div;
  op.lhs = l;
  op.rhs = r;
  op.out = y;
  ASSERT_TRUE(be().binary(op).ok());
  // d(lhs) = sum_to(dy / rhs).
  op.lhs = dy;
  op.out = t;
  ASSERT_TRUE(be().binary(op).ok());
  SumToArgs sum;
  sum.g = t;
  sum.out = dl;
  ASSERT_TRUE(be().sumTo(sum).ok());
  // d(rhs) = -sum_to((dy * y) / rhs).
  BinaryArgs mul;
  mul.op = BinaryOp::mul;
  mul.lhs = dy;
  mul.rhs = y;
  mul.out = q;
  ASSERT_TRUE(be().binary(mul).ok());
  op.lhs = q;
  op.out = t;
  ASSERT_TRUE(be().binary(op).ok());
  sum.out = dr;
  ASSERT_TRUE(be().sumTo(sum).ok());
  Vec drv = dr.values();
  for (double &v : drv)
    v = -v;
  RefForward f = [&](const std::vector<Vec> &in) {
    return ref::binary(3, in[0], ls, in[1], rs);
  };
  EXPECT_TRUE(matchesNumeric(dl.values(), f, {lv, rv}, 0, dyv)) << "dlhs";
  EXPECT_TRUE(matchesNumeric(drv, f, {lv, rv}, 1, dyv)) << "drhs";
}

// md.maximum and md.minimum have no _grad op: with s = dy sign(lhs - rhs)
// (md.elementwise_grad abs), d(lhs) = sum_to((dy ± s) / 2) and d(rhs) =
// sum_to((dy ∓ s) / 2) (VjpRules.cpp).
TEST_P(GradTest, MaximumAndMinimumVjpsComposedFromForwardOps) {
  std::vector<int64_t> ls = {2, 1, 4}, rs = {3, 1};
  Vec lv = inputs(8, 43), rv = inputs(3, 44), dyv = inputs(24, 45);
  DeviceTensor l = f32({2, 1, 4}, lv), r = f32({3, 1}, rv),
               dy = f32({2, 3, 4}, dyv);
  for (bool larger : {true, false}) {
    DeviceTensor diff = zeros({2, 3, 4}), s = zeros({2, 3, 4}),
                 t = zeros({2, 3, 4}), plus = zeros({2, 3, 4}),
                 minus = zeros({2, 3, 4});
    DeviceTensor dl = zeros({2, 1, 4}), dr = zeros({3, 1});
    BinaryArgs op;
    op.op = BinaryOp::sub;
    op.lhs = l;
    op.rhs = r;
    op.out = diff;
    ASSERT_TRUE(be().binary(op).ok());
    ElementwiseGradArgs sign;
    sign.fn = ElementwiseFn::abs;
    sign.dy = dy;
    sign.x = diff;
    sign.dx = s;
    ASSERT_TRUE(be().elementwiseGrad(sign).ok());
    ScaleArgs half;
    half.factor = 0.5;
    for (auto [kind, out] : {std::pair{BinaryOp::add, &plus},
                             std::pair{BinaryOp::sub, &minus}}) {
      op.op = kind;
      op.lhs = dy;
      op.rhs = s;
      op.out = t;
      ASSERT_TRUE(be().binary(op).ok());
      half.x = t;
      half.out = *out;
      ASSERT_TRUE(be().scale(half).ok());
    }
    SumToArgs sum;
    sum.g = larger ? plus : minus;
    sum.out = dl;
    ASSERT_TRUE(be().sumTo(sum).ok());
    sum.g = larger ? minus : plus;
    sum.out = dr;
    ASSERT_TRUE(be().sumTo(sum).ok());
    RefForward f = [&](const std::vector<Vec> &in) {
      return ref::binary(larger ? 4 : 5, in[0], ls, in[1], rs);
    };
    EXPECT_TRUE(matchesNumeric(dl.values(), f, {lv, rv}, 0, dyv))
        << (larger ? "maximum" : "minimum") << " dlhs";
    EXPECT_TRUE(matchesNumeric(dr.values(), f, {lv, rv}, 1, dyv))
        << (larger ? "maximum" : "minimum") << " drhs";
  }
}

// md.transpose's VJP is the transpose by the inverse permutation.
TEST_P(GradTest, TransposeVjpIsTheInversePermutation) {
  Vec dyv = inputs(24, 39);
  DeviceTensor dy = f32({4, 2, 3}, dyv), dx = zeros({2, 3, 4});
  TransposeArgs args;
  args.x = dy;
  args.out = dx;
  args.perm = {1, 2, 0}; // the inverse of {2, 0, 1}
  ASSERT_TRUE(be().transpose(args).ok());
  RefForward f = [](const std::vector<Vec> &in) {
    Vec y(24);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 2; ++j)
        for (int k = 0; k < 3; ++k)
          y[(i * 2 + j) * 3 + k] = in[0][(j * 3 + k) * 4 + i];
    return y;
  };
  EXPECT_TRUE(matchesNumeric(dx.values(), f, {inputs(24, 40)}, 0, dyv));
}

// md.slice's VJP is md.slice_grad: dy at the positions the slice read, 0
// at every other element of x.
TEST_P(GradTest, SliceGradIsTheVjpOfSlice) {
  const std::vector<int64_t> xs = {4, 5, 6};
  struct Case {
    int64_t axis, start, step, count;
  };
  for (const Case &c : {Case{0, 1, 1, 3}, Case{0, 0, 3, 2}, Case{1, 1, 2, 2},
                        Case{1, 2, 1, 3}, Case{2, 1, 2, 3}, Case{2, 5, 1, 1}}) {
    SCOPED_TRACE(testing::Message() << "axis " << c.axis << " start " << c.start
                                    << " step " << c.step);
    Shape ys(xs.begin(), xs.end());
    ys[c.axis] = c.count;
    Vec xv = inputs(120, 45), dyv = inputs(numel(ys), 46);
    DeviceTensor dy = f32(ys, dyv), dx = f32({4, 5, 6}, inputs(120, 47));
    SliceGradArgs args;
    args.dy = dy;
    args.dx = dx;
    args.axis = c.axis;
    args.start = c.start;
    args.step = c.step;
    ASSERT_TRUE(be().sliceGrad(args).ok());
    RefForward f = [&](const std::vector<Vec> &in) {
      return ref::slice(in[0], xs, c.axis, c.start, c.step, c.count);
    };
    EXPECT_TRUE(matchesNumeric(dx.values(), f, {xv}, 0, dyv));
  }
}

// md.concat has no _grad op: each input's gradient is md.slice of dy at
// the input's place along the axis (step 1).
TEST_P(GradTest, ConcatVjpIsSlicesOfDy) {
  struct Case {
    int64_t axis;
    std::vector<std::vector<int64_t>> inputs;
  };
  for (const Case &c : {Case{0, {{2, 3, 4}, {1, 3, 4}, {3, 3, 4}}},
                        Case{1, {{2, 3, 4}, {2, 1, 4}, {2, 2, 4}}},
                        Case{2, {{2, 3, 4}, {2, 3, 1}}}}) {
    SCOPED_TRACE(testing::Message() << "axis " << c.axis);
    std::vector<int64_t> ys = c.inputs[0];
    ys[c.axis] = 0;
    std::vector<Vec> in;
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      ys[c.axis] += c.inputs[k][c.axis];
      int64_t n = numel(Shape(c.inputs[k].begin(), c.inputs[k].end()));
      in.push_back(inputs(n, 48 + uint32_t(k)));
    }
    const Shape yShape(ys.begin(), ys.end());
    Vec dyv = inputs(numel(yShape), 52);
    DeviceTensor dy = f32(yShape, dyv);
    RefForward f = [&](const std::vector<Vec> &v) {
      return ref::concat(v, c.inputs, c.axis);
    };
    int64_t start = 0;
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      SCOPED_TRACE(k);
      DeviceTensor dx = zeros(Shape(c.inputs[k].begin(), c.inputs[k].end()));
      SliceArgs args;
      args.x = dy;
      args.out = dx;
      args.axis = c.axis;
      args.start = start;
      args.step = 1;
      ASSERT_TRUE(be().slice(args).ok());
      EXPECT_TRUE(matchesNumeric(dx.values(), f, in, k, dyv));
      start += c.inputs[k][c.axis];
    }
  }
}

// md.expand's VJP is md.sum_to: each element of x gets the sum of the dy
// it was copied into.
TEST_P(GradTest, ExpandVjpIsSumTo) {
  struct Case {
    std::vector<int64_t> x, out;
  };
  for (const Case &c : {Case{{3}, {2, 4, 3}}, Case{{3, 1}, {3, 4}},
                        Case{{1}, {3, 4}}, Case{{2, 1, 3}, {5, 2, 4, 3}}}) {
    const Shape xs(c.x.begin(), c.x.end()), os(c.out.begin(), c.out.end());
    SCOPED_TRACE(testing::Message()
                 << shapeString(xs) << " to " << shapeString(os));
    Vec xv = inputs(numel(xs), 53), dyv = inputs(numel(os), 54);
    DeviceTensor dy = f32(os, dyv), dx = zeros(xs);
    SumToArgs args;
    args.g = dy;
    args.out = dx;
    ASSERT_TRUE(be().sumTo(args).ok());
    RefForward f = [&](const std::vector<Vec> &in) {
      return ref::expand(in[0], c.x, c.out);
    };
    EXPECT_TRUE(matchesNumeric(dx.values(), f, {xv}, 0, dyv));
    // The forward it differentiates is the kernel's.
    DeviceTensor x = f32(xs, xv), y = zeros(os);
    ExpandArgs forward;
    forward.x = x;
    forward.out = y;
    ASSERT_TRUE(be().expand(forward).ok());
    EXPECT_EQ(y.values(), ref::expand(xv, c.x, c.out));
  }
}

} // namespace
} // namespace md::test
