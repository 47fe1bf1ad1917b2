//===- VjpRules.cpp - md-autodiff's vector-Jacobian products --------------===//
//
// One rule per differentiable op, all in this file and dispatched from one
// TypeSwitch. A rule sees the upstream gradient dy of the op's results and
// builds the gradients of the operands that need one. Ops with a non-trivial
// VJP have a `*_grad` op in the dialect; add, sub, mul, scale, reshape,
// transpose and cast are differentiated with forward ops (docs/decisions/0001),
// and so are sqrt and rsqrt (SyncBatchNorm's rewrite). The VJP of an all-reduce
// is an all-reduce. The backward ops reuse the forward op's location.
//
//===----------------------------------------------------------------------===//

#include "passes/analysis/VjpRules.h"

#include "dialect/MdOps.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace md;

namespace {

/// The rules: one `vjp` overload per op, sharing a builder at the op's
/// location and the context's gradient sink.
class VjpRules {
public:
  VjpRules(Operation *op, const VjpContext &context)
      : b(op->getLoc(), context.builder), context(context) {}

  LogicalResult vjp(MatmulOp op, ArrayRef<Value> dy);
  LogicalResult vjp(MatmulGeluOp op, ArrayRef<Value> dy);
  LogicalResult vjp(AddOp op, ArrayRef<Value> dy);
  LogicalResult vjp(SubOp op, ArrayRef<Value> dy);
  LogicalResult vjp(MulOp op, ArrayRef<Value> dy);
  LogicalResult vjp(DivOp op, ArrayRef<Value> dy);
  LogicalResult vjp(MaximumOp op, ArrayRef<Value> dy);
  LogicalResult vjp(MinimumOp op, ArrayRef<Value> dy);
  /// max (`larger`) or min of lhs and rhs.
  LogicalResult extremumVjp(Operation *op, Value lhs, Value rhs, bool larger,
                            ArrayRef<Value> dy);
  LogicalResult vjp(ScaleOp op, ArrayRef<Value> dy);
  LogicalResult vjp(GeluOp op, ArrayRef<Value> dy);
  LogicalResult vjp(ReluOp op, ArrayRef<Value> dy);
  LogicalResult vjp(SiluOp op, ArrayRef<Value> dy);
  LogicalResult vjp(ElementwiseOp op, ArrayRef<Value> dy);
  LogicalResult vjp(DetachOp op, ArrayRef<Value> dy);
  LogicalResult vjp(PowOp op, ArrayRef<Value> dy);
  LogicalResult vjp(ClampOp op, ArrayRef<Value> dy);
  LogicalResult vjp(LayerNormOp op, ArrayRef<Value> dy);
  LogicalResult vjp(RmsNormOp op, ArrayRef<Value> dy);
  LogicalResult vjp(BatchNormOp op, ArrayRef<Value> dy);
  LogicalResult vjp(SoftmaxOp op, ArrayRef<Value> dy);
  LogicalResult vjp(CausalAttentionOp op, ArrayRef<Value> dy);
  LogicalResult vjp(EmbeddingOp op, ArrayRef<Value> dy);
  LogicalResult vjp(CrossEntropyOp op, ArrayRef<Value> dy);
  LogicalResult vjp(ReshapeOp op, ArrayRef<Value> dy);
  LogicalResult vjp(TransposeOp op, ArrayRef<Value> dy);
  LogicalResult vjp(SliceOp op, ArrayRef<Value> dy);
  LogicalResult vjp(ConcatOp op, ArrayRef<Value> dy);
  LogicalResult vjp(ExpandOp op, ArrayRef<Value> dy);
  LogicalResult vjp(SumOp op, ArrayRef<Value> dy);
  LogicalResult vjp(MeanOp op, ArrayRef<Value> dy);
  LogicalResult vjp(CastOp op, ArrayRef<Value> dy);
  LogicalResult vjp(SqrtOp op, ArrayRef<Value> dy);
  LogicalResult vjp(RsqrtOp op, ArrayRef<Value> dy);
  LogicalResult vjp(AllReduceOp op, ArrayRef<Value> dy);

private:
  /// md.matmul's VJP, shared by md.matmul_gelu: the gradients of a, b and
  /// the bias from dy, the product's gradient.
  template <typename OpT> void matmulVjp(OpT op, Value dy);
  bool needs(Value operand) const {
    return operand && context.needsGradient(operand);
  }
  /// Hands `gradient` to the sink when `operand` needs one; a rule that
  /// builds one op for several operands passes every result here.
  void add(Value operand, Value gradient) {
    if (needs(operand))
      context.addGradient(operand, gradient);
  }
  /// Undoes numpy broadcasting: `g` has the broadcast shape, the result the
  /// type of `operand` (an identity when it was not broadcast).
  Value sumTo(Value g, Value operand) {
    if (g.getType() == operand.getType())
      return g;
    return SumToOp::create(b, operand.getType(), g);
  }

  ImplicitLocOpBuilder b;
  const VjpContext &context;
};

} // namespace

// y = op_a(a) · op_b(b) + bias. md.matmul_grad returns, for the same
// transpose flags, da = dy · op_b(b)^T (transposed back under transpose_a),
// db = op_a(a)^T · dy (summed over the batch dims when b is shared, i.e. 2-D)
// and dbias = dy summed over every dim but the last.
template <typename OpT> void VjpRules::matmulVjp(OpT op, Value dy) {
  Value bias = op.getBias();
  auto grad = MatmulGradOp::create(
      b, op.getA().getType(), op.getB().getType(),
      bias ? bias.getType() : Type(), dy, op.getA(), op.getB(),
      op.getTransposeA(), op.getTransposeB(), /*has_bias=*/bias != nullptr);
  add(op.getA(), grad.getDa());
  add(op.getB(), grad.getDb());
  if (bias)
    add(bias, grad.getDbias());
}

LogicalResult VjpRules::vjp(MatmulOp op, ArrayRef<Value> dy) {
  matmulVjp(op, dy[0]);
  return success();
}

// out = gelu(pre), pre = op_a(a) · op_b(b) + bias: d(pre) = md.gelu_grad
// of d(out) and pre (plus pre's own gradient if the forward reads pre),
// then md.matmul's rule, as the unfused md.matmul and md.gelu would give.
LogicalResult VjpRules::vjp(MatmulGeluOp op, ArrayRef<Value> dy) {
  Value dpre;
  if (dy[0])
    dpre = GeluGradOp::create(b, dy[0], op.getPre(), op.getApproximateAttr());
  if (dy[1])
    dpre = dpre ? AddOp::create(b, dpre, dy[1]).getResult() : dy[1];
  matmulVjp(op, dpre);
  return success();
}

// y = lhs + rhs with broadcasting: d(lhs) = dy, d(rhs) = dy, each summed back
// over the dims its operand was broadcast along.
LogicalResult VjpRules::vjp(AddOp op, ArrayRef<Value> dy) {
  if (needs(op.getLhs()))
    add(op.getLhs(), sumTo(dy[0], op.getLhs()));
  if (needs(op.getRhs()))
    add(op.getRhs(), sumTo(dy[0], op.getRhs()));
  return success();
}

// y = lhs - rhs: d(lhs) = dy, d(rhs) = -dy, reduced like add's; the sign is
// applied after the reduction, on the smaller tensor.
LogicalResult VjpRules::vjp(SubOp op, ArrayRef<Value> dy) {
  if (needs(op.getLhs()))
    add(op.getLhs(), sumTo(dy[0], op.getLhs()));
  if (needs(op.getRhs()))
    add(op.getRhs(),
        ScaleOp::create(b, sumTo(dy[0], op.getRhs()), b.getF64FloatAttr(-1.0)));
  return success();
}

// y = lhs * rhs: d(lhs) = dy * rhs, d(rhs) = dy * lhs (both broadcast to dy's
// shape), reduced like add's. For x * x both contributions reach x and sum to
// 2 x dy.
LogicalResult VjpRules::vjp(MulOp op, ArrayRef<Value> dy) {
  if (needs(op.getLhs()))
    add(op.getLhs(), sumTo(MulOp::create(b, dy[0], op.getRhs()), op.getLhs()));
  if (needs(op.getRhs()))
    add(op.getRhs(), sumTo(MulOp::create(b, dy[0], op.getLhs()), op.getRhs()));
  return success();
}

// y = lhs / rhs: d(lhs) = dy / rhs, d(rhs) = -dy lhs / rhs^2 = -(dy y) / rhs
// (from the quotient, as torch's div backward), each reduced like add's.
LogicalResult VjpRules::vjp(DivOp op, ArrayRef<Value> dy) {
  if (needs(op.getLhs()))
    add(op.getLhs(), sumTo(DivOp::create(b, dy[0], op.getRhs()), op.getLhs()));
  if (needs(op.getRhs())) {
    Value q = DivOp::create(b, MulOp::create(b, dy[0], op.getResult()),
                            op.getRhs());
    add(op.getRhs(),
        ScaleOp::create(b, sumTo(q, op.getRhs()), b.getF64FloatAttr(-1.0)));
  }
  return success();
}

// y = max(lhs, rhs) = (lhs + rhs + |lhs - rhs|) / 2 and y = min(lhs, rhs) =
// (lhs + rhs - |lhs - rhs|) / 2: with s = dy sign(lhs - rhs) (md's abs
// gradient, 0 at 0), d(lhs) = (dy ± s) / 2 and d(rhs) = (dy ∓ s) / 2, each
// reduced like add's. The larger (smaller) operand gets all of dy and a tie
// gives each half, as torch.maximum's backward does.
LogicalResult VjpRules::extremumVjp(Operation *op, Value lhs, Value rhs,
                                    bool larger, ArrayRef<Value> dy) {
  Value diff = SubOp::create(b, lhs, rhs);
  Value s = ElementwiseGradOp::create(
      b, dy[0], diff, ElementwiseFnAttr::get(op->getContext(), ElementwiseFn::abs));
  Value plus = ScaleOp::create(b, AddOp::create(b, dy[0], s),
                               b.getF64FloatAttr(0.5));
  Value minus = ScaleOp::create(b, SubOp::create(b, dy[0], s),
                                b.getF64FloatAttr(0.5));
  if (needs(lhs))
    add(lhs, sumTo(larger ? plus : minus, lhs));
  if (needs(rhs))
    add(rhs, sumTo(larger ? minus : plus, rhs));
  return success();
}

LogicalResult VjpRules::vjp(MaximumOp op, ArrayRef<Value> dy) {
  return extremumVjp(op, op.getLhs(), op.getRhs(), /*larger=*/true, dy);
}

LogicalResult VjpRules::vjp(MinimumOp op, ArrayRef<Value> dy) {
  return extremumVjp(op, op.getLhs(), op.getRhs(), /*larger=*/false, dy);
}

// y = c x: dx = c dy.
LogicalResult VjpRules::vjp(ScaleOp op, ArrayRef<Value> dy) {
  add(op.getX(), ScaleOp::create(b, dy[0], op.getFactorAttr()));
  return success();
}

// dx = dy * gelu'(x), with the derivative of the same (exact or tanh) form.
LogicalResult VjpRules::vjp(GeluOp op, ArrayRef<Value> dy) {
  add(op.getX(),
      GeluGradOp::create(b, dy[0], op.getX(), op.getApproximateAttr()));
  return success();
}

// dx = dy where x > 0, else 0.
LogicalResult VjpRules::vjp(ReluOp op, ArrayRef<Value> dy) {
  add(op.getX(), ReluGradOp::create(b, dy[0], op.getX()));
  return success();
}

// dx = dy * silu'(x), which md.silu_grad computes from x.
LogicalResult VjpRules::vjp(SiluOp op, ArrayRef<Value> dy) {
  add(op.getX(), SiluGradOp::create(b, dy[0], op.getX()));
  return success();
}

// dx = dy * fn'(x), which md.elementwise_grad computes from x.
LogicalResult VjpRules::vjp(ElementwiseOp op, ArrayRef<Value> dy) {
  add(op.getX(),
      ElementwiseGradOp::create(b, dy[0], op.getX(), op.getFnAttr()));
  return success();
}

// dx = dy * c * x^(c - 1), which md.pow_grad computes from x.
LogicalResult VjpRules::vjp(PowOp op, ArrayRef<Value> dy) {
  add(op.getX(),
      PowGradOp::create(b, dy[0], op.getX(), op.getExponentAttr()));
  return success();
}

// No gradient flows through md.detach.
LogicalResult VjpRules::vjp(DetachOp, ArrayRef<Value>) { return success(); }

// y = xhat * gamma + beta with xhat = (x - mean) * rstd over the last dim.
// md.layer_norm_grad recomputes the statistics from x and returns
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma,
// dgamma = sum(dy * xhat) and dbeta = sum(dy) over the leading dims.
LogicalResult VjpRules::vjp(LayerNormOp op, ArrayRef<Value> dy) {
  Value beta = op.getBeta();
  auto grad = LayerNormGradOp::create(
      b, op.getX().getType(), op.getGamma().getType(),
      beta ? beta.getType() : Type(), dy[0], op.getX(), op.getGamma(),
      op.getEps(), /*has_beta=*/beta != nullptr);
  add(op.getX(), grad.getDx());
  add(op.getGamma(), grad.getDgamma());
  if (beta)
    add(beta, grad.getDbeta());
  return success();
}

// y = x * r * gamma with r = 1 / sqrt(mean(x^2) + eps) over the last dim:
// dx = r g - x r^3 mean(g x) with g = dy * gamma, dgamma = sum(dy * x * r).
LogicalResult VjpRules::vjp(RmsNormOp op, ArrayRef<Value> dy) {
  auto grad = RmsNormGradOp::create(b, dy[0], op.getX(), op.getGamma(),
                                    op.getEpsAttr());
  add(op.getX(), grad.getDx());
  add(op.getGamma(), grad.getDgamma());
  return success();
}

// y = (x - mean) * invstd * gamma + beta with per-channel batch statistics.
// md.batch_norm_grad takes the statistics the forward returned (so that
// SyncBatchNorm's all-reduced ones can be passed instead) and returns
// dbeta = sum(dy), dgamma = sum(dy * xhat) and
// dx = gamma * invstd * (dy - dbeta / n - xhat * dgamma / n). It treats the
// statistics as functions of x, not as outputs of their own: a loss that
// reads mean or invstd directly has no rule.
LogicalResult VjpRules::vjp(BatchNormOp op, ArrayRef<Value> dy) {
  if (dy[1] || dy[2])
    return op.emitOpError(
        "the loss depends on the batch statistics (mean, invstd) it returns; "
        "md-autodiff differentiates md.batch_norm through y only");
  auto grad = BatchNormGradOp::create(b, dy[0], op.getX(), op.getGamma(),
                                      op.getMean(), op.getInvstd());
  add(op.getX(), grad.getDx());
  add(op.getGamma(), grad.getDgamma());
  add(op.getBeta(), grad.getDbeta());
  return success();
}

// dx = y * (dy - sum(dy * y)) along the axis, from the forward's output y.
LogicalResult VjpRules::vjp(SoftmaxOp op, ArrayRef<Value> dy) {
  add(op.getX(),
      SoftmaxGradOp::create(b, dy[0], op.getResult(), op.getAxisAttr()));
  return success();
}

// out = softmax(mask(Q K^T / sqrt(d))) V per head. md.causal_attention_grad
// recomputes P and returns dv = P^T dout, dq = dS K / sqrt(d) and
// dk = dS^T Q / sqrt(d) with dS = P * (dP - rowsum(dP * P)), dP = dout V^T.
LogicalResult VjpRules::vjp(CausalAttentionOp op, ArrayRef<Value> dy) {
  auto grad =
      CausalAttentionGradOp::create(b, dy[0], op.getQ(), op.getK(), op.getV(),
                                    op.getNumHeadsAttr(), op.getWindowAttr());
  add(op.getQ(), grad.getDq());
  add(op.getK(), grad.getDk());
  add(op.getV(), grad.getDv());
  return success();
}

// y[i..., :] = table[ids[i...], :]: every looked-up row gets the dy of the
// positions that read it (a scatter-add); the integer ids get nothing.
LogicalResult VjpRules::vjp(EmbeddingOp op, ArrayRef<Value> dy) {
  RankedTensorType table = op.getTable().getType();
  add(op.getTable(),
      EmbeddingGradOp::create(b, table, dy[0], op.getIds(),
                              static_cast<uint64_t>(table.getDimSize(0))));
  return success();
}

// loss = mean over the kept positions of logsumexp(logits) - logits[t]:
// dlogits = dloss * (softmax(logits) - onehot(t)) / n, 0 on ignored rows.
LogicalResult VjpRules::vjp(CrossEntropyOp op, ArrayRef<Value> dy) {
  add(op.getLogits(),
      CrossEntropyGradOp::create(b, dy[0], op.getLogits(), op.getTargets(),
                                 op.getIgnoreIndexAttr()));
  return success();
}

// A reshape keeps the row-major order: dx is dy read back in x's shape.
LogicalResult VjpRules::vjp(ReshapeOp op, ArrayRef<Value> dy) {
  add(op.getX(), ReshapeOp::create(b, op.getX().getType(), dy[0]));
  return success();
}

// y dim i is x dim perm[i]: dx = dy transposed by the inverse permutation,
// inverse[perm[i]] = i.
LogicalResult VjpRules::vjp(TransposeOp op, ArrayRef<Value> dy) {
  ArrayRef<int64_t> perm = op.getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = static_cast<int64_t>(i);
  add(op.getX(), TransposeOp::create(b, op.getX().getType(), dy[0], inverse));
  return success();
}

// The elements inside [min, max] pass dy; the clamped ones get nothing.
LogicalResult VjpRules::vjp(ClampOp op, ArrayRef<Value> dy) {
  add(op.getX(), ClampGradOp::create(b, op.getX().getType(), dy[0], op.getX(),
                                     op.getMinAttr(), op.getMaxAttr()));
  return success();
}

// The elements a slice read get dy, the others nothing.
LogicalResult VjpRules::vjp(SliceOp op, ArrayRef<Value> dy) {
  add(op.getX(),
      SliceGradOp::create(b, op.getX().getType(), dy[0], op.getAxisAttr(),
                          op.getStartAttr(), op.getStepAttr()));
  return success();
}

// Input i gets its range of dy along the axis.
LogicalResult VjpRules::vjp(ConcatOp op, ArrayRef<Value> dy) {
  int64_t at = 0;
  const int64_t axis = op.getAxis();
  for (Value in : op.getInputs()) {
    auto type = cast<RankedTensorType>(in.getType());
    if (needs(in))
      add(in, SliceOp::create(b, type, dy[0], b.getI64IntegerAttr(axis),
                              b.getI64IntegerAttr(at), b.getI64IntegerAttr(1)));
    at += type.getShape()[axis];
  }
  return success();
}

// Each element of x went to every position it was repeated at.
LogicalResult VjpRules::vjp(ExpandOp op, ArrayRef<Value> dy) {
  add(op.getX(), sumTo(dy[0], op.getX()));
  return success();
}

// Each element of x gets the dy of the sum it went into.
LogicalResult VjpRules::vjp(SumOp op, ArrayRef<Value> dy) {
  add(op.getX(), SumGradOp::create(b, op.getX().getType(), dy[0],
                                   op.getDimsAttr(), op.getKeepdimAttr()));
  return success();
}

// Each element of x gets the dy of its mean divided by the count reduced.
LogicalResult VjpRules::vjp(MeanOp op, ArrayRef<Value> dy) {
  add(op.getX(), MeanGradOp::create(b, op.getX().getType(), dy[0],
                                    op.getDimsAttr(), op.getKeepdimAttr()));
  return success();
}

// A cast is the identity up to rounding: dx = dy cast back to x's type.
LogicalResult VjpRules::vjp(CastOp op, ArrayRef<Value> dy) {
  add(op.getInput(), CastOp::create(b, op.getInput().getType(), dy[0]));
  return success();
}

// y = sqrt(x): dx = dy / (2 sqrt(x)) = 0.5 * dy * rsqrt(x), infinite at 0
// like the derivative itself.
LogicalResult VjpRules::vjp(SqrtOp op, ArrayRef<Value> dy) {
  Value r = RsqrtOp::create(b, op.getX(), b.getF64FloatAttr(0.0));
  add(op.getX(),
      ScaleOp::create(b, MulOp::create(b, dy[0], r), b.getF64FloatAttr(0.5)));
  return success();
}

// y = (x + eps)^(-1/2): dx = -0.5 * dy * y^3, from the forward's output.
LogicalResult VjpRules::vjp(RsqrtOp op, ArrayRef<Value> dy) {
  Value y = op.getResult();
  Value cube = MulOp::create(b, MulOp::create(b, y, y), y);
  add(op.getX(), ScaleOp::create(b, MulOp::create(b, dy[0], cube),
                                 b.getF64FloatAttr(-0.5)));
  return success();
}

// Every rank gets y = sum (or avg) over the group of x_r, and the loss being
// trained is the sum of the ranks' losses, so rank r's dx is the sum over
// the group of every rank's dy (times 1/n for avg): the same all-reduce of the
// cotangent. This is SyncBatchNorm's backward all-reduce. It keeps the
// forward collective's tags (md.sync_batch_norm) so that later passes treat
// both alike.
LogicalResult VjpRules::vjp(AllReduceOp op, ArrayRef<Value> dy) {
  ReductionKind kind = op.getReductionKind();
  if (kind != ReductionKind::sum && kind != ReductionKind::avg)
    return op.emitOpError("has no gradient rule for reduction '")
           << stringifyReductionKind(kind)
           << "': md-autodiff differentiates sum and avg all-reduces only";
  auto reduce = AllReduceOp::create(b, op.getType(), op.getGroup(),
                                    /*bucket=*/nullptr, dy[0], kind);
  for (NamedAttribute attr : op->getDiscardableAttrs())
    if (!reduce->hasAttr(attr.getName()))
      reduce->setAttr(attr.getName(), attr.getValue());
  add(op.getInput(), reduce);
  return success();
}

LogicalResult md::emitVjp(Operation *op, ArrayRef<Value> resultGradients,
                          const VjpContext &context) {
  assert(llvm::any_of(resultGradients, [](Value g) { return g; }) &&
         "an op is differentiated only when the loss depends on a result");
  VjpRules rules(op, context);
  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case<MatmulOp, MatmulGeluOp, AddOp, SubOp, MulOp, DivOp, MaximumOp,
            MinimumOp, ScaleOp, GeluOp,
            ReluOp, SiluOp, ElementwiseOp, DetachOp, PowOp, ClampOp, LayerNormOp,
            RmsNormOp,
            BatchNormOp, SoftmaxOp, CausalAttentionOp, EmbeddingOp,
            CrossEntropyOp, ReshapeOp,
            TransposeOp, SliceOp, ConcatOp, ExpandOp, SumOp, MeanOp, CastOp, SqrtOp, RsqrtOp, AllReduceOp>(
          [&](auto typed) { return rules.vjp(typed, resultGradients); })
      .Default([&](Operation *) {
        return op->emitOpError(
            "has no gradient rule, and the loss depends on a parameter "
            "through it");
      });
}
