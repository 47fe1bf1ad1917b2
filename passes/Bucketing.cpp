//===- Bucketing.cpp - communication buckets with a cost model -----------===//
//
// md-bucketing: gives every collective of md.train a bucket id, packs DDP's
// gradient all-reduces into shared flat buffers, groups reduce-scatters and
// small all-gathers so that the runtime issues each group at once, and
// records the bucket table mdc --explain prints. Passes.td describes the
// cost model; CostModel.h holds it.
//
//===----------------------------------------------------------------------===//

#include "dialect/MdDiscardableAttrs.h"
#include "passes/Passes.h"
#include "passes/analysis/CostModel.h"
#include "passes/analysis/StepProgram.h"
#include "runtime/core/Mesh.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"

namespace md {
#define GEN_PASS_DEF_BUCKETING
#include "passes/Passes.h.inc"
} // namespace md

using namespace mlir;
using namespace md;

namespace {

constexpr int64_t kDefaultBucketCap = 25 * 1024 * 1024;

/// A bucket while it is being formed: its collectives in program order and
/// what the table says about it.
struct Bucket {
  SmallVector<Operation *> members;
  SmallVector<std::string> units;
  CollectiveKind kind;
  Group group;
  Type elementType;
  int64_t bytes = 0;
  int64_t exposedNs = 0;
};

/// What collectives must share to be in one bucket.
struct BucketClass {
  CollectiveKind kind;
  Group group;
  std::optional<ReductionKind> reduction;
  Type elementType;
  StringRef phase;
  /// All-reduces of static buffers pack into one flat buffer.
  bool packable;

  bool operator==(const BucketClass &other) const {
    return kind == other.kind && group == other.group &&
           reduction == other.reduction && elementType == other.elementType &&
           phase == other.phase && packable == other.packable;
  }
};

BucketClass classify(Operation *op) {
  auto collective = cast<CollectiveOpInterface>(op);
  Type elementType;
  bool packable = false;
  if (op->getNumOperands() != 0) {
    auto type = cast<RankedTensorType>(op->getOperand(0).getType());
    elementType = type.getElementType();
    packable = isa<AllReduceOp>(op) && type.hasStaticShape();
  }
  return {collective.getCollectiveKind(),
          collective.getCollectiveGroup(),
          collective.getReduction(),
          elementType,
          getPhase(op),
          packable};
}

/// The collectives of `block` that `select` picks, grouped by class, the
/// classes in the order of their first member.
SmallVector<std::pair<BucketClass, SmallVector<Operation *>>>
groupByClass(Block &block, function_ref<bool(Operation &)> select) {
  SmallVector<std::pair<BucketClass, SmallVector<Operation *>>> classes;
  for (Operation &op : block) {
    if (!select(op))
      continue;
    BucketClass cls = classify(&op);
    auto *it =
        llvm::find_if(classes, [&](auto &entry) { return entry.first == cls; });
    if (it == classes.end()) {
      classes.push_back({cls, {}});
      it = std::prev(classes.end());
    }
    it->second.push_back(&op);
  }
  return classes;
}

/// An empty bucket of class `cls`.
Bucket startBucket(const BucketClass &cls) {
  Bucket bucket;
  bucket.kind = cls.kind;
  bucket.group = cls.group;
  bucket.elementType = cls.elementType;
  return bucket;
}

/// The positions in `deps` of `ops`.
SmallVector<unsigned> positionsOf(const BlockDependences &deps,
                                  ArrayRef<Operation *> ops) {
  return llvm::map_to_vector(ops,
                             [&](Operation *op) { return deps.indexOf(op); });
}

std::string formatNumber(double value) {
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%g", value);
  return text;
}

/// The units a collective reduces for the table: "u<unit>", "-" without
/// one; a packed bucket lists its members' (`md.units`).
SmallVector<std::string> unitNames(Operation *op) {
  auto name = [](int64_t unit) {
    return unit < 0 ? std::string("-") : "u" + std::to_string(unit);
  };
  if (std::optional<ArrayRef<int64_t>> units = mark::units(op))
    return llvm::map_to_vector(*units, name);
  return {name(getUnit(op))};
}

SmallVector<int64_t> unitIds(Operation *op) {
  if (std::optional<ArrayRef<int64_t>> units = mark::units(op))
    return SmallVector<int64_t>(*units);
  return {getUnit(op)};
}

/// Ops that only move or convert a unit's parameters; an all-gather joining
/// an earlier one's bucket may take them along.
bool isMovableProducer(Operation *op) {
  return isa<StateLoadOp, CastOp, ViewOp, FlattenOp, ShardSliceOp, ReshapeOp>(
      op);
}

struct BucketingPass : public md::impl::BucketingBase<BucketingPass> {
  using BucketingBase::BucketingBase;

  void runOnOperation() override;

private:
  ModelOp model;
  CostModel costModel;
  int64_t cap = 0;
  std::vector<Bucket> buckets;

  /// Bytes of the full buffer a collective moves, counted for the cap:
  /// independent of W (a flat shard of N elements counts N / |G| when the
  /// group's size is pinned, N otherwise).
  int64_t capBytes(Operation *op);
  /// Bytes one rank sends for `bytes` of full buffer, with the ring factors
  /// of the collective's kind (their large-n limits while W is symbolic).
  int64_t wireBytes(const BucketClass &cls, int64_t bytes);
  int64_t costNs(const BucketClass &cls, int64_t bytes) {
    return costModel.collectiveNs(wireBytes(cls, bytes));
  }

  /// The compute finish time of every op of the block in program order.
  SmallVector<int64_t> computeTimeline(const BlockDependences &deps);

  void bucketGradientReductions(Block &block,
                                llvm::DenseSet<Operation *> &bucketed);
  void bucketAllGathers(Block &block, llvm::DenseSet<Operation *> &bucketed);
  bool canSink(const BlockDependences &deps, ArrayRef<unsigned> members,
               SmallVectorImpl<unsigned> *dependents);
  bool canHoist(const BlockDependences &deps, ArrayRef<unsigned> members,
                SmallVectorImpl<unsigned> *producers);
  Operation *pack(ArrayRef<Operation *> members);
  /// canSink or canHoist: whether a bucket's members can gather, and the
  /// positions of the other ops that move with them.
  using CanGather = bool (BucketingPass::*)(const BlockDependences &,
                                            ArrayRef<unsigned>,
                                            SmallVectorImpl<unsigned> *);
  /// Marks the members of the buckets from `first` on bucketed and calls
  /// `place` on each one of several members, with the block's dependences
  /// read afresh (placing a bucket moves ops) and the positions of the ops
  /// that `canGather` says move with them.
  void placeBuckets(
      Block &block, size_t first, llvm::DenseSet<Operation *> &bucketed,
      CanGather canGather,
      function_ref<void(Bucket &, const BlockDependences &, ArrayRef<unsigned>)>
          place);
};

int64_t BucketingPass::capBytes(Operation *op) {
  auto bytesOf = [](Value value) { return getTensorBytes(value.getType()); };
  if (auto gather = dyn_cast<AllGatherOp>(op)) {
    if (int64_t bytes = bytesOf(gather.getResult()))
      return bytes;
    int64_t shard = bytesOf(gather.getInput());
    if (std::optional<int64_t> n = model.getStaticGroupSize(gather.getGroup()))
      return shard * *n;
    return shard;
  }
  if (auto scatter = dyn_cast<ReduceScatterOp>(op)) {
    if (int64_t bytes = bytesOf(scatter.getInput()))
      return bytes;
    return bytesOf(scatter.getResult());
  }
  if (op->getNumOperands() == 0)
    return 0;
  Value input = op->getOperand(0);
  if (int64_t bytes = bytesOf(input))
    return bytes;
  std::optional<ShardInfo> shard = getShardInfo(input);
  if (!shard)
    return 0;
  int64_t elementBytes =
      getElementBytes(cast<RankedTensorType>(input.getType()).getElementType());
  int64_t numel = shard->numel;
  if (std::optional<int64_t> n = model.getStaticGroupSize(shard->group))
    numel = md::mesh::shardNumel(numel, *n).value_or(numel);
  return numel * elementBytes;
}

int64_t BucketingPass::wireBytes(const BucketClass &cls, int64_t bytes) {
  std::optional<int64_t> n = model.getStaticGroupSize(cls.group);
  switch (cls.kind) {
  case CollectiveKind::all_gather:
  case CollectiveKind::reduce_scatter:
    return n ? bytes * (*n - 1) / *n : bytes;
  case CollectiveKind::all_reduce:
    return n ? 2 * bytes * (*n - 1) / *n : 2 * bytes;
  case CollectiveKind::broadcast:
    return n && *n <= 1 ? 0 : bytes;
  case CollectiveKind::barrier:
    return 0;
  }
  return bytes;
}

SmallVector<int64_t>
BucketingPass::computeTimeline(const BlockDependences &deps) {
  SmallVector<int64_t> finish;
  int64_t now = 0;
  for (Operation *op : deps.getOps()) {
    now += costModel.computeNs(estimateFlops(op));
    finish.push_back(now);
  }
  return finish;
}

namespace {
/// The positions from the first member of a bucket to the last, which
/// canSink and canHoist scan: which are members, and which ops move when the
/// members gather.
struct MemberSpan {
  explicit MemberSpan(ArrayRef<unsigned> members)
      : lo(members.front()), hi(members.back()), isMember(hi - lo + 1, false),
        moves(hi - lo + 1, false) {
    for (unsigned m : members)
      isMember[m - lo] = true;
  }

  /// Whether the ops that move can move past those that `stays`: each
  /// non-member that moves is `movable`, and none has an access that
  /// conflicts with one of a staying op. Appends the non-members that move
  /// to `moved`.
  bool canMovePast(const BlockDependences &deps,
                   function_ref<bool(unsigned)> stays,
                   function_ref<bool(Operation *)> movable,
                   SmallVectorImpl<unsigned> *moved) const {
    for (unsigned i = lo; i <= hi; ++i) {
      if (!moves[i - lo])
        continue;
      if (!isMember[i - lo] && !movable(deps.getOps()[i]))
        return false;
      const OpAccess &access = deps.getAccessAt(i);
      if (access.hasEffects())
        for (unsigned j = lo; j <= hi; ++j)
          if (stays(j) && accessesConflict(access, deps.getAccessAt(j)))
            return false;
      if (moved && !isMember[i - lo])
        moved->push_back(i);
    }
    return true;
  }

  unsigned lo, hi;
  SmallVector<bool> isMember, moves;
};
} // namespace

/// Whether the collectives at `members` (positions, increasing) can move to
/// the last one's place: none depends on another, and what depends on the
/// earlier ones (collected in `dependents`, members excluded) can move after
/// the last without crossing a conflicting access.
bool BucketingPass::canSink(const BlockDependences &deps,
                            ArrayRef<unsigned> members,
                            SmallVectorImpl<unsigned> *dependents) {
  MemberSpan span(members);
  unsigned lo = span.lo, hi = span.hi;
  // An op moves (after the last member) when it is an earlier member or
  // depends on an op that moves.
  for (unsigned i = lo; i <= hi; ++i) {
    bool depends = llvm::any_of(deps.getPredecessors(i), [&](unsigned p) {
      return p >= lo && span.moves[p - lo];
    });
    if (span.isMember[i - lo]) {
      if (depends)
        return false;
      span.moves[i - lo] = i != hi;
      continue;
    }
    span.moves[i - lo] = depends;
  }
  return span.canMovePast(
      deps,
      [&](unsigned j) { return !span.moves[j - lo] && !span.isMember[j - lo]; },
      [](Operation *) { return true; }, dependents);
}

/// Whether the collectives at `members` (positions, increasing) can move up
/// to the first one's place: none depends on another, and the ops the later
/// ones need from after the first (collected in `producers`) only load and
/// convert state and can move before it without crossing a conflicting
/// access.
bool BucketingPass::canHoist(const BlockDependences &deps,
                             ArrayRef<unsigned> members,
                             SmallVectorImpl<unsigned> *producers) {
  MemberSpan span(members);
  unsigned lo = span.lo;
  // An op moves (up to the first member) when it is a later member or a
  // later member needs it; the first member stays.
  for (unsigned m : members.drop_front())
    span.moves[m - lo] = true;
  for (unsigned i = span.hi + 1; i-- > lo;) {
    if (!span.moves[i - lo])
      continue;
    for (unsigned p : deps.getPredecessors(i)) {
      if (p < lo)
        continue;
      if (span.isMember[p - lo])
        return false; // a member needs another one
      span.moves[p - lo] = true;
    }
  }
  return span.canMovePast(
      deps, [&](unsigned j) { return !span.moves[j - lo]; }, isMovableProducer,
      producers);
}

/// Replaces the adjacent all-reduces `members` by one all-reduce of the
/// flattening of their inputs and views of its result.
Operation *BucketingPass::pack(ArrayRef<Operation *> members) {
  auto first = cast<AllReduceOp>(members.front());
  OpBuilder builder(first);
  SmallVector<Value> inputs;
  SmallVector<Type> inputTypes;
  int64_t total = 0;
  for (Operation *member : members) {
    Value input = member->getOperand(0);
    inputs.push_back(input);
    total += cast<RankedTensorType>(input.getType()).getNumElements();
  }
  Type elementType =
      cast<RankedTensorType>(inputs.front().getType()).getElementType();
  auto flatType = RankedTensorType::get({total}, elementType);
  SmallVector<Location> locs;
  for (Operation *member : members)
    locs.push_back(member->getLoc());
  Location loc = builder.getFusedLoc(locs);
  auto flat = FlattenOp::create(builder, loc, flatType, inputs);
  mark::setBucketBuffer(flat);
  auto reduced =
      AllReduceOp::create(builder, loc, flatType, first.getGroupAttr(),
                          IntegerAttr(), flat, first.getReductionKindAttr());
  SmallVector<int64_t> units;
  for (Operation *member : members)
    llvm::append_range(units, unitIds(member));
  mark::setUnits(reduced, units);
  // A bucket of gradient reductions is one too (the memory model counts its
  // result among the reduced gradients).
  if (mark::isBackward(first))
    mark::setBackward(reduced);
  int64_t offset = 0;
  for (Operation *member : members) {
    auto type = cast<RankedTensorType>(member->getResult(0).getType());
    auto view = ViewOp::create(builder, member->getLoc(), type, reduced,
                               builder.getI64IntegerAttr(offset));
    mark::copyUnit(member, view);
    member->getResult(0).replaceAllUsesWith(view);
    offset += type.getNumElements();
  }
  for (Operation *member : members)
    member->erase();
  return reduced;
}

void BucketingPass::bucketGradientReductions(
    Block &block, llvm::DenseSet<Operation *> &bucketed) {
  auto classes = groupByClass(
      block, [](Operation &op) { return isGradientReduction(&op); });

  for (auto &[cls, ops] : classes) {
    // Earlier classes moved ops: read positions and times afresh.
    BlockDependences deps(block);
    SmallVector<int64_t> finish = computeTimeline(deps);
    llvm::sort(ops, [&](Operation *a, Operation *b) {
      return deps.indexOf(a) < deps.indexOf(b);
    });
    size_t k = ops.size();
    SmallVector<unsigned> pos;
    SmallVector<int64_t> bytes, ready;
    for (Operation *op : ops) {
      unsigned i = deps.indexOf(op);
      pos.push_back(i);
      bytes.push_back(capBytes(op));
      ArrayRef<unsigned> preds = deps.getPredecessors(i);
      ready.push_back(preds.empty() ? 0 : finish[preds.back()]);
    }

    // best[j]: the earliest time the first j reductions are all reduced,
    // with count[j] buckets; from[j]: where the last of those buckets
    // starts. A later bucket can only start after an earlier one finishes,
    // and finishing earlier never hurts what follows, so the prefix optimum
    // extends to the optimum (the dynamic program is exact for the model).
    constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
    SmallVector<int64_t> best(k + 1, kNever), count(k + 1, 0);
    SmallVector<size_t> from(k + 1, 0);
    best[0] = 0;
    for (size_t j = 1; j <= k; ++j) {
      int64_t total = 0, latest = 0;
      for (size_t i = j; i >= 1; --i) {
        total += bytes[i - 1];
        latest = std::max(latest, ready[i - 1]);
        if (i < j && total > cap)
          break;
        if (i < j &&
            !canSink(deps, ArrayRef(pos).slice(i - 1, j - i + 1), nullptr))
          continue;
        int64_t done = std::max(latest, best[i - 1]) + costNs(cls, total);
        if (done < best[j] ||
            (done == best[j] && count[i - 1] + 1 < count[j])) {
          best[j] = done;
          count[j] = count[i - 1] + 1;
          from[j] = i;
        }
      }
    }
    SmallVector<std::pair<size_t, size_t>> ranges; // [i, j), program order
    for (size_t j = k; j > 0; j = from[j] - 1)
      ranges.push_back({from[j] - 1, j});
    std::reverse(ranges.begin(), ranges.end());

    // Exposure: a bucket's time on the wire past the end of the compute
    // that produces the class's gradients is not hidden by it.
    int64_t computeEnd = *llvm::max_element(ready);
    int64_t commFree = 0;
    for (auto [i, j] : ranges) {
      Bucket bucket = startBucket(cls);
      int64_t latest = 0;
      for (size_t m = i; m < j; ++m) {
        bucket.members.push_back(ops[m]);
        llvm::append_range(bucket.units, unitNames(ops[m]));
        bucket.bytes += bytes[m];
        latest = std::max(latest, ready[m]);
      }
      int64_t start = std::max(latest, commFree);
      int64_t end = start + costNs(cls, bucket.bytes);
      bucket.exposedNs =
          std::max<int64_t>(0, end - std::max(start, computeEnd));
      commFree = end;
      buckets.push_back(std::move(bucket));
    }

    // Place each bucket: its members next to the last one, what uses the
    // earlier members after it. Positions shift as ops move; recompute them.
    bool packable = cls.packable;
    auto sink = [&](Bucket &bucket, const BlockDependences &now,
                    ArrayRef<unsigned> dependents) {
      Operation *last = bucket.members.back();
      Operation *after = last;
      for (unsigned d : dependents) {
        now.getOps()[d]->moveAfter(after);
        after = now.getOps()[d];
      }
      for (Operation *member : ArrayRef(bucket.members).drop_back())
        member->moveBefore(last);
      if (packable) {
        numPacked += bucket.members.size();
        Operation *packed = pack(bucket.members);
        bucketed.insert(packed);
        bucket.members = {packed};
      }
    };
    placeBuckets(block, buckets.size() - ranges.size(), bucketed,
                 &BucketingPass::canSink, sink);
  }
}

void BucketingPass::bucketAllGathers(Block &block,
                                     llvm::DenseSet<Operation *> &bucketed) {
  auto classes = groupByClass(block, [&](Operation &op) {
    return isa<AllGatherOp>(op) && !bucketed.contains(&op);
  });
  int64_t small = costModel.latencyBoundBytes();
  for (auto &[cls, ops] : classes) {
    BlockDependences deps(block);
    SmallVector<int64_t> finish = computeTimeline(deps);
    llvm::sort(ops, [&](Operation *a, Operation *b) {
      return deps.indexOf(a) < deps.indexOf(b);
    });
    // Greedy in program order: a latency-bound gather joins the open bucket
    // while every member is latency-bound, the cap holds and it can move up.
    SmallVector<SmallVector<Operation *>> groups;
    int64_t openBytes = 0;
    bool openSmall = false;
    for (Operation *op : ops) {
      int64_t bytes = capBytes(op);
      bool isSmall = bytes <= small;
      if (!groups.empty() && openSmall && isSmall && openBytes + bytes <= cap) {
        SmallVector<unsigned> memberPos = positionsOf(deps, groups.back());
        memberPos.push_back(deps.indexOf(op));
        if (canHoist(deps, memberPos, nullptr)) {
          groups.back().push_back(op);
          openBytes += bytes;
          continue;
        }
      }
      groups.push_back({op});
      openBytes = bytes;
      openSmall = isSmall;
    }

    // Exposure: the gathers of a class go out back to back from the time
    // their shards are ready, or, when the plan prefetches their phase, from
    // the time the previous bucket of the phase is first needed (md-schedule
    // issues them there); what is still on the wire when the compute first
    // needs a member stalls it.
    PlanAttr plan = model.getPlanAttr();
    bool prefetched =
        plan && ((cls.phase == "forward" && plan.getPrefetchForward()) ||
                 (cls.phase == "backward" &&
                  plan.getPrefetchBackward() != PrefetchBackward::none));
    int64_t commFree = 0;
    std::optional<int64_t> previousNeed;
    for (SmallVector<Operation *> &group : groups) {
      Bucket bucket = startBucket(cls);
      int64_t issue = 0;
      unsigned firstUse = deps.size();
      for (Operation *member : group) {
        unsigned i = deps.indexOf(member);
        ArrayRef<unsigned> preds = deps.getPredecessors(i);
        issue = std::max(issue, preds.empty() ? 0 : finish[preds.back()]);
        for (unsigned s : deps.getSuccessors(i))
          firstUse = std::min(firstUse, s);
        bucket.bytes += capBytes(member);
        llvm::append_range(bucket.units, unitNames(member));
      }
      int64_t need = firstUse == 0 ? 0 : finish[firstUse - 1];
      if (prefetched && previousNeed)
        issue = std::min(issue, *previousNeed);
      previousNeed = need;
      int64_t start = std::max(issue, commFree);
      int64_t cost = costNs(cls, bucket.bytes);
      int64_t end = start + cost;
      bucket.exposedNs = std::clamp<int64_t>(end - need, 0, cost);
      commFree = end;
      bucket.members = group;
      buckets.push_back(std::move(bucket));
    }

    // Place each bucket: what the later members need, then the members,
    // right before the first one.
    auto hoist = [&](Bucket &bucket, const BlockDependences &now,
                     ArrayRef<unsigned> producers) {
      Operation *head = bucket.members.front();
      for (unsigned p : producers)
        now.getOps()[p]->moveBefore(head);
      Operation *after = head;
      for (Operation *member : ArrayRef(bucket.members).drop_front()) {
        member->moveAfter(after);
        after = member;
      }
    };
    placeBuckets(block, buckets.size() - groups.size(), bucketed,
                 &BucketingPass::canHoist, hoist);
  }
}

void BucketingPass::placeBuckets(
    Block &block, size_t first, llvm::DenseSet<Operation *> &bucketed,
    CanGather canGather,
    function_ref<void(Bucket &, const BlockDependences &, ArrayRef<unsigned>)>
        place) {
  for (size_t b = first; b < buckets.size(); ++b) {
    Bucket &bucket = buckets[b];
    for (Operation *member : bucket.members)
      bucketed.insert(member);
    if (bucket.members.size() == 1)
      continue;
    BlockDependences now(block);
    SmallVector<unsigned> moving;
    bool ok =
        (this->*canGather)(now, positionsOf(now, bucket.members), &moving);
    // The dynamic program forms only buckets that can sink; all-gathers are
    // bucketed only where they hoist.
    assert(ok && "a bucket is formed only where its members can gather");
    (void)ok;
    place(bucket, now, moving);
  }
}

void BucketingPass::runOnOperation() {
  model = getOperation();
  TrainOp train = model.getTrain();
  if (!train)
    return;
  bool hasCollectives = false;
  train.walk([&](CollectiveOpInterface) { hasCollectives = true; });
  if (!hasCollectives)
    return;

  cap = bucketCap;
  if (cap < 0) {
    model.emitError("md-bucketing: bucket-cap must be >= 0 bytes, got ") << cap;
    return signalPassFailure();
  }
  if (cap == 0) {
    // Without a plan, PyTorch DDP's default bucket_cap_mb.
    PlanAttr plan = model.getPlanAttr();
    cap = plan ? plan.getBucketCap() : kDefaultBucketCap;
  }
  // The pass option, else the plan's link, else NVLink.
  std::optional<Interconnect> link;
  if (!interconnect.empty()) {
    link = getInterconnect(interconnect);
    if (!link) {
      model.emitError("md-bucketing: unknown interconnect '")
          << interconnect << "'; expected one of " << getInterconnectNames();
      return signalPassFailure();
    }
  } else if (auto planLink = getPlanInterconnect(model)) {
    link = planLink->second;
  } else {
    link = getNamedInterconnects().front().link;
  }
  if (alphaUs >= 0)
    link->alphaUs = alphaUs;
  if (betaGBps >= 0)
    link->betaGBps = betaGBps;
  for (auto [name, value] :
       {std::pair<StringRef, double>{"beta-gbps", link->betaGBps},
        {"compute-tflops", computeTflops}})
    if (value <= 0) {
      model.emitError("md-bucketing: ")
          << name << " must be > 0, got " << formatNumber(value);
      return signalPassFailure();
    }
  costModel = CostModel{*link, computeTflops};

  // Every block of the step program, outer first.
  SmallVector<Block *> blocks = {&train.getStep().front()};
  train.getStep().walk<WalkOrder::PreOrder>([&](Operation *op) {
    for (Region &region : op->getRegions())
      for (Block &block : region)
        blocks.push_back(&block);
  });
  llvm::DenseSet<Operation *> bucketed;
  for (Block *block : blocks) {
    bucketGradientReductions(*block, bucketed);
    bucketAllGathers(*block, bucketed);
  }

  // Every other collective is a bucket of its own, fully exposed.
  train.walk([&](CollectiveOpInterface collective) {
    Operation *op = collective;
    if (bucketed.contains(op))
      return;
    BucketClass cls = classify(op);
    Bucket bucket;
    bucket.members = {op};
    bucket.units = unitNames(op);
    bucket.kind = cls.kind;
    bucket.group = cls.group;
    bucket.elementType = cls.elementType;
    bucket.bytes = capBytes(op);
    bucket.exposedNs = costNs(cls, bucket.bytes);
    buckets.push_back(std::move(bucket));
  });

  // Ids in program order of each bucket's first collective.
  llvm::DenseMap<Operation *, size_t> bucketOf;
  for (auto [b, bucket] : llvm::enumerate(buckets))
    for (Operation *member : bucket.members)
      bucketOf[member] = b;
  SmallVector<int64_t> idOf(buckets.size(), -1);
  SmallVector<size_t> byId;
  train.walk<WalkOrder::PreOrder>([&](CollectiveOpInterface collective) {
    size_t b = bucketOf.lookup(collective);
    if (idOf[b] < 0) {
      idOf[b] = byId.size();
      byId.push_back(b);
    }
    collective->setAttr(
        "bucket",
        IntegerAttr::get(IntegerType::get(&getContext(), 64), idOf[b]));
  });

  Builder builder(&getContext());
  SmallVector<Attribute> table;
  for (auto [id, b] : llvm::enumerate(byId)) {
    const Bucket &bucket = buckets[b];
    SmallVector<Attribute> members;
    for (const std::string &unit : bucket.units)
      members.push_back(builder.getStringAttr(unit));
    SmallVector<NamedAttribute> fields = {
        builder.getNamedAttr("id", builder.getI64IntegerAttr(id)),
        builder.getNamedAttr("kind", builder.getStringAttr(
                                         stringifyCollectiveKind(bucket.kind))),
        builder.getNamedAttr(
            "group", builder.getStringAttr(stringifyGroup(bucket.group))),
        builder.getNamedAttr("members", builder.getArrayAttr(members)),
        builder.getNamedAttr("bytes", builder.getI64IntegerAttr(bucket.bytes)),
        builder.getNamedAttr("exposed_us",
                             builder.getF64FloatAttr(
                                 static_cast<double>(bucket.exposedNs) / 1e3))};
    if (bucket.elementType)
      fields.push_back(
          builder.getNamedAttr("dtype", TypeAttr::get(bucket.elementType)));
    table.push_back(builder.getDictionaryAttr(fields));
  }
  mark::setBucketTable(model, builder.getArrayAttr(table));
  numBuckets += table.size();
}

} // namespace
