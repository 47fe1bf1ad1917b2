//===- ApplyPlan.cpp - md-apply-plan
//---------------------------------------===//
//
// Builds the per-step program of `md.train` from the gradient function that
// md-autodiff made and the plan on `md.model`. docs/passes.md ("After
// md-apply-plan") is the contract; this file follows it section by section:
// units and state, one micro-step (forward + backward with the plan's
// parameter access and gradient reductions), then clipping, the optimizer and
// the post-step all-gathers.
//
//===----------------------------------------------------------------------===//

#include "dialect/MdDiscardableAttrs.h"
#include "dialect/ParamGroups.h"
#include "passes/Passes.h"
#include "dialect/PlanOptions.h"
#include "passes/analysis/StepProgram.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringExtras.h"

namespace md {
#define GEN_PASS_DEF_APPLYPLAN
#include "passes/Passes.h.inc"
} // namespace md

using namespace mlir;
using namespace md;

namespace {

/// How a parallelism plan shards a unit's parameters, gradients and
/// optimizer state (ZeRO stage 0 to 3).
enum class Sharding {
  Replicated, // ddp, single: everything full on every rank
  Zero1,      // optimizer state sharded; gradients all-reduced
  GradOp,     // + gradients reduce-scattered; params kept gathered
  Full,       // + parameters sharded, all-gathered around each use
};

enum class Phase { Forward, Backward };

/// One unit: the trainable parameters of a wrap unit in `md.param` order,
/// packed into a flat buffer of `numel` elements, and the states that hold
/// it; or (`frozen`) the frozen parameters of a wrap unit, in a `frozen`
/// state of their own, with no gradient and no optimizer state.
struct Unit {
  int64_t id = 0;
  /// The wrap unit its parameters are in: the `md.unit` of the ops that
  /// compute with them. `id` for a trainable unit and for a frozen unit
  /// whose wrap unit has no trainable parameter; a unit id of its own
  /// otherwise.
  int64_t wrap = 0;
  bool frozen = false;
  SmallVector<ParamOp> params;
  int64_t numel = 0;
  bool checkpoint = false;
  StateOp master, params_, expAvg, expAvgSq, momentum, gradAcc;
  StateOp frozenState;
  /// A gradient all-reduced in several ranges (bucket_cap below the unit's
  /// gradient, as DDP's buckets split a module): each a contiguous run of
  /// `params`, with its own accumulator. Empty: the unit is reduced whole.
  struct Range {
    unsigned begin = 0, end = 0; // indices into `params`
    int64_t numel = 0;
    StateOp gradAcc;
  };
  SmallVector<Range> ranges;
};

/// What one micro-step is built from: the mapping from the gradient
/// function's body into the step, and the parameter buffers and views read
/// so far.
struct MicroStep {
  Block *body = nullptr;
  IRMapping map;
  DenseMap<std::pair<Unit *, int>, Value> flats;
  DenseMap<std::pair<Operation *, Value>, Value> views;
};

class ApplyPlanPass : public md::impl::ApplyPlanBase<ApplyPlanPass> {
public:
  void runOnOperation() override;

private:
  LogicalResult collectUnits();
  void createStates(OpBuilder &b);
  /// Emits one micro-step at `b`'s insertion point and returns, per unit
  /// (in `units` order), the gradient the optimizer consumes (only when
  /// `last`; the earlier micro-steps add into `grad_acc` and return nothing).
  LogicalResult buildMicroStep(OpBuilder &b, bool last,
                               SmallVectorImpl<Value> &unitGrads);
  void buildUpdate(OpBuilder &b, ArrayRef<Value> unitGrads);

  /// The steps of one micro-step.
  /// The flat buffer `unit`'s parameters are read from in `phase`, made at
  /// its first use in the micro-step.
  Value paramFlat(OpBuilder &b, MicroStep &step, Unit &unit, Phase phase,
                  Location loc);
  /// The view of `param` in its unit's flat buffer for `phase`.
  Value paramValue(OpBuilder &b, MicroStep &step, ParamOp param, Phase phase,
                   Location loc);
  /// Clones `op` with parameter reads resolved for `phase` and operands
  /// taken from `overrides` first, then from the micro-step's mapping.
  Operation *cloneWith(OpBuilder &b, MicroStep &step, Operation &op,
                       Phase phase, IRMapping *overrides);
  /// Clones the gradient function's body, recomputing the forward of each
  /// checkpointed unit right before the unit's first backward op.
  void cloneBody(OpBuilder &b, MicroStep &step);
  /// Records the loss and maps each trainable parameter to its gradient.
  LogicalResult collectGradients(OpBuilder &b, MicroStep &step,
                                 DenseMap<Operation *, Value> &gradOf);
  /// Flattens each unit's gradient right after its last contribution and
  /// accumulates it (not `last`) or reduces it over the ranks (`last`).
  LogicalResult reduceGradients(OpBuilder &b, bool last,
                                const DenseMap<Operation *, Value> &gradOf,
                                SmallVectorImpl<Value> &unitGrads);
  /// The collectives that reduce `unit`'s accumulated gradient `total` as
  /// the plan's sharding asks.
  Value reduceUnitGradient(OpBuilder &b, Location loc, Unit &unit, Value total);
  /// Splits the gradient of each unit larger than the plan's bucket_cap into
  /// ranges (Unit::ranges) when the plan all-reduces gradients.
  void splitUnitGradients();
  /// Reduces `unit`'s gradient range by range (`last`), or accumulates each
  /// range (not `last`), each right after its own last contribution.
  Value reduceRanges(OpBuilder &b, bool last, Unit &unit,
                     const DenseMap<Operation *, Value> &gradOf);
  /// The reduce-scatter of `unit`'s flat gradient `flat` over the shard group.
  Value scatterUnitGradient(OpBuilder &b, Location loc, Unit &unit, Value flat);
  /// With a hybrid mesh, the all-reduce of a gradient shard across replicas.
  Value replicateUnitGradient(OpBuilder &b, Location loc, Unit &unit,
                              Value shard);

  IntegerAttr i64(int64_t v) {
    return IntegerAttr::get(IntegerType::get(&getContext(), 64), v);
  }

  RankedTensorType shardType() {
    return RankedTensorType::get({ShapedType::kDynamic}, f32);
  }
  RankedTensorType flatType(const Unit &unit) {
    return RankedTensorType::get({unit.numel}, f32);
  }
  /// Whether the model runs on one rank (no collective at all).
  bool singleRank() { return model.getStaticGroupSize(Group::world) == 1; }
  bool sharded() { return sharding != Sharding::Replicated; }

  ModelOp model;
  PlanAttr plan;
  TrainOp train;
  FuncOp gradFunc;
  Sharding sharding = Sharding::Replicated;
  bool hybrid = false;
  /// `grad_accumulation = sharded`: each micro-step's gradient is
  /// reduce-scattered and only the shard accumulates.
  bool shardedAccumulation = false;
  /// The group a unit's state is sharded over and gradients reduce-scattered
  /// in: the world, or the shard group of a hybrid mesh.
  Group shardGroup = Group::world;
  Type f32;
  /// The trainable units, then the frozen ones.
  SmallVector<Unit> units;
  SmallVector<Unit> frozenUnits;
  DenseMap<Operation *, Unit *> unitOfParam;
};

} // namespace

//===----------------------------------------------------------------------===//
// Units and state
//===----------------------------------------------------------------------===//

LogicalResult ApplyPlanPass::collectUnits() {
  std::map<int64_t, Unit> byId, frozenByWrap;
  int64_t maxWrap = 0;
  for (ParamOp param : model.getBody().front().getOps<ParamOp>()) {
    if (!param.getTensorType().getElementType().isF32())
      return param.emitOpError("md-apply-plan expects f32 parameters (the "
                               "plan's precision decides the compute dtype), "
                               "got ")
             << param.getTensorType();
    int64_t wrap = param.getUnit().value_or(0);
    maxWrap = std::max(maxWrap, wrap);
    Unit &unit = (param.getFrozen() ? frozenByWrap : byId)[wrap];
    unit.id = unit.wrap = wrap;
    unit.frozen = param.getFrozen();
    unit.params.push_back(param);
  }
  if (byId.empty()) {
    model.emitOpError("has no trainable parameter: every 'md.param' is "
                      "frozen, so a step would train nothing");
    return failure();
  }
  // Frozen parameters get units of their own: the wrap unit's id when it
  // has no trainable parameter, else the next free id, so that ids stay
  // dense and a unit's state holds trainable or frozen parameters, never
  // both.
  int64_t nextId = maxWrap + 1;
  for (auto &[wrap, unit] : frozenByWrap) {
    if (byId.count(wrap))
      unit.id = nextId++;
    for (ParamOp param : unit.params)
      param.setUnitAttr(i64(unit.id));
  }
  // A repeated block is checkpointed when the plan names it: its instances'
  // parameters are `<name>.<index>.<...>`.
  auto isCheckpointed = [&](StringRef name) {
    for (StringAttr block : plan.getCheckpointActivations()) {
      std::string prefix = (block.getValue() + ".").str();
      if (!name.starts_with(prefix))
        continue;
      StringRef rest = name.drop_front(prefix.size());
      StringRef index = rest.take_while(llvm::isDigit);
      if (!index.empty() && rest.drop_front(index.size()).starts_with("."))
        return true;
    }
    return false;
  };
  auto pack = [&](Unit &unit) {
    for (ParamOp param : unit.params) {
      param.setOffsetAttr(i64(unit.numel));
      unit.numel += param.getTensorType().getNumElements();
      unit.checkpoint |= unit.wrap != 0 && isCheckpointed(param.getSymName());
    }
  };
  for (auto &[id, unit] : byId) {
    pack(unit);
    units.push_back(std::move(unit));
  }
  for (auto &[wrap, unit] : frozenByWrap) {
    pack(unit);
    frozenUnits.push_back(std::move(unit));
  }
  for (SmallVector<Unit> *list : {&units, &frozenUnits})
    for (Unit &unit : *list)
      for (ParamOp param : unit.params)
        unitOfParam[param] = &unit;
  return success();
}

void ApplyPlanPass::createStates(OpBuilder &b) {
  MLIRContext *context = &getContext();
  // States go right after the parameters, so that the model reads in order:
  // parameters, states, functions, recipe.
  Operation *lastParam = nullptr;
  for (ParamOp param : model.getBody().front().getOps<ParamOp>())
    lastParam = param;
  b.setInsertionPointAfter(lastParam);
  Location loc = model.getLoc();
  auto make = [&](Unit &unit, StringRef suffix, StateRole role,
                  bool shard) -> StateOp {
    std::string name = "u" + std::to_string(unit.id) + "." + suffix.str();
    StateOp state;
    if (shard)
      state = StateOp::create(b, loc, name, shardType(), i64(unit.numel),
                              GroupAttr::get(context, shardGroup), role,
                              i64(unit.id));
    else
      state = StateOp::create(b, loc, name, flatType(unit), nullptr, nullptr,
                              role, i64(unit.id));
    b.setInsertionPointAfter(state);
    return state;
  };
  // A frozen unit: one state, sharded where fsdp-full shards parameters and
  // gathered around each use like a trainable unit; whole everywhere else.
  for (Unit &unit : frozenUnits)
    unit.frozenState = make(unit, "frozen", StateRole::frozen,
                            sharding == Sharding::Full);
  bool shardOptimizer = sharded();
  for (Unit &unit : units) {
    unit.master = make(unit, "master", StateRole::master, shardOptimizer);
    if (sharding == Sharding::Zero1 || sharding == Sharding::GradOp)
      unit.params_ = make(unit, "params", StateRole::params, false);
    if (isa<AdamWAttr>(train.getOptimizer())) {
      unit.expAvg = make(unit, "exp_avg", StateRole::exp_avg, shardOptimizer);
      unit.expAvgSq =
          make(unit, "exp_avg_sq", StateRole::exp_avg_sq, shardOptimizer);
    } else if (auto sgd = dyn_cast<SGDAttr>(train.getOptimizer())) {
      if (!sgd.getMomentum().isZero())
        unit.momentum =
            make(unit, "momentum", StateRole::momentum, shardOptimizer);
    }
    if (unit.ranges.empty()) {
      unit.gradAcc =
          make(unit, "grad_acc", StateRole::grad_acc, shardedAccumulation);
      continue;
    }
    for (auto [i, range] : llvm::enumerate(unit.ranges)) {
      std::string name =
          "u" + std::to_string(unit.id) + ".grad_acc." + std::to_string(i);
      range.gradAcc = StateOp::create(
          b, loc, name, RankedTensorType::get({range.numel}, f32), nullptr,
          nullptr, StateRole::grad_acc, i64(unit.id));
      b.setInsertionPointAfter(range.gradAcc);
    }
  }
}

//===----------------------------------------------------------------------===//
// One micro-step
//===----------------------------------------------------------------------===//

static bool isBackward(Operation *op) { return mark::isBackward(op); }

static int64_t unitOf(Operation *op) { return mark::unit(op).value_or(0); }

Value ApplyPlanPass::paramFlat(OpBuilder &b, MicroStep &step, Unit &unit,
                               Phase phase, Location loc) {
  // Only fsdp-full gathers per phase; with reshard_after_forward = false
  // the backward reuses the forward's gather.
  int key = sharding == Sharding::Full && plan.getReshardAfterForward() &&
                    phase == Phase::Backward
                ? 1
                : 0;
  Value &flat = step.flats[{&unit, key}];
  if (flat)
    return flat;
  if (unit.frozen) {
    StringRef state = unit.frozenState.getSymName();
    if (sharding != Sharding::Full) {
      flat = StateLoadOp::create(b, loc, flatType(unit), state);
      return flat;
    }
    Value shard = StateLoadOp::create(b, loc, shardType(), state);
    auto gather =
        AllGatherOp::create(b, loc, flatType(unit), shardGroup, nullptr, shard);
    mark::setUnit(gather, unit.id);
    mark::setPhase(gather, key ? "backward" : "forward");
    flat = gather;
    return flat;
  }
  switch (sharding) {
  case Sharding::Full: {
    Value shard =
        StateLoadOp::create(b, loc, shardType(), unit.master.getSymName());
    auto gather =
        AllGatherOp::create(b, loc, flatType(unit), shardGroup, nullptr, shard);
    mark::setUnit(gather, unit.id);
    mark::setPhase(gather, key ? "backward" : "forward");
    flat = gather;
    break;
  }
  case Sharding::Zero1:
  case Sharding::GradOp:
    flat =
        StateLoadOp::create(b, loc, flatType(unit), unit.params_.getSymName());
    break;
  case Sharding::Replicated:
    flat =
        StateLoadOp::create(b, loc, flatType(unit), unit.master.getSymName());
    break;
  }
  return flat;
}

Value ApplyPlanPass::paramValue(OpBuilder &b, MicroStep &step, ParamOp param,
                                Phase phase, Location loc) {
  Unit &unit = *unitOfParam.lookup(param);
  Value flat = paramFlat(b, step, unit, phase, loc);
  Value &view = step.views[{param.getOperation(), flat}];
  if (!view)
    view = ViewOp::create(b, loc, param.getTensorType(), flat,
                          static_cast<uint64_t>(*param.getOffset()));
  return view;
}

Operation *ApplyPlanPass::cloneWith(OpBuilder &b, MicroStep &step,
                                    Operation &op, Phase phase,
                                    IRMapping *overrides) {
  IRMapping &map = step.map;
  SmallVector<std::pair<Value, Value>> saved;
  auto remap = [&](Value from, Value to) {
    saved.push_back({from, map.lookupOrNull(from)});
    map.map(from, to);
  };
  for (Value operand : op.getOperands()) {
    if (auto ref = operand.getDefiningOp<ParamRefOp>()) {
      auto param = SymbolTable::lookupNearestSymbolFrom<ParamOp>(
          model, ref.getParamAttr());
      remap(operand, paramValue(b, step, param, phase, op.getLoc()));
    } else if (overrides && overrides->contains(operand)) {
      remap(operand, overrides->lookup(operand));
    }
  }
  Operation *clone = b.clone(op, map);
  for (auto [from, old] : llvm::reverse(saved)) {
    if (old)
      map.map(from, old);
    else
      map.erase(from);
  }
  return clone;
}

void ApplyPlanPass::cloneBody(OpBuilder &b, MicroStep &step) {
  // The forward ops of each checkpointed unit, recomputed right before the
  // unit's first backward op; `recomputed[u]` maps the saved forward values
  // to their recomputed twins.
  DenseMap<int64_t, SmallVector<Operation *>> forwardOpsOf;
  for (SmallVector<Unit> *list : {&units, &frozenUnits})
    for (Unit &unit : *list)
      if (unit.checkpoint)
        forwardOpsOf[unit.wrap];
  for (Operation &op : step.body->without_terminator())
    if (!isBackward(&op) && !isa<ParamRefOp>(op) &&
        forwardOpsOf.count(unitOf(&op)))
      forwardOpsOf[unitOf(&op)].push_back(&op);
  DenseMap<int64_t, IRMapping> recomputed;

  for (Operation &op : step.body->without_terminator()) {
    if (isa<ParamRefOp>(op))
      continue;
    Phase phase = isBackward(&op) ? Phase::Backward : Phase::Forward;
    int64_t unitId = unitOf(&op);
    IRMapping *overrides = nullptr;
    if (phase == Phase::Backward && forwardOpsOf.count(unitId)) {
      if (!recomputed.count(unitId)) {
        // Recompute the unit's forward from its saved inputs, with the
        // parameters of the backward phase.
        IRMapping &recompute = recomputed[unitId];
        for (Operation *fwd : forwardOpsOf[unitId]) {
          Operation *clone =
              cloneWith(b, step, *fwd, Phase::Backward, &recompute);
          mark::setRecompute(clone);
          for (auto [from, to] :
               llvm::zip(fwd->getResults(), clone->getResults()))
            recompute.map(from, to);
        }
      }
      overrides = &recomputed[unitId];
    }
    cloneWith(b, step, op, phase, overrides);
  }
}

LogicalResult
ApplyPlanPass::collectGradients(OpBuilder &b, MicroStep &step,
                                DenseMap<Operation *, Value> &gradOf) {
  // Results: the loss, the forward's other results, then one gradient per
  // trainable parameter (`md.grad_of`).
  auto ret = cast<ReturnOp>(step.body->getTerminator());
  Value loss = step.map.lookup(ret.getOperand(0));
  {
    OpBuilder::InsertionGuard guard(b);
    if (Operation *def = loss.getDefiningOp())
      b.setInsertionPointAfter(def);
    RecordLossOp::create(b, train.getLoc(), loss);
  }
  for (unsigned i = 0, e = gradFunc.getNumResults(); i < e; ++i) {
    FlatSymbolRefAttr of = mark::gradOf(gradFunc, i);
    if (!of)
      continue;
    auto param = SymbolTable::lookupNearestSymbolFrom<ParamOp>(model, of);
    if (!param)
      return gradFunc.emitOpError("result ")
             << i << " is the gradient of '" << of.getValue()
             << "', which is not a parameter";
    gradOf[param] = step.map.lookup(ret.getOperand(i));
  }
  return success();
}

static Value tagBackward(Operation *op, IntegerAttr unit) {
  mark::setUnit(op, unit.getInt());
  mark::setBackward(op);
  return op->getResult(0);
}

Value ApplyPlanPass::scatterUnitGradient(OpBuilder &b, Location loc, Unit &unit,
                                         Value flat) {
  return tagBackward(ReduceScatterOp::create(b, loc, shardType(), shardGroup,
                                             nullptr, flat, ReductionKind::avg),
                     i64(unit.id));
}

Value ApplyPlanPass::replicateUnitGradient(OpBuilder &b, Location loc,
                                           Unit &unit, Value shard) {
  if (!hybrid)
    return shard;
  return tagBackward(AllReduceOp::create(b, loc, Group::replicate, nullptr,
                                         shard, ReductionKind::avg),
                     i64(unit.id));
}

Value ApplyPlanPass::reduceUnitGradient(OpBuilder &b, Location loc, Unit &unit,
                                        Value total) {
  if (singleRank())
    return total;
  switch (sharding) {
  case Sharding::Full:
  case Sharding::GradOp:
    return replicateUnitGradient(b, loc, unit,
                                 scatterUnitGradient(b, loc, unit, total));
  case Sharding::Zero1:
    // ZeRO-1 keeps the full reduced gradient until the step, where each
    // rank updates its slice.
  case Sharding::Replicated:
    return tagBackward(AllReduceOp::create(b, loc, Group::world, nullptr, total,
                                           ReductionKind::avg),
                       i64(unit.id));
  }
  llvm_unreachable("unknown sharding");
}

LogicalResult
ApplyPlanPass::reduceGradients(OpBuilder &b, bool last,
                               const DenseMap<Operation *, Value> &gradOf,
                               SmallVectorImpl<Value> &unitGrads) {
  // Each unit's flat gradient, made and reduced right after its last
  // contribution, in the order those contributions complete (backward order).
  Block *block = b.getInsertionBlock();
  Block::iterator end = b.getInsertionPoint();
  SmallVector<std::pair<Operation *, Unit *>> order;
  for (Unit &unit : units) {
    Operation *lastDef = nullptr;
    for (ParamOp param : unit.params) {
      Value grad = gradOf.lookup(param);
      if (!grad)
        return param.emitOpError("has no gradient in @")
               << gradFunc.getSymName() << " (run md-autodiff first)";
      Operation *def = grad.getDefiningOp();
      if (def && def->getBlock() == block &&
          (!lastDef || lastDef->isBeforeInBlock(def)))
        lastDef = def;
    }
    order.push_back({lastDef, &unit});
  }
  unitGrads.assign(units.size(), Value());
  for (auto [lastDef, unit] : order) {
    if (!unit->ranges.empty()) {
      unitGrads[unit - units.data()] = reduceRanges(b, last, *unit, gradOf);
      continue;
    }
    OpBuilder::InsertionGuard guard(b);
    if (lastDef)
      b.setInsertionPointAfter(lastDef);
    else
      b.setInsertionPoint(block, end);
    Location loc = lastDef ? lastDef->getLoc() : train.getLoc();
    SmallVector<Value> grads;
    for (ParamOp param : unit->params)
      grads.push_back(gradOf.lookup(param));
    Value flat = FlattenOp::create(b, loc, flatType(*unit), grads);
    mark::setUnit(flat.getDefiningOp(), unit->id);
    mark::setBackward(flat.getDefiningOp());
    if (shardedAccumulation) {
      // Every micro-step reduces: the accumulator holds the sum of the
      // averaged shards, in micro-step order (FSDP without no_sync).
      Value shard = scatterUnitGradient(b, loc, *unit, flat);
      if (!last) {
        GradAccumulateOp::create(b, loc, shard, unit->gradAcc.getSymName());
        continue;
      }
      Value total = GradTotalOp::create(b, loc, shardType(), shard,
                                        unit->gradAcc.getSymName());
      unitGrads[unit - units.data()] =
          replicateUnitGradient(b, loc, *unit, total);
      continue;
    }
    if (!last) {
      GradAccumulateOp::create(b, loc, flat, unit->gradAcc.getSymName());
      continue;
    }
    Value total = GradTotalOp::create(b, loc, flatType(*unit), flat,
                                      unit->gradAcc.getSymName());
    unitGrads[unit - units.data()] = reduceUnitGradient(b, loc, *unit, total);
  }
  return success();
}

void ApplyPlanPass::splitUnitGradients() {
  // Only all-reduced gradients split: a reduce-scatter's shard of a range is
  // not a range of the unit's shard, and the sharded state is per unit.
  if (singleRank() ||
      (sharding != Sharding::Replicated && sharding != Sharding::Zero1))
    return;
  int64_t elementBytes = plan.getReduceDtype().getIntOrFloatBitWidth() / 8;
  int64_t cap = plan.getBucketCap();
  // Where in the backward each parameter's gradient is complete: the
  // position of the op that returns it from the gradient function.
  DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(gradFunc.getBody().front()))
    position[&op] = static_cast<int64_t>(i);
  DenseMap<Operation *, int64_t> readyAt;
  auto ret = cast<ReturnOp>(gradFunc.getBody().front().getTerminator());
  for (unsigned i = 0, e = gradFunc.getNumResults(); i < e; ++i)
    if (auto of =
            mark::gradOf(gradFunc, i))
      if (auto param = SymbolTable::lookupNearestSymbolFrom<ParamOp>(model, of))
        readyAt[param] = position.lookup(ret.getOperand(i).getDefiningOp());

  for (Unit &unit : units) {
    if (unit.numel * elementBytes <= cap)
      continue;
    // Backward runs the parameters roughly in reverse, so ranges fill from
    // the last parameter, as DDP fills its buckets in reverse order; a
    // parameter is never split, and one larger than the cap is a range of
    // its own. A range also ends before a parameter whose gradient comes
    // later than the range's, unless the rest of the unit fits in the
    // range: a late gradient would hold back the reduction of the early
    // ones, which is what splitting is for.
    SmallVector<int64_t> numelBefore(unit.params.size() + 1, 0);
    for (auto [i, param] : llvm::enumerate(unit.params))
      numelBefore[i + 1] =
          numelBefore[i] + param.getTensorType().getNumElements();
    SmallVector<Unit::Range> ranges;
    Unit::Range current;
    current.begin = current.end = unit.params.size();
    int64_t currentReady = -1;
    for (unsigned i = unit.params.size(); i-- > 0;) {
      int64_t numel = unit.params[i].getTensorType().getNumElements();
      int64_t ready = readyAt.lookup(unit.params[i]);
      bool overCap = (current.numel + numel) * elementBytes > cap;
      bool later = ready > currentReady &&
                   (current.numel + numelBefore[i + 1]) * elementBytes > cap;
      if (current.numel != 0 && (overCap || later)) {
        ranges.push_back(current);
        current = Unit::Range();
        current.end = i + 1;
        currentReady = -1;
      }
      current.begin = i;
      current.numel += numel;
      currentReady = std::max(currentReady, ready);
    }
    ranges.push_back(current);
    if (ranges.size() < 2)
      continue;
    // Offset order, so that the ranges read as the unit's flat gradient.
    std::reverse(ranges.begin(), ranges.end());
    unit.ranges = std::move(ranges);
  }
}

Value ApplyPlanPass::reduceRanges(OpBuilder &b, bool last, Unit &unit,
                                  const DenseMap<Operation *, Value> &gradOf) {
  Block *block = b.getInsertionBlock();
  SmallVector<Value> reduced;
  for (Unit::Range &range : unit.ranges) {
    SmallVector<Value> grads;
    Operation *lastDef = nullptr;
    for (ParamOp param :
         ArrayRef(unit.params).slice(range.begin, range.end - range.begin)) {
      Value grad = gradOf.lookup(param);
      grads.push_back(grad);
      Operation *def = grad.getDefiningOp();
      if (def && def->getBlock() == block &&
          (!lastDef || lastDef->isBeforeInBlock(def)))
        lastDef = def;
    }
    OpBuilder::InsertionGuard guard(b);
    if (lastDef)
      b.setInsertionPointAfter(lastDef);
    Location loc = lastDef ? lastDef->getLoc() : train.getLoc();
    auto type = RankedTensorType::get({range.numel}, f32);
    Value flat = FlattenOp::create(b, loc, type, grads);
    mark::setUnit(flat.getDefiningOp(), unit.id);
    mark::setBackward(flat.getDefiningOp());
    if (!last) {
      GradAccumulateOp::create(b, loc, flat, range.gradAcc.getSymName());
      continue;
    }
    Value total =
        GradTotalOp::create(b, loc, type, flat, range.gradAcc.getSymName());
    reduced.push_back(
        tagBackward(AllReduceOp::create(b, loc, Group::world, nullptr, total,
                                        ReductionKind::avg),
                    i64(unit.id)));
  }
  if (!last)
    return Value();
  // The optimizer updates the unit's flat buffer: the reduced ranges joined
  // once the last of them is reduced, at the end of the backward.
  auto joined = FlattenOp::create(b, train.getLoc(), flatType(unit), reduced);
  mark::setUnit(joined, unit.id);
  return joined;
}

LogicalResult ApplyPlanPass::buildMicroStep(OpBuilder &b, bool last,
                                            SmallVectorImpl<Value> &unitGrads) {
  Location stepLoc = train.getLoc();
  MicroStep step;
  step.body = &gradFunc.getBody().front();

  // The micro-batch and the backward seed.
  ArrayRef<Type> argTypes = gradFunc.getArgumentTypes();
  auto batch = BatchOp::create(b, stepLoc, argTypes.drop_back());
  for (auto [arg, value] :
       llvm::zip(step.body->getArguments().drop_back(), batch.getResults()))
    step.map.map(arg, value);
  Value seed = AccumScaleOp::create(b, stepLoc,
                                    step.body->getArguments().back().getType());
  step.map.map(step.body->getArguments().back(), seed);

  cloneBody(b, step);
  DenseMap<Operation *, Value> gradOf;
  if (failed(collectGradients(b, step, gradOf)))
    return failure();
  return reduceGradients(b, last, gradOf, unitGrads);
}

//===----------------------------------------------------------------------===//
// Clipping, optimizer, post-step gathers
//===----------------------------------------------------------------------===//

void ApplyPlanPass::buildUpdate(OpBuilder &b, ArrayRef<Value> unitGrads) {
  Location loc = train.getLoc();
  auto scalarType = RankedTensorType::get({}, f32);
  SmallVector<Value> grads(unitGrads.begin(), unitGrads.end());
  if (sharding == Sharding::Zero1 && !singleRank())
    for (Value &grad : grads)
      grad = ShardSliceOp::create(b, loc, shardType(), grad, Group::world);

  if (std::optional<APFloat> maxNorm = train.getClipGradNorm()) {
    // Every preset adds the same numbers in the same order: this rank's
    // shard of each unit, then one all-reduce over the ranks. DDP slices its
    // replicated gradients for that, so its norm is bitwise the sharded
    // presets' norm.
    SmallVector<Value> local;
    for (Value grad : grads)
      local.push_back(
          sharding == Sharding::Replicated && !singleRank()
              ? ShardSliceOp::create(b, loc, shardType(), grad, shardGroup)
                    .getResult()
              : grad);
    Value squared = GlobalNormOp::create(b, loc, scalarType, local,
                                         /*squared=*/true);
    if (!singleRank())
      squared = AllReduceOp::create(b, loc, shardGroup, nullptr, squared,
                                    ReductionKind::sum);
    Value norm = SqrtOp::create(b, loc, squared);
    auto clip = ClipOp::create(b, loc, grads, norm, *maxNorm);
    grads.assign(clip.getResults().begin(), clip.getResults().end());
  }

  // md.step counts completed steps; the optimizer takes the 1-based number
  // of the step being taken and the schedule's rate at the 0-based one.
  Value step0 = StepOp::create(b, loc, b.getI64Type());
  Value one = arith::ConstantIntOp::create(b, loc, b.getI64Type(), 1);
  Value step = arith::AddIOp::create(b, loc, step0, one);
  Value lr = LrOp::create(b, loc, f32, step0);
  // With parameter groups an update names its unit: each element's decay
  // and lr scale come from its parameter's group, and under sharding each
  // rank finds its shard's parameters at run time.
  bool grouped = static_cast<bool>(getOptimizerGroups(train.getOptimizer()));

  for (auto [unit, grad] : llvm::zip(units, grads)) {
    Type masterType = unit.master.getType();
    IntegerAttr unitAttr = grouped ? i64(unit.id) : IntegerAttr();
    Value master =
        StateLoadOp::create(b, loc, masterType, unit.master.getSymName());
    Value updated;
    if (auto adamw = dyn_cast<AdamWAttr>(train.getOptimizer())) {
      Value m =
          StateLoadOp::create(b, loc, masterType, unit.expAvg.getSymName());
      Value v =
          StateLoadOp::create(b, loc, masterType, unit.expAvgSq.getSymName());
      auto update = AdamWUpdateOp::create(
          b, loc, masterType, masterType, masterType, master, grad, m, v, lr,
          step, adamw.getBeta1(), adamw.getBeta2(), adamw.getEps(),
          adamw.getWeightDecay(), unitAttr);
      StateStoreOp::create(b, loc, update.getNewM(), unit.expAvg.getSymName());
      StateStoreOp::create(b, loc, update.getNewV(),
                           unit.expAvgSq.getSymName());
      updated = update.getNewParam();
    } else {
      auto sgd = cast<SGDAttr>(train.getOptimizer());
      Value buffer;
      if (unit.momentum)
        buffer =
            StateLoadOp::create(b, loc, masterType, unit.momentum.getSymName());
      auto update = SGDUpdateOp::create(
          b, loc, masterType, buffer ? masterType : Type(), master, grad,
          buffer, lr, step, sgd.getMomentum(), sgd.getDampening(),
          sgd.getWeightDecay(), sgd.getNesterov(), unitAttr);
      if (buffer)
        StateStoreOp::create(b, loc, update.getNewMomentumBuffer(),
                             unit.momentum.getSymName());
      updated = update.getNewParam();
    }
    StateStoreOp::create(b, loc, updated, unit.master.getSymName());
    // ZeRO-1 and ZeRO-2 keep the parameters gathered between steps.
    if (unit.params_) {
      auto gather = AllGatherOp::create(b, loc, flatType(unit), shardGroup,
                                        nullptr, updated);
      mark::setUnit(gather, unit.id);
      mark::setPhase(gather, "step");
      StateStoreOp::create(b, loc, gather, unit.params_.getSymName());
    }
  }
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

void ApplyPlanPass::runOnOperation() {
  model = getOperation();
  f32 = Float32Type::get(&getContext());
  plan = model.getPlanAttr();
  if (!plan) {
    model.emitOpError("has no '#md.plan' to apply");
    return signalPassFailure();
  }
  train = model.getTrain();
  if (!train) {
    model.emitOpError("has no 'md.train' recipe to build a step for");
    return signalPassFailure();
  }
  if (!train.getStep().front().empty()) {
    train.emitOpError("already has a step program (md-apply-plan ran twice?)");
    return signalPassFailure();
  }
  std::string gradName = (train.getForward() + ".grad").str();
  gradFunc = SymbolTable::lookupNearestSymbolFrom<FuncOp>(
      model, StringAttr::get(&getContext(), gradName));
  if (!gradFunc) {
    train.emitOpError("needs the gradient function @")
        << gradName << " (run md-autodiff first)";
    return signalPassFailure();
  }

  switch (plan.getShard()) {
  case ShardKind::none:
    sharding = Sharding::Replicated;
    break;
  case ShardKind::optimizer:
    sharding = Sharding::Zero1;
    break;
  case ShardKind::grad_op:
    sharding = Sharding::GradOp;
    break;
  case ShardKind::full:
    sharding = Sharding::Full;
    break;
  case ShardKind::hybrid:
    sharding = Sharding::Full;
    hybrid = true;
    shardGroup = Group::shard;
    break;
  }

  // Sharding over one rank is replication: a plan pinned to W = 1 keeps
  // full state and communicates nothing.
  if (singleRank()) {
    sharding = Sharding::Replicated;
    hybrid = false;
    shardGroup = Group::world;
  }

  if (hasShardedGradAccumulation(model)) {
    if (sharding == Sharding::Zero1 ||
        (sharding == Sharding::Replicated && !singleRank())) {
      model.emitOpError("'grad_accumulation = sharded' needs a plan that "
                        "reduce-scatters gradients (shard = grad_op, full or "
                        "hybrid), got shard = ")
          << stringifyShardKind(plan.getShard());
      return signalPassFailure();
    }
    // On one rank the shard is the whole gradient: local accumulation.
    shardedAccumulation = !singleRank();
  }

  if (failed(collectUnits()))
    return signalPassFailure();
  splitUnitGradients();
  OpBuilder b(&getContext());
  createStates(b);

  Block &step = train.getStep().front();
  b.setInsertionPointToEnd(&step);
  // The first A - 1 micro-steps reduce nothing.
  auto micro = MicroStepsOp::create(b, train.getLoc());
  micro.getBody().push_back(new Block);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(&micro.getBody().front());
    SmallVector<Value> none;
    if (failed(buildMicroStep(b, /*last=*/false, none)))
      return signalPassFailure();
    MicroStepsOp::ensureTerminator(micro.getBody(), b, train.getLoc());
  }
  SmallVector<Value> unitGrads;
  if (failed(buildMicroStep(b, /*last=*/true, unitGrads)))
    return signalPassFailure();
  buildUpdate(b, unitGrads);
  // Recomputed forward values the backward does not need (a checkpointed
  // block's output, say) and unused gradients of data inputs go.
  eraseDeadOps(train.getStep());
  // The step program has inlined the gradient function; md.forward stays
  // for md.evaluate.
  gradFunc.erase();
}
