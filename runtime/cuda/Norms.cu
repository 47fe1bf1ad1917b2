//===- Norms.cu - normalisations, softmax, cross-entropy and embeddings ---===//
//
// The row kernels (layer/rms norm, softmax, cross-entropy) give each row to
// one block: the block's threads stride over the row and the row's sums go
// through a fixed-order f64 tree (blockSum), the per-element arithmetic is
// the CPU backend's f32 expressions (runtime/cpu/Norms.cpp, Softmax.cpp).
// Sums over rows (dgamma, dbeta, batch-norm statistics) give each column
// to one thread, which adds the rows in order in f64 exactly as the CPU
// does. Index operands are range-checked by checkIndices before any kernel
// that reads through them runs.
//
//===----------------------------------------------------------------------===//

#include <cmath>

#include "runtime/cuda/KernelUtil.cuh"

namespace md::cuda::kernels {
namespace {

unsigned rowGrid(int64_t rows) {
  return rows > 65535 ? 65535u : rows < 1 ? 1u : unsigned(rows);
}

/// Mean (0 for rms) and 1/std (or 1/rms) of row x[0..d), as the CPU's
/// layerNormStats / rmsNormScale.
__device__ void rowStats(const void *x, int xt, int64_t base, int64_t d,
                         double eps, bool rms, double *shared, float &mean,
                         float &rstd) {
  if (rms) {
    double sq = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      double v = ld(x, xt, base + j);
      sq += v * v;
    }
    sq = blockSum(sq, shared);
    mean = 0.0f;
    rstd = float(1.0 / sqrt(sq / double(d) + eps));
    return;
  }
  double sum = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    sum += ld(x, xt, base + j);
  double meanD = blockSum(sum, shared) / double(d);
  double sq = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    double dev = ld(x, xt, base + j) - meanD;
    sq += dev * dev;
  }
  double var = blockSum(sq, shared) / double(d);
  mean = float(meanD);
  rstd = float(1.0 / sqrt(var + eps));
}

__global__ void layerNormKernel(const void *x, int xt, const void *gamma,
                                int gt, const void *beta, int bt, void *out,
                                int ot, int64_t rows, int64_t d, double eps,
                                bool rms, float *stats) {
  __shared__ double shared[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * d;
    float mean, rstd;
    rowStats(x, xt, base, d, eps, rms, shared, mean, rstd);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      float xv = ld(x, xt, base + j), y;
      if (rms) {
        y = xv * rstd * ld(gamma, gt, j);
      } else {
        y = (xv - mean) * rstd * ld(gamma, gt, j);
        if (beta)
          y = y + ld(beta, bt, j);
      }
      st(out, ot, base + j, y);
    }
    if (stats && threadIdx.x == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = rstd;
    }
  }
}

// Layer norm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy*gamma.
// RMS norm:   dx = r * g - x * r^3 * mean(g * x).
__global__ void layerNormGradDxKernel(const void *dy, int dyt, const void *x,
                                      int xt, const void *gamma, int gt,
                                      void *dx, int dxt, int64_t rows,
                                      int64_t d, double eps, bool rms,
                                      float *stats) {
  __shared__ double shared[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * d;
    float mean, rstd;
    rowStats(x, xt, base, d, eps, rms, shared, mean, rstd);
    double sumG = 0, sumGX = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      float g = ld(dy, dyt, base + j) * ld(gamma, gt, j);
      float xv = ld(x, xt, base + j);
      float xhat = rms ? xv : (xv - mean) * rstd;
      sumG += g;
      sumGX += double(g) * double(xhat);
    }
    sumG = blockSum(sumG, shared);
    sumGX = blockSum(sumGX, shared);
    if (rms) {
      float c = float(double(rstd) * rstd * rstd * (sumGX / double(d)));
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        float xv = ld(x, xt, base + j);
        st(dx, dxt, base + j,
           rstd * (ld(dy, dyt, base + j) * ld(gamma, gt, j)) - xv * c);
      }
    } else {
      float meanG = float(sumG / double(d)), meanGX = float(sumGX / double(d));
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        float g = ld(dy, dyt, base + j) * ld(gamma, gt, j);
        float xhat = (ld(x, xt, base + j) - mean) * rstd;
        st(dx, dxt, base + j, rstd * (g - meanG - xhat * meanGX));
      }
    }
    if (threadIdx.x == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = rstd;
    }
  }
}

__global__ void layerNormGradParamsKernel(const void *dy, int dyt,
                                          const void *x, int xt,
                                          const float *stats, int64_t rows,
                                          int64_t d, bool rms, void *dgamma,
                                          int dgt, void *dbeta, int dbt) {
  MD_GRID_STRIDE(j, d) {
    double dg = 0, db = 0;
    for (int64_t r = 0; r < rows; ++r) {
      float g = ld(dy, dyt, r * d + j), xv = ld(x, xt, r * d + j);
      float mean = stats[2 * r], rstd = stats[2 * r + 1];
      if (rms) {
        dg += double(g * xv * rstd);
      } else {
        float xhat = (xv - mean) * rstd;
        dg += double(g) * double(xhat);
        db += g;
      }
    }
    st(dgamma, dgt, j, float(dg));
    if (dbeta)
      st(dbeta, dbt, j, float(db));
  }
}

__global__ void batchNormStatsKernel(const void *x, int xt, float *mean,
                                     float *invstd, int64_t rows, int64_t c,
                                     double eps) {
  MD_GRID_STRIDE(j, c) {
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r)
      sum += ld(x, xt, r * c + j);
    double meanD = sum / double(rows), sq = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double dev = ld(x, xt, r * c + j) - meanD;
      sq += dev * dev;
    }
    mean[j] = float(meanD);
    invstd[j] = float(1.0 / sqrt(sq / double(rows) + eps));
  }
}

__global__ void batchNormOutKernel(const void *x, int xt, const void *gamma,
                                   int gt, const void *beta, int bt, void *out,
                                   int ot, const float *mean,
                                   const float *invstd, int64_t n, int64_t c) {
  MD_GRID_STRIDE(i, n) {
    int64_t j = i % c;
    st(out, ot, i,
       (ld(x, xt, i) - mean[j]) * invstd[j] * ld(gamma, gt, j) +
           ld(beta, bt, j));
  }
}

__global__ void batchNormGradSumsKernel(const void *dy, int dyt, const void *x,
                                        int xt, const float *mean,
                                        const float *invstd, void *dgamma,
                                        int dgt, void *dbeta, int dbt,
                                        float *sums, int64_t rows, int64_t c) {
  MD_GRID_STRIDE(j, c) {
    double db = 0, dg = 0;
    for (int64_t r = 0; r < rows; ++r) {
      float g = ld(dy, dyt, r * c + j);
      float xhat = (ld(x, xt, r * c + j) - mean[j]) * invstd[j];
      db += g;
      dg += double(g) * double(xhat);
    }
    sums[j] = float(db / double(rows));
    sums[c + j] = float(dg / double(rows));
    st(dgamma, dgt, j, float(dg));
    st(dbeta, dbt, j, float(db));
  }
}

__global__ void batchNormGradDxKernel(const void *dy, int dyt, const void *x,
                                      int xt, const void *gamma, int gt,
                                      const float *mean, const float *invstd,
                                      const float *sums, void *dx, int dxt,
                                      int64_t n, int64_t c) {
  MD_GRID_STRIDE(i, n) {
    int64_t j = i % c;
    float xhat = (ld(x, xt, i) - mean[j]) * invstd[j];
    st(dx, dxt, i,
       ld(gamma, gt, j) * invstd[j] *
           (ld(dy, dyt, i) - sums[j] - xhat * sums[c + j]));
  }
}

__global__ void softmaxKernel(const void *x, int xt, void *out, int ot,
                              int64_t outer, int64_t n, int64_t inner) {
  __shared__ double shared[kThreads];
  __shared__ float sharedF[kThreads];
  for (int64_t row = blockIdx.x; row < outer * inner; row += gridDim.x) {
    const int64_t o = row / inner, i = row % inner;
    const int64_t base = o * n * inner + i, s = inner;
    const RowSoftmax r = blockRowSoftmax(
        n, [=](int64_t j) { return ld(x, xt, base + j * s); }, shared, sharedF);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float e = expf(ld(x, xt, base + j * s) - r.max);
      st(out, ot, base + j * s, float(e / r.sum));
    }
  }
}

__global__ void softmaxGradKernel(const void *dy, int dyt, const void *y,
                                  int yt, void *dx, int dxt, int64_t outer,
                                  int64_t n, int64_t inner) {
  __shared__ double shared[kThreads];
  for (int64_t row = blockIdx.x; row < outer * inner; row += gridDim.x) {
    const int64_t o = row / inner, i = row % inner;
    const int64_t base = o * n * inner + i, s = inner;
    double dot = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      dot +=
          double(ld(dy, dyt, base + j * s)) * double(ld(y, yt, base + j * s));
    float dotF = float(blockSum(dot, shared));
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float yv = ld(y, yt, base + j * s);
      st(dx, dxt, base + j * s, yv * (ld(dy, dyt, base + j * s) - dotF));
    }
  }
}

__global__ void checkIndicesKernel(const void *ids, bool i32, int64_t n,
                                   int64_t rows, bool hasIgnore,
                                   int64_t ignoreIndex, int64_t *check) {
  MD_GRID_STRIDE(p, n) {
    int64_t id = ldIndex(ids, i32, p);
    if (hasIgnore && id == ignoreIndex)
      continue;
    if (id < 0 || id >= rows)
      atomicMin(reinterpret_cast<long long *>(&check[0]), (long long)p);
    else
      atomicAdd(reinterpret_cast<unsigned long long *>(&check[1]), 1ull);
  }
}

template <typename T>
__global__ void embeddingKernel(const T *table, const void *ids, bool i32,
                                T *out, int64_t positions, int64_t d) {
  MD_GRID_STRIDE(i, positions * d) {
    int64_t p = i / d, j = i % d;
    out[i] = table[ldIndex(ids, i32, p) * d + j];
  }
}

__global__ void embeddingGradKernel(const void *dy, int dyt, const void *ids,
                                    bool i32, float *acc, int64_t positions,
                                    int64_t d) {
  MD_GRID_STRIDE(i, positions * d) {
    int64_t p = i / d, j = i % d;
    atomicAdd(&acc[ldIndex(ids, i32, p) * d + j], ld(dy, dyt, i));
  }
}

/// max and log(sum(exp(x - max))) of one row, as the CPU's logSumExp.
__device__ void logSumExp(const void *x, int xt, int64_t base, int64_t n,
                          double *shared, float *sharedF, float &m,
                          double &logSum) {
  const RowSoftmax r = blockRowSoftmax(
      n, [=](int64_t j) { return ld(x, xt, base + j); }, shared, sharedF);
  m = r.max;
  logSum = log(r.sum);
}

__global__ void crossEntropyRowsKernel(const void *logits, int lt,
                                       const void *targets, bool i32,
                                       bool hasIgnore, int64_t ignoreIndex,
                                       int64_t positions, int64_t classes,
                                       double *losses) {
  __shared__ double shared[kThreads];
  __shared__ float sharedF[kThreads];
  for (int64_t p = blockIdx.x; p < positions; p += gridDim.x) {
    int64_t t = ldIndex(targets, i32, p);
    if (hasIgnore && t == ignoreIndex) {
      if (threadIdx.x == 0)
        losses[p] = 0;
      continue;
    }
    const int64_t base = p * classes;
    float m;
    double logSum;
    logSumExp(logits, lt, base, classes, shared, sharedF, m, logSum);
    if (threadIdx.x == 0)
      losses[p] = (double(m) + logSum) - double(ld(logits, lt, base + t));
  }
}

__global__ void crossEntropyFinishKernel(const double *losses,
                                         int64_t positions, int64_t counted,
                                         float *out) {
  __shared__ double shared[kThreads];
  double total = blockSumOf(losses, positions, shared);
  if (threadIdx.x == 0)
    *out = float(total / double(counted));
}

__global__ void crossEntropyGradKernel(const float *dloss, const void *logits,
                                       int lt, const void *targets, bool i32,
                                       bool hasIgnore, int64_t ignoreIndex,
                                       int64_t positions, int64_t classes,
                                       int64_t counted, void *dlogits, int dt) {
  __shared__ double shared[kThreads];
  __shared__ float sharedF[kThreads];
  const double coeff = counted > 0 ? double(*dloss) / double(counted) : 0;
  for (int64_t p = blockIdx.x; p < positions; p += gridDim.x) {
    const int64_t base = p * classes;
    int64_t t = ldIndex(targets, i32, p);
    if (hasIgnore && t == ignoreIndex) {
      for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
        st(dlogits, dt, base + j, 0.0f);
      continue;
    }
    float m;
    double logSum;
    logSumExp(logits, lt, base, classes, shared, sharedF, m, logSum);
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
      double prob = exp(double(ld(logits, lt, base + j) - m) - logSum);
      st(dlogits, dt, base + j, float(coeff * (prob - (j == t ? 1.0 : 0.0))));
    }
  }
}

} // namespace

cudaError_t layerNorm(const void *x, int xt, const void *gamma, int gt,
                      const void *beta, int bt, void *out, int ot, int64_t rows,
                      int64_t d, double eps, bool rms, float *rowStats,
                      cudaStream_t stream) {
  return launch(layerNormKernel, rows, rowGrid(rows), stream, x, xt, gamma, gt,
                beta, bt, out, ot, rows, d, eps, rms, rowStats);
}

cudaError_t layerNormGradDx(const void *dy, int dyt, const void *x, int xt,
                            const void *gamma, int gt, void *dx, int dxt,
                            int64_t rows, int64_t d, double eps, bool rms,
                            float *rowStats, cudaStream_t stream) {
  return launch(layerNormGradDxKernel, rows, rowGrid(rows), stream, dy, dyt, x,
                xt, gamma, gt, dx, dxt, rows, d, eps, rms, rowStats);
}

cudaError_t layerNormGradParams(const void *dy, int dyt, const void *x, int xt,
                                const float *rowStats, int64_t rows, int64_t d,
                                bool rms, void *dgamma, int dgt, void *dbeta,
                                int dbt, cudaStream_t stream) {
  return launch(layerNormGradParamsKernel, d, gridFor(d), stream, dy, dyt, x,
                xt, rowStats, rows, d, rms, dgamma, dgt, dbeta, dbt);
}

cudaError_t batchNorm(const void *x, int xt, const void *gamma, int gt,
                      const void *beta, int bt, void *out, int ot, float *mean,
                      float *invstd, int64_t rows, int64_t c, double eps,
                      cudaStream_t stream) {
  if (cudaError_t e = launch(batchNormStatsKernel, c, gridFor(c), stream, x,
                             xt, mean, invstd, rows, c, eps);
      e != cudaSuccess || rows == 0)
    return e;
  return launch(batchNormOutKernel, rows * c, gridFor(rows * c), stream, x, xt,
                gamma, gt, beta, bt, out, ot, mean, invstd, rows * c, c);
}

cudaError_t batchNormGrad(const void *dy, int dyt, const void *x, int xt,
                          const void *gamma, int gt, const float *mean,
                          const float *invstd, void *dx, int dxt, void *dgamma,
                          int dgt, void *dbeta, int dbt, float *sums,
                          int64_t rows, int64_t c, cudaStream_t stream) {
  if (cudaError_t e = launch(batchNormGradSumsKernel, c, gridFor(c), stream, dy,
                             dyt, x, xt, mean, invstd, dgamma, dgt, dbeta, dbt,
                             sums, rows, c);
      e != cudaSuccess || rows == 0)
    return e;
  return launch(batchNormGradDxKernel, rows * c, gridFor(rows * c), stream, dy,
                dyt, x, xt, gamma, gt, mean, invstd, sums, dx, dxt, rows * c,
                c);
}

cudaError_t softmax(const void *x, int xt, void *out, int ot, int64_t outer,
                    int64_t n, int64_t inner, cudaStream_t stream) {
  return launch(softmaxKernel, outer * inner * n, rowGrid(outer * inner),
                stream, x, xt, out, ot, outer, n, inner);
}

cudaError_t softmaxGrad(const void *dy, int dyt, const void *y, int yt,
                        void *dx, int dxt, int64_t outer, int64_t n,
                        int64_t inner, cudaStream_t stream) {
  return launch(softmaxGradKernel, outer * inner * n, rowGrid(outer * inner),
                stream, dy, dyt, y, yt, dx, dxt, outer, n, inner);
}

cudaError_t checkIndices(const void *ids, bool i32, int64_t n, int64_t rows,
                         bool hasIgnore, int64_t ignoreIndex, int64_t *check,
                         cudaStream_t stream) {
  return launch(checkIndicesKernel, n, gridFor(n), stream, ids, i32, n, rows,
                hasIgnore, ignoreIndex, check);
}

cudaError_t embedding(const void *table, int elemBytes, const void *ids,
                      bool i32, void *out, int64_t positions, int64_t d,
                      cudaStream_t stream) {
  int64_t n = positions * d;
  if (elemBytes == 2)
    return launch(embeddingKernel<uint16_t>, n, gridFor(n), stream,
                  static_cast<const uint16_t *>(table), ids, i32,
                  static_cast<uint16_t *>(out), positions, d);
  if (elemBytes == 4)
    return launch(embeddingKernel<uint32_t>, n, gridFor(n), stream,
                  static_cast<const uint32_t *>(table), ids, i32,
                  static_cast<uint32_t *>(out), positions, d);
  return launch(embeddingKernel<uint64_t>, n, gridFor(n), stream,
                static_cast<const uint64_t *>(table), ids, i32,
                static_cast<uint64_t *>(out), positions, d);
}

cudaError_t embeddingGrad(const void *dy, int dyt, const void *ids, bool i32,
                          float *acc, int64_t positions, int64_t d,
                          cudaStream_t stream) {
  int64_t n = positions * d;
  return launch(embeddingGradKernel, n, gridFor(n), stream, dy, dyt, ids, i32,
                acc, positions, d);
}

cudaError_t crossEntropy(const void *logits, int lt, const void *targets,
                         bool i32, bool hasIgnore, int64_t ignoreIndex,
                         int64_t positions, int64_t classes, double *losses,
                         int64_t counted, float *out, cudaStream_t stream) {
  if (cudaError_t e = launch(crossEntropyRowsKernel, positions,
                             rowGrid(positions), stream, logits, lt, targets,
                             i32, hasIgnore, ignoreIndex, positions, classes,
                             losses);
      e != cudaSuccess)
    return e;
  // Always: with no positions the loss is still written (0 / 0, as the CPU).
  return launch(crossEntropyFinishKernel, /*work=*/1, 1, stream, losses,
                positions, counted, out);
}

cudaError_t crossEntropyGrad(const float *dloss, const void *logits, int lt,
                             const void *targets, bool i32, bool hasIgnore,
                             int64_t ignoreIndex, int64_t positions,
                             int64_t classes, int64_t counted, void *dlogits,
                             int dt, cudaStream_t stream) {
  return launch(crossEntropyGradKernel, positions * classes, rowGrid(positions),
                stream, dloss, logits, lt, targets, i32, hasIgnore, ignoreIndex,
                positions, classes, counted, dlogits, dt);
}

} // namespace md::cuda::kernels
