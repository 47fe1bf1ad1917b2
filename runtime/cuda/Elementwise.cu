//===- Elementwise.cu - elementwise, layout, reduction, optimizer kernels -===//
//
// One thread per element in grid-stride loops, each doing the CPU
// backend's f32 operations in the same order (runtime/cpu/Elementwise.cpp,
// Optimizer.cpp); the .cu files build with --fmad=false so no multiply-add
// is contracted and a single f32 operation rounds exactly as on the host.
// Reductions give one output per block (or per thread when each output
// walks a column) and accumulate in f64 like the CPU backend, in a fixed
// order, so they are deterministic; the order differs from the CPU's, so
// sums can differ from it in the last f32 bit.
//
//===----------------------------------------------------------------------===//

#include <cmath>

#include "runtime/cuda/KernelUtil.cuh"

namespace md::cuda::kernels {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;
constexpr float kGeluCoeff = 0.044715f;

__device__ float geluExact(float x) {
  return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
}
__device__ float geluTanh(float x) {
  float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
__device__ float geluExactGrad(float x) {
  float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
  float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
  return cdf + x * pdf;
}
__device__ float geluTanhGrad(float x) {
  float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  float t = tanhf(u);
  float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

// x / (1 + exp(-x)) and its derivative s (1 + x (1 - s)), s = sigmoid(x),
// as the CPU backend writes them.
__device__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ float siluGrad(float x) {
  float s = 1.0f / (1.0f + expf(-x));
  return s * (1.0f + x * (1.0f - s));
}

// The math functions of md.elementwise and their derivatives, in f32 as
// the CPU backend computes them (libm's functions; its exp and tanh are
// vectorised there, which may differ from expf and tanhf in the last bit).
__device__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ float math(Unary op, float x) {
  switch (op) {
  case Unary::exp:
    return expf(x);
  case Unary::log:
    return logf(x);
  case Unary::sin:
    return sinf(x);
  case Unary::cos:
    return cosf(x);
  case Unary::tanh:
    return tanhf(x);
  case Unary::sigmoid:
    return sigmoid(x);
  case Unary::abs:
    return fabsf(x);
  case Unary::neg:
    return -x;
  case Unary::sqrt:
    return sqrtf(x);
  case Unary::rsqrt:
    return 1.0f / sqrtf(x);
  default:
    return x;
  }
}

// x ^ c and its derivative, as the CPU backend computes them.
__device__ float powOf(float x, float c) {
  return c == 2.0f ? x * x : powf(x, c);
}
__device__ float powGradOf(float x, float c) {
  if (c == 0.0f)
    return 0.0f;
  return c == 2.0f ? 2.0f * x : c * powf(x, c - 1.0f);
}
__device__ float mathGrad(UnaryGrad op, float x) {
  switch (op) {
  case UnaryGrad::exp:
    return expf(x);
  case UnaryGrad::log:
    return 1.0f / x;
  case UnaryGrad::sin:
    return cosf(x);
  case UnaryGrad::cos:
    return -sinf(x);
  case UnaryGrad::tanh: {
    float t = tanhf(x);
    return 1.0f - t * t;
  }
  case UnaryGrad::sigmoid: {
    float s = sigmoid(x);
    return s * (1.0f - s);
  }
  case UnaryGrad::abs:
    return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
  case UnaryGrad::neg:
    return -1.0f;
  case UnaryGrad::sqrt:
    return 0.5f / sqrtf(x);
  case UnaryGrad::rsqrt:
    return -0.5f / (x * sqrtf(x));
  default:
    return 1.0f;
  }
}

__global__ void binaryKernel(Binary op, const void *lhs, int lt,
                             const void *rhs, int rt, void *out, int ot,
                             Strided space, int64_t n) {
  MD_GRID_STRIDE(i, n) {
    int64_t a, b;
    offsetsAB(space, i, a, b);
    float l = ld(lhs, lt, a), r = ld(rhs, rt, b);
    // maximum / minimum: NaN when either is NaN (torch's).
    float v = op == Binary::add       ? l + r
              : op == Binary::sub     ? l - r
              : op == Binary::mul     ? l * r
              : op == Binary::div     ? l / r
              : op == Binary::maximum ? ((l > r || l != l) ? l : r)
                                      : ((l < r || l != l) ? l : r);
    st(out, ot, i, v);
  }
}

__global__ void unaryKernel(Unary op, const void *x, int xt, void *out, int ot,
                            int64_t n, float factor) {
  MD_GRID_STRIDE(i, n) {
    float v = ld(x, xt, i);
    switch (op) {
    case Unary::scale:
      v = v * factor;
      break;
    case Unary::geluExact:
      v = geluExact(v);
      break;
    case Unary::geluTanh:
      v = geluTanh(v);
      break;
    case Unary::relu:
      v = v < 0.0f ? 0.0f : v; // keeps NaN
      break;
    case Unary::silu:
      v = silu(v);
      break;
    case Unary::pow:
      v = powOf(v, factor);
      break;
    default:
      v = math(op, v);
      break;
    }
    st(out, ot, i, v);
  }
}

__global__ void unaryGradKernel(UnaryGrad op, const void *dy, int dyt,
                                const void *x, int xt, void *dx, int dxt,
                                int64_t n, float factor) {
  MD_GRID_STRIDE(i, n) {
    float g = ld(dy, dyt, i), v = ld(x, xt, i), r;
    switch (op) {
    case UnaryGrad::geluExact:
      r = g * geluExactGrad(v);
      break;
    case UnaryGrad::geluTanh:
      r = g * geluTanhGrad(v);
      break;
    case UnaryGrad::silu:
      r = g * siluGrad(v);
      break;
    case UnaryGrad::relu:
      r = v > 0.0f ? g : 0.0f;
      break;
    case UnaryGrad::pow:
      r = g * powGradOf(v, factor);
      break;
    default:
      r = g * mathGrad(op, v);
      break;
    }
    st(dx, dxt, i, r);
  }
}

__global__ void accumulateKernel(const void *acc, int at, const void *g, int gt,
                                 void *out, int ot, int64_t n) {
  MD_GRID_STRIDE(i, n) { st(out, ot, i, ld(acc, at, i) + ld(g, gt, i)); }
}

__global__ void castKernel(const void *x, int xt, void *out, int ot,
                           int64_t n) {
  MD_GRID_STRIDE(i, n) { st(out, ot, i, ld(x, xt, i)); }
}

__global__ void fillRowsKernel(const void *bias, int bt, void *out, int ot,
                               int64_t rows, int64_t n) {
  MD_GRID_STRIDE(i, rows * n) {
    st(out, ot, i, bias ? ld(bias, bt, i % n) : 0.0f);
  }
}

__global__ void columnSumsKernel(const void *x, int xt, int64_t rows, int64_t n,
                                 void *out, int ot) {
  MD_GRID_STRIDE(j, n) {
    double acc = 0;
    for (int64_t r = 0; r < rows; ++r)
      acc += ld(x, xt, r * n + j);
    st(out, ot, j, float(acc));
  }
}

/// out[i] = x[offset(i)] (a gather: permute), or with Scatter
/// out[offset(i)] = x[i].
template <typename T, bool Scatter>
__global__ void stridedCopyKernel(const T *x, T *out, Strided space,
                                  int64_t n) {
  MD_GRID_STRIDE(i, n) {
    if (Scatter)
      out[offsetA(space, i)] = x[i];
    else
      out[i] = x[offsetA(space, i)];
  }
}

__global__ void clampKernel(const void *x, int xt, void *out, int ot,
                            int64_t n, float lo, float hi) {
  MD_GRID_STRIDE(i, n) {
    float v = ld(x, xt, i);
    st(out, ot, i, v < lo ? lo : v > hi ? hi : v);
  }
}

__global__ void clampGradKernel(const void *dy, int dyt, const void *x, int xt,
                                void *dx, int dxt, int64_t n, float lo,
                                float hi) {
  MD_GRID_STRIDE(i, n) {
    float v = ld(x, xt, i);
    st(dx, dxt, i, v >= lo && v <= hi ? ld(dy, dyt, i) : 0.0f);
  }
}

__global__ void castIndexKernel(const void *x, bool i32, void *out, int ot,
                                int64_t n) {
  MD_GRID_STRIDE(i, n) { st(out, ot, i, float(ldIndex(x, i32, i))); }
}

__global__ void arangeKernel(void *out, bool i32, int64_t start, int64_t n) {
  MD_GRID_STRIDE(i, n) {
    if (i32)
      static_cast<int32_t *>(out)[i] = int32_t(start + i);
    else
      static_cast<int64_t *>(out)[i] = start + i;
  }
}

__global__ void reduceSumKernel(const void *x, int xt, void *out, int ot,
                                Strided kept, int64_t outN, Strided reduced,
                                int64_t reducedN, double divisor) {
  __shared__ double shared[kThreads];
  for (int64_t o = blockIdx.x; o < outN; o += gridDim.x) {
    int64_t base = offsetA(kept, o);
    double acc = 0;
    for (int64_t r = threadIdx.x; r < reducedN; r += blockDim.x)
      acc += ld(x, xt, base + offsetA(reduced, r));
    double total = blockSum(acc, shared);
    if (threadIdx.x == 0)
      st(out, ot, o, float(total / divisor));
  }
}

__global__ void broadcastToKernel(const void *dy, int dyt, void *dx, int dxt,
                                  Strided space, int64_t n, bool divide,
                                  float divisor) {
  MD_GRID_STRIDE(i, n) {
    float v = ld(dy, dyt, offsetA(space, i));
    st(dx, dxt, i, divide ? v / divisor : v);
  }
}

// torch.optim.AdamW step, operation by operation as runtime/cpu/Optimizer.cpp.
__global__ void adamwKernel(const void *param, int pt, const void *grad, int gt,
                            const float *m, const float *v, void *newParam,
                            int npt, float *newM, float *newV, int64_t n,
                            AdamWScalars s) {
  MD_GRID_STRIDE(i, n) {
    float g = ld(grad, gt, i);
    float p = ld(param, pt, i) * s.decay;
    float mi = s.beta1 * m[i] + s.oneMinusBeta1 * g;
    float vi = s.beta2 * v[i] + s.oneMinusBeta2 * g * g;
    float denom = sqrtf(vi) / s.bc2Sqrt + s.eps;
    st(newParam, npt, i, p - s.stepSize * (mi / denom));
    newM[i] = mi;
    newV[i] = vi;
  }
}

__global__ void sgdKernel(const void *param, int pt, const void *grad, int gt,
                          const float *buf, void *newParam, int npt,
                          float *newBuf, int64_t n, SgdScalars s) {
  MD_GRID_STRIDE(i, n) {
    float p = ld(param, pt, i);
    float g = ld(grad, gt, i);
    if (s.applyDecay)
      g = g + s.weightDecay * p;
    if (s.useMomentum) {
      float b = s.firstStep ? g : s.momentum * buf[i] + s.oneMinusDampening * g;
      newBuf[i] = b;
      g = s.nesterov ? g + s.momentum * b : b;
    }
    st(newParam, npt, i, p - s.lr * g);
  }
}

// Block b adds its sum of squares to partials[b]: tensors are added one
// launch after another on one stream, so each slot's sum has a fixed order.
__global__ void normPartialsKernel(const void *x, int xt, int64_t n,
                                   double *partials) {
  __shared__ double shared[kThreads];
  double acc = 0;
  MD_GRID_STRIDE(i, n) {
    double v = ld(x, xt, i);
    acc += v * v;
  }
  double total = blockSum(acc, shared);
  if (threadIdx.x == 0)
    partials[blockIdx.x] += total;
}

__global__ void normFinishKernel(const double *partials, float *out,
                                 bool squared) {
  __shared__ double shared[kThreads];
  double total = blockSumOf(partials, kNormPartials, shared);
  if (threadIdx.x == 0)
    *out = float(squared ? total : sqrt(total));
}

__global__ void clipKernel(const void *g, int gt, void *out, int ot, int64_t n,
                           const float *norm, float maxNorm) {
  float scale = maxNorm / (*norm + 1e-6f);
  if (scale > 1.0f)
    scale = 1.0f;
  MD_GRID_STRIDE(i, n) { st(out, ot, i, ld(g, gt, i) * scale); }
}

} // namespace

cudaError_t binary(Binary op, const void *lhs, int lt, const void *rhs, int rt,
                   void *out, int ot, const Strided &space, int64_t n,
                   cudaStream_t stream) {
  return launch(binaryKernel, n, gridFor(n), stream, op, lhs, lt, rhs, rt, out,
                ot, space, n);
}

cudaError_t unary(Unary op, const void *x, int xt, void *out, int ot, int64_t n,
                  float factor, cudaStream_t stream) {
  return launch(unaryKernel, n, gridFor(n), stream, op, x, xt, out, ot, n,
                factor);
}

cudaError_t unaryGrad(UnaryGrad op, const void *dy, int dyt, const void *x,
                      int xt, void *dx, int dxt, int64_t n, float factor,
                      cudaStream_t stream) {
  return launch(unaryGradKernel, n, gridFor(n), stream, op, dy, dyt, x, xt, dx,
                dxt, n, factor);
}

cudaError_t accumulate(const void *acc, int at, const void *g, int gt,
                       void *out, int ot, int64_t n, cudaStream_t stream) {
  return launch(accumulateKernel, n, gridFor(n), stream, acc, at, g, gt, out,
                ot, n);
}

cudaError_t cast(const void *x, int xt, void *out, int ot, int64_t n,
                 cudaStream_t stream) {
  return launch(castKernel, n, gridFor(n), stream, x, xt, out, ot, n);
}

cudaError_t fillRows(const void *bias, int bt, void *out, int ot, int64_t rows,
                     int64_t n, cudaStream_t stream) {
  return launch(fillRowsKernel, rows * n, gridFor(rows * n), stream, bias, bt,
                out, ot, rows, n);
}

cudaError_t columnSums(const void *x, int xt, int64_t rows, int64_t n,
                       void *out, int ot, cudaStream_t stream) {
  return launch(columnSumsKernel, n, gridFor(n), stream, x, xt, rows, n, out,
                ot);
}

namespace {

template <bool Scatter>
cudaError_t stridedCopy(const void *x, void *out, int elemBytes,
                        const Strided &space, int64_t n, cudaStream_t stream) {
  if (elemBytes == 2)
    return launch(stridedCopyKernel<uint16_t, Scatter>, n, gridFor(n), stream,
                  static_cast<const uint16_t *>(x),
                  static_cast<uint16_t *>(out), space, n);
  if (elemBytes == 4)
    return launch(stridedCopyKernel<uint32_t, Scatter>, n, gridFor(n), stream,
                  static_cast<const uint32_t *>(x),
                  static_cast<uint32_t *>(out), space, n);
  return launch(stridedCopyKernel<uint64_t, Scatter>, n, gridFor(n), stream,
                static_cast<const uint64_t *>(x), static_cast<uint64_t *>(out),
                space, n);
}

} // namespace

cudaError_t permute(const void *x, void *out, int elemBytes,
                    const Strided &space, int64_t n, cudaStream_t stream) {
  return stridedCopy<false>(x, out, elemBytes, space, n, stream);
}

cudaError_t scatter(const void *x, void *out, int elemBytes,
                    const Strided &space, int64_t n, cudaStream_t stream) {
  return stridedCopy<true>(x, out, elemBytes, space, n, stream);
}

cudaError_t clamp(const void *x, int xt, void *out, int ot, int64_t n,
                  float lo, float hi, cudaStream_t stream) {
  return launch(clampKernel, n, gridFor(n), stream, x, xt, out, ot, n, lo, hi);
}

cudaError_t clampGrad(const void *dy, int dyt, const void *x, int xt, void *dx,
                      int dxt, int64_t n, float lo, float hi,
                      cudaStream_t stream) {
  return launch(clampGradKernel, n, gridFor(n), stream, dy, dyt, x, xt, dx,
                dxt, n, lo, hi);
}

cudaError_t castIndex(const void *x, bool i32, void *out, int ot, int64_t n,
                      cudaStream_t stream) {
  return launch(castIndexKernel, n, gridFor(n), stream, x, i32, out, ot, n);
}

cudaError_t arange(void *out, bool i32, int64_t start, int64_t n,
                   cudaStream_t stream) {
  return launch(arangeKernel, n, gridFor(n), stream, out, i32, start, n);
}

cudaError_t reduceSum(const void *x, int xt, void *out, int ot,
                      const Strided &kept, int64_t outN, const Strided &reduced,
                      int64_t reducedN, double divisor, cudaStream_t stream) {
  unsigned grid = outN > 65535 ? 65535u : unsigned(outN);
  return launch(reduceSumKernel, outN, grid, stream, x, xt, out, ot, kept,
                outN, reduced, reducedN, divisor);
}

cudaError_t broadcastTo(const void *dy, int dyt, void *dx, int dxt,
                        const Strided &space, int64_t n, bool divide,
                        float divisor, cudaStream_t stream) {
  return launch(broadcastToKernel, n, gridFor(n), stream, dy, dyt, dx, dxt,
                space, n, divide, divisor);
}

cudaError_t adamw(const void *param, int pt, const void *grad, int gt,
                  const float *m, const float *v, void *newParam, int npt,
                  float *newM, float *newV, int64_t n, const AdamWScalars &s,
                  cudaStream_t stream) {
  return launch(adamwKernel, n, gridFor(n), stream, param, pt, grad, gt, m, v,
                newParam, npt, newM, newV, n, s);
}

cudaError_t sgd(const void *param, int pt, const void *grad, int gt,
                const float *buf, void *newParam, int npt, float *newBuf,
                int64_t n, const SgdScalars &s, cudaStream_t stream) {
  return launch(sgdKernel, n, gridFor(n), stream, param, pt, grad, gt, buf,
                newParam, npt, newBuf, n, s);
}

cudaError_t normPartials(const void *x, int xt, int64_t n, double *partials,
                         cudaStream_t stream) {
  return launch(normPartialsKernel, n, kNormPartials, stream, x, xt, n,
                partials);
}

cudaError_t normFinish(const double *partials, float *out, bool squared,
                       cudaStream_t stream) {
  return launch(normFinishKernel, /*work=*/1, 1, stream, partials, out,
                squared);
}

cudaError_t clip(const void *g, int gt, void *out, int ot, int64_t n,
                 const float *norm, float maxNorm, cudaStream_t stream) {
  return launch(clipKernel, n, gridFor(n), stream, g, gt, out, ot, n, norm,
                maxNorm);
}

} // namespace md::cuda::kernels
