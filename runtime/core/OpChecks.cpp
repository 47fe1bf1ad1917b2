//===- OpChecks.cpp - shape and type rules of every kernel ----------------===//
//
// The rules are docs/dialect.md's (the dialect verifiers check the same on
// the IR); here they guard the kernels against a plan or a caller that
// disagrees with the buffers it passes.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/OpChecks.h"

#include "runtime/core/ShapeRules.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Status.h"

namespace md::runtime {
namespace {

template <typename... Args>
absl::Status invalid(const char *op, const absl::FormatSpec<Args...> &format,
                     const Args &...args) {
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": ", absl::StrFormat(format, args...)));
}

absl::Status expectFloat(const char *op, const char *what, const TensorRef &t) {
  MD_RETURN_IF_ERROR(checkTensor(t, op, what));
  if (!isFloat(t.dtype))
    return invalid(op, "%s must be bf16, f16 or f32, got %s", what, t.str());
  return absl::OkStatus();
}

absl::Status expectIndex(const char *op, const char *what, const TensorRef &t) {
  MD_RETURN_IF_ERROR(checkTensor(t, op, what));
  if (!isIndex(t.dtype))
    return invalid(op, "%s must be i32 or i64, got %s", what, t.str());
  return absl::OkStatus();
}

/// `t` must have exactly this element type and shape.
absl::Status expectType(const char *op, const char *what, const TensorRef &t,
                        DType dtype, absl::Span<const int64_t> shape) {
  MD_RETURN_IF_ERROR(checkTensor(t, op, what));
  if (t.dtype != dtype || absl::Span<const int64_t>(t.shape) != shape)
    return invalid(op, "%s must be %s%s, got %s", what, dtypeName(dtype),
                   shapeString(shape), t.str());
  return absl::OkStatus();
}

/// `t` must have the element type and shape of `ref`.
absl::Status expectLike(const char *op, const char *what, const TensorRef &t,
                        const TensorRef &ref, const char *refWhat) {
  MD_RETURN_IF_ERROR(checkTensor(t, op, what));
  if (t.dtype != ref.dtype || t.shape != ref.shape)
    return invalid(op, "%s must be %s like %s, got %s", what, ref.str(),
                   refWhat, t.str());
  return absl::OkStatus();
}

absl::Status expectMinRank(const char *op, const char *what, const TensorRef &t,
                           int64_t rank) {
  if (t.rank() < rank)
    return invalid(op, "%s must have rank >= %d, got %s", what, rank, t.str());
  return absl::OkStatus();
}

absl::Status expectEps(const char *op, double eps) {
  if (!(eps > 0) || !std::isfinite(eps))
    return invalid(op, "eps must be positive and finite, got %g", eps);
  return absl::OkStatus();
}

int64_t product(absl::Span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

/// A [D] vector with the element type of x's, D = x's last dim.
absl::Status expectLastDimVector(const char *op, const char *what,
                                 const TensorRef &t, const TensorRef &x) {
  return expectType(op, what, t, x.dtype, {x.shape.back()});
}

/// Normalises `axis` (negative counts from the end) against `t`.
absl::StatusOr<int64_t> normalizeAxis(const char *op, int64_t axis,
                                      const TensorRef &t) {
  int64_t r = t.rank();
  if (axis < -r || axis >= r)
    return invalid(op, "axis %d is out of range for %s", axis, t.str());
  return axis < 0 ? axis + r : axis;
}

AxisDims axisDims(const TensorRef &t, int64_t axis) {
  AxisDims d;
  for (int64_t i = 0; i < axis; ++i)
    d.outer *= t.shape[i];
  d.n = t.shape[axis];
  for (int64_t i = axis + 1; i < t.rank(); ++i)
    d.inner *= t.shape[i];
  return d;
}

/// a and b of md.matmul or md.matmul_grad (MatmulArgs, MatmulGradArgs).
template <typename Args>
absl::StatusOr<MatmulDims> matmulOperands(const char *op, const Args &args) {
  const TensorRef &a = args.a, &b = args.b;
  const bool transposeA = args.transposeA, transposeB = args.transposeB;
  MD_RETURN_IF_ERROR(expectFloat(op, "a", a));
  MD_RETURN_IF_ERROR(expectMinRank(op, "a", a, 2));
  MD_RETURN_IF_ERROR(checkTensor(b, op, "b"));
  if (b.dtype != a.dtype)
    return invalid(op, "b must have the element type of a %s, got %s", a.str(),
                   b.str());
  const rules::Matmul r =
      rules::MatmulShapes(a.shape, b.shape, transposeA, transposeB);
  switch (r.problem) {
  case rules::Matmul::Problem::none:
    break;
  case rules::Matmul::Problem::aRank: // expectMinRank said so
  case rules::Matmul::Problem::bRank:
    return invalid(op, "b must have rank 2 or the rank of a %s, got %s",
                   a.str(), b.str());
  case rules::Matmul::Problem::batch:
    return invalid(op, "batch dims differ: a %s, b %s", a.str(), b.str());
  case rules::Matmul::Problem::contraction:
    return invalid(op,
                   "contracting dims differ: a %s has K = %d, b %s has K = %d",
                   a.str(), r.ka, b.str(), r.kb);
  }
  MatmulDims d;
  d.batchedB = r.batchedB;
  d.batch = r.batch;
  d.m = r.m;
  d.n = r.n;
  d.k = r.k;
  return d;
}

Shape matmulShape(const TensorRef &a, const MatmulDims &d) {
  Shape s(a.shape.begin(), a.shape.end() - 2);
  s.push_back(d.m);
  s.push_back(d.n);
  return s;
}

/// md.matmul's and md.matmul_gelu's operands, the optional bias [N] and
/// `out`, the product.
template <typename Args>
absl::StatusOr<MatmulDims> matmulProduct(const char *op, const Args &args) {
  MD_ASSIGN_OR_RETURN(MatmulDims d, matmulOperands(op, args));
  if (args.bias)
    MD_RETURN_IF_ERROR(expectType(op, "bias", *args.bias, args.a.dtype, {d.n}));
  MD_RETURN_IF_ERROR(
      expectType(op, "out", args.out, args.a.dtype, matmulShape(args.a, d)));
  return d;
}

/// x float; out (or dx) with x's type.
RowDims lastDimRows(const TensorRef &x) {
  RowDims d;
  d.d = x.shape.back();
  d.rows = product(absl::Span<const int64_t>(x.shape).subspan(0, x.rank() - 1));
  return d;
}

absl::StatusOr<AttentionDims> attentionOperands(const char *op,
                                                const TensorRef &q,
                                                int64_t numHeads,
                                                std::optional<int64_t> window) {
  MD_RETURN_IF_ERROR(expectFloat(op, "q", q));
  if (window && *window <= 0)
    return invalid(op, "window must be positive, got %d", *window);
  const rules::Attention r = rules::AttentionShape(q.shape, numHeads);
  switch (r.problem) {
  case rules::Attention::Problem::none:
    break;
  case rules::Attention::Problem::rank:
    return invalid(op, "q must be [B, T, C], got %s", q.str());
  case rules::Attention::Problem::heads:
    return invalid(op, "num_heads must be positive, got %d", numHeads);
  case rules::Attention::Problem::indivisible:
    return invalid(op, "C = %d of q %s is not divisible by num_heads = %d",
                   r.channels, q.str(), numHeads);
  }
  AttentionDims d;
  d.batch = r.batch;
  d.seq = r.seq;
  d.channels = r.channels;
  d.heads = r.heads;
  d.headDim = r.headDim;
  d.window = window ? std::min(*window, d.seq) : d.seq;
  return d;
}

/// The reduced dims of a tensor of rank `rank`; dims distinct, in range,
/// not empty.
absl::StatusOr<ReducedDims> reducedDims(const char *op,
                                        const std::vector<int64_t> &dims,
                                        int64_t rank, const std::string &of) {
  // The rule needs only the rank here; the shape comes with reducedShape.
  const rules::Reduction r =
      rules::ReduceDims(Shape(static_cast<size_t>(rank), 1), dims, false);
  switch (r.problem) {
  case rules::Reduction::Problem::none:
    break;
  case rules::Reduction::Problem::empty:
    return invalid(op, "dims must not be empty");
  case rules::Reduction::Problem::outOfRange:
    return invalid(op, "dim %d is out of range for %s", r.dim, of);
  case rules::Reduction::Problem::twice:
    return invalid(op, "dim %d appears twice in dims", r.dim);
  }
  return ReducedDims(r.reduced.begin(), r.reduced.end());
}

Shape reducedShape(const Shape &full, const ReducedDims &reduced,
                   bool keepdim) {
  std::vector<int64_t> dims;
  for (size_t i = 0; i < full.size(); ++i)
    if (reduced[i])
      dims.push_back(static_cast<int64_t>(i));
  rules::Shape shape = rules::ReduceDims(full, dims, keepdim).shape;
  return Shape(shape.begin(), shape.end());
}

/// layer_norm and rms_norm: x [..., D] float; gamma (and layer_norm's beta)
/// [D] with x's type; out like x.
absl::StatusOr<RowDims> lastDimNorm(const char *op, const TensorRef &x,
                                    const TensorRef &gamma,
                                    const std::optional<TensorRef> &beta,
                                    const TensorRef &out, double eps) {
  MD_RETURN_IF_ERROR(expectFloat(op, "x", x));
  MD_RETURN_IF_ERROR(expectMinRank(op, "x", x, 1));
  MD_RETURN_IF_ERROR(expectLastDimVector(op, "gamma", gamma, x));
  if (beta)
    MD_RETURN_IF_ERROR(expectLastDimVector(op, "beta", *beta, x));
  MD_RETURN_IF_ERROR(expectLike(op, "out", out, x, "x"));
  MD_RETURN_IF_ERROR(expectEps(op, eps));
  return lastDimRows(x);
}

/// Their gradients: dy and dx like x; dgamma (and dbeta) [D] with x's type.
absl::StatusOr<RowDims>
lastDimNormGrad(const char *op, const TensorRef &dy, const TensorRef &x,
                const TensorRef &gamma, const TensorRef &dx,
                const TensorRef &dgamma, const std::optional<TensorRef> &dbeta,
                double eps) {
  MD_RETURN_IF_ERROR(expectFloat(op, "x", x));
  MD_RETURN_IF_ERROR(expectMinRank(op, "x", x, 1));
  MD_RETURN_IF_ERROR(expectLike(op, "dy", dy, x, "x"));
  MD_RETURN_IF_ERROR(expectLastDimVector(op, "gamma", gamma, x));
  MD_RETURN_IF_ERROR(expectLike(op, "dx", dx, x, "x"));
  MD_RETURN_IF_ERROR(expectLastDimVector(op, "dgamma", dgamma, x));
  if (dbeta)
    MD_RETURN_IF_ERROR(expectLastDimVector(op, "dbeta", *dbeta, x));
  MD_RETURN_IF_ERROR(expectEps(op, eps));
  return lastDimRows(x);
}

/// cross_entropy and its gradient: float logits [..., C] and index targets
/// [...].
absl::StatusOr<CrossEntropyDims>
crossEntropyOperands(const char *op, const TensorRef &logits,
                     const TensorRef &targets) {
  MD_RETURN_IF_ERROR(expectFloat(op, "logits", logits));
  MD_RETURN_IF_ERROR(expectMinRank(op, "logits", logits, 1));
  MD_RETURN_IF_ERROR(expectIndex(op, "targets", targets));
  absl::Span<const int64_t> lead(logits.shape.data(), logits.shape.size() - 1);
  MD_RETURN_IF_ERROR(expectType(op, "targets", targets, targets.dtype, lead));
  CrossEntropyDims d;
  d.positions = product(lead);
  d.classes = logits.shape.back();
  return d;
}

/// An optimizer update's float param and grad of the same shape.
absl::Status paramAndGrad(const char *op, const TensorRef &param,
                          const TensorRef &grad) {
  MD_RETURN_IF_ERROR(expectFloat(op, "param", param));
  MD_RETURN_IF_ERROR(expectFloat(op, "grad", grad));
  if (grad.shape != param.shape)
    return invalid(op, "grad %s must have the shape of param %s", grad.str(),
                   param.str());
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<Shape> broadcastShapes(absl::Span<const int64_t> a,
                                      absl::Span<const int64_t> b,
                                      const char *op) {
  rules::Broadcast r = rules::BroadcastShapes(a, b);
  if (!r.ok)
    return invalid(op, "shapes %s and %s do not broadcast (dim %d: %d vs %d)",
                   shapeString(a), shapeString(b), r.dim, r.a, r.b);
  return Shape(r.shape.begin(), r.shape.end());
}

absl::StatusOr<MatmulDims> checkMatmul(const MatmulArgs &args) {
  const char *op = "matmul";
  return matmulProduct(op, args);
}

absl::StatusOr<MatmulDims> checkMatmulGelu(const MatmulGeluArgs &args) {
  const char *op = "matmul_gelu";
  MD_ASSIGN_OR_RETURN(MatmulDims d, matmulProduct(op, args));
  MD_RETURN_IF_ERROR(
      expectType(op, "pre", args.pre, args.a.dtype, matmulShape(args.a, d)));
  return d;
}

absl::StatusOr<MatmulDims> checkMatmulGrad(const MatmulGradArgs &args) {
  const char *op = "matmul_grad";
  MD_ASSIGN_OR_RETURN(MatmulDims d, matmulOperands(op, args));
  MD_RETURN_IF_ERROR(
      expectType(op, "dy", args.dy, args.a.dtype, matmulShape(args.a, d)));
  MD_RETURN_IF_ERROR(expectLike(op, "da", args.da, args.a, "a"));
  MD_RETURN_IF_ERROR(expectLike(op, "db", args.db, args.b, "b"));
  if (args.dbias)
    MD_RETURN_IF_ERROR(
        expectType(op, "dbias", *args.dbias, args.a.dtype, {d.n}));
  return d;
}

absl::Status checkBinary(const BinaryArgs &args) {
  const char *op = args.op == BinaryOp::add   ? "add"
                   : args.op == BinaryOp::sub ? "sub"
                   : args.op == BinaryOp::mul ? "mul"
                   : args.op == BinaryOp::div ? "div"
                   : args.op == BinaryOp::maximum ? "maximum"
                                                  : "minimum";
  MD_RETURN_IF_ERROR(expectFloat(op, "lhs", args.lhs));
  MD_RETURN_IF_ERROR(checkTensor(args.rhs, op, "rhs"));
  if (args.rhs.dtype != args.lhs.dtype)
    return invalid(op, "rhs must have the element type of lhs %s, got %s",
                   args.lhs.str(), args.rhs.str());
  MD_ASSIGN_OR_RETURN(Shape shape,
                      broadcastShapes(args.lhs.shape, args.rhs.shape, op));
  return expectType(op, "out", args.out, args.lhs.dtype, shape);
}

absl::Status checkUnary(const char *op, const TensorRef &x,
                        const TensorRef &out) {
  MD_RETURN_IF_ERROR(expectFloat(op, "x", x));
  return expectLike(op, "out", out, x, "x");
}
absl::Status checkUnaryGrad(const char *op, const TensorRef &dy,
                            const TensorRef &x, const TensorRef &dx) {
  MD_RETURN_IF_ERROR(expectFloat(op, "x", x));
  MD_RETURN_IF_ERROR(expectLike(op, "dy", dy, x, "x"));
  return expectLike(op, "dx", dx, x, "x");
}

absl::Status checkScale(const ScaleArgs &args) {
  if (!std::isfinite(args.factor))
    return invalid("scale", "factor must be finite, got %g", args.factor);
  return checkUnary("scale", args.x, args.out);
}

absl::StatusOr<RowDims> checkLayerNorm(const LayerNormArgs &args) {
  return lastDimNorm("layer_norm", args.x, args.gamma, args.beta, args.out,
                     args.eps);
}

absl::StatusOr<RowDims> checkLayerNormGrad(const LayerNormGradArgs &args) {
  return lastDimNormGrad("layer_norm_grad", args.dy, args.x, args.gamma,
                         args.dx, args.dgamma, args.dbeta, args.eps);
}

absl::StatusOr<RowDims> checkRmsNorm(const RmsNormArgs &args) {
  return lastDimNorm("rms_norm", args.x, args.gamma, std::nullopt, args.out,
                     args.eps);
}

absl::StatusOr<RowDims> checkRmsNormGrad(const RmsNormGradArgs &args) {
  return lastDimNormGrad("rms_norm_grad", args.dy, args.x, args.gamma, args.dx,
                         args.dgamma, std::nullopt, args.eps);
}

absl::StatusOr<RowDims> checkBatchNorm(const BatchNormArgs &args) {
  const char *op = "batch_norm";
  MD_RETURN_IF_ERROR(expectFloat(op, "x", args.x));
  MD_RETURN_IF_ERROR(expectMinRank(op, "x", args.x, 2));
  MD_RETURN_IF_ERROR(expectLastDimVector(op, "gamma", args.gamma, args.x));
  MD_RETURN_IF_ERROR(expectLastDimVector(op, "beta", args.beta, args.x));
  MD_RETURN_IF_ERROR(expectLike(op, "out", args.out, args.x, "x"));
  int64_t c = args.x.shape.back();
  MD_RETURN_IF_ERROR(expectType(op, "mean", args.mean, DType::f32, {c}));
  MD_RETURN_IF_ERROR(expectType(op, "invstd", args.invstd, DType::f32, {c}));
  MD_RETURN_IF_ERROR(expectEps(op, args.eps));
  return lastDimRows(args.x);
}

absl::StatusOr<RowDims> checkBatchNormGrad(const BatchNormGradArgs &args) {
  const char *op = "batch_norm_grad";
  MD_RETURN_IF_ERROR(expectFloat(op, "x", args.x));
  MD_RETURN_IF_ERROR(expectMinRank(op, "x", args.x, 2));
  MD_RETURN_IF_ERROR(expectLike(op, "dy", args.dy, args.x, "x"));
  MD_RETURN_IF_ERROR(expectLastDimVector(op, "gamma", args.gamma, args.x));
  int64_t c = args.x.shape.back();
  MD_RETURN_IF_ERROR(expectType(op, "mean", args.mean, DType::f32, {c}));
  MD_RETURN_IF_ERROR(expectType(op, "invstd", args.invstd, DType::f32, {c}));
  MD_RETURN_IF_ERROR(expectLike(op, "dx", args.dx, args.x, "x"));
  MD_RETURN_IF_ERROR(expectLastDimVector(op, "dgamma", args.dgamma, args.x));
  MD_RETURN_IF_ERROR(expectLastDimVector(op, "dbeta", args.dbeta, args.x));
  return lastDimRows(args.x);
}

absl::StatusOr<AxisDims> checkSoftmax(const SoftmaxArgs &args) {
  const char *op = "softmax";
  MD_RETURN_IF_ERROR(expectFloat(op, "x", args.x));
  MD_RETURN_IF_ERROR(expectMinRank(op, "x", args.x, 1));
  MD_RETURN_IF_ERROR(expectLike(op, "out", args.out, args.x, "x"));
  MD_ASSIGN_OR_RETURN(int64_t axis, normalizeAxis(op, args.axis, args.x));
  return axisDims(args.x, axis);
}

absl::StatusOr<AxisDims> checkSoftmaxGrad(const SoftmaxGradArgs &args) {
  const char *op = "softmax_grad";
  MD_RETURN_IF_ERROR(expectFloat(op, "y", args.y));
  MD_RETURN_IF_ERROR(expectMinRank(op, "y", args.y, 1));
  MD_RETURN_IF_ERROR(expectLike(op, "dy", args.dy, args.y, "y"));
  MD_RETURN_IF_ERROR(expectLike(op, "dx", args.dx, args.y, "y"));
  MD_ASSIGN_OR_RETURN(int64_t axis, normalizeAxis(op, args.axis, args.y));
  return axisDims(args.y, axis);
}

absl::StatusOr<AttentionDims>
checkCausalAttention(const CausalAttentionArgs &args) {
  const char *op = "causal_attention";
  MD_ASSIGN_OR_RETURN(
      AttentionDims d,
      attentionOperands(op, args.q, args.numHeads, args.window));
  MD_RETURN_IF_ERROR(expectLike(op, "k", args.k, args.q, "q"));
  MD_RETURN_IF_ERROR(expectLike(op, "v", args.v, args.q, "q"));
  MD_RETURN_IF_ERROR(expectLike(op, "out", args.out, args.q, "q"));
  return d;
}

absl::StatusOr<AttentionDims>
checkCausalAttentionGrad(const CausalAttentionGradArgs &args) {
  const char *op = "causal_attention_grad";
  MD_ASSIGN_OR_RETURN(
      AttentionDims d,
      attentionOperands(op, args.q, args.numHeads, args.window));
  MD_RETURN_IF_ERROR(expectLike(op, "dout", args.dout, args.q, "q"));
  MD_RETURN_IF_ERROR(expectLike(op, "k", args.k, args.q, "q"));
  MD_RETURN_IF_ERROR(expectLike(op, "v", args.v, args.q, "q"));
  MD_RETURN_IF_ERROR(expectLike(op, "dq", args.dq, args.q, "q"));
  MD_RETURN_IF_ERROR(expectLike(op, "dk", args.dk, args.q, "q"));
  MD_RETURN_IF_ERROR(expectLike(op, "dv", args.dv, args.q, "q"));
  return d;
}

absl::Status indexOutOfRange(const char *op, const char *what, int64_t position,
                             int64_t value, int64_t rows,
                             std::optional<int64_t> ignoreIndex) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: %s[%d] = %d is out of range [0, %d)%s", op, what, position, value,
      rows,
      ignoreIndex ? absl::StrFormat(" and is not ignore_index %d", *ignoreIndex)
                  : std::string()));
}

absl::StatusOr<EmbeddingDims> checkEmbedding(const EmbeddingArgs &args) {
  const char *op = "embedding";
  MD_RETURN_IF_ERROR(expectFloat(op, "table", args.table));
  if (args.table.rank() != 2)
    return invalid(op, "table must be [V, D], got %s", args.table.str());
  MD_RETURN_IF_ERROR(expectIndex(op, "ids", args.ids));
  Shape shape = args.ids.shape;
  shape.push_back(args.table.shape[1]);
  MD_RETURN_IF_ERROR(expectType(op, "out", args.out, args.table.dtype, shape));
  EmbeddingDims d;
  d.positions = args.ids.numel();
  d.rows = args.table.shape[0];
  d.d = args.table.shape[1];
  return d;
}

absl::StatusOr<EmbeddingDims>
checkEmbeddingGrad(const EmbeddingGradArgs &args) {
  const char *op = "embedding_grad";
  MD_RETURN_IF_ERROR(expectFloat(op, "dy", args.dy));
  MD_RETURN_IF_ERROR(expectIndex(op, "ids", args.ids));
  if (args.dy.rank() != args.ids.rank() + 1 ||
      !std::equal(args.ids.shape.begin(), args.ids.shape.end(),
                  args.dy.shape.begin()))
    return invalid(op, "dy %s must have the shape of ids %s plus a last dim D",
                   args.dy.str(), args.ids.str());
  MD_RETURN_IF_ERROR(checkTensor(args.out, op, "out"));
  int64_t d = args.dy.shape.back();
  if (args.out.rank() != 2 || args.out.dtype != args.dy.dtype ||
      args.out.shape[1] != d || args.out.shape[0] < 1)
    return invalid(op,
                   "out must be %s[num_embeddings, %d] with num_embeddings "
                   ">= 1, got %s",
                   dtypeName(args.dy.dtype), d, args.out.str());
  EmbeddingDims dims;
  dims.positions = args.ids.numel();
  dims.rows = args.out.shape[0];
  dims.d = d;
  return dims;
}

absl::StatusOr<CrossEntropyDims>
checkCrossEntropy(const CrossEntropyArgs &args) {
  const char *op = "cross_entropy";
  MD_ASSIGN_OR_RETURN(CrossEntropyDims d,
                      crossEntropyOperands(op, args.logits, args.targets));
  MD_RETURN_IF_ERROR(expectType(op, "out", args.out, DType::f32, {}));
  return d;
}

absl::StatusOr<CrossEntropyDims>
checkCrossEntropyGrad(const CrossEntropyGradArgs &args) {
  const char *op = "cross_entropy_grad";
  MD_RETURN_IF_ERROR(expectType(op, "dloss", args.dloss, DType::f32, {}));
  MD_ASSIGN_OR_RETURN(CrossEntropyDims d,
                      crossEntropyOperands(op, args.logits, args.targets));
  MD_RETURN_IF_ERROR(
      expectLike(op, "dlogits", args.dlogits, args.logits, "logits"));
  return d;
}

absl::Status checkReshape(const ReshapeArgs &args) {
  const char *op = "reshape";
  MD_RETURN_IF_ERROR(checkTensor(args.x, op, "x"));
  MD_RETURN_IF_ERROR(checkTensor(args.out, op, "out"));
  if (args.out.dtype != args.x.dtype || args.out.numel() != args.x.numel())
    return invalid(op,
                   "out %s must have the element type and element count "
                   "of x %s",
                   args.out.str(), args.x.str());
  return absl::OkStatus();
}

absl::Status checkTranspose(const TransposeArgs &args) {
  const char *op = "transpose";
  MD_RETURN_IF_ERROR(checkTensor(args.x, op, "x"));
  int64_t r = args.x.rank();
  if (static_cast<int64_t>(args.perm.size()) != r)
    return invalid(op, "perm has %d entries for x %s of rank %d",
                   args.perm.size(), args.x.str(), r);
  std::vector<bool> seen(r, false);
  Shape shape;
  for (int64_t p : args.perm) {
    if (p < 0 || p >= r || seen[p])
      return invalid(op, "perm %s is not a permutation of [0, %d)",
                     shapeString(args.perm), r);
    seen[p] = true;
    shape.push_back(args.x.shape[p]);
  }
  return expectType(op, "out", args.out, args.x.dtype, shape);
}

namespace {

/// x sliced along axis from start by step into `sliced` (out of md.slice,
/// dy of md.slice_grad), which has the element type of x.
absl::Status checkSliceOf(const char *op, const char *xName,
                          const TensorRef &x, const char *slicedName,
                          const TensorRef &sliced, int64_t axis, int64_t start,
                          int64_t step) {
  MD_RETURN_IF_ERROR(checkTensor(x, op, xName));
  MD_RETURN_IF_ERROR(checkTensor(sliced, op, slicedName));
  if (sliced.rank() != x.rank())
    return invalid(op, "%s %s must have the rank of %s %s", slicedName,
                   sliced.str(), xName, x.str());
  const int64_t count =
      axis >= 0 && axis < sliced.rank() ? sliced.shape[axis] : 0;
  rules::Slice r = rules::SliceShape(x.shape, axis, start, step, count);
  switch (r.problem) {
  case rules::Slice::Problem::none:
    break;
  case rules::Slice::Problem::axis:
    return invalid(op, "axis %d is out of range for %s %s", axis, xName,
                   x.str());
  case rules::Slice::Problem::step:
    return invalid(op, "step %d must be at least 1", step);
  case rules::Slice::Problem::start:
    return invalid(op, "start %d must not be negative", start);
  case rules::Slice::Problem::count:
    return invalid(op, "%s %s takes no element along axis %d", slicedName,
                   sliced.str(), axis);
  case rules::Slice::Problem::bounds:
    return invalid(op,
                   "%d elements from %d by %d along axis %d end at %d, past "
                   "%s %s",
                   count, start, step, axis, r.last, xName, x.str());
  }
  return expectType(op, slicedName, sliced, x.dtype, r.shape);
}

} // namespace

absl::Status checkSlice(const SliceArgs &args) {
  return checkSliceOf("slice", "x", args.x, "out", args.out, args.axis,
                      args.start, args.step);
}

absl::Status checkSliceGrad(const SliceGradArgs &args) {
  return checkSliceOf("slice_grad", "dx", args.dx, "dy", args.dy, args.axis,
                      args.start, args.step);
}

absl::Status checkConcat(const ConcatArgs &args) {
  const char *op = "concat";
  std::vector<rules::Dims> shapes;
  for (const TensorRef &in : args.inputs) {
    MD_RETURN_IF_ERROR(checkTensor(in, op, "an input"));
    shapes.push_back(in.shape);
  }
  MD_RETURN_IF_ERROR(checkTensor(args.out, op, "out"));
  rules::Concat r = rules::ConcatShapes(shapes, args.axis);
  switch (r.problem) {
  case rules::Concat::Problem::none:
    break;
  case rules::Concat::Problem::empty:
    return invalid(op, "needs at least one input");
  case rules::Concat::Problem::overflow:
    return invalid(op, "the inputs' sizes along axis %d overflow int64",
                   args.axis);
  case rules::Concat::Problem::axis:
    return invalid(op, "axis %d is out of range for inputs[0] %s", args.axis,
                   args.inputs[0].str());
  case rules::Concat::Problem::rank:
  case rules::Concat::Problem::dims:
    return invalid(op,
                   "inputs[%d] %s must have the dims of inputs[0] %s but at "
                   "axis %d",
                   r.index, args.inputs[r.index].str(), args.inputs[0].str(),
                   args.axis);
  }
  for (size_t i = 1; i < args.inputs.size(); ++i)
    if (args.inputs[i].dtype != args.inputs[0].dtype)
      return invalid(op, "inputs[%d] %s must have the element type of "
                     "inputs[0] %s",
                     i, args.inputs[i].str(), args.inputs[0].str());
  return expectType(op, "out", args.out, args.inputs[0].dtype, r.shape);
}

absl::Status checkExpand(const ExpandArgs &args) {
  const char *op = "expand";
  MD_RETURN_IF_ERROR(checkTensor(args.x, op, "x"));
  MD_RETURN_IF_ERROR(checkTensor(args.out, op, "out"));
  if (args.out.dtype != args.x.dtype ||
      !rules::BroadcastsTo(args.x.shape, args.out.shape))
    return invalid(op,
                   "out %s must be a shape that x %s broadcasts to, with its "
                   "element type",
                   args.out.str(), args.x.str());
  return absl::OkStatus();
}

absl::Status checkArange(const ArangeArgs &args) {
  const char *op = "arange";
  if (args.start >= args.end)
    return invalid(op, "start %d must be less than end %d", args.start,
                   args.end);
  MD_RETURN_IF_ERROR(expectIndex(op, "out", args.out));
  // end - start cannot overflow: start < end and both fit in int64 is not
  // enough, so compare in unsigned arithmetic.
  uint64_t n =
      static_cast<uint64_t>(args.end) - static_cast<uint64_t>(args.start);
  if (args.out.rank() != 1 || static_cast<uint64_t>(args.out.shape[0]) != n)
    return invalid(op, "out must be [%u] for %d to %d, got %s", n, args.start,
                   args.end, args.out.str());
  if (args.out.dtype == DType::i32 &&
      (args.start < INT32_MIN || args.end - 1 > INT32_MAX))
    return invalid(op, "%d to %d does not fit in i32", args.start, args.end);
  return absl::OkStatus();
}

absl::StatusOr<ReducedDims> checkReduce(const ReduceArgs &args) {
  const char *op = args.kind == ReduceKind::sum ? "sum" : "mean";
  MD_RETURN_IF_ERROR(expectFloat(op, "x", args.x));
  MD_ASSIGN_OR_RETURN(ReducedDims reduced,
                      reducedDims(op, args.dims, args.x.rank(), args.x.str()));
  MD_RETURN_IF_ERROR(
      expectType(op, "out", args.out, args.x.dtype,
                 reducedShape(args.x.shape, reduced, args.keepdim)));
  return reduced;
}

absl::StatusOr<ReducedDims> checkReduceGrad(const ReduceGradArgs &args) {
  const char *op = args.kind == ReduceKind::sum ? "sum_grad" : "mean_grad";
  MD_RETURN_IF_ERROR(expectFloat(op, "dx", args.dx));
  MD_ASSIGN_OR_RETURN(
      ReducedDims reduced,
      reducedDims(op, args.dims, args.dx.rank(), args.dx.str()));
  MD_RETURN_IF_ERROR(
      expectType(op, "dy", args.dy, args.dx.dtype,
                 reducedShape(args.dx.shape, reduced, args.keepdim)));
  return reduced;
}

absl::Status checkSumTo(const SumToArgs &args) {
  const char *op = "sum_to";
  MD_RETURN_IF_ERROR(expectFloat(op, "g", args.g));
  MD_RETURN_IF_ERROR(checkTensor(args.out, op, "out"));
  bool ok = args.out.dtype == args.g.dtype && args.out.rank() <= args.g.rank();
  int64_t lead = args.g.rank() - args.out.rank();
  for (int64_t i = 0; ok && i < args.out.rank(); ++i) {
    int64_t o = args.out.shape[i], g = args.g.shape[lead + i];
    ok = o == g || o == 1;
  }
  if (!ok)
    return invalid(op,
                   "out %s must be a shape that broadcasts to g %s, with "
                   "its element type",
                   args.out.str(), args.g.str());
  return absl::OkStatus();
}

absl::Status checkAccumulate(const AccumulateArgs &args) {
  const char *op = "accumulate";
  MD_RETURN_IF_ERROR(expectFloat(op, "acc", args.acc));
  MD_RETURN_IF_ERROR(expectFloat(op, "g", args.g));
  if (args.g.shape != args.acc.shape)
    return invalid(op, "g %s must have the shape of acc %s", args.g.str(),
                   args.acc.str());
  return expectLike(op, "out", args.out, args.acc, "acc");
}

absl::Status checkCast(const CastArgs &args) {
  const char *op = "cast";
  // An index tensor converts to a float one (positions for a table of
  // angles); floats convert among themselves. Either way x is a tensor
  // with data.
  MD_RETURN_IF_ERROR(checkTensor(args.x, op, "x"));
  if (!isIndex(args.x.dtype))
    MD_RETURN_IF_ERROR(expectFloat(op, "x", args.x));
  MD_RETURN_IF_ERROR(expectFloat(op, "out", args.out));
  if (args.out.shape != args.x.shape)
    return invalid(op, "out %s must have the shape of x %s", args.out.str(),
                   args.x.str());
  return absl::OkStatus();
}

absl::Status checkFlatten(const FlattenArgs &args) {
  const char *op = "flatten";
  MD_RETURN_IF_ERROR(checkTensor(args.out, op, "out"));
  if (args.out.rank() != 1)
    return invalid(op, "out must be 1-D, got %s", args.out.str());
  int64_t total = 0;
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    const TensorRef &in = args.inputs[i];
    MD_RETURN_IF_ERROR(checkTensor(in, op, "an input"));
    if (in.dtype != args.out.dtype)
      return invalid(op, "input %d %s must have the element type of out %s", i,
                     in.str(), args.out.str());
    total += in.numel();
    if (total > args.out.numel())
      return invalid(op,
                     "the inputs need at least %d elements, out %s has "
                     "fewer",
                     total, args.out.str());
  }
  return absl::OkStatus();
}

absl::Status checkView(const ViewArgs &args) {
  const char *op = "view";
  MD_RETURN_IF_ERROR(checkTensor(args.source, op, "source"));
  MD_RETURN_IF_ERROR(checkTensor(args.out, op, "out"));
  if (args.source.rank() != 1)
    return invalid(op, "source must be 1-D, got %s", args.source.str());
  if (args.out.dtype != args.source.dtype)
    return invalid(op, "out %s must have the element type of source %s",
                   args.out.str(), args.source.str());
  int64_t n = args.source.numel();
  if (args.offset < 0 || args.offset > n || args.out.numel() > n - args.offset)
    return invalid(op, "elements [%d, %d + %d) are not inside source %s",
                   args.offset, args.offset, args.out.numel(),
                   args.source.str());
  return absl::OkStatus();
}

absl::Status checkAdamW(const AdamWArgs &args) {
  const char *op = "adamw_update";
  MD_RETURN_IF_ERROR(paramAndGrad(op, args.param, args.grad));
  MD_RETURN_IF_ERROR(expectType(op, "m", args.m, DType::f32, args.param.shape));
  MD_RETURN_IF_ERROR(expectType(op, "v", args.v, DType::f32, args.param.shape));
  MD_RETURN_IF_ERROR(
      expectLike(op, "new_param", args.newParam, args.param, "param"));
  MD_RETURN_IF_ERROR(expectLike(op, "new_m", args.newM, args.m, "m"));
  MD_RETURN_IF_ERROR(expectLike(op, "new_v", args.newV, args.v, "v"));
  if (args.step < 1)
    return invalid(op, "step must be >= 1 (1-based), got %d", args.step);
  if (!(args.beta1 >= 0 && args.beta1 < 1) ||
      !(args.beta2 >= 0 && args.beta2 < 1))
    return invalid(op, "betas must be in [0, 1), got (%g, %g)", args.beta1,
                   args.beta2);
  if (!(args.eps > 0))
    return invalid(op, "eps must be positive, got %g", args.eps);
  if (!(args.weightDecay >= 0))
    return invalid(op, "weight_decay must be >= 0, got %g", args.weightDecay);
  return absl::OkStatus();
}

absl::Status checkSgd(const SgdArgs &args) {
  const char *op = "sgd_update";
  MD_RETURN_IF_ERROR(paramAndGrad(op, args.param, args.grad));
  MD_RETURN_IF_ERROR(
      expectLike(op, "new_param", args.newParam, args.param, "param"));
  if (!(args.momentum >= 0))
    return invalid(op, "momentum must be >= 0, got %g", args.momentum);
  if (!(args.weightDecay >= 0))
    return invalid(op, "weight_decay must be >= 0, got %g", args.weightDecay);
  if (!std::isfinite(args.dampening))
    return invalid(op, "dampening must be finite, got %g", args.dampening);
  if (args.nesterov && (args.momentum <= 0 || args.dampening != 0))
    return invalid(op,
                   "nesterov needs momentum > 0 and dampening = 0, got "
                   "momentum %g, dampening %g",
                   args.momentum, args.dampening);
  bool wantBuffer = args.momentum > 0;
  if (wantBuffer != args.momentumBuffer.has_value() ||
      wantBuffer != args.newMomentumBuffer.has_value())
    return invalid(op,
                   "the momentum buffer and its result are present exactly "
                   "when momentum > 0 (momentum %g)",
                   args.momentum);
  if (wantBuffer) {
    MD_RETURN_IF_ERROR(expectType(op, "momentum_buffer", *args.momentumBuffer,
                                  DType::f32, args.param.shape));
    MD_RETURN_IF_ERROR(expectType(op, "new_momentum_buffer",
                                  *args.newMomentumBuffer, DType::f32,
                                  args.param.shape));
  }
  if (args.step < 1)
    return invalid(op, "step must be >= 1 (1-based), got %d", args.step);
  return absl::OkStatus();
}

absl::Status checkGlobalNorm(const GlobalNormArgs &args) {
  const char *op = "global_norm";
  if (args.inputs.empty())
    return invalid(op, "needs at least one input");
  for (const TensorRef &in : args.inputs)
    MD_RETURN_IF_ERROR(expectFloat(op, "an input", in));
  return expectType(op, "out", args.out, DType::f32, {});
}

absl::Status checkClip(const ClipArgs &args) {
  const char *op = "clip";
  if (args.grads.size() != args.outs.size())
    return invalid(op, "%d grads but %d results", args.grads.size(),
                   args.outs.size());
  for (size_t i = 0; i < args.grads.size(); ++i) {
    MD_RETURN_IF_ERROR(expectFloat(op, "a grad", args.grads[i]));
    MD_RETURN_IF_ERROR(
        expectLike(op, "a result", args.outs[i], args.grads[i], "its grad"));
  }
  MD_RETURN_IF_ERROR(expectType(op, "norm", args.norm, DType::f32, {}));
  if (!(args.maxNorm > 0) || !std::isfinite(args.maxNorm))
    return invalid(op, "max_norm must be positive and finite, got %g",
                   args.maxNorm);
  return absl::OkStatus();
}

} // namespace md::runtime
