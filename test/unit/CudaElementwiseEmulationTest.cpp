//===- CudaElementwiseEmulationTest.cpp - Elementwise.cu on a CPU ---------===//
//
// Compiles runtime/cuda/Elementwise.cu as C++ against the host stand-ins of
// test/unit/emulated/runtime/cuda/KernelUtil.cuh and runs its launchers with
// the iteration spaces CudaOps.cpp builds, against the CPU backend on the
// same operands: the elementwise activations and their gradients (silu
// included) in f32 and bf16, a broadcasting binary op, a mean over a middle
// axis and its gradient, a transpose, a slice and its gradient, concat,
// expand and the cast of indices (bit for bit: they move elements, or round
// as the CPU does), AdamW, the global norm over two tensors and clipping
// by it. Lengths exceed a block and a grid-stride step of one block, so the
// indexing of every loop is exercised. The BackendKernelTest /cuda cases
// check the same kernels on a device.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Elementwise.cu"

#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/core/OptimizerScalars.h"
#include "runtime/core/Strides.h"
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

TEST_F(CudaElementwiseEmulationTest, ClampAndItsGradient) {
  const int64_t n = 700;
  for (DType t : {DType::f32, DType::bf16}) {
    HostTensor x = HostTensor::random(t, {n}, 7, -3, 3),
               dy = HostTensor::random(t, {n}, 8);
    HostTensor out(t, {n}), want(t, {n}), dx(t, {n}), wantDx(t, {n});
    ASSERT_EQ(k::clamp(x.data(), x.type(), out.data(), out.type(), n, -1.0f,
                       2.0f, nullptr),
              cudaSuccess);
    ASSERT_EQ(k::clampGrad(dy.data(), dy.type(), x.data(), x.type(), dx.data(),
                           dx.type(), n, -1.0f, 2.0f, nullptr),
              cudaSuccess);
    runtime::ClampArgs a;
    a.x = x.ref();
    a.out = want.ref();
    a.min = -1;
    a.max = 2;
    ASSERT_TRUE(cpu.clamp(a).ok());
    runtime::ClampGradArgs g;
    g.dy = dy.ref();
    g.x = x.ref();
    g.dx = wantDx.ref();
    g.min = -1;
    g.max = 2;
    ASSERT_TRUE(cpu.clampGrad(g).ok());
    EXPECT_TRUE(emulated::identical(out, want)) << "forward";
    EXPECT_TRUE(emulated::identical(dx, wantDx)) << "gradient";
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
        std::pair{k::Binary::mul, runtime::BinaryOp::mul},
        std::pair{k::Binary::div, runtime::BinaryOp::div},
        std::pair{k::Binary::maximum, runtime::BinaryOp::maximum},
        std::pair{k::Binary::minimum, runtime::BinaryOp::minimum}}) {
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

/// Operands for the layout kernels, which move elements of any type:
/// floats random in the element type, indices distinct (past 2^32 in i64).
HostTensor operand(DType t, const runtime::Shape &shape, uint32_t seed) {
  if (!runtime::isIndex(t))
    return HostTensor::random(t, shape, seed);
  HostTensor h(t, shape);
  for (int64_t i = 0; i < h.numel(); ++i) {
    const int64_t v = (i + seed) * (i % 2 ? -1 : 1);
    if (t == DType::i32)
      h.as<int32_t>()[i] = int32_t(v * 1000003);
    else
      h.as<int64_t>()[i] = v * int64_t(10000000019);
  }
  return h;
}

runtime::Shape asShape(const std::vector<int64_t> &v) {
  return runtime::Shape(v.begin(), v.end());
}

/// The walk of a slice of `whole` along axis from start by step, over the
/// sliced shape, as CudaOps.cpp's sliceSpace builds it: whole's row-major
/// strides, the axis's times step, from element start * stride(axis).
k::Strided sliceSpace(const runtime::Shape &whole, const runtime::Shape &sliced,
                      int64_t axis, int64_t start, int64_t step,
                      int64_t *offset) {
  std::vector<int64_t> strides = runtime::rowMajorStrides(whole);
  *offset = start * strides[axis];
  strides[axis] *= step;
  return space(sliced, asShape(strides));
}

TEST_F(CudaElementwiseEmulationTest, SliceAndItsGradient) {
  // md.slice through permute, md.slice_grad through scatter into a dx that
  // CudaOps.cpp zeroes first (a HostTensor starts zeroed), against the CPU
  // backend, elements of 2, 4 and 8 bytes.
  const runtime::Shape xs = {3, 400, 2};
  struct Case {
    int64_t axis, start, step, count;
  };
  for (DType t : {DType::bf16, DType::f32, DType::i64})
    for (const Case &c :
         {Case{1, 5, 3, 120}, Case{1, 50, 1, 350}, Case{0, 1, 1, 2},
          Case{0, 0, 2, 2}, Case{2, 1, 1, 1}}) {
      SCOPED_TRACE(testing::Message()
                   << runtime::dtypeName(t) << " axis " << c.axis << " start "
                   << c.start << " step " << c.step);
      runtime::Shape ys = xs;
      ys[c.axis] = c.count;
      HostTensor x = operand(t, xs, 13);
      HostTensor out(t, ys), want(t, ys);
      int64_t offset = 0;
      const k::Strided s = sliceSpace(xs, ys, c.axis, c.start, c.step, &offset);
      const int es = int(runtime::dtypeSize(t));
      ASSERT_EQ(k::permute(static_cast<const char *>(x.data()) + offset * es,
                           out.data(), es, s, out.numel(), nullptr),
                cudaSuccess);
      runtime::SliceArgs a;
      a.x = x.ref();
      a.out = want.ref();
      a.axis = c.axis;
      a.start = c.start;
      a.step = c.step;
      ASSERT_TRUE(cpu.slice(a).ok());
      EXPECT_TRUE(emulated::identical(out, want)) << "slice";

      HostTensor dy = operand(t, ys, 14);
      HostTensor dx(t, xs), wantDx = operand(t, xs, 15);
      ASSERT_EQ(k::scatter(dy.data(),
                           static_cast<char *>(dx.data()) + offset * es, es, s,
                           dy.numel(), nullptr),
                cudaSuccess);
      runtime::SliceGradArgs g;
      g.dy = dy.ref();
      g.dx = wantDx.ref();
      g.axis = c.axis;
      g.start = c.start;
      g.step = c.step;
      ASSERT_TRUE(cpu.sliceGrad(g).ok());
      EXPECT_TRUE(emulated::identical(dx, wantDx)) << "slice_grad";
    }
}

TEST_F(CudaElementwiseEmulationTest, Concat) {
  // Each input scattered into out at its place, through out's strides, as
  // CudaOps.cpp launches them.
  struct Case {
    int64_t axis;
    std::vector<runtime::Shape> inputs;
  };
  const Case cases[] = {
      {0, {{2, 300}, {1, 300}, {3, 300}}},
      {1, {{3, 250, 2}, {3, 1, 2}, {3, 120, 2}}},
      {2, {{3, 100, 3}, {3, 100, 1}}},
  };
  for (DType t : {DType::bf16, DType::f32, DType::i32, DType::i64})
    for (const Case &c : cases) {
      SCOPED_TRACE(testing::Message()
                   << runtime::dtypeName(t) << " axis " << c.axis);
      runtime::Shape os = c.inputs[0];
      os[c.axis] = 0;
      std::vector<HostTensor> ins;
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        ins.push_back(operand(t, c.inputs[i], 20 + uint32_t(i)));
        os[c.axis] += c.inputs[i][c.axis];
      }
      HostTensor out(t, os), want(t, os);
      const std::vector<int64_t> strides = runtime::rowMajorStrides(os);
      const int es = int(runtime::dtypeSize(t));
      int64_t at = 0;
      for (size_t i = 0; i < ins.size(); ++i) {
        ASSERT_EQ(k::scatter(ins[i].data(),
                             static_cast<char *>(out.data()) +
                                 at * strides[c.axis] * es,
                             es, space(c.inputs[i], asShape(strides)),
                             ins[i].numel(), nullptr),
                  cudaSuccess);
        at += c.inputs[i][c.axis];
      }
      runtime::ConcatArgs a;
      for (HostTensor &in : ins)
        a.inputs.push_back(in.ref());
      a.out = want.ref();
      a.axis = c.axis;
      ASSERT_TRUE(cpu.concat(a).ok());
      EXPECT_TRUE(emulated::identical(out, want));
    }
}

TEST_F(CudaElementwiseEmulationTest, Expand) {
  // permute over out's shape with x's broadcast strides (0 on new and
  // stretched dims), as CudaOps.cpp launches it.
  struct Case {
    runtime::Shape x, out;
  };
  for (DType t : {DType::bf16, DType::f32, DType::i64})
    for (const Case &c :
         {Case{{300}, {3, 300}}, Case{{3, 1}, {2, 3, 300}}, Case{{1}, {700}},
          Case{{2, 1, 5}, {4, 2, 60, 5}}, Case{{}, {3, 100}}}) {
      SCOPED_TRACE(testing::Message()
                   << runtime::dtypeName(t) << " " << runtime::shapeString(c.x)
                   << " to " << runtime::shapeString(c.out));
      HostTensor x = operand(t, c.x, 30);
      HostTensor out(t, c.out), want(t, c.out);
      ASSERT_EQ(k::permute(x.data(), out.data(), int(runtime::dtypeSize(t)),
                           space(c.out, asShape(runtime::broadcastStrides(
                                            c.x, c.out))),
                           out.numel(), nullptr),
                cudaSuccess);
      runtime::ExpandArgs a;
      a.x = x.ref();
      a.out = want.ref();
      ASSERT_TRUE(cpu.expand(a).ok());
      EXPECT_TRUE(emulated::identical(out, want));
    }
}

TEST_F(CudaElementwiseEmulationTest, CastOfIndices) {
  // castIndex rounds as the CPU backend: float(x), then the narrower type.
  // Small values, values past 2^24 (and 2^53 in i64), negative ones.
  const int64_t n = 700;
  for (DType from : {DType::i32, DType::i64})
    for (DType to : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(testing::Message() << runtime::dtypeName(from) << " to "
                                      << runtime::dtypeName(to));
      HostTensor x(from, {n});
      std::mt19937_64 gen(40);
      for (int64_t i = 0; i < n; ++i) {
        // A third small, a third up to 2^31, a third of every magnitude.
        int64_t v = i % 3 == 0   ? int64_t(gen() % 5000) - 2500
                    : i % 3 == 1 ? int64_t(int32_t(gen()))
                                 : int64_t(gen()) >> (gen() % 40);
        if (from == DType::i32)
          x.as<int32_t>()[i] = int32_t(v);
        else
          x.as<int64_t>()[i] = v;
      }
      HostTensor out(to, {n}), want(to, {n});
      ASSERT_EQ(k::castIndex(x.data(), from == DType::i32, out.data(),
                             out.type(), n, nullptr),
                cudaSuccess);
      runtime::CastArgs a;
      a.x = x.ref();
      a.out = want.ref();
      ASSERT_TRUE(cpu.cast(a).ok());
      EXPECT_TRUE(emulated::identical(out, want));
    }
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
