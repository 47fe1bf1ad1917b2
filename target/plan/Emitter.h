//===- Emitter.h - the plan emitter, shared by its files --------*- C++ -*-===//
//
// Private to target/plan: the Emitter class that EmitPlan.cpp (the run, the
// plan's tables, buffers and regions), EmitComputeOps.cpp (md's compute,
// optimizer, buffer and collective ops), EmitHostOps.cpp (the step's state
// ops, host scalars and io) and EmitControl.cpp (control flow and
// evaluation) implement between them. Every instruction's attributes are
// written through its typed struct in runtime/plan/OpAttrs.h.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TARGET_PLAN_EMITTER_H
#define MD_TARGET_PLAN_EMITTER_H

#include "target/plan/EmitPlan.h"

#include "dialect/MdOps.h"
#include "passes/analysis/MemoryAnalysis.h"
#include "runtime/plan/OpAttrs.h"
#include "runtime/plan/PlanBuilder.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace md::emitter {

using namespace mlir;
using md::plan::PlanBuilder;

/// The plan's element type of an MLIR type, or Invalid.
fb::DType getDType(Type type);

/// Replaces the arith ops of `hooks` computed from `md.rank` or
/// `md.local_rank` that are the same on every rank by their value: those
/// that fold to a constant (`rank * 0`), a comparison the ranks' ranges
/// decide (`rank >= 0`, `rank < world_size`), `rank - rank`.
void foldRankArithmetic(Region &hooks);

/// Marks rank0_only each `md.print` of `hooks` that every rank reaches and
/// whose values are the same on every rank (RankVariance): rank 0 alone
/// shows it. A print that differs between ranks stays on every rank that
/// reaches it, and each of them shows its line (docs/language.md).
void markUniformPrints(ModelOp model, Region &hooks);

/// Whether `cond` is `md.rank == 0` (either way round).
bool isRankZeroTest(Value cond);
/// An `if rank == 0` without results or else whose body does not
/// communicate or stop: its io becomes rank0_only io, with no branch.
bool isRankZeroIo(IfOp ifOp);

class Emitter {
public:
  Emitter(ModelOp model, const EmitPlanOptions &options)
      : model_(model), options_(options) {}

  FailureOr<std::vector<uint8_t>> run();

private:
  /// Where the instructions of a region go.
  struct Context {
    int32_t block = -1;
    /// io runs on rank 0 alone (`if rank == 0 { ... }`, every rank0_only).
    bool rank0Only = false;
  };

  LogicalResult emitHeader();
  LogicalResult emitParamsAndState();
  LogicalResult emitRecipe();
  LogicalResult emitRegion(Region &region, Context ctx);
  LogicalResult emitOp(Operation &op, Context ctx);
  LogicalResult emitControl(Operation &op, Context ctx, bool &handled);
  LogicalResult emitStepOp(Operation &op, Context ctx, bool &handled);
  LogicalResult emitHostOp(Operation &op, Context ctx, bool &handled);
  LogicalResult emitComputeOp(Operation &op, Context ctx);
  /// An md compute op's instruction, ready to be added: its block and its
  /// operand buffers. The families below fill its attribute struct.
  struct Pending {
    Operation &op;
    Context ctx;
    std::vector<int32_t> inputs;
    std::vector<int32_t> outputs;
  };
  /// The buffers of a compute op's results: new ones, or for an optimizer
  /// update the state it updates in place.
  FailureOr<std::vector<int32_t>> computeOutputs(Operation &op);
  /// Each family answers nothing for an op not its own.
  /// md.view and md.shard_slice (no kernels: views of their operand).
  std::optional<LogicalResult> emitBufferOp(const Pending &p);
  /// The collectives: group and reduction enums, bucket -1 for none.
  std::optional<LogicalResult> emitCollectiveOp(const Pending &p);
  /// Every kernel (an MD_KERNEL row of Opcodes.def, md.reshape a view):
  /// md.<name> becomes opcode <Name>, each slot read by name from the op.
  std::optional<LogicalResult> emitKernelOp(const Pending &p);
  LogicalResult emitEvaluate(EvaluateOp op, Context ctx);
  LogicalResult emitForwardBody(Block &body, ArrayRef<int32_t> args,
                                int32_t block, SmallVectorImpl<int32_t> &out,
                                Operation *at);

  /// A new transient buffer for `value`.
  FailureOr<int32_t> newBuffer(Value value, llvm::StringRef name,
                               Operation *at);
  /// The buffers of `op`'s results, new.
  FailureOr<SmallVector<int32_t>> results(Operation &op);
  /// The buffer of `value` where `user` (in `block`) reads it.
  FailureOr<int32_t> use(Value value, int32_t block, Operation *user);
  FailureOr<SmallVector<int32_t>> uses(ValueRange values, int32_t block,
                                       Operation *user);
  /// Appends an instruction for `op` with its stream, events and location.
  fb::InstructionT &add(Context ctx, Operation *op, fb::Opcode opcode,
                        std::vector<int32_t> inputs,
                        std::vector<int32_t> outputs);
  /// Writes `attrs` into `inst`'s attribute slots (runtime/plan/OpAttrs.h):
  /// every opcode's attributes go through its struct, by slot name. A slot
  /// of a later schema version raises the plan's to it.
  template <typename Attrs>
  LogicalResult encode(Operation *op, const Attrs &attrs,
                       fb::InstructionT &inst) {
    if (absl::Status s = plan::Encode(attrs, inst); !s.ok())
      return op->emitError(std::string(s.message()));
    b_.plan().schema_version =
        std::max(b_.plan().schema_version,
                 plan::InstructionSchemaVersion(inst.opcode, inst.ints.size()));
    return success();
  }
  /// Adds the instruction of `attrs`' opcode for `p` and encodes `attrs`.
  template <typename Attrs>
  LogicalResult emitAs(const Pending &p, const Attrs &attrs) {
    fb::InstructionT &inst =
        add(p.ctx, &p.op, Attrs::kOpcode, p.inputs, p.outputs);
    return encode(&p.op, attrs, inst);
  }
  int32_t event(int64_t id);
  int32_t location(Location loc);
  int32_t dataset(DataAttr data);
  FailureOr<int32_t> state(llvm::StringRef symbol, Operation *user);

  ModelOp model_;
  TrainOp train_;
  const EmitPlanOptions &options_;
  PlanBuilder b_;

  llvm::DenseMap<Value, int32_t> buffers_;
  /// Constants are materialised in each block that reads them.
  llvm::DenseMap<std::pair<Value, int32_t>, int32_t> constants_;
  llvm::StringMap<int32_t> states_;
  llvm::DenseMap<int64_t, int32_t> events_;
  std::map<std::tuple<std::string, unsigned, unsigned>, int32_t> locations_;
  llvm::DenseMap<Attribute, int32_t> datasets_;
  /// The state a buffer was loaded from (md.state_load), for in-place
  /// updates.
  llvm::DenseMap<int32_t, int32_t> loadedFrom_;
  /// md's memory categories of the step's values (computed at W = 1, where
  /// the micro-step body runs whenever it can run at all).
  llvm::DenseMap<Value, MemoryCategory> categories_;
  /// Per unit: its flat parameter state for evaluation, and its params.
  struct UnitInfo {
    int32_t master = -1;
    bool sharded = false;
    Group group = Group::world;
    int64_t numel = 0;
    Type elementType;
  };
  std::vector<UnitInfo> units_;
  llvm::StringMap<ParamOp> params_;
};

} // namespace md::emitter

#endif // MD_TARGET_PLAN_EMITTER_H
