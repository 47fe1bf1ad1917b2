//===- OptimizerKernelTest.cpp - AdamW, SGD, global norm, clip ------------===//
//
// The expected parameters and moments below were computed by hand from
// PyTorch's update rules as docs/dialect.md writes them (torch.optim.AdamW,
// torch.optim.SGD), with every tensor operation rounded to f32 and the
// per-step scalars (bias corrections, lr / bc1, 1 - lr * wd) in double, as
// PyTorch's Python floats are; the f32 rounding was done with a separate
// program, not with this backend. They are compared bit for bit.
//
//===----------------------------------------------------------------------===//

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "test/unit/BackendTestUtil.h"
#include "test/unit/TestBackends.h"

namespace md::test {
namespace {

using namespace md::runtime;

class OptimizerTest : public ::testing::TestWithParam<BackendFactory> {
protected:
  void SetUp() override { MD_MAKE_BACKEND_OR_SKIP(GetParam(), backend_); }
  Backend &be() { return *backend_; }
  DeviceTensor floats(DType t, Shape s, const std::vector<double> &v) {
    return DeviceTensor::floats(be(), t, std::move(s), v);
  }
  std::unique_ptr<Backend> backend_;
};

INSTANTIATE_TEST_SUITE_P(Backends, OptimizerTest,
                         ::testing::ValuesIn(testBackends()), backendName);

TEST_P(OptimizerTest, AdamWFirstStepMovesEachWeightByLrTimesSignOfGrad) {
  // Step 1: m'/bc1 = g and sqrt(v'/bc2) = |g|, so the update is
  // lr * g / (|g| + eps) after the decoupled decay.
  std::vector<double> p0 = {0.5, -1.25, 2.0}, g = {0.1, -0.2, 0.3};
  DeviceTensor p = floats(DType::f32, {3}, p0), grad = floats(DType::f32, {3}, g);
  DeviceTensor m = floats(DType::f32, {3}, {0, 0, 0}), v = floats(DType::f32, {3}, {0, 0, 0});
  AdamWArgs args;
  args.param = args.newParam = p;
  args.grad = grad;
  args.m = args.newM = m;
  args.v = args.newV = v;
  args.lr = 1e-2f;
  args.step = 1;
  args.beta1 = 0.9;
  args.beta2 = 0.95;
  args.eps = 1e-8;
  args.weightDecay = 0.1;
  ASSERT_TRUE(be().adamwUpdate(args).ok());
  std::vector<double> want;
  for (size_t i = 0; i < 3; ++i)
    want.push_back(p0[i] * (1 - 1e-3) - 1e-2 * g[i] / (std::fabs(g[i]) + 1e-8));
  EXPECT_TRUE(allClose(p.values(), want, 1e-6, 1e-7));
  EXPECT_TRUE(allClose(m.values(), {0.01, -0.02, 0.03}, 1e-6, 0));
  EXPECT_TRUE(allClose(v.values(), {0.05 * 0.01, 0.05 * 0.04, 0.05 * 0.09}, 1e-6, 0));
}

TEST_P(OptimizerTest, AdamWThreeStepsMatchTheHandComputedValues) {
  // lr 1e-2, betas (0.9, 0.999), eps 1e-8, weight_decay 0.1.
  const std::vector<std::vector<double>> grads = {
      {0.1, -0.2, 0.3, 0.0}, {-0.05, 0.4, 0.1, 1e-3}, {0.2, 0.2, -0.3, -2.0}};
  const std::vector<std::vector<double>> wantP = {
      {0x1.f53f7ep-2, -0x1.3d1eb8p+0, 0x1.fced92p+0, 0.0},
      {0x1.f204fcp-2, -0x1.3dbd78p+0, 0x1.fa306ep+0, -0x1.e7abacp-8},
      {0x1.eac84ap-2, -0x1.3ec06ap+0, 0x1.f98f22p+0, -0x1.12dfcp-10}};
  const std::vector<std::vector<double>> wantM = {
      {0x1.47ae16p-7, -0x1.47ae16p-6, 0x1.eb852p-6, 0.0},
      {0x1.0624dep-8, 0x1.6872b2p-6, 0x1.2f1aap-5, 0x1.a36e3p-14},
      {0x1.82a994p-6, 0x1.460aa8p-5, 0x1.b089ap-9, -0x1.996a6ap-3}};
  const std::vector<std::vector<double>> wantV = {
      {0x1.4f8b5ap-17, 0x1.4f8b5ap-15, 0x1.797cc6p-14, 0.0},
      {0x1.a3184ap-17, 0x1.a358b8p-13, 0x1.a30d9p-14, 0x1.12e0c2p-30},
      {0x1.b8369ap-15, 0x1.f6d034p-13, 0x1.8e0f88p-13, 0x1.0624e2p-8}};
  DeviceTensor p = floats(DType::f32, {2, 2}, {0.5, -1.25, 2.0, 0.0});
  DeviceTensor m = floats(DType::f32, {2, 2}, {0, 0, 0, 0});
  DeviceTensor v = floats(DType::f32, {2, 2}, {0, 0, 0, 0});
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE(step);
    DeviceTensor g = floats(DType::f32, {2, 2}, grads[step - 1]);
    AdamWArgs args;
    args.param = args.newParam = p;
    args.grad = g;
    args.m = args.newM = m;
    args.v = args.newV = v;
    args.lr = 1e-2f;
    args.step = step;
    args.beta1 = 0.9;
    args.beta2 = 0.999;
    args.eps = 1e-8;
    args.weightDecay = 0.1;
    ASSERT_TRUE(be().adamwUpdate(args).ok());
    EXPECT_TRUE(sameValues(p.values(), wantP[step - 1]));
    EXPECT_TRUE(sameValues(m.values(), wantM[step - 1]));
    EXPECT_TRUE(sameValues(v.values(), wantV[step - 1]));
  }
}

TEST_P(OptimizerTest, AdamWTakesBf16GradsAndBf16Params) {
  // A bf16 grad widens exactly, so it gives the f32 grad's update; a bf16
  // param gets the f32 result rounded once.
  std::vector<double> g = {0.25, -0.5, 0.125};
  DeviceTensor p32 = floats(DType::f32, {3}, {1, 2, 3});
  DeviceTensor p16 = floats(DType::bf16, {3}, {1, 2, 3});
  DeviceTensor g32 = floats(DType::f32, {3}, g), g16 = floats(DType::bf16, {3}, g);
  DeviceTensor m1 = floats(DType::f32, {3}, {0, 0, 0}), v1 = floats(DType::f32, {3}, {0, 0, 0});
  DeviceTensor m2 = floats(DType::f32, {3}, {0, 0, 0}), v2 = floats(DType::f32, {3}, {0, 0, 0});
  AdamWArgs args;
  args.lr = 0.1f;
  args.step = 1;
  args.beta1 = 0.9;
  args.beta2 = 0.999;
  args.eps = 1e-8;
  args.weightDecay = 0.01;
  args.param = args.newParam = p32;
  args.grad = g32;
  args.m = args.newM = m1;
  args.v = args.newV = v1;
  ASSERT_TRUE(be().adamwUpdate(args).ok());
  args.param = args.newParam = p16;
  args.grad = g16;
  args.m = args.newM = m2;
  args.v = args.newV = v2;
  ASSERT_TRUE(be().adamwUpdate(args).ok());
  EXPECT_EQ(p16.values(), roundAll(DType::bf16, p32.values()));
  EXPECT_EQ(m1.values(), m2.values());
  // Moments must be f32.
  DeviceTensor m16 = floats(DType::bf16, {3}, {0, 0, 0});
  args.m = args.newM = m16;
  EXPECT_EQ(be().adamwUpdate(args).code(), absl::StatusCode::kInvalidArgument);
  args.m = args.newM = m2;
  args.step = 0;
  EXPECT_EQ(be().adamwUpdate(args).code(), absl::StatusCode::kInvalidArgument);
}

struct SgdCase {
  const char *name;
  float lr;
  double momentum, dampening, weightDecay;
  bool nesterov;
  std::vector<std::vector<double>> wantP, wantBuf;
};

TEST_P(OptimizerTest, SgdThreeStepsMatchTheHandComputedValues) {
  const std::vector<std::vector<double>> grads = {
      {0.5, -0.25, 1.0}, {0.125, 0.75, -0.5}, {-1.0, 0.0, 0.25}};
  const std::vector<SgdCase> cases = {
      {"plain", 0.1f, 0, 0, 0, false,
       {{0x1.e66666p-1, -0x1.f9999ap+0, 0x1.99999ap-2},
        {0x1.ep-1, -0x1.066666p+1, 0x1.cccccep-2},
        {0x1.09999ap+0, -0x1.066666p+1, 0x1.b33334p-2}},
       {}},
      {"momentum, dampening, weight decay", 0.1f, 0.9, 0.1, 0.01, false,
       {{0x1.e5e354p-1, -0x1.f91688p+0, 0x1.991688p-2},
        {0x1.c8309ep-1, -0x1.01d8a8p+1, 0x1.6a2dd6p-2},
        {0x1.db218cp-1, -0x1.0662e6p+1, 0x1.289852p-2}},
       {{0x1.051eb8p-1, -0x1.147ae2p-2, 0x1.0147aep+0},
        {0x1.28fb22p-1, 0x1.a82f52p-2, 0x1.d516fap-2},
        {-0x1.7ad2a4p-2, 0x1.6b339p-2, 0x1.47eb9p-1}}},
      {"nesterov, weight decay", 0.05f, 0.9, 0, 0.01, true,
       {{0x1.e7319p-1, -0x1.f96fp+0, 0x1.9e3bcep-2},
        {0x1.d6134ep-1, -0x1.04327p+1, 0x1.a4ccfcp-2},
        {0x1.f9f632p-1, -0x1.0679ccp+1, 0x1.7b2346p-2}},
       {{0x1.051eb8p-1, -0x1.147ae2p-2, 0x1.0147aep+0},
        {0x1.2fe144p-1, 0x1.f2f35ep-2, 0x1.a259acp-2},
        {-0x1.d39d58p-2, 0x1.ac3d64p-2, 0x1.3e5c94p-1}}},
  };
  for (const SgdCase &c : cases) {
    SCOPED_TRACE(c.name);
    DeviceTensor p = floats(DType::f32, {3}, {1.0, -2.0, 0.5});
    // The buffer starts as garbage: step 1 must overwrite it with g.
    DeviceTensor buf = floats(DType::f32, {3}, {7, 7, 7});
    for (int step = 1; step <= 3; ++step) {
      SCOPED_TRACE(step);
      DeviceTensor g = floats(DType::f32, {3}, grads[step - 1]);
      SgdArgs args;
      args.param = args.newParam = p;
      args.grad = g;
      if (c.momentum > 0) {
        args.momentumBuffer = buf.ref();
        args.newMomentumBuffer = buf.ref();
      }
      args.lr = c.lr;
      args.step = step;
      args.momentum = c.momentum;
      args.dampening = c.dampening;
      args.weightDecay = c.weightDecay;
      args.nesterov = c.nesterov;
      ASSERT_TRUE(be().sgdUpdate(args).ok());
      EXPECT_TRUE(sameValues(p.values(), c.wantP[step - 1]));
      if (c.momentum > 0) {
        EXPECT_TRUE(sameValues(buf.values(), c.wantBuf[step - 1]));
      }
    }
  }
}

TEST_P(OptimizerTest, SgdRefusesInconsistentMomentumSettings) {
  DeviceTensor p = floats(DType::f32, {2}, {1, 2}), g = floats(DType::f32, {2}, {1, 1});
  DeviceTensor buf = floats(DType::f32, {2}, {0, 0});
  SgdArgs args;
  args.param = args.newParam = p;
  args.grad = g;
  args.lr = 0.1f;
  args.momentum = 0.9; // but no buffer
  EXPECT_EQ(be().sgdUpdate(args).code(), absl::StatusCode::kInvalidArgument);
  args.momentumBuffer = args.newMomentumBuffer = buf.ref();
  args.nesterov = true;
  args.dampening = 0.5;
  absl::Status s = be().sgdUpdate(args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("nesterov"), std::string::npos) << s;
  EXPECT_EQ(p.values(), (std::vector<double>{1, 2}));
}

TEST_P(OptimizerTest, GlobalNormOfSeveralTensorsOfMixedTypes) {
  DeviceTensor a = floats(DType::f32, {2}, {3, 4});
  DeviceTensor b = floats(DType::bf16, {1, 1}, {12});
  DeviceTensor out = floats(DType::f32, {}, {0});
  GlobalNormArgs args;
  args.inputs = {a.ref(), b.ref()};
  args.out = out;
  ASSERT_TRUE(be().globalNorm(args).ok());
  EXPECT_EQ(out.scalar(), 13.0);
  args.squared = true;
  ASSERT_TRUE(be().globalNorm(args).ok());
  EXPECT_EQ(out.scalar(), 169.0);

  auto xv = roundAll(DType::f32, randomValues(1001, 60));
  DeviceTensor x = floats(DType::f32, {1001}, xv);
  args.inputs = {x.ref()};
  args.squared = false;
  ASSERT_TRUE(be().globalNorm(args).ok());
  double sum = 0;
  for (double v : xv)
    sum += v * v;
  EXPECT_NEAR(out.scalar(), std::sqrt(sum), 1e-6 * std::sqrt(sum));
  auto first = out.bytes();
  ASSERT_TRUE(be().globalNorm(args).ok());
  EXPECT_TRUE(sameBits(first, out.bytes()));

  args.inputs.clear();
  EXPECT_EQ(be().globalNorm(args).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(OptimizerTest, ClipScalesDownOnlyAboveTheMaximum) {
  std::vector<double> gv = {0.5, -1.5, 2.0};
  // norm 10 > max_norm 1: scale = 1 / (10 + 1e-6) in f32.
  DeviceTensor g = floats(DType::f32, {3}, gv), out = floats(DType::f32, {3}, {0, 0, 0});
  DeviceTensor norm = floats(DType::f32, {}, {10});
  ClipArgs args;
  args.grads = {g.ref()};
  args.outs = {out.ref()};
  args.norm = norm;
  args.maxNorm = 1.0;
  ASSERT_TRUE(be().clip(args).ok());
  float scale = 1.0f / (10.0f + 1e-6f);
  std::vector<double> want;
  for (double v : gv)
    want.push_back(float(v) * scale);
  EXPECT_EQ(out.values(), want);
  // norm 0.5 <= max_norm: the scale is 1 and the gradients keep their bits.
  DeviceTensor small = floats(DType::f32, {}, {0.5});
  args.norm = small;
  ASSERT_TRUE(be().clip(args).ok());
  EXPECT_EQ(out.values(), gv);
  // A NaN norm is not clipped away.
  DeviceTensor nan = floats(DType::f32, {}, {std::numeric_limits<double>::quiet_NaN()});
  args.norm = nan;
  ASSERT_TRUE(be().clip(args).ok());
  for (double v : out.values())
    EXPECT_TRUE(std::isnan(v));
  args.norm = norm;
  args.maxNorm = 0;
  EXPECT_EQ(be().clip(args).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(OptimizerTest, ClipRoundsBf16GradientsOnce) {
  auto gv = roundAll(DType::bf16, randomValues(9, 61, -3, 3));
  DeviceTensor g = floats(DType::bf16, {9}, gv);
  DeviceTensor norm = floats(DType::f32, {}, {3});
  ClipArgs args;
  args.grads = {g.ref()};
  args.outs = {g.ref()}; // in place
  args.norm = norm;
  args.maxNorm = 2.0;
  ASSERT_TRUE(be().clip(args).ok());
  float scale = 2.0f / (3.0f + 1e-6f);
  std::vector<double> want;
  for (double v : gv)
    want.push_back(roundTo(DType::bf16, float(v) * scale));
  EXPECT_EQ(g.values(), want);
}

} // namespace
} // namespace md::test
