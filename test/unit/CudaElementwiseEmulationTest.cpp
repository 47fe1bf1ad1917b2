//===- CudaElementwiseEmulationTest.cpp - Elementwise.cu on a CPU ---------===//
//
// Compiles runtime/cuda/Elementwise.cu as C++ against the host stand-ins of
// test/unit/emulated/runtime/cuda/KernelUtil.cuh and runs its launchers with
// the iteration spaces CudaOps.cpp builds, against the CPU backend on the
// same operands: the elementwise activations and their gradients (silu
// included) in f32 and bf16, a broadcasting binary op, a mean over a middle
// axis and its gradient, a transpose, AdamW, the global norm over two
// tensors and clipping by it. Lengths exceed a block and a grid-stride step
// of one block, so the indexing of every loop is exercised. The
// BackendKernelTest /cuda cases check the same kernels on a device.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Elementwise.cu"

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/core/OptimizerScalars.h"
#include "test/unit/EmulatedTensors.h"

namespace md::test {
namespace {

namespace k = md::cuda::kernels;
using emulated::HostTensor;
using runtime::DType;

/// A Strided space of `shape` whose operand A (and B) walk with the given
/// element strides, as CudaOps.cpp's strided() builds it.
k::Strided space(const runtime::Shape &shape, const runtime::Shape &a,
                 const runtime::Shape &b = {}) {
  k::Strided s;
  s.rank = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    s.shape[i] = shape[i];
    s.strideA[i] = a[i];
    s.strideB[i] = b.empty() ? 0 : b[i];
  }
  return s;
}

class CudaElementwiseEmulationTest : public ::testing::Test {
protected:
  cpu::CpuBackend cpu{1};
};

TEST_F(CudaElementwiseEmulationTest, MathFunctionsAndTheirGradients) {
  // md.elementwise's cases, launched as CudaOps.cpp launches them (the
  // math cases follow silu in ElementwiseFn's order), against the CPU
  // backend on inputs inside each domain.
  const int64_t n = 700;
  for (int f = 0; f <= static_cast<int>(runtime::ElementwiseFn::rsqrt); ++f) {
    const auto fn = static_cast<runtime::ElementwiseFn>(f);
    SCOPED_TRACE(runtime::ElementwiseFnName(fn));
    const bool positive = fn == runtime::ElementwiseFn::log ||
                          fn == runtime::ElementwiseFn::sqrt ||
                          fn == runtime::ElementwiseFn::rsqrt;
    for (DType t : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(int(t));
      HostTensor x = HostTensor::random(t, {n}, 3, positive ? 0.1 : -4, 4),
                 dy = HostTensor::random(t, {n}, 4);
      HostTensor out(t, {n}), want(t, {n}), dx(t, {n}), wantDx(t, {n});
      const auto op = static_cast<k::Unary>(static_cast<int>(k::Unary::exp) + f);
      const auto grad =
          static_cast<k::UnaryGrad>(static_cast<int>(k::UnaryGrad::exp) + f);
      ASSERT_EQ(k::unary(op, x.data(), x.type(), out.data(), out.type(), n,
                         1.0f, nullptr),
                cudaSuccess);
      ASSERT_EQ(k::unaryGrad(grad, dy.data(), dy.type(), x.data(), x.type(),
                             dx.data(), dx.type(), n, 1.0f, nullptr),
                cudaSuccess);
      runtime::ElementwiseArgs a;
      a.x = x.ref();
      a.out = want.ref();
      a.fn = fn;
      ASSERT_TRUE(cpu.elementwise(a).ok());
      runtime::ElementwiseGradArgs g;
      g.dy = dy.ref();
      g.x = x.ref();
      g.dx = wantDx.ref();
      g.fn = fn;
      ASSERT_TRUE(cpu.elementwiseGrad(g).ok());
      // The CPU's exp and tanh are vectorised, the kernels' libm's: a few
      // ulps apart at most.
      EXPECT_TRUE(emulated::close(out, want, t, /*f32Atol=*/1e-5)) << "forward";
      EXPECT_TRUE(emulated::close(dx, wantDx, t, /*f32Atol=*/1e-4))
          << "gradient";
    }
  }
}

TEST_F(CudaElementwiseEmulationTest, PowAndItsGradient) {
  // md.pow's case: the exponent travels as the kernels' factor.
  const int64_t n = 700;
  for (float c : {2.0f, 0.5f, -1.5f}) {
    SCOPED_TRACE(c);
    HostTensor x = HostTensor::random(DType::f32, {n}, 5, 0.1, 4),
               dy = HostTensor::random(DType::f32, {n}, 6);
    HostTensor out(DType::f32, {n}), want(DType::f32, {n}),
        dx(DType::f32, {n}), wantDx(DType::f32, {n});
    ASSERT_EQ(k::unary(k::Unary::pow, x.data(), x.type(), out.data(),
                       out.type(), n, c, nullptr),
              cudaSuccess);
    ASSERT_EQ(k::unaryGrad(k::UnaryGrad::pow, dy.data(), dy.type(), x.data(),
                           x.type(), dx.data(), dx.type(), n, c, nullptr),
              cudaSuccess);
    runtime::PowArgs a;
    a.x = x.ref();
    a.out = want.ref();
    a.exponent = c;
    ASSERT_TRUE(cpu.pow(a).ok());
    runtime::PowGradArgs g;
    g.dy = dy.ref();
    g.x = x.ref();
    g.dx = wantDx.ref();
    g.exponent = c;
    ASSERT_TRUE(cpu.powGrad(g).ok());
    EXPECT_TRUE(emulated::close(out, want, DType::f32)) << "forward";
    EXPECT_TRUE(emulated::close(dx, wantDx, DType::f32)) << "gradient";
  }
}

TEST_F(CudaElementwiseEmulationTest, ActivationsAndTheirGradients) {
  const int64_t n = 700; // more than two blocks of 256
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(int(t));
    HostTensor x = HostTensor::random(t, {n}, 1, -6, 6),
               dy = HostTensor::random(t, {n}, 2);
    struct Case {
      const char *name;
      k::Unary op;
      k::UnaryGrad grad;
    };
    for (const Case &c : {Case{"gelu", k::Unary::geluExact,
                               k::UnaryGrad::geluExact},
                          Case{"gelu tanh", k::Unary::geluTanh,
                               k::UnaryGrad::geluTanh},
                          Case{"relu", k::Unary::relu, k::UnaryGrad::relu},
                          Case{"silu", k::Unary::silu, k::UnaryGrad::silu}}) {
      SCOPED_TRACE(c.name);
      HostTensor out(t, {n}), want(t, {n}), dx(t, {n}), wantDx(t, {n});
      ASSERT_EQ(k::unary(c.op, x.data(), x.type(), out.data(), out.type(), n,
                         1.0f, nullptr),
                cudaSuccess);
      ASSERT_EQ(k::unaryGrad(c.grad, dy.data(), dy.type(), x.data(), x.type(),
                             dx.data(), dx.type(), n, 1.0f, nullptr),
                cudaSuccess);
      const std::string name = c.name;
      if (name == "relu") {
        runtime::ReluArgs a;
        a.x = x.ref();
        a.out = want.ref();
        ASSERT_TRUE(cpu.relu(a).ok());
        runtime::ReluGradArgs g;
        g.dy = dy.ref();
        g.x = x.ref();
        g.dx = wantDx.ref();
        ASSERT_TRUE(cpu.reluGrad(g).ok());
      } else if (name == "silu") {
        runtime::SiluArgs a;
        a.x = x.ref();
        a.out = want.ref();
        ASSERT_TRUE(cpu.silu(a).ok());
        runtime::SiluGradArgs g;
        g.dy = dy.ref();
        g.x = x.ref();
        g.dx = wantDx.ref();
        ASSERT_TRUE(cpu.siluGrad(g).ok());
      } else {
        const bool approximate = name == "gelu tanh";
        runtime::GeluArgs a;
        a.x = x.ref();
        a.out = want.ref();
        a.approximate = approximate;
        ASSERT_TRUE(cpu.gelu(a).ok());
        runtime::GeluGradArgs g;
        g.dy = dy.ref();
        g.x = x.ref();
        g.dx = wantDx.ref();
        g.approximate = approximate;
        ASSERT_TRUE(cpu.geluGrad(g).ok());
      }
      EXPECT_TRUE(emulated::close(out, want, t)) << "forward";
      // Where tanh saturates, 1 - tanh(u)^2 cancels: the CPU's vectorised
      // tanh rounds to 1 a little earlier than tanhf, which leaves up to
      // 1.5e-6 of the exact gradient (at x = -5) as 0.
      EXPECT_TRUE(emulated::close(dx, wantDx, t, /*f32Atol=*/1e-5))
          << "gradient";
    }
    // scale, with its factor rounded to f32 as the CPU does.
    HostTensor out(t, {n}), want(t, {n});
    ASSERT_EQ(k::unary(k::Unary::scale, x.data(), x.type(), out.data(),
                       out.type(), n, float(0.3), nullptr),
              cudaSuccess);
    runtime::ScaleArgs a;
    a.x = x.ref();
    a.out = want.ref();
    a.factor = 0.3;
    ASSERT_TRUE(cpu.scale(a).ok());
    EXPECT_TRUE(emulated::close(out, want, t)) << "scale";
  }
}

TEST_F(CudaElementwiseEmulationTest, BroadcastingBinaryOps) {
  // [3, 1, 5] op [4, 1] -> [3, 4, 5].
  HostTensor l = HostTensor::random(DType::f32, {3, 1, 5}, 3),
             r = HostTensor::random(DType::f32, {4, 1}, 4);
  const k::Strided s = space({3, 4, 5}, {5, 0, 1}, {0, 1, 0});
  for (auto [op, cpuOp] :
       {std::pair{k::Binary::add, runtime::BinaryOp::add},
        std::pair{k::Binary::sub, runtime::BinaryOp::sub},
        std::pair{k::Binary::mul, runtime::BinaryOp::mul}}) {
    HostTensor out(DType::f32, {3, 4, 5}), want(DType::f32, {3, 4, 5});
    ASSERT_EQ(k::binary(op, l.data(), l.type(), r.data(), r.type(), out.data(),
                        out.type(), s, 60, nullptr),
              cudaSuccess);
    runtime::BinaryArgs a;
    a.op = cpuOp;
    a.lhs = l.ref();
    a.rhs = r.ref();
    a.out = want.ref();
    ASSERT_TRUE(cpu.binary(a).ok());
    EXPECT_TRUE(emulated::close(out, want, DType::f32)) << int(op);
  }
}

TEST_F(CudaElementwiseEmulationTest, MeanOverAMiddleAxisAndItsGradient) {
  // x [3, 300, 2], mean over dim 1: 6 outputs, each a block summing 300.
  HostTensor x = HostTensor::random(DType::f32, {3, 300, 2}, 5);
  HostTensor out(DType::f32, {3, 2}), want(DType::f32, {3, 2});
  ASSERT_EQ(k::reduceSum(x.data(), x.type(), out.data(), out.type(),
                         space({3, 2}, {600, 1}), 6, space({300}, {2}), 300,
                         300.0, nullptr),
            cudaSuccess);
  runtime::ReduceArgs a;
  a.kind = runtime::ReduceKind::mean;
  a.x = x.ref();
  a.out = want.ref();
  a.dims = {1};
  ASSERT_TRUE(cpu.reduce(a).ok());
  EXPECT_TRUE(emulated::close(out, want, DType::f32));

  // Its gradient broadcasts dy [3, 2] back over dim 1, divided by 300.
  HostTensor dy = HostTensor::random(DType::f32, {3, 2}, 6);
  HostTensor dx(DType::f32, {3, 300, 2}), wantDx(DType::f32, {3, 300, 2});
  ASSERT_EQ(k::broadcastTo(dy.data(), dy.type(), dx.data(), dx.type(),
                           space({3, 300, 2}, {2, 0, 1}), 1800, true, 300.0f,
                           nullptr),
            cudaSuccess);
  runtime::ReduceGradArgs g;
  g.kind = runtime::ReduceKind::mean;
  g.dy = dy.ref();
  g.dx = wantDx.ref();
  g.dims = {1};
  ASSERT_TRUE(cpu.reduceGrad(g).ok());
  EXPECT_TRUE(emulated::close(dx, wantDx, DType::f32));
}

TEST_F(CudaElementwiseEmulationTest, Transpose) {
  // x [4, 300] to [300, 4]: out dim i walks x's dim perm[i].
  HostTensor x = HostTensor::random(DType::bf16, {4, 300}, 7);
  HostTensor out(DType::bf16, {300, 4}), want(DType::bf16, {300, 4});
  ASSERT_EQ(k::permute(x.data(), out.data(), 2, space({300, 4}, {1, 300}),
                       1200, nullptr),
            cudaSuccess);
  runtime::TransposeArgs a;
  a.x = x.ref();
  a.out = want.ref();
  a.perm = {1, 0};
  ASSERT_TRUE(cpu.transpose(a).ok());
  EXPECT_TRUE(emulated::close(out, want, DType::bf16));
}

TEST_F(CudaElementwiseEmulationTest, AdamWGlobalNormAndClip) {
  const int64_t n = 600;
  HostTensor p = HostTensor::random(DType::f32, {n}, 8),
             g = HostTensor::random(DType::f32, {n}, 9),
             m = HostTensor::random(DType::f32, {n}, 10, 0, 0.1),
             v = HostTensor::random(DType::f32, {n}, 11, 0, 0.1);
  HostTensor wantP = p, wantM = m, wantV = v;
  runtime::AdamWArgs a;
  a.lr = 1e-2f;
  a.step = 3;
  a.beta1 = 0.9;
  a.beta2 = 0.95;
  a.eps = 1e-8;
  a.weightDecay = 0.1;
  a.param = a.newParam = wantP.ref();
  a.grad = g.ref();
  a.m = a.newM = wantM.ref();
  a.v = a.newV = wantV.ref();
  ASSERT_TRUE(cpu.adamwUpdate(a).ok());
  ASSERT_EQ(k::adamw(p.data(), p.type(), g.data(), g.type(), m.as<float>(),
                     v.as<float>(), p.data(), p.type(), m.as<float>(),
                     v.as<float>(), n, runtime::adamwScalars(a), nullptr),
            cudaSuccess);
  EXPECT_TRUE(emulated::close(p, wantP, DType::f32)) << "param";
  EXPECT_TRUE(emulated::close(m, wantM, DType::f32)) << "m";
  EXPECT_TRUE(emulated::close(v, wantV, DType::f32)) << "v";

  // The 2-norm of two tensors together, then clipping by it.
  HostTensor h = HostTensor::random(DType::bf16, {300}, 12);
  std::vector<double> partials(k::kNormPartials, 0.0);
  HostTensor norm(DType::f32, {}), wantNorm(DType::f32, {});
  ASSERT_EQ(k::normPartials(g.data(), g.type(), n, partials.data(), nullptr),
            cudaSuccess);
  ASSERT_EQ(k::normPartials(h.data(), h.type(), 300, partials.data(), nullptr),
            cudaSuccess);
  ASSERT_EQ(k::normFinish(partials.data(), norm.as<float>(), false, nullptr),
            cudaSuccess);
  runtime::GlobalNormArgs gn;
  gn.inputs = {g.ref(), h.ref()};
  gn.out = wantNorm.ref();
  ASSERT_TRUE(cpu.globalNorm(gn).ok());
  EXPECT_TRUE(emulated::close(norm, wantNorm, DType::f32)) << "norm";

  HostTensor clipped(DType::f32, {n}), wantClipped(DType::f32, {n});
  ASSERT_EQ(k::clip(g.data(), g.type(), clipped.data(), clipped.type(), n,
                    norm.as<float>(), 1.0f, nullptr),
            cudaSuccess);
  runtime::ClipArgs c;
  c.grads = {g.ref()};
  c.norm = wantNorm.ref();
  c.outs = {wantClipped.ref()};
  c.maxNorm = 1.0;
  ASSERT_TRUE(cpu.clip(c).ok());
  EXPECT_TRUE(emulated::close(clipped, wantClipped, DType::f32)) << "clip";
}

} // namespace
} // namespace md::test
