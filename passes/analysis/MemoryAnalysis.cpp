//===- MemoryAnalysis.cpp - per-rank buffers of the step and their peak ---===//

#include "dialect/MdDiscardableAttrs.h"
#include "passes/analysis/MemoryAnalysis.h"
#include "passes/analysis/StepProgram.h"
#include "runtime/core/Mesh.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace md;

StringRef md::stringifyMemoryCategory(MemoryCategory category) {
  return plan::MemoryCategoryName(category);
}

int64_t md::getGroupSize(ModelOp model, Group group, int64_t worldSize) {
  std::optional<int64_t> shard;
  if (std::optional<uint64_t> size = model.getShardGroupSize())
    shard = static_cast<int64_t>(*size);
  if (std::optional<int64_t> n = md::mesh::staticGroupSize(
          static_cast<md::mesh::GroupKind>(group), worldSize, shard))
    return *n;
  // A hybrid shard group that does not divide W has no whole replicate
  // group: the emitter analyses at W = 1 for the categories alone, where
  // the sizes do not matter, and counts the ranks it has.
  if (group == Group::replicate && shard && worldSize >= 1)
    return std::max<int64_t>(1, worldSize / *shard);
  return 0;
}

FailureOr<int64_t> md::getValueBytes(ModelOp model, Value value,
                                     int64_t worldSize) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type)
    return 0;
  if (type.hasStaticShape())
    return getTensorBytes(type);
  std::optional<ShardInfo> shard = getShardInfo(value);
  if (!shard || type.getRank() != 1)
    return failure();
  std::optional<int64_t> numel = md::mesh::shardNumel(
      shard->numel, getGroupSize(model, shard->group, worldSize));
  if (!numel)
    return failure();
  return *numel * getElementBytes(type.getElementType());
}

static MemoryCategory categoryOfRole(StateRole role) {
  switch (role) {
  case StateRole::master:
  case StateRole::params:
  case StateRole::frozen:
    return MemoryCategory::Params;
  case StateRole::exp_avg:
  case StateRole::exp_avg_sq:
  case StateRole::momentum:
    return MemoryCategory::Optimizer;
  case StateRole::grad_acc:
    return MemoryCategory::GradAcc;
  }
  return MemoryCategory::Optimizer;
}

namespace {

/// Positions of the step's linear order: every op gets one, and an op with
/// regions a second one after its nested ops (its end), so that the body of
/// md.micro_steps is an interval nested in the step's.
struct Linearization {
  llvm::DenseMap<Operation *, int64_t> start, end;
  llvm::DenseMap<Block *, int64_t> blockEnd;
  std::vector<Operation *> opAt;
  /// The blocks numbered, outermost first.
  std::vector<Block *> blocks;
  /// Whether the body of md.micro_steps runs (A > 1).
  bool microSteps = true;
  /// Positions an op without regions runs nested under it: those of the
  /// forward an md.evaluate runs (the plan gives it a block of its own).
  llvm::DenseMap<Operation *, int64_t> nestedPositions;

  void number(Block &block) {
    blocks.push_back(&block);
    for (Operation &op : block) {
      start[&op] = opAt.size();
      opAt.push_back(&op);
      if (op.getNumRegions() != 0 && (microSteps || !isa<MicroStepsOp>(op))) {
        for (Region &region : op.getRegions())
          for (Block &nested : region)
            number(nested);
        end[&op] = opAt.size();
        opAt.push_back(&op);
      } else {
        opAt.insert(opAt.end(), nestedPositions.lookup(&op), &op);
        end[&op] = static_cast<int64_t>(opAt.size()) - 1;
      }
    }
    blockEnd[&block] = static_cast<int64_t>(opAt.size()) - 1;
  }

  /// Where a use of `value` by `user` keeps it live: the user itself, or the
  /// end of the op that holds the user and not the value's definition (a use
  /// inside a loop body lasts for the whole loop).
  std::optional<int64_t> usePoint(Value value, Operation *user) const {
    Block *defBlock = value.getParentBlock();
    Operation *ancestor = defBlock->findAncestorOpInBlock(*user);
    if (!ancestor || !start.count(ancestor))
      return std::nullopt;
    return ancestor == user ? start.lookup(user) : end.lookup(ancestor);
  }
};

/// Whether `value` flows, through casts and bucket buffers, into gradient
/// accumulation or a gradient reduction.
bool reachesGradientSink(Value value) {
  SmallVector<Value> worklist = {value};
  llvm::DenseSet<Value> seen;
  while (!worklist.empty()) {
    Value next = worklist.pop_back_val();
    if (!seen.insert(next).second)
      continue;
    for (Operation *user : next.getUsers()) {
      if (isa<GradAccumulateOp, GradTotalOp>(user) || isGradientReduction(user))
        return true;
      // Casts to the reduce dtype and md-bucketing's bucket buffers.
      if (isa<CastOp, FlattenOp>(user))
        worklist.push_back(user->getResult(0));
    }
  }
  return false;
}

/// A category carried over to the result of an op that transforms one
/// buffer (a cast, a shard, a scaling): a bucket's contents are gradients.
MemoryCategory inherit(MemoryCategory category) {
  switch (category) {
  case MemoryCategory::CommBuffers:
  case MemoryCategory::GradAcc:
    return MemoryCategory::Grads;
  default:
    return category;
  }
}

/// The operand an optimizer update's result `result` replaces, or null.
Value getUpdatedOperand(Operation *op, unsigned result) {
  if (auto adamw = dyn_cast<AdamWUpdateOp>(op)) {
    Value operands[] = {adamw.getParam(), adamw.getM(), adamw.getV()};
    return operands[result];
  }
  if (auto sgd = dyn_cast<SGDUpdateOp>(op))
    return result == 0 ? sgd.getParam() : sgd.getMomentumBuffer();
  return Value();
}

} // namespace

FailureOr<int64_t> md::getAccumulationSteps(ModelOp model, int64_t worldSize) {
  TrainOp train = model.getTrain();
  if (!train)
    return 1;
  int64_t global = train.getGlobalBatch(), micro = train.getMicroBatch();
  int64_t perStep = micro * worldSize;
  if (worldSize < 1 || global % perStep != 0)
    return train.emitError("global_batch ")
           << global
           << " is not a multiple of micro_batch x world size = " << micro
           << " x " << worldSize << " = " << perStep;
  return global / perStep;
}

namespace {

/// The buffers of the forward an md.evaluate runs, as the plan emitter
/// writes its block (target/plan/EmitControl.cpp, emitEvaluate): the batch;
/// per unit, at its first md.param_ref, its master weights (loaded, which
/// aliases the state, or all-gathered over their group when sharded) and,
/// when the parameters' dtype differs, one cast of the whole unit; views of
/// them; the forward's ops with every md.call inlined; the loss yielded.
/// One position per instruction of that block, from 0; a constant is
/// written where it is first used. The hooks run after the step, so the
/// evaluation's peak adds to the persistent state alone, and it is the
/// step's peak when it is the larger one.
class EvaluationBuffers {
public:
  EvaluationBuffers(ModelOp model, int64_t worldSize)
      : model(model), worldSize(worldSize) {}

  /// The buffers of `op`'s forward, positions counted from its block's
  /// first instruction, and the number of positions.
  LogicalResult build(EvaluateOp op, std::vector<BufferInterval> &out,
                      int64_t &positions) {
    auto forward = dyn_cast_or_null<ForwardOp>(
        SymbolTable::lookupSymbolIn(model, op.getForwardAttr()));
    if (!forward)
      return op.emitError("no md.forward @") << op.getForward();
    buffers = &out;
    Block &entry = forward.getBody().front();
    // The batch instruction writes every argument.
    for (BlockArgument arg : entry.getArguments())
      if (failed(define(arg, op, MemoryCategory::Activations)))
        return failure();
    Value loss;
    if (failed(body(entry, loss)))
      return failure();
    ++position; // the yield of the loss
    use(loss);
    positions = position + 1;
    return success();
  }

private:
  /// The forward ops of `block` (a forward's or a callee's body), in order;
  /// `result` is what its md.return returns first.
  LogicalResult body(Block &block, Value &result) {
    for (Operation &op : block) {
      if (auto ret = dyn_cast<ReturnOp>(op)) {
        for (Value operand : ret.getOperands())
          materialize(operand);
        if (ret.getNumOperands() != 0)
          result = ret.getOperand(0);
        return success();
      }
      if (auto ref = dyn_cast<ParamRefOp>(op)) {
        paramRef(ref);
        continue;
      }
      if (auto call = dyn_cast<CallOp>(op)) {
        if (failed(inlineCall(call)))
          return failure();
        continue;
      }
      if (isa<arith::ConstantOp, RankOp, LocalRankOp>(op))
        continue; // written where it is used
      for (Value operand : op.getOperands())
        materialize(operand);
      ++position;
      for (Value operand : op.getOperands())
        use(operand);
      for (Value result : op.getResults()) {
        if (isa<ViewOp, ReshapeOp>(op)) {
          bufferOf[result] = lookup(op.getOperand(0));
        } else if (!isa<RankedTensorType>(result.getType())) {
          bufferOf[result] = std::nullopt; // a host scalar
        } else if (failed(define(result, &op, MemoryCategory::Activations))) {
          return failure();
        }
      }
    }
    return block.getParentOp()->emitError("a forward body without md.return");
  }

  /// A callee's body with the caller's values for its arguments.
  LogicalResult inlineCall(CallOp call) {
    auto callee = dyn_cast_or_null<FuncOp>(
        SymbolTable::lookupSymbolIn(model, call.getCalleeAttr()));
    if (!callee)
      return call.emitError("no md.func @") << call.getCallee();
    for (Value operand : call.getOperands())
      materialize(operand);
    Block &entry = callee.getBody().front();
    for (auto [arg, operand] :
         llvm::zip(entry.getArguments(), call.getOperands()))
      bufferOf[arg] = lookup(operand);
    auto ret = cast<ReturnOp>(entry.getTerminator());
    Value first;
    if (failed(body(entry, first)))
      return failure();
    for (auto [result, value] : llvm::zip(call.getResults(), ret.getOperands()))
      bufferOf[result] = lookup(value);
    return success();
  }

  /// A parameter: a view of its unit's weights, made on the unit's first
  /// use.
  void paramRef(ParamRefOp ref) {
    auto param = dyn_cast_or_null<ParamOp>(
        SymbolTable::lookupSymbolIn(model, ref.getParamAttr()));
    StateOp master = param && param.getUnit()
                         ? masterOf(static_cast<int64_t>(*param.getUnit()))
                         : nullptr;
    if (!master) {
      // A parameter in no unit, or a unit without master weights (IR before
      // md-apply-plan): read where it is, no bytes of its own. The emitter
      // refuses to write such a plan, so no runtime count differs.
      ++position;
      bufferOf[ref.getResult()] = std::nullopt;
      return;
    }
    int64_t unit = static_cast<int64_t>(*param.getUnit());
    auto found = units.find(unit);
    if (found == units.end()) {
      Flat flat;
      flat.numel = master.getFlatNumel();
      flat.elementType = master.getTensorType().getElementType();
      ++position; // the load of the master weights (or of this rank's shard)
      if (master.isSharded()) {
        ++position; // the gather of the whole unit
        flat.buffer =
            defineBytes(ref, flat.numel * getElementBytes(flat.elementType),
                        MemoryCategory::Params);
      }
      found = units.insert({unit, flat}).first;
    }
    Flat &flat = found->second;
    Type elementType = ref.getType().getElementType();
    if (flat.elementType != elementType) {
      ++position; // the unit cast to the parameters' dtype, once
      use(flat.buffer);
      flat.buffer = defineBytes(ref, flat.numel * getElementBytes(elementType),
                                MemoryCategory::Params);
      flat.elementType = elementType;
    }
    ++position; // the view
    use(flat.buffer);
    bufferOf[ref.getResult()] = flat.buffer;
  }

  StateOp masterOf(int64_t unit) {
    for (StateOp state : model.getOps<StateOp>())
      if ((state.getRole() == StateRole::master ||
           state.getRole() == StateRole::frozen) &&
          state.getUnit() &&
          static_cast<int64_t>(*state.getUnit()) == unit)
        return state;
    return nullptr;
  }

  /// A constant or rank the emitter writes into the block at its first use.
  void materialize(Value value) {
    if (bufferOf.count(value) ||
        !isa_and_nonnull<arith::ConstantOp, RankOp, LocalRankOp>(
            value.getDefiningOp()))
      return;
    ++position;
    bufferOf[value] = std::nullopt; // a host scalar
  }

  LogicalResult define(Value value, Operation *op, MemoryCategory category) {
    FailureOr<int64_t> bytes = getValueBytes(model, value, worldSize);
    if (failed(bytes))
      return op->emitError("cannot size a value of type ")
             << value.getType() << " in the evaluation of the forward";
    bufferOf[value] = defineBytes(op, *bytes, category);
    return success();
  }

  size_t defineBytes(Operation *op, int64_t bytes, MemoryCategory category) {
    BufferInterval buffer;
    buffer.op = op;
    buffer.bytes = bytes;
    buffer.category = category;
    buffer.start = buffer.end = position;
    buffers->push_back(buffer);
    return buffers->size() - 1;
  }

  std::optional<size_t> lookup(Value value) const {
    auto it = bufferOf.find(value);
    return it == bufferOf.end() ? std::nullopt : it->second;
  }
  void use(std::optional<size_t> buffer) {
    if (buffer)
      (*buffers)[*buffer].end = std::max((*buffers)[*buffer].end, position);
  }
  void use(Value value) { use(lookup(value)); }

  /// A unit's weights in the block: the gathered or cast buffer, or none
  /// of its own when the forward reads the state as it is.
  struct Flat {
    std::optional<size_t> buffer;
    int64_t numel = 0;
    Type elementType;
  };

  ModelOp model;
  int64_t worldSize;
  std::vector<BufferInterval> *buffers = nullptr;
  int64_t position = 0;
  llvm::DenseMap<int64_t, Flat> units;
  /// Each value's buffer; none for a host scalar or a state read in place.
  llvm::DenseMap<Value, std::optional<size_t>> bufferOf;
};

/// computeMemory's steps over one model at one world size: the buffers (the
/// md.states, then every tensor value of the step), their live intervals, the
/// peak and the model states. Each step fills more of `report`.
class MemoryBuilder {
public:
  MemoryBuilder(ModelOp model, int64_t worldSize, bool accumulates,
                MemoryReport &report)
      : model(model), worldSize(worldSize), accumulates(accumulates),
        report(report) {}

  /// One persistent buffer per md.state, live at every position.
  LogicalResult addStateBuffers();
  /// Numbers the step's positions and gives every tensor value of the step
  /// a buffer or an alias of one, with the category it counts under.
  LogicalResult addStepBuffers();
  /// Extends each transient buffer to its last use, and a collective's
  /// operands and results to the window the comm stream runs it in.
  void computeLiveness();
  /// The peak position, the category totals there and the buffers live there.
  LogicalResult computePeak();
  /// ZeRO's model states (docs/memory.md).
  void countModelStates();

private:
  MemoryCategory categoryOf(Value value) const;
  MemoryCategory classify(Operation *op, unsigned result) const;
  /// Gives result `i` of `op` its buffer (or the one it aliases).
  LogicalResult addResultBuffer(Operation *op, unsigned i);
  /// The position at which the comm stream is done with each collective.
  llvm::DenseMap<Operation *, int64_t> commStreamCompletion();
  InFlightDiagnostic overflows() {
    return model.emitError("memory per rank at world size ")
           << worldSize << " overflows 64 bits";
  }

  ModelOp model;
  int64_t worldSize;
  /// With one micro-step the accumulator is never allocated and the
  /// md.micro_steps body never runs.
  bool accumulates;
  MemoryReport &report;

  llvm::StringMap<size_t> stateBuffer;
  Block *step = nullptr;
  Linearization order;
  /// Gradient flattens and the per-parameter gradients they pack.
  llvm::DenseSet<Value> gradientPieces;
  llvm::DenseSet<Operation *> gradientFlattens;
  /// Every value of the step: an alias of a buffer or a buffer of its own.
  llvm::DenseMap<Value, size_t> bufferOf;
};

} // namespace

LogicalResult MemoryBuilder::addStateBuffers() {
  for (StateOp state : model.getOps<StateOp>()) {
    RankedTensorType type = state.getTensorType();
    int64_t numel = state.getFlatNumel();
    if (state.isSharded()) {
      std::optional<int64_t> shard = md::mesh::shardNumel(
          numel, getGroupSize(model, *state.getGroup(), worldSize));
      if (!shard)
        return state.emitError("cannot size the shard of ")
               << numel << " elements over group "
               << stringifyGroup(*state.getGroup()) << " at world size "
               << worldSize;
      numel = *shard;
    }
    BufferInterval buffer;
    buffer.op = state;
    buffer.bytes = numel * getElementBytes(type.getElementType());
    if (state.getRole() == StateRole::grad_acc && !accumulates)
      buffer.bytes = 0;
    buffer.category = categoryOfRole(state.getRole());
    buffer.persistent = true;
    stateBuffer[state.getSymName()] = report.buffers.size();
    report.buffers.push_back(buffer);
    report.persistent += buffer.bytes;
  }
  return success();
}

MemoryCategory MemoryBuilder::categoryOf(Value value) const {
  auto it = bufferOf.find(value);
  return it == bufferOf.end() ? MemoryCategory::Activations
                              : report.buffers[it->second].category;
}

MemoryCategory MemoryBuilder::classify(Operation *op, unsigned result) const {
  Value value = op->getResult(result);
  if (isa<FlattenOp>(op)) {
    if (mark::isBucketBuffer(op))
      return MemoryCategory::CommBuffers;
    if (gradientFlattens.contains(op))
      return MemoryCategory::Grads;
    // A unit gradient md-apply-plan reduced in ranges, joined again.
    if (llvm::all_of(op->getOperands(), [&](Value input) {
          return categoryOf(input) == MemoryCategory::Grads;
        }))
      return MemoryCategory::Grads;
  }
  if (isa<CollectiveOpInterface>(op)) {
    MemoryCategory input = op->getNumOperands() != 0
                               ? categoryOf(op->getOperand(0))
                               : MemoryCategory::Activations;
    if (isa<AllGatherOp>(op))
      return MemoryCategory::Params;
    if (isGradientReduction(op))
      return MemoryCategory::Grads;
    return inherit(input);
  }
  if (isa<GradTotalOp>(op) || gradientPieces.contains(value))
    return MemoryCategory::Grads;
  if (isa<AdamWUpdateOp, SGDUpdateOp>(op))
    return result == 0 ? MemoryCategory::Params : MemoryCategory::Optimizer;
  if (isa<CastOp, ShardSliceOp, ScaleOp>(op))
    return inherit(categoryOf(op->getOperand(0)));
  if (auto accumulate = dyn_cast<AccumulateOp>(op))
    return inherit(categoryOf(accumulate.getAcc()));
  if (auto clip = dyn_cast<ClipOp>(op))
    return inherit(categoryOf(clip.getGrads()[result]));
  return MemoryCategory::Activations;
}

LogicalResult MemoryBuilder::addResultBuffer(Operation *op, unsigned i) {
  Value result = op->getResult(i);
  // Optimizer updates are in place: the new parameter and moments are the
  // buffers of the states they update.
  if (Value updated = getUpdatedOperand(op, i)) {
    auto it = bufferOf.find(updated);
    if (it != bufferOf.end() && report.buffers[it->second].persistent) {
      bufferOf[result] = it->second;
      return success();
    }
  }
  if (auto load = dyn_cast<StateLoadOp>(op)) {
    auto it = stateBuffer.find(load.getState());
    if (it != stateBuffer.end()) {
      bufferOf[result] = it->second;
      return success();
    }
  }
  if (isa<ViewOp, ReshapeOp>(op) && bufferOf.count(op->getOperand(0))) {
    bufferOf[result] = bufferOf.lookup(op->getOperand(0));
    return success();
  }
  FailureOr<int64_t> bytes = getValueBytes(model, result, worldSize);
  if (failed(bytes))
    return op->emitError("cannot size result #")
           << i << " of type " << result.getType()
           << ": a dynamic size must be the shard of a flat buffer";
  BufferInterval buffer;
  buffer.op = op;
  buffer.value = result;
  buffer.bytes = *bytes;
  buffer.category = classify(op, i);
  buffer.start = buffer.end = order.start.lookup(op);
  bufferOf[result] = report.buffers.size();
  report.buffers.push_back(buffer);
  return success();
}

LogicalResult MemoryBuilder::addStepBuffers() {
  step = getStepBlock(model);
  order.microSteps = accumulates;
  // The hooks run after the step (a plan's hooks block): their positions
  // follow the step's, with each evaluation's forward nested in its
  // md.evaluate, as the runtime nests the blocks.
  Block *hooks = nullptr;
  if (step && !model.getTrain().getHooks().empty())
    hooks = &model.getTrain().getHooks().front();
  llvm::MapVector<Operation *, std::vector<BufferInterval>> evaluations;
  if (hooks) {
    WalkResult walk = hooks->walk([&](EvaluateOp op) {
      int64_t positions = 0;
      if (failed(EvaluationBuffers(model, worldSize)
                     .build(op, evaluations[op], positions)))
        return WalkResult::interrupt();
      order.nestedPositions[op] = positions;
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
  }
  if (step)
    order.number(*step);
  if (hooks)
    order.number(*hooks);
  report.positions = order.opAt.size();
  for (BufferInterval &buffer : report.buffers)
    buffer.end = std::max<int64_t>(0, report.positions - 1);
  if (!step)
    return success();

  step->walk([&](FlattenOp flatten) {
    if (mark::isBucketBuffer(flatten) ||
        !reachesGradientSink(flatten.getResult()))
      return;
    gradientFlattens.insert(flatten);
    for (Value input : flatten.getInputs())
      gradientPieces.insert(input);
  });

  auto addResults = [&](Operation *op) {
    if (isa<MicroStepsOp>(op) && !accumulates)
      return WalkResult::skip();
    for (auto [i, result] : llvm::enumerate(op->getResults()))
      if (isa<RankedTensorType>(result.getType()) &&
          failed(addResultBuffer(op, i)))
        return WalkResult::interrupt();
    return WalkResult::advance();
  };
  if (step->walk<WalkOrder::PreOrder>(addResults).wasInterrupted() ||
      (hooks && hooks->walk<WalkOrder::PreOrder>(addResults).wasInterrupted()))
    return failure();
  // The evaluations' buffers, moved to their place in the hooks.
  for (auto &[op, buffers] : evaluations) {
    int64_t first = order.start.lookup(op) + 1;
    for (BufferInterval &buffer : buffers) {
      buffer.start += first;
      buffer.end += first;
      report.buffers.push_back(buffer);
    }
  }
  return success();
}

llvm::DenseMap<Operation *, int64_t> MemoryBuilder::commStreamCompletion() {
  // A collective on the comm stream runs after it is issued, in the comm
  // stream's order, so it keeps its operands longer than its place in
  // program order: the rule of the plan's liveness too (plan::StreamWindows
  // over each block). It reads its operands until an op of its block waits
  // for it or for a later collective, else until the end of its block; its
  // results are reserved from the moment it may start, so that no buffer
  // the compute stream uses in between shares their bytes.
  llvm::DenseMap<Operation *, int64_t> completion;
  for (Block *block : order.blocks) {
    SmallVector<Operation *> ops;
    std::vector<plan::StreamEvents> events;
    for (Operation &op : *block) {
      plan::StreamEvents e;
      if (std::optional<int64_t> stream = mark::stream(&op))
        e.stream = static_cast<int32_t>(*stream);
      if (std::optional<int64_t> record = mark::record(&op))
        e.record = static_cast<int32_t>(*record);
      if (std::optional<ArrayRef<int64_t>> waits = mark::waits(&op))
        for (int64_t event : *waits)
          e.waits.push_back(static_cast<int32_t>(event));
      ops.push_back(&op);
      events.push_back(std::move(e));
    }
    std::vector<plan::StreamWindow> windows = plan::StreamWindows(events);
    for (auto [i, op] : llvm::enumerate(ops)) {
      if (events[i].stream != 1)
        continue;
      const plan::StreamWindow &window = windows[i];
      completion[op] = window.release < static_cast<int32_t>(ops.size())
                           ? order.start.lookup(ops[window.release])
                           : order.blockEnd.lookup(block);
      int64_t start = order.start.lookup(ops[window.start]);
      for (Value result : op->getResults()) {
        auto b = bufferOf.find(result);
        if (b == bufferOf.end())
          continue;
        BufferInterval &buffer = report.buffers[b->second];
        if (!buffer.persistent && buffer.op == op)
          buffer.start = std::min(buffer.start, start);
      }
    }
  }
  return completion;
}

void MemoryBuilder::computeLiveness() {
  llvm::DenseMap<Operation *, int64_t> completion = commStreamCompletion();
  // Liveness: to the last use of the buffer or of a value aliasing it.
  for (auto &[value, index] : bufferOf) {
    BufferInterval &buffer = report.buffers[index];
    if (buffer.persistent)
      continue;
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      std::optional<int64_t> point = order.usePoint(value, user);
      if (!point)
        continue;
      auto done = completion.find(user);
      if (done != completion.end())
        point = std::max(*point, done->second);
      buffer.end = std::max(buffer.end, *point);
    }
  }
}

LogicalResult MemoryBuilder::computePeak() {
  // The shared model's sweep sums the transient buffers live at each
  // position by category; the peak is the first position with the most
  // bytes, and the persistent state adds to every position alike.
  std::vector<plan::LiveInterval> intervals;
  plan::CategoryBytes atPeak{};
  for (const BufferInterval &buffer : report.buffers) {
    int64_t &persistent = atPeak[static_cast<size_t>(buffer.category)];
    if (!buffer.persistent)
      intervals.push_back(
          {buffer.start, buffer.end, buffer.category, buffer.bytes});
    else if (__builtin_add_overflow(persistent, buffer.bytes, &persistent))
      return overflows();
  }
  absl::StatusOr<std::vector<plan::CategoryBytes>> liveAt =
      plan::LiveBytes(report.positions, intervals);
  if (!liveAt.ok())
    return overflows();
  int64_t peakTransient = 0;
  for (auto [position, bytes] : llvm::enumerate(*liveAt)) {
    int64_t total = 0;
    for (int64_t b : bytes)
      if (__builtin_add_overflow(total, b, &total))
        return overflows();
    if (report.peakPosition < 0 || total > peakTransient) {
      peakTransient = total;
      report.peakPosition = static_cast<int64_t>(position);
    }
  }
  if (report.peakPosition >= 0) {
    report.peakOp = order.opAt[report.peakPosition];
    const plan::CategoryBytes &live = (*liveAt)[report.peakPosition];
    for (size_t c = 0; c < atPeak.size(); ++c)
      if (__builtin_add_overflow(atPeak[c], live[c], &atPeak[c]))
        return overflows();
  }
  absl::StatusOr<plan::MemoryTotals> totals = plan::MemoryTotals::Of(atPeak);
  if (!totals.ok())
    return overflows();
  static_cast<plan::MemoryTotals &>(report) = *totals;

  for (auto [index, buffer] : llvm::enumerate(report.buffers))
    if (buffer.persistent || (buffer.start <= report.peakPosition &&
                              report.peakPosition <= buffer.end))
      report.liveAtPeak.push_back(index);
  llvm::stable_sort(report.liveAtPeak, [&](size_t a, size_t b) {
    return report.buffers[a].bytes > report.buffers[b].bytes;
  });
  return success();
}

void MemoryBuilder::countModelStates() {
  // The persistent params and optimizer states, and the reduced gradients
  // the optimizer phase consumes, each unit's once: the result of the last
  // backward collective of its reduction chain (a packed bucket counts once;
  // its views alias it), or its md.grad_total when one rank reduces nothing.
  // Transient buffers in flight or live by accident of the schedule are not
  // model states.
  auto isBackwardReduction = [](Operation *op) {
    return op && isa<CollectiveOpInterface>(op) && mark::isBackward(op) &&
           !op->getParentOfType<MicroStepsOp>();
  };
  bool reduces = false;
  for (const BufferInterval &buffer : report.buffers)
    reduces |= !buffer.persistent && isBackwardReduction(buffer.op);
  for (const BufferInterval &buffer : report.buffers) {
    if (buffer.persistent) {
      if (buffer.category == MemoryCategory::Params)
        report.modelStateParams += buffer.bytes;
      else if (buffer.category == MemoryCategory::Optimizer)
        report.modelStateOptimizer += buffer.bytes;
      continue;
    }
    bool reduced = false;
    if (reduces && isBackwardReduction(buffer.op) && buffer.value)
      reduced = llvm::none_of(buffer.value.getUsers(), isBackwardReduction);
    else if (!reduces && buffer.op && isa<GradTotalOp>(buffer.op) &&
             !buffer.op->getParentOfType<MicroStepsOp>())
      reduced = true;
    if (reduced)
      report.modelStateGrads += buffer.bytes;
  }
}

FailureOr<MemoryReport> md::computeMemory(ModelOp model, int64_t worldSize) {
  MemoryReport report;
  report.worldSize = worldSize;
  if (worldSize < 1)
    return model.emitError("world size must be >= 1, got ") << worldSize;
  FailureOr<int64_t> steps = getAccumulationSteps(model, worldSize);
  if (failed(steps))
    return failure();
  MemoryBuilder builder(model, worldSize, /*accumulates=*/*steps > 1, report);
  if (failed(builder.addStateBuffers()) || failed(builder.addStepBuffers()))
    return failure();
  builder.computeLiveness();
  if (failed(builder.computePeak()))
    return failure();
  builder.countModelStates();
  return report;
}
