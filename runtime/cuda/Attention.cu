//===- Attention.cu - tiled causal attention forward and backward ---------===//
//
// Causal attention in the manner of FlashAttention-2, in plain f32 (no
// tensor cores): Q, K, V and out are [B, T, C] with head h in columns
// [h * hd, (h + 1) * hd); the scores S = Q K^T / sqrt(hd) never exist as a
// [T, T] matrix, only tile by tile in shared memory.
//
// Every kernel is one block of 256 threads per (batch, head, tile of TILE
// rows). Its tiles of Q, K, V and dO are staged in shared memory (coalesced
// loads, rows padded to HD + 1 floats against bank conflicts, zeros past T
// and past hd), and the 256 threads form a 16 x 16 grid: thread (ty, tx)
// owns the tile rows ty * R + r (R = TILE / 16) and, of each product, the
// columns tx + 16 c. A row's 16 owners are half of one warp, so row maxima
// and sums are warp shuffles in a fixed tree.
//
// Forward, per query tile [i0, i0 + TILE): for the key tiles j0 = 0, TILE,
// ..., i0 (the last one holds the diagonal), S = scale Q K^T masked to
// j <= i, the online softmax m' = max(m, rowmax S), a = exp(m - m'),
// P = exp(S - m'), l = a l + rowsum P, acc = a acc + P V; then out = acc / l.
//
// Backward, two kernels and no atomics (each output element has exactly one
// writer, so the result is the same bits run after run):
//  1. per query tile: a first pass over the key tiles computes m and l as
//     the forward does and, with the same rescaling, D = sum_j p_ij dp_ij
//     (dP = dO V^T); the row's m, l and D go to the row-stats scratch; a
//     second pass computes P = exp(S - m) / l, dS = P (dP - D) and
//     dQ = scale sum_j dS K.
//  2. per key tile [j0, j0 + TILE): over the query tiles i0 = j0, ..., it
//     recomputes P and dS from the saved statistics with the same
//     expressions as kernel 1 (so the same bits), then dV = sum P^T dO and
//     dK = scale sum dS^T Q.
// The forward has no statistics scratch, so kernel 1 recomputes them.
//
// With a window W, query i sees the keys (i - W, i]: the key tiles before
// the one holding key i0 - W + 1 are skipped (and kernel 2 stops at the
// query tiles past key j0 + TILE - 1 + W - 1), so a tile costs O(W), not
// O(T). A row may have no valid key in the first tiles it visits; its
// running maximum stays -inf there and its terms are 0 until one comes.
// Without a window W = T, and every call is plain causal attention's.
//
// Summation orders are fixed: a dot product over the head dims runs in
// column order (padding columns add exact zeros), P V and the gradients' sums
// run over the tiles in order and within a tile in row order.
//
// CudaAttentionEmulationTest runs this file on the host, with stand-ins for
// what it takes from KernelUtil.cuh (test/unit/emulated/): so it reaches
// shared memory and launches only through sharedFloats() and launchShared(),
// and uses no CUDA built-in that the stand-in lacks.
//
//===----------------------------------------------------------------------===//

#include <climits>
#include <cmath>

#include "runtime/cuda/KernelUtil.cuh"

namespace md::cuda::kernels {
namespace {

/// The largest head dim: the widest instantiation below. Its tiles (32 rows
/// of 129 floats, four of them in the backward) fill most of the 99 KiB a
/// block may opt in to on sm_86/89/120.
constexpr int64_t kMaxHeadDim = 128;

/// One attention call's shape.
struct Geometry {
  int64_t t, c, hd, heads;
  float scale;
  /// Keys a query sees, itself included (t without a window).
  int64_t window;
};

/// Whether query i sees key j: causal, in range, inside the window.
__device__ inline bool sees(int64_t i, int64_t j, const Geometry &g) {
  return j <= i && j < g.t && j > i - g.window;
}

/// The first key tile query row i0 (and so every row of its tile) needs.
template <int TILE>
__device__ inline int64_t firstKeyTile(int64_t i0, const Geometry &g) {
  const int64_t first = i0 >= g.window ? i0 - g.window + 1 : 0;
  return first / TILE * TILE;
}

/// The softmax shift for a running maximum that may still be -inf (a row
/// with no valid key yet): 0 there, so that exp(-inf - shift) is 0, not NaN.
__device__ inline float shiftOf(float m) { return m == -INFINITY ? 0.0f : m; }

/// The tile sizes of one instantiation: HD is the head dim rounded up to a
/// multiple of 16 (the kernels handle hd <= HD), TILE the rows per tile.
template <int HD, int TILE> struct Tiles {
  static_assert(HD % 16 == 0 && TILE % 16 == 0, "16 x 16 thread grid");
  /// Tile rows per thread, and product columns per thread.
  static constexpr int R = TILE / 16, NC = HD / 16;
  /// Leading dims of a staged [TILE, HD] tile and of a [TILE, TILE] panel.
  static constexpr int LD = HD + 1, PLD = TILE + 1;
  static constexpr size_t kTile = size_t(TILE) * LD,
                          kPanel = size_t(TILE) * PLD;
  /// Q, K, V and the P panel.
  static constexpr size_t kForwardBytes = (3 * kTile + kPanel) * sizeof(float);
  /// Q, dO, K, V, the P/dS panel and three row statistics per query row.
  static constexpr size_t kBackwardBytes =
      (4 * kTile + kPanel + 3 * TILE) * sizeof(float);
};

/// Stages rows [r0, r0 + TILE) of head h of batch entry b of `src` (element
/// type `type`) in `dst` ([TILE, HD + 1] floats): consecutive threads read
/// consecutive columns of a row; rows >= T and columns >= hd are zero.
template <int HD, int TILE>
__device__ inline void loadTile(float *dst, const void *src, int type,
                                const Geometry &g, int64_t b, int64_t h,
                                int64_t r0) {
  constexpr int LD = HD + 1;
  for (int e = threadIdx.x; e < TILE * HD; e += kThreads) {
    const int row = e / HD, d = e % HD;
    const int64_t i = r0 + row;
    dst[row * LD + d] = i < g.t && d < g.hd
                            ? ld(src, type, (b * g.t + i) * g.c + h * g.hd + d)
                            : 0.0f;
  }
}

/// out[r][c] = sum_d a[ty * R + r][d] * b[tx + 16 c][d] for the thread's
/// rows and columns, d in order 0 .. HD - 1: a tile of A B^T from two
/// staged tiles. Entry (x, y) gets the same bits whichever operand is A.
template <int HD, int TILE>
__device__ inline void tileDots(const float *a, const float *b,
                                float (&out)[TILE / 16][TILE / 16]) {
  using T = Tiles<HD, TILE>;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int r = 0; r < T::R; ++r)
#pragma unroll
    for (int c = 0; c < T::R; ++c)
      out[r][c] = 0.0f;
#pragma unroll 4
  for (int d = 0; d < HD; ++d) {
    float av[T::R], bv[T::R];
#pragma unroll
    for (int r = 0; r < T::R; ++r)
      av[r] = a[(ty * T::R + r) * T::LD + d];
#pragma unroll
    for (int c = 0; c < T::R; ++c)
      bv[c] = b[(tx + 16 * c) * T::LD + d];
#pragma unroll
    for (int r = 0; r < T::R; ++r)
#pragma unroll
      for (int c = 0; c < T::R; ++c)
        out[r][c] += av[r] * bv[c];
  }
}

/// acc[r][c] += sum_k panel[ty * R + r][k] * x[k][tx + 16 c], k in order
/// 0 .. TILE - 1: the thread's part of (panel X) for a [TILE, TILE] panel
/// and a staged [TILE, HD] tile.
template <int HD, int TILE>
__device__ inline void panelTimesTile(const float *panel, const float *x,
                                      float (&acc)[TILE / 16][HD / 16]) {
  using T = Tiles<HD, TILE>;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll 4
  for (int k = 0; k < TILE; ++k) {
    float xv[T::NC];
#pragma unroll
    for (int c = 0; c < T::NC; ++c)
      xv[c] = x[k * T::LD + tx + 16 * c];
#pragma unroll
    for (int r = 0; r < T::R; ++r) {
      const float p = panel[(ty * T::R + r) * T::PLD + k];
#pragma unroll
      for (int c = 0; c < T::NC; ++c)
        acc[r][c] += p * xv[c];
    }
  }
}

/// Maximum and sum over the 16 threads that own a row (lanes differing in
/// their low 4 bits), in a fixed order; every one of them gets the result.
__device__ inline float rowMax(float v) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
__device__ inline float rowSum(float v) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

/// p_ij from the score and row i's saved statistics: the one expression
/// both backward kernels use, so they recompute the same bits.
__device__ inline float probability(float s, float m, float l) {
  return expf(s - m) / l;
}

/// The (batch entry, head, tile) of a block, and the first row of its
/// tile. Blocks run over tiles slowest: `reversed` puts the last tiles
/// first (the query tiles with the most keys to visit), so the longest
/// blocks start first.
struct BlockTile {
  int64_t b, h, tile, row0;
};
template <int TILE>
__device__ inline BlockTile blockTile(const Geometry &g, bool reversed) {
  const int64_t tiles = (g.t + TILE - 1) / TILE;
  const int64_t pairs = int64_t(gridDim.x) / tiles;
  const int64_t bh = blockIdx.x % pairs, n = blockIdx.x / pairs;
  const int64_t tile = reversed ? tiles - 1 - n : n;
  return {bh / g.heads, bh % g.heads, tile, tile * TILE};
}

/// Zeroes a thread's accumulator.
template <int R, int NC> __device__ inline void zero(float (&acc)[R][NC]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c)
      acc[r][c] = 0.0f;
}

/// Scales the thread's scores of query row i (its row r) and masks the keys
/// it does not see (sees()) to -inf; returns their maximum over the row's
/// 16 threads (rowMax).
template <int R>
__device__ inline float maskedScores(float (&s)[R][R], int r, int64_t i,
                                     int64_t j0, const Geometry &g) {
  const int tx = threadIdx.x % 16;
  float mx = -INFINITY;
#pragma unroll
  for (int c = 0; c < R; ++c) {
    const int64_t j = j0 + tx + 16 * c;
    s[r][c] = sees(i, j, g) ? g.scale * s[r][c] : -INFINITY;
    mx = fmaxf(mx, s[r][c]);
  }
  return rowMax(mx);
}

/// Stages the key and value tile [j0, j0 + TILE) of the block's head in sK
/// and sV, once every thread is done with the previous ones, and waits for
/// the whole tile.
template <int HD, int TILE>
__device__ inline void nextKeyTile(float *sK, float *sV, const void *k,
                                   const void *v, int t, const Geometry &g,
                                   const BlockTile &bt, int64_t j0) {
  __syncthreads(); // the previous tile's readers of sK, sV (and sP) are done
  loadTile<HD, TILE>(sK, k, t, g, bt.b, bt.h, j0);
  loadTile<HD, TILE>(sV, v, t, g, bt.b, bt.h, j0);
  __syncthreads();
}

/// The running softmax statistics of a thread's rows before any key: max
/// -inf, sum 0.
template <int R>
__device__ inline void startRows(float (&m)[R], float (&l)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
}

/// Writes the thread's elements of tile rows [r0, r0 + TILE) of head h of
/// batch entry b: value(r, c) for row r0 + ty * R + r and head column
/// tx + 16 c, skipping rows >= T and columns >= hd.
template <int HD, int TILE, typename Value>
__device__ inline void storeRows(void *dst, int type, const Geometry &g,
                                 const BlockTile &bt, int64_t r0, Value value) {
  using T = Tiles<HD, TILE>;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int r = 0; r < T::R; ++r) {
    const int64_t i = r0 + ty * T::R + r;
    if (i >= g.t)
      continue;
    const int64_t o = (bt.b * g.t + i) * g.c + bt.h * g.hd;
#pragma unroll
    for (int c = 0; c < T::NC; ++c) {
      const int d = tx + 16 * c;
      if (d < g.hd)
        st(dst, type, o + d, value(r, c));
    }
  }
}

template <int HD, int TILE>
__global__ void __launch_bounds__(kThreads)
    attentionKernel(const void *q, const void *k, const void *v, int t,
                    void *out, int ot, Geometry g) {
  using T = Tiles<HD, TILE>;
  float *smem = sharedFloats();
  float *sQ = smem, *sK = sQ + T::kTile, *sV = sK + T::kTile,
        *sP = sV + T::kTile;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const BlockTile bt = blockTile<TILE>(g, true);
  const int64_t i0 = bt.row0;
  loadTile<HD, TILE>(sQ, q, t, g, bt.b, bt.h, i0);

  float m[T::R], l[T::R], acc[T::R][T::NC];
  zero(acc);
  startRows(m, l);
  // Key tiles from the window's first up to the one holding the diagonal.
  // Without a window every row i >= i0 of the tile has the valid key
  // j0 <= i in each, so m stays finite; with one, shiftOf covers the rows
  // whose window starts in a later tile.
  for (int64_t j0 = firstKeyTile<TILE>(i0, g); j0 <= i0; j0 += TILE) {
    nextKeyTile<HD, TILE>(sK, sV, k, v, t, g, bt, j0);
    float s[T::R][T::R];
    tileDots<HD, TILE>(sQ, sK, s);
#pragma unroll
    for (int r = 0; r < T::R; ++r) {
      const float mNew =
          fmaxf(m[r], maskedScores(s, r, i0 + ty * T::R + r, j0, g));
      const float shift = shiftOf(mNew);
      const float alpha = expf(m[r] - shift); // 0 on the first tile
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < T::R; ++c) {
        const float p = expf(s[r][c] - shift); // 0 where masked
        sP[(ty * T::R + r) * T::PLD + tx + 16 * c] = p;
        sum += p;
      }
      l[r] = l[r] * alpha + rowSum(sum);
      m[r] = mNew;
#pragma unroll
      for (int c = 0; c < T::NC; ++c)
        acc[r][c] *= alpha;
    }
    __syncthreads();
    panelTimesTile<HD, TILE>(sP, sV, acc);
  }
  storeRows<HD, TILE>(out, ot, g, bt, i0,
                      [&](int r, int c) { return acc[r][c] / l[r]; });
}

/// Backward kernel 1: one block per query tile; writes dQ and the rows'
/// statistics (m, l, D) to `stats` (3 doubles per row, [B, H, T] order).
template <int HD, int TILE>
__global__ void __launch_bounds__(kThreads)
    attentionGradRowsKernel(const void *dout, int dot, const void *q,
                            const void *k, const void *v, int t, void *dq,
                            int gt, double *stats, Geometry g) {
  using T = Tiles<HD, TILE>;
  float *smem = sharedFloats();
  float *sQ = smem, *sDO = sQ + T::kTile, *sK = sDO + T::kTile,
        *sV = sK + T::kTile, *sP = sV + T::kTile;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const BlockTile bt = blockTile<TILE>(g, true);
  const int64_t i0 = bt.row0;
  loadTile<HD, TILE>(sQ, q, t, g, bt.b, bt.h, i0);
  loadTile<HD, TILE>(sDO, dout, dot, g, bt.b, bt.h, i0);

  // Pass 1: m and l as the forward computes them, and D_i = sum_j p_ij
  // dp_ij as (sum_j exp(s_ij - m) dp_ij) / l with the same rescaling.
  float m[T::R], l[T::R], dn[T::R];
  startRows(m, l);
#pragma unroll
  for (int r = 0; r < T::R; ++r)
    dn[r] = 0.0f;
  for (int64_t j0 = firstKeyTile<TILE>(i0, g); j0 <= i0; j0 += TILE) {
    nextKeyTile<HD, TILE>(sK, sV, k, v, t, g, bt, j0);
    float s[T::R][T::R], dp[T::R][T::R];
    tileDots<HD, TILE>(sQ, sK, s);
    tileDots<HD, TILE>(sDO, sV, dp);
#pragma unroll
    for (int r = 0; r < T::R; ++r) {
      const float mNew =
          fmaxf(m[r], maskedScores(s, r, i0 + ty * T::R + r, j0, g));
      const float shift = shiftOf(mNew);
      const float alpha = expf(m[r] - shift);
      float sum = 0.0f, dsum = 0.0f;
#pragma unroll
      for (int c = 0; c < T::R; ++c) {
        const float e = expf(s[r][c] - shift);
        sum += e;
        dsum += e * dp[r][c];
      }
      l[r] = l[r] * alpha + rowSum(sum);
      dn[r] = dn[r] * alpha + rowSum(dsum);
      m[r] = mNew;
    }
  }
  float dRow[T::R];
#pragma unroll
  for (int r = 0; r < T::R; ++r) {
    dRow[r] = dn[r] / l[r];
    const int64_t i = i0 + ty * T::R + r;
    if (tx == 0 && i < g.t) {
      double *sr = stats + 3 * ((bt.b * g.heads + bt.h) * g.t + i);
      sr[0] = m[r];
      sr[1] = l[r];
      sr[2] = dRow[r];
    }
  }

  // Pass 2: dS = P (dP - D), dQ = scale dS K.
  float acc[T::R][T::NC];
  zero(acc);
  for (int64_t j0 = firstKeyTile<TILE>(i0, g); j0 <= i0; j0 += TILE) {
    nextKeyTile<HD, TILE>(sK, sV, k, v, t, g, bt, j0);
    float s[T::R][T::R], dp[T::R][T::R];
    tileDots<HD, TILE>(sQ, sK, s);
    tileDots<HD, TILE>(sDO, sV, dp);
#pragma unroll
    for (int r = 0; r < T::R; ++r) {
      const int64_t i = i0 + ty * T::R + r;
#pragma unroll
      for (int c = 0; c < T::R; ++c) {
        const int64_t j = j0 + tx + 16 * c;
        const float ds = sees(i, j, g)
                             ? probability(g.scale * s[r][c], m[r], l[r]) *
                                   (dp[r][c] - dRow[r])
                             : 0.0f;
        sP[(ty * T::R + r) * T::PLD + tx + 16 * c] = ds;
      }
    }
    __syncthreads();
    panelTimesTile<HD, TILE>(sP, sK, acc);
  }
  storeRows<HD, TILE>(dq, gt, g, bt, i0,
                      [&](int r, int c) { return g.scale * acc[r][c]; });
}

/// Backward kernel 2: one block per key tile; reads the statistics kernel 1
/// wrote and writes dK and dV. Here the thread grid's rows are keys and its
/// columns queries: the panels hold P^T and dS^T.
template <int HD, int TILE>
__global__ void __launch_bounds__(kThreads)
    attentionGradColsKernel(const void *dout, int dot, const void *q,
                            const void *k, const void *v, int t, void *dk,
                            void *dv, int gt, const double *stats, Geometry g) {
  using T = Tiles<HD, TILE>;
  float *smem = sharedFloats();
  float *sK = smem, *sV = sK + T::kTile, *sQ = sV + T::kTile,
        *sDO = sQ + T::kTile, *sP = sDO + T::kTile, *sM = sP + T::kPanel,
        *sL = sM + TILE, *sD = sL + TILE;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const BlockTile bt = blockTile<TILE>(g, false);
  const int64_t j0 = bt.row0;
  const double *headStats = stats + 3 * (bt.b * g.heads + bt.h) * g.t;
  loadTile<HD, TILE>(sK, k, t, g, bt.b, bt.h, j0);
  loadTile<HD, TILE>(sV, v, t, g, bt.b, bt.h, j0);

  float accK[T::R][T::NC], accV[T::R][T::NC];
  zero(accK);
  zero(accV);
  // Query tiles from the diagonal one on: rows i < j0 see none of the keys,
  // and, with a window, rows i >= j0 + TILE - 1 + window none either.
  const int64_t lastQuery = j0 + TILE - 1 + g.window - 1;
  for (int64_t i0 = j0; i0 < g.t && i0 <= lastQuery; i0 += TILE) {
    __syncthreads(); // the previous tile's readers of sQ, sDO, sP are done
    loadTile<HD, TILE>(sQ, q, t, g, bt.b, bt.h, i0);
    loadTile<HD, TILE>(sDO, dout, dot, g, bt.b, bt.h, i0);
    for (int r = threadIdx.x; r < TILE; r += kThreads) {
      const int64_t i = i0 + r;
      const bool in = i < g.t;
      sM[r] = in ? float(headStats[3 * i]) : 0.0f;
      sL[r] = in ? float(headStats[3 * i + 1]) : 1.0f;
      sD[r] = in ? float(headStats[3 * i + 2]) : 0.0f;
    }
    __syncthreads();
    float s[T::R][T::R], dp[T::R][T::R];
    tileDots<HD, TILE>(sK, sQ, s);   // S^T: the same bits as S in kernel 1
    tileDots<HD, TILE>(sV, sDO, dp); // dP^T
    float ds[T::R][T::R];
#pragma unroll
    for (int r = 0; r < T::R; ++r) {
      const int64_t j = j0 + ty * T::R + r;
#pragma unroll
      for (int c = 0; c < T::R; ++c) {
        const int qr = tx + 16 * c;
        const int64_t i = i0 + qr;
        float p = 0.0f;
        ds[r][c] = 0.0f;
        if (i < g.t && sees(i, j, g)) {
          p = probability(g.scale * s[r][c], sM[qr], sL[qr]);
          ds[r][c] = p * (dp[r][c] - sD[qr]);
        }
        sP[(ty * T::R + r) * T::PLD + qr] = p;
      }
    }
    __syncthreads();
    panelTimesTile<HD, TILE>(sP, sDO, accV);
    __syncthreads(); // every reader of P is done before dS replaces it
#pragma unroll
    for (int r = 0; r < T::R; ++r)
#pragma unroll
      for (int c = 0; c < T::R; ++c)
        sP[(ty * T::R + r) * T::PLD + tx + 16 * c] = ds[r][c];
    __syncthreads();
    panelTimesTile<HD, TILE>(sP, sQ, accK);
  }
  storeRows<HD, TILE>(dk, gt, g, bt, j0,
                      [&](int r, int c) { return g.scale * accK[r][c]; });
  storeRows<HD, TILE>(dv, gt, g, bt, j0,
                      [&](int r, int c) { return accV[r][c]; });
}

/// Blocks of one call: (batch, head) pairs times tiles, or 0 when the grid
/// would exceed the 2^31 - 1 blocks of its x dimension.
int64_t gridSize(int64_t batch, int64_t heads, int64_t seq, int tile) {
  const int64_t pairs = batch * heads, tiles = (seq + tile - 1) / tile;
  if (pairs > 0 && tiles > INT_MAX / pairs)
    return 0;
  return pairs * tiles;
}

template <int HD, int TILE>
cudaError_t forward(const void *q, const void *k, const void *v, int t,
                    void *out, int ot, int64_t batch, const Geometry &g,
                    cudaStream_t stream) {
  const int64_t blocks = gridSize(batch, g.heads, g.t, TILE);
  if (blocks == 0)
    return cudaErrorInvalidConfiguration;
  return launchShared(attentionKernel<HD, TILE>, unsigned(blocks),
                      Tiles<HD, TILE>::kForwardBytes, stream, q, k, v, t, out,
                      ot, g);
}

template <int HD, int TILE>
cudaError_t backward(const void *dout, int dot, const void *q, const void *k,
                     const void *v, int t, void *dq, void *dk, void *dv, int gt,
                     double *rowStats, int64_t batch, const Geometry &g,
                     cudaStream_t stream) {
  const int64_t blocks = gridSize(batch, g.heads, g.t, TILE);
  if (blocks == 0)
    return cudaErrorInvalidConfiguration;
  constexpr size_t bytes = Tiles<HD, TILE>::kBackwardBytes;
  if (cudaError_t e = launchShared(attentionGradRowsKernel<HD, TILE>,
                                   unsigned(blocks), bytes, stream, dout, dot,
                                   q, k, v, t, dq, gt, rowStats, g);
      e != cudaSuccess)
    return e;
  return launchShared(attentionGradColsKernel<HD, TILE>, unsigned(blocks),
                      bytes, stream, dout, dot, q, k, v, t, dk, dv, gt,
                      static_cast<const double *>(rowStats), g);
}

Geometry geometryOf(int64_t seq, int64_t heads, int64_t headDim,
                    int64_t window) {
  return Geometry{seq,
                  heads * headDim,
                  headDim,
                  heads,
                  float(1.0 / std::sqrt(double(headDim))),
                  window > 0 && window < seq ? window : seq};
}

} // namespace

// Tiles of 64 rows up to hd = 64; 32 rows at hd = 128, where the backward's
// four [64, 129] tiles would pass the 99 KiB of sm_86/89/120.
int64_t maxAttentionSeq() { return INT_MAX; }
int64_t maxAttentionHeadDim() { return kMaxHeadDim; }

cudaError_t attention(const void *q, const void *k, const void *v, int t,
                      void *out, int ot, int64_t batch, int64_t seq,
                      int64_t heads, int64_t headDim, int64_t window,
                      cudaStream_t stream) {
  if (batch * heads * seq == 0 || headDim == 0)
    return cudaSuccess;
  if (seq > maxAttentionSeq() || headDim > kMaxHeadDim)
    return cudaErrorInvalidValue;
  const Geometry g = geometryOf(seq, heads, headDim, window);
  if (headDim <= 32)
    return forward<32, 64>(q, k, v, t, out, ot, batch, g, stream);
  if (headDim <= 64)
    return forward<64, 64>(q, k, v, t, out, ot, batch, g, stream);
  return forward<128, 32>(q, k, v, t, out, ot, batch, g, stream);
}

cudaError_t attentionGrad(const void *dout, int dot, const void *q,
                          const void *k, const void *v, int t, void *dq,
                          void *dk, void *dv, int gt, double *rowStats,
                          int64_t batch, int64_t seq, int64_t heads,
                          int64_t headDim, int64_t window,
                          cudaStream_t stream) {
  if (batch * heads * seq == 0 || headDim == 0)
    return cudaSuccess;
  if (seq > maxAttentionSeq() || headDim > kMaxHeadDim)
    return cudaErrorInvalidValue;
  const Geometry g = geometryOf(seq, heads, headDim, window);
  if (headDim <= 32)
    return backward<32, 64>(dout, dot, q, k, v, t, dq, dk, dv, gt, rowStats,
                            batch, g, stream);
  if (headDim <= 64)
    return backward<64, 64>(dout, dot, q, k, v, t, dq, dk, dv, gt, rowStats,
                            batch, g, stream);
  return backward<128, 32>(dout, dot, q, k, v, t, dq, dk, dv, gt, rowStats,
                           batch, g, stream);
}

} // namespace md::cuda::kernels
