//===- CudaNormsEmulationTest.cpp - Norms.cu's kernels on a CPU -----------===//
//
// Compiles runtime/cuda/Norms.cu as C++ against the host stand-ins of
// test/unit/emulated/runtime/cuda/KernelUtil.cuh (threads as fibers,
// barriers, static shared memory, atomics) and runs each launcher the way
// CudaOps.cpp calls it, against the CPU backend on the same operands: layer
// and RMS norm and their gradients, batch norm and its gradient, softmax
// and its gradient along an inner axis, cross-entropy with an ignored index
// and its gradient, embedding and its gradient, the index check. Rows are
// longer than a block (300 > 256 threads) and shorter, so the block
// reductions and strided loops run both ways. This checks indexing,
// reductions and barrier placement on every build, GPU or not; the
// BackendKernelTest /cuda cases check the same kernels on a device.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Norms.cu"

#include <climits>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "test/unit/EmulatedTensors.h"

namespace md::test {
namespace {

namespace k = md::cuda::kernels;
using emulated::HostTensor;
using runtime::DType;

class CudaNormsEmulationTest : public ::testing::Test {
protected:
  cpu::CpuBackend cpu{1};
};

TEST_F(CudaNormsEmulationTest, LayerAndRmsNormAndTheirGradients) {
  for (int64_t d : {7, 300}) {
    for (DType t : {DType::f32, DType::bf16}) {
      for (bool rms : {false, true}) {
        SCOPED_TRACE(testing::Message() << "d " << d << " type " << int(t)
                                        << (rms ? " rms" : " layer"));
        const int64_t rows = 5;
        HostTensor x = HostTensor::random(t, {rows, d}, 1),
                   g = HostTensor::random(t, {d}, 2, 0.5, 1.5),
                   b = HostTensor::random(t, {d}, 3),
                   dy = HostTensor::random(t, {rows, d}, 4);
        HostTensor out(t, {rows, d}), want(t, {rows, d});
        ASSERT_EQ(k::layerNorm(x.data(), x.type(), g.data(), g.type(),
                               rms ? nullptr : b.data(), b.type(), out.data(),
                               out.type(), rows, d, 1e-5, rms, nullptr,
                               nullptr),
                  cudaSuccess);
        if (rms) {
          runtime::RmsNormArgs a;
          a.x = x.ref();
          a.gamma = g.ref();
          a.out = want.ref();
          a.eps = 1e-5;
          ASSERT_TRUE(cpu.rmsNorm(a).ok());
        } else {
          runtime::LayerNormArgs a;
          a.x = x.ref();
          a.gamma = g.ref();
          a.beta = b.ref();
          a.out = want.ref();
          a.eps = 1e-5;
          ASSERT_TRUE(cpu.layerNorm(a).ok());
        }
        EXPECT_TRUE(emulated::close(out, want, t));

        // The gradients: dx (leaving each row's statistics), then the
        // parameters' from them.
        HostTensor dx(t, {rows, d}), dg(t, {d}), db(t, {d});
        HostTensor wantDx(t, {rows, d}), wantDg(t, {d}), wantDb(t, {d});
        std::vector<float> stats(2 * rows, NAN);
        ASSERT_EQ(k::layerNormGradDx(dy.data(), dy.type(), x.data(), x.type(),
                                     g.data(), g.type(), dx.data(), dx.type(),
                                     rows, d, 1e-5, rms, stats.data(),
                                     nullptr),
                  cudaSuccess);
        ASSERT_EQ(k::layerNormGradParams(
                      dy.data(), dy.type(), x.data(), x.type(), stats.data(),
                      rows, d, rms, dg.data(), dg.type(),
                      rms ? nullptr : db.data(), db.type(), nullptr),
                  cudaSuccess);
        if (rms) {
          runtime::RmsNormGradArgs a;
          a.dy = dy.ref();
          a.x = x.ref();
          a.gamma = g.ref();
          a.dx = wantDx.ref();
          a.dgamma = wantDg.ref();
          a.eps = 1e-5;
          ASSERT_TRUE(cpu.rmsNormGrad(a).ok());
        } else {
          runtime::LayerNormGradArgs a;
          a.dy = dy.ref();
          a.x = x.ref();
          a.gamma = g.ref();
          a.dx = wantDx.ref();
          a.dgamma = wantDg.ref();
          a.dbeta = wantDb.ref();
          a.eps = 1e-5;
          ASSERT_TRUE(cpu.layerNormGrad(a).ok());
          EXPECT_TRUE(emulated::close(db, wantDb, t)) << "dbeta";
        }
        EXPECT_TRUE(emulated::close(dx, wantDx, t)) << "dx";
        EXPECT_TRUE(emulated::close(dg, wantDg, t)) << "dgamma";
      }
    }
  }
  EXPECT_FALSE(k::emulated::sharedOverflow);
}

TEST_F(CudaNormsEmulationTest, BatchNormAndItsGradient) {
  for (int64_t c : {3, 300}) {
    SCOPED_TRACE(c);
    const int64_t rows = 9;
    HostTensor x = HostTensor::random(DType::f32, {rows, c}, 5),
               g = HostTensor::random(DType::f32, {c}, 6, 0.5, 1.5),
               b = HostTensor::random(DType::f32, {c}, 7),
               dy = HostTensor::random(DType::f32, {rows, c}, 8);
    HostTensor out(DType::f32, {rows, c}), mean(DType::f32, {c}),
        invstd(DType::f32, {c});
    HostTensor wantOut(DType::f32, {rows, c}), wantMean(DType::f32, {c}),
        wantInvstd(DType::f32, {c});
    ASSERT_EQ(k::batchNorm(x.data(), x.type(), g.data(), g.type(), b.data(),
                           b.type(), out.data(), out.type(),
                           mean.as<float>(), invstd.as<float>(), rows, c,
                           1e-5, nullptr),
              cudaSuccess);
    runtime::BatchNormArgs a;
    a.x = x.ref();
    a.gamma = g.ref();
    a.beta = b.ref();
    a.out = wantOut.ref();
    a.mean = wantMean.ref();
    a.invstd = wantInvstd.ref();
    a.eps = 1e-5;
    ASSERT_TRUE(cpu.batchNorm(a).ok());
    EXPECT_TRUE(emulated::close(out, wantOut, DType::f32)) << "out";
    EXPECT_TRUE(emulated::close(mean, wantMean, DType::f32)) << "mean";
    EXPECT_TRUE(emulated::close(invstd, wantInvstd, DType::f32)) << "invstd";

    HostTensor dx(DType::f32, {rows, c}), dg(DType::f32, {c}),
        db(DType::f32, {c});
    HostTensor wantDx(DType::f32, {rows, c}), wantDg(DType::f32, {c}),
        wantDb(DType::f32, {c});
    std::vector<float> sums(2 * c, NAN);
    ASSERT_EQ(k::batchNormGrad(dy.data(), dy.type(), x.data(), x.type(),
                               g.data(), g.type(), mean.as<float>(),
                               invstd.as<float>(), dx.data(), dx.type(),
                               dg.data(), dg.type(), db.data(), db.type(),
                               sums.data(), rows, c, nullptr),
              cudaSuccess);
    runtime::BatchNormGradArgs ga;
    ga.dy = dy.ref();
    ga.x = x.ref();
    ga.gamma = g.ref();
    ga.mean = wantMean.ref();
    ga.invstd = wantInvstd.ref();
    ga.dx = wantDx.ref();
    ga.dgamma = wantDg.ref();
    ga.dbeta = wantDb.ref();
    ASSERT_TRUE(cpu.batchNormGrad(ga).ok());
    EXPECT_TRUE(emulated::close(dx, wantDx, DType::f32)) << "dx";
    EXPECT_TRUE(emulated::close(dg, wantDg, DType::f32)) << "dgamma";
    EXPECT_TRUE(emulated::close(db, wantDb, DType::f32)) << "dbeta";
  }
}

TEST_F(CudaNormsEmulationTest, SoftmaxAndItsGradientAlongAnInnerAxis) {
  // [outer, n, inner] with the softmax along n: rows are strided by inner.
  for (int64_t n : {5, 300}) {
    SCOPED_TRACE(n);
    const int64_t outer = 3, inner = 2;
    const runtime::Shape shape{outer, n, inner};
    HostTensor x = HostTensor::random(DType::f32, shape, 9, -4, 4),
               dy = HostTensor::random(DType::f32, shape, 10);
    HostTensor y(DType::f32, shape), want(DType::f32, shape);
    ASSERT_EQ(k::softmax(x.data(), x.type(), y.data(), y.type(), outer, n,
                         inner, nullptr),
              cudaSuccess);
    runtime::SoftmaxArgs a;
    a.x = x.ref();
    a.out = want.ref();
    a.axis = 1;
    ASSERT_TRUE(cpu.softmax(a).ok());
    EXPECT_TRUE(emulated::close(y, want, DType::f32));

    HostTensor dx(DType::f32, shape), wantDx(DType::f32, shape);
    ASSERT_EQ(k::softmaxGrad(dy.data(), dy.type(), want.data(), want.type(),
                             dx.data(), dx.type(), outer, n, inner, nullptr),
              cudaSuccess);
    runtime::SoftmaxGradArgs ga;
    ga.dy = dy.ref();
    ga.y = want.ref();
    ga.dx = wantDx.ref();
    ga.axis = 1;
    ASSERT_TRUE(cpu.softmaxGrad(ga).ok());
    EXPECT_TRUE(emulated::close(dx, wantDx, DType::f32));
  }
}

TEST_F(CudaNormsEmulationTest, CrossEntropyWithAnIgnoredTargetAndItsGradient) {
  for (int64_t classes : {10, 300}) {
    SCOPED_TRACE(classes);
    const int64_t positions = 6, ignore = -100;
    HostTensor logits =
        HostTensor::random(DType::bf16, {positions, classes}, 11, -3, 3);
    std::vector<int32_t> targets = {1, 0, int32_t(ignore), 9, 2, 3};
    runtime::TensorRef targetsRef(targets.data(), DType::i32, {positions});

    // The index check counts the positions that are not ignored.
    std::vector<int64_t> check = {INT64_MAX, 0};
    ASSERT_EQ(k::checkIndices(targets.data(), true, positions, classes, true,
                              ignore, check.data(), nullptr),
              cudaSuccess);
    EXPECT_EQ(check[0], INT64_MAX);
    EXPECT_EQ(check[1], positions - 1);

    std::vector<double> losses(positions, NAN);
    HostTensor loss(DType::f32, {}), want(DType::f32, {});
    ASSERT_EQ(k::crossEntropy(logits.data(), logits.type(), targets.data(),
                              true, true, ignore, positions, classes,
                              losses.data(), check[1], loss.as<float>(),
                              nullptr),
              cudaSuccess);
    runtime::CrossEntropyArgs a;
    a.logits = logits.ref();
    a.targets = targetsRef;
    a.out = want.ref();
    a.ignoreIndex = ignore;
    ASSERT_TRUE(cpu.crossEntropy(a).ok());
    EXPECT_TRUE(emulated::close(loss, want, DType::f32));

    HostTensor dloss(DType::f32, {}), dlogits(DType::bf16, {positions, classes}),
        wantDlogits(DType::bf16, {positions, classes});
    *dloss.as<float>() = 0.75f;
    ASSERT_EQ(k::crossEntropyGrad(dloss.as<float>(), logits.data(),
                                  logits.type(), targets.data(), true, true,
                                  ignore, positions, classes, check[1],
                                  dlogits.data(), dlogits.type(), nullptr),
              cudaSuccess);
    runtime::CrossEntropyGradArgs ga;
    ga.dloss = dloss.ref();
    ga.logits = logits.ref();
    ga.targets = targetsRef;
    ga.dlogits = wantDlogits.ref();
    ga.ignoreIndex = ignore;
    ASSERT_TRUE(cpu.crossEntropyGrad(ga).ok());
    EXPECT_TRUE(emulated::close(dlogits, wantDlogits, DType::bf16));
  }
  // A target out of range is found: the first bad position.
  std::vector<int64_t> bad = {0, 3, 12, -1}, check = {INT64_MAX, 0};
  ASSERT_EQ(k::checkIndices(bad.data(), false, 4, 10, false, 0, check.data(),
                            nullptr),
            cudaSuccess);
  EXPECT_EQ(check[0], 2);
  EXPECT_EQ(check[1], 2);
}

TEST_F(CudaNormsEmulationTest, EmbeddingAndItsGradient) {
  const int64_t rows = 6, d = 5, positions = 4;
  HostTensor table = HostTensor::random(DType::f32, {rows, d}, 12),
             dy = HostTensor::random(DType::f32, {positions, d}, 13);
  std::vector<int64_t> ids = {2, 0, 2, 5};
  runtime::TensorRef idsRef(ids.data(), DType::i64, {positions});
  HostTensor out(DType::f32, {positions, d}), want(DType::f32, {positions, d});
  ASSERT_EQ(k::embedding(table.data(), 4, ids.data(), false, out.data(),
                         positions, d, nullptr),
            cudaSuccess);
  runtime::EmbeddingArgs a;
  a.table = table.ref();
  a.ids = idsRef;
  a.out = want.ref();
  ASSERT_TRUE(cpu.embedding(a).ok());
  EXPECT_TRUE(emulated::close(out, want, DType::f32));

  // The gradient scatter-adds into a zeroed f32 accumulator; row 2 twice.
  HostTensor acc(DType::f32, {rows, d}), wantAcc(DType::f32, {rows, d});
  ASSERT_EQ(k::embeddingGrad(dy.data(), dy.type(), ids.data(), false,
                             acc.as<float>(), positions, d, nullptr),
            cudaSuccess);
  runtime::EmbeddingGradArgs ga;
  ga.dy = dy.ref();
  ga.ids = idsRef;
  ga.out = wantAcc.ref();
  ASSERT_TRUE(cpu.embeddingGrad(ga).ok());
  EXPECT_TRUE(emulated::close(acc, wantAcc, DType::f32));
}

} // namespace
} // namespace md::test
