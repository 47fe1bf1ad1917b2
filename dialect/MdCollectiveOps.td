//===- MdCollectiveOps.td - md collective ops ---------------------------*- tablegen -*-===//
//
// The collectives md's passes insert: all-gather and reduce-scatter of FSDP's
// flat shards, all-reduce of DDP's gradients and of metrics, broadcast of
// decisions rank 0 makes, and barriers. Every rank of the group runs each of
// them, in the same order, with the same types.
//
//===----------------------------------------------------------------------===//

#ifndef MD_DIALECT_MDCOLLECTIVEOPS_TD
#define MD_DIALECT_MDCOLLECTIVEOPS_TD

include "dialect/MdBase.td"
include "dialect/MdAttrs.td"
include "dialect/MdInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

//===----------------------------------------------------------------------===//
// Base class
//===----------------------------------------------------------------------===//

// The base of every collective, like upstream Shard's
// `Shard_CollectiveCommunicationOpBase`. Ops add their own arguments to
// `commonArgs` with `!con`. The mnemonic doubles as the `CollectiveKind` case.
//
// Reading and writing `MD_CommResource` keeps generic passes (CSE,
// canonicalize's dead-code removal, LICM, ...) from reordering, merging or
// dropping a collective: in SPMD their order is part of the program's meaning.
class MD_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : MD_Op<mnemonic, !listconcat(traits, [
        DeclareOpInterfaceMethods<MD_CollectiveOpInterface>,
        MemoryEffects<[MemRead<MD_CommResource>, MemWrite<MD_CommResource>]>])> {
  dag commonArgs = (ins
    MD_GroupAttr:$group,
    OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$bucket
  );
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
  let extraClassDefinition = [{
    ::md::CollectiveKind $cppClass::getCollectiveKind() {
      return ::md::CollectiveKind::}] # mnemonic # [{;
    }
    ::md::Group $cppClass::getCollectiveGroup() { return getGroup(); }
    ::std::optional<int64_t> $cppClass::getBucketId() {
      if (::std::optional<uint64_t> bucket = getBucket())
        return static_cast<int64_t>(*bucket);
      return ::std::nullopt;
    }
  }];
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

def MD_AllGatherOp : MD_CollectiveOp<"all_gather"> {
  let summary = "concatenates every rank's shard along an axis";
  let description = [{
    Before: each of the n ranks of `group` holds a shard (`input`). After: every
    rank holds the concatenation of all n shards in rank order along `axis`
    (default 0), so the result's dim `axis` is n × the input's and its other
    dims are the input's. This is how FSDP materialises a unit's parameters
    from its flat shards.

    The input (this rank's shard) must be statically shaped. The gathered dim
    may be `?` only while the group size is symbolic in W; once it is known,
    the result dim must be exactly n × the input dim. The exception is the
    flat-shard form md's passes use: the shard `tensor<?xT>` of a flat buffer
    `tensor<NxT>` holds ceil(N / n) elements (the runtime pads the buffer to
    n × ceil(N / n) and the result is its first N elements).

    Bytes (nccl-tests' ring conventions): the full buffer is the gathered
    result, n × input bytes; each rank sends (n − 1)/n of it, i.e. (n − 1) ×
    input bytes; nothing when n = 1. `bucket` names the communication bucket
    the scheduler placed it in.

    Canonicalization replaces it by its operand when its group has statically
    one rank. That is safe in SPMD: the group size is pinned by `md.model`
    and the same on every rank, so all ranks drop it together.

    Example:

    ```mlir
    %full = md.all_gather %shard group shard bucket 3 : tensor<128xbf16> -> tensor<512xbf16>
    %rows = md.all_gather %w axis 1 group world : tensor<64x8xf32> -> tensor<64x32xf32>
    %sym = md.all_gather %s group world : tensor<16xf32> -> tensor<?xf32>
    %flat = md.all_gather %shard group world : tensor<?xbf16> -> tensor<4160xbf16>
    ```
  }];
  let arguments = !con(commonArgs, (ins
    MD_AnyTensor:$input,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$axis));
  let results = (outs MD_AnyTensor:$result);
  let assemblyFormat = [{
    $input (`axis` $axis^)? `group` custom<Group>($group) (`bucket` $bucket^)?
    attr-dict `:` type($input) `->` type($result)
  }];
}

def MD_ReduceScatterOp : MD_CollectiveOp<"reduce_scatter"> {
  let summary = "reduces every rank's full buffer and scatters the result";
  let description = [{
    Before: each of the n ranks of `group` holds a full buffer (`input`). After:
    rank i holds the i-th of n equal slices, along `axis` (default 0), of the
    element-wise reduction (`sum`, `avg`, `max`, `min`, `prod`) of all n
    buffers. The input's dim `axis` is n × the result's and must divide by n;
    the other dims are equal. This is how FSDP reduces gradients into shards.

    The result (this rank's shard) must be statically shaped. The input's dim
    `axis` may be `?` only while the group size is symbolic in W. The
    exception is the flat-shard form md's passes use: a flat buffer
    `tensor<NxT>` reduces into the shard `tensor<?xT>` of ceil(N / n)
    elements (the runtime pads the buffer with zeros to n × ceil(N / n)).

    Bytes (nccl-tests' ring conventions): the full buffer is the input, n ×
    result bytes; each rank sends (n − 1)/n of it, i.e. (n − 1) × result
    bytes; nothing when n = 1.

    Canonicalization replaces it by its operand when its group has statically
    one rank. That is safe in SPMD: the group size is pinned by `md.model`
    and the same on every rank, so all ranks drop it together.

    Example:

    ```mlir
    %s = md.reduce_scatter %g sum group shard : tensor<512xf32> -> tensor<128xf32>
    %t = md.reduce_scatter %h avg axis 1 group world bucket 0 : tensor<8x64xbf16> -> tensor<8x16xbf16>
    %u = md.reduce_scatter %flat avg group world : tensor<4160xf32> -> tensor<?xf32>
    ```
  }];
  let arguments = !con(commonArgs, (ins
    MD_AnyTensor:$input,
    MD_ReductionKindAttr:$reduction_kind,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$axis));
  let results = (outs MD_AnyTensor:$result);
  let assemblyFormat = [{
    $input custom<Reduction>($reduction_kind) (`axis` $axis^)?
    `group` custom<Group>($group) (`bucket` $bucket^)?
    attr-dict `:` type($input) `->` type($result)
  }];
}

def MD_AllReduceOp : MD_CollectiveOp<"all_reduce", [
    AllTypesMatch<["input", "result"]>]> {
  let summary = "reduces a tensor over the group; every rank gets the result";
  let description = [{
    Before: each of the n ranks of `group` holds a tensor (`input`). After:
    every rank holds the element-wise reduction (`sum`, `avg`, `max`, `min`,
    `prod`) of all n tensors, of the same type. This is DDP's gradient
    all-reduce and how metrics (loss, gradient norm) are combined.

    Bytes (nccl-tests' ring conventions): the full buffer is the operand; each
    rank sends 2(n − 1)/n of it (reduce-scatter then all-gather); nothing when
    n = 1. A dynamically shaped operand counts 0 bytes.

    Canonicalization replaces it by its operand when its group has statically
    one rank or its tensor has no elements. That is safe in SPMD: the group
    size is pinned by `md.model` and shapes are rank-independent, so every
    rank of the group drops it together and none waits for a missing peer.

    Example:

    ```mlir
    %r = md.all_reduce %x avg group world : tensor<f32>
    %g = md.all_reduce %grads sum group replicate bucket 2 : tensor<4096xbf16>
    ```
  }];
  let arguments = !con(commonArgs, (ins
    MD_AnyTensor:$input,
    MD_ReductionKindAttr:$reduction_kind));
  let results = (outs MD_AnyTensor:$result);
  let assemblyFormat = [{
    $input custom<Reduction>($reduction_kind)
    `group` custom<Group>($group) (`bucket` $bucket^)?
    attr-dict `:` type($result)
  }];
}

def MD_BroadcastOp : MD_CollectiveOp<"broadcast", [
    AllTypesMatch<["input", "result"]>]> {
  let summary = "copies the root rank's tensor to every rank of the group";
  let description = [{
    Before: each of the n ranks of `group` holds a tensor of the same type;
    only the one of rank `root` (0 ≤ root < n, a rank within the group)
    matters. After: every rank holds the root's tensor. This is how initial
    parameters and rank 0's decisions (`md.every N minutes`) reach the others.

    Bytes (nccl-tests' conventions): the full buffer is the operand; the root
    sends all of it, nothing when n = 1. A dynamically shaped operand counts
    0 bytes.

    Canonicalization replaces it by its operand when its group has statically
    one rank or its tensor has no elements. That is safe in SPMD: the group
    size is pinned by `md.model` and shapes are rank-independent, so every
    rank of the group drops it together and none waits for a missing peer.

    Example:

    ```mlir
    %b = md.broadcast %x root 0 group world : tensor<4xf32>
    %p = md.broadcast %w root 1 group shard bucket 0 : tensor<64x32xbf16>
    ```
  }];
  let arguments = !con(commonArgs, (ins
    MD_AnyTensor:$input,
    ConfinedAttr<I64Attr, [IntNonNegative]>:$root));
  let results = (outs MD_AnyTensor:$result);
  let assemblyFormat = [{
    $input `root` $root `group` custom<Group>($group) (`bucket` $bucket^)?
    attr-dict `:` type($result)
  }];
}

def MD_BarrierOp : MD_CollectiveOp<"barrier"> {
  let summary = "waits until every rank of the group has reached it";
  let description = [{
    No rank of `group` passes the barrier before all n have reached it. It
    moves no data: 0 bytes sent, 0 full bytes. Used, for example, before a
    sharded checkpoint is renamed into place.

    Canonicalization erases a barrier whose group has statically one rank.

    Example:

    ```mlir
    md.barrier group world
    md.barrier group shard bucket 1
    ```
  }];
  let arguments = commonArgs;
  let assemblyFormat = [{
    `group` custom<Group>($group) (`bucket` $bucket^)? attr-dict
  }];
}

#endif // MD_DIALECT_MDCOLLECTIVEOPS_TD
