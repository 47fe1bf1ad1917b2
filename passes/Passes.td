//===- Passes.td - md's passes ------------------------------*- tablegen -*-===//
//
// One `def` per pass, each implemented in its own passes/<Name>.cpp. The
// order they run in is docs/passes.md's table and passes/Pipeline.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef MD_PASSES_TD
#define MD_PASSES_TD

include "mlir/Pass/PassBase.td"

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
    model's estimate of its communication time not hidden behind compute.

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
    Option<"interconnect", "interconnect", "std::string", /*default=*/"\"nvlink\"",
           "link the cost model assumes: nvlink (10 us, 150 GB/s), "
           "pcie (20 us, 12 GB/s) or shm (5 us, 5 GB/s)">,
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
           /*default=*/"2",
           "most gathered units live at once when prefetching (>= 1)">,
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
    category at the peak to the model:

    ```mlir
    md.model @m attributes {md.memory = {activations = 512 : i64, comm_buffers = 0 : i64,
        grad_acc = 0 : i64, grads = 288 : i64, optimizer = 144 : i64,
        params = 216 : i64, peak = 1160 : i64, world_size = 2 : i64}, ...}
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
}

def Explain : Pass<"md-explain", "::md::ModelOp"> {
  let summary = "prints what mdc --explain reports about the step program";
  let description = [{
    Prints to standard output the report of `mdc --explain` for world size
    W: per-rank bytes by category and their peak, bytes sent per step by
    each kind of collective, the bucket table, the precision table (every
    cast and the dtype of every collective), the accumulation steps and the
    effective batch. The IR is unchanged. `format=json` prints one JSON
    object with stable keys.
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

#endif // MD_PASSES_TD
