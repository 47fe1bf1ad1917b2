//===- MdOptimizerOps.td - md optimizer ops ---------------------------*- tablegen -*-===//
//
// The optimizer step (AdamW, SGD) and gradient-norm clipping. All of them are
// pure value-semantics ops: an update takes the parameter and its optimizer
// state and returns the new ones. Hyper-parameters that are constant for a run
// are F64 attributes; the learning rate, which the schedule changes every
// step, is an `f32` operand (from `md.lr`).
//
//===----------------------------------------------------------------------===//

#ifndef MD_DIALECT_MDOPTIMIZEROPS_TD
#define MD_DIALECT_MDOPTIMIZEROPS_TD

include "dialect/MdBase.td"
include "dialect/MdAttrs.td"
include "dialect/MdInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

//===----------------------------------------------------------------------===//
// Updates
//===----------------------------------------------------------------------===//

def MD_AdamWUpdateOp : MD_Op<"adamw_update", [Pure, InferTypeOpAdaptor]> {
  let summary = "one AdamW step of a parameter (torch.optim.AdamW, amsgrad=False)";
  let description = [{
    Computes one step of PyTorch's `torch.optim.AdamW` with `amsgrad=False`
    for one parameter. `step` is the 1-based number of the step being taken
    (1 on the first update); `lr` is this step's learning rate. All arithmetic
    is in f32; `g` is `grad` converted to f32 (exactly: bf16 and f16 widen
    without rounding):

    ```
    p  = param * (1 - lr * weight_decay)          // decoupled weight decay
    m' = beta1 * m + (1 - beta1) * g              // torch: m.lerp_(g, 1 - beta1)
    v' = beta2 * v + (1 - beta2) * g * g
    bias_correction1 = 1 - beta1^step
    bias_correction2 = 1 - beta2^step
    denom  = sqrt(v') / sqrt(bias_correction2) + eps
    param' = p - (lr / bias_correction1) * m' / denom
    ```

    `param'` is rounded to the element type of `param` (usually the f32
    master weights). `grad` has the shape of `param` and any of bf16, f16 and
    f32; the moments `m` and `v` have the shape of `param` and are always f32.
    The results have the types of `param`, `m` and `v`. Hyper-parameters obey
    the rules of `#md.adamw`: `0 <= beta1 < 1`, `0 <= beta2 < 1`, `eps > 0`,
    `weight_decay >= 0`.

    With `unit N` (an optimizer with parameter groups, `#md.param_group`),
    the operands are wrap unit N's flat buffer or this rank's shard of it,
    and each element takes the weight decay and learning-rate scale of the
    group of the parameter it belongs to (`md.param`'s offset in the unit);
    `weight_decay` is then the default group's. Each rank finds its
    shard's parameters at run time, so one plan serves every rank.

    The custom form lists the types of `param` and `grad`; those of `m` and
    `v` follow from `param`.

    ```mlir
    %p2, %m2, %v2 = md.adamw_update %p, %g, %m, %v, %lr, %step
        beta1 0.9 beta2 0.95 eps 1.0e-08 weight_decay 0.1
        : tensor<768xf32>, tensor<768xbf16>
    %p3, %m3, %v3 = md.adamw_update %s, %gs, %ms, %vs, %lr, %step
        beta1 0.9 beta2 0.95 eps 1.0e-08 weight_decay 0.1 unit 1
        : tensor<?xf32>, tensor<?xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$param, MD_FloatTensor:$grad,
                       MD_FloatTensor:$m, MD_FloatTensor:$v,
                       F32:$lr, I64:$step,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$unit);
  let results = (outs MD_FloatTensor:$new_param, MD_FloatTensor:$new_m,
                      MD_FloatTensor:$new_v);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def MD_SGDUpdateOp : MD_Op<"sgd_update", [Pure, InferTypeOpAdaptor]> {
  let summary = "one SGD step of a parameter (torch.optim.SGD)";
  let description = [{
    Computes one step of PyTorch's `torch.optim.SGD` (`maximize=False`) for
    one parameter, in f32; `g` is `grad` converted to f32:

    ```
    g = g + weight_decay * param                  // when weight_decay != 0
    // with momentum > 0:
    buf' = step == 1 ? g : momentum * buf + (1 - dampening) * g
    g    = nesterov ? g + momentum * buf' : buf'
    param' = param - lr * g
    ```

    `param'` is rounded to the element type of `param`. The momentum buffer
    is an operand (and `buf'` a result) exactly when `momentum > 0`; it has
    the shape of `param` and is f32. `step` is the 1-based optimizer step: as
    in PyTorch, the first step sets `buf' = g` without dampening.

    `momentum`, `dampening` and `weight_decay` default to 0 and are printed
    only when non-zero. `nesterov` needs `momentum > 0` and `dampening = 0`,
    as in PyTorch and `#md.sgd`; `momentum` and `weight_decay` must be >= 0.
    `unit N` as in `md.adamw_update`: per-element weight decay and
    learning-rate scale from the parameters' groups.
    The custom form lists the types of `param` and `grad`; the buffer's
    follows from `param`.

    ```mlir
    %p2 = md.sgd_update %p, %g, %lr, %step : tensor<64x32xf32>, tensor<64x32xf32>
    %p3, %b3 = md.sgd_update %p, %g momentum_buffer %b, %lr, %step
        momentum 0.9 weight_decay 1.0e-04 nesterov
        : tensor<64x32xf32>, tensor<64x32xbf16>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$param, MD_FloatTensor:$grad,
                       Optional<MD_FloatTensor>:$momentum_buffer, F32:$lr,
                       I64:$step, F64Attr:$momentum, F64Attr:$dampening,
                       F64Attr:$weight_decay, UnitAttr:$nesterov,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$unit);
  let results = (outs MD_FloatTensor:$new_param,
                      Optional<MD_FloatTensor>:$new_momentum_buffer);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gradient norm and clipping
//===----------------------------------------------------------------------===//

def MD_GlobalNormOp : MD_Op<"global_norm", [Pure]> {
  let summary = "the 2-norm of several tensors together (or its square)";
  let description = [{
    The Euclidean norm of the concatenation of all operands,
    `sqrt(sum_i sum_j x_ij^2)`, accumulated in f32 whatever the operands'
    element types. With `squared` the result is the sum of squares itself,
    without the square root: the sharded form computes each rank's local
    squared norm, all-reduces it (sum) and takes the square root of the total.
    Takes at least one tensor.

    ```mlir
    %n = md.global_norm %g0, %g1 : tensor<768xf32>, tensor<768x768xbf16> -> tensor<f32>
    %sq = md.global_norm %shard squared : tensor<1024xf32> -> tensor<f32>
    ```
  }];
  let arguments = (ins Variadic<MD_FloatTensor>:$inputs, UnitAttr:$squared);
  let results = (outs MD_ScalarTensor:$result);
  let assemblyFormat = [{
    $inputs (`squared` $squared^)? attr-dict `:` type($inputs) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MD_ClipOp : MD_Op<"clip", [Pure, InferTypeOpAdaptor]> {
  let summary = "scales gradients down to a maximal total norm (clip_grad_norm_)";
  let description = [{
    PyTorch's `torch.nn.utils.clip_grad_norm_` given the total norm `norm`
    (from `md.global_norm`) of the gradients:

    ```
    scale = min(1, max_norm / (norm + 1e-6))      // f32
    g_i'  = g_i * scale                            // in f32, rounded to g_i's type
    ```

    The results have the gradients' types. `max_norm` must be > 0. The last
    operand is the norm, a `tensor<f32>`; the types after the colon are the
    gradients'.

    ```mlir
    %c0, %c1 = md.clip %g0, %g1, %norm max_norm 1.0 : tensor<768xf32>, tensor<768x768xbf16>
    ```
  }];
  let arguments = (ins Variadic<MD_FloatTensor>:$grads, MD_ScalarTensor:$norm,
                       F64Attr:$max_norm);
  let results = (outs Variadic<MD_FloatTensor>:$results);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

#endif // MD_DIALECT_MDOPTIMIZEROPS_TD
