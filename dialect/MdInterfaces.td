//===- MdInterfaces.td - md op interfaces -----------------*- tablegen -*-===//

#ifndef MD_DIALECT_MDINTERFACES_TD
#define MD_DIALECT_MDINTERFACES_TD

include "mlir/IR/OpBase.td"

def MD_CollectiveOpInterface : OpInterface<"CollectiveOpInterface"> {
  let cppNamespace = "::md";
  let description = [{
    A collective: an op that every rank of its group must execute, in the same
    order, with the same shapes and dtypes. The desync checker, the scheduler,
    the bucketing cost model and the plan emitter see collectives only through
    this interface.
  }];
  let methods = [
    InterfaceMethod<"the kind of collective", "::md::CollectiveKind", "getCollectiveKind">,
    InterfaceMethod<"the process group it runs over", "::md::Group", "getCollectiveGroup">,
    InterfaceMethod<"the reduction, for reducing collectives",
      "std::optional<::md::ReductionKind>", "getReduction">,
    InterfaceMethod<"the bucket this collective belongs to, if bucketed",
      "std::optional<int64_t>", "getBucketId">,
    InterfaceMethod<[{
        Bytes one rank sends over the wire for a group of `groupSize` ranks,
        with the ring algorithm NCCL uses for large messages: all-gather and
        reduce-scatter send (n-1)/n of the full buffer, all-reduce 2(n-1)/n,
        broadcast the full buffer (root), barrier nothing. Zero for n = 1.
      }], "int64_t", "getBytesSent", (ins "int64_t":$groupSize)>,
    InterfaceMethod<[{
        Bytes of the full (unsharded) buffer the collective operates on: the
        gathered result of an all-gather, the input of a reduce-scatter, the
        operand of an all-reduce or broadcast. nccl-tests' "size".
      }], "int64_t", "getFullBytes", (ins "int64_t":$groupSize)>,
  ];
}

#endif // MD_DIALECT_MDINTERFACES_TD
