//===- OpChecks.h - shape and type rules of every kernel -*- C++ -*-===//
//
// One check per op family, shared by every backend so that the CPU and the
// CUDA backend accept and refuse exactly the same arguments with the same
// messages. Each check validates every operand and result against the op's
// rules in docs/dialect.md and returns the sizes the kernel loops over.
// Messages name the op and the operand:
//   "matmul: contracting dims differ: a f32[4, 3] has K = 3, b f32[5, 2] has K
//   = 5"
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_OPCHECKS_H
#define MD_RUNTIME_CORE_OPCHECKS_H

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/core/Backend.h"

namespace md::runtime {

/// numpy's trailing broadcast of two shapes; InvalidArgument when some
/// pair of dims differs and neither is 1.
absl::StatusOr<Shape> broadcastShapes(absl::Span<const int64_t> a,
                                      absl::Span<const int64_t> b,
                                      const char *op);

/// A matmul as `batch` independent [m, k] x [k, n] products; b is shared
/// by every batch entry unless batchedB.
struct MatmulDims {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool batchedB = false;
};
absl::StatusOr<MatmulDims> checkMatmul(const MatmulArgs &args);
absl::StatusOr<MatmulDims> checkMatmulGrad(const MatmulGradArgs &args);
absl::StatusOr<MatmulDims> checkMatmulGelu(const MatmulGeluArgs &args);

absl::Status checkBinary(const BinaryArgs &args);
absl::Status checkScale(const ScaleArgs &args);
/// An elementwise op of one tensor (md.gelu, md.relu, ...): x floating,
/// out of x's type and shape; `op` names it in the message.
absl::Status checkUnary(const char *op, const TensorRef &x,
                        const TensorRef &out);
/// Its gradient: dy, x and dx of one type and shape, x floating.
absl::Status checkUnaryGrad(const char *op, const TensorRef &dy,
                            const TensorRef &x, const TensorRef &dx);

/// A normalisation over the last dim (layer/rms norm) or over every dim but
/// the last (batch norm): `rows` vectors of `d` elements.
struct RowDims {
  int64_t rows = 0, d = 0;
};
absl::StatusOr<RowDims> checkLayerNorm(const LayerNormArgs &args);
absl::StatusOr<RowDims> checkLayerNormGrad(const LayerNormGradArgs &args);
absl::StatusOr<RowDims> checkRmsNorm(const RmsNormArgs &args);
absl::StatusOr<RowDims> checkRmsNormGrad(const RmsNormGradArgs &args);
absl::StatusOr<RowDims> checkBatchNorm(const BatchNormArgs &args);
absl::StatusOr<RowDims> checkBatchNormGrad(const BatchNormGradArgs &args);

/// A tensor seen as [outer, n, inner] around one axis.
struct AxisDims {
  int64_t outer = 1, n = 0, inner = 1;
};
absl::StatusOr<AxisDims> checkSoftmax(const SoftmaxArgs &args);
absl::StatusOr<AxisDims> checkSoftmaxGrad(const SoftmaxGradArgs &args);

struct AttentionDims {
  int64_t batch = 0, seq = 0, channels = 0, heads = 0, headDim = 0;
  /// Keys each query row sees, itself included: the op's window, at most
  /// seq (seq without one, which is plain causal attention).
  int64_t window = 0;
  /// The first key row i sees.
  int64_t firstKey(int64_t i) const { return i >= window ? i - window + 1 : 0; }
};
absl::StatusOr<AttentionDims>
checkCausalAttention(const CausalAttentionArgs &args);
absl::StatusOr<AttentionDims>
checkCausalAttentionGrad(const CausalAttentionGradArgs &args);

/// `positions` ids looking up rows of a [rows, d] table.
struct EmbeddingDims {
  int64_t positions = 0, rows = 0, d = 0;
};
absl::StatusOr<EmbeddingDims> checkEmbedding(const EmbeddingArgs &args);
absl::StatusOr<EmbeddingDims> checkEmbeddingGrad(const EmbeddingGradArgs &args);

/// The error for an index operand whose element `position` holds `value`
/// outside [0, rows) (and, with ignoreIndex, not equal to it). The checks
/// of the index values themselves need the data, so each backend runs them
/// where the data lives; this keeps their messages identical:
///   "embedding: ids[1] = 4 is out of range [0, 4)"
absl::Status indexOutOfRange(const char *op, const char *what, int64_t position,
                             int64_t value, int64_t rows,
                             std::optional<int64_t> ignoreIndex);

/// `positions` rows of `classes` logits.
struct CrossEntropyDims {
  int64_t positions = 0, classes = 0;
};
absl::StatusOr<CrossEntropyDims>
checkCrossEntropy(const CrossEntropyArgs &args);
absl::StatusOr<CrossEntropyDims>
checkCrossEntropyGrad(const CrossEntropyGradArgs &args);

absl::Status checkReshape(const ReshapeArgs &args);
absl::Status checkTranspose(const TransposeArgs &args);
absl::Status checkSlice(const SliceArgs &args);
absl::Status checkSliceGrad(const SliceGradArgs &args);
absl::Status checkConcat(const ConcatArgs &args);
absl::Status checkExpand(const ExpandArgs &args);
absl::Status checkArange(const ArangeArgs &args);

/// For a reduction: which dims of the full shape are reduced.
using ReducedDims = std::vector<bool>;
absl::StatusOr<ReducedDims> checkReduce(const ReduceArgs &args);
absl::StatusOr<ReducedDims> checkReduceGrad(const ReduceGradArgs &args);
absl::Status checkSumTo(const SumToArgs &args);
absl::Status checkAccumulate(const AccumulateArgs &args);

absl::Status checkCast(const CastArgs &args);
absl::Status checkFlatten(const FlattenArgs &args);
absl::Status checkView(const ViewArgs &args);

absl::Status checkAdamW(const AdamWArgs &args);
absl::Status checkSgd(const SgdArgs &args);
absl::Status checkGlobalNorm(const GlobalNormArgs &args);
absl::Status checkClip(const ClipArgs &args);

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_OPCHECKS_H
