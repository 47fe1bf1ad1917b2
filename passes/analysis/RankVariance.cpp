//===- RankVariance.cpp - which values and ops differ between ranks ------===//
//
// The transfer functions of the rank-variance analysis, and the queries the
// desync checker makes on its fixpoint.
//
// Sources of variance (a value that can differ between ranks):
//   md.rank, md.local_rank                      the rank itself
//   md.loss                                     this rank's loss, unreduced
//   md.wall_time, md.file_exists                this rank's clock, file system
//   md.batch, the arguments of md.forward       this rank's data
//   md.shard_slice, md.reduce_scatter,          this rank's shard
//   md.state_load of a sharded or grad_acc state
// Everything computed from a varying value varies, until a collective over
// the whole world makes it uniform: md.all_reduce, md.all_gather and
// md.broadcast results are the same on every rank of their group (over a
// sub-group they are uniform only if their input already was). Constants,
// md.world_size, md.step, md.epoch, md.lr, md.accum_scale, md.param_ref and
// md.evaluate (whose loss is all-reduced) are uniform.
//
// Control dependence: the results of an md.if whose condition varies vary;
// the induction variable of an md.for varies with its bounds. Calls are
// followed interprocedurally: an md.func's arguments join its call sites',
// its call results join its returns.
//
// Shapes: a static shape is uniform. The dynamic dims of md ops are
// functions of the operand shapes and of W (flat shards hold ceil(N / G)
// elements), so they are uniform when the operand shapes are. Any other op
// that produces a dynamically shaped tensor may take its size from a scalar
// operand (`tensor.empty(%n)`): its shape varies when such an operand does.
//
//===----------------------------------------------------------------------===//

#include "passes/analysis/RankVariance.h"

#include "mlir/Analysis/DataFlow/ConstantPropagationAnalysis.h"
#include "mlir/Analysis/DataFlow/DeadCodeAnalysis.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;
using namespace mlir::dataflow;
using namespace md;

void Variance::print(raw_ostream &os) const {
  if (!initialized) {
    os << "<uninitialized>";
    return;
  }
  os << (varying ? "varying" : "uniform");
  if (shapeVarying)
    os << " (shape varying)";
}

//===----------------------------------------------------------------------===//
// Classification of ops
//===----------------------------------------------------------------------===//

static bool hasDynamicShape(Type type) {
  auto shaped = dyn_cast<ShapedType>(type);
  return shaped && shaped.hasRank() && !shaped.hasStaticShape();
}

/// Whether `state` names a state that holds different data on every rank.
static bool isPerRankState(StateLoadOp load) {
  auto state =
      SymbolTable::lookupNearestSymbolFrom<StateOp>(load, load.getStateAttr());
  if (!state)
    return true;
  return state.isSharded() || state.getRole() == StateRole::grad_acc;
}

/// Ops whose results differ between ranks whatever their operands.
static bool isVaryingSource(Operation *op) {
  if (isa<RankOp, LocalRankOp, LossOp, WallTimeOp, FileExistsOp, BatchOp,
          ShardSliceOp, ReduceScatterOp>(op))
    return true;
  if (auto load = dyn_cast<StateLoadOp>(op))
    return isPerRankState(load);
  return false;
}

/// Whether `group` is every rank of the job (on a 1-D mesh `shard` is).
static bool groupIsWorld(Operation *op, Group group) {
  if (group == Group::world)
    return true;
  if (group == Group::replicate)
    return false;
  auto model = op->getParentOfType<ModelOp>();
  if (!model)
    return false;
  if (model.getShardGroupSize())
    return false;
  PlanAttr plan = model.getPlanAttr();
  return !plan || plan.getShard() != ShardKind::hybrid;
}

/// Collectives whose result every rank of the group holds in full.
static bool makesUniform(Operation *op) {
  auto collective = dyn_cast<CollectiveOpInterface>(op);
  if (!collective)
    return false;
  switch (collective.getCollectiveKind()) {
  case CollectiveKind::all_reduce:
  case CollectiveKind::all_gather:
  case CollectiveKind::broadcast:
    return groupIsWorld(op, collective.getCollectiveGroup());
  case CollectiveKind::reduce_scatter:
  case CollectiveKind::barrier:
    return false;
  }
  return false;
}

//===----------------------------------------------------------------------===//
// RankVarianceAnalysis
//===----------------------------------------------------------------------===//

void RankVarianceAnalysis::setToEntryState(VarianceLattice *lattice) {
  bool dynamic = hasDynamicShape(lattice->getAnchor().getType());
  propagateIfChanged(lattice,
                     lattice->join(dynamic ? Variance::varyingValueAndShape()
                                           : Variance::varyingValue()));
}

LogicalResult RankVarianceAnalysis::initialize(Operation *top) {
  if (failed(SparseForwardDataFlowAnalysis::initialize(top)))
    return failure();
  // The base class visits region ops without reading their operands; visit
  // them once more so that their control operands become dependencies.
  WalkResult walk = top->walk([&](RegionBranchOpInterface op) {
    if (op->getNumResults() == 0)
      return WalkResult::advance();
    return failed(visit(getProgramPointAfter(op))) ? WalkResult::interrupt()
                                                   : WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

LogicalResult RankVarianceAnalysis::visit(ProgramPoint *point) {
  if (failed(SparseForwardDataFlowAnalysis::visit(point)))
    return failure();
  if (!point->isBlockStart())
    joinControlDependence(point->getPrevOp());
  return success();
}

void RankVarianceAnalysis::joinControlDependence(Operation *op) {
  if (!isa<RegionBranchOpInterface>(op) || op->getNumResults() == 0)
    return;
  if (op->getBlock() &&
      !getOrCreate<Executable>(getProgramPointBefore(op->getBlock()))->isLive())
    return;
  ProgramPoint *after = getProgramPointAfter(op);
  // md.if's only operand is its condition; other region ops (scf.if,
  // scf.for, ...) are judged by all their operands, conservatively.
  bool varying = false;
  for (Value operand : op->getOperands())
    varying |= getLatticeElementFor(after, operand)->getValue().isVarying();
  if (!varying)
    return;
  for (Value result : op->getResults()) {
    VarianceLattice *lattice = getLatticeElement(result);
    propagateIfChanged(lattice,
                       lattice->join(hasDynamicShape(result.getType())
                                         ? Variance::varyingValueAndShape()
                                         : Variance::varyingValue()));
  }
}

LogicalResult
RankVarianceAnalysis::visitOperation(Operation *op,
                                     ArrayRef<const VarianceLattice *> operands,
                                     ArrayRef<VarianceLattice *> results) {
  bool sourceVaries = isVaryingSource(op);
  bool uniformResult = makesUniform(op) || isa<EvaluateOp>(op);
  bool isMdOp = isa<MdDialect>(op->getDialect());

  bool operandVaries = false;
  bool operandShapesVary = false;
  bool scalarOperandVaries = false;
  for (const VarianceLattice *operand : operands) {
    const Variance &v = operand->getValue();
    operandVaries |= v.isVarying();
    operandShapesVary |= v.isShapeVarying();
    if (!isa<ShapedType>(operand->getAnchor().getType()))
      scalarOperandVaries |= v.isVarying();
  }
  bool valueVaries = sourceVaries || (operandVaries && !uniformResult);

  for (VarianceLattice *result : results) {
    // md ops derive dynamic sizes from operand shapes and W only; another
    // op may take a size from a scalar operand.
    bool shapeVaries = hasDynamicShape(result->getAnchor().getType()) &&
                       (operandShapesVary || (!isMdOp && scalarOperandVaries));
    propagateIfChanged(result,
                       result->join(Variance::get(valueVaries, shapeVaries)));
  }
  return success();
}

void RankVarianceAnalysis::visitNonControlFlowArguments(
    Operation *op, const RegionSuccessor &successor,
    ArrayRef<VarianceLattice *> argLattices, unsigned firstIndex) {
  auto forOp = dyn_cast<ForOp>(op);
  if (!forOp || successor.getSuccessor() != &forOp.getBody() ||
      argLattices.size() != 1) {
    SparseForwardDataFlowAnalysis::visitNonControlFlowArguments(
        op, successor, argLattices, firstIndex);
    return;
  }
  // The induction variable takes every value between the bounds: it varies
  // when they do.
  ProgramPoint *entry = getProgramPointBefore(&forOp.getBody().front());
  bool varying = getLatticeElementFor(entry, forOp.getLowerBound())
                     ->getValue()
                     .isVarying() ||
                 getLatticeElementFor(entry, forOp.getUpperBound())
                     ->getValue()
                     .isVarying();
  propagateIfChanged(argLattices[0],
                     argLattices[0]->join(varying ? Variance::varyingValue()
                                                  : Variance::uniform()));
}

void RankVarianceAnalysis::visitCallableOperation(
    CallableOpInterface callable,
    ArrayRef<AbstractSparseLattice *> argLattices) {
  // The forward's arguments are this rank's micro-batch: values differ, the
  // shapes (the micro batch) do not.
  if (isa<ForwardOp>(callable)) {
    for (AbstractSparseLattice *lattice : argLattices)
      propagateIfChanged(lattice, static_cast<VarianceLattice *>(lattice)->join(
                                      Variance::varyingValue()));
    return;
  }
  // An md.func is only ever reached through md.call, whatever its symbol's
  // visibility: its arguments are the join of the known call sites'.
  Block *entry = &callable.getCallableRegion()->front();
  const auto *callsites = getOrCreateFor<PredecessorState>(
      getProgramPointBefore(entry), getProgramPointAfter(callable));
  if (!isa<FuncOp>(callable) && !callsites->allPredecessorsKnown()) {
    for (AbstractSparseLattice *lattice : argLattices)
      setToEntryState(static_cast<VarianceLattice *>(lattice));
    return;
  }
  for (Operation *callsite : callsites->getKnownPredecessors()) {
    auto call = dyn_cast<CallOpInterface>(callsite);
    if (!call)
      continue;
    for (auto [operand, lattice] :
         llvm::zip(call.getArgOperands(), argLattices))
      join(lattice,
           *getLatticeElementFor(getProgramPointBefore(entry), operand));
  }
}

//===----------------------------------------------------------------------===//
// RankVariance
//===----------------------------------------------------------------------===//

RankVariance::RankVariance(Operation *root)
    : solver(std::make_unique<DataFlowSolver>()) {
  solver->load<DeadCodeAnalysis>();
  solver->load<SparseConstantPropagation>();
  solver->load<RankVarianceAnalysis>();
  ok = mlir::succeeded(solver->initializeAndRun(root));
}

RankVariance::~RankVariance() = default;

const VarianceLattice *RankVariance::lookup(Value value) const {
  return solver->lookupState<VarianceLattice>(value);
}

bool RankVariance::isVarying(Value value) const {
  const VarianceLattice *lattice = lookup(value);
  return lattice && lattice->getValue().isVarying();
}

bool RankVariance::isShapeVarying(Value value) const {
  const VarianceLattice *lattice = lookup(value);
  return lattice && hasDynamicShape(value.getType()) &&
         lattice->getValue().isShapeVarying();
}

bool RankVariance::isLive(Block *block) const {
  const Executable *state =
      solver->lookupState<Executable>(solver->getProgramPointBefore(block));
  return state && state->isLive();
}

/// Whether `op` ends the search for enclosing control: a function, the
/// recipe, the model.
static bool isControlBoundary(Operation *op) {
  return isa<ForwardOp, FuncOp, TrainOp, ModelOp, ModuleOp>(op) ||
         op->hasTrait<OpTrait::IsIsolatedFromAbove>();
}

SmallVector<NonUniformControl>
RankVariance::getNonUniformControls(Operation *op) const {
  SmallVector<NonUniformControl> controls;
  for (Operation *parent = op->getParentOp();
       parent && !isControlBoundary(parent); parent = parent->getParentOp()) {
    if (auto ifOp = dyn_cast<IfOp>(parent)) {
      if (isVarying(ifOp.getCondition()))
        controls.push_back(
            {NonUniformControl::Kind::Branch, parent, ifOp.getCondition()});
      continue;
    }
    if (auto forOp = dyn_cast<ForOp>(parent)) {
      for (Value bound : {forOp.getLowerBound(), forOp.getUpperBound()})
        if (isVarying(bound)) {
          controls.push_back({NonUniformControl::Kind::Loop, parent, bound});
          break;
        }
      continue;
    }
    if (auto every = dyn_cast<EveryOp>(parent)) {
      if (every.getRank0Only())
        controls.push_back(
            {NonUniformControl::Kind::Rank0Only, parent, Value()});
      continue;
    }
    if (isa<MicroStepsOp>(parent))
      continue; // runs A - 1 times on every rank
    for (Value operand : parent->getOperands())
      if (isVarying(operand)) {
        controls.push_back({NonUniformControl::Kind::Region, parent, operand});
        break;
      }
  }
  return controls;
}

std::optional<NonUniformControl>
RankVariance::getNonUniformControl(Operation *op) const {
  SmallVector<NonUniformControl> controls = getNonUniformControls(op);
  if (controls.empty())
    return std::nullopt;
  return controls.front();
}

//===----------------------------------------------------------------------===//
// Explanations
//===----------------------------------------------------------------------===//

std::string md::describeVarianceSource(Operation *op) {
  if (isa<RankOp>(op))
    return "'rank' differs between ranks";
  if (isa<LocalRankOp>(op))
    return "'local_rank' differs between ranks";
  if (isa<LossOp>(op))
    return "'loss' is this rank's own loss, before any reduction";
  if (isa<WallTimeOp>(op))
    return "'time()' reads this rank's clock, and no two clocks agree exactly";
  if (auto exists = dyn_cast<FileExistsOp>(op))
    return ("'exists(\"" + exists.getPath() +
            "\")' looks at this rank's own file system")
        .str();
  if (isa<BatchOp>(op))
    return "'md.batch' is this rank's own micro-batch";
  if (isa<ShardSliceOp>(op))
    return "'md.shard_slice' is this rank's own shard";
  if (isa<ReduceScatterOp>(op))
    return "'reduce_scatter' leaves each rank its own slice";
  if (auto load = dyn_cast<StateLoadOp>(op))
    if (isPerRankState(load))
      return ("state '@" + load.getState() + "' holds this rank's own data")
          .str();
  return "";
}

/// How a derived value depends on its input, for the chain; in the words of
/// the language for the arith ops hooks compute with.
static std::string describeDerived(Operation *op) {
  StringRef name = op->getName().getStringRef();
  if (name.starts_with("arith.cmp"))
    return "so does this comparison";
  if (name.starts_with("arith.")) {
    if (op->getNumResults() == 1 && op->getResult(0).getType().isInteger(1))
      return "so does this logical expression";
    return "so does this arithmetic";
  }
  if (isa<IfOp>(op))
    return "so does the result of this 'if'";
  if (auto call = dyn_cast<CallOp>(op))
    return ("so does the result of '@" + call.getCallee() + "'").str();
  return ("so does this '" + name + "'").str();
}

Value RankVariance::getVaryingInput(Value value, bool shape, std::string &step,
                                    Location &loc) const {
  auto varies = [&](Value v) {
    return shape ? (isShapeVarying(v) ||
                    (!isa<ShapedType>(v.getType()) && isVarying(v)))
                 : isVarying(v);
  };
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    Operation *owner = arg.getOwner()->getParentOp();
    loc = arg.getLoc();
    if (auto forOp = dyn_cast<ForOp>(owner)) {
      step = "so does the variable of this 'for'";
      loc = forOp.getLoc();
      for (Value bound : {forOp.getLowerBound(), forOp.getUpperBound()})
        if (isVarying(bound))
          return bound;
      return Value();
    }
    if (auto func = dyn_cast<FuncOp>(owner)) {
      // The first live call site that passes a varying value.
      ModuleOp module = func->getParentOfType<ModuleOp>();
      Operation *scope = module ? module.getOperation() : func->getParentOp();
      Value found;
      scope->walk([&](CallOp call) {
        if (found || call.getCallee() != func.getSymName() ||
            arg.getArgNumber() >= call.getNumOperands() ||
            !isLive(call->getBlock()))
          return;
        Value operand = call.getOperand(arg.getArgNumber());
        if (varies(operand)) {
          found = operand;
          loc = call.getLoc();
        }
      });
      step = ("and is passed to '@" + func.getSymName() + "' as argument #" +
              Twine(arg.getArgNumber()) + " here")
                 .str();
      return found;
    }
    return Value();
  }

  Operation *op = value.getDefiningOp();
  loc = op->getLoc();
  if (isVaryingSource(op) && !shape)
    return Value();
  if (auto ifOp = dyn_cast<IfOp>(op)) {
    step = describeDerived(op);
    if (isVarying(ifOp.getCondition()))
      return ifOp.getCondition();
    unsigned index = cast<OpResult>(value).getResultNumber();
    for (Block *block : {ifOp.thenBlock(), ifOp.elseBlock()}) {
      if (!block)
        continue;
      Value yielded = block->getTerminator()->getOperand(index);
      if (varies(yielded))
        return yielded;
    }
    return Value();
  }
  if (auto call = dyn_cast<CallOp>(op)) {
    step = describeDerived(op);
    auto callee =
        SymbolTable::lookupNearestSymbolFrom<FuncOp>(op, call.getCalleeAttr());
    if (!callee)
      return Value();
    unsigned index = cast<OpResult>(value).getResultNumber();
    Value found;
    callee.walk([&](ReturnOp ret) {
      if (!found && index < ret.getNumOperands() &&
          varies(ret.getOperand(index)))
        found = ret.getOperand(index);
    });
    return found;
  }
  step = describeDerived(op);
  for (Value operand : op->getOperands())
    if (varies(operand))
      return operand;
  return Value();
}

/// The end of a chain: a source op, or an argument nothing explains further.
static std::string describeUnexplained(Value value) {
  if (Operation *op = value.getDefiningOp()) {
    std::string message = describeVarianceSource(op);
    if (!message.empty())
      return message;
  } else {
    auto arg = cast<BlockArgument>(value);
    Operation *owner = arg.getOwner()->getParentOp();
    if (isa<ForwardOp>(owner))
      return ("argument #" + Twine(arg.getArgNumber()) +
              " of the forward is this rank's own micro-batch")
          .str();
    if (auto func = dyn_cast<FuncOp>(owner))
      return ("argument #" + Twine(arg.getArgNumber()) + " of '@" +
              func.getSymName() + "' can differ between ranks")
          .str();
  }
  return "this value can differ between ranks";
}

SmallVector<VarianceStep> RankVariance::explain(Value value, bool shape,
                                                unsigned maxSteps) const {
  SmallVector<VarianceStep> reversed;
  llvm::SmallPtrSet<void *, 16> seen;
  Value current = value;
  bool currentShape = shape;
  while (current && seen.insert(current.getAsOpaquePointer()).second) {
    std::string step;
    Location loc = current.getLoc();
    Value input = getVaryingInput(current, currentShape, step, loc);
    if (!input) {
      // A source (or an argument of unknown origin).
      reversed.push_back({loc, describeUnexplained(current)});
      break;
    }
    reversed.push_back({loc, step});
    // Below a varying shape, follow the value that sizes it.
    if (currentShape && !isShapeVarying(input))
      currentShape = false;
    current = input;
  }

  // Source first; merge steps at one location (an expression lowers to
  // several ops), keeping the one nearest the source.
  SmallVector<VarianceStep> steps;
  for (VarianceStep &step : llvm::reverse(reversed)) {
    if (!steps.empty() && steps.back().loc == step.loc)
      continue;
    steps.push_back(std::move(step));
  }
  if (steps.size() > maxSteps && maxSteps >= 2) {
    SmallVector<VarianceStep> elided(steps.begin(),
                                     steps.begin() + (maxSteps - 1));
    elided.push_back(steps.back());
    steps = std::move(elided);
  }
  return steps;
}

VarianceSource RankVariance::getSource(Value value, bool shape) const {
  llvm::SmallPtrSet<void *, 16> seen;
  Value current = value;
  while (current && seen.insert(current.getAsOpaquePointer()).second) {
    std::string step;
    Location loc = current.getLoc();
    Value input = getVaryingInput(current, shape, step, loc);
    if (!input)
      break;
    if (shape && !isShapeVarying(input))
      shape = false;
    current = input;
  }
  if (!current)
    return VarianceSource::Unknown;
  if (auto arg = dyn_cast<BlockArgument>(current))
    return isa<ForwardOp>(arg.getOwner()->getParentOp())
               ? VarianceSource::Data
               : VarianceSource::Unknown;
  Operation *op = current.getDefiningOp();
  if (isa<RankOp, LocalRankOp>(op))
    return VarianceSource::Rank;
  if (isa<LossOp>(op))
    return VarianceSource::Loss;
  if (isa<WallTimeOp>(op))
    return VarianceSource::WallTime;
  if (isa<FileExistsOp>(op))
    return VarianceSource::FileExists;
  if (isa<BatchOp>(op))
    return VarianceSource::Data;
  if (isa<ShardSliceOp, ReduceScatterOp, StateLoadOp>(op))
    return VarianceSource::Shard;
  return VarianceSource::Unknown;
}
