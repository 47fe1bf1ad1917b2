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
// Precision: a value that constant propagation proves constant is uniform
// whatever its operands (`rank * 0`, `rank - rank`), and so is an integer
// comparison the ranks' value ranges decide (`rank >= 0`, `rank <
// world_size`; decideByRankRanges). An md.if whose condition varies but
// whose arms communicate alike (armsCommunicateAlike) does not make what is
// in it run on some ranks only.
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

#include "passes/analysis/StepProgram.h"

#include "mlir/Analysis/DataFlow/ConstantPropagationAnalysis.h"
#include "mlir/Analysis/DataFlow/DeadCodeAnalysis.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
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
// Value ranges of the ranks' numbers
//===----------------------------------------------------------------------===//

namespace {

/// c_w * W + c, for every W >= 1.
struct AffineW {
  int64_t w = 0, c = 0;
  AffineW operator+(AffineW o) const { return {w + o.w, c + o.c}; }
  AffineW operator-(AffineW o) const { return {w - o.w, c - o.c}; }
  AffineW operator*(int64_t k) const { return {w * k, c * k}; }
  /// Whether the value is >= 0 for every W >= 1 (it is linear in W).
  bool nonNegative() const { return w >= 0 && w + c >= 0; }
};

/// lo <= value <= hi for every W >= 1 and every rank.
struct RankRange {
  AffineW lo, hi;
};

constexpr int64_t kMaxCoefficient = int64_t{1} << 32;

/// Whether `r` is one value for every rank (its bounds agree): a constant,
/// world_size, an affine function of them.
bool isSingle(RankRange r) { return r.lo.w == r.hi.w && r.lo.c == r.hi.c; }

bool small(AffineW a) {
  return std::abs(a.w) < kMaxCoefficient && std::abs(a.c) < kMaxCoefficient;
}

std::optional<RankRange> rangeOf(Value value, unsigned depth = 0) {
  if (depth > 16)
    return std::nullopt;
  Operation *op = value.getDefiningOp();
  if (!op || !value.getType().isInteger(64))
    return std::nullopt;
  if (isa<RankOp, LocalRankOp>(op))
    return RankRange{{0, 0}, {1, -1}}; // [0, W - 1]
  if (isa<WorldSizeOp>(op))
    return RankRange{{1, 0}, {1, 0}};
  llvm::APInt constant;
  if (auto c = dyn_cast<arith::ConstantOp>(op))
    if (auto attr = dyn_cast<IntegerAttr>(c.getValue())) {
      int64_t v = attr.getValue().getSExtValue();
      if (std::abs(v) >= kMaxCoefficient)
        return std::nullopt;
      return RankRange{{0, v}, {0, v}};
    }
  auto operands = [&]() -> std::optional<std::pair<RankRange, RankRange>> {
    std::optional<RankRange> a = rangeOf(op->getOperand(0), depth + 1);
    std::optional<RankRange> b = rangeOf(op->getOperand(1), depth + 1);
    if (!a || !b)
      return std::nullopt;
    return std::make_pair(*a, *b);
  };
  std::optional<RankRange> out;
  if (isa<arith::AddIOp>(op)) {
    if (auto ab = operands())
      out =
          RankRange{ab->first.lo + ab->second.lo, ab->first.hi + ab->second.hi};
  } else if (isa<arith::SubIOp>(op)) {
    if (auto ab = operands())
      out =
          RankRange{ab->first.lo - ab->second.hi, ab->first.hi - ab->second.lo};
  } else if (isa<arith::MulIOp>(op)) {
    // By a constant only: the product of two affine bounds is not affine.
    if (auto ab = operands()) {
      auto [a, b] = *ab;
      if (a.lo.w == 0 && a.hi.w == 0 && a.lo.c == a.hi.c)
        std::swap(a, b);
      if (b.lo.w == 0 && b.hi.w == 0 && b.lo.c == b.hi.c) {
        int64_t k = b.lo.c;
        out = k >= 0 ? RankRange{a.lo * k, a.hi * k}
                     : RankRange{a.hi * k, a.lo * k};
      }
    }
  } else if (isa<arith::RemSIOp>(op)) {
    // x % d for x >= 0 and one positive d (a constant, world_size, W - 1
    // when W >= 2 is not known: d must be >= 1 for every W) is in
    // [0, d - 1], and is x itself when x < d always (rank % world_size).
    if (auto ab = operands()) {
      auto [a, b] = *ab;
      if (a.lo.nonNegative() && isSingle(b) &&
          (b.lo - AffineW{0, 1}).nonNegative()) {
        AffineW last = b.lo - AffineW{0, 1};
        out = (last - a.hi).nonNegative() ? a : RankRange{{0, 0}, last};
      }
    }
  } else if (isa<arith::DivSIOp>(op)) {
    // x / d for x >= 0 and one positive d truncates to floor(x / d): 0 when
    // x < d always (rank / world_size); by a constant k an exact bound
    // where W's coefficient divides by k, else [0, x.hi] (x / k <= x).
    if (auto ab = operands()) {
      auto [a, b] = *ab;
      if (a.lo.nonNegative() && isSingle(b) &&
          (b.lo - AffineW{0, 1}).nonNegative()) {
        if ((b.lo - a.hi - AffineW{0, 1}).nonNegative()) {
          out = RankRange{{0, 0}, {0, 0}};
        } else if (b.lo.w == 0) {
          int64_t k = b.lo.c;
          auto floorDiv = [](int64_t n, int64_t k) {
            return n >= 0 ? n / k : -((-n + k - 1) / k);
          };
          auto exact = [&](AffineW x) {
            return AffineW{x.w / k, floorDiv(x.c, k)};
          };
          out = RankRange{a.lo.w % k == 0 ? exact(a.lo) : AffineW{0, 0},
                          a.hi.w % k == 0 ? exact(a.hi) : a.hi};
        }
      }
    }
  }
  if (out && (!small(out->lo) || !small(out->hi)))
    return std::nullopt;
  return out;
}

} // namespace

/// `value` without the remainders that are proven to be their dividend:
/// `x % d` with 0 <= x < d always (`rank % world_size` is `rank`).
static Value stripIdentities(Value value) {
  for (unsigned depth = 0; depth < 16; ++depth) {
    auto rem = value.getDefiningOp<arith::RemSIOp>();
    if (!rem)
      break;
    std::optional<RankRange> x = rangeOf(rem.getLhs());
    std::optional<RankRange> d = rangeOf(rem.getRhs());
    if (!x || !d || !x->lo.nonNegative() || !isSingle(*d) ||
        !(d->lo - x->hi - AffineW{0, 1}).nonNegative())
      break;
    value = rem.getLhs();
  }
  return value;
}

/// Whether `a` and `b` hold the same number on any one rank: one value, or
/// two reads of the same number of the run (`rank - rank` reads `rank`
/// twice), through remainders that leave their dividend as it is.
static bool sameNumber(Value a, Value b) {
  a = stripIdentities(a);
  b = stripIdentities(b);
  if (a == b)
    return true;
  Operation *x = a.getDefiningOp(), *y = b.getDefiningOp();
  return x && y && x->getName() == y->getName() &&
         isa<RankOp, LocalRankOp, WorldSizeOp, StepOp, EpochOp>(x);
}

std::optional<int64_t> md::foldSameNumber(Operation *op) {
  if (op->getNumOperands() != 2 || op->getNumResults() != 1 ||
      !sameNumber(op->getOperand(0), op->getOperand(1)))
    return std::nullopt;
  if (isa<arith::SubIOp, arith::XOrIOp>(op))
    return 0;
  if (auto cmp = dyn_cast<arith::CmpIOp>(op)) {
    switch (cmp.getPredicate()) {
    case arith::CmpIPredicate::eq:
    case arith::CmpIPredicate::sle:
    case arith::CmpIPredicate::sge:
    case arith::CmpIPredicate::ule:
    case arith::CmpIPredicate::uge:
      return 1;
    default:
      return 0;
    }
  }
  return std::nullopt;
}

std::optional<bool> md::decideByRankRanges(Operation *op) {
  auto cmp = dyn_cast<arith::CmpIOp>(op);
  if (!cmp)
    return std::nullopt;
  if (std::optional<int64_t> same = foldSameNumber(op))
    return *same != 0;
  std::optional<RankRange> a = rangeOf(cmp.getLhs());
  std::optional<RankRange> b = rangeOf(cmp.getRhs());
  if (!a || !b)
    return std::nullopt;
  // x < y always when x.hi - y.lo <= -1; never when x.lo - y.hi >= 0.
  auto alwaysLess = [](RankRange x, RankRange y) {
    return (y.lo - x.hi - AffineW{0, 1}).nonNegative();
  };
  auto alwaysLessEq = [](RankRange x, RankRange y) {
    return (y.lo - x.hi).nonNegative();
  };
  // Decided when the ranges settle the comparison one way or the other.
  auto decide = [](bool always, bool never) -> std::optional<bool> {
    if (always)
      return true;
    if (never)
      return false;
    return std::nullopt;
  };
  arith::CmpIPredicate predicate = cmp.getPredicate();
  // x > y is y < x, and x >= y is y <= x.
  if (predicate == arith::CmpIPredicate::sgt ||
      predicate == arith::CmpIPredicate::sge) {
    std::swap(a, b);
    predicate = predicate == arith::CmpIPredicate::sgt
                    ? arith::CmpIPredicate::slt
                    : arith::CmpIPredicate::sle;
  }
  switch (predicate) {
  case arith::CmpIPredicate::slt:
    return decide(alwaysLess(*a, *b), alwaysLessEq(*b, *a));
  case arith::CmpIPredicate::sle:
    return decide(alwaysLessEq(*a, *b), alwaysLess(*b, *a));
  case arith::CmpIPredicate::eq:
  case arith::CmpIPredicate::ne:
    // Equal when both are the same single value (`rank / world_size` is 0);
    // unequal when the ranges are apart.
    if (isSingle(*a) && isSingle(*b) && a->lo.w == b->lo.w &&
        a->lo.c == b->lo.c)
      return predicate == arith::CmpIPredicate::eq;
    if (alwaysLess(*a, *b) || alwaysLess(*b, *a))
      return predicate == arith::CmpIPredicate::ne;
    return std::nullopt;
  default:
    return std::nullopt;
  }
}

bool md::armsCommunicateAlike(IfOp ifOp) {
  if (ifOp.getThenRegion().empty() || ifOp.getElseRegion().empty())
    return false;
  auto sequence = [](Region &region,
                     SmallVectorImpl<Operation *> &out) -> bool {
    for (Operation &op : region.front()) {
      OpAccess access = getAccess(&op);
      if (!access.communicates && !access.holdsCommunication &&
          !isa<ExitOp>(op))
        continue;
      if (op.getNumRegions() != 0)
        return false; // nested control: not compared
      out.push_back(&op);
    }
    return true;
  };
  SmallVector<Operation *> then, otherwise;
  if (!sequence(ifOp.getThenRegion(), then) ||
      !sequence(ifOp.getElseRegion(), otherwise) ||
      then.size() != otherwise.size() || then.empty())
    return false;
  // What a rank runs: the op and its attributes, less the bucket a pass
  // numbered it into and md's scheduling marks (md.stream, ...), which do
  // not change what the ranks exchange.
  // Two exits end the run alike, whatever they say or report (`stop` and
  // `fail("why")`: every rank leaves the loop after this step).
  auto meaning = [](Operation *op) {
    if (isa<ExitOp>(op))
      return DictionaryAttr::get(op->getContext(), {});
    SmallVector<NamedAttribute> attrs;
    for (NamedAttribute attr : op->getAttrs())
      if (attr.getName() != "bucket" &&
          !attr.getName().getValue().starts_with("md."))
        attrs.push_back(attr);
    return DictionaryAttr::get(op->getContext(), attrs);
  };
  for (auto [a, b] : llvm::zip(then, otherwise))
    if (a->getName() != b->getName() || meaning(a) != meaning(b) ||
        a->getOperandTypes() != b->getOperandTypes() ||
        a->getResultTypes() != b->getResultTypes())
      return false;
  return true;
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
  if (valueVaries && !sourceVaries && op->getNumRegions() == 0 &&
      op->getNumResults() > 0) {
    // The same on every rank whatever its operands: folded to a constant
    // (`rank * 0`), or a comparison the ranks' ranges decide.
    bool constant = decideByRankRanges(op).has_value() ||
                    foldSameNumber(op).has_value() ||
                    llvm::all_of(op->getResults(), [&](Value result) {
                      const auto *c = getOrCreateFor<Lattice<ConstantValue>>(
                          getProgramPointAfter(op), result);
                      return !c->getValue().isUninitialized() &&
                             c->getValue().getConstantValue() != nullptr;
                    });
    valueVaries = !constant;
  }

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
      if (isVarying(ifOp.getCondition()) && !armsCommunicateAlike(ifOp))
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
