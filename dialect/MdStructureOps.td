//===- MdStructureOps.td - model, param, functions, recipe -*- tablegen -*-===//
//
// The container ops of a training program: the model and its parameters,
// the forward function, user blocks and calls to them, and the recipe.
//
//===----------------------------------------------------------------------===//

#ifndef MD_DIALECT_MDSTRUCTUREOPS_TD
#define MD_DIALECT_MDSTRUCTUREOPS_TD

include "dialect/MdBase.td"
include "dialect/MdAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/FunctionInterfaces.td"
include "mlir/Interfaces/CallInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def MD_ModelOp : MD_Op<"model", [
    IsolatedFromAbove, Symbol, SymbolTable, SingleBlock, NoTerminator,
    NoRegionArguments]> {
  let summary = "a model with its parameters, functions and recipe";
  let description = [{
    The container of one training program. Its body holds `md.param`s,
    one `md.forward`, any number of `md.func`s (user blocks) and at most one
    `md.train`. `world_size` pins W when the user asked for it
    (`mdc --world-size N`); without it every size is symbolic in W.
    `shard_group_size` is the size of the shard group of a hybrid (2-D) mesh.
    `plan` is the parallelism plan md's passes apply (`#md.plan<...>`); a
    plan that runs on one rank (`single`) needs `world_size = 1`, a hybrid
    plan's shard group must match `shard_group_size` when both are given.

    Example:

    ```mlir
    md.model @mlp attributes {world_size = 2 : i64} {
      md.param @fc.weight : tensor<64x32xf32> init #md.init<normal(0.0, 0.02)> unit 0
      md.forward @forward(%x: tensor<8x32xf32>) -> tensor<f32> { ... }
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$world_size,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$shard_group_size,
                       OptionalAttr<MD_PlanAttr>:$plan);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins "::llvm::StringRef":$name)>];
  let extraClassDeclaration = [{
    /// The forward function, or null if the model has none yet.
    ForwardOp getForward();
    /// The recipe, or null.
    TrainOp getTrain();
    /// The number of ranks in `group` when it is statically known.
    std::optional<int64_t> getStaticGroupSize(::md::Group group);
  }];
}

def MD_ParamOp : MD_Op<"param", [Symbol, HasParent<"ModelOp">]> {
  let summary = "a model parameter (global shape, dtype, initialiser, unit)";
  let description = [{
    Declares a parameter by its global (unsharded) shape and dtype. `unit` is
    the wrap unit (FSDP unit) it belongs to once a plan is applied; `offset`,
    set by `md-apply-plan`, is its first element in the unit's flat buffer
    (parameters packed in `md.param` order); `frozen` parameters get no
    gradient and no optimizer state, and `md-apply-plan` moves them to a
    unit of their own (a `frozen` state).

    Example:

    ```mlir
    md.param @h.0.attn.qkv.weight : tensor<2304x768xf32> init #md.init<normal(0.0, 0.02)> unit 1
    md.param @ln_f.bias : tensor<768xf32> init #md.init<zeros> frozen
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<AnyRankedTensor>:$type,
                       MD_InitAttr:$init,
                       OptionalAttr<I64Attr>:$unit,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$offset,
                       UnitAttr:$frozen);
  let assemblyFormat = [{
    $sym_name `:` $type `init` $init (`unit` $unit^)? (`offset` $offset^)? (`frozen` $frozen^)? attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
}

def MD_ParamRefOp : MD_Op<"param_ref", [
    Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the value of a parameter";
  let description = [{
    Reads a parameter of the enclosing model by name. The result type must be
    the parameter's declared type.

    ```mlir
    %w = md.param_ref @fc.weight : tensor<64x32xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$param attr-dict `:` type($result)";
}

// md.func and md.forward share their form: a named function with one region.
class MD_FunctionLikeOp<string mnemonic, list<Trait> traits = []>
    : MD_Op<mnemonic, !listconcat(traits, [
        FunctionOpInterface, IsolatedFromAbove, HasParent<"ModelOp">,
        AutomaticAllocationScope])> {
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<FunctionType>:$function_type,
                       OptionalAttr<DictArrayAttr>:$arg_attrs,
                       OptionalAttr<DictArrayAttr>:$res_attrs);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    ::mlir::Region *getCallableRegion() { return &getBody(); }
    ::llvm::ArrayRef<::mlir::Type> getArgumentTypes() {
      return getFunctionType().getInputs();
    }
    ::llvm::ArrayRef<::mlir::Type> getResultTypes() {
      return getFunctionType().getResults();
    }
    bool isDeclaration() { return false; }
  }];
}

def MD_ForwardOp : MD_FunctionLikeOp<"forward"> {
  let hasVerifier = 1;
  let summary = "the forward function of a model; its first result is the loss";
  let description = [{
    The function md differentiates. Its arguments are one micro-batch as this
    rank sees it (the batch dimension is the micro batch); its first result is
    the scalar loss (`tensor<f32>`), averaged over the micro-batch.

    ```mlir
    md.forward @forward(%x: tensor<8x32xf32>, %y: tensor<8xi32>) -> tensor<f32> {
      ...
      md.return %loss : tensor<f32>
    }
    ```
  }];
}

def MD_FuncOp : MD_FunctionLikeOp<"func"> {
  let summary = "a user block's forward as a callable function";
  let description = [{
    A `block` of the source language, kept as a function so that diagnostics
    can name the call path (forward → block → collective).

    ```mlir
    md.func @Mlp(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
      md.return %x : tensor<8x64xf32>
    }
    ```
  }];
}

def MD_ReturnOp : MD_Op<"return", [
    Pure, ReturnLike, Terminator, HasParent<"ForwardOp, FuncOp">]> {
  let summary = "returns from `md.forward` or `md.func`";
  let description = [{
    ```mlir
    md.return %loss, %logits : tensor<f32>, tensor<8x10xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$operands);
  let assemblyFormat = "attr-dict ($operands^ `:` type($operands))?";
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, {}); }]>];
}

def MD_CallOp : MD_Op<"call", [
    CallOpInterface, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "calls a user block (`md.func`)";
  let description = [{
    ```mlir
    %y = md.call @Mlp(%x) : (tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$callee, Variadic<AnyType>:$operands,
                       OptionalAttr<DictArrayAttr>:$arg_attrs,
                       OptionalAttr<DictArrayAttr>:$res_attrs);
  let results = (outs Variadic<AnyType>);
  let assemblyFormat = [{
    $callee `(` $operands `)` attr-dict `:` functional-type($operands, results)
  }];
  let extraClassDeclaration = [{
    operand_range getArgOperands() { return getOperands(); }
    ::mlir::MutableOperandRange getArgOperandsMutable() { return getOperandsMutable(); }
    ::mlir::CallInterfaceCallable getCallableForCallee() { return getCalleeAttr(); }
    void setCalleeFromCallable(::mlir::CallInterfaceCallable callee) {
      (*this)->setAttr("callee", ::llvm::cast<::mlir::SymbolRefAttr>(callee));
    }
  }];
}

def MD_OptimizerAttr : AnyAttrOf<[MD_AdamWAttr, MD_SGDAttr]>;

def MD_TrainOp : MD_Op<"train", [HasParent<"ModelOp">, NoTerminator, SingleBlock,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the training recipe: data, batch, optimizer, schedule, hooks";
  let description = [{
    The recipe. `global_batch` samples make one optimizer step, read
    `micro_batch` at a time by each rank, so the number of accumulation steps is
    `global_batch / (micro_batch * W)`, which must be a whole number at the W
    the job runs with. The `step` region is the per-step program (empty until
    md's passes derive it); the `hooks` region runs after every step, on every
    rank.

    ```mlir
    md.train @forward data #md.data<synthetic, ""> global_batch 32 micro_batch 8
        optimizer #md.adamw<lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.01>
        schedule #md.schedule<cosine, warmup = 10, steps = 100, min_lr = 0.0>
        seed 1337 clip_grad_norm 1.0 step {
    } hooks {
      md.every 10 steps {
        md.log "loss" rank0_only
      }
    }
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$forward,
                       MD_DataAttr:$data,
                       ConfinedAttr<I64Attr, [IntPositive]>:$global_batch,
                       ConfinedAttr<I64Attr, [IntPositive]>:$micro_batch,
                       MD_OptimizerAttr:$optimizer,
                       MD_ScheduleAttr:$schedule,
                       I64Attr:$seed,
                       OptionalAttr<F64Attr>:$clip_grad_norm,
                       UnitAttr:$sync_batch_norm);
  let regions = (region SizedRegion<1>:$step, SizedRegion<1>:$hooks);
  let assemblyFormat = [{
    $forward `data` $data `global_batch` $global_batch `micro_batch` $micro_batch
    `optimizer` $optimizer `schedule` $schedule `seed` $seed
    (`clip_grad_norm` $clip_grad_norm^)? (`sync_batch_norm` $sync_batch_norm^)?
    attr-dict `step` $step `hooks` $hooks
  }];
  let hasVerifier = 1;
}

#endif // MD_DIALECT_MDSTRUCTUREOPS_TD
