//===- CudaAttentionEmulationTest.cpp - the CUDA attention kernels on a CPU
//===//
//
// Compiles runtime/cuda/Attention.cu as C++ against the host stand-ins of
// test/unit/emulated/runtime/cuda/KernelUtil.cuh (threads, barriers, warp
// shuffles) and runs its tiled forward and backward against the f64
// references of KernelReference.h. This checks the kernels' indexing, causal
// and sliding-window masking, tile bounds (T not a multiple of the tile,
// T = 1, odd head dims, several heads) and barrier placement on every build,
// GPU or not; the
// BackendKernelTest /cuda cases check the same kernels on a device.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Attention.cu"

#include <cstdint>
#include <ostream>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/core/NumberFormat.h"
#include "test/unit/KernelReference.h"

namespace md::test {
namespace {

namespace k = md::cuda::kernels;
using ref::Vec;

/// A [B, T, C] operand in an element type the kernels load (f32 or bf16),
/// with the values it holds.
struct Operand {
  int type;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  Vec values;

  Operand(int type, size_t n) : type(type), f32(n), bf16(n), values(n) {}
  void *data() {
    return type == k::kBf16 ? static_cast<void *>(bf16.data()) : f32.data();
  }
  /// The values after a kernel stored into it.
  Vec read() const {
    Vec v(f32.size());
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = type == k::kBf16 ? runtime::bf16ToF32(bf16[i]) : f32[i];
    return v;
  }
};

Operand randomOperand(int type, size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  Operand o(type, n);
  for (size_t i = 0; i < n; ++i) {
    float x = dist(gen);
    if (type == k::kBf16) {
      o.bf16[i] = runtime::f32ToBf16(x);
      x = runtime::bf16ToF32(o.bf16[i]);
    }
    o.f32[i] = x;
    o.values[i] = x;
  }
  return o;
}

::testing::AssertionResult close(const Vec &got, const Vec &want, double rtol,
                                 double atol) {
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i])))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << got[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

struct Size {
  int64_t batch, t, heads, hd;
  int type;
  /// Sliding window (keys per query); 0 for plain causal attention.
  int64_t window = 0;
};

void PrintTo(const Size &s, std::ostream *os) {
  *os << "B " << s.batch << " T " << s.t << " heads " << s.heads << " hd "
      << s.hd << (s.type == k::kBf16 ? " bf16" : " f32") << " window "
      << s.window;
}

class CudaAttentionEmulationTest : public ::testing::TestWithParam<Size> {};

TEST_P(CudaAttentionEmulationTest, MatchesReferenceAndRepeats) {
  const Size sz = GetParam();
  const int64_t c = sz.heads * sz.hd, n = sz.batch * sz.t * c;
  Operand q = randomOperand(sz.type, n, 1), kk = randomOperand(sz.type, n, 2),
          v = randomOperand(sz.type, n, 3), dout = randomOperand(k::kF32, n, 4);
  std::vector<double> stats(3 * sz.batch * sz.heads * sz.t);
  // Each call twice: the kernels sum in a fixed order, so the bits repeat.
  std::vector<Operand> out(2, Operand(sz.type, n));
  std::vector<std::vector<Operand>> grads(
      2, std::vector<Operand>(3, Operand(k::kF32, size_t(n))));
  for (int run = 0; run < 2; ++run) {
    ASSERT_EQ(k::attention(q.data(), kk.data(), v.data(), sz.type,
                           out[run].data(), sz.type, sz.batch, sz.t, sz.heads,
                           sz.hd, sz.window, nullptr),
              cudaSuccess);
    ASSERT_EQ(k::attentionGrad(dout.data(), k::kF32, q.data(), kk.data(),
                               v.data(), sz.type, grads[run][0].data(),
                               grads[run][1].data(), grads[run][2].data(),
                               k::kF32, stats.data(), sz.batch, sz.t, sz.heads,
                               sz.hd, sz.window, nullptr),
              cudaSuccess);
  }
  EXPECT_EQ(out[0].read(), out[1].read());
  for (int g = 0; g < 3; ++g)
    EXPECT_EQ(grads[0][g].read(), grads[1][g].read()) << "gradient " << g;

  // The tolerances of docs/runtime-cuda.md: the forward as the suites check
  // it, the gradients as KernelGradTest does.
  const bool bf16 = sz.type == k::kBf16;
  EXPECT_TRUE(
      close(out[0].read(),
            ref::causalAttention(q.values, kk.values, v.values, sz.batch, sz.t,
                                 c, sz.heads, sz.window),
            bf16 ? 1.0 / 128 : 1e-5, bf16 ? 1e-2 : 1e-6));
  const std::vector<Vec> want =
      ref::causalAttentionGrad(q.values, kk.values, v.values, dout.values,
                               sz.batch, sz.t, c, sz.heads, sz.window);
  const char *names[] = {"dq", "dk", "dv"};
  for (int g = 0; g < 3; ++g)
    EXPECT_TRUE(close(grads[0][g].read(), want[g], 1e-4, 1e-5)) << names[g];
  EXPECT_FALSE(k::emulated::sharedOverflow);
}

// The suites' small shapes (one tile), T = 1, and T past one and several
// tiles with a head dim in each of the kernels' widths (<= 32, <= 64,
// <= 128), odd ones included; sliding windows shorter than a tile, of one
// row, across tile edges and longer than T.
INSTANTIATE_TEST_SUITE_P(
    Sizes, CudaAttentionEmulationTest,
    ::testing::Values(
        Size{2, 5, 1, 6, k::kF32}, Size{2, 5, 3, 2, k::kBf16},
        Size{1, 1, 2, 4, k::kF32}, Size{1, 130, 3, 17, k::kF32},
        Size{1, 100, 2, 64, k::kF32}, Size{1, 100, 2, 64, k::kBf16},
        Size{1, 70, 1, 100, k::kF32}, Size{1, 64, 1, 128, k::kF32},
        Size{2, 150, 2, 16, k::kF32, 5}, Size{1, 130, 1, 8, k::kF32, 1},
        Size{1, 200, 2, 40, k::kF32, 70}, Size{1, 100, 1, 100, k::kBf16, 33},
        Size{1, 20, 2, 8, k::kF32, 64}),
    [](const ::testing::TestParamInfo<Size> &info) {
      const Size &s = info.param;
      return "B" + std::to_string(s.batch) + "T" + std::to_string(s.t) + "H" +
             std::to_string(s.heads) + "D" + std::to_string(s.hd) +
             (s.type == k::kBf16 ? "bf16" : "f32") +
             (s.window ? "W" + std::to_string(s.window) : "");
    });

TEST(CudaAttentionEmulation, RefusesWiderHeads) {
  EXPECT_EQ(k::maxAttentionHeadDim(), 128);
  EXPECT_EQ(k::attention(nullptr, nullptr, nullptr, k::kF32, nullptr, k::kF32,
                         1, 4, 1, 129, 0, nullptr),
            cudaErrorInvalidValue);
}

} // namespace
} // namespace md::test
