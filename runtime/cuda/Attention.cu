//===- Attention.cu - causal attention forward and backward ---------------===//
//
// Straightforward kernels, written to be checked against
// runtime/cpu/Attention.cpp rather than to be fast. Q, K and V are [B, T, C]
// with head h in columns [h * d, (h + 1) * d).
//
// Forward: one block per (batch, head, query row i). Its threads compute the
// scores s_j = (q_i . k_j) / sqrt(d) for j <= i into shared memory, the
// block takes their maximum and the f64 sum of exp(s_j - max), turns them
// into probabilities p_j, and then each thread owns output columns and
// accumulates sum_j p_j v_j[c] in f32.
//
// Backward recomputes P (as the dialect says) in two kernels:
//  1. one block per (batch, head, row i): p_j and dp_j = do_i . v_j for
//     j <= i, D_i = sum_j p_j dp_j (f64), ds_j = p_j (dp_j - D_i) and
//     dq_i = sum_j ds_j k_j / sqrt(d); the row's max, sum and D_i go to
//     scratch.
//  2. one block per (batch, head, key row j): for the rows i >= j, chunk by
//     chunk, each thread recomputes one p_ij and ds_ij from the saved row
//     statistics (same code as kernel 1, so the same bits), then
//     dv_j = sum_i p_ij do_i and dk_j = sum_i ds_ij q_i / sqrt(d).
// No atomics: every output element has one writer, so runs repeat exactly.
//
//===----------------------------------------------------------------------===//

#include <cmath>

#include "runtime/cuda/KernelUtil.cuh"

namespace md::cuda::kernels {
namespace {

// 2 * T floats of dynamic shared memory plus 3 KiB of static stay under the
// 48 KiB a block gets without opting in.
constexpr int64_t kMaxSeq = 4096;

struct Head {
  int64_t t, c, hd;
  float scale;
};

/// Offset of row `row` of head h of batch entry b.
__device__ inline int64_t rowOffset(const Head &g, int64_t b, int64_t h,
                                    int64_t row) {
  return (b * g.t + row) * g.c + h * g.hd;
}

/// f32 dot product of two head rows, in column order.
__device__ inline float dot(const void *x, int64_t xo, const void *y,
                            int64_t yo, int t, int64_t hd) {
  float s = 0.0f;
  for (int64_t d = 0; d < hd; ++d)
    s += ld(x, t, xo + d) * ld(y, t, yo + d);
  return s;
}

/// p_ij from the score and the row's max and f64 sum, as the forward does.
__device__ inline float prob(float score, float m, double sum) {
  return float(double(expf(score - m)) / sum);
}

/// The row i of head h of batch entry b that a block of the per-row
/// kernels owns (blocks run over b, h, i, with i fastest).
struct HeadRow {
  int64_t b, h, i;
};
__device__ inline HeadRow blockRow(const Head &g, int64_t heads) {
  const int64_t bh = blockIdx.x / g.t;
  return {bh / heads, bh % heads, int64_t(blockIdx.x % g.t)};
}

/// What both per-row kernels start from: the block's query row, the offset
/// of its q (and out, dq) elements, and its softmax statistics.
struct ScoredRow {
  HeadRow row;
  int64_t qo;
  float max;
  double sum;
};

/// The block's query row (blockRow) in one block: its scores
/// scale * q_i . k_j for the keys j <= i go to p[j], and every thread gets
/// the row's softmax statistics. The forward and the row-wise backward
/// kernel compute P from these (and the column-wise one from what the
/// row-wise one saves of them), so they agree bit for bit.
__device__ inline ScoredRow causalScores(const void *q, const void *k, int t,
                                         const Head &g, int64_t heads, float *p,
                                         double *shared, float *sharedF) {
  const HeadRow r = blockRow(g, heads);
  const int64_t qo = rowOffset(g, r.b, r.h, r.i);
  for (int64_t j = threadIdx.x; j <= r.i; j += blockDim.x)
    p[j] = g.scale * dot(q, qo, k, rowOffset(g, r.b, r.h, j), t, g.hd);
  const RowSoftmax stats = blockRowSoftmax(
      r.i + 1, [p](int64_t j) { return p[j]; }, shared, sharedF);
  return {r, qo, stats.max, stats.sum};
}

__global__ void attentionKernel(const void *q, const void *k, const void *v,
                                int t, void *out, int ot, int64_t heads,
                                Head g) {
  extern __shared__ float p[];
  __shared__ double shared[kThreads];
  __shared__ float sharedF[kThreads];
  const ScoredRow row = causalScores(q, k, t, g, heads, p, shared, sharedF);
  const int64_t i = row.row.i, h = row.row.h, b = row.row.b, qo = row.qo;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x)
    p[j] = prob(p[j], row.max, row.sum);
  __syncthreads();
  for (int64_t d = threadIdx.x; d < g.hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j <= i; ++j)
      acc += p[j] * ld(v, t, rowOffset(g, b, h, j) + d);
    st(out, ot, qo + d, acc);
  }
}

__global__ void attentionGradRowsKernel(const void *dout, int dot_,
                                        const void *q, const void *k,
                                        const void *v, int t, void *dq, int gt,
                                        double *stats, int64_t heads, Head g) {
  extern __shared__ float smem[];
  float *p = smem, *ds = smem + g.t;
  __shared__ double shared[kThreads];
  __shared__ float sharedF[kThreads];
  const ScoredRow row = causalScores(q, k, t, g, heads, p, shared, sharedF);
  const int64_t i = row.row.i, h = row.row.h, b = row.row.b, qo = row.qo;
  double dsum = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    float pj = prob(p[j], row.max, row.sum);
    // dout has the element type of the gradients (gt); dot_ is its type.
    float dp = 0.0f;
    const int64_t vo = rowOffset(g, b, h, j);
    for (int64_t d = 0; d < g.hd; ++d)
      dp += ld(dout, dot_, qo + d) * ld(v, t, vo + d);
    p[j] = pj;
    ds[j] = dp;
    dsum += double(dp) * double(pj);
  }
  const float dRow = float(blockSum(dsum, shared));
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x)
    ds[j] = p[j] * (ds[j] - dRow);
  __syncthreads();
  for (int64_t d = threadIdx.x; d < g.hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j <= i; ++j)
      acc += ds[j] * ld(k, t, rowOffset(g, b, h, j) + d);
    st(dq, gt, qo + d, g.scale * acc);
  }
  if (threadIdx.x == 0) {
    double *sr = stats + 3 * blockIdx.x;
    sr[0] = row.max;
    sr[1] = row.sum;
    sr[2] = dRow;
  }
}

__global__ void attentionGradColsKernel(const void *dout, int dot_,
                                        const void *q, const void *k,
                                        const void *v, int t, void *dk,
                                        void *dv, int gt, const double *stats,
                                        int64_t heads, Head g) {
  extern __shared__ float smem[];
  float *dkAcc = smem, *dvAcc = smem + g.hd;
  __shared__ float pc[kThreads], dsc[kThreads];
  const int64_t j = blockIdx.x % g.t, bh = blockIdx.x / g.t;
  const int64_t h = bh % heads, b = bh / heads;
  const int64_t ko = rowOffset(g, b, h, j);
  for (int64_t d = threadIdx.x; d < g.hd; d += blockDim.x) {
    dkAcc[d] = 0.0f;
    dvAcc[d] = 0.0f;
  }
  for (int64_t i0 = j; i0 < g.t; i0 += blockDim.x) {
    const int64_t i = i0 + threadIdx.x;
    if (i < g.t) {
      const int64_t qo = rowOffset(g, b, h, i);
      const double *sr = stats + 3 * (bh * g.t + i);
      float s = g.scale * dot(q, qo, k, ko, t, g.hd);
      float pij = prob(s, float(sr[0]), sr[1]);
      float dp = 0.0f;
      for (int64_t d = 0; d < g.hd; ++d)
        dp += ld(dout, dot_, qo + d) * ld(v, t, ko + d);
      pc[threadIdx.x] = pij;
      dsc[threadIdx.x] = pij * (dp - float(sr[2]));
    }
    __syncthreads();
    const int64_t count = g.t - i0 < blockDim.x ? g.t - i0 : blockDim.x;
    for (int64_t d = threadIdx.x; d < g.hd; d += blockDim.x) {
      float ak = dkAcc[d], av = dvAcc[d];
      for (int64_t r = 0; r < count; ++r) {
        const int64_t qo = rowOffset(g, b, h, i0 + r);
        av += pc[r] * ld(dout, dot_, qo + d);
        ak += dsc[r] * ld(q, t, qo + d);
      }
      dkAcc[d] = ak;
      dvAcc[d] = av;
    }
    __syncthreads();
  }
  for (int64_t d = threadIdx.x; d < g.hd; d += blockDim.x) {
    st(dk, gt, ko + d, g.scale * dkAcc[d]);
    st(dv, gt, ko + d, dvAcc[d]);
  }
}

Head headOf(int64_t seq, int64_t heads, int64_t headDim) {
  return Head{seq, heads * headDim, headDim,
              float(1.0 / std::sqrt(double(headDim)))};
}

} // namespace

int64_t maxAttentionSeq() { return kMaxSeq; }

cudaError_t attention(const void *q, const void *k, const void *v, int t,
                      void *out, int ot, int64_t batch, int64_t seq,
                      int64_t heads, int64_t headDim, cudaStream_t stream) {
  const int64_t blocks = batch * heads * seq;
  if (blocks == 0 || headDim == 0)
    return cudaSuccess;
  if (seq > kMaxSeq)
    return cudaErrorInvalidValue;
  attentionKernel<<<unsigned(blocks), kThreads, seq * sizeof(float), stream>>>(
      q, k, v, t, out, ot, heads, headOf(seq, heads, headDim));
  return cudaGetLastError();
}

cudaError_t attentionGrad(const void *dout, int dot, const void *q,
                          const void *k, const void *v, int t, void *dq,
                          void *dk, void *dv, int gt, double *rowStats,
                          int64_t batch, int64_t seq, int64_t heads,
                          int64_t headDim, cudaStream_t stream) {
  const int64_t blocks = batch * heads * seq;
  if (blocks == 0 || headDim == 0)
    return cudaSuccess;
  if (seq > kMaxSeq || headDim > kMaxSeq)
    return cudaErrorInvalidValue;
  Head g = headOf(seq, heads, headDim);
  attentionGradRowsKernel<<<unsigned(blocks), kThreads, 2 * seq * sizeof(float),
                            stream>>>(dout, dot, q, k, v, t, dq, gt, rowStats,
                                      heads, g);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return e;
  attentionGradColsKernel<<<unsigned(blocks), kThreads,
                            2 * headDim * sizeof(float), stream>>>(
      dout, dot, q, k, v, t, dk, dv, gt, rowStats, heads, g);
  return cudaGetLastError();
}

} // namespace md::cuda::kernels
