//===- EmulatedTensors.h - host operands for the emulated CUDA kernels ---===//
//
// What the Cuda*EmulationTest suites hand to a .cu file's launchers and to
// the CPU backend alike: a zeroed host buffer of one dtype and shape, seen
// as raw memory (data(), type()) by the kernels and as a TensorRef by the
// CPU backend, and a comparison of two of them with the tolerance of their
// element type (the kernels reduce in another order than the CPU backend,
// so sums may differ in the last bits; elementwise results agree to an ulp
// or two of f32, transcendental functions included), or bit for bit
// (identical: the layout kernels move elements, and conversions round as
// the CPU backend does).
//
//===----------------------------------------------------------------------===//

#ifndef MD_TEST_UNIT_EMULATEDTENSORS_H
#define MD_TEST_UNIT_EMULATEDTENSORS_H

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/core/NumberFormat.h"
#include "runtime/core/Tensor.h"
#include "runtime/cpu/CpuBackend.h"

namespace md::test::emulated {

class HostTensor {
public:
  HostTensor(runtime::DType t, runtime::Shape shape)
      : type_(t), shape_(std::move(shape)),
        bytes_(static_cast<size_t>(numel() * runtime::dtypeSize(t)) + 8) {}

  /// Values uniform in [lo, hi), rounded to the element type.
  static HostTensor random(runtime::DType t, runtime::Shape shape,
                           uint32_t seed, double lo = -1.5, double hi = 1.5) {
    HostTensor h(t, std::move(shape));
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    for (int64_t i = 0; i < h.numel(); ++i)
      h.set(i, static_cast<float>(dist(gen)));
    return h;
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape_)
      n *= d;
    return n;
  }
  void *data() { return bytes_.data(); }
  const void *data() const { return bytes_.data(); }
  /// The bytes of the elements (not the slack after them).
  int64_t bytes() const { return numel() * runtime::dtypeSize(type_); }
  /// The element type as the kernels take it (runtime::DType's value).
  int type() const { return static_cast<int>(type_); }
  template <typename T> T *as() { return reinterpret_cast<T *>(data()); }
  runtime::TensorRef ref() { return runtime::TensorRef(data(), type_, shape_); }

  float at(int64_t i) const {
    const uint8_t *p = bytes_.data();
    switch (type_) {
    case runtime::DType::bf16:
      return runtime::bf16ToF32(reinterpret_cast<const uint16_t *>(p)[i]);
    case runtime::DType::f16:
      return runtime::f16ToF32(reinterpret_cast<const uint16_t *>(p)[i]);
    default:
      return reinterpret_cast<const float *>(p)[i];
    }
  }
  void set(int64_t i, float v) {
    uint8_t *p = bytes_.data();
    switch (type_) {
    case runtime::DType::bf16:
      reinterpret_cast<uint16_t *>(p)[i] = runtime::f32ToBf16(v);
      break;
    case runtime::DType::f16:
      reinterpret_cast<uint16_t *>(p)[i] = runtime::f32ToF16(v);
      break;
    default:
      reinterpret_cast<float *>(p)[i] = v;
      break;
    }
  }

private:
  runtime::DType type_;
  runtime::Shape shape_;
  std::vector<uint8_t> bytes_;
};

/// got and want agree elementwise: within 1e-5 relative (1e-6 absolute,
/// or `f32Atol`) in f32, within an ulp or two (1/128 relative, 1e-3
/// absolute) in bf16 and f16. NaN matches NaN.
inline ::testing::AssertionResult close(const HostTensor &got,
                                        const HostTensor &want,
                                        runtime::DType t,
                                        double f32Atol = 1e-6) {
  const bool f32 = t == runtime::DType::f32;
  const double rtol = f32 ? 1e-5 : 1.0 / 128, atol = f32 ? f32Atol : 1e-3;
  if (got.numel() != want.numel())
    return ::testing::AssertionFailure() << "sizes differ";
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.at(i), w = want.at(i);
    if (std::isnan(g) && std::isnan(w))
      continue;
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w)))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << g << " vs " << w;
  }
  return ::testing::AssertionSuccess();
}

/// got and want hold the same bits: for kernels that only move elements
/// (and conversions that round as the CPU backend does).
inline ::testing::AssertionResult identical(const HostTensor &got,
                                            const HostTensor &want) {
  if (got.bytes() != want.bytes())
    return ::testing::AssertionFailure() << "sizes differ";
  const auto *g = static_cast<const uint8_t *>(got.data());
  const auto *w = static_cast<const uint8_t *>(want.data());
  for (int64_t i = 0; i < got.bytes(); ++i)
    if (g[i] != w[i])
      return ::testing::AssertionFailure() << "first difference at byte " << i;
  return ::testing::AssertionSuccess();
}

} // namespace md::test::emulated

#endif // MD_TEST_UNIT_EMULATEDTENSORS_H
