//===- MemoryPlan.cpp - per-rank buffers of the step and their peak -------===//

#include "passes/MemoryPlan.h"
#include "passes/analysis/StepProgram.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace md;

StringRef md::stringifyMemoryCategory(MemoryCategory category) {
  switch (category) {
  case MemoryCategory::params:
    return "params";
  case MemoryCategory::grads:
    return "grads";
  case MemoryCategory::gradAcc:
    return "grad_acc";
  case MemoryCategory::optimizer:
    return "optimizer";
  case MemoryCategory::activations:
    return "activations";
  case MemoryCategory::commBuffers:
    return "comm_buffers";
  }
  return "activations";
}

int64_t MemoryReport::get(MemoryCategory category) const {
  switch (category) {
  case MemoryCategory::params:
    return params;
  case MemoryCategory::grads:
    return grads;
  case MemoryCategory::gradAcc:
    return gradAcc;
  case MemoryCategory::optimizer:
    return optimizer;
  case MemoryCategory::activations:
    return activations;
  case MemoryCategory::commBuffers:
    return commBuffers;
  }
  return 0;
}

int64_t md::getGroupSize(ModelOp model, Group group, int64_t worldSize) {
  std::optional<uint64_t> shard = model.getShardGroupSize();
  switch (group) {
  case Group::world:
    return worldSize;
  case Group::shard:
    return shard ? static_cast<int64_t>(*shard) : worldSize;
  case Group::replicate:
    return shard
               ? std::max<int64_t>(1, worldSize / static_cast<int64_t>(*shard))
               : 1;
  }
  return worldSize;
}

static int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

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
  int64_t groupSize = getGroupSize(model, shard->group, worldSize);
  if (groupSize < 1)
    return failure();
  return ceilDiv(shard->numel, groupSize) *
         getElementBytes(type.getElementType());
}

static MemoryCategory categoryOfRole(StateRole role) {
  switch (role) {
  case StateRole::master:
  case StateRole::params:
    return MemoryCategory::params;
  case StateRole::exp_avg:
  case StateRole::exp_avg_sq:
  case StateRole::momentum:
    return MemoryCategory::optimizer;
  case StateRole::grad_acc:
    return MemoryCategory::gradAcc;
  }
  return MemoryCategory::optimizer;
}

namespace {

/// Positions of the step's linear order: every op gets one, and an op with
/// regions a second one after its nested ops (its end), so that the body of
/// md.micro_steps is an interval nested in the step's.
struct Linearization {
  llvm::DenseMap<Operation *, int64_t> start, end;
  llvm::DenseMap<Block *, int64_t> blockEnd;
  std::vector<Operation *> opAt;
  /// Whether the body of md.micro_steps runs (A > 1).
  bool microSteps = true;

  void number(Block &block) {
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
        end[&op] = start[&op];
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
  case MemoryCategory::commBuffers:
  case MemoryCategory::gradAcc:
    return MemoryCategory::grads;
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

FailureOr<MemoryReport> md::computeMemory(ModelOp model, int64_t worldSize) {
  MemoryReport report;
  report.worldSize = worldSize;
  if (worldSize < 1)
    return model.emitError("world size must be >= 1, got ") << worldSize;
  FailureOr<int64_t> steps = getAccumulationSteps(model, worldSize);
  if (failed(steps))
    return failure();
  // With one micro-step the accumulator is never allocated and the
  // md.micro_steps body never runs.
  bool accumulates = *steps > 1;

  // Persistent state.
  llvm::StringMap<size_t> stateBuffer;
  for (StateOp state : model.getOps<StateOp>()) {
    RankedTensorType type = state.getTensorType();
    int64_t numel = state.getFlatNumel();
    if (state.isSharded())
      numel = ceilDiv(numel, getGroupSize(model, *state.getGroup(), worldSize));
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

  Block *step = getStepBlock(model);
  Linearization order;
  order.microSteps = accumulates;
  if (step)
    order.number(*step);
  report.positions = order.opAt.size();
  for (BufferInterval &buffer : report.buffers)
    buffer.end = std::max<int64_t>(0, report.positions - 1);

  // Gradient flattens and the per-parameter gradients they pack.
  llvm::DenseSet<Value> gradientPieces;
  llvm::DenseSet<Operation *> gradientFlattens;
  if (step)
    step->walk([&](FlattenOp flatten) {
      if (flatten->hasAttr("md.bucket_buffer") ||
          !reachesGradientSink(flatten.getResult()))
        return;
      gradientFlattens.insert(flatten);
      for (Value input : flatten.getInputs())
        gradientPieces.insert(input);
    });

  // Every value of the step: an alias of a buffer or a buffer of its own.
  llvm::DenseMap<Value, size_t> bufferOf;
  auto categoryOf = [&](Value value) {
    auto it = bufferOf.find(value);
    return it == bufferOf.end() ? MemoryCategory::activations
                                : report.buffers[it->second].category;
  };
  auto classify = [&](Operation *op, unsigned result) -> MemoryCategory {
    Value value = op->getResult(result);
    if (isa<FlattenOp>(op)) {
      if (op->hasAttr("md.bucket_buffer"))
        return MemoryCategory::commBuffers;
      if (gradientFlattens.contains(op))
        return MemoryCategory::grads;
    }
    if (isa<CollectiveOpInterface>(op)) {
      MemoryCategory input = op->getNumOperands() != 0
                                 ? categoryOf(op->getOperand(0))
                                 : MemoryCategory::activations;
      if (isa<AllGatherOp>(op))
        return MemoryCategory::params;
      if (isGradientReduction(op))
        return MemoryCategory::grads;
      return inherit(input);
    }
    if (isa<GradTotalOp>(op) || gradientPieces.contains(value))
      return MemoryCategory::grads;
    if (isa<AdamWUpdateOp, SGDUpdateOp>(op))
      return result == 0 ? MemoryCategory::params : MemoryCategory::optimizer;
    if (isa<CastOp, ShardSliceOp, ScaleOp>(op))
      return inherit(categoryOf(op->getOperand(0)));
    if (auto accumulate = dyn_cast<AccumulateOp>(op))
      return inherit(categoryOf(accumulate.getAcc()));
    if (auto clip = dyn_cast<ClipOp>(op))
      return inherit(categoryOf(clip.getGrads()[result]));
    return MemoryCategory::activations;
  };

  if (step) {
    LogicalResult status = success();
    step->walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (failed(status))
        return WalkResult::interrupt();
      if (isa<MicroStepsOp>(op) && !accumulates)
        return WalkResult::skip();
      for (auto [i, result] : llvm::enumerate(op->getResults())) {
        if (!isa<RankedTensorType>(result.getType()))
          continue;
        // Optimizer updates are in place: the new parameter and moments
        // are the buffers of the states they update.
        if (Value updated = getUpdatedOperand(op, i)) {
          auto it = bufferOf.find(updated);
          if (it != bufferOf.end() && report.buffers[it->second].persistent) {
            bufferOf[result] = it->second;
            continue;
          }
        }
        if (auto load = dyn_cast<StateLoadOp>(op)) {
          auto it = stateBuffer.find(load.getState());
          if (it != stateBuffer.end()) {
            bufferOf[result] = it->second;
            continue;
          }
        }
        if (isa<ViewOp, ReshapeOp>(op) && bufferOf.count(op->getOperand(0))) {
          bufferOf[result] = bufferOf.lookup(op->getOperand(0));
          continue;
        }
        FailureOr<int64_t> bytes = getValueBytes(model, result, worldSize);
        if (failed(bytes)) {
          status = op->emitError("cannot size result #")
                   << i << " of type " << result.getType()
                   << ": a dynamic size must be the shard of a flat buffer";
          return WalkResult::interrupt();
        }
        BufferInterval buffer;
        buffer.op = op;
        buffer.value = result;
        buffer.bytes = *bytes;
        buffer.category = classify(op, i);
        buffer.start = buffer.end = order.start.lookup(op);
        bufferOf[result] = report.buffers.size();
        report.buffers.push_back(buffer);
      }
      return WalkResult::advance();
    });
    if (failed(status))
      return failure();
  }

  // A collective on the comm stream runs after it is issued: it reads its
  // operands until an op waits for it or for a later collective (the comm
  // stream runs in order), else until the end of its block.
  llvm::DenseMap<int64_t, int64_t> recordedAt; // event -> position
  std::vector<std::pair<int64_t, Operation *>> commOps;
  for (auto [position, op] : llvm::enumerate(order.opAt)) {
    if (order.start.lookup(op) != static_cast<int64_t>(position))
      continue;
    auto stream = op->getAttrOfType<IntegerAttr>("md.stream");
    if (!stream || stream.getInt() != 1)
      continue;
    commOps.push_back({position, op});
    if (auto event = op->getAttrOfType<IntegerAttr>("md.record"))
      recordedAt[event.getInt()] = position;
  }
  llvm::DenseMap<Operation *, int64_t> completion;
  for (auto [position, op] : commOps)
    completion[op] = order.blockEnd.lookup(op->getBlock());
  for (auto [position, op] : llvm::enumerate(order.opAt)) {
    if (order.start.lookup(op) != static_cast<int64_t>(position))
      continue;
    auto waits = op->getAttrOfType<DenseI64ArrayAttr>("md.wait");
    if (!waits)
      continue;
    for (int64_t event : waits.asArrayRef()) {
      auto it = recordedAt.find(event);
      if (it == recordedAt.end())
        continue;
      for (auto [commPosition, comm] : commOps)
        if (commPosition <= it->second &&
            comm->getBlock() == order.opAt[it->second]->getBlock() &&
            static_cast<int64_t>(position) < completion[comm] &&
            static_cast<int64_t>(position) > commPosition)
          completion[comm] = position;
    }
  }

  // A collective on the comm stream may start as soon as the events it
  // waits for have completed (and the comm stream's earlier work), which
  // can be well before its place in program order: its results are
  // reserved from then on, so that no buffer the compute stream uses in
  // between shares their bytes. Without a wait in its block it may start
  // with the block.
  {
    llvm::DenseMap<int64_t, std::pair<int64_t, Block *>> recorded;
    llvm::DenseMap<Block *, int64_t> commStart;
    for (auto [position, op] : llvm::enumerate(order.opAt)) {
      int64_t at = static_cast<int64_t>(position);
      if (order.start.lookup(op) != at)
        continue;
      Block *block = op->getBlock();
      auto stream = op->getAttrOfType<IntegerAttr>("md.stream");
      if (stream && stream.getInt() == 1) {
        auto [it, inserted] =
            commStart.try_emplace(block, order.start.lookup(&block->front()));
        if (auto waits = op->getAttrOfType<DenseI64ArrayAttr>("md.wait"))
          for (int64_t event : waits.asArrayRef()) {
            auto r = recorded.find(event);
            if (r != recorded.end() && r->second.second == block)
              it->second = std::max(it->second, r->second.first + 1);
          }
        int64_t start = std::min(it->second, at);
        for (Value result : op->getResults()) {
          auto b = bufferOf.find(result);
          if (b == bufferOf.end())
            continue;
          BufferInterval &buffer = report.buffers[b->second];
          if (!buffer.persistent && buffer.op == op)
            buffer.start = std::min(buffer.start, start);
        }
      }
      if (auto event = op->getAttrOfType<IntegerAttr>("md.record"))
        recorded[event.getInt()] = {at, block};
    }
  }

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

  // The peak: a sweep over the positions.
  SmallVector<int64_t> delta(report.positions + 1, 0);
  for (const BufferInterval &buffer : report.buffers) {
    if (buffer.persistent)
      continue;
    delta[buffer.start] += buffer.bytes;
    delta[buffer.end + 1] -= buffer.bytes;
  }
  report.peak = report.persistent;
  int64_t live = report.persistent;
  for (int64_t position = 0; position < report.positions; ++position) {
    live += delta[position];
    if (report.peakPosition < 0 || live > report.peak) {
      report.peak = live;
      report.peakPosition = position;
    }
  }
  if (report.peakPosition >= 0)
    report.peakOp = order.opAt[report.peakPosition];

  for (auto [index, buffer] : llvm::enumerate(report.buffers)) {
    bool isLive = buffer.persistent || (buffer.start <= report.peakPosition &&
                                        report.peakPosition <= buffer.end);
    if (!isLive)
      continue;
    report.liveAtPeak.push_back(index);
    switch (buffer.category) {
    case MemoryCategory::params:
      report.params += buffer.bytes;
      break;
    case MemoryCategory::grads:
      report.grads += buffer.bytes;
      break;
    case MemoryCategory::gradAcc:
      report.gradAcc += buffer.bytes;
      break;
    case MemoryCategory::optimizer:
      report.optimizer += buffer.bytes;
      break;
    case MemoryCategory::activations:
      report.activations += buffer.bytes;
      break;
    case MemoryCategory::commBuffers:
      report.commBuffers += buffer.bytes;
      break;
    }
  }
  llvm::stable_sort(report.liveAtPeak, [&](size_t a, size_t b) {
    return report.buffers[a].bytes > report.buffers[b].bytes;
  });

  // ZeRO's model states: the persistent params and optimizer states, and
  // the reduced gradients the optimizer phase consumes, each unit's once:
  // the result of the last backward collective of its reduction chain (a
  // packed bucket counts once; its views alias it), or its md.grad_total
  // when one rank reduces nothing. Transient buffers in flight or live by
  // accident of the schedule are not model states.
  auto isBackwardReduction = [](Operation *op) {
    return op && isa<CollectiveOpInterface>(op) &&
           op->hasAttr("md.backward") &&
           !op->getParentOfType<MicroStepsOp>();
  };
  bool reduces = false;
  for (const BufferInterval &buffer : report.buffers)
    reduces |= !buffer.persistent && isBackwardReduction(buffer.op);
  for (const BufferInterval &buffer : report.buffers) {
    if (buffer.persistent) {
      if (buffer.category == MemoryCategory::params)
        report.modelStateParams += buffer.bytes;
      else if (buffer.category == MemoryCategory::optimizer)
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
  return report;
}
