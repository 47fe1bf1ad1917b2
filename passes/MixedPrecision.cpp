//===- MixedPrecision.cpp - md-mixed-precision ----------------------------===//
//
// Places the casts of the plan's precision policy in the step program that
// md-apply-plan built (docs/passes.md, "After md-mixed-precision"):
//
//   master f32 shard --cast P--> all-gather (moves P) --> views in P
//   batch --cast P--> compute in P (losses f32; md.batch_norm's mean and
//     inverse std f32; SyncBatchNorm's means in P, all-reduced in f32)
//   gradient in P --> accumulate / total in f32 --cast R--> reduce
//     --cast f32--> optimizer
//
// with P, R the plan's param and reduce dtypes. Casts between equal types are
// never made, so an all-f32 policy leaves the program unchanged.
//
//===----------------------------------------------------------------------===//

#include "dialect/MdDiscardableAttrs.h"
#include "passes/Passes.h"
#include "passes/analysis/StepProgram.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"

namespace md {
#define GEN_PASS_DEF_MIXEDPRECISION
#include "passes/Passes.h.inc"
} // namespace md

using namespace mlir;
using namespace md;

namespace {

class MixedPrecisionPass
    : public md::impl::MixedPrecisionBase<MixedPrecisionPass> {
public:
  void runOnOperation() override;

private:
  /// `value` converted to element type `type`, by a new md.cast after its
  /// definition, or `value` itself when it already has it.
  Value castTo(OpBuilder &b, Value value, Type type);
  /// `grad_accumulation = sharded`: each micro-step's gradient (in P) is
  /// reduce-scattered in R and its shard accumulates in f32.
  void castShardedAccumulation(Region &step);
  StateOp getParamsState(StateOp master);
  void retypeParams(Block &block);
  void refreshParams(Block &block);
  void retypeCompute(Block &block);
  void castReductions(Block &block);

  Type paramType, reduceType;
  ModelOp model;
  DenseMap<StateOp, StateOp> paramsOf;
  DenseSet<StateOp> created;
};

} // namespace

static RankedTensorType withElementType(Type type, Type element) {
  auto tensor = cast<RankedTensorType>(type);
  return RankedTensorType::get(tensor.getShape(), element);
}

static bool isFloatTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa<FloatType>(tensor.getElementType());
}

Value MixedPrecisionPass::castTo(OpBuilder &b, Value value, Type type) {
  auto tensor = cast<RankedTensorType>(value.getType());
  if (tensor.getElementType() == type)
    return value;
  return CastOp::create(b, value.getLoc(), withElementType(tensor, type),
                        value);
}

/// Parameters: the shard is cast to P before its all-gather, a replicated
/// master is cast to P where it is read, the `params` state is kept in P.
/// The `params` state of `master`'s unit: a copy of the master weights in
/// P that the forward and backward read, sharded like the master. Made on
/// first request for the plans that do not keep one already (fsdp-full,
/// hybrid and ddp; zero1 and fsdp-grad-op have it from md-apply-plan).
StateOp MixedPrecisionPass::getParamsState(StateOp master) {
  StateOp &params = paramsOf[master];
  if (params)
    return params;
  OpBuilder b(master);
  b.setInsertionPointAfter(master);
  std::string name = master.getSymName().str();
  name = name.substr(0, name.rfind('.')) + ".params";
  params = StateOp::create(b, master.getLoc(), name,
                           withElementType(master.getType(), paramType),
                           master.getShardAttr(), master.getGroupAttr(),
                           StateRole::params, master.getUnitAttr());
  created.insert(master);
  return params;
}

/// Runs `visit` on every op of `block`, in order, and on those of the
/// md.micro_steps bodies in it instead of the micro_steps op itself. `visit`
/// may erase or replace the op it is given.
static void forEachStepOp(Block &block,
                          llvm::function_ref<void(Operation &)> visit) {
  for (Operation &op : llvm::make_early_inc_range(block)) {
    if (auto micro = dyn_cast<MicroStepsOp>(op))
      forEachStepOp(micro.getBody().front(), visit);
    else
      visit(op);
  }
}

/// Parameters: the forward and backward read the `params` state in P; a
/// shard cast right before an all-gather (the post-step gathers of zero1 and
/// fsdp-grad-op) moves P too.
void MixedPrecisionPass::retypeParams(Block &block) {
  OpBuilder b(&getContext());
  auto masterOf = [&](Value value) -> StateOp {
    auto load = value.getDefiningOp<StateLoadOp>();
    if (!load)
      return nullptr;
    auto state = SymbolTable::lookupNearestSymbolFrom<StateOp>(
        model, load.getStateAttr());
    return state && state.getRole() == StateRole::master ? state : nullptr;
  };
  forEachStepOp(block, [&](Operation &op) {
    if (auto gather = dyn_cast<AllGatherOp>(op)) {
      b.setInsertionPoint(gather);
      if (StateOp master = masterOf(gather.getInput())) {
        // A unit gathered for the forward or backward: from its P shard.
        StateOp params = getParamsState(master);
        gather.getInputMutable().assign(StateLoadOp::create(
            b, gather.getLoc(), params.getType(), params.getSymName()));
      } else {
        gather.getInputMutable().assign(
            castTo(b, gather.getInput(), paramType));
      }
      gather.getResult().setType(
          withElementType(gather.getResult().getType(), paramType));
      return;
    }
    if (auto load = dyn_cast<StateLoadOp>(op)) {
      auto state = SymbolTable::lookupNearestSymbolFrom<StateOp>(
          model, load.getStateAttr());
      if (state.getRole() == StateRole::params ||
          state.getRole() == StateRole::frozen) {
        load.getResult().setType(withElementType(load.getType(), paramType));
        return;
      }
      // A replicated master read as parameters (ddp, single): read the P
      // copy instead.
      bool feedsViews = !load->use_empty() &&
                        llvm::all_of(load->getUsers(), [](Operation *u) {
                          return isa<ViewOp>(u);
                        });
      if (state.getRole() == StateRole::master && feedsViews) {
        StateOp params = getParamsState(state);
        b.setInsertionPoint(load);
        Value copy = StateLoadOp::create(b, load.getLoc(), params.getType(),
                                         params.getSymName());
        load.getResult().replaceAllUsesWith(copy);
        load.erase();
      }
      return;
    }
    if (auto view = dyn_cast<ViewOp>(op)) {
      Type element =
          cast<RankedTensorType>(view.getSource().getType()).getElementType();
      view.getResult().setType(withElementType(view.getType(), element));
      return;
    }
  });
}

/// After the optimizer stores a master that got a `params` copy here, the
/// copy is refreshed: cast once per step, not once per use.
void MixedPrecisionPass::refreshParams(Block &block) {
  OpBuilder b(&getContext());
  for (StateStoreOp store :
       llvm::make_early_inc_range(block.getOps<StateStoreOp>())) {
    auto state = SymbolTable::lookupNearestSymbolFrom<StateOp>(
        model, store.getStateAttr());
    if (!state || !created.contains(state))
      continue;
    StateOp params = paramsOf.lookup(state);
    b.setInsertionPointAfter(store);
    Value copy = castTo(b, store.getValue(), paramType);
    StateStoreOp::create(b, store.getLoc(), copy, params.getSymName());
  }
}

/// Operands that stay f32 whatever P is: the loss seed and the statistics
/// (mean, inverse std) md.batch_norm hands its gradient.
static bool keepsF32Operand(Operation *op, unsigned index) {
  if (isa<CrossEntropyGradOp>(op))
    return index == 0;
  if (isa<BatchNormGradOp>(op))
    return index >= 3;
  return false;
}

static bool keepsF32Result(Operation *op, unsigned index) {
  if (isa<CrossEntropyOp>(op))
    return true;
  if (isa<BatchNormOp>(op))
    return index >= 1;
  return false;
}

/// The forward and backward compute in P.
void MixedPrecisionPass::retypeCompute(Block &block) {
  OpBuilder b(&getContext());
  forEachStepOp(block, [&](Operation &op) {
    if (auto batch = dyn_cast<BatchOp>(op)) {
      b.setInsertionPointAfter(batch);
      for (Value value : batch.getResults()) {
        if (!isFloatTensor(value.getType()))
          continue;
        Value cast = castTo(b, value, paramType);
        value.replaceAllUsesExcept(cast, cast.getDefiningOp());
      }
      return;
    }
    if (auto record = dyn_cast<RecordLossOp>(op)) {
      b.setInsertionPoint(record);
      record.getLossMutable().assign(
          castTo(b, record.getLoss(), Float32Type::get(&getContext())));
      return;
    }
    if (auto flatten = dyn_cast<FlattenOp>(op)) {
      // A unit's flat gradient, in the gradients' dtype.
      Type element = cast<RankedTensorType>(flatten.getInputs()[0].getType())
                         .getElementType();
      flatten.getResult().setType(
          withElementType(flatten.getResult().getType(), element));
      return;
    }
    if (auto reduce = dyn_cast<AllReduceOp>(op);
        reduce && mark::isSyncBatchNorm(&op)) {
      // SyncBatchNorm's statistics are buffers: reduced in the buffer
      // dtype (f32).
      b.setInsertionPoint(reduce);
      Type f32 = Float32Type::get(&getContext());
      reduce.getInputMutable().assign(castTo(b, reduce.getInput(), f32));
      reduce.getResult().setType(reduce.getInput().getType());
      return;
    }
    if (isa<CollectiveOpInterface>(op)) {
      // An all-reduce or broadcast inside the forward or backward keeps its
      // operand's type.
      if (mark::unit(&op) && isa<AllReduceOp, BroadcastOp>(op))
        op.getResult(0).setType(op.getOperand(0).getType());
      return;
    }
    // Compute ops of the forward and backward carry md.unit.
    if (!mark::unit(&op))
      return;
    b.setInsertionPoint(&op);
    for (OpOperand &operand : op.getOpOperands()) {
      if (!isFloatTensor(operand.get().getType()) ||
          keepsF32Operand(&op, operand.getOperandNumber()))
        continue;
      operand.set(castTo(b, operand.get(), paramType));
    }
    for (OpResult result : op.getResults())
      if (isFloatTensor(result.getType()) &&
          !keepsF32Result(&op, result.getResultNumber()))
        result.setType(withElementType(result.getType(), paramType));
  });
}

/// Gradients are reduced in R and handed to the optimizer in R.
void MixedPrecisionPass::castReductions(Block &block) {
  OpBuilder b(&getContext());
  for (GradTotalOp total :
       llvm::make_early_inc_range(block.getOps<GradTotalOp>())) {
    // The chain grad_total -> reduce-scatter/all-reduce (-> all-reduce)
    // (-> shard_slice) that md-apply-plan builds.
    SmallVector<Operation *> chain;
    Value end = total.getResult();
    while (end.hasOneUse()) {
      Operation *user = *end.getUsers().begin();
      if (!isa<ReduceScatterOp, AllReduceOp, ShardSliceOp>(user))
        break;
      chain.push_back(user);
      end = user->getResult(0);
    }
    if (chain.empty())
      continue; // one rank: nothing is reduced
    b.setInsertionPoint(chain.front());
    chain.front()->setOperand(0, castTo(b, total.getResult(), reduceType));
    for (Operation *op : chain)
      op->getResult(0).setType(
          withElementType(op->getResult(0).getType(), reduceType));
    // The reduced gradient stays in R up to the optimizer, which widens it
    // exactly (ZeRO's 2 bytes per gradient element with R = bf16).
  }
  // A unit gradient md-apply-plan reduced in ranges (bucket_cap below the
  // unit) is joined again in R.
  for (FlattenOp flatten : block.getOps<FlattenOp>())
    if (llvm::all_of(flatten.getInputs(), [](Value input) {
          return input.getDefiningOp<AllReduceOp>() != nullptr;
        }))
      flatten.getResult().setType(withElementType(
          flatten.getResult().getType(),
          cast<RankedTensorType>(flatten.getInputs()[0].getType())
              .getElementType()));
  // Slices of reduced gradients (the norm of ddp, the update of zero1) and
  // clipping keep the gradients' type.
  for (ShardSliceOp slice : block.getOps<ShardSliceOp>())
    slice.getResult().setType(withElementType(
        slice.getResult().getType(),
        cast<RankedTensorType>(slice.getInput().getType()).getElementType()));
  for (ClipOp clip : block.getOps<ClipOp>())
    for (auto [grad, result] : llvm::zip(clip.getGrads(), clip.getResults()))
      result.setType(grad.getType());
}

void MixedPrecisionPass::castShardedAccumulation(Region &step) {
  OpBuilder b(&getContext());
  step.walk([&](ReduceScatterOp scatter) {
    if (scatter->use_empty() ||
        !llvm::all_of(scatter->getUsers(),
                      llvm::IsaPred<GradAccumulateOp, GradTotalOp>))
      return;
    b.setInsertionPoint(scatter);
    scatter.getInputMutable().assign(
        castTo(b, scatter.getInput(), reduceType));
    scatter.getResult().setType(
        withElementType(scatter.getResult().getType(), reduceType));
  });
}

void MixedPrecisionPass::runOnOperation() {
  model = getOperation();
  PlanAttr plan = model.getPlanAttr();
  TrainOp train = model.getTrain();
  if (!plan || !train) {
    model.emitOpError("needs a '#md.plan' and an 'md.train'");
    return signalPassFailure();
  }
  // `#md.plan` guarantees master = f32: the optimizer ops keep master
  // weights and moments in f32.
  if (!plan.getBufferDtype().isF32()) {
    model.emitOpError("buffer dtype ")
        << plan.getBufferDtype()
        << " is not supported: batch-norm statistics are all-reduced and "
           "kept in f32";
    return signalPassFailure();
  }
  paramType = plan.getParamDtype();
  reduceType = plan.getReduceDtype();
  Block &step = train.getStep().front();
  if (step.empty()) {
    train.emitOpError("has no step program (run md-apply-plan first)");
    return signalPassFailure();
  }

  // The `params` state holds P, and so does a unit of frozen parameters:
  // nothing updates it, so it needs no f32 master.
  for (StateOp state : model.getBody().front().getOps<StateOp>())
    if (state.getRole() == StateRole::params ||
        state.getRole() == StateRole::frozen)
      state.setTypeAttr(
          TypeAttr::get(withElementType(state.getType(), paramType)));
  if (paramType != Float32Type::get(&getContext())) {
    retypeParams(step);
    refreshParams(step);
  }
  retypeCompute(step);
  castReductions(step);
  castShardedAccumulation(train.getStep());
  // Loads the P copies replaced.
  eraseDeadOps(train.getStep());
}
