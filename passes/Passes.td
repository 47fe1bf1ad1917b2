//===- Passes.td - md's passes ------------------------------*- tablegen -*-===//
//
// One `def` per pass, each implemented in its own passes/<Name>.cpp. The
// order they run in is docs/passes.md's table and compile/Pipeline.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef MD_PASSES_TD
#define MD_PASSES_TD

include "mlir/Pass/PassBase.td"

def WrapUnits : Pass<"md-wrap-units", "::md::ModelOp"> {
  let summary = "Assigns parameters to wrap units by the plan's wrap policy";
  let description = [{
    Runs first, so that md-autodiff tags ops with the final units. With
    `wrap = blocks(h)`, every instance of the repeated parameters `h` is a
    unit of its own (numbered from 1 in `md.param` order) and the rest is the
    root unit 0; with `wrap = size(min_params = M)`, consecutive parameters
    are grouped until a unit holds at least M elements (a smaller last group
    joins the unit before it); with `wrap = none`, one unit holds everything.
    Without a plan the units stay as they are.

    Before (`wrap = none`):

    ```mlir
    md.param @h.0.w : tensor<4x4xf32> init <zeros> unit 1
    md.param @h.1.w : tensor<4x4xf32> init <zeros> unit 2
    ```

    After:

    ```mlir
    md.param @h.0.w : tensor<4x4xf32> init <zeros> unit 0
    md.param @h.1.w : tensor<4x4xf32> init <zeros> unit 0
    ```
  }];
}

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

def Fuse : Pass<"md-fuse", "::md::ModelOp"> {
  let summary = "fuses what the kernels take (transposes into matmuls, matmul + GELU) before md-autodiff";
  let description = [{
    Runs on the forward functions before md-autodiff, so that the backward
    is derived from the fused ops and the plan never holds what a fusion
    saves. An `md.transpose` that swaps the last two dims and whose every
    use is an `a` or `b` operand of an `md.matmul` is folded into those
    matmuls' `transpose_a` / `transpose_b` flags, and erased: weight tying's
    `x @ transpose(wte.weight)` neither copies the [V, C] table forward nor
    transposes its gradient back. A transpose with another use, or one that
    moves a batch dim, stays as it is.

    Then an `md.matmul` whose result only an `md.gelu` reads becomes one
    `md.matmul_gelu` (the MLP's first layer): its `out` replaces the
    GELU's result, and its `pre` (the matmul's value) is what the backward
    reads, as it read the matmul's result before.

    Before:

    ```mlir
    %t = md.transpose %w perm [1, 0] : tensor<512x64xf32> to tensor<64x512xf32>
    %y = md.matmul %x, %t : tensor<8x64x64xf32>, tensor<64x512xf32> -> tensor<8x64x512xf32>
    ```

    After:

    ```mlir
    %y = md.matmul %x, %w transpose_b : tensor<8x64x64xf32>, tensor<512x64xf32> -> tensor<8x64x512xf32>
    ```

    Before:

    ```mlir
    %h = md.matmul %x, %w bias %b transpose_b : tensor<8x64xf32>, tensor<256x64xf32>, tensor<256xf32> -> tensor<8x256xf32>
    %g = md.gelu %h approximate : tensor<8x256xf32>
    ```

    After:

    ```mlir
    %g, %h = md.matmul_gelu %x, %w bias %b transpose_b approximate : tensor<8x64xf32>, tensor<256x64xf32>, tensor<256xf32> -> tensor<8x256xf32>
    ```
  }];
  let statistics = [
    Statistic<"numTransposesFolded", "transposes-folded",
              "md.transpose ops folded into md.matmul flags">,
    Statistic<"numMatmulGelus", "matmul-gelus",
              "md.matmul and md.gelu pairs fused into md.matmul_gelu">
  ];
}

def Autodiff : Pass<"md-autodiff", "::md::ModelOp"> {
  let summary = "builds the gradient function of the forward (reverse mode)";
  let description = [{
    Adds `md.func @<F>.grad` after the `md.forward @F` that `md.train` names
    (or the model's only forward when there is no `md.train`), as
    docs/passes.md ("After md-autodiff") specifies:

    - the body is F's with every `md.call` inlined, recursively, followed by
      the backward ops in reverse order, seeded with the extra last argument
      `%dloss : tensor<f32>` as the gradient of F's first result (the loss);
    - the results are F's results followed by the gradient of every
      trainable (not `frozen`) `md.param`, in `md.param` order, each with the
      result attribute `md.grad_of = @param`; a parameter read several times
      (tied weights) gets the sum of its reads' gradients;
    - every op carries `md.unit`: the unit of the parameters an inlined call
      was given (several units: 0; none: the enclosing call's unit), an
      `md.param_ref` its parameter's unit, and 0 everywhere else; backward
      ops carry the unit of the forward op they differentiate and
      `md.backward`. Inlined ops keep their location, wrapped in a call-site
      location naming the call.

    Only what the loss depends on is differentiated: integer values and
    values that do not depend on a trainable parameter get no gradient and
    no backward op. A trainable parameter the loss does not depend on is an
    error, and so is an op on the path from a parameter to the loss that
    has no rule (passes/analysis/VjpRules.cpp has one per op). The gradient of a sum
    or avg `md.all_reduce` (md-sync-batch-norm's statistics) is the same
    all-reduce of its cotangent. F is left unchanged.

    Before:

    ```mlir
    md.param @fc.weight : tensor<10x16xf32> init <normal(0.0, 0.02)> unit 1
    md.func @Head(%x: tensor<4x16xf32>, %w: tensor<10x16xf32>) -> tensor<4x10xf32> {
      %y = md.matmul %x, %w transpose_b : tensor<4x16xf32>, tensor<10x16xf32> -> tensor<4x10xf32>
      md.return %y : tensor<4x10xf32>
    }
    md.forward @forward(%x: tensor<4x16xf32>, %t: tensor<4xi32>) -> tensor<f32> {
      %w = md.param_ref @fc.weight : tensor<10x16xf32>
      %y = md.call @Head(%x, %w) : (tensor<4x16xf32>, tensor<10x16xf32>) -> tensor<4x10xf32>
      %loss = md.cross_entropy %y, %t : tensor<4x10xf32>, tensor<4xi32> -> tensor<f32>
      md.return %loss : tensor<f32>
    }
    ```

    After (the forward and the block unchanged), added:

    ```mlir
    md.func @forward.grad(%x: tensor<4x16xf32>, %t: tensor<4xi32>, %dloss: tensor<f32>)
        -> (tensor<f32>, tensor<10x16xf32> {md.grad_of = @fc.weight}) {
      %w = md.param_ref @fc.weight {md.unit = 1 : i64} : tensor<10x16xf32>
      %y = md.matmul %x, %w transpose_b {md.unit = 1 : i64} : tensor<4x16xf32>, tensor<10x16xf32> -> tensor<4x10xf32>
      %loss = md.cross_entropy %y, %t {md.unit = 0 : i64} : tensor<4x10xf32>, tensor<4xi32> -> tensor<f32>
      %dy = md.cross_entropy_grad %dloss, %y, %t {md.backward, md.unit = 0 : i64} : tensor<f32>, tensor<4x10xf32>, tensor<4xi32>
      %dx, %dw = md.matmul_grad %dy, %x, %w transpose_b {md.backward, md.unit = 1 : i64} : tensor<4x10xf32>, tensor<4x16xf32>, tensor<10x16xf32> -> tensor<4x16xf32>, tensor<10x16xf32>
      md.return {md.unit = 0 : i64} %loss, %dw : tensor<f32>, tensor<10x16xf32>
    }
    ```
  }];
  let statistics = [
    Statistic<"numInlinedCalls", "inlined-calls", "md.call ops inlined">,
    Statistic<"numBackwardOps", "backward-ops",
              "backward ops built, gradient sums included">
  ];
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

//===----------------------------------------------------------------------===//
// Communication and scheduling (docs/passes.md, steps 4 to 7)
//===----------------------------------------------------------------------===//

def Bucketing : Pass<"md-bucketing", "::md::ModelOp"> {
  let summary = "groups collectives into buckets with a latency/bandwidth model";
  let description = [{
    Gives every collective of the model's `md.train` a `bucket` id and packs
    gradient reductions into buckets, so that the `bucket_cap` of the plan
    (`#md.plan`, or the `bucket-cap` option) bounds what is reduced at once
    and the cost model decides where the boundaries fall.

    **Gradient reductions** (the `reduce_scatter`s and `all_reduce`s of flat
    unit gradients, in backward order) of the same kind, group, reduction and
    dtype are split into runs of consecutive reductions. A bucket of B bytes
    takes `alpha + w·B / beta` on the wire (w = 1 for a reduce-scatter, 2 for
    an all-reduce: nccl-tests' ring factors (n-1)/n and 2(n-1)/n for large n,
    the exact ones when W is pinned), can start when its last gradient is
    computed (the compute before it is estimated from FLOPs at
    `compute-tflops`) and when the previous bucket is done. A dynamic
    program picks the boundaries that finish the last bucket earliest (then
    the fewest buckets); a bucket holds at most `bucket_cap` bytes unless one
    gradient alone is larger.

    A bucket of `all_reduce`s of static buffers (DDP) is packed: one
    `md.flatten` of the gradients (marked `md.bucket_buffer`), one
    `md.all_reduce` with the bucket id and its members' units (`md.units`),
    and `md.view`s of its result at the gradients' offsets. A bucket of
    `reduce_scatter`s (or of all-reduces of shards) is not: the shard of a
    concatenation is not the concatenation of the shards. Its members keep
    their own ops, move next to each other (to the last one's place, with
    the ops that use them moved after it) and share the id, which the runtime
    issues as one group (`ncclGroupStart/End`).

    **All-gathers** of the same phase, group and dtype that are latency-bound
    (at most `alpha x beta` bytes) are grouped in program order under the
    cap: the later ones move up to the first, with the loads and casts their
    shards come from. Every other collective is a bucket of its own.

    Ids number the buckets in program order. The table goes on the model as
    `md.bucket_table`, one dictionary per bucket: `id`, `kind`, `group`,
    `dtype`, `members` (`"u<unit>"` per collective, `"-"` without a unit),
    `bytes` (of the full buffers, independent of W) and `exposed_us`, the
    model's estimate of its communication time not hidden behind compute (an
    all-gather of a phase the plan prefetches counts from when the previous
    bucket of its phase is first needed, where md-schedule issues it).

    Bucketing bucketed IR changes nothing.

    Before (two DDP gradients, `bucket-cap=1048576`):

    ```mlir
    %r1 = md.all_reduce %g1 avg group world {md.unit = 1 : i64} : tensor<40xf32>
    ...
    %r0 = md.all_reduce %g0 avg group world {md.unit = 0 : i64} : tensor<36xf32>
    ```

    After:

    ```mlir
    %f = md.flatten %g1, %g0 {md.bucket_buffer} : tensor<40xf32>, tensor<36xf32> to tensor<76xf32>
    %r = md.all_reduce %f avg group world bucket 0 {md.units = array<i64: 1, 0>} : tensor<76xf32>
    %r1 = md.view %r[0] : tensor<76xf32> to tensor<40xf32>
    %r0 = md.view %r[40] : tensor<76xf32> to tensor<36xf32>
    ```
  }];
  let options = [
    Option<"bucketCap", "bucket-cap", "int64_t", /*default=*/"0",
           "largest bucket in bytes (default: the plan's bucket_cap, else 25 MiB)">,
    Option<"interconnect", "interconnect", "std::string", /*default=*/"\"\"",
           "link the cost model assumes: nvlink (10 us, 150 GB/s), "
           "pcie (20 us, 12 GB/s), infiniband (8 us, 24 GB/s), "
           "ethernet (30 us, 2.5 GB/s) or shm (5 us, 5 GB/s) "
           "(default: the plan's interconnect, else nvlink)">,
    Option<"alphaUs", "alpha-us", "double", /*default=*/"-1.0",
           "latency of one collective in microseconds (default: the interconnect's)">,
    Option<"betaGBps", "beta-gbps", "double", /*default=*/"-1.0",
           "bandwidth per rank in GB/s (default: the interconnect's)">,
    Option<"computeTflops", "compute-tflops", "double", /*default=*/"100.0",
           "sustained compute rate of a rank in TFLOP/s">,
  ];
  let statistics = [
    Statistic<"numBuckets", "buckets", "Number of buckets">,
    Statistic<"numPacked", "packed-reductions",
              "Number of reductions packed into shared buffers">,
  ];
}

def Schedule : Pass<"md-schedule", "::md::ModelOp"> {
  let summary = "orders the step program on a compute and a comm stream";
  let description = [{
    Puts the ops of every block of the step region (the last micro-step and
    the `md.micro_steps` body) in their execution order, places each on a
    stream (`md.stream = 0` compute, `1` comm: the collectives) and adds the
    events between the streams: an op whose result is used on the other
    stream gets `md.record = e`, the users `md.wait = array<i64: e, ...>`
    (event ids unique in the model).

    The order is a list schedule of each block's dependences (SSA values,
    then the order of reads and writes of the same `md.state`, the data
    cursor and the loss; collectives of one bucket are issued together)
    whose priorities depend only on the IR: program order, except that

    - with forward prefetch, the next unit's forward all-gather (with the
      loads and casts of its shard) is issued before the current unit's
      first forward op;
    - with backward prefetch `pre`, the next unit's backward all-gather is
      issued before the current unit's gradient computation; with `post`,
      right after it;
    - a prefetch is made only while fewer than `max-inflight-gathers`
      gathered units are live, counting the one prefetched.

    Nothing depends on values, so every rank computes the same order and
    issues its collectives in the same sequence.

    Before (`prefetch.forward = true`):

    ```mlir
    %w1 = md.all_gather %s1 group world : tensor<?xbf16> -> tensor<36xbf16>
    %y1 = md.matmul %x, %v1 ...
    %w2 = md.all_gather %s2 group world : tensor<?xbf16> -> tensor<36xbf16>
    %y2 = md.matmul %y1, %v2 ...
    ```

    After:

    ```mlir
    %w1 = md.all_gather %s1 group world {md.record = 0, md.stream = 1} ...
    %w2 = md.all_gather %s2 group world {md.record = 1, md.stream = 1} ...
    %y1 = md.matmul %x, %v1 {md.stream = 0, md.wait = array<i64: 0>} ...
    %y2 = md.matmul %y1, %v2 {md.stream = 0, md.wait = array<i64: 1>} ...
    ```
  }];
  let options = [
    Option<"forwardPrefetch", "forward-prefetch", "std::string",
           /*default=*/"\"plan\"",
           "prefetch the next unit's forward all-gather: plan, on or off">,
    Option<"backwardPrefetch", "backward-prefetch", "std::string",
           /*default=*/"\"plan\"",
           "prefetch the next unit's backward all-gather: plan, pre, post or none">,
    Option<"maxInflightGathers", "max-inflight-gathers", "int64_t",
           /*default=*/"0",
           "most gathered units live at once when prefetching (>= 1; "
           "default: the plan's max_inflight_allgathers, else 2)">,
  ];
  let statistics = [
    Statistic<"numEvents", "events", "Number of cross-stream events">,
    Statistic<"numPrefetched", "prefetched-gathers",
              "Number of all-gathers issued ahead by prefetch">,
  ];
}

def PlanMemory : Pass<"md-plan-memory", "::md::ModelOp"> {
  let summary = "per-rank bytes of every buffer of the step and their peak";
  let description = [{
    Computes the liveness interval and size of every buffer of the step
    program at world size W (`world-size`, else the model's `world_size`;
    without either the pass does nothing) and attaches the per-rank bytes by
    category at the peak to the model. Before (W = 2, one FSDP unit of 36
    parameters, two micro-steps):

    ```mlir
    md.model @tiny {
      md.state @u0.master : tensor<?xf32> shard(36) group world role master unit 0
      ...
    }
    ```

    After `md-plan-memory=world-size=2`:

    ```mlir
    md.model @tiny attributes {md.memory = {activations = 80 : i64,
        comm_buffers = 0 : i64, grad_acc = 144 : i64, grads = 72 : i64,
        optimizer = 144 : i64, params = 144 : i64, peak = 584 : i64,
        world_size = 2 : i64}} {
      ...
    }
    ```

    `md.state`s are live throughout; an SSA value from its definition to its
    last use in the step's order (a use inside `md.micro_steps` of a value
    from outside keeps it to the loop's end; the operand of a collective on
    the comm stream until an op waits for it). A `tensor<?xT>` shard of N
    elements over a group of G ranks has `ceil(N / G)` elements. Views,
    reshapes and state loads alias their source. docs/memory.md has the
    rules and a worked example.

    With `max-memory`, a peak above it is an error on the model with notes
    at the largest buffers live at the peak.
  }];
  let options = [
    Option<"worldSize", "world-size", "int64_t", /*default=*/"0",
           "W to size the buffers for (default: the model's world_size)">,
    Option<"maxMemory", "max-memory", "int64_t", /*default=*/"0",
           "fail when the peak bytes per rank exceed this (0: no limit)">,
  ];
  let statistics = [
    Statistic<"numBuffers", "buffers", "Number of buffers sized">,
  ];
}

def Explain : Pass<"md-explain", "::md::ModelOp"> {
  let summary = "prints what mdc --explain reports about the step program";
  let description = [{
    Prints to standard output the report of `mdc --explain` for world size
    W: per-rank bytes by category and their peak, bytes sent per step by
    each kind of collective, the bucket table, the precision table (every
    cast and the dtype of every collective), the accumulation steps and the
    effective batch. The IR is unchanged. `format=json` prints one JSON
    object with stable keys; `list-buffers` adds every buffer's interval.

    ```
    $ md-opt tiny.mlir --md-explain=world-size=2 -o /dev/null
    model @tiny, plan (none), world size 2
    batch: global 8, micro 2 per rank, 2 accumulation steps, effective batch 8

    memory per rank at W = 2, at the peak
      params               144 B  (144 bytes)
      ...
      peak                 584 B  (584 bytes)
    ```
  }];
  let options = [
    Option<"worldSize", "world-size", "int64_t", /*default=*/"0",
           "W to report for (default: the model's world_size)">,
    Option<"format", "format", "std::string", /*default=*/"\"text\"",
           "text or json">,
    Option<"listBuffers", "list-buffers", "bool", /*default=*/"false",
           "also list every buffer with its size, category and interval">,
  ];
}

def VerifyCollectives : Pass<"md-verify-collectives", "::md::ModelOp"> {
  let summary = "The static desync check: every collective runs on every rank, in the same order";
  let description = [{
    Runs the rank-variance analysis (passes/analysis/RankVariance.h) over the whole
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
