//===- MdBase.td - md dialect definition, enums, op base class -*- tablegen -*-===//
//
// The `md` dialect describes a training program: a model's parameters and
// forward function, the recipe that trains it, and, after md's passes, the
// backward pass, the sharding of parameters and the collectives that keep the
// ranks of an SPMD job in step. Tensors are builtin value-semantics tensors.
//
//===----------------------------------------------------------------------===//

#ifndef MD_DIALECT_MDBASE_TD
#define MD_DIALECT_MDBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Md_Dialect : Dialect {
  let name = "md";
  let cppNamespace = "::md";
  let summary = "distributed training programs: model, recipe, plan";
  let description = [{
    The `md` dialect is the intermediate representation of md, a compiler for
    distributed training. A `md.model` holds the parameters (`md.param`), the
    forward function (`md.forward`), user blocks (`md.func`) and the training
    recipe (`md.train`). md's passes derive the backward pass with the `*_grad`
    ops, shard parameters into flat per-unit buffers (`md.flatten`/`md.view`),
    insert collectives (`md.all_gather`, `md.reduce_scatter`, `md.all_reduce`,
    `md.broadcast`, `md.barrier`) and place casts (`md.cast`).

    The program is SPMD: every rank runs the same ops. The only values that may
    differ between ranks come from `md.rank`, `md.local_rank`, per-rank data,
    `md.wall_time` and `md.file_exists`; the desync checker tracks them.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 1;
  // What the passes leave on ops for later passes, the memory analysis and
  // the emitter: `md.<name>`, declared once here with its type. The dialect
  // verifies every `md.`-prefixed discardable attribute against this list
  // (MdDialect::verifyOperationAttribute) and dialect/MdDiscardableAttrs.h
  // gives each its typed accessors; docs/dialect.md lists them.
  let discardableAttrs = (ins
    // The FSDP unit an op belongs to (md-apply-plan, md-autodiff).
    "::mlir::IntegerAttr":$unit,
    // The units a packed bucket's reduction carries (md-bucketing).
    "::mlir::DenseI64ArrayAttr":$units,
    // An op of the backward pass (md-autodiff, md-apply-plan).
    "::mlir::UnitAttr":$backward,
    // When a unit's gather runs: "forward", "backward" or "step".
    "::mlir::StringAttr":$phase,
    // A forward op cloned into the backward pass (activation checkpointing).
    "::mlir::UnitAttr":$recompute,
    // On a gradient function's result: the parameter it is the gradient of.
    "::mlir::FlatSymbolRefAttr":$grad_of,
    // The flat buffer a packed bucket reduces (md-bucketing).
    "::mlir::UnitAttr":$bucket_buffer,
    // On md.model: the bucket table --explain prints (md-bucketing).
    "::mlir::ArrayAttr":$bucket_table,
    // The statistics all-reduce of a synchronised batch norm.
    "::mlir::UnitAttr":$sync_batch_norm,
    // The stream an op runs on: 0 compute, 1 comm (md-schedule).
    "::mlir::IntegerAttr":$stream,
    // The event an op records when it ends (md-schedule).
    "::mlir::IntegerAttr":$record,
    // The events an op waits for before it starts (md-schedule).
    "::mlir::DenseI64ArrayAttr":$wait,
    // On md.model: the per-rank bytes of the step program (md-plan-memory).
    "::mlir::DictionaryAttr":$memory,
    // On md.model, the plan options kept beside #md.plan
    // (dialect/PlanOptions.h): "sharded" gradient accumulation,
    "::mlir::StringAttr":$grad_accumulation,
    // the link of the cost model {name, alpha_us, beta_gbps},
    "::mlir::DictionaryAttr":$interconnect,
    // and the limit of in-flight all-gathers.
    "::mlir::IntegerAttr":$max_inflight_allgathers
  );
  let hasOperationAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::tensor::TensorDialect"];
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

// The process group a collective runs over. `world` is every rank; on a
// hybrid (2-D) mesh `shard` is the group that shards parameters and
// `replicate` the group of ranks that hold the same shard. On a 1-D mesh
// `shard` is the world and `replicate` has one rank.
def MD_Group : I32EnumAttr<"Group", "process group of a collective", [
    I32EnumAttrCase<"world", 0>,
    I32EnumAttrCase<"shard", 1>,
    I32EnumAttrCase<"replicate", 2>]> {
  let cppNamespace = "::md";
  let genSpecializedAttr = 0;
}
// What a persistent per-rank buffer (`md.state`) holds.
def MD_StateRole : I32EnumAttr<"StateRole", "role of an md.state", [
    I32EnumAttrCase<"master", 0>,
    I32EnumAttrCase<"params", 1>,
    I32EnumAttrCase<"exp_avg", 2>,
    I32EnumAttrCase<"exp_avg_sq", 3>,
    I32EnumAttrCase<"momentum", 4>,
    I32EnumAttrCase<"grad_acc", 5>,
    I32EnumAttrCase<"frozen", 6>]> {
  let cppNamespace = "::md";
  let genSpecializedAttr = 0;
}
def MD_StateRoleAttr : EnumAttr<Md_Dialect, MD_StateRole, "state_role"> {
  let assemblyFormat = "`<` $value `>`";
}

def MD_GroupAttr : EnumAttr<Md_Dialect, MD_Group, "group"> {
  let assemblyFormat = "`<` $value `>`";
}

def MD_ReductionKind : I32EnumAttr<"ReductionKind", "reduction of a collective", [
    I32EnumAttrCase<"sum", 0>,
    I32EnumAttrCase<"avg", 1>,
    I32EnumAttrCase<"max", 2>,
    I32EnumAttrCase<"min", 3>,
    I32EnumAttrCase<"prod", 4>]> {
  let cppNamespace = "::md";
  let genSpecializedAttr = 0;
}
def MD_ReductionKindAttr : EnumAttr<Md_Dialect, MD_ReductionKind, "reduction"> {
  let assemblyFormat = "`<` $value `>`";
}

// The function of md.elementwise and md.elementwise_grad (the plan's
// ElementwiseFn: the same values).
def MD_ElementwiseFn : I32EnumAttr<"ElementwiseFn", "elementwise math function", [
    I32EnumAttrCase<"exp", 0>,
    I32EnumAttrCase<"log", 1>,
    I32EnumAttrCase<"sin", 2>,
    I32EnumAttrCase<"cos", 3>,
    I32EnumAttrCase<"tanh", 4>,
    I32EnumAttrCase<"sigmoid", 5>,
    I32EnumAttrCase<"abs", 6>,
    I32EnumAttrCase<"neg", 7>,
    I32EnumAttrCase<"sqrt", 8>,
    I32EnumAttrCase<"rsqrt", 9>]> {
  let cppNamespace = "::md";
}

def MD_CollectiveKind : I32EnumAttr<"CollectiveKind", "kind of a collective", [
    I32EnumAttrCase<"all_gather", 0>,
    I32EnumAttrCase<"reduce_scatter", 1>,
    I32EnumAttrCase<"all_reduce", 2>,
    I32EnumAttrCase<"broadcast", 3>,
    I32EnumAttrCase<"barrier", 4>]> {
  let cppNamespace = "::md";
  let genSpecializedAttr = 0;
}

def MD_PeriodUnit : I32EnumAttr<"PeriodUnit", "unit of an `md.every` period", [
    I32EnumAttrCase<"steps", 0>,
    I32EnumAttrCase<"seconds", 1>,
    I32EnumAttrCase<"minutes", 2>]> {
  let cppNamespace = "::md";
  let genSpecializedAttr = 0;
}
def MD_PeriodUnitAttr : EnumAttr<Md_Dialect, MD_PeriodUnit, "period_unit"> {
  let assemblyFormat = "`<` $value `>`";
}

def MD_CheckpointFormat : I32EnumAttr<"CheckpointFormat", "checkpoint format", [
    I32EnumAttrCase<"full", 0>,
    I32EnumAttrCase<"sharded", 1>]> {
  let cppNamespace = "::md";
  let genSpecializedAttr = 0;
}
def MD_CheckpointFormatAttr : EnumAttr<Md_Dialect, MD_CheckpointFormat, "checkpoint"> {
  let assemblyFormat = "`<` $value `>`";
}

def MD_InitKind : I32EnumAttr<"InitKind", "parameter initialiser", [
    I32EnumAttrCase<"zeros", 0>,
    I32EnumAttrCase<"ones", 1>,
    I32EnumAttrCase<"constant", 2>,
    I32EnumAttrCase<"normal", 3>,
    I32EnumAttrCase<"uniform", 4>]> {
  let cppNamespace = "::md";
  let genSpecializedAttr = 0;
}

def MD_ScheduleKind : I32EnumAttr<"ScheduleKind", "learning-rate schedule", [
    I32EnumAttrCase<"constant", 0>,
    I32EnumAttrCase<"linear", 1>,
    I32EnumAttrCase<"cosine", 2>]> {
  let cppNamespace = "::md";
  let genSpecializedAttr = 0;
}

def MD_DataKind : I32EnumAttr<"DataKind", "training data source", [
    I32EnumAttrCase<"synthetic", 0>,
    I32EnumAttrCase<"npy", 1>,
    I32EnumAttrCase<"tokens", 2>]> {
  let cppNamespace = "::md";
  let genSpecializedAttr = 0;
}

// How a plan shards a model (`#md.plan<... shard = ...>`): DDP replicates
// everything, ZeRO-1 shards the optimizer state, ZeRO-2 also the gradients,
// ZeRO-3/FSDP also the parameters; hybrid shards within a group and
// replicates across groups (HSDP).
def MD_ShardKind : I32EnumAttr<"ShardKind", "what a plan shards", [
    I32EnumAttrCase<"none", 0>,
    I32EnumAttrCase<"optimizer", 1>,
    I32EnumAttrCase<"grad_op", 2>,
    I32EnumAttrCase<"full", 3>,
    I32EnumAttrCase<"hybrid", 4>]> {
  let cppNamespace = "::md";
  let genSpecializedAttr = 0;
}

// How a plan groups parameters into wrap units (FSDP units).
def MD_WrapKind : I32EnumAttr<"WrapKind", "wrap policy of a plan", [
    I32EnumAttrCase<"none", 0>,
    I32EnumAttrCase<"blocks", 1>,
    I32EnumAttrCase<"size", 2>]> {
  let cppNamespace = "::md";
  let genSpecializedAttr = 0;
}

// When the backward pass prefetches the next unit's parameters: before or
// after the current unit's gradient computation, or not at all.
def MD_PrefetchBackward : I32EnumAttr<"PrefetchBackward", "backward prefetch of a plan", [
    I32EnumAttrCase<"pre", 0>,
    I32EnumAttrCase<"post", 1>,
    I32EnumAttrCase<"none", 2>]> {
  let cppNamespace = "::md";
  let genSpecializedAttr = 0;
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

// The floating-point element types md computes and stores in.
def MD_Float : AnyTypeOf<[BF16, F16, F32], "bf16, f16 or f32">;
def MD_FloatTensor : RankedTensorOf<[BF16, F16, F32]>;
def MD_IndexTensor : RankedTensorOf<[I32, I64]>;
def MD_AnyTensor : RankedTensorOf<[BF16, F16, F32, I32, I64]>;
// A rank-0 f32 tensor: losses, norms, reduced metrics.
def MD_ScalarTensor : 0DTensorOf<[F32]>;

//===----------------------------------------------------------------------===//
// Side-effect resources
//===----------------------------------------------------------------------===//

// Collectives read and write this resource, so generic passes neither reorder
// nor merge nor drop them: their order is part of an SPMD program's meaning.
def MD_CommResource : Resource<"::md::CommResource">;
// Recipe side effects (log, print, save, exit) and host queries.
def MD_HostIOResource : Resource<"::md::HostIOResource">;
// Persistent per-rank buffers (`md.state`), the data cursor and the step's
// loss accumulator: reads and writes of them keep their order.
def MD_StateResource : Resource<"::md::StateResource">;

//===----------------------------------------------------------------------===//
// Op base class
//===----------------------------------------------------------------------===//

class MD_Op<string mnemonic, list<Trait> traits = []>
    : Op<Md_Dialect, mnemonic, traits>;

#endif // MD_DIALECT_MDBASE_TD
