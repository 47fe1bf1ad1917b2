//===- Attention.cpp - md.causal_attention and its gradient ---------------===//
//
// A reference implementation, one (batch, head) pair at a time: the head's
// Q, K and V are column blocks of the [T, C] rows (leading dim C), so the
// three products go straight to sgemm without copies. S = Q K^T / sqrt(d)
// is computed in full and the upper triangle masked afterwards, which
// wastes half of that sgemm but keeps the code obvious. The gradient
// recomputes P instead of storing it, as the dialect says.
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

absl::Status checkRange(const char *op, const AttentionDims &d) {
  if (d.seq > INT_MAX || d.channels > INT_MAX)
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: T = %d or C = %d exceeds the BLAS int range", op,
                        d.seq, d.channels));
  return absl::OkStatus();
}

/// P = softmax(scale * Q K^T) with j > i masked, for one head; `p` is
/// [T, T] row-major, zero above the diagonal.
void attentionProbs(const float *q, const float *k, int64_t t, int64_t c,
                    int64_t hd, float scale, float *p) {
  sgemm(false, true, t, t, hd, scale, q, c, k, c, 0.0f, p, t);
  for (int64_t i = 0; i < t; ++i) {
    float *row = p + i * t;
    softmaxRow(row, row, i + 1);
    for (int64_t j = i + 1; j < t; ++j)
      row[j] = 0.0f;
  }
}

} // namespace

// Per batch entry b and head h: S = Q K^T / sqrt(d), masked above the
// diagonal, P = softmax(S) row by row, out = P V.
absl::Status CpuBackend::causalAttention(const CausalAttentionArgs &args) {
  MD_ASSIGN_OR_RETURN(AttentionDims d, checkCausalAttention(args));
  MD_RETURN_IF_ERROR(checkRange("causal_attention", d));
  F32In q(args.q), k(args.k), v(args.v);
  F32Out out(args.out);
  const int64_t t = d.seq, c = d.channels, hd = d.headDim;
  if (t == 0 || hd == 0 || d.batch == 0) {
    std::fill(out.data(), out.data() + args.out.numel(), 0.0f);
    out.store();
    return absl::OkStatus();
  }
  const float scale = float(1.0 / std::sqrt(double(hd)));
  std::vector<float> p(t * t);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      const int64_t off = b * t * c + h * hd;
      attentionProbs(q.data() + off, k.data() + off, t, c, hd, scale, p.data());
      sgemm(false, false, t, hd, t, 1.0f, p.data(), t, v.data() + off, c,
            0.0f, out.data() + off, c);
    }
  out.store();
  return absl::OkStatus();
}

// Per head, with P recomputed:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dP * P)),
//   dQ = dS K / sqrt(d),  dK = dS^T Q / sqrt(d).
// Masked entries have P = 0 and so dS = 0.
absl::Status
CpuBackend::causalAttentionGrad(const CausalAttentionGradArgs &args) {
  MD_ASSIGN_OR_RETURN(AttentionDims d, checkCausalAttentionGrad(args));
  MD_RETURN_IF_ERROR(checkRange("causal_attention_grad", d));
  F32In dout(args.dout), q(args.q), k(args.k), v(args.v);
  F32Out dq(args.dq), dk(args.dk), dv(args.dv);
  const int64_t t = d.seq, c = d.channels, hd = d.headDim;
  if (t == 0 || hd == 0 || d.batch == 0) {
    for (F32Out *o : {&dq, &dk, &dv}) {
      std::fill(o->data(), o->data() + args.q.numel(), 0.0f);
      o->store();
    }
    return absl::OkStatus();
  }
  const float scale = float(1.0 / std::sqrt(double(hd)));
  std::vector<float> p(t * t), ds(t * t);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      const int64_t off = b * t * c + h * hd;
      const float *qh = q.data() + off, *kh = k.data() + off,
                  *vh = v.data() + off, *doh = dout.data() + off;
      attentionProbs(qh, kh, t, c, hd, scale, p.data());
      sgemm(true, false, t, hd, t, 1.0f, p.data(), t, doh, c, 0.0f,
            dv.data() + off, c);
      sgemm(false, true, t, t, hd, 1.0f, doh, c, vh, c, 0.0f, ds.data(), t);
      for (int64_t i = 0; i < t; ++i) {
        const float *pr = p.data() + i * t;
        float *dr = ds.data() + i * t;
        softmaxGradRow(dr, pr, dr, i + 1);
        for (int64_t j = i + 1; j < t; ++j)
          dr[j] = 0.0f;
      }
      sgemm(false, false, t, hd, t, scale, ds.data(), t, kh, c, 0.0f,
            dq.data() + off, c);
      sgemm(true, false, t, hd, t, scale, ds.data(), t, qh, c, 0.0f,
            dk.data() + off, c);
    }
  dq.store();
  dk.store();
  dv.store();
  return absl::OkStatus();
}

} // namespace md::cpu
