//===- Kernels.h - launchers of the CUDA backend's own kernels -*- C++ -*-===//
//
// The .cu files (Elementwise.cu, Norms.cu, Attention.cu) implement these;
// CudaOps.cpp checks the arguments (OpChecks.h), computes the sizes and
// calls them. Each launcher queues its kernels on `stream` and returns
// the launch error (cudaGetLastError), never synchronising. Element types
// are runtime::DType values passed as int: the kernels load every float
// type to f32 and round once on store (KernelUtil.cuh), so a kernel is
// compiled once, not once per type combination.
//
// Shapes of rank up to kMaxRank travel by value in small structs.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CUDA_KERNELS_H
#define MD_RUNTIME_CUDA_KERNELS_H

#include <cstdint>

// A host test that runs the kernels without a GPU
// (test/unit/emulated/runtime/cuda/KernelUtil.cuh) defines the two types.
#ifndef MD_CUDA_EMULATED
#include <cuda_runtime_api.h>
#endif

#include "runtime/core/OptimizerScalars.h"

namespace md::cuda::kernels {

inline constexpr int kMaxRank = 8;

/// A row-major iteration space of `rank` dims and, for up to two operands,
/// the element strides that walk it (0 on broadcast dims).
struct Strided {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strideA[kMaxRank] = {};
  int64_t strideB[kMaxRank] = {};
};

// --- Elementwise.cu ---------------------------------------------------------
// The math functions follow the scale..silu cases in the order of
// runtime::ElementwiseFn (exp first): UnaryOf/UnaryGradOf map one to the
// other.
enum class Unary {
  scale, geluExact, geluTanh, relu, silu,
  exp, log, sin, cos, tanh, sigmoid, abs, neg, sqrt, rsqrt,
  pow // x ^ factor
};
enum class UnaryGrad {
  geluExact, geluTanh, relu, silu,
  exp, log, sin, cos, tanh, sigmoid, abs, neg, sqrt, rsqrt,
  pow // factor x ^ (factor - 1)
};
enum class Binary { add, sub, mul, div, maximum, minimum };

cudaError_t binary(Binary op, const void *lhs, int lt, const void *rhs, int rt,
                   void *out, int ot, const Strided &space, int64_t n,
                   cudaStream_t stream);
cudaError_t unary(Unary op, const void *x, int xt, void *out, int ot,
                  int64_t n, float factor, cudaStream_t stream);
cudaError_t unaryGrad(UnaryGrad op, const void *dy, int dyt, const void *x,
                      int xt, void *dx, int dxt, int64_t n, float factor,
                      cudaStream_t stream);
cudaError_t accumulate(const void *acc, int at, const void *g, int gt,
                       void *out, int ot, int64_t n, cudaStream_t stream);
/// out = x converted (float types: f32 in between, rounded once).
cudaError_t cast(const void *x, int xt, void *out, int ot, int64_t n,
                 cudaStream_t stream);
/// out[r, j] = bias[j] (or 0 without bias) for rows x n.
cudaError_t fillRows(const void *bias, int bt, void *out, int ot, int64_t rows,
                     int64_t n, cudaStream_t stream);
/// out[j] = sum over rows of x[r, j], in row order in f64 (one thread per
/// column): the matmul bias gradient.
cudaError_t columnSums(const void *x, int xt, int64_t rows, int64_t n,
                       void *out, int ot, cudaStream_t stream);
/// out[i] = x[offset(i)] for a permutation; elemBytes 2, 4 or 8.
cudaError_t permute(const void *x, void *out, int elemBytes,
                    const Strided &space, int64_t n, cudaStream_t stream);
/// out[offset(i)] = x[i], the reverse of permute: a slice's gradient and
/// a concat's inputs written into their places. elemBytes 2, 4 or 8.
cudaError_t scatter(const void *x, void *out, int elemBytes,
                    const Strided &space, int64_t n, cudaStream_t stream);
/// out = x clamped to [lo, hi] (NaN stays NaN); dx = lo <= x <= hi ? dy : 0.
cudaError_t clamp(const void *x, int xt, void *out, int ot, int64_t n,
                  float lo, float hi, cudaStream_t stream);
cudaError_t clampGrad(const void *dy, int dyt, const void *x, int xt, void *dx,
                      int dxt, int64_t n, float lo, float hi,
                      cudaStream_t stream);
/// out = x (i32 or i64) converted to a float type: f32, rounded once more
/// to a narrower one.
cudaError_t castIndex(const void *x, bool i32, void *out, int ot, int64_t n,
                      cudaStream_t stream);
cudaError_t arange(void *out, bool i32, int64_t start, int64_t n,
                   cudaStream_t stream);
/// out[o] = sum over the reduced sub-space of x / divisor. `kept` walks the
/// outputs (strideA: x's strides), `reduced` the summed dims (strideA:
/// x's strides). One block per output, f64 accumulation.
cudaError_t reduceSum(const void *x, int xt, void *out, int ot,
                      const Strided &kept, int64_t outN, const Strided &reduced,
                      int64_t reducedN, double divisor, cudaStream_t stream);
/// dx[i] = dy[slot(i)] (/ divisor when mean), slot via space.strideA.
cudaError_t broadcastTo(const void *dy, int dyt, void *dx, int dxt,
                        const Strided &space, int64_t n, bool divide,
                        float divisor, cudaStream_t stream);

using runtime::AdamWScalars;
cudaError_t adamw(const void *param, int pt, const void *grad, int gt,
                  const float *m, const float *v, void *newParam, int npt,
                  float *newM, float *newV, int64_t n, const AdamWScalars &s,
                  cudaStream_t stream);
using runtime::SgdScalars;
cudaError_t sgd(const void *param, int pt, const void *grad, int gt,
                const float *buf, void *newParam, int npt, float *newBuf,
                int64_t n, const SgdScalars &s, cudaStream_t stream);
/// Sums of squares of x into partials[kNormPartials], one f64 slot per
/// block; call once per tensor, then normFinish.
inline constexpr int kNormPartials = 256;
cudaError_t normPartials(const void *x, int xt, int64_t n, double *partials,
                         cudaStream_t stream);
cudaError_t normFinish(const double *partials, float *out, bool squared,
                       cudaStream_t stream);
/// out = g * min(1, maxNorm / (*norm + 1e-6)).
cudaError_t clip(const void *g, int gt, void *out, int ot, int64_t n,
                 const float *norm, float maxNorm, cudaStream_t stream);

// --- Norms.cu ---------------------------------------------------------------
/// Row statistics are written to rowStats[2 * row] (mean or 0, rstd) when
/// rowStats is non-null.
cudaError_t layerNorm(const void *x, int xt, const void *gamma, int gt,
                      const void *beta, int bt, void *out, int ot,
                      int64_t rows, int64_t d, double eps, bool rms,
                      float *rowStats, cudaStream_t stream);
cudaError_t layerNormGradDx(const void *dy, int dyt, const void *x, int xt,
                            const void *gamma, int gt, void *dx, int dxt,
                            int64_t rows, int64_t d, double eps, bool rms,
                            float *rowStats, cudaStream_t stream);
/// dgamma (and dbeta when non-null) over the rows, from rowStats.
cudaError_t layerNormGradParams(const void *dy, int dyt, const void *x, int xt,
                                const float *rowStats, int64_t rows, int64_t d,
                                bool rms, void *dgamma, int dgt, void *dbeta,
                                int dbt, cudaStream_t stream);
cudaError_t batchNorm(const void *x, int xt, const void *gamma, int gt,
                      const void *beta, int bt, void *out, int ot, float *mean,
                      float *invstd, int64_t rows, int64_t c, double eps,
                      cudaStream_t stream);
/// `sums` is 2 * c f32 scratch.
cudaError_t batchNormGrad(const void *dy, int dyt, const void *x, int xt,
                          const void *gamma, int gt, const float *mean,
                          const float *invstd, void *dx, int dxt, void *dgamma,
                          int dgt, void *dbeta, int dbt, float *sums,
                          int64_t rows, int64_t c, cudaStream_t stream);
cudaError_t softmax(const void *x, int xt, void *out, int ot, int64_t outer,
                    int64_t n, int64_t inner, cudaStream_t stream);
cudaError_t softmaxGrad(const void *dy, int dyt, const void *y, int yt,
                        void *dx, int dxt, int64_t outer, int64_t n,
                        int64_t inner, cudaStream_t stream);

/// Index checks: check[0] = the first position whose index is out of
/// [0, rows) (and not ignoreIndex when hasIgnore), INT64_MAX if none;
/// check[1] = how many positions are not ignored. check must hold
/// {INT64_MAX, 0} before the call.
cudaError_t checkIndices(const void *ids, bool i32, int64_t n, int64_t rows,
                         bool hasIgnore, int64_t ignoreIndex, int64_t *check,
                         cudaStream_t stream);
cudaError_t embedding(const void *table, int elemBytes, const void *ids,
                      bool i32, void *out, int64_t positions, int64_t d,
                      cudaStream_t stream);
/// acc (f32 [rows, d], zeroed by the caller) += dy rows, atomically.
cudaError_t embeddingGrad(const void *dy, int dyt, const void *ids, bool i32,
                          float *acc, int64_t positions, int64_t d,
                          cudaStream_t stream);
/// losses[p] (f64) per position (0 when ignored), then out = sum / counted.
cudaError_t crossEntropy(const void *logits, int lt, const void *targets,
                         bool i32, bool hasIgnore, int64_t ignoreIndex,
                         int64_t positions, int64_t classes, double *losses,
                         int64_t counted, float *out, cudaStream_t stream);
cudaError_t crossEntropyGrad(const float *dloss, const void *logits, int lt,
                             const void *targets, bool i32, bool hasIgnore,
                             int64_t ignoreIndex, int64_t positions,
                             int64_t classes, int64_t counted, void *dlogits,
                             int dt, cudaStream_t stream);

// --- Attention.cu -----------------------------------------------------------
/// The longest sequence the tiled kernels take (the grid's 2^31 - 1 blocks
/// bound it; no buffer grows with T) and the largest head dim (their widest
/// instantiation).
int64_t maxAttentionSeq();
int64_t maxAttentionHeadDim();
cudaError_t attention(const void *q, const void *k, const void *v, int t,
                      void *out, int ot, int64_t batch, int64_t seq,
                      int64_t heads, int64_t headDim, int64_t window,
                      cudaStream_t stream);
/// rowStats: 3 doubles per (batch, head, row) of scratch. `window`: the keys
/// each query sees (seq, or 0, for plain causal attention).
cudaError_t attentionGrad(const void *dout, int dot, const void *q,
                          const void *k, const void *v, int t, void *dq,
                          void *dk, void *dv, int gt, double *rowStats,
                          int64_t batch, int64_t seq, int64_t heads,
                          int64_t headDim, int64_t window, cudaStream_t stream);

} // namespace md::cuda::kernels

#endif // MD_RUNTIME_CUDA_KERNELS_H
