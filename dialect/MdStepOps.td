//===- MdStepOps.td - md per-step program ops ------------------*- tablegen -*-===//
//
// The ops `md-apply-plan` builds the per-step program from: persistent
// per-rank state (`md.state` and its loads and stores), the micro-batch loop
// of gradient accumulation, the data cursor, the loss the hooks read, and the
// rank's shard of a replicated flat buffer. docs/passes.md describes the
// program they form.
//
//===----------------------------------------------------------------------===//

#ifndef MD_DIALECT_MDSTEPOPS_TD
#define MD_DIALECT_MDSTEPOPS_TD

include "dialect/MdBase.td"
include "dialect/MdAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

def MD_StateOp : MD_Op<"state", [Symbol, HasParent<"ModelOp">]> {
  let summary = "a persistent per-rank buffer: master weights, optimizer state, ...";
  let description = [{
    Declares a buffer every rank keeps from one step to the next. A sharded
    state (`shard(N) group G`) holds this rank's shard of an N-element flat
    buffer: `ceil(N / |G|)` elements, so its type is 1-D with a dynamic dim.
    A full state has a static type. `role` says what it holds:

    - `master`: the master weights of wrap unit `unit` (its trainable
      parameters flattened in `md.param` order), initialised from the
      parameters' initialisers and updated by the optimizer;
    - `params`: a copy of the master weights in the param dtype, initialised
      from them and refreshed after every step: gathered and full (`zero1`,
      `fsdp-grad-op`), or sharded or replicated like the master when the
      param dtype differs from it (`fsdp-full`, hybrid, `ddp`);
    - `exp_avg`, `exp_avg_sq`, `momentum`: optimizer state, zero-initialised;
    - `grad_acc`: the gradient accumulator of `md.micro_steps`, which exists
      only when there is more than one micro-step per step;
    - `frozen`: the frozen parameters of unit `unit`, flattened in
      `md.param` order, in the param dtype: initialised from their
      initialisers (or `--init`), never updated, with no gradient and no
      optimizer state; sharded and gathered around each use under
      `fsdp-full`, whole under every other plan.

    ```mlir
    md.state @u1.master : tensor<?xf32> shard(4160) group world role master unit 1
    md.state @u1.params : tensor<4160xbf16> role params unit 1
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<AnyRankedTensor>:$type,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$shard,
                       OptionalAttr<MD_GroupAttr>:$group,
                       MD_StateRoleAttr:$role,
                       OptionalAttr<I64Attr>:$unit);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
    bool isSharded() { return getShard().has_value(); }
    /// The elements of the flat buffer the state is (a shard of).
    int64_t getFlatNumel();
  }];
}

def MD_StateLoadOp : MD_Op<"state_load", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead<MD_StateResource>]>]> {
  let summary = "reads an md.state";
  let description = [{
    ```mlir
    %m = md.state_load @u1.master : tensor<?xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$state);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$state attr-dict `:` type($result)";
}

def MD_StateStoreOp : MD_Op<"state_store", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemWrite<MD_StateResource>]>]> {
  let summary = "writes an md.state";
  let description = [{
    ```mlir
    md.state_store %m2, @u1.master : tensor<?xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$value, FlatSymbolRefAttr:$state);
  let assemblyFormat = "$value `,` $state attr-dict `:` type($value)";
}

def MD_BatchOp : MD_Op<"batch", [
    MemoryEffects<[MemRead<MD_StateResource>, MemWrite<MD_StateResource>]>]> {
  let summary = "this rank's next micro-batch";
  let description = [{
    Reads the next `micro_batch` samples of this rank's share of the data
    (the distributed sampler gives every rank disjoint samples and the same
    number of batches), typed like the arguments of the forward function of
    the enclosing `md.train`. The values differ between ranks.

    ```mlir
    %x, %y = md.batch : tensor<16x784xf32>, tensor<16xi32>
    ```
  }];
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = "attr-dict `:` type($results)";
  let hasVerifier = 1;
}

def MD_MicroStepsOp : MD_Op<"micro_steps", [
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects,
    NoRegionArguments]> {
  let summary = "the micro-steps of gradient accumulation but the last";
  let description = [{
    Runs its body A − 1 times, where A = global_batch / (micro_batch × W) is
    the number of micro-steps per optimizer step, known once W is. The body
    computes a micro-batch's gradients and adds them to `grad_acc` states
    with `md.grad_accumulate`; it reduces nothing (PyTorch's `no_sync`). The
    last micro-step follows it in the step region and reduces.

    ```mlir
    md.micro_steps {
      %x = md.batch : tensor<8x4xf32>
      ...
      md.grad_accumulate %g into @u0.grad_acc : tensor<40xf32>
    }
    ```
  }];
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

def MD_AccumScaleOp : MD_Op<"accum_scale", [Pure]> {
  let summary = "1 / the number of micro-steps per step";
  let description = [{
    1/A as an f32 scalar, A = global_batch / (micro_batch × W): the seed of
    the backward pass, so that the accumulated gradient is the mean over the
    step's micro-batches. The same on every rank.

    ```mlir
    %s = md.accum_scale : tensor<f32>
    ```
  }];
  let results = (outs MD_ScalarTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def MD_RecordLossOp : MD_Op<"record_loss", [
    MemoryEffects<[MemWrite<MD_StateResource>]>]> {
  let summary = "adds a micro-step's loss to the step's loss";
  let description = [{
    The step's loss, which `md.loss` reads in hooks, is the mean of the
    losses recorded in the step's micro-steps, on this rank.

    ```mlir
    md.record_loss %loss : tensor<f32>
    ```
  }];
  let arguments = (ins MD_ScalarTensor:$loss);
  let assemblyFormat = "$loss attr-dict `:` type($loss)";
}

def MD_GradAccumulateOp : MD_Op<"grad_accumulate", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead<MD_StateResource>, MemWrite<MD_StateResource>]>]> {
  let summary = "adds a micro-step's gradient to a grad_acc state";
  let description = [{
    Inside `md.micro_steps`: `acc = g` on the first micro-step of a step,
    `acc = acc + g` after it, in the accumulator's dtype (f32), `g` widened
    exactly. `g` has the static shape of the accumulator.

    ```mlir
    md.grad_accumulate %g into @u0.grad_acc : tensor<40xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$grad, FlatSymbolRefAttr:$acc);
  let assemblyFormat = "$grad `into` $acc attr-dict `:` type($grad)";
  let hasVerifier = 1;
}

def MD_GradTotalOp : MD_Op<"grad_total", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead<MD_StateResource>]>]> {
  let summary = "the last micro-step's gradient plus the accumulated ones";
  let description = [{
    After `md.micro_steps`: `acc + g` when the step has more than one
    micro-step, else `g`, as f32 (the accumulator's type).

    ```mlir
    %t = md.grad_total %g from @u0.grad_acc : tensor<40xbf16> -> tensor<40xf32>
    ```
  }];
  let arguments = (ins MD_FloatTensor:$grad, FlatSymbolRefAttr:$acc);
  let results = (outs MD_FloatTensor:$result);
  let assemblyFormat = "$grad `from` $acc attr-dict `:` type($grad) `->` type($result)";
  let hasVerifier = 1;
}

def MD_ShardSliceOp : MD_Op<"shard_slice", [Pure]> {
  let summary = "this rank's shard of a replicated flat buffer";
  let description = [{
    The i-th of the |G| equal slices of a 1-D buffer of N elements, where i
    is this rank's index in `group`: `ceil(N / |G|)` elements, zero-padded
    past N. No communication: every rank holds the whole buffer. The result
    differs between ranks; its size does not.

    ```mlir
    %s = md.shard_slice %g group world : tensor<40xf32> -> tensor<?xf32>
    ```
  }];
  let arguments = (ins MD_AnyTensor:$input, MD_GroupAttr:$group);
  let results = (outs MD_AnyTensor:$result);
  let assemblyFormat = [{
    $input `group` custom<Group>($group) attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

#endif // MD_DIALECT_MDSTEPOPS_TD
