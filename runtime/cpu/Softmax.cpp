//===- Softmax.cpp - softmax, cross-entropy, embedding and their gradients
//-===//
//
// Softmax and log-sum-exp subtract the row maximum before exponentiating
// (the f32 exp, VecExp, of a value <= 0 never overflows) and sum the
// exponentials in f64. Index operands (embedding ids, targets) are checked
// against their range before anything is written; a bad id is an error naming
// its position, never an out-of-bounds read.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "runtime/core/OpChecks.h"
#include "runtime/core/Status.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Rows.h"
#include "runtime/cpu/Storage.h"

namespace md::cpu {

using namespace md::runtime;

namespace {

int64_t indexAt(const TensorRef &t, int64_t i) {
  return t.dtype == DType::i32 ? int64_t(t.as<const int32_t>()[i])
                               : t.as<const int64_t>()[i];
}

/// Every id in [0, rows).
absl::Status checkIds(const char *op, const char *what, const TensorRef &ids,
                      int64_t rows) {
  int64_t n = ids.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t id = indexAt(ids, i);
    if (id < 0 || id >= rows)
      return indexOutOfRange(op, what, i, id, rows, std::nullopt);
  }
  return absl::OkStatus();
}

/// Every target in [0, classes) or equal to ignoreIndex; returns how many
/// are not ignored.
absl::StatusOr<int64_t> checkTargets(const char *op, const TensorRef &targets,
                                     int64_t classes,
                                     std::optional<int64_t> ignoreIndex) {
  int64_t n = targets.numel(), counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t t = indexAt(targets, i);
    if (ignoreIndex && t == *ignoreIndex)
      continue;
    if (t < 0 || t >= classes)
      return indexOutOfRange(op, "targets", i, t, classes, ignoreIndex);
    ++counted;
  }
  return counted;
}

/// max and sum(exp(x - max)) of one row of logits; with `e`, the
/// exponentials too.
struct SumExp {
  float max;
  double sum;
};
SumExp sumExp(const float *x, int64_t n, float *e = nullptr) {
  const float m = rowMax(x, n);
  return {m, expRow(x, e, n, m)};
}

} // namespace

// Along the axis, for each [outer, inner] position:
//   y = exp(x - max) / sum(exp(x - max)).
absl::Status CpuBackend::softmax(const SoftmaxArgs &args) {
  MD_ASSIGN_OR_RETURN(AxisDims d, checkSoftmax(args));
  F32In x(args.x);
  F32Out out(args.out);
  for (int64_t o = 0; o < d.outer; ++o)
    for (int64_t i = 0; i < d.inner; ++i) {
      const int64_t base = o * d.n * d.inner + i;
      softmaxRow(x.data() + base, out.data() + base, d.n, d.inner);
    }
  out.store();
  return absl::OkStatus();
}

// dx = y * (dy - sum(dy * y)) along the axis.
absl::Status CpuBackend::softmaxGrad(const SoftmaxGradArgs &args) {
  MD_ASSIGN_OR_RETURN(AxisDims d, checkSoftmaxGrad(args));
  F32In dy(args.dy), y(args.y);
  F32Out dx(args.dx);
  for (int64_t o = 0; o < d.outer; ++o)
    for (int64_t i = 0; i < d.inner; ++i) {
      const int64_t base = o * d.n * d.inner + i;
      softmaxGradRow(dy.data() + base, y.data() + base, dx.data() + base, d.n,
                     d.inner);
    }
  dx.store();
  return absl::OkStatus();
}

// loss = mean over non-ignored positions of logsumexp(logits) - logits[t];
// NaN when every position is ignored (0 / 0, as in PyTorch).
absl::Status CpuBackend::crossEntropy(const CrossEntropyArgs &args) {
  MD_ASSIGN_OR_RETURN(CrossEntropyDims d, checkCrossEntropy(args));
  MD_ASSIGN_OR_RETURN(
      int64_t counted,
      checkTargets("cross_entropy", args.targets, d.classes, args.ignoreIndex));
  // A row at a time: bf16 logits are widened one row into `rowBuf`
  // instead of whole into an f32 copy (Storage.h).
  std::vector<float> rowBuf(d.classes);
  double total = 0;
  for (int64_t p = 0; p < d.positions; ++p) {
    int64_t t = indexAt(args.targets, p);
    if (args.ignoreIndex && t == *args.ignoreIndex)
      continue;
    const float *row =
        chunkIn(args.logits, p * d.classes, d.classes, rowBuf.data());
    SumExp se = sumExp(row, d.classes);
    total += (double(se.max) + std::log(se.sum)) - double(row[t]);
  }
  *args.out.as<float>() = float(total / double(counted));
  return absl::OkStatus();
}

// dlogits = dloss * (softmax(logits) - onehot(t)) / n, 0 on ignored rows.
absl::Status CpuBackend::crossEntropyGrad(const CrossEntropyGradArgs &args) {
  MD_ASSIGN_OR_RETURN(CrossEntropyDims d, checkCrossEntropyGrad(args));
  MD_ASSIGN_OR_RETURN(int64_t counted,
                      checkTargets("cross_entropy_grad", args.targets,
                                   d.classes, args.ignoreIndex));
  const double coeff =
      counted > 0 ? double(*args.dloss.as<const float>()) / double(counted) : 0;
  // A row at a time, as crossEntropy.
  std::vector<float> rowBuf(d.classes), dBuf(d.classes);
  for (int64_t p = 0; p < d.positions; ++p) {
    const int64_t at = p * d.classes;
    const float *row = chunkIn(args.logits, at, d.classes, rowBuf.data());
    float *drow = chunkOut(args.dlogits, at, dBuf.data());
    const int64_t t = indexAt(args.targets, p);
    if (args.ignoreIndex && t == *args.ignoreIndex) {
      std::fill(drow, drow + d.classes, 0.0f);
      chunkStore(args.dlogits, at, d.classes, drow);
      continue;
    }
    // The exponentials go into drow, then become the gradient in place.
    SumExp se = sumExp(row, d.classes, drow);
    const double inv = 1.0 / se.sum;
    for (int64_t j = 0; j < d.classes; ++j)
      drow[j] = float(coeff * (double(drow[j]) * inv - (j == t ? 1.0 : 0.0)));
    chunkStore(args.dlogits, at, d.classes, drow);
  }
  return absl::OkStatus();
}

// A row copy per id; no arithmetic, so every element type copies exactly.
absl::Status CpuBackend::embedding(const EmbeddingArgs &args) {
  MD_ASSIGN_OR_RETURN(EmbeddingDims d, checkEmbedding(args));
  MD_RETURN_IF_ERROR(checkIds("embedding", "ids", args.ids, d.rows));
  const int64_t rowBytes = d.d * dtypeSize(args.table.dtype);
  const char *table = args.table.as<const char>();
  char *out = args.out.as<char>();
  for (int64_t p = 0; p < d.positions; ++p)
    std::memcpy(out + p * rowBytes, table + indexAt(args.ids, p) * rowBytes,
                rowBytes);
  return absl::OkStatus();
}

// out[v, :] = sum of dy[p, :] over the positions p with ids[p] = v, added
// in position order in f32.
absl::Status CpuBackend::embeddingGrad(const EmbeddingGradArgs &args) {
  MD_ASSIGN_OR_RETURN(EmbeddingDims d, checkEmbeddingGrad(args));
  MD_RETURN_IF_ERROR(checkIds("embedding_grad", "ids", args.ids, d.rows));
  F32In dy(args.dy);
  F32Out out(args.out);
  std::fill(out.data(), out.data() + d.rows * d.d, 0.0f);
  for (int64_t p = 0; p < d.positions; ++p) {
    float *row = out.data() + indexAt(args.ids, p) * d.d;
    const float *g = dy.data() + p * d.d;
    for (int64_t j = 0; j < d.d; ++j)
      row[j] += g[j];
  }
  out.store();
  return absl::OkStatus();
}

} // namespace md::cpu
