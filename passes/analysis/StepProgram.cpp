//===- StepProgram.cpp - the per-step program: blocks, dependences -------===//

#include "dialect/MdDiscardableAttrs.h"
#include "passes/analysis/StepProgram.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace md;

Block *md::getStepBlock(ModelOp model) {
  TrainOp train = model.getTrain();
  if (!train || train.getStep().empty())
    return nullptr;
  return &train.getStep().front();
}

int64_t md::getUnit(Operation *op) {
  return mark::unit(op).value_or(-1);
}

StringRef md::getPhase(Operation *op) {
  return mark::phase(op).value_or("");
}

/// Whether `value` is a gradient on its way to a reduction: it comes from
/// md.flatten or md.grad_total through casts and reductions.
static bool isReducedGradient(Value value) {
  for (int depth = 0; depth < 16; ++depth) {
    Operation *def = value.getDefiningOp();
    if (!def)
      return false;
    if (isa<FlattenOp, GradTotalOp>(def))
      return true;
    if (auto cast = dyn_cast<CastOp>(def)) {
      value = cast.getInput();
      continue;
    }
    if (auto reduceScatter = dyn_cast<ReduceScatterOp>(def)) {
      value = reduceScatter.getInput();
      continue;
    }
    if (auto allReduce = dyn_cast<AllReduceOp>(def)) {
      value = allReduce.getInput();
      continue;
    }
    return false;
  }
  return false;
}

bool md::isGradientReduction(Operation *op) {
  auto collective = dyn_cast<CollectiveOpInterface>(op);
  if (!collective || !isa<ReduceScatterOp, AllReduceOp>(op))
    return false;
  std::optional<ReductionKind> reduction = collective.getReduction();
  if (!reduction ||
      (*reduction != ReductionKind::sum && *reduction != ReductionKind::avg))
    return false;
  Value input = op->getOperand(0);
  auto type = dyn_cast<RankedTensorType>(input.getType());
  return type && type.getRank() == 1 && isReducedGradient(input);
}

std::optional<ShardInfo> md::getShardInfo(Value value) {
  for (int depth = 0; depth < 64; ++depth) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type || type.hasStaticShape())
      return std::nullopt;
    Operation *def = value.getDefiningOp();
    if (!def)
      return std::nullopt;
    if (auto load = dyn_cast<StateLoadOp>(def)) {
      auto state = SymbolTable::lookupNearestSymbolFrom<StateOp>(
          load, load.getStateAttr());
      if (!state || !state.isSharded() || !state.getGroup())
        return std::nullopt;
      return ShardInfo{state.getFlatNumel(), *state.getGroup()};
    }
    auto fullNumel = [](Value full) -> std::optional<int64_t> {
      auto type = dyn_cast<RankedTensorType>(full.getType());
      if (!type || !type.hasStaticShape())
        return std::nullopt;
      return type.getNumElements();
    };
    if (auto reduceScatter = dyn_cast<ReduceScatterOp>(def)) {
      if (std::optional<int64_t> n = fullNumel(reduceScatter.getInput()))
        return ShardInfo{*n, reduceScatter.getGroup()};
      return std::nullopt;
    }
    if (auto slice = dyn_cast<ShardSliceOp>(def)) {
      if (std::optional<int64_t> n = fullNumel(slice.getInput()))
        return ShardInfo{*n, slice.getGroup()};
      return std::nullopt;
    }
    // Ops whose results shard like particular operands.
    unsigned result = cast<OpResult>(value).getResultNumber();
    if (isa<ClipOp>(def)) {
      value = def->getOperand(result);
      continue;
    }
    if (auto adamw = dyn_cast<AdamWUpdateOp>(def)) {
      Value sources[] = {adamw.getParam(), adamw.getM(), adamw.getV()};
      value = sources[result];
      continue;
    }
    if (auto sgd = dyn_cast<SGDUpdateOp>(def)) {
      value = result == 0 ? sgd.getParam() : sgd.getMomentumBuffer();
      continue;
    }
    Value next;
    for (Value operand : def->getOperands()) {
      auto operandType = dyn_cast<RankedTensorType>(operand.getType());
      if (operandType && !operandType.hasStaticShape()) {
        next = operand;
        break;
      }
    }
    if (!next)
      return std::nullopt;
    value = next;
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Accesses
//===----------------------------------------------------------------------===//

static void addAccess(Operation *op, OpAccess &access) {
  if (isa<CollectiveOpInterface>(op)) {
    access.communicates = true;
    return;
  }
  if (auto load = dyn_cast<StateLoadOp>(op)) {
    access.reads.push_back(load.getState());
    return;
  }
  if (auto store = dyn_cast<StateStoreOp>(op)) {
    access.writes.push_back(store.getState());
    return;
  }
  if (auto acc = dyn_cast<GradAccumulateOp>(op)) {
    access.reads.push_back(acc.getAcc());
    access.writes.push_back(acc.getAcc());
    return;
  }
  if (auto total = dyn_cast<GradTotalOp>(op)) {
    access.reads.push_back(total.getAcc());
    return;
  }
  if (isa<BatchOp>(op)) {
    access.reads.push_back("<batch>");
    access.writes.push_back("<batch>");
    return;
  }
  if (isa<RecordLossOp>(op)) {
    access.reads.push_back("<loss>");
    access.writes.push_back("<loss>");
    return;
  }
  if (op->hasTrait<OpTrait::IsTerminator>() && isMemoryEffectFree(op))
    return;
  if (op->hasTrait<OpTrait::HasRecursiveMemoryEffects>())
    return; // the nested ops speak for it
  // Save and evaluate communicate without being collectives.
  if (op->getNumRegions() == 0 && containsCollective(op))
    access.communicates = true;
  auto effects = dyn_cast<MemoryEffectOpInterface>(op);
  if (!effects) {
    access.opaque = true;
    return;
  }
  SmallVector<MemoryEffects::EffectInstance> instances;
  effects.getEffects(instances);
  for (const MemoryEffects::EffectInstance &effect : instances) {
    SideEffects::Resource *resource = effect.getResource();
    if (isa<CommResource>(resource)) {
      access.communicates = true;
      continue;
    }
    StringRef key = isa<HostIOResource>(resource) ? "<host>" : "*";
    if (isa<MemoryEffects::Read>(effect.getEffect()))
      access.reads.push_back(key);
    else if (isa<MemoryEffects::Write, MemoryEffects::Free,
                 MemoryEffects::Allocate>(effect.getEffect()))
      access.writes.push_back(key);
  }
}

OpAccess md::getAccess(Operation *op) {
  OpAccess access;
  op->walk([&](Operation *nested) { addAccess(nested, access); });
  access.holdsCommunication =
      access.communicates && !isa<CollectiveOpInterface>(op);
  return access;
}

static bool keysOverlap(ArrayRef<StringRef> a, ArrayRef<StringRef> b) {
  for (StringRef x : a)
    for (StringRef y : b)
      if (x == y || x == "*" || y == "*")
        return true;
  return false;
}

bool md::accessesConflict(const OpAccess &a, const OpAccess &b) {
  if ((a.opaque && b.hasEffects()) || (b.opaque && a.hasEffects()))
    return true;
  if (a.communicates && b.communicates &&
      (a.holdsCommunication || b.holdsCommunication))
    return true;
  return keysOverlap(a.writes, b.reads) || keysOverlap(a.writes, b.writes) ||
         keysOverlap(b.writes, a.reads);
}

//===----------------------------------------------------------------------===//
// BlockDependences
//===----------------------------------------------------------------------===//

BlockDependences::BlockDependences(Block &block) {
  for (Operation &op : block) {
    index[&op] = ops.size();
    ops.push_back(&op);
  }
  preds.resize(ops.size());
  succs.resize(ops.size());
  accesses.reserve(ops.size());
  SmallVector<unsigned> effectful;
  for (auto [i, op] : llvm::enumerate(ops)) {
    llvm::SetVector<unsigned> in;
    // Values this op or an op nested in it reads that an op of the block
    // defines.
    op->walk([&](Operation *nested) {
      for (Value operand : nested->getOperands()) {
        Operation *def = operand.getDefiningOp();
        if (!def)
          continue;
        Operation *ancestor = block.findAncestorOpInBlock(*def);
        if (ancestor && ancestor != op)
          in.insert(index.lookup(ancestor));
      }
    });
    accesses.push_back(getAccess(op));
    if (accesses.back().hasEffects()) {
      for (unsigned j : effectful)
        if (accessesConflict(accesses[j], accesses.back()))
          in.insert(j);
      effectful.push_back(i);
    }
    SmallVector<unsigned> sorted(in.begin(), in.end());
    llvm::sort(sorted);
    for (unsigned j : sorted) {
      preds[i].push_back(j);
      succs[j].push_back(i);
    }
  }
}

void md::eraseDeadOps(Region &region) {
  SmallVector<Operation *> ops;
  region.walk([&](Operation *op) { ops.push_back(op); });
  for (Operation *op : llvm::reverse(ops))
    if (isOpTriviallyDead(op))
      op->erase();
}
