//===- ShapeRules.h - the shape rules of md's ops, once -*- C++ -*-===//
//
// What a shape must be for an op, and the shape it gives, written once for
// the three places that check them: the dialect's verifiers (on tensor
// types, whose dims may be dynamic), the plan loader's type rules (on a
// plan's buffers) and the kernels' checks (on the tensors a backend is
// handed). Each function computes the result or names what is wrong as a
// small struct; every caller words the error for what it checks (an op's
// operand, an instruction's buffer, a kernel's argument), so the rule is
// one and the messages say where they come from. Like Mesh.h, this depends
// on nothing of MLIR, of the plan or of a backend.
//
// A dim is a size >= 0, or kDynamic (the compiler's unknown size), which
// matches any size.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_SHAPERULES_H
#define MD_RUNTIME_CORE_SHAPERULES_H

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "absl/types/span.h"

namespace md::rules {

using Dims = absl::Span<const int64_t>;
using Shape = std::vector<int64_t>;

/// An unknown dim; the value of mlir::ShapedType::kDynamic.
inline constexpr int64_t kDynamic = std::numeric_limits<int64_t>::min();

/// Two dims that may be the same size: equal, or one unknown.
inline bool DimsCompatible(int64_t a, int64_t b) {
  return a == b || a == kDynamic || b == kDynamic;
}
/// Shapes of one rank whose dims are pairwise compatible.
bool ShapesCompatible(Dims a, Dims b);

/// numpy's broadcasting of two shapes, aligned at the last dim (a missing
/// leading dim counts as 1). When they do not broadcast, `dim` is the
/// result's dim where they clash and `a`, `b` the clashing sizes.
struct Broadcast {
  bool ok = true;
  Shape shape;
  size_t dim = 0;
  int64_t a = 0, b = 0;
};
Broadcast BroadcastShapes(Dims a, Dims b);
/// Whether `from` broadcasts to `to` without changing `to` (what sum_to
/// reduces back).
bool BroadcastsTo(Dims from, Dims to);

/// An axis in [-rank, rank), counted from the end when negative, as an
/// index in [0, rank); nullopt when out of range.
std::optional<int64_t> NormalizeAxis(int64_t axis, int64_t rank);

/// A sum or mean of a tensor of `shape` over `dims` (negative ones counted
/// from the end): the dims reduced and the result's shape (their sizes
/// dropped, or 1 with keepdim).
struct Reduction {
  enum class Problem { none, empty, outOfRange, twice };
  Problem problem = Problem::none;
  int64_t dim = 0;  // the dim at fault, as given
  size_t index = 0; // its position in `dims`
  std::vector<bool> reduced;
  Shape shape;
};
Reduction ReduceDims(Dims shape, Dims dims, bool keepdim);

/// A matmul of a [..., M, K] (or [..., K, M] with transposeA) by b [K, N]
/// ([N, K] with transposeB), b either 2-D and shared or with a's batch
/// dims: `batch` independent [m, k] x [k, n] products and the result
/// [..., M, N]. Sizes are a's and b's own (kDynamic where unknown).
struct Matmul {
  enum class Problem {
    none,
    aRank,       // a has fewer than 2 dims
    bRank,       // b has neither 2 dims nor a's rank
    batch,       // b's batch dims are not a's
    contraction, // ka != kb
  };
  Problem problem = Problem::none;
  int64_t ka = 0, kb = 0; // the contracted sizes of a and b
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool batchedB = false;
  Shape shape;
};
Matmul MatmulShapes(Dims a, Dims b, bool transposeA, bool transposeB);

/// Causal self-attention on q [B, T, C] with `heads` heads of C / heads
/// channels each (k, v and the result are q's shape).
struct Attention {
  enum class Problem { none, rank, heads, indivisible };
  Problem problem = Problem::none;
  int64_t batch = 0, seq = 0, channels = 0, heads = 0, headDim = 0;
};
Attention AttentionShape(Dims q, int64_t heads);

/// The [D] of a per-feature parameter of x [..., D] (layer_norm's,
/// rms_norm's and batch_norm's gamma and beta).
inline Shape LastDimVector(Dims x) { return {x.back()}; }

/// cross_entropy's targets for logits [..., C]: logits' shape without C.
inline Shape CrossEntropyTargets(Dims logits) {
  return Shape(logits.begin(), logits.end() - 1);
}

/// A slice of x along `axis` (in [0, rank)): `count` elements from
/// `start`, `step` apart, so x's shape with `count` at `axis`. Refused: an
/// axis out of range, a step below 1, a negative start, a count below 1, or
/// (where x's dim is known) a last element start + (count - 1) * step past
/// it.
struct Slice {
  enum class Problem { none, axis, step, start, count, bounds };
  Problem problem = Problem::none;
  int64_t last = 0; // the last element's index, for `bounds`
  Shape shape;
};
Slice SliceShape(Dims x, int64_t axis, int64_t start, int64_t step,
                 int64_t count);

/// The inputs one after another along `axis` (in [0, rank)): each has the
/// first input's rank and, but at `axis`, its dims; the result's `axis` is
/// their sum (unknown when one is; `overflow` past int64). `index` is the
/// input at fault and `dim` its dim that differs.
struct Concat {
  enum class Problem { none, empty, axis, rank, dims, overflow };
  Problem problem = Problem::none;
  size_t index = 0, dim = 0;
  Shape shape;
};
Concat ConcatShapes(absl::Span<const Dims> inputs, int64_t axis);

/// The element count of a shape of known dims (1 for a scalar); nullopt
/// when it overflows int64 or a dim is negative or unknown.
std::optional<int64_t> ElementCount(Dims shape);

} // namespace md::rules

#endif // MD_RUNTIME_CORE_SHAPERULES_H
