//===- MdComputeOps.td - md compute ops ---------------------------*- tablegen -*-===//
//
// The tensor computations of a model's forward function and, after md's
// autodiff, of its backward pass. Every op is pure and works on builtin
// value-semantics tensors. Floats are bf16, f16 or f32, indices i32 or i64;
// reductions and normalisations accumulate in f32 whatever the element type.
//
// Gradient ops (`*_grad`) are vector-Jacobian products: each takes the
// upstream gradient first and returns the gradients of the forward op's
// differentiable operands. Ops whose VJP is a composition of other md ops
// (add, sub, mul, scale, reshape, transpose) have no `_grad` op.
//
//===----------------------------------------------------------------------===//

#ifndef MD_DIALECT_MDCOMPUTEOPS_TD
#define MD_DIALECT_MDCOMPUTEOPS_TD

include "dialect/MdBase.td"
include "dialect/MdAttrs.td"
include "dialect/MdInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

//===----------------------------------------------------------------------===//
// Constraints used only by compute ops
//===----------------------------------------------------------------------===//

def MD_FloatTensor2D : TensorRankOf<[BF16, F16, F32], [2]>;
def MD_FloatTensor3D : TensorRankOf<[BF16, F16, F32], [3]>;
def MD_F32Vector : 1DTensorOf<[F32]>;
def MD_IndexVector : 1DTensorOf<[I32, I64]>;

class MD_ComputeOp<string mnemonic, list<Trait> traits = []>
    : MD_Op<mnemonic, !listconcat([Pure], traits)>;

//===----------------------------------------------------------------------===//
// Matrix products
//===----------------------------------------------------------------------===//

def MD_MatmulOp : MD_ComputeOp<"matmul", [AllElementTypesMatch<["a", "b", "result"]>]> {
  let summary = "matrix product with optional transposes and bias";
  let description = [{
    `result = op_a(a) · op_b(b) + bias`, where `op_a` swaps the last two dims
    of `a` when `transpose_a` is set and `op_b` those of `b` when
    `transpose_b` is set.

    Shapes: `a` is [..., M, K] ([..., K, M] with `transpose_a`), rank >= 2.
    `b` is either [K, N] ([N, K] with `transpose_b`), shared by every batch
    entry, or has the rank of `a` and the same leading batch dims (a batched
    product). The optional `bias` is [N], added to every row. The result is
    [..., M, N] with the batch dims of `a`. `a`, `b`, `bias` and the result
    share the element type; products are accumulated in f32 and rounded once
    to the result type.

    `nn.Linear` with its weight stored [out, in] is `matmul %x, %w bias %b
    transpose_b`. The gradient is `md.matmul_grad`.

    ```mlir
    %y = md.matmul %x, %w bias %b transpose_b : tensor<8x768xf32>, tensor<3072x768xf32>, tensor<3072xf32> -> tensor<8x3072xf32>
    %s = md.matmul %q, %k transpose_b : tensor<4x64x64xbf16>, tensor<4x64x64xbf16> -> tensor<4x64x64xbf16>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$a, MD_FloatTensor:$b,
                       Optional<MD_FloatTensor>:$bias,
                       UnitAttr:$transpose_a, UnitAttr:$transpose_b);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = [{
    $a `,` $b (`bias` $bias^)? (`transpose_a` $transpose_a^)? (`transpose_b` $transpose_b^)?
    attr-dict `:` type($a) `,` type($b) (`,` type($bias)^)? `->` type($result)
  }];
  let hasVerifier = 1;
  let builders = [
    // Infers the result type from the operands.
    OpBuilder<(ins "::mlir::Value":$a, "::mlir::Value":$b, "::mlir::Value":$bias,
                   "bool":$transposeA, "bool":$transposeB)>
  ];
}

def MD_MatmulGeluOp : MD_ComputeOp<"matmul_gelu", [
    AllElementTypesMatch<["a", "b", "out"]>, AllTypesMatch<["out", "pre"]>]> {
  let summary = "matrix product, bias and GELU in one op";
  let description = [{
    `pre = op_a(a) · op_b(b) + bias` as `md.matmul` computes it (the same
    operands, transposes and rounding), and `out = gelu(pre)` as `md.gelu`
    computes it, exact or, with `approximate`, the tanh form: the MLP's
    first linear layer and its activation. `pre` is also a result because
    the gradient needs it: `md.gelu_grad` of `out`'s gradient and `pre`,
    then `md.matmul_grad`. md-fuse forms it from an `md.matmul` whose only
    user is an `md.gelu`; both results have the matmul's type.

    ```mlir
    %h, %pre = md.matmul_gelu %x, %w bias %b transpose_b approximate : tensor<8x768xf32>, tensor<3072x768xf32>, tensor<3072xf32> -> tensor<8x3072xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$a, MD_FloatTensor:$b,
                       Optional<MD_FloatTensor>:$bias,
                       UnitAttr:$transpose_a, UnitAttr:$transpose_b,
                       UnitAttr:$approximate);
  let results = (outs MD_FloatTensor:$out, MD_FloatTensor:$pre);
  let assemblyFormat = [{
    $a `,` $b (`bias` $bias^)? (`transpose_a` $transpose_a^)? (`transpose_b` $transpose_b^)?
    (`approximate` $approximate^)? attr-dict `:` type($a) `,` type($b) (`,` type($bias)^)?
    `->` type($out)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

class MD_BroadcastBinaryOp<string mnemonic, string what, string vjp>
    : MD_ComputeOp<mnemonic, [AllElementTypesMatch<["lhs", "rhs", "result"]>]> {
  let summary = "elementwise " # what # " with numpy broadcasting";
  let description = [{
    Elementwise }] # !cond(!eq(mnemonic, "add") : "`lhs + rhs`",
                           !eq(mnemonic, "sub") : "`lhs - rhs`",
                           !eq(mnemonic, "div") : "`lhs / rhs`",
                           !eq(mnemonic, "maximum") : "`max(lhs, rhs)` (NaN when either is NaN, as torch.maximum)",
                           !eq(mnemonic, "minimum") : "`min(lhs, rhs)` (NaN when either is NaN, as torch.minimum)",
                           true : "`lhs * rhs`") # [{ with numpy's trailing
    broadcasting: the shapes are aligned at their last dims, and each pair of
    dims must be equal or one of them 1 (a missing leading dim counts as 1).
    The result has the broadcast shape, e.g. [B, T, D] and [T, D] give
    [B, T, D]. Both operands and the result share the element type.

    VJP: }] # vjp # [{ Each gradient is then reduced to its operand's
    shape with `md.sum_to` wherever the operand was broadcast. The VJP is
    expressed with existing ops, which is why there is no `md.}] # mnemonic # [{_grad`.

    ```mlir
    %y = md.}] # mnemonic # [{ %x, %pos : tensor<8x64x768xf32>, tensor<64x768xf32> -> tensor<8x64x768xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$lhs, MD_FloatTensor:$rhs);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let hasVerifier = 1;
  let builders = [
    // Infers the broadcast result type.
    OpBuilder<(ins "::mlir::Value":$lhs, "::mlir::Value":$rhs)>
  ];
}

def MD_AddOp : MD_BroadcastBinaryOp<"add", "sum",
    "d(lhs) = dy and d(rhs) = dy.">;
def MD_SubOp : MD_BroadcastBinaryOp<"sub", "difference",
    "d(lhs) = dy and d(rhs) = `md.scale dy by -1.0`.">;
def MD_MulOp : MD_BroadcastBinaryOp<"mul", "product",
    "d(lhs) = `md.mul dy, rhs` and d(rhs) = `md.mul dy, lhs`.">;
def MD_MaximumOp : MD_BroadcastBinaryOp<"maximum", "maximum",
    "with s = `md.elementwise_grad abs` of dy at lhs - rhs (dy sign(lhs - rhs), 0 at a tie), d(lhs) = (dy + s) / 2 and d(rhs) = (dy - s) / 2: the larger operand gets dy, a tie splits it in halves (torch's).">;
def MD_MinimumOp : MD_BroadcastBinaryOp<"minimum", "minimum",
    "with s as for `md.maximum`, d(lhs) = (dy - s) / 2 and d(rhs) = (dy + s) / 2: the smaller operand gets dy, a tie splits it in halves (torch's).">;
def MD_DivOp : MD_BroadcastBinaryOp<"div", "quotient (IEEE, in f32)",
    "d(lhs) = `md.div dy, rhs` and d(rhs) = -`md.div (md.mul dy, result), rhs` (-dy lhs / rhs^2 from the quotient itself).">;

def MD_ScaleOp : MD_ComputeOp<"scale", [SameOperandsAndResultType]> {
  let summary = "multiplies a tensor by a constant";
  let description = [{
    `result = x * factor`, with `factor` an f64 constant rounded to the
    element type after the product is computed in f32. Same type in and out.

    VJP: dx = `md.scale dy by factor`, expressed with this same op, which is
    why there is no `md.scale_grad`. Scaling by 1.0 folds away.

    ```mlir
    %h = md.scale %x by 0.5 : tensor<8x768xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x, F64Attr:$factor);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = "$x `by` $factor attr-dict `:` type($x)";
  let hasFolder = 1;
}

def MD_GeluOp : MD_ComputeOp<"gelu", [SameOperandsAndResultType]> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `gelu(x) = 0.5 x (1 + erf(x / sqrt(2)))`; with `approximate` the tanh
    approximation `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`
    (GPT-2's). Evaluated in f32, same type in and out. The gradient is
    `md.gelu_grad`.

    ```mlir
    %h = md.gelu %x approximate : tensor<8x3072xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x, UnitAttr:$approximate);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = "$x (`approximate` $approximate^)? attr-dict `:` type($x)";
}

def MD_ReluOp : MD_ComputeOp<"relu", [SameOperandsAndResultType]> {
  let summary = "rectified linear unit";
  let description = [{
    `relu(x) = max(x, 0)`, same type in and out. The gradient is
    `md.relu_grad`.

    ```mlir
    %h = md.relu %x : tensor<8x64xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
}

def MD_SiluOp : MD_ComputeOp<"silu", [SameOperandsAndResultType]> {
  let summary = "sigmoid linear unit (swish)";
  let description = [{
    `silu(x) = x * sigmoid(x) = x / (1 + exp(-x))`, evaluated in f32, same
    type in and out (the activation of the SwiGLU MLP). The gradient is
    `md.silu_grad`.

    ```mlir
    %h = md.silu %x : tensor<8x64xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
}

def MD_ElementwiseOp : MD_ComputeOp<"elementwise", [SameOperandsAndResultType]> {
  let summary = "an elementwise math function";
  let description = [{
    `result = fn(x)` for each element, with `fn` one of `exp`, `log`, `sin`,
    `cos`, `tanh`, `sigmoid` (`1 / (1 + exp(-x))`), `abs`, `neg`, `sqrt`
    and `rsqrt` (`1 / sqrt(x)`), evaluated in f32 and rounded once to the
    element type; IEEE results outside the domain (`log` of a negative
    number is NaN, of 0 is -inf). Same type in and out. The language's
    `exp(x)`, `log(x)`, ... are this op; the gradient is
    `md.elementwise_grad`. (`md.sqrt` and `md.rsqrt` are the host scalar
    ops of the optimizer's norms.)

    ```mlir
    %e = md.elementwise exp %x : tensor<8x64xf32>
    %s = md.elementwise sigmoid %x : tensor<8x64xbf16>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x, MD_ElementwiseFn:$fn);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = "$fn $x attr-dict `:` type($x)";
}

def MD_PowOp : MD_ComputeOp<"pow", [SameOperandsAndResultType]> {
  let summary = "raises each element to a constant power";
  let description = [{
    `result = x ^ exponent` for each element, with `exponent` an f64
    constant used in f32 (`x * x` for 2, exactly), IEEE outside the domain
    (a negative `x` to a non-integer power is NaN). Same type in and out.
    The language's `pow(x, c)`; the gradient is `md.pow_grad`.

    ```mlir
    %sq = md.pow %x by 2.0 : tensor<8x64xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x, F64Attr:$exponent);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = "$x `by` $exponent attr-dict `:` type($x)";
}

def MD_ClampOp : MD_ComputeOp<"clamp", [SameOperandsAndResultType]> {
  let summary = "limits each element to a range";
  let description = [{
    `result = x < min ? min : x > max ? max : x` for each element in f32,
    `min <= max` f64 constants used in f32; a bound of -inf or inf is no
    bound, and NaN stays NaN (torch's `clamp`). Same type in and out. The
    gradient is `md.clamp_grad`.

    ```mlir
    %c = md.clamp %x min -1.0 max 1.0 : tensor<8x64xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x, F64Attr:$min, F64Attr:$max);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = "$x `min` $min `max` $max attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def MD_ClampGradOp : MD_ComputeOp<"clamp_grad", [SameOperandsAndResultType]> {
  let summary = "gradient of md.clamp";
  let description = [{
    `dx = min <= x <= max ? dy : 0` for each element (torch's: the bounds
    themselves pass the gradient). `dy`, `x` and `dx` have the same type.

    ```mlir
    %dx = md.clamp_grad %dy, %x min -1.0 max 1.0 : tensor<8x64xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$dy, MD_FloatTensor:$x, F64Attr:$min,
                       F64Attr:$max);
  let results = (outs MD_FloatTensor:$dx);
  let assemblyFormat = "$dy `,` $x `min` $min `max` $max attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def MD_PowGradOp : MD_ComputeOp<"pow_grad", [SameOperandsAndResultType]> {
  let summary = "gradient of md.pow";
  let description = [{
    `dx = dy * exponent * x ^ (exponent - 1)` for each element, in f32 (`dy
    * 2 x` for 2; 0 for 0). `dy`, `x` and `dx` have the same type.

    ```mlir
    %dx = md.pow_grad %dy, %x by 2.0 : tensor<8x64xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$dy, MD_FloatTensor:$x,
                       F64Attr:$exponent);
  let results = (outs MD_FloatTensor:$dx);
  let assemblyFormat = "$dy `,` $x `by` $exponent attr-dict `:` type($x)";
}

def MD_DetachOp : MD_ComputeOp<"detach", [SameOperandsAndResultType]> {
  let summary = "stops the gradient (torch.Tensor.detach)";
  let description = [{
    `result = x` in the forward, but no gradient flows back through it:
    md-autodiff's rule for it adds nothing to `x`'s gradient. The op lives
    only until md-autodiff, which replaces every `md.detach` of the model by
    its operand once the backward is built, so no plan has an instruction
    for it. The language's `detach(x)`.

    ```mlir
    %d = md.detach %x : tensor<8x64xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
}

def MD_SqrtOp : MD_ComputeOp<"sqrt", [SameOperandsAndResultType]> {
  let summary = "elementwise square root";
  let description = [{
    `sqrt(x)`, IEEE (correctly rounded in f32; NaN for negative inputs). md's
    passes use it to turn the all-reduced sum of squared gradient norms into
    the global norm that `md.clip` takes.

    ```mlir
    %norm = md.sqrt %sq : tensor<f32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
}

def MD_RsqrtOp : MD_ComputeOp<"rsqrt", [SameOperandsAndResultType]> {
  let summary = "elementwise 1 / sqrt(x + eps)";
  let description = [{
    `1 / sqrt(x + eps)` elementwise, computed in f32 and rounded to the
    element type; `eps` (default 0) must be >= 0. SyncBatchNorm's inverse
    standard deviation from the all-reduced variance. Its derivative is
    `-0.5 * rsqrt(x + eps)^3`.

    ```mlir
    %inv = md.rsqrt %var eps 1.0e-05 : tensor<256xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x, DefaultValuedAttr<F64Attr, "0.0">:$eps);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = "$x (`eps` $eps^)? attr-dict `:` type($x)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Normalisations and softmax
//===----------------------------------------------------------------------===//

def MD_LayerNormOp : MD_ComputeOp<"layer_norm", [AllTypesMatch<["x", "result"]>]> {
  let summary = "layer normalisation over the last dim";
  let description = [{
    Normalises `x` [..., D] over its last dim:
    `y = (x - mean) / sqrt(var + eps) * gamma + beta`, with the mean and the
    biased variance taken over D and computed in f32. `gamma` and the
    optional `beta` are [D] with the element type of `x`; without `beta`
    nothing is added. `eps` (default 1e-5) must be positive. The result has
    the type of `x`. The gradient is `md.layer_norm_grad`, which recomputes
    the statistics from `x`.

    ```mlir
    %h = md.layer_norm %x, %g, %b : tensor<8x64x768xf32>, tensor<768xf32>, tensor<768xf32>
    %h2 = md.layer_norm %x, %g eps 1.000000e-06 : tensor<8x64x768xf32>, tensor<768xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x, MD_FloatTensor:$gamma,
                       Optional<MD_FloatTensor>:$beta,
                       DefaultValuedAttr<F64Attr, "1e-5">:$eps);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = [{
    $x `,` $gamma (`,` $beta^)? (`eps` $eps^)? attr-dict `:` type($x) `,` type($gamma) (`,` type($beta)^)?
  }];
  let hasVerifier = 1;
}

def MD_RmsNormOp : MD_ComputeOp<"rms_norm", [AllTypesMatch<["x", "result"]>]> {
  let summary = "root-mean-square normalisation over the last dim";
  let description = [{
    Normalises `x` [..., D] over its last dim:
    `y = x / sqrt(mean(x^2) + eps) * gamma`, the mean of squares computed in
    f32. `gamma` is [D] with the element type of `x`; `eps` (default 1e-6)
    must be positive. The result has the type of `x`. The gradient is
    `md.rms_norm_grad`.

    ```mlir
    %h = md.rms_norm %x, %g : tensor<8x64x768xbf16>, tensor<768xbf16>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x, MD_FloatTensor:$gamma,
                       DefaultValuedAttr<F64Attr, "1e-6">:$eps);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = [{
    $x `,` $gamma (`eps` $eps^)? attr-dict `:` type($x) `,` type($gamma)
  }];
  let hasVerifier = 1;
}

def MD_BatchNormOp : MD_ComputeOp<"batch_norm", [
    AllTypesMatch<["x", "y"]>, AllTypesMatch<["gamma", "beta"]>,
    AllTypesMatch<["mean", "invstd"]>]> {
  let summary = "batch normalisation (channel-last) returning the batch statistics";
  let description = [{
    `x` is [N, ..., C], channels last. Normalises over every dim but the
    last: `y = (x - mean) * invstd * gamma + beta` with, per channel, `mean`
    and `invstd = 1 / sqrt(var + eps)` of the biased variance over the
    N * ... elements, computed in f32. `gamma` and `beta` are [C] with the
    element type of `x`; `eps` (default 1e-5) must be positive.

    Results: `y` (the type of `x`) and the batch statistics `mean` and
    `invstd`, both `tensor<Cxf32>`. They are results so that SyncBatchNorm
    can all-reduce them across ranks, running statistics can be updated from
    them (PyTorch's running variance uses the unbiased `var * n / (n - 1)`),
    and `md.batch_norm_grad` reuses them.

    ```mlir
    %y, %mean, %invstd = md.batch_norm %x, %g, %b : tensor<8x16x16x32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<8x16x16x32xf32>, tensor<32xf32>, tensor<32xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x, MD_FloatTensor:$gamma, MD_FloatTensor:$beta,
                       DefaultValuedAttr<F64Attr, "1e-5">:$eps);
  let results = (outs MD_FloatTensor:$y, MD_F32Vector:$mean, MD_F32Vector:$invstd);
  let assemblyFormat = [{
    $x `,` $gamma `,` $beta (`eps` $eps^)? attr-dict `:` type($x) `,` type($gamma) `,` type($beta)
    `->` type($y) `,` type($mean) `,` type($invstd)
  }];
  let hasVerifier = 1;
}

def MD_SoftmaxOp : MD_ComputeOp<"softmax", [SameOperandsAndResultType]> {
  let summary = "softmax along one axis";
  let description = [{
    `y = exp(x - max(x)) / sum(exp(x - max(x)))` along `axis` (default -1,
    the last dim; a negative axis counts from the end), computed in f32 with
    the maximum subtracted for stability. Same type in and out. The gradient
    is `md.softmax_grad`, which uses the output `y`.

    ```mlir
    %p = md.softmax %logits : tensor<8x10xf32>
    %q = md.softmax %s axis 0 : tensor<8x10xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x, DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = "$x (`axis` $axis^)? attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def MD_CausalAttentionOp : MD_ComputeOp<"causal_attention", [SameOperandsAndResultType]> {
  let summary = "multi-head causal scaled dot-product attention";
  let description = [{
    `q`, `k` and `v` are [B, T, C]; C is split into `num_heads` heads of
    d = C / num_heads channels (C % num_heads must be 0). Per batch entry and
    head: `S = Q K^T / sqrt(d)`, positions j > i masked to -inf,
    `P = softmax(S)` (f32, max subtracted), `out = P V`; the heads are
    concatenated back into C. The result is [B, T, C], the type of `q`. The
    gradient is `md.causal_attention_grad`, which recomputes P.

    With `window` W (sliding-window attention, Mistral's), position i sees
    the keys i - W < j <= i only: W positions, itself included; positions
    j <= i - W are masked too. Without it every j <= i is seen.

    ```mlir
    %o = md.causal_attention %q, %k, %v num_heads 12 : tensor<8x64x768xf32>
    %w = md.causal_attention %q, %k, %v num_heads 12 window 16 : tensor<8x64x768xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor3D:$q, MD_FloatTensor3D:$k, MD_FloatTensor3D:$v,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$window);
  let results = (outs MD_FloatTensor3D:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v `num_heads` $num_heads (`window` $window^)? attr-dict `:` type($q)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Embedding and loss
//===----------------------------------------------------------------------===//

def MD_EmbeddingOp : MD_ComputeOp<"embedding", [AllElementTypesMatch<["table", "result"]>]> {
  let summary = "looks up rows of a table";
  let description = [{
    `table` is [V, D] float, `ids` any shape [...] of i32 or i64 with every
    id in [0, V). `result[i..., :] = table[ids[i...], :]`, shape [..., D], the
    element type of `table`. The gradient is `md.embedding_grad`.

    ```mlir
    %e = md.embedding %wte, %ids : tensor<50304x768xf32>, tensor<8x64xi32> -> tensor<8x64x768xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor2D:$table, MD_IndexTensor:$ids);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = [{
    $table `,` $ids attr-dict `:` type($table) `,` type($ids) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MD_CrossEntropyOp : MD_ComputeOp<"cross_entropy"> {
  let summary = "mean softmax cross-entropy of logits against integer targets";
  let description = [{
    `logits` is [..., V] float, `targets` [...] i32 or i64 with the leading
    dims of `logits`. For each position with a target t other than
    `ignore_index`: `loss = logsumexp(logits) - logits[t]`, computed in f32
    with the maximum subtracted. The result, a `tensor<f32>`, is the mean
    over the positions not ignored (NaN when every target is ignored, as in
    PyTorch). Targets other than `ignore_index` must be in [0, V). The
    gradient is `md.cross_entropy_grad`.

    ```mlir
    %loss = md.cross_entropy %logits, %y ignore_index -100 : tensor<8x64x50304xf32>, tensor<8x64xi32> -> tensor<f32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$logits, MD_IndexTensor:$targets,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs MD_ScalarTensor:$result);
  let assemblyFormat = [{
    $logits `,` $targets (`ignore_index` $ignore_index^)? attr-dict
    `:` type($logits) `,` type($targets) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

def MD_ReshapeOp : MD_ComputeOp<"reshape", [AllElementTypesMatch<["x", "result"]>]> {
  let summary = "reinterprets a tensor with another shape of the same size";
  let description = [{
    Row-major reshape: the elements keep their order, the result has the
    same number of elements and the same element type as `x`. Any element
    type (floats and indices).

    VJP: dx = `md.reshape dy` back to the type of `x`, expressed with this
    same op, which is why there is no `md.reshape_grad`. A reshape to its own
    type folds to `x`; a reshape of a reshape folds into one.

    ```mlir
    %flat = md.reshape %logits : tensor<8x64x50304xf32> to tensor<512x50304xf32>
    ```
  }];
  let arguments = (ins MD_AnyTensor:$x);
  let results = (outs MD_AnyTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def MD_TransposeOp : MD_ComputeOp<"transpose", [AllElementTypesMatch<["x", "result"]>]> {
  let summary = "permutes the dims of a tensor";
  let description = [{
    `result` dim i is `x` dim `perm[i]`: `perm` is a permutation of
    [0, rank), `result[i_0, ..., i_n] = x[j]` with `j[perm[k]] = i_k`. Any
    element type.

    VJP: dx = `md.transpose dy` by the inverse permutation, expressed with
    this same op, which is why there is no `md.transpose_grad`. The identity
    permutation folds to `x`; a transpose of a transpose folds into one with
    the composed permutation.

    ```mlir
    %t = md.transpose %x perm [1, 0] : tensor<8x768xf32> to tensor<768x8xf32>
    ```
  }];
  let arguments = (ins MD_AnyTensor:$x, DenseI64ArrayAttr:$perm);
  let results = (outs MD_AnyTensor:$result);
  let assemblyFormat = "$x `perm` $perm attr-dict `:` type($x) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def MD_SliceOp : MD_ComputeOp<"slice", [AllElementTypesMatch<["x", "result"]>]> {
  let summary = "every step-th element of a range along one axis";
  let description = [{
    Along `axis` (in [0, rank)), the result holds the elements `start`,
    `start + step`, ... of `x`, as many as the result's size there (at least
    one, the last inside `x`); every other dim is `x`'s, whole. `start >= 0`,
    `step >= 1`. Any element type. A slice along several dims (`x[:, 1:5,
    ::2]` in the language) is one op per sliced dim.

    The gradient is `md.slice_grad`. The whole range with step 1 folds to
    `x`.

    ```mlir
    %h = md.slice %x axis 2 start 32 step 1 : tensor<8x64x128xf32> to tensor<8x64x32xf32>
    ```
  }];
  let arguments = (ins MD_AnyTensor:$x, ConfinedAttr<I64Attr, [IntNonNegative]>:$axis,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$start,
                       ConfinedAttr<I64Attr, [IntPositive]>:$step);
  let results = (outs MD_AnyTensor:$result);
  let assemblyFormat = [{
    $x `axis` $axis `start` $start `step` $step attr-dict `:` type($x) `to` type($result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def MD_ConcatOp : MD_ComputeOp<"concat"> {
  let summary = "joins tensors one after another along an axis";
  let description = [{
    The inputs, at least one, have one rank and element type and the same
    dims but at `axis` (in [0, rank)); the result's size there is the sum of
    theirs, and input `i` occupies its range `[o_i, o_i + n_i)` with `o_0 =
    0`. Any element type. The gradient of each input is an `md.slice` of
    the result's. A single input folds to itself.

    ```mlir
    %r = md.concat %a, %b axis 2 : tensor<8x64x32xf32>, tensor<8x64x32xf32> to tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins Variadic<MD_AnyTensor>:$inputs,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$axis);
  let results = (outs MD_AnyTensor:$result);
  let assemblyFormat = [{
    $inputs `axis` $axis attr-dict `:` type($inputs) `to` type($result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def MD_ExpandOp : MD_ComputeOp<"expand", [AllElementTypesMatch<["x", "result"]>]> {
  let summary = "broadcasts a tensor to a larger shape";
  let description = [{
    numpy broadcasting of `x` to the result's shape: `x`'s dims align with
    the result's last ones, and each is the result's or 1 (repeated).
    PyTorch's `Tensor.expand`, materialised. Any element type. The
    gradient is `md.sum_to` of the result's back to `x`'s shape. An expand
    to `x`'s own type folds to `x`.

    ```mlir
    %kv = md.expand %k : tensor<8x64x2x1x64xf32> to tensor<8x64x2x4x64xf32>
    ```
  }];
  let arguments = (ins MD_AnyTensor:$x);
  let results = (outs MD_AnyTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def MD_ArangeOp : MD_ComputeOp<"arange"> {
  let summary = "the integers from start (inclusive) to end (exclusive)";
  let description = [{
    A 1-D i32 or i64 tensor `[start, start + 1, ..., end - 1]` of length
    `end - start`; `start < end`. Positions for a positional embedding.

    ```mlir
    %pos = md.arange 0 to 1024 : tensor<1024xi32>
    ```
  }];
  let arguments = (ins I64Attr:$start, I64Attr:$end);
  let results = (outs MD_IndexVector:$result);
  let assemblyFormat = "$start `to` $end attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Reductions and gradient plumbing
//===----------------------------------------------------------------------===//

class MD_ReductionOp<string mnemonic, string what>
    : MD_ComputeOp<mnemonic, [AllElementTypesMatch<["x", "result"]>]> {
  let summary = what # " over a list of dims";
  let description = [{
    The }] # what # [{ of `x` over `dims`, which must be distinct and in
    range (a negative dim counts from the end) and not empty. The reduced
    dims are dropped from the result shape, or kept with size 1 with
    `keepdim`. Accumulated in f32, rounded to the element type of `x`. The
    gradient is `md.}] # mnemonic # [{_grad`.

    ```mlir
    %s = md.}] # mnemonic # [{ %x dims [0, 1] : tensor<8x64x768xf32> to tensor<768xf32>
    %k = md.}] # mnemonic # [{ %x dims [-1] keepdim : tensor<8x64x768xf32> to tensor<8x64x1xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$x, DenseI64ArrayAttr:$dims, UnitAttr:$keepdim);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = [{
    $x `dims` $dims (`keepdim` $keepdim^)? attr-dict `:` type($x) `to` type($result)
  }];
  let hasVerifier = 1;
}

def MD_SumOp : MD_ReductionOp<"sum", "sum">;
def MD_MeanOp : MD_ReductionOp<"mean", "mean">;

def MD_SumToOp : MD_ComputeOp<"sum_to", [AllElementTypesMatch<["g", "result"]>]> {
  let summary = "sums a gradient down to the shape of a broadcast operand";
  let description = [{
    The reverse of numpy broadcasting: the result type is the shape an
    operand had before it was broadcast to the shape of `g`, and the result
    type must broadcast to `g`'s. `g` is summed over its extra leading dims
    and over every dim where the result has size 1. Accumulated in f32. A
    `sum_to` to `g`'s own type folds to `g`.

    ```mlir
    %db = md.sum_to %g : tensor<4x16x8xf32> to tensor<16x8xf32>
    %dc = md.sum_to %g : tensor<4x16x8xf32> to tensor<4x1x8xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$g);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = "$g attr-dict `:` type($g) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def MD_AccumulateOp : MD_ComputeOp<"accumulate", [AllTypesMatch<["acc", "result"]>]> {
  let summary = "adds a gradient to an accumulator of possibly wider type";
  let description = [{
    `result = acc + g` elementwise; `acc` and `g` have the same shape and
    any float element types; the sum is computed in f32 and the result has
    the type of `acc`. Gradient accumulation across micro-batches keeps
    `acc` in f32 while `g` may be bf16.

    ```mlir
    %acc2 = md.accumulate %acc, %g : tensor<768x768xf32>, tensor<768x768xbf16>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$acc, MD_FloatTensor:$g);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = "$acc `,` $g attr-dict `:` type($acc) `,` type($g)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gradient ops (vector-Jacobian products)
//===----------------------------------------------------------------------===//

def MD_MatmulGradOp : MD_ComputeOp<"matmul_grad", [
    AllTypesMatch<["a", "da"]>, AllTypesMatch<["b", "db"]>,
    AllElementTypesMatch<["dy", "a", "b"]>]> {
  let summary = "gradients of md.matmul";
  let description = [{
    Given `dy` [..., M, N], the upstream gradient of
    `md.matmul %a, %b` with the same `transpose_a`/`transpose_b`, returns
    `da` (the type of `a`), `db` (the type of `b`) and, with `has_bias`,
    `dbias` [N]. Without transposes and with a 2-D `b`:
    `da = dy · b^T`, `db = sum over the batch dims of a^T · dy`,
    `dbias = sum of dy over every dim but the last`. Accumulated in f32.

    ```mlir
    %dx, %dw, %db = md.matmul_grad %dy, %x, %w transpose_b has_bias : tensor<8x3072xf32>, tensor<8x768xf32>, tensor<3072x768xf32> -> tensor<8x768xf32>, tensor<3072x768xf32>, tensor<3072xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$dy, MD_FloatTensor:$a, MD_FloatTensor:$b,
                       UnitAttr:$transpose_a, UnitAttr:$transpose_b, UnitAttr:$has_bias);
  let results = (outs MD_FloatTensor:$da, MD_FloatTensor:$db,
                      Optional<MD_FloatTensor>:$dbias);
  let assemblyFormat = [{
    $dy `,` $a `,` $b (`transpose_a` $transpose_a^)? (`transpose_b` $transpose_b^)?
    (`has_bias` $has_bias^)? attr-dict `:` type($dy) `,` type($a) `,` type($b)
    `->` type($da) `,` type($db) (`,` type($dbias)^)?
  }];
  let hasVerifier = 1;
}

def MD_GeluGradOp : MD_ComputeOp<"gelu_grad", [SameOperandsAndResultType]> {
  let summary = "gradient of md.gelu";
  let description = [{
    `dx = dy * gelu'(x)`, with the derivative of the exact or, with
    `approximate`, the tanh form, evaluated in f32. `dy`, `x` and `dx` have
    the same type.

    ```mlir
    %dx = md.gelu_grad %dy, %x approximate : tensor<8x3072xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$dy, MD_FloatTensor:$x, UnitAttr:$approximate);
  let results = (outs MD_FloatTensor:$dx);
  let assemblyFormat = "$dy `,` $x (`approximate` $approximate^)? attr-dict `:` type($x)";
}

def MD_ReluGradOp : MD_ComputeOp<"relu_grad", [SameOperandsAndResultType]> {
  let summary = "gradient of md.relu";
  let description = [{
    `dx = x > 0 ? dy : 0`. `dy`, `x` and `dx` have the same type.

    ```mlir
    %dx = md.relu_grad %dy, %x : tensor<8x64xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$dy, MD_FloatTensor:$x);
  let results = (outs MD_FloatTensor:$dx);
  let assemblyFormat = "$dy `,` $x attr-dict `:` type($x)";
}

def MD_SiluGradOp : MD_ComputeOp<"silu_grad", [SameOperandsAndResultType]> {
  let summary = "gradient of md.silu";
  let description = [{
    `dx = dy * s * (1 + x * (1 - s))` with `s = sigmoid(x)`, evaluated in
    f32. `dy`, `x` and `dx` have the same type.

    ```mlir
    %dx = md.silu_grad %dy, %x : tensor<8x64xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$dy, MD_FloatTensor:$x);
  let results = (outs MD_FloatTensor:$dx);
  let assemblyFormat = "$dy `,` $x attr-dict `:` type($x)";
}

def MD_ElementwiseGradOp : MD_ComputeOp<"elementwise_grad", [SameOperandsAndResultType]> {
  let summary = "gradient of md.elementwise";
  let description = [{
    `dx = dy * fn'(x)` for each element, evaluated in f32: `exp(x)`, `1 /
    x`, `cos(x)`, `-sin(x)`, `1 - tanh(x)^2`, `s (1 - s)` with `s =
    sigmoid(x)`, `sign(x)` (0 at 0, as torch's), `-1`, `1 / (2 sqrt(x))`
    and `-1 / (2 x sqrt(x))`. `dy`, `x` and `dx` have the same type.

    ```mlir
    %dx = md.elementwise_grad tanh %dy, %x : tensor<8x64xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$dy, MD_FloatTensor:$x,
                       MD_ElementwiseFn:$fn);
  let results = (outs MD_FloatTensor:$dx);
  let assemblyFormat = "$fn $dy `,` $x attr-dict `:` type($x)";
}

def MD_LayerNormGradOp : MD_ComputeOp<"layer_norm_grad", [
    AllTypesMatch<["dy", "x", "dx"]>, AllTypesMatch<["gamma", "dgamma"]>]> {
  let summary = "gradients of md.layer_norm";
  let description = [{
    Given `dy`, the upstream gradient of `md.layer_norm %x, %gamma` with the
    same `eps`, recomputes the mean and 1/std of `x` over the last dim (f32)
    and returns `dx` (the type of `x`), `dgamma` [D] and, with `has_beta`,
    `dbeta` [D] (the type of `gamma`). With `xhat = (x - mean) * rstd` and
    `g = dy * gamma`: `dx = rstd * (g - mean(g) - xhat * mean(g * xhat))`,
    `dgamma = sum(dy * xhat)` and `dbeta = sum(dy)` over every dim but the
    last, accumulated in f32.

    ```mlir
    %dx, %dg, %db = md.layer_norm_grad %dy, %x, %g has_beta : tensor<8x768xf32>, tensor<8x768xf32>, tensor<768xf32> -> tensor<8x768xf32>, tensor<768xf32>, tensor<768xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$dy, MD_FloatTensor:$x, MD_FloatTensor:$gamma,
                       DefaultValuedAttr<F64Attr, "1e-5">:$eps, UnitAttr:$has_beta);
  let results = (outs MD_FloatTensor:$dx, MD_FloatTensor:$dgamma,
                      Optional<MD_FloatTensor>:$dbeta);
  let assemblyFormat = [{
    $dy `,` $x `,` $gamma (`eps` $eps^)? (`has_beta` $has_beta^)? attr-dict
    `:` type($dy) `,` type($x) `,` type($gamma)
    `->` type($dx) `,` type($dgamma) (`,` type($dbeta)^)?
  }];
  let hasVerifier = 1;
}

def MD_RmsNormGradOp : MD_ComputeOp<"rms_norm_grad", [
    AllTypesMatch<["dy", "x", "dx"]>, AllTypesMatch<["gamma", "dgamma"]>]> {
  let summary = "gradients of md.rms_norm";
  let description = [{
    Given `dy`, the upstream gradient of `md.rms_norm %x, %gamma` with the
    same `eps`, recomputes `r = 1 / sqrt(mean(x^2) + eps)` over the last dim
    (f32) and returns `dx` (the type of `x`) and `dgamma` [D] (the type of
    `gamma`): with `g = dy * gamma`, `dx = r * g - x * r^3 * mean(g * x)` and
    `dgamma = sum(dy * x * r)` over every dim but the last, accumulated in
    f32.

    ```mlir
    %dx, %dg = md.rms_norm_grad %dy, %x, %g : tensor<8x768xf32>, tensor<8x768xf32>, tensor<768xf32> -> tensor<8x768xf32>, tensor<768xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$dy, MD_FloatTensor:$x, MD_FloatTensor:$gamma,
                       DefaultValuedAttr<F64Attr, "1e-6">:$eps);
  let results = (outs MD_FloatTensor:$dx, MD_FloatTensor:$dgamma);
  let assemblyFormat = [{
    $dy `,` $x `,` $gamma (`eps` $eps^)? attr-dict
    `:` type($dy) `,` type($x) `,` type($gamma) `->` type($dx) `,` type($dgamma)
  }];
  let hasVerifier = 1;
}

def MD_BatchNormGradOp : MD_ComputeOp<"batch_norm_grad", [
    AllTypesMatch<["dy", "x", "dx"]>, AllTypesMatch<["gamma", "dgamma", "dbeta"]>,
    AllTypesMatch<["mean", "invstd"]>]> {
  let summary = "gradients of md.batch_norm from its batch statistics";
  let description = [{
    Given `dy`, the upstream gradient of `md.batch_norm %x, %gamma, %beta`,
    and the `mean` and `invstd` (f32 [C]) it returned (or their all-reduced
    versions under SyncBatchNorm), returns `dx` (the type of `x`), `dgamma`
    and `dbeta` (the type of `gamma`). With `xhat = (x - mean) * invstd` and
    sums over every dim but the last: `dbeta = sum(dy)`,
    `dgamma = sum(dy * xhat)`,
    `dx = gamma * invstd * (dy - dbeta / n - xhat * dgamma / n)` with n the
    number of elements per channel. Accumulated in f32.

    ```mlir
    %dx, %dg, %db = md.batch_norm_grad %dy, %x, %g, %mean, %invstd : tensor<8x16x16x32xf32>, tensor<8x16x16x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<8x16x16x32xf32>, tensor<32xf32>, tensor<32xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$dy, MD_FloatTensor:$x, MD_FloatTensor:$gamma,
                       MD_F32Vector:$mean, MD_F32Vector:$invstd);
  let results = (outs MD_FloatTensor:$dx, MD_FloatTensor:$dgamma, MD_FloatTensor:$dbeta);
  let assemblyFormat = [{
    $dy `,` $x `,` $gamma `,` $mean `,` $invstd attr-dict
    `:` type($dy) `,` type($x) `,` type($gamma) `,` type($mean) `,` type($invstd)
    `->` type($dx) `,` type($dgamma) `,` type($dbeta)
  }];
  let hasVerifier = 1;
}

def MD_SoftmaxGradOp : MD_ComputeOp<"softmax_grad", [SameOperandsAndResultType]> {
  let summary = "gradient of md.softmax from its output";
  let description = [{
    Given `dy` and the softmax output `y` along `axis` (default -1):
    `dx = y * (dy - sum(dy * y))`, the sum along `axis` in f32. `dy`, `y`
    and `dx` have the same type.

    ```mlir
    %dx = md.softmax_grad %dy, %y : tensor<8x10xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$dy, MD_FloatTensor:$y,
                       DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs MD_FloatTensor:$dx);
  let assemblyFormat = "$dy `,` $y (`axis` $axis^)? attr-dict `:` type($y)";
  let hasVerifier = 1;
}

def MD_CausalAttentionGradOp : MD_ComputeOp<"causal_attention_grad", [SameOperandsAndResultType]> {
  let summary = "gradients of md.causal_attention";
  let description = [{
    Given `dout` [B, T, C], the upstream gradient of
    `md.causal_attention %q, %k, %v` with the same `num_heads`, recomputes
    the attention probabilities P per head and returns `dq`, `dk`, `dv`, all
    of the type of `q`: `dv = P^T dout`, `dP = dout V^T`,
    `dS = P * (dP - rowsum(dP * P))`, `dq = dS K / sqrt(d)`,
    `dk = dS^T Q / sqrt(d)`, softmax terms in f32. `window` is the forward's.

    ```mlir
    %dq, %dk, %dv = md.causal_attention_grad %do, %q, %k, %v num_heads 12 : tensor<8x64x768xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor3D:$dout, MD_FloatTensor3D:$q, MD_FloatTensor3D:$k,
                       MD_FloatTensor3D:$v, ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$window);
  let results = (outs MD_FloatTensor3D:$dq, MD_FloatTensor3D:$dk, MD_FloatTensor3D:$dv);
  let assemblyFormat = [{
    $dout `,` $q `,` $k `,` $v `num_heads` $num_heads (`window` $window^)? attr-dict `:` type($q)
  }];
  let hasVerifier = 1;
}

def MD_SliceGradOp : MD_ComputeOp<"slice_grad", [AllElementTypesMatch<["dy", "result"]>]> {
  let summary = "the gradient of md.slice";
  let description = [{
    A tensor of the result type (the sliced `x`'s), zero but at the
    positions `md.slice` with the same `axis`, `start` and `step` read,
    which hold `dy`: the result sliced so gives `dy` back.

    ```mlir
    %dx = md.slice_grad %dy axis 2 start 32 step 1 : tensor<8x64x32xf32> to tensor<8x64x128xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$dy, ConfinedAttr<I64Attr, [IntNonNegative]>:$axis,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$start,
                       ConfinedAttr<I64Attr, [IntPositive]>:$step);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = [{
    $dy `axis` $axis `start` $start `step` $step attr-dict `:` type($dy) `to` type($result)
  }];
  let hasVerifier = 1;
}

def MD_EmbeddingGradOp : MD_ComputeOp<"embedding_grad", [AllElementTypesMatch<["dy", "result"]>]> {
  let summary = "gradient of md.embedding with respect to the table (scatter-add)";
  let description = [{
    Given `dy` [..., D], the upstream gradient of `md.embedding %table, %ids`
    with `ids` [...], returns the table gradient [V, D] with
    V = `num_embeddings`: `result[v, :] = sum of dy[i..., :] over the
    positions where ids[i...] = v` (a scatter-add accumulated in f32; rows
    never looked up are 0). The element type is that of `dy`.

    ```mlir
    %dwte = md.embedding_grad %dy, %ids num_embeddings 50304 : tensor<8x64x768xf32>, tensor<8x64xi32> -> tensor<50304x768xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$dy, MD_IndexTensor:$ids,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_embeddings);
  let results = (outs MD_FloatTensor2D:$result);
  let assemblyFormat = [{
    $dy `,` $ids `num_embeddings` $num_embeddings attr-dict
    `:` type($dy) `,` type($ids) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MD_CrossEntropyGradOp : MD_ComputeOp<"cross_entropy_grad", [AllTypesMatch<["logits", "dlogits"]>]> {
  let summary = "gradient of md.cross_entropy with respect to the logits";
  let description = [{
    Given `dloss` (`tensor<f32>`), the upstream gradient of
    `md.cross_entropy %logits, %targets` with the same `ignore_index`,
    returns `dlogits = dloss * (softmax(logits) - onehot(target)) / n` with n
    the number of targets not ignored; rows whose target is ignored are 0.
    Computed in f32 with the maximum subtracted; `dlogits` has the type of
    `logits`.

    ```mlir
    %dl = md.cross_entropy_grad %one, %logits, %y ignore_index -100 : tensor<f32>, tensor<8x64x50304xf32>, tensor<8x64xi32>
    ```
  }];
  let arguments = (ins MD_ScalarTensor:$dloss, MD_FloatTensor:$logits, MD_IndexTensor:$targets,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs MD_FloatTensor:$dlogits);
  let assemblyFormat = [{
    $dloss `,` $logits `,` $targets (`ignore_index` $ignore_index^)? attr-dict
    `:` type($dloss) `,` type($logits) `,` type($targets)
  }];
  let hasVerifier = 1;
}

class MD_ReductionGradOp<string mnemonic, string what, string formula>
    : MD_ComputeOp<mnemonic, [AllElementTypesMatch<["dy", "result"]>]> {
  let summary = "gradient of md." # what;
  let description = [{
    Given `dy`, the upstream gradient of `md.}] # what # [{ %x dims [...]`
    (with the same `dims` and `keepdim`), broadcasts it back to the type of
    `x`, which is the result type: }] # formula # [{ `dy` must be the shape
    of the result type reduced over `dims`.

    ```mlir
    %dx = md.}] # mnemonic # [{ %dy dims [0, 1] : tensor<768xf32> to tensor<8x64x768xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$dy, DenseI64ArrayAttr:$dims, UnitAttr:$keepdim);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = [{
    $dy `dims` $dims (`keepdim` $keepdim^)? attr-dict `:` type($dy) `to` type($result)
  }];
  let hasVerifier = 1;
}

def MD_SumGradOp : MD_ReductionGradOp<"sum_grad", "sum",
    "every element of `x` gets the `dy` of the sum it went into.">;
def MD_MeanGradOp : MD_ReductionGradOp<"mean_grad", "mean",
    "every element of `x` gets the `dy` of the mean it went into divided by the number of elements reduced (the product of the reduced dims).">;

#endif // MD_DIALECT_MDCOMPUTEOPS_TD
