//===- Passes.td - md's passes ------------------------------*- tablegen -*-===//
//
// One `def` per pass, each implemented in its own passes/<Name>.cpp. The
// order they run in is docs/passes.md's table and passes/Pipeline.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef MD_PASSES_TD
#define MD_PASSES_TD

include "mlir/Pass/PassBase.td"

def SyncBatchNorm : Pass<"md-sync-batch-norm", "::md::ModelOp"> {
  let summary = "Rewrites batch norm into global-batch statistics (SyncBatchNorm)";
  let description = [{
    Runs when the recipe says `sync_batch_norm` (and does nothing otherwise),
    before md-autodiff. Every `md.batch_norm` becomes per-channel means that
    are all-reduced (`avg`) over the world, so that the statistics are the
    global batch's; md-autodiff then derives the backward all-reduces.

    Before:

    ```mlir
    %y, %m, %i = md.batch_norm %x, %g, %b : tensor<32x256xf32>, tensor<256xf32>, tensor<256xf32> -> tensor<32x256xf32>, tensor<256xf32>, tensor<256xf32>
    ```

    After:

    ```mlir
    %m0 = md.mean %x dims [0] : tensor<32x256xf32> to tensor<256xf32>
    %m = md.all_reduce %m0 avg group world {md.sync_batch_norm} : tensor<256xf32>
    %c = md.sub %x, %m : tensor<32x256xf32>, tensor<256xf32> -> tensor<32x256xf32>
    %s = md.mul %c, %c : tensor<32x256xf32>, tensor<32x256xf32> -> tensor<32x256xf32>
    %v0 = md.mean %s dims [0] : tensor<32x256xf32> to tensor<256xf32>
    %v = md.all_reduce %v0 avg group world {md.sync_batch_norm} : tensor<256xf32>
    %i = md.rsqrt %v eps 1.0e-05 : tensor<256xf32>
    %n = md.mul %c, %i : tensor<32x256xf32>, tensor<256xf32> -> tensor<32x256xf32>
    %t = md.mul %n, %g : tensor<32x256xf32>, tensor<256xf32> -> tensor<32x256xf32>
    %y = md.add %t, %b : tensor<32x256xf32>, tensor<256xf32> -> tensor<32x256xf32>
    ```
  }];
}

def ApplyPlan : Pass<"md-apply-plan", "::md::ModelOp"> {
  let summary = "Materialises the parallelism plan: flat unit state, the step program, collectives";
  let description = [{
    Reads `#md.plan` on the `md.model` and the gradient function
    `@<forward>.grad` that md-autodiff built, and writes the per-step program
    into `md.train`'s `step` region for a symbolic world size W (see
    docs/passes.md, "After md-apply-plan"):

    - every wrap unit's trainable parameters are packed, in `md.param` order,
      into one flat buffer (`md.param ... offset k`); its master weights and
      optimizer state become `md.state`s, sharded over the shard group
      (`tensor<?xf32> shard(N)`) by `zero1`, `fsdp-grad-op`, `fsdp-full` and
      hybrid plans, replicated by `ddp` and `single`;
    - parameters are read as `md.view`s of the unit's flat buffer:
      all-gathered from the shard before the unit's first forward use (and
      again before its first backward use with `reshard_after_forward`),
      or loaded from the `params` / `master` state;
    - gradient accumulation: `md.micro_steps` holds the first A − 1
      micro-steps, which reduce nothing and add into `grad_acc`; the last
      micro-step reduces each unit's flat gradient right after its last
      contribution (reduce-scatter, all-reduce, or both for hybrid);
    - global-norm clipping from the shards' squared norms and one
      all-reduce; the optimizer on the shards; `zero1` and `fsdp-grad-op`
      all-gather the new parameters after the step;
    - activation checkpointing recomputes a checkpointed unit's forward right
      before its backward.

    Before (abridged):

    ```mlir
    md.param @w : tensor<4x8xf32> init <normal(0.0, 0.02)> unit 0
    md.func @forward.grad(%x: tensor<2x8xf32>, %dloss: tensor<f32>) -> (tensor<f32>, tensor<4x8xf32>)
    md.train @forward ... step {
    } hooks { }
    ```

    After, for `fsdp-full`:

    ```mlir
    md.param @w : tensor<4x8xf32> init <normal(0.0, 0.02)> unit 0 offset 0
    md.state @u0.master : tensor<?xf32> shard(32) group world role master unit 0
    md.train @forward ... step {
      md.micro_steps { ... md.grad_accumulate %g into @u0.grad_acc : tensor<32xf32> }
      %x = md.batch : tensor<2x8xf32>
      %s = md.state_load @u0.master : tensor<?xf32>
      %f = md.all_gather %s group world {md.phase = "forward"} : tensor<?xf32> -> tensor<32xf32>
      %w = md.view %f[0] : tensor<32xf32> to tensor<4x8xf32>
      ...
      %t = md.grad_total %flat from @u0.grad_acc : tensor<32xf32> -> tensor<32xf32>
      %r = md.reduce_scatter %t avg group world : tensor<32xf32> -> tensor<?xf32>
      ... md.adamw_update ... md.state_store ...
    }
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def MixedPrecision : Pass<"md-mixed-precision", "::md::ModelOp"> {
  let summary = "Places the casts of the plan's precision policy";
  let description = [{
    With `precision = {param = P, reduce = R, buffer = B, master = M}` on the
    plan, in the step program md-apply-plan built:

    - master weights and optimizer state stay in M (f32);
    - a unit's shard is cast to P before its all-gather, so the all-gather
      moves P; a replicated master (ddp) is cast to P where it is read; the
      `params` state of zero1 / fsdp-grad-op holds P;
    - the batch's float inputs are cast to P and the forward and backward
      compute in P (the ops accumulate in f32 internally, as the dialect
      says); losses and batch-norm statistics (B) stay f32;
    - gradients are accumulated in f32 (`grad_acc`, `grad_total`), cast to R
      before their reduction and back to f32 for the optimizer.

    Before (ddp, P = bf16):

    ```mlir
    %m = md.state_load @u0.master : tensor<12xf32>
    %w = md.view %m[0] : tensor<12xf32> to tensor<3x4xf32>
    %y = md.matmul %x, %w transpose_b : tensor<2x4xf32>, tensor<3x4xf32> -> tensor<2x3xf32>
    ```

    After:

    ```mlir
    %m = md.state_load @u0.master : tensor<12xf32>
    %h = md.cast %m : tensor<12xf32> to tensor<12xbf16>
    %w = md.view %h[0] : tensor<12xbf16> to tensor<3x4xbf16>
    %y = md.matmul %xh, %w transpose_b : tensor<2x4xbf16>, tensor<3x4xbf16> -> tensor<2x3xbf16>
    ```
  }];
}

def VerifyCollectives : Pass<"md-verify-collectives", "::md::ModelOp"> {
  let summary = "The static desync check: every collective runs on every rank, in the same order";
  let description = [{
    Runs the rank-variance analysis (passes/RankVariance.h) over the whole
    model (the forward, the user blocks through `md.call`, the step program
    and the hooks of `md.train`) and reports, at the op's source location
    with notes that explain why, every way the ranks of the job could
    disagree about which collectives to run:

    - a collective, or an op that communicates (`md.save`, `md.evaluate`,
      `md.every N minutes`, an `md.call` whose callee communicates), under an
      `md.if` whose condition varies between ranks, in an `md.for` whose
      bounds vary, or in a `rank0_only` body;
    - an `md.exit` under such a condition: the ranks that stop leave the
      others waiting in their next collective;
    - a collective whose operand's shape comes from a rank-varying value;
    - a parameter used under rank-varying control (ranks would disagree
      about which parameters get gradients).

    A model pinned to one rank (`world_size = 1`) cannot desync and is
    accepted as is. With `final-program`, the pass runs at the end of md's
    pipeline: it also computes the collective sequence of the step program,
    and a finding in the step program, which md's passes wrote, is an
    internal error. docs/check.md has the rules and the lattice.

    Rejected:

    ```mlir
    %r = md.rank : i64
    %c0 = arith.constant 0 : i64
    %is0 = arith.cmpi eq, %r, %c0 : i64
    md.if %is0 {
      md.save full "ckpt"    // error: ranks other than 0 never join its gather
    }
    ```

    Accepted (the all-reduce makes the loss the same on every rank):

    ```mlir
    %l = md.loss : tensor<f32>
    %m = md.all_reduce %l avg group world : tensor<f32>
    %v = tensor.extract %m[] : tensor<f32>
    %big = arith.cmpf ogt, %v, %c10 : f32
    md.if %big {
      md.save full "ckpt"
    }
    ```
  }];
  let options = [
    Option<"finalProgram", "final-program", "bool", /*default=*/"false",
           "Check the output of md's pipeline: findings in the step program "
           "are internal errors, and the collective sequence is computed">,
    Option<"printSequence", "print-sequence", "bool", /*default=*/"false",
           "Print the collective sequence of each step program to stdout">,
  ];
  let statistics = [
    Statistic<"numCollectives", "collectives", "Number of collectives checked">,
    Statistic<"numFindings", "findings", "Number of desync findings reported">,
  ];
}

#endif // MD_PASSES_TD
