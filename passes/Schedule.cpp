//===- Schedule.cpp - execution order, streams and events -----------------===//
//
// md-schedule: a list schedule of every block of the step program, with the
// forward and backward prefetch of all-gathers the plan asks for under a cap
// on the gathered units live at once, then streams (compute 0, comm 1) and
// the record/wait events between them.
//
// Every rank must issue its collectives in the same order. The order comes
// from priorities computed from the IR alone (positions, md.phase, md.unit,
// bucket ids, the plan): never from data, timing or the rank, so the same
// IR gives every rank the same sequence. Scheduling a scheduled program
// changes nothing.
//
//===----------------------------------------------------------------------===//

#include "dialect/MdDiscardableAttrs.h"
#include "passes/Passes.h"
#include "dialect/PlanOptions.h"
#include "passes/analysis/StepProgram.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"

#include <queue>

namespace md {
#define GEN_PASS_DEF_SCHEDULE
#include "passes/Passes.h.inc"
} // namespace md

using namespace mlir;
using namespace md;

namespace {


enum class BackwardPrefetch { none, pre, post };

/// One unit of scheduling: an op, or the collectives of one bucket, which
/// are issued together.
struct Node {
  SmallVector<unsigned> members; // positions, increasing
  SmallVector<unsigned> preds;   // nodes
  SmallVector<unsigned> succs;   // nodes
  /// Priority: twice the position the node runs at; odd values sit between
  /// two ops (a prefetch issued just before or after one).
  int64_t key = 0;
};

struct SchedulePass : public md::impl::ScheduleBase<SchedulePass> {
  using ScheduleBase::ScheduleBase;

  void runOnOperation() override;

private:
  bool prefetchForward = false;
  BackwardPrefetch prefetchBackward = BackwardPrefetch::none;
  /// Gathered units live at once when prefetching: the pass option, else
  /// the plan's max_inflight_allgathers, else two.
  int64_t inflightLimit = kDefaultMaxInflightAllGathers;

  LogicalResult scheduleBlock(Block &block);
  /// Moves the all-gathers the plan prefetches earlier by lowering their
  /// keys (and their predecessors'), under the cap on gathered units live
  /// at once; returns how many moved.
  int64_t prefetchGathers(const BlockDependences &deps, Block &block,
                          MutableArrayRef<Node> nodes);
  void assignStreamsAndEvents(Region &step);
};

/// The first and last position (in `deps`) of an op that uses the gathered
/// buffer of `gather`, through the views, casts and reshapes of it.
std::pair<unsigned, unsigned> gatheredUses(const BlockDependences &deps,
                                           Block &block,
                                           ArrayRef<Operation *> gathers) {
  unsigned first = deps.size(), last = 0;
  SmallVector<Value> worklist;
  for (Operation *gather : gathers)
    worklist.push_back(gather->getResult(0));
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      Operation *ancestor = block.findAncestorOpInBlock(*user);
      if (!ancestor)
        continue;
      unsigned i = deps.indexOf(ancestor);
      last = std::max(last, i);
      if (isa<ViewOp, CastOp, ReshapeOp>(user)) {
        worklist.push_back(user->getResult(0));
        continue;
      }
      first = std::min(first, i);
    }
  }
  return {first, last};
}

/// The scheduling nodes of the first `count` ops of `deps`: one per op, one
/// per bucket of collectives, with their dependences. Fails when a bucket's
/// member uses another member's result.
LogicalResult buildNodes(const BlockDependences &deps, unsigned count,
                         SmallVectorImpl<Node> &nodes) {
  SmallVector<unsigned> nodeOf(deps.size());
  llvm::MapVector<int64_t, unsigned> bucketNode;
  for (unsigned i = 0; i < count; ++i) {
    Operation *op = deps.getOps()[i];
    auto collective = dyn_cast<CollectiveOpInterface>(op);
    std::optional<int64_t> bucket =
        collective ? collective.getBucketId() : std::nullopt;
    if (bucket) {
      auto [it, inserted] = bucketNode.insert({*bucket, nodes.size()});
      if (!inserted) {
        nodeOf[i] = it->second;
        nodes[it->second].members.push_back(i);
        continue;
      }
    }
    nodeOf[i] = nodes.size();
    nodes.push_back(Node{{i}, {}, {}, 2 * static_cast<int64_t>(i)});
  }
  for (auto [id, node] : llvm::enumerate(nodes)) {
    for (unsigned m : node.members)
      for (unsigned p : deps.getPredecessors(m)) {
        unsigned from = nodeOf[p];
        if (from == id) {
          InFlightDiagnostic diag =
              deps.getOps()[m]->emitError(
                  "md-schedule: the collectives of bucket ")
              << *cast<CollectiveOpInterface>(deps.getOps()[m]).getBucketId()
              << " cannot be issued together: this one uses another's "
                 "result";
          diag.attachNote(deps.getOps()[p]->getLoc()) << "the other one";
          return diag;
        }
        if (!llvm::is_contained(node.preds, from))
          node.preds.push_back(from);
      }
  }
  for (auto [id, node] : llvm::enumerate(nodes))
    for (unsigned p : node.preds)
      nodes[p].succs.push_back(id);
  return success();
}

int64_t SchedulePass::prefetchGathers(const BlockDependences &deps,
                                      Block &block,
                                      MutableArrayRef<Node> nodes) {
  unsigned n = deps.size();
  // Prefetch: move a gather (and what it needs) to just before (or after)
  // an anchor by lowering its key and its predecessors' keys.
  int64_t prefetched = 0;
  auto promote = [&](unsigned node, int64_t key) {
    SmallVector<unsigned> worklist = {node};
    while (!worklist.empty()) {
      unsigned next = worklist.pop_back_val();
      if (nodes[next].key <= key)
        continue;
      nodes[next].key = key;
      llvm::append_range(worklist, nodes[next].preds);
    }
  };
  struct Gather {
    unsigned node;
    unsigned position; // where it is in program order
    unsigned firstUse, lastUse;
    StringRef phase;
  };
  SmallVector<Gather> gathers;
  for (auto [id, node] : llvm::enumerate(nodes)) {
    Operation *head = deps.getOps()[node.members.front()];
    if (!isa<AllGatherOp>(head))
      continue;
    SmallVector<Operation *> members;
    for (unsigned m : node.members)
      members.push_back(deps.getOps()[m]);
    auto [first, last] = gatheredUses(deps, block, members);
    gathers.push_back({static_cast<unsigned>(id), node.members.front(), first,
                       last, getPhase(head)});
  }
  // Gathered units live at `position`: gathered before it (or prefetched to
  // before it) and used at or after it.
  auto liveAt = [&](unsigned position) {
    int64_t live = 0;
    for (const Gather &gather : gathers)
      if (2 * static_cast<int64_t>(position) > nodes[gather.node].key &&
          gather.lastUse >= position)
        ++live;
    return live;
  };
  auto prefetch = [&](StringRef phase, bool post) {
    const Gather *current = nullptr;
    for (const Gather &next : gathers) {
      if (next.phase != phase)
        continue;
      if (current && current->firstUse < n) {
        unsigned anchor = post ? current->lastUse + 1 : current->firstUse;
        int64_t key = post ? 2 * static_cast<int64_t>(current->lastUse) + 1
                           : 2 * static_cast<int64_t>(current->firstUse) - 1;
        if (key < nodes[next.node].key && liveAt(anchor) + 1 <= inflightLimit) {
          promote(next.node, key);
          ++prefetched;
        }
      }
      current = &next;
    }
  };
  if (prefetchForward)
    prefetch("forward", /*post=*/false);
  if (prefetchBackward != BackwardPrefetch::none)
    prefetch("backward", prefetchBackward == BackwardPrefetch::post);
  return prefetched;
}

/// A list schedule of `nodes`: of the nodes whose predecessors have run, the
/// one with the smallest key, then the earliest in program order. Fails when
/// the nodes do not all run (a bucket closes a cycle).
LogicalResult listSchedule(const BlockDependences &deps, Block &block,
                           ArrayRef<Node> nodes, unsigned count,
                           SmallVectorImpl<Operation *> &order) {
  auto later = [&](unsigned a, unsigned b) {
    return std::make_pair(nodes[a].key, nodes[a].members.front()) >
           std::make_pair(nodes[b].key, nodes[b].members.front());
  };
  std::priority_queue<unsigned, std::vector<unsigned>, decltype(later)> ready(
      later);
  SmallVector<unsigned> pending(nodes.size());
  for (auto [id, node] : llvm::enumerate(nodes)) {
    pending[id] = node.preds.size();
    if (pending[id] == 0)
      ready.push(id);
  }
  SmallVector<bool> done(nodes.size(), false);
  while (!ready.empty()) {
    unsigned id = ready.top();
    ready.pop();
    done[id] = true;
    for (unsigned m : nodes[id].members)
      order.push_back(deps.getOps()[m]);
    for (unsigned s : nodes[id].succs)
      if (--pending[s] == 0)
        ready.push(s);
  }
  if (order.size() == count)
    return success();
  // Only buckets can close a cycle: report the first one left.
  for (auto [id, node] : llvm::enumerate(nodes)) {
    if (done[id] || node.members.size() < 2)
      continue;
    Operation *head = deps.getOps()[node.members.front()];
    InFlightDiagnostic diag =
        head->emitError("md-schedule: the collectives of bucket ")
        << *cast<CollectiveOpInterface>(head).getBucketId()
        << " cannot be issued together: the ops between them make them "
           "depend on each other or on another bucket";
    for (unsigned m : ArrayRef(node.members).drop_front())
      diag.attachNote(deps.getOps()[m]->getLoc()) << "member of the bucket";
    return diag;
  }
  return block.getParentOp()->emitError(
      "md-schedule: the step program has a dependence cycle");
}

LogicalResult SchedulePass::scheduleBlock(Block &block) {
  BlockDependences deps(block);
  unsigned n = deps.size();
  Operation *terminator =
      !block.empty() && block.back().hasTrait<OpTrait::IsTerminator>()
          ? &block.back()
          : nullptr;
  unsigned count = terminator ? n - 1 : n;
  if (count == 0)
    return success();

  SmallVector<Node> nodes;
  if (failed(buildNodes(deps, count, nodes)))
    return failure();
  int64_t prefetched = prefetchGathers(deps, block, nodes);
  SmallVector<Operation *> order;
  if (failed(listSchedule(deps, block, nodes, count, order)))
    return failure();

  for (Operation *op : order) {
    if (terminator)
      op->moveBefore(terminator);
    else
      op->moveBefore(&block, block.end());
  }
  numPrefetched += prefetched;
  return success();
}

void SchedulePass::assignStreamsAndEvents(Region &step) {
  step.walk([&](Operation *op) {
    mark::clearStreamOrder(op);
    if (op->hasTrait<OpTrait::IsTerminator>())
      return;
    mark::setStream(op, isa<CollectiveOpInterface>(op) ? 1 : 0);
  });
  // A use on the other stream than its producer's waits for the producer's
  // event. Events are numbered in execution order of their producers.
  auto crossStreamProducer = [&](Operation *op, Value operand) -> Operation * {
    Operation *def = operand.getDefiningOp();
    if (!def || !step.isAncestor(def->getParentRegion()))
      return nullptr;
    std::optional<int64_t> stream = mark::stream(op);
    std::optional<int64_t> defStream = mark::stream(def);
    return stream && defStream && stream != defStream ? def : nullptr;
  };
  llvm::DenseSet<Operation *> recorded;
  step.walk([&](Operation *op) {
    for (Value operand : op->getOperands())
      if (Operation *def = crossStreamProducer(op, operand))
        recorded.insert(def);
  });
  int64_t nextEvent = 0;
  step.walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (recorded.contains(op))
      mark::setRecord(op, nextEvent++);
  });
  step.walk([&](Operation *op) {
    SmallVector<int64_t> waits;
    for (Value operand : op->getOperands())
      if (Operation *def = crossStreamProducer(op, operand)) {
        int64_t event = *mark::record(def);
        if (!llvm::is_contained(waits, event))
          waits.push_back(event);
      }
    if (!waits.empty()) {
      llvm::sort(waits);
      mark::setWaits(op, waits);
    }
  });
  numEvents += nextEvent;
}

void SchedulePass::runOnOperation() {
  ModelOp model = getOperation();
  TrainOp train = model.getTrain();
  if (!train || train.getStep().empty())
    return;
  PlanAttr plan = model.getPlanAttr();

  if (forwardPrefetch == "plan")
    prefetchForward = plan && plan.getPrefetchForward();
  else if (forwardPrefetch == "on" || forwardPrefetch == "off")
    prefetchForward = forwardPrefetch == "on";
  else {
    model.emitError("md-schedule: forward-prefetch must be plan, on or off, "
                    "got '")
        << forwardPrefetch << "'";
    return signalPassFailure();
  }
  std::string backward = backwardPrefetch;
  if (backward == "plan")
    backward = plan
                   ? stringifyPrefetchBackward(plan.getPrefetchBackward()).str()
                   : "none";
  if (backward == "pre")
    prefetchBackward = BackwardPrefetch::pre;
  else if (backward == "post")
    prefetchBackward = BackwardPrefetch::post;
  else if (backward == "none")
    prefetchBackward = BackwardPrefetch::none;
  else {
    model.emitError("md-schedule: backward-prefetch must be plan, pre, post "
                    "or none, got '")
        << backwardPrefetch << "'";
    return signalPassFailure();
  }
  // The pass option, else the plan's limit, else FSDP's two.
  inflightLimit = maxInflightGathers;
  if (inflightLimit == 0)
    inflightLimit = getPlanMaxInflightAllGathers(model).value_or(
        kDefaultMaxInflightAllGathers);
  if (inflightLimit < 1) {
    model.emitError("md-schedule: max-inflight-gathers must be >= 1, got ")
        << inflightLimit;
    return signalPassFailure();
  }

  // The outer block first; a nested block moves with its op.
  SmallVector<Block *> blocks = {&train.getStep().front()};
  train.getStep().walk<WalkOrder::PreOrder>([&](Operation *op) {
    for (Region &region : op->getRegions())
      for (Block &block : region)
        blocks.push_back(&block);
  });
  for (Block *block : blocks)
    if (failed(scheduleBlock(*block)))
      return signalPassFailure();
  assignStreamsAndEvents(train.getStep());
}

} // namespace
