//===- Storage.h - f32 views of bf16/f16/f32 tensors for the CPU kernels -*- C++
//-*-===//
//
// Every CPU kernel computes on float arrays. F32In gives a kernel its input
// as floats (the tensor itself when it is f32, a widened copy otherwise);
// F32Out gives it a float array to write and, for bf16/f16 results, rounds
// it into the tensor on store(). So each kernel is written once, and a
// bf16 result is rounded exactly once, after the f32 computation.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CPU_STORAGE_H
#define MD_RUNTIME_CPU_STORAGE_H

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/core/NumberFormat.h"
#include "runtime/core/Strides.h"
#include "runtime/core/Tensor.h"

namespace md::cpu {

/// Widens n float elements of type `dtype` (bf16, f16 or f32) to f32.
inline void toF32(runtime::DType dtype, const void *src, float *dst,
                  int64_t n) {
  switch (dtype) {
  case runtime::DType::bf16: {
    const uint16_t *s = static_cast<const uint16_t *>(src);
    for (int64_t i = 0; i < n; ++i)
      dst[i] = runtime::bf16ToF32(s[i]);
    break;
  }
  case runtime::DType::f16: {
    const uint16_t *s = static_cast<const uint16_t *>(src);
    for (int64_t i = 0; i < n; ++i)
      dst[i] = runtime::f16ToF32(s[i]);
    break;
  }
  default: {
    const float *s = static_cast<const float *>(src);
    if (s != dst)
      for (int64_t i = 0; i < n; ++i)
        dst[i] = s[i];
    break;
  }
  }
}

/// Rounds n f32 values into elements of type `dtype` (nearest even).
inline void fromF32(runtime::DType dtype, const float *src, void *dst,
                    int64_t n) {
  switch (dtype) {
  case runtime::DType::bf16: {
    uint16_t *d = static_cast<uint16_t *>(dst);
    for (int64_t i = 0; i < n; ++i)
      d[i] = runtime::f32ToBf16(src[i]);
    break;
  }
  case runtime::DType::f16: {
    uint16_t *d = static_cast<uint16_t *>(dst);
    for (int64_t i = 0; i < n; ++i)
      d[i] = runtime::f32ToF16(src[i]);
    break;
  }
  default: {
    float *d = static_cast<float *>(dst);
    if (d != src)
      for (int64_t i = 0; i < n; ++i)
        d[i] = src[i];
    break;
  }
  }
}

/// A float tensor read as f32.
class F32In {
public:
  explicit F32In(const runtime::TensorRef &t) {
    if (t.dtype == runtime::DType::f32) {
      data_ = t.as<const float>();
      return;
    }
    // Uninitialised (new float[n], not a vector): every element is
    // written by the conversion, and zeroing first cost a few percent of a
    // bf16 step.
    copy_.reset(new float[t.numel()]);
    toF32(t.dtype, t.data, copy_.get(), t.numel());
    data_ = copy_.get();
  }
  const float *data() const { return data_; }
  float operator[](int64_t i) const { return data_[i]; }

private:
  std::unique_ptr<float[]> copy_;
  const float *data_ = nullptr;
};

/// A float tensor written as f32; store() commits it. For an f32 tensor
/// the kernel writes the tensor directly and store() does nothing.
class F32Out {
public:
  explicit F32Out(const runtime::TensorRef &t) : t_(t) {
    if (t.dtype == runtime::DType::f32) {
      data_ = t.as<float>();
      return;
    }
    // Uninitialised, as an f32 tensor written directly is: a kernel writes
    // every element of its result.
    copy_.reset(new float[t.numel()]);
    data_ = copy_.get();
  }
  float *data() { return data_; }
  float &operator[](int64_t i) { return data_[i]; }
  void store() {
    if (t_.dtype != runtime::DType::f32)
      fromF32(t_.dtype, copy_.get(), t_.data, t_.numel());
  }

private:
  const runtime::TensorRef &t_;
  std::unique_ptr<float[]> copy_;
  float *data_ = nullptr;
};

/// Elements per chunk of the chunked views below: small enough that a
/// chunk of each operand stays in L1.
constexpr int64_t kChunkElems = 256;

/// The elementwise kernels walk their tensors a chunk at a time instead of
/// taking F32In/F32Out copies of them whole: a bf16 or f16 operand is
/// widened one chunk at a time into a buffer on the stack, and a result
/// chunk is rounded into its tensor as soon as it is computed, so a bf16
/// kernel makes no heap copy and reads its data once, from L1. Each element
/// is computed as before: the bits are those of the whole-tensor views.
/// f(i0, m) for each chunk [i0, i0 + m) of n elements, in order.
template <typename F> void forChunks(int64_t n, F f) {
  for (int64_t i0 = 0; i0 < n; i0 += kChunkElems)
    f(i0, n - i0 < kChunkElems ? n - i0 : kChunkElems);
}

/// The conversions out of line, so that the f32 path of a kernel's loop
/// stays as small as it was (inlined, they slowed f32 cross_entropy_grad by
/// a fifth).
[[gnu::noinline]] inline void widenChunk(const runtime::TensorRef &t,
                                         int64_t i0, int64_t m, float *buf) {
  toF32(t.dtype,
        static_cast<const char *>(t.data) + i0 * runtime::dtypeSize(t.dtype),
        buf, m);
}
/// Elements [i0, i0 + m) of the float tensor t as f32: t's own memory when
/// it is f32, else `buf` (at least m floats) with the chunk widened into it.
inline const float *chunkIn(const runtime::TensorRef &t, int64_t i0, int64_t m,
                            float *buf) {
  if (t.dtype == runtime::DType::f32)
    return t.as<const float>() + i0;
  widenChunk(t, i0, m, buf);
  return buf;
}

/// Where a kernel writes elements [i0, i0 + m) of t: t's own memory when it
/// is f32, else `buf`, which chunkStore then rounds into t.
inline float *chunkOut(const runtime::TensorRef &t, int64_t i0, float *buf) {
  return t.dtype == runtime::DType::f32 ? t.as<float>() + i0 : buf;
}
[[gnu::noinline]] inline void narrowChunk(const runtime::TensorRef &t,
                                          int64_t i0, int64_t m,
                                          const float *buf) {
  fromF32(t.dtype, buf,
          static_cast<char *>(t.data) + i0 * runtime::dtypeSize(t.dtype), m);
}
inline void chunkStore(const runtime::TensorRef &t, int64_t i0, int64_t m,
                       const float *buf) {
  if (t.dtype != runtime::DType::f32)
    narrowChunk(t, i0, m, buf);
}

/// Stores f64 accumulators into the float tensor `t` (as many elements as
/// there are sums), each rounded once: to f32, then to t's type.
inline void storeSums(const runtime::TensorRef &t,
                      const std::vector<double> &sums) {
  F32Out out(t);
  for (size_t i = 0; i < sums.size(); ++i)
    out[int64_t(i)] = float(sums[i]);
  out.store();
}

using runtime::broadcastStrides;

/// Calls f(i, offsetA, offsetB) for every element i of a row-major tensor
/// of shape `full`, in order, with the offsets of the matching elements of
/// two operands given by their strides over `full` (broadcastStrides).
template <typename F>
void forEachBroadcast(const runtime::Shape &full,
                      const std::vector<int64_t> &stridesA,
                      const std::vector<int64_t> &stridesB, F f) {
  int64_t r = static_cast<int64_t>(full.size());
  if (r == 0) {
    f(int64_t{0}, int64_t{0}, int64_t{0});
    return;
  }
  int64_t total = 1;
  for (int64_t d : full)
    total *= d;
  if (total == 0)
    return;
  int64_t inner = full[r - 1], sa = stridesA[r - 1], sb = stridesB[r - 1];
  std::vector<int64_t> idx(r, 0);
  int64_t offA = 0, offB = 0;
  for (int64_t row = 0; row < total / inner; ++row) {
    for (int64_t j = 0; j < inner; ++j)
      f(row * inner + j, offA + j * sa, offB + j * sb);
    // Step the multi-index over the outer dims, last fastest.
    for (int64_t d = r - 2; d >= 0; --d) {
      ++idx[d];
      offA += stridesA[d];
      offB += stridesB[d];
      if (idx[d] < full[d])
        break;
      offA -= stridesA[d] * full[d];
      offB -= stridesB[d] * full[d];
      idx[d] = 0;
    }
  }
}

} // namespace md::cpu

#endif // MD_RUNTIME_CPU_STORAGE_H
