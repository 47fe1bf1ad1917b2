//===- Elementwise.cpp - add/sub/mul, scale, gelu, relu, silu, cast, ... -===//
//
// One f32 operation per element, rounded once into the result type. The
// unary ops, their gradients, accumulate, cast and the binary ops on
// same-shaped operands walk their tensors a chunk at a time (Storage.h:
// bf16 widened per chunk on the stack, no heap copy); the binary ops that
// broadcast go through forEachBroadcast, which walks the result in
// row-major order.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/core/OpChecks.h"
#include "runtime/core/Status.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Storage.h"
#include "runtime/cpu/VecMath.h"

namespace md::cpu {

using namespace md::runtime;

namespace {

// sqrt(2 / pi) and 1 / sqrt(2), as in PyTorch's gelu kernels.
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
// 1 / sqrt(2 pi), the normal density's constant.
constexpr float kInvSqrt2Pi = 0.3989422804014327f;
constexpr float kGeluCoeff = 0.044715f;

float geluExact(float x) { return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2)); }

// d/dx [x Phi(x)] = Phi(x) + x phi(x).
float geluExactGrad(float x) {
  float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2));
  float pdf = kInvSqrt2Pi * std::exp(-0.5f * x * x);
  return cdf + x * pdf;
}

// The tanh GELU runs over chunks of a tensor: u = k (x + c x^3) for a
// chunk, tanh of the chunk at once (VecTanh), then the rest. Small enough to
// stay in L1; elementwise, so the chunking never changes a result.
constexpr int64_t kChunk = 256;

float geluU(float x) { return kSqrt2OverPi * (x + kGeluCoeff * x * x * x); }

/// f(i0, m, t) for each chunk [i0, i0 + m) of x, with t[k] = tanh(u(x[i0 +
/// k])).
template <typename F> void forTanhChunks(const float *x, int64_t n, F f) {
  float t[kChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    for (int64_t k = 0; k < m; ++k)
      t[k] = geluU(x[i0 + k]);
    VecTanh(t, t, m);
    f(i0, m, t);
  }
}

/// y = 0.5 x (1 + tanh(u)); y may be x.
void geluTanhArray(const float *x, float *y, int64_t n) {
  forTanhChunks(x, n, [&](int64_t i0, int64_t m, const float *t) {
    for (int64_t k = 0; k < m; ++k)
      y[i0 + k] = 0.5f * x[i0 + k] * (1.0f + t[k]);
  });
}

// d/dx [0.5 x (1 + tanh(u))] with u = k (x + c x^3):
//   0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2); dx = dy times that.
void geluTanhGradArray(const float *dy, const float *x, float *dx, int64_t n) {
  forTanhChunks(x, n, [&](int64_t i0, int64_t m, const float *t) {
    for (int64_t k = 0; k < m; ++k) {
      const float xk = x[i0 + k], tk = t[k];
      const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * xk * xk);
      dx[i0 + k] =
          dy[i0 + k] * (0.5f * (1.0f + tk) + 0.5f * xk * (1.0f - tk * tk) * du);
    }
  });
}

/// f(in, o, m) over each chunk of a whole tensor (Storage.h): o[k] from
/// in[k] for k < m. out may be x.
template <typename F>
void mapUnaryChunks(const TensorRef &x, const TensorRef &out, F f) {
  float xb[kChunkElems], ob[kChunkElems];
  forChunks(x.numel(), [&](int64_t i0, int64_t m) {
    const float *in = chunkIn(x, i0, m, xb);
    float *o = chunkOut(out, i0, ob);
    f(in, o, m);
    chunkStore(out, i0, m, o);
  });
}

/// f(g, in, o, m) over each chunk of two same-shaped tensors; dx may be dy
/// or x.
template <typename F>
void mapGradChunks(const TensorRef &dy, const TensorRef &x,
                   const TensorRef &dx, F f) {
  float gb[kChunkElems], xb[kChunkElems], ob[kChunkElems];
  forChunks(x.numel(), [&](int64_t i0, int64_t m) {
    const float *g = chunkIn(dy, i0, m, gb), *in = chunkIn(x, i0, m, xb);
    float *o = chunkOut(dx, i0, ob);
    f(g, in, o, m);
    chunkStore(dx, i0, m, o);
  });
}

/// out[i] = f(x[i]) over a whole tensor, a chunk at a time. out may be x.
template <typename F>
void mapUnary(const TensorRef &x, const TensorRef &out, F f) {
  mapUnaryChunks(x, out, [&](const float *in, float *o, int64_t m) {
    for (int64_t k = 0; k < m; ++k)
      o[k] = f(in[k]);
  });
}

/// dx[i] = f(dy[i], x[i]) over a whole tensor, a chunk at a time; dx may
/// be dy or x. (Any two same-shaped operands: binary uses it too.)
template <typename F>
void mapGrad(const TensorRef &dy, const TensorRef &x, const TensorRef &dx,
             F f) {
  mapGradChunks(dy, x, dx,
                [&](const float *g, const float *in, float *o, int64_t m) {
                  for (int64_t k = 0; k < m; ++k)
                    o[k] = f(g[k], in[k]);
                });
}

} // namespace

namespace {

/// torch.maximum / torch.minimum: NaN when either operand is NaN.
float MaxNaN(float a, float b) { return (a > b || a != a) ? a : b; }
float MinNaN(float a, float b) { return (a < b || a != a) ? a : b; }

} // namespace

absl::Status CpuBackend::binary(const BinaryArgs &args) {
  MD_RETURN_IF_ERROR(checkBinary(args));
  // Same shapes (a residual add, say): elementwise, a chunk at a time like
  // the unary ops; the same f32 operation per element as the broadcasting
  // walk below, so the same bits.
  if (args.lhs.shape == args.out.shape && args.rhs.shape == args.out.shape) {
    switch (args.op) {
    case BinaryOp::add:
      mapGrad(args.lhs, args.rhs, args.out,
              [](float a, float b) { return a + b; });
      break;
    case BinaryOp::sub:
      mapGrad(args.lhs, args.rhs, args.out,
              [](float a, float b) { return a - b; });
      break;
    case BinaryOp::mul:
      mapGrad(args.lhs, args.rhs, args.out,
              [](float a, float b) { return a * b; });
      break;
    case BinaryOp::div:
      mapGrad(args.lhs, args.rhs, args.out,
              [](float a, float b) { return a / b; });
      break;
    case BinaryOp::maximum:
      mapGrad(args.lhs, args.rhs, args.out, MaxNaN);
      break;
    case BinaryOp::minimum:
      mapGrad(args.lhs, args.rhs, args.out, MinNaN);
      break;
    }
    return absl::OkStatus();
  }
  F32In lhs(args.lhs), rhs(args.rhs);
  F32Out out(args.out);
  std::vector<int64_t> sl = broadcastStrides(args.lhs.shape, args.out.shape);
  std::vector<int64_t> sr = broadcastStrides(args.rhs.shape, args.out.shape);
  const float *l = lhs.data(), *r = rhs.data();
  float *o = out.data();
  switch (args.op) {
  case BinaryOp::add:
    forEachBroadcast(
        args.out.shape, sl, sr,
        [&](int64_t i, int64_t a, int64_t b) { o[i] = l[a] + r[b]; });
    break;
  case BinaryOp::sub:
    forEachBroadcast(
        args.out.shape, sl, sr,
        [&](int64_t i, int64_t a, int64_t b) { o[i] = l[a] - r[b]; });
    break;
  case BinaryOp::mul:
    forEachBroadcast(
        args.out.shape, sl, sr,
        [&](int64_t i, int64_t a, int64_t b) { o[i] = l[a] * r[b]; });
    break;
  case BinaryOp::div:
    forEachBroadcast(
        args.out.shape, sl, sr,
        [&](int64_t i, int64_t a, int64_t b) { o[i] = l[a] / r[b]; });
    break;
  case BinaryOp::maximum:
    forEachBroadcast(
        args.out.shape, sl, sr,
        [&](int64_t i, int64_t a, int64_t b) { o[i] = MaxNaN(l[a], r[b]); });
    break;
  case BinaryOp::minimum:
    forEachBroadcast(
        args.out.shape, sl, sr,
        [&](int64_t i, int64_t a, int64_t b) { o[i] = MinNaN(l[a], r[b]); });
    break;
  }
  out.store();
  return absl::OkStatus();
}

absl::Status CpuBackend::scale(const ScaleArgs &args) {
  MD_RETURN_IF_ERROR(checkScale(args));
  // The f64 factor is rounded to f32 and the product taken in f32.
  float factor = static_cast<float>(args.factor);
  mapUnary(args.x, args.out, [&](float x) { return x * factor; });
  return absl::OkStatus();
}

absl::Status CpuBackend::gelu(const GeluArgs &args) {
  MD_RETURN_IF_ERROR(checkUnary("gelu", args.x, args.out));
  if (args.approximate) {
    // Chunk by chunk: tanh is elementwise, so the bits do not depend on
    // where a chunk starts.
    mapUnaryChunks(args.x, args.out, geluTanhArray);
  } else {
    mapUnary(args.x, args.out, geluExact);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::geluGrad(const GeluGradArgs &args) {
  MD_RETURN_IF_ERROR(checkUnaryGrad("gelu_grad", args.dy, args.x, args.dx));
  if (args.approximate) {
    mapGradChunks(args.dy, args.x, args.dx, geluTanhGradArray);
  } else
    mapGrad(args.dy, args.x, args.dx,
            [](float dy, float x) { return dy * geluExactGrad(x); });
  return absl::OkStatus();
}

absl::Status CpuBackend::relu(const ReluArgs &args) {
  MD_RETURN_IF_ERROR(checkUnary("relu", args.x, args.out));
  // max(x, 0) that keeps NaN a NaN, as torch.relu does.
  mapUnary(args.x, args.out, [](float x) { return x < 0.0f ? 0.0f : x; });
  return absl::OkStatus();
}

absl::Status CpuBackend::reluGrad(const ReluGradArgs &args) {
  MD_RETURN_IF_ERROR(checkUnaryGrad("relu_grad", args.dy, args.x, args.dx));
  mapGrad(args.dy, args.x, args.dx,
          [](float dy, float x) { return x > 0.0f ? dy : 0.0f; });
  return absl::OkStatus();
}

absl::Status CpuBackend::silu(const SiluArgs &args) {
  MD_RETURN_IF_ERROR(checkUnary("silu", args.x, args.out));
  // x / (1 + exp(-x)), as torch.nn.functional.silu computes it.
  mapUnary(args.x, args.out,
           [](float x) { return x / (1.0f + std::exp(-x)); });
  return absl::OkStatus();
}

absl::Status CpuBackend::siluGrad(const SiluGradArgs &args) {
  MD_RETURN_IF_ERROR(checkUnaryGrad("silu_grad", args.dy, args.x, args.dx));
  mapGrad(args.dy, args.x, args.dx, [](float dy, float x) {
    const float s = 1.0f / (1.0f + std::exp(-x));
    return dy * (s * (1.0f + x * (1.0f - s)));
  });
  return absl::OkStatus();
}

namespace {

/// fn(x) over one chunk: o[k] = fn(in[k]) for k < m; o may be in. exp,
/// tanh and sigmoid run VecMath's vectorised exp and tanh; the others are
/// libm's f32 functions, as torch's CPU kernels compute them.
void elementwiseChunk(ElementwiseFn fn, const float *in, float *o, int64_t m) {
  switch (fn) {
  case ElementwiseFn::exp:
    VecExp(in, o, m);
    return;
  case ElementwiseFn::tanh:
    VecTanh(in, o, m);
    return;
  case ElementwiseFn::sigmoid:
    // 1 / (1 + exp(-x)), as torch.sigmoid computes it.
    for (int64_t k = 0; k < m; ++k)
      o[k] = -in[k];
    VecExp(o, o, m);
    for (int64_t k = 0; k < m; ++k)
      o[k] = 1.0f / (1.0f + o[k]);
    return;
  case ElementwiseFn::log:
    for (int64_t k = 0; k < m; ++k)
      o[k] = std::log(in[k]);
    return;
  case ElementwiseFn::sin:
    for (int64_t k = 0; k < m; ++k)
      o[k] = std::sin(in[k]);
    return;
  case ElementwiseFn::cos:
    for (int64_t k = 0; k < m; ++k)
      o[k] = std::cos(in[k]);
    return;
  case ElementwiseFn::abs:
    for (int64_t k = 0; k < m; ++k)
      o[k] = std::fabs(in[k]);
    return;
  case ElementwiseFn::neg:
    for (int64_t k = 0; k < m; ++k)
      o[k] = -in[k];
    return;
  case ElementwiseFn::sqrt:
    for (int64_t k = 0; k < m; ++k)
      o[k] = std::sqrt(in[k]);
    return;
  case ElementwiseFn::rsqrt:
    for (int64_t k = 0; k < m; ++k)
      o[k] = 1.0f / std::sqrt(in[k]);
    return;
  }
}

/// fn'(x) times dy over one chunk: o[k] = g[k] * fn'(in[k]); o may be g or
/// in (the derivative goes through `t` first).
void elementwiseGradChunk(ElementwiseFn fn, const float *g, const float *in,
                          float *o, int64_t m) {
  float t[kChunkElems];
  switch (fn) {
  case ElementwiseFn::exp: // exp(x)
    VecExp(in, t, m);
    break;
  case ElementwiseFn::tanh: // 1 - tanh(x)^2
    VecTanh(in, t, m);
    for (int64_t k = 0; k < m; ++k)
      t[k] = 1.0f - t[k] * t[k];
    break;
  case ElementwiseFn::sigmoid: // s (1 - s)
    elementwiseChunk(ElementwiseFn::sigmoid, in, t, m);
    for (int64_t k = 0; k < m; ++k)
      t[k] = t[k] * (1.0f - t[k]);
    break;
  case ElementwiseFn::log: // 1 / x
    for (int64_t k = 0; k < m; ++k)
      t[k] = 1.0f / in[k];
    break;
  case ElementwiseFn::sin: // cos(x)
    for (int64_t k = 0; k < m; ++k)
      t[k] = std::cos(in[k]);
    break;
  case ElementwiseFn::cos: // -sin(x)
    for (int64_t k = 0; k < m; ++k)
      t[k] = -std::sin(in[k]);
    break;
  case ElementwiseFn::abs: // sign(x), 0 at 0 (torch's sgn)
    for (int64_t k = 0; k < m; ++k)
      t[k] = in[k] > 0.0f ? 1.0f : (in[k] < 0.0f ? -1.0f : 0.0f);
    break;
  case ElementwiseFn::neg:
    for (int64_t k = 0; k < m; ++k)
      t[k] = -1.0f;
    break;
  case ElementwiseFn::sqrt: // 1 / (2 sqrt(x))
    for (int64_t k = 0; k < m; ++k)
      t[k] = 0.5f / std::sqrt(in[k]);
    break;
  case ElementwiseFn::rsqrt: // -1 / (2 x sqrt(x))
    for (int64_t k = 0; k < m; ++k)
      t[k] = -0.5f / (in[k] * std::sqrt(in[k]));
    break;
  }
  for (int64_t k = 0; k < m; ++k)
    o[k] = g[k] * t[k];
}

} // namespace

absl::Status CpuBackend::elementwise(const ElementwiseArgs &args) {
  MD_RETURN_IF_ERROR(checkUnary(ElementwiseFnName(args.fn), args.x, args.out));
  mapUnaryChunks(args.x, args.out, [&](const float *in, float *o, int64_t m) {
    elementwiseChunk(args.fn, in, o, m);
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::elementwiseGrad(const ElementwiseGradArgs &args) {
  MD_RETURN_IF_ERROR(
      checkUnaryGrad("elementwise_grad", args.dy, args.x, args.dx));
  mapGradChunks(args.dy, args.x, args.dx,
                [&](const float *g, const float *in, float *o, int64_t m) {
                  elementwiseGradChunk(args.fn, g, in, o, m);
                });
  return absl::OkStatus();
}

absl::Status CpuBackend::pow(const PowArgs &args) {
  MD_RETURN_IF_ERROR(checkUnary("pow", args.x, args.out));
  const float c = static_cast<float>(args.exponent);
  if (c == 2.0f) // exactly x * x, as torch's pow(x, 2)
    mapUnary(args.x, args.out, [](float x) { return x * x; });
  else
    mapUnary(args.x, args.out, [c](float x) { return std::pow(x, c); });
  return absl::OkStatus();
}

absl::Status CpuBackend::powGrad(const PowGradArgs &args) {
  MD_RETURN_IF_ERROR(checkUnaryGrad("pow_grad", args.dy, args.x, args.dx));
  const float c = static_cast<float>(args.exponent);
  mapGrad(args.dy, args.x, args.dx, [c](float dy, float x) {
    if (c == 0.0f)
      return 0.0f;
    if (c == 2.0f)
      return dy * (2.0f * x);
    return dy * (c * std::pow(x, c - 1.0f));
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::clamp(const ClampArgs &args) {
  MD_RETURN_IF_ERROR(checkUnary("clamp", args.x, args.out));
  const float lo = static_cast<float>(args.min),
              hi = static_cast<float>(args.max);
  mapUnary(args.x, args.out,
           [lo, hi](float x) { return x < lo ? lo : x > hi ? hi : x; });
  return absl::OkStatus();
}

absl::Status CpuBackend::clampGrad(const ClampGradArgs &args) {
  MD_RETURN_IF_ERROR(checkUnaryGrad("clamp_grad", args.dy, args.x, args.dx));
  const float lo = static_cast<float>(args.min),
              hi = static_cast<float>(args.max);
  mapGrad(args.dy, args.x, args.dx, [lo, hi](float dy, float x) {
    return x >= lo && x <= hi ? dy : 0.0f;
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::accumulate(const AccumulateArgs &args) {
  MD_RETURN_IF_ERROR(checkAccumulate(args));
  mapGrad(args.acc, args.g, args.out, [](float a, float g) { return a + g; });
  return absl::OkStatus();
}

absl::Status CpuBackend::cast(const CastArgs &args) {
  MD_RETURN_IF_ERROR(checkCast(args));
  int64_t n = args.x.numel();
  if (args.x.dtype == args.out.dtype) {
    if (args.x.data != args.out.data)
      std::memmove(args.out.data, args.x.data, args.x.bytes());
    return absl::OkStatus();
  }
  // Widening to f32 is exact, so f16 <-> bf16 through f32 rounds once. An
  // index converts to the nearest f32 (exact below 2^24), then rounds once
  // more to a narrower float: PyTorch's int -> bf16 rounds the integer once,
  // so the two differ only for |x| > 2^24 that a double rounding moves.
  float xb[kChunkElems];
  if (isIndex(args.x.dtype)) {
    forChunks(n, [&](int64_t i0, int64_t m) {
      for (int64_t i = 0; i < m; ++i)
        xb[i] = args.x.dtype == DType::i32
                    ? float(args.x.as<const int32_t>()[i0 + i])
                    : float(args.x.as<const int64_t>()[i0 + i]);
      fromF32(args.out.dtype, xb,
              static_cast<char *>(args.out.data) +
                  i0 * dtypeSize(args.out.dtype),
              m);
    });
    return absl::OkStatus();
  }
  forChunks(n, [&](int64_t i0, int64_t m) {
    fromF32(args.out.dtype, chunkIn(args.x, i0, m, xb),
            static_cast<char *>(args.out.data) + i0 * dtypeSize(args.out.dtype),
            m);
  });
  return absl::OkStatus();
}

} // namespace md::cpu
