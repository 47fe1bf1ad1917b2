//===- MdControlOps.td - md control ops ---------------------------*- tablegen -*-===//

#ifndef MD_DIALECT_MDCONTROLOPS_TD
#define MD_DIALECT_MDCONTROLOPS_TD

include "dialect/MdBase.td"
include "dialect/MdAttrs.td"
include "dialect/MdInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

//===----------------------------------------------------------------------===//
// Values of the SPMD environment
//===----------------------------------------------------------------------===//

class MD_EnvValueOp<string mnemonic, string what, Type ty, list<Trait> traits = []>
    : MD_Op<mnemonic, !listconcat([Pure], traits)> {
  let results = (outs ty:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let summary = what;
}

def MD_RankOp : MD_EnvValueOp<"rank", "this process's global rank (varies between ranks)", I64> {
  let description = [{
    The global rank, 0 ≤ rank < W. The desync checker treats it, and every
    value computed from it, as varying between ranks.

    ```mlir
    %r = md.rank : i64
    ```
  }];
}
def MD_LocalRankOp : MD_EnvValueOp<"local_rank", "this process's rank on its node (varies)", I64> {
  let description = [{
    ```mlir
    %lr = md.local_rank : i64
    ```
  }];
}
def MD_WorldSizeOp : MD_EnvValueOp<"world_size", "the number of ranks W (uniform)", I64> {
  let description = [{
    ```mlir
    %w = md.world_size : i64
    ```
  }];
}
def MD_StepOp : MD_EnvValueOp<"step", "the optimizer step about to run or just run (uniform)", I64> {
  let description = [{
    Counts optimizer steps from 0; inside the `hooks` region of `md.train` it
    is the number of steps completed. The same on every rank.

    ```mlir
    %s = md.step : i64
    ```
  }];
}
def MD_EpochOp : MD_EnvValueOp<"epoch", "the current data epoch (uniform)", I64> {
  let description = [{
    ```mlir
    %e = md.epoch : i64
    ```
  }];
}

def MD_WallTimeOp : MD_Op<"wall_time", [MemoryEffects<[MemRead<MD_HostIOResource>]>]> {
  let summary = "this rank's wall clock in seconds (varies between ranks)";
  let description = [{
    Seconds since the job started, as this rank's clock reads them. Clocks of
    two ranks never agree exactly, so a branch on it is a desync; use
    `md.every N minutes`, which rank 0 decides and broadcasts.

    ```mlir
    %t = md.wall_time : f64
    ```
  }];
  let results = (outs F64:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def MD_FileExistsOp : MD_Op<"file_exists", [MemoryEffects<[MemRead<MD_HostIOResource>]>]> {
  let summary = "whether a path exists on this rank's file system (varies)";
  let description = [{
    ```mlir
    %e = md.file_exists "STOP" : i1
    ```
  }];
  let arguments = (ins StrAttr:$path);
  let results = (outs I1:$result);
  let assemblyFormat = "$path attr-dict `:` type($result)";
}

def MD_LossOp : MD_Op<"loss", [Pure]> {
  let summary = "this rank's loss of the last step (varies between ranks)";
  let description = [{
    The loss this rank computed on its own micro-batches in the step just
    run, before any reduction: it differs between ranks. Branching on it
    around a collective is a desync; branch on the reduced
    `md.all_reduce %l avg group world` (the language's `mean(loss)`) instead.

    ```mlir
    %l = md.loss : tensor<f32>
    ```
  }];
  let results = (outs MD_ScalarTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def MD_LrOp : MD_Op<"lr", [Pure]> {
  let summary = "the learning rate the recipe's schedule gives at a step";
  let description = [{
    ```mlir
    %lr = md.lr %step : f32
    ```
  }];
  let arguments = (ins I64:$step);
  let results = (outs F32:$result);
  let assemblyFormat = "$step attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Structured control flow
//===----------------------------------------------------------------------===//

def MD_YieldOp : MD_Op<"yield", [
    Pure, ReturnLike, Terminator,
    ParentOneOf<["IfOp", "EveryOp", "ForOp", "MicroStepsOp"]>]> {
  let summary = "ends a region of `md.if`, `md.every`, `md.for` or `md.micro_steps`";
  let description = [{
    Yields the values of an `md.if` branch; with no operands it is implicit in
    the custom form.

    ```mlir
    md.yield %v : tensor<f32>
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$results);
  let assemblyFormat = "attr-dict ($results^ `:` type($results))?";
  let builders = [OpBuilder<(ins), [{ /* nothing to yield */ }]>];
}

def MD_IfOp : MD_Op<"if", [
    DeclareOpInterfaceMethods<RegionBranchOpInterface>,
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects,
    NoRegionArguments]> {
  let summary = "runs one of two regions depending on an i1";
  let description = [{
    A branch of the recipe. When the condition can differ between ranks
    (it depends on `md.rank`, the local loss, `md.wall_time`, ...) and a region
    contains a collective, the program would deadlock; the desync checker
    rejects it.

    ```mlir
    %is0 = arith.cmpi eq, %r, %c0 : i64
    md.if %is0 {
      md.log "loss"(%loss : tensor<f32>)
    }
    %x = md.if %c -> (tensor<f32>) {
      md.yield %a : tensor<f32>
    } else {
      md.yield %b : tensor<f32>
    }
    ```
  }];
  let arguments = (ins I1:$condition);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$thenRegion, MaxSizedRegion<1>:$elseRegion);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    OpBuilder<(ins "::mlir::TypeRange":$resultTypes, "::mlir::Value":$cond,
                   "bool":$withElse)>
  ];
  let extraClassDeclaration = [{
    ::mlir::Block *thenBlock() { return &getThenRegion().front(); }
    ::mlir::Block *elseBlock() {
      return getElseRegion().empty() ? nullptr : &getElseRegion().front();
    }
  }];
}

def MD_EveryOp : MD_Op<"every", [
    DeclareOpInterfaceMethods<RegionBranchOpInterface>,
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects,
    NoRegionArguments]> {
  let summary = "a hook that runs every N steps, seconds or minutes";
  let description = [{
    `md.every 250 steps` runs its body after steps 250, 500, ...
    A time-based period (`seconds`, `minutes`) is decided by rank 0's clock and
    broadcast, so it fires on every rank at the same step, never on some ranks
    only. With `rank0_only`, the body runs on rank 0 alone and must contain no
    collective.

    ```mlir
    md.every 500 steps {
      md.save sharded "ckpt"
    }
    md.every 30 minutes rank0_only {
      md.print "still alive"
    }
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntPositive]>:$period,
                       MD_PeriodUnitAttr:$unit, UnitAttr:$rank0_only);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$period custom<PeriodUnit>($unit) (`rank0_only` $rank0_only^)? attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

def MD_ForOp : MD_Op<"for", [
    DeclareOpInterfaceMethods<RegionBranchOpInterface>,
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects]> {
  let summary = "a counted loop from lb (inclusive) to ub (exclusive)";
  let description = [{
    A loop whose trip count is `ub - lb`. If either bound can differ between
    ranks and the body contains a collective, some ranks would run it more
    often: the desync checker rejects it.

    ```mlir
    md.for %i = %c0 to %n {
      md.print "i"(%i : i64)
    }
    ```
  }];
  let arguments = (ins I64:$lowerBound, I64:$upperBound);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins "::mlir::Value":$lb, "::mlir::Value":$ub)>];
  let extraClassDeclaration = [{
    ::mlir::Value getInductionVar() { return getBody().getArgument(0); }
  }];
}

def MD_ExitOp : MD_Op<"exit", [MemoryEffects<[MemWrite<MD_HostIOResource>]>]> {
  let summary = "ends training after the current step";
  let description = [{
    The `stop` statement of the recipe, and with `failure` its
    `fail("why")`: the run then ends as failed (mdrun's exit status 3), with
    the reason, which a failure must have. Every rank must reach the same
    decision: an `md.exit` under a condition that varies between ranks leaves
    the other ranks waiting in the next step's collectives, which the desync
    checker reports.

    ```mlir
    md.exit "STOP file found"
    md.exit "loss diverged" failure
    ```
  }];
  let arguments = (ins OptionalAttr<StrAttr>:$reason, UnitAttr:$failure);
  let assemblyFormat = "($reason^)? (`failure` $failure^)? attr-dict";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Side effects of the recipe
//===----------------------------------------------------------------------===//

class MD_EffectOp<string mnemonic, list<Trait> traits = []>
    : MD_Op<mnemonic, !listconcat([MemoryEffects<[MemWrite<MD_HostIOResource>]>], traits)> {
  let hasVerifier = 1;
}

def MD_LogOp : MD_EffectOp<"log"> {
  let summary = "records named values in the metrics log";
  let description = [{
    Writes `tag` and the values to the metrics log (JSONL) and the progress
    line. With `rank0_only` only rank 0 writes: a pure side effect, legal
    under any condition. The values are parenthesised: without them, a log
    of no values followed by `%v = ...` would read `%v` as its value.

    ```mlir
    md.log "train"(%loss, %lr : tensor<f32>, f32) rank0_only
    ```
  }];
  let arguments = (ins StrAttr:$tag, Variadic<AnyType>:$values, UnitAttr:$rank0_only);
  let assemblyFormat = [{
    $tag (`(` $values^ `:` type($values) `)`)? (`rank0_only` $rank0_only^)? attr-dict
  }];
}

def MD_PrintOp : MD_EffectOp<"print"> {
  let summary = "prints a message and values on the console";
  let description = [{
    ```mlir
    md.print "step"(%s : i64) rank0_only
    ```
  }];
  let arguments = (ins StrAttr:$message, Variadic<AnyType>:$values, UnitAttr:$rank0_only);
  let assemblyFormat = [{
    $message (`(` $values^ `:` type($values) `)`)? (`rank0_only` $rank0_only^)? attr-dict
  }];
}

def MD_SaveOp : MD_EffectOp<"save"> {
  let summary = "writes a checkpoint (collective: every rank must run it)";
  let description = [{
    `full` gathers the parameters to rank 0, which writes one safetensors file;
    `sharded` writes one file per rank plus metadata and barriers before the
    atomic rename. Both communicate, so `md.save` must run on every rank and
    cannot be `rank0_only` (md already writes the full file on rank 0 only).
    With `keep K` (K ≥ 1), rank 0 then removes the older checkpoints of the
    same format in the directory, keeping the one just written and the K − 1
    newest others.

    ```mlir
    md.save full "ckpt/final"
    md.save sharded
    md.save sharded "ckpt" keep 3
    ```
  }];
  let arguments = (ins MD_CheckpointFormatAttr:$format, OptionalAttr<StrAttr>:$path,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$keep,
                       UnitAttr:$rank0_only);
  let assemblyFormat = [{
    custom<CheckpointFormat>($format) ($path^)? (`keep` $keep^)? (`rank0_only` $rank0_only^)? attr-dict
  }];
}

def MD_EvaluateOp : MD_EffectOp<"evaluate"> {
  let summary = "evaluates the loss on held-out data (collective: all-reduces it)";
  let description = [{
    Runs the forward function over the held-out data, each rank on its shard,
    and all-reduces the mean loss, so the result is the same on every rank.
    It communicates, so it cannot be `rank0_only`.

    ```mlir
    %v = md.evaluate @forward(#md.data<tokens, "val.bin">) batches 100 : tensor<f32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$forward, MD_DataAttr:$data,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$batches,
                       UnitAttr:$rank0_only);
  let results = (outs MD_ScalarTensor:$result);
  let assemblyFormat = [{
    $forward `(` $data `)` (`batches` $batches^)? (`rank0_only` $rank0_only^)? attr-dict `:` type($result)
  }];
}

#endif // MD_DIALECT_MDCONTROLOPS_TD
