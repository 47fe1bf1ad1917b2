//===- Attention.cpp - md.causal_attention and its gradient ---------------===//
//
// Causal attention one (batch, head) pair at a time, in tiles of kTile query
// rows, as flash attention does on a CPU: the head's Q, K and V are column
// blocks of the [T, C] rows (leading dim C), so every product goes straight
// to the GEMM without copies. Rows [i0, i1) of S = Q K^T / sqrt(d) need the
// keys [0, i1) only, so each tile multiplies its rows by the keys up to its
// last row: the tiles above the diagonal never reach the GEMM (about half of
// S for long sequences), and the probabilities live in one [kTile, T] panel
// instead of a [T, T] matrix. Each row is normalised with Rows.h's softmax
// (SLEEF exp, f64 sums), exactly as the softmax op does. The gradient
// recomputes P tile by tile instead of storing it, as the dialect says.
// With a window W, row i sees the keys (i - W, i] only, so a tile needs the
// keys [first(i0), i1) and the GEMMs shrink to them: the work is O(T W),
// not O(T^2). Without one (W = T) the key range starts at 0 and the calls
// are those of plain causal attention.
//
// Bits: the tile size is a constant and the tiles run in order, so the
// summation order is fixed: the same inputs give the same bits, whatever
// the thread count of the run (up to the GEMM library's own blocking).
// dK and dV sum over the tiles' query rows: each tile adds its part to the
// running f32 sum (GEMM with beta = 1), tile 0 first. With T <= kTile
// there is one tile and the GEMMs are those of the full-square kernel, so
// the bits are too.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/core/OpChecks.h"
#include "runtime/core/Status.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/Rows.h"
#include "runtime/cpu/Storage.h"

namespace md::cpu {

using namespace md::runtime;

namespace {

/// Query rows per tile; a constant, because the bits depend on it. The
/// GPT models' heads are small (hd = 16 to 64), so a GEMM call's overhead
/// weighs as much as its arithmetic: with 32-row tiles the kernels took
/// up to 31% more CPU time than the full-square kernel at T = 64 and 128,
/// with 64-row tiles 0-10% less (docs/bench.md).
constexpr int64_t kTile = 64;

absl::Status checkRange(const char *op, const AttentionDims &d) {
  if (d.seq > INT_MAX || d.channels > INT_MAX)
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: T = %d or C = %d exceeds the BLAS int range", op,
                        d.seq, d.channels));
  return absl::OkStatus();
}

/// One head's operands: [T, hd] column blocks with leading dim c.
struct Head {
  int64_t t, c, hd;
  float scale;
  const AttentionDims *dims;
};

/// P rows [i0, i1) = softmax(scale * Q K[j0, i1)^T), j0 = firstKey(i0),
/// with the keys j > i and j < firstKey(i) masked, into the panel `p`
/// ([i1 - i0, i1 - j0] row-major, leading dim i1 - j0), zero where masked.
absl::Status tileProbs(const char *kernel, const Head &h, const float *q,
                       const float *k, int64_t i0, int64_t i1, float *p) {
  const int64_t rows = i1 - i0, j0 = h.dims->firstKey(i0), n = i1 - j0;
  MD_RETURN_IF_ERROR(sgemm(kernel, false, true, rows, n, h.hd, h.scale,
                           q + i0 * h.c, h.c, k + j0 * h.c, h.c, 0.0f, p, n));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r, lo = h.dims->firstKey(i) - j0, hi = i - j0 + 1;
    float *row = p + r * n;
    std::fill(row, row + lo, 0.0f);
    softmaxRow(row + lo, row + lo, hi - lo);
    std::fill(row + hi, row + n, 0.0f);
  }
  return absl::OkStatus();
}

/// Zeroes rows [i0, i1) of a head's [T, hd] column block (leading dim c).
void zeroRows(const Head &h, float *x, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i)
    std::fill(x + i * h.c, x + i * h.c + h.hd, 0.0f);
}

} // namespace

// Per batch entry b, head h and tile of rows [i0, i1): S = Q K^T / sqrt(d)
// against keys [j0, i1), masked above the diagonal (and before each row's
// window), P = softmax(S) row by row, out rows = P V[j0, i1).
absl::Status CpuBackend::causalAttention(const CausalAttentionArgs &args) {
  static constexpr const char *kName = "causal_attention";
  MD_ASSIGN_OR_RETURN(AttentionDims d, checkCausalAttention(args));
  MD_RETURN_IF_ERROR(checkRange("causal_attention", d));
  F32In q(args.q), k(args.k), v(args.v);
  F32Out out(args.out);
  const Head h{d.seq, d.channels, d.headDim,
               float(1.0 / std::sqrt(double(d.headDim))), &d};
  if (h.t == 0 || h.hd == 0 || d.batch == 0) {
    std::fill(out.data(), out.data() + args.out.numel(), 0.0f);
    out.store();
    return absl::OkStatus();
  }
  std::vector<float> p(std::min(kTile, h.t) * h.t);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t hh = 0; hh < d.heads; ++hh) {
      const int64_t off = b * h.t * h.c + hh * h.hd;
      for (int64_t i0 = 0; i0 < h.t; i0 += kTile) {
        const int64_t i1 = std::min(i0 + kTile, h.t), j0 = d.firstKey(i0),
                      n = i1 - j0;
        MD_RETURN_IF_ERROR(tileProbs(kName, h, q.data() + off,
                                     k.data() + off, i0, i1, p.data()));
        MD_RETURN_IF_ERROR(sgemm(kName, false, false, i1 - i0, h.hd, n, 1.0f,
                                 p.data(), n, v.data() + off + j0 * h.c, h.c,
                                 0.0f, out.data() + off + i0 * h.c, h.c));
      }
    }
  out.store();
  return absl::OkStatus();
}

// Per head and tile of rows [i0, i1), with P recomputed for the tile over
// the keys [j0, i1):
//   dV[j0, i1) += P^T dO,  dP = dO V[j0, i1)^T,  dS = P * (dP - rowsum(dP P)),
//   dQ rows = dS K[j0, i1) / sqrt(d),  dK[j0, i1) += dS^T Q / sqrt(d).
// Masked entries have P = 0 and so dS = 0.
absl::Status
CpuBackend::causalAttentionGrad(const CausalAttentionGradArgs &args) {
  static constexpr const char *kName = "causal_attention_grad";
  MD_ASSIGN_OR_RETURN(AttentionDims d, checkCausalAttentionGrad(args));
  MD_RETURN_IF_ERROR(checkRange("causal_attention_grad", d));
  F32In dout(args.dout), q(args.q), k(args.k), v(args.v);
  F32Out dq(args.dq), dk(args.dk), dv(args.dv);
  const Head h{d.seq, d.channels, d.headDim,
               float(1.0 / std::sqrt(double(d.headDim))), &d};
  if (h.t == 0 || h.hd == 0 || d.batch == 0) {
    for (F32Out *o : {&dq, &dk, &dv}) {
      std::fill(o->data(), o->data() + args.q.numel(), 0.0f);
      o->store();
    }
    return absl::OkStatus();
  }
  const int64_t panel = std::min(kTile, h.t) * h.t;
  std::vector<float> p(panel), ds(panel);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t hh = 0; hh < d.heads; ++hh) {
      const int64_t off = b * h.t * h.c + hh * h.hd;
      const float *qh = q.data() + off, *kh = k.data() + off,
                  *vh = v.data() + off, *doh = dout.data() + off;
      float *dkh = dk.data() + off, *dvh = dv.data() + off;
      for (int64_t i0 = 0; i0 < h.t; i0 += kTile) {
        const int64_t i1 = std::min(i0 + kTile, h.t), rows = i1 - i0,
                      j0 = d.firstKey(i0), n = i1 - j0;
        // Tile 0 writes dK and dV rows [0, i1) (beta = 0; its j0 is 0); a
        // later tile adds to the rows [j0, i0) before it, which earlier
        // tiles wrote, and starts its own from zero. So with T <= kTile and
        // no window this is the full-square kernel, call for call.
        const float beta = i0 == 0 ? 0.0f : 1.0f;
        if (i0 > 0) {
          zeroRows(h, dkh, i0, i1);
          zeroRows(h, dvh, i0, i1);
        }
        MD_RETURN_IF_ERROR(tileProbs(kName, h, qh, kh, i0, i1, p.data()));
        MD_RETURN_IF_ERROR(sgemm(kName, true, false, n, h.hd, rows, 1.0f,
                                 p.data(), n, doh + i0 * h.c, h.c, beta,
                                 dvh + j0 * h.c, h.c));
        MD_RETURN_IF_ERROR(sgemm(kName, false, true, rows, n, h.hd, 1.0f,
                                 doh + i0 * h.c, h.c, vh + j0 * h.c, h.c, 0.0f,
                                 ds.data(), n));
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r, lo = d.firstKey(i) - j0, hi = i - j0 + 1;
          float *dr = ds.data() + r * n;
          std::fill(dr, dr + lo, 0.0f);
          softmaxGradRow(dr + lo, p.data() + r * n + lo, dr + lo, hi - lo);
          std::fill(dr + hi, dr + n, 0.0f);
        }
        MD_RETURN_IF_ERROR(sgemm(kName, false, false, rows, h.hd, n, h.scale,
                                 ds.data(), n, kh + j0 * h.c, h.c, 0.0f,
                                 dq.data() + off + i0 * h.c, h.c));
        MD_RETURN_IF_ERROR(sgemm(kName, true, false, n, h.hd, rows, h.scale,
                                 ds.data(), n, qh + i0 * h.c, h.c, beta,
                                 dkh + j0 * h.c, h.c));
      }
    }
  dq.store();
  dk.store();
  dv.store();
  return absl::OkStatus();
}

} // namespace md::cpu
