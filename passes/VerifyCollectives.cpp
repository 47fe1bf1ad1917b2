//===- VerifyCollectives.cpp - md-verify-collectives, the desync check ----===//
//
// In an SPMD job every rank must run the same collectives in the same order
// with the same shapes; a rank that skips one leaves the others waiting in
// it forever. On the fixpoint of the rank-variance analysis this file finds
// every op that communicates (a collective, a checkpoint save, an
// evaluation, a wall-clock `every`, a call whose callee communicates) or
// stops training, and reports it when it can run on some ranks only. Each
// finding names the source of the variance and the chain to the control op,
// what communicates inside a call, and a fix. docs/check.md is the
// reference.
//
//===----------------------------------------------------------------------===//

#include "dialect/MdDiscardableAttrs.h"
#include "passes/VerifyCollectives.h"
#include "passes/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

namespace md {
#define GEN_PASS_DEF_VERIFYCOLLECTIVES
#include "passes/Passes.h.inc"
} // namespace md

using namespace mlir;
using namespace md;

//===----------------------------------------------------------------------===//
// Rules
//===----------------------------------------------------------------------===//

namespace {

/// What md says about each rule, one row per DesyncRule in declaration
/// order (the order reports list the rules in).
struct RuleInfo {
  DesyncRule rule;
  /// The stable id, for JSON, SARIF and docs.
  StringLiteral id;
  /// One line on what the rule rejects.
  StringLiteral summary;
};

constexpr RuleInfo kRules[] = {
    {DesyncRule::Branch, "desync/branch",
     "a collective (or save, evaluate, a call that communicates) under a "
     "condition that differs between ranks"},
    {DesyncRule::Loop, "desync/loop",
     "a collective in a loop whose trip count differs between ranks"},
    {DesyncRule::Stop, "desync/stop",
     "a stop decision that differs between ranks"},
    {DesyncRule::Rank0Only, "desync/rank0-only",
     "a collective in a body that only rank 0 runs"},
    {DesyncRule::Shape, "desync/shape",
     "a collective whose operand shape differs between ranks"},
    {DesyncRule::Parameters, "desync/parameters",
     "a parameter used on some ranks only"},
};

constexpr bool rowsAreEveryRuleInOrder() {
  for (size_t i = 0; i < std::size(kRules); ++i)
    if (static_cast<size_t>(kRules[i].rule) != i)
      return false;
  return std::size(kRules) == static_cast<size_t>(DesyncRule::Parameters) + 1;
}
static_assert(rowsAreEveryRuleInOrder(),
              "kRules needs one row per DesyncRule, in declaration order");

const RuleInfo &getRuleInfo(DesyncRule rule) {
  return kRules[static_cast<size_t>(rule)];
}

} // namespace

StringRef md::getDesyncRuleId(DesyncRule rule) { return getRuleInfo(rule).id; }

StringRef md::getDesyncRuleSummary(DesyncRule rule) {
  return getRuleInfo(rule).summary;
}

ArrayRef<DesyncRule> md::getDesyncRules() {
  static const SmallVector<DesyncRule> rules = llvm::to_vector(
      llvm::map_range(kRules, [](const RuleInfo &info) { return info.rule; }));
  return rules;
}

void md::emitDesyncFinding(const DesyncFinding &finding) {
  InFlightDiagnostic diag = emitError(finding.loc) << finding.message;
  for (const DesyncNote &note : finding.notes)
    diag.attachNote(note.loc) << note.message;
  if (!finding.fix.empty())
    diag.attachNote() << "fix: " << finding.fix;
}

//===----------------------------------------------------------------------===//
// What communicates
//===----------------------------------------------------------------------===//

namespace {

enum class CommKind {
  Collective,
  SaveFull,
  SaveSharded,
  Evaluate,
  TimedEvery,
  Exit,
  Call,
};

/// What findings say of each kind, one row per CommKind in declaration
/// order.
struct CommKindInfo {
  /// The op as the user wrote it; empty where the op itself says
  /// (describeLeaf).
  StringLiteral text;
  /// Where the ranks that reached it wait; empty for a call, whose callee
  /// says (describeWait).
  StringLiteral wait;
};

constexpr CommKindInfo kCommKinds[] = {
    /*Collective*/ {"", "in it"},
    /*SaveFull*/
    {"'save checkpoint(full)'", "in its gather of the parameters to rank 0"},
    /*SaveSharded*/
    {"'save checkpoint(sharded)'",
     "at its barrier before the checkpoint is renamed into place"},
    /*Evaluate*/ {"'evaluate(...)'", "in its all-reduce of the loss"},
    /*TimedEvery*/ {"", "in its broadcast of rank 0's decision"},
    /*Exit*/ {"", "in their next collective"},
    /*Call*/ {"", ""},
};
static_assert(std::size(kCommKinds) == size_t(CommKind::Call) + 1,
              "one row per CommKind");

const CommKindInfo &info(CommKind kind) {
  return kCommKinds[static_cast<size_t>(kind)];
}

/// An op that communicates or stops training. For a call, `leaf` is the op
/// inside the callee (or deeper) that does, and `path` the callees on the
/// way, outermost first.
struct Communication {
  CommKind kind;
  Operation *op;
  CommKind leafKind;
  Operation *leaf;
  SmallVector<std::string> path;
};

bool isInRegion(Operation *op, Region &region) {
  return region.isAncestor(op->getParentRegion());
}

bool isInHooks(Operation *op) {
  auto train = op->getParentOfType<TrainOp>();
  return train && isInRegion(op, train.getHooks());
}

/// "'all_reduce avg' over group world", or in a hook, where it comes from
/// `mean(...)`, "'mean(...)' (an all-reduce over every rank)".
std::string describeCollective(Operation *op) {
  auto collective = cast<CollectiveOpInterface>(op);
  std::string kind =
      stringifyCollectiveKind(collective.getCollectiveKind()).str();
  std::optional<ReductionKind> reduction = collective.getReduction();
  auto scalar = op->getNumOperands()
                    ? dyn_cast<RankedTensorType>(op->getOperand(0).getType())
                    : RankedTensorType();
  if (isInHooks(op) &&
      collective.getCollectiveKind() == CollectiveKind::all_reduce &&
      collective.getCollectiveGroup() == Group::world && reduction && scalar &&
      scalar.getRank() == 0) {
    StringRef fn = *reduction == ReductionKind::avg   ? "mean"
                   : *reduction == ReductionKind::sum ? "sum"
                   : *reduction == ReductionKind::max ? "max"
                   : *reduction == ReductionKind::min ? "min"
                                                      : "";
    if (!fn.empty())
      return ("'" + fn + "(...)' (an all-reduce over every rank)").str();
  }
  std::string text = "'" + kind;
  if (reduction)
    text += " " + stringifyReductionKind(*reduction).str();
  text +=
      "' over group " + stringifyGroup(collective.getCollectiveGroup()).str();
  return text;
}

std::string describeEvery(EveryOp every) {
  return ("'every " + Twine(every.getPeriod()) + " " +
          stringifyPeriodUnit(every.getUnit()) + "'")
      .str();
}

/// The op itself, as the user wrote it.
std::string describeLeaf(CommKind kind, Operation *op) {
  if (!info(kind).text.empty())
    return info(kind).text.str();
  switch (kind) {
  case CommKind::Collective:
    return describeCollective(op);
  case CommKind::TimedEvery:
    return describeEvery(cast<EveryOp>(op));
  case CommKind::Exit:
    if (auto exit = cast<ExitOp>(op); exit.getFailure())
      return ("'fail(\"" + exit.getReason().value_or("") + "\")'").str();
    return "'stop'";
  case CommKind::Call:
    return ("the call to '@" + cast<CallOp>(op).getCallee() + "'").str();
  case CommKind::SaveFull:
  case CommKind::SaveSharded:
  case CommKind::Evaluate:
    break; // their text is fixed (kCommKinds)
  }
  llvm_unreachable("a kind with fixed text returns it above");
}

/// Where the ranks that did reach it wait.
std::string describeWait(const Communication &c) {
  if (c.kind == CommKind::Call)
    return "in " + describeLeaf(c.leafKind, c.leaf) + " inside it";
  return info(c.kind).wait.str();
}

//===----------------------------------------------------------------------===//
// DesyncChecker
//===----------------------------------------------------------------------===//

class DesyncChecker {
public:
  DesyncChecker(ModelOp model, const RankVariance &variance,
                const DesyncCheckOptions &options)
      : model(model), variance(variance), options(options) {}

  SmallVector<DesyncFinding> run();

private:
  std::optional<Communication> classify(Operation *op);
  /// The first op of `callable` (in program order, live code only) that
  /// communicates or stops, following calls.
  std::optional<Communication> firstInCallable(Operation *callable);
  /// The first op at or below `op` that communicates or stops (with
  /// `skipStops`, the first that communicates).
  std::optional<Communication> firstAtOrBelow(Operation *op,
                                              bool skipStops = false);
  /// The first op of `region` that communicates or stops.
  std::optional<Communication> firstInRegion(Region &region,
                                             bool skipStops = false);

  void checkShapes(Operation *op);
  void checkParameter(ParamRefOp param);
  void checkCommunication(const Communication &c);

  void addControlNotes(const NonUniformControl &control, DesyncFinding &f);
  void addInsideNotes(const Communication &c, DesyncFinding &f);
  /// Notes on the control ops around the innermost one that differ too.
  void addOuterControlNotes(Operation *op, DesyncFinding &f);
  void addStopNotes(Operation *stop, DesyncFinding &f);
  std::string getFix(const Communication &c, const NonUniformControl &control);
  void finish(Operation *op, DesyncFinding finding);

  ModelOp model;
  const RankVariance &variance;
  DesyncCheckOptions options;
  SmallVector<DesyncFinding> findings;
  /// Memo of firstInCallable; an entry in progress reads "nothing" so that
  /// recursion terminates.
  DenseMap<Operation *, std::optional<Communication>> callables;
  /// Ops reported as running on some ranks only: what they contain follows
  /// from them and is not reported again.
  DenseSet<Operation *> reported;
  DenseSet<std::pair<Operation *, Operation *>> reportedParams;
};

std::optional<Communication> DesyncChecker::classify(Operation *op) {
  auto self = [&](CommKind kind) {
    return Communication{kind, op, kind, op, {}};
  };
  if (isa<CollectiveOpInterface>(op))
    return self(CommKind::Collective);
  if (auto save = dyn_cast<SaveOp>(op))
    return self(save.getFormat() == CheckpointFormat::full
                    ? CommKind::SaveFull
                    : CommKind::SaveSharded);
  if (isa<EvaluateOp>(op))
    return self(CommKind::Evaluate);
  if (auto every = dyn_cast<EveryOp>(op))
    if (every.getUnit() != PeriodUnit::steps && !every.getRank0Only())
      return self(CommKind::TimedEvery);
  if (isa<ExitOp>(op))
    return self(CommKind::Exit);
  if (auto call = dyn_cast<CallOp>(op)) {
    auto callee =
        SymbolTable::lookupNearestSymbolFrom<FuncOp>(op, call.getCalleeAttr());
    if (!callee)
      return std::nullopt;
    std::optional<Communication> inner = firstInCallable(callee);
    if (!inner)
      return std::nullopt;
    Communication c{CommKind::Call, op, inner->leafKind, inner->leaf, {}};
    c.path.push_back(callee.getSymName().str());
    c.path.append(inner->path.begin(), inner->path.end());
    return c;
  }
  return std::nullopt;
}

std::optional<Communication>
DesyncChecker::firstInCallable(Operation *callable) {
  auto [it, inserted] = callables.try_emplace(callable, std::nullopt);
  if (!inserted)
    return it->second;
  std::optional<Communication> found;
  for (Region &region : callable->getRegions())
    if ((found = firstInRegion(region)))
      break;
  callables[callable] = found;
  return found;
}

std::optional<Communication> DesyncChecker::firstAtOrBelow(Operation *op,
                                                           bool skipStops) {
  if (std::optional<Communication> c = classify(op))
    if (!skipStops || c->leafKind != CommKind::Exit)
      return c;
  for (Region &region : op->getRegions())
    if (std::optional<Communication> c = firstInRegion(region, skipStops))
      return c;
  return std::nullopt;
}

std::optional<Communication> DesyncChecker::firstInRegion(Region &region,
                                                          bool skipStops) {
  for (Block &block : region) {
    if (!variance.isLive(&block))
      continue;
    for (Operation &op : block)
      if (std::optional<Communication> c = firstAtOrBelow(&op, skipStops))
        return c;
  }
  return std::nullopt;
}

void DesyncChecker::finish(Operation *op, DesyncFinding finding) {
  auto train = op->getParentOfType<TrainOp>();
  if (options.finalProgram && train && isInRegion(op, train.getStep())) {
    finding.internal = true;
    finding.message =
        "internal error: a pass introduced a non-uniform collective: " +
        finding.message;
  }
  findings.push_back(std::move(finding));
}

void DesyncChecker::addControlNotes(const NonUniformControl &control,
                                    DesyncFinding &f) {
  if (control.cause)
    for (VarianceStep &step : variance.explain(control.cause))
      f.notes.push_back({step.loc, std::move(step.message)});
  std::string last;
  switch (control.kind) {
  case NonUniformControl::Kind::Branch:
    last = "so ranks disagree about this 'if'";
    break;
  case NonUniformControl::Kind::Loop:
    last = "so ranks run this 'for' a different number of times";
    break;
  case NonUniformControl::Kind::Rank0Only:
    last = "only rank 0 runs the body of this " +
           describeEvery(cast<EveryOp>(control.op)) + " (rank0_only)";
    break;
  case NonUniformControl::Kind::Region:
    last = ("so ranks disagree about this '" +
            control.op->getName().getStringRef() + "'")
               .str();
    break;
  }
  f.notes.push_back({control.op->getLoc(), last});
}

void DesyncChecker::addOuterControlNotes(Operation *op, DesyncFinding &f) {
  for (const NonUniformControl &outer :
       ArrayRef(variance.getNonUniformControls(op)).drop_front()) {
    StringRef what = isa<ForOp>(outer.op)     ? "loop's trip count"
                     : isa<EveryOp>(outer.op) ? "rank0_only body"
                                              : "condition";
    f.notes.push_back(
        {outer.op->getLoc(),
         ("it is also inside this '" + outer.op->getName().stripDialect() +
          "', whose " + what + " differs between ranks")
             .str()});
  }
}

void DesyncChecker::addInsideNotes(const Communication &c, DesyncFinding &f) {
  if (c.kind == CommKind::Call) {
    std::string text = "'@" + c.path.front() + "'";
    for (const std::string &callee : ArrayRef(c.path).drop_front())
      text += " calls '@" + callee + "', which";
    if (c.leafKind == CommKind::Exit)
      text += " stops training here";
    else
      text += " runs " + describeLeaf(c.leafKind, c.leaf) + " here";
    f.notes.push_back({c.leaf->getLoc(), text});
    return;
  }
  if (c.kind == CommKind::Evaluate) {
    auto evaluate = cast<EvaluateOp>(c.op);
    auto forward = SymbolTable::lookupNearestSymbolFrom<ForwardOp>(
        c.op, evaluate.getForwardAttr());
    if (!forward)
      return;
    std::optional<Communication> inner = firstInCallable(forward);
    if (!inner)
      return;
    std::string text =
        ("'evaluate' also runs the forward '@" + forward.getSymName() + "'")
            .str();
    Communication leaf = *inner;
    for (const std::string &callee : leaf.path)
      text += ", which calls '@" + callee + "'";
    text += ", whose " + describeLeaf(leaf.leafKind, leaf.leaf);
    if (mark::isSyncBatchNorm(leaf.leaf))
      text += " (SyncBatchNorm)";
    text += " is here";
    f.notes.push_back({leaf.leaf->getLoc(), text});
  }
}

void DesyncChecker::addStopNotes(Operation *stop, DesyncFinding &f) {
  TrainOp train = stop->getParentOfType<TrainOp>();
  if (!train)
    train = model.getTrain();
  if (!train)
    return;
  // The rest of the hooks after the stop.
  if (isInRegion(stop, train.getHooks())) {
    std::optional<Communication> next;
    for (Operation *op = stop; op && op != train && !next;
         op = op->getParentOp())
      for (Operation *after = op->getNextNode(); after && !next;
           after = after->getNextNode())
        next = firstAtOrBelow(after, /*skipStops=*/true);
    if (next)
      f.notes.push_back({next->op->getLoc(),
                         "after it, " + describeLeaf(next->kind, next->op) +
                             " may run on some ranks only"});
  }
  // The next step.
  std::optional<Communication> first =
      firstInRegion(train.getStep(), /*skipStops=*/true);
  if (first)
    f.notes.push_back({first->op->getLoc(),
                       "the ranks that did not stop wait here, in the next "
                       "step, for the ones that did"});
  else
    f.notes.push_back({train.getLoc(),
                       "the ranks that did not stop wait in the next step's "
                       "collectives for the ones that did"});
}

std::string DesyncChecker::getFix(const Communication &c,
                                  const NonUniformControl &control) {
  bool stops = c.leafKind == CommKind::Exit;
  if (control.kind == NonUniformControl::Kind::Rank0Only)
    return "drop rank0_only: md already writes on rank 0 only where that is "
           "safe; put only pure side effects (log, print) under a rank "
           "condition";
  if (control.kind == NonUniformControl::Kind::Loop)
    return "take the bounds of 'for' from 'step', 'world_size' or numbers, "
           "which every rank agrees on";
  switch (variance.getSource(control.cause)) {
  case VarianceSource::Loss:
    return stops ? "stop on 'mean(loss)' instead of 'loss': every rank "
                   "computes the same value, so every rank stops together"
                 : "branch on 'mean(loss)' instead of 'loss': every rank "
                   "computes the same value";
  case VarianceSource::WallTime:
    return "use 'every N minutes', which rank 0 decides and broadcasts, not "
           "a wall-clock comparison (or compare 'max(time())', which is the "
           "same on every rank)";
  case VarianceSource::FileExists:
    return "reduce the file test over ranks: 'any(exists(...))' holds on "
           "every rank when the file is visible on some rank, 'all(...)' "
           "when on every rank";
  case VarianceSource::Rank:
    break;
  case VarianceSource::Data:
  case VarianceSource::Shard:
  case VarianceSource::Unknown:
    return "reduce the value over ranks first ('mean(...)', 'max(...)', an "
           "all_reduce) and branch on the result, which every rank agrees on";
  }
  // A rank condition.
  if (stops)
    return "stop on a condition every rank agrees on, such as 'if "
           "mean(loss) > 10.0 { stop }' or 'if step >= 10000 { stop }'";
  switch (c.kind) {
  case CommKind::SaveFull:
    return "move 'save checkpoint(full)' out of the rank condition: md "
           "writes the file on rank 0 only";
  case CommKind::SaveSharded:
    return "move 'save checkpoint(sharded)' out of the rank condition: every "
           "rank writes its own shard";
  case CommKind::Evaluate:
    return "call 'evaluate' on every rank, before the condition, and use its "
           "result inside it ('v = evaluate(...)', then 'if rank == 0 { "
           "log(\"val\", v) }'): the result is the same on every rank";
  case CommKind::TimedEvery:
    return "put the rank condition inside the 'every', around its pure side "
           "effects";
  case CommKind::Call:
    return "call '@" + c.path.front() +
           "' on every rank; put only pure side effects (log, print) under "
           "the rank condition";
  case CommKind::Collective:
    if (describeCollective(c.op).find("(...)") != std::string::npos)
      return "compute it on every rank before the condition ('m = "
             "mean(loss)') and use the result inside it";
    return "run it on every rank; put only pure side effects (log, print) "
           "under the rank condition";
  case CommKind::Exit:
    break;
  }
  return "run it on every rank";
}

void DesyncChecker::checkCommunication(const Communication &c) {
  std::optional<NonUniformControl> control =
      variance.getNonUniformControl(c.op);
  if (!control)
    return;
  // What runs inside a reported op under the same control follows from it.
  for (Operation *parent = c.op->getParentOp(); parent && parent != control->op;
       parent = parent->getParentOp())
    if (reported.contains(parent))
      return;
  reported.insert(c.op);

  bool stops = c.leafKind == CommKind::Exit;
  std::string subject = describeLeaf(c.kind, c.op);
  DesyncFinding f{DesyncRule::Branch, c.op->getLoc(), "", {}, "", false};
  // The message is "<subject> <where it is>: <who waits for whom>".
  std::string where, waiting;
  switch (control->kind) {
  case NonUniformControl::Kind::Branch:
  case NonUniformControl::Kind::Region:
    f.rule = DesyncRule::Branch;
    where = control->kind == NonUniformControl::Kind::Branch
                ? std::string("is under a condition that differs between ranks")
                : ("is under '" + control->op->getName().getStringRef() +
                   "', which depends on a value that differs between ranks")
                      .str();
    if (stops && c.kind == CommKind::Call)
      where += ", and '@" + c.path.front() + "' stops training";
    if (!stops)
      waiting =
          "the ranks that skip it leave the others waiting " + describeWait(c);
    break;
  case NonUniformControl::Kind::Loop:
    f.rule = DesyncRule::Loop;
    where = "is in a loop whose trip count differs between ranks";
    if (!stops)
      waiting = "the ranks that run it fewer times leave the others waiting " +
                describeWait(c);
    break;
  case NonUniformControl::Kind::Rank0Only:
    f.rule = DesyncRule::Rank0Only;
    where = "is in a rank0_only body";
    waiting = stops ? "rank 0 stops and the others wait in their next "
                      "collective"
                    : "only rank 0 runs it, and it waits " + describeWait(c) +
                          " for ranks that never come";
    break;
  }
  if (stops && waiting.empty())
    waiting = "the ranks that stop leave the others waiting in their next "
              "collective";
  f.message = subject + " " + where + ": " + waiting;
  if (stops)
    f.rule = DesyncRule::Stop;
  addControlNotes(*control, f);
  addOuterControlNotes(c.op, f);
  addInsideNotes(c, f);
  if (stops)
    addStopNotes(c.op, f);
  f.fix = getFix(c, *control);
  finish(c.op, std::move(f));
}

void DesyncChecker::checkShapes(Operation *op) {
  for (Value operand : op->getOperands()) {
    if (!variance.isShapeVarying(operand))
      continue;
    DesyncFinding f{DesyncRule::Shape, op->getLoc(), "", {}, "", false};
    std::string type;
    llvm::raw_string_ostream os(type);
    os << operand.getType();
    f.message = "the operand of " + describeCollective(op) +
                " has a shape that differs between ranks (" + type +
                "): every rank must pass the same number of elements";
    for (VarianceStep &step : variance.explain(operand, /*shape=*/true))
      f.notes.push_back({step.loc, std::move(step.message)});
    f.fix = "give the operand a static shape, or one that depends only on "
            "the world size (as md's flat shards do)";
    finish(op, std::move(f));
    return;
  }
}

void DesyncChecker::checkParameter(ParamRefOp param) {
  // The parameter is used where its value is consumed.
  SmallVector<Operation *> uses{param};
  for (Operation *user : param->getUsers())
    uses.push_back(user);
  for (Operation *use : uses) {
    if (!variance.isLive(use->getBlock()))
      continue;
    std::optional<NonUniformControl> control =
        variance.getNonUniformControl(use);
    if (!control || !reportedParams.insert({param, control->op}).second)
      continue;
    DesyncFinding f{DesyncRule::Parameters, use->getLoc(), "", {}, "", false};
    f.message = ("parameter '@" + param.getParam() +
                 "' is used on some ranks only: the ranks would disagree "
                 "about which parameters get gradients")
                    .str();
    addControlNotes(*control, f);
    f.fix = "use every parameter on every rank: a forward must be the same "
            "function on every rank";
    finish(use, std::move(f));
  }
}

SmallVector<DesyncFinding> DesyncChecker::run() {
  // One rank cannot disagree with itself.
  if (model.getStaticGroupSize(Group::world) == 1)
    return {};
  model->walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (op != model && !variance.isLive(op->getBlock()))
      return WalkResult::skip();
    if (isa<CollectiveOpInterface>(op))
      checkShapes(op);
    if (auto param = dyn_cast<ParamRefOp>(op))
      checkParameter(param);
    if (std::optional<Communication> c = classify(op))
      checkCommunication(*c);
    return WalkResult::advance();
  });
  return std::move(findings);
}

} // namespace

SmallVector<DesyncFinding> md::checkDesync(ModelOp model,
                                           const RankVariance &variance,
                                           const DesyncCheckOptions &options) {
  return DesyncChecker(model, variance, options).run();
}

//===----------------------------------------------------------------------===//
// The collective sequence of a step program
//===----------------------------------------------------------------------===//
//
// Why the sequence is the same on every rank: it is read off the step
// region in program order. Its only control ops are md.micro_steps, whose
// trip count A - 1 follows from the recipe and W, and md.if / md.for /
// other region ops whose conditions and bounds the analysis proves uniform;
// calls are followed into their callees. Each entry's kind, group and
// reduction are attributes, and its bytes a function of its operand types
// (static, or flat shards of ceil(N / G) elements) and of the group size. So
// every rank derives the same list for the same W; anything else is
// rejected here.

ArrayRef<int64_t> md::getSampleGroupSizes() {
  static const int64_t sizes[] = {2, 3, 4, 8};
  return sizes;
}

void CollectiveSeq::print(raw_ostream &os) const {
  os << "collective sequence of the step program: " << entries.size()
     << " collective" << (entries.size() == 1 ? "" : "s") << "\n";
  for (auto [i, entry] : llvm::enumerate(entries)) {
    os << "  #" << i << " " << stringifyCollectiveKind(entry.kind);
    if (entry.reduction)
      os << " " << stringifyReductionKind(*entry.reduction);
    os << " group " << stringifyGroup(entry.group) << " [" << entry.where
       << "] bytes sent ";
    llvm::interleaveComma(entry.bytesSent, os, [&](std::optional<int64_t> b) {
      if (b)
        os << *b;
      else
        os << "?";
    });
    os << " at n = ";
    llvm::interleaveComma(entry.groupSizes, os);
    os << "\n";
  }
}

namespace {
class SequenceBuilder {
public:
  explicit SequenceBuilder(const RankVariance &variance) : variance(variance) {}

  LogicalResult visitRegion(Region &region, const std::string &where) {
    for (Block &block : region) {
      if (!variance.isLive(&block))
        continue;
      for (Operation &op : block)
        if (failed(visitOp(&op, where)))
          return failure();
    }
    return success();
  }

  CollectiveSeq seq;

private:
  LogicalResult visitOp(Operation *op, const std::string &where) {
    if (auto collective = dyn_cast<CollectiveOpInterface>(op)) {
      for (Value operand : op->getOperands())
        if (variance.isShapeVarying(operand))
          return op->emitError("the collective sequence of the step program "
                               "is not rank-independent: an operand's shape "
                               "differs between ranks");
      CollectiveSeqEntry entry{op,
                               collective.getCollectiveKind(),
                               collective.getCollectiveGroup(),
                               collective.getReduction(),
                               {},
                               {},
                               where};
      if (std::optional<int64_t> n =
              getStaticGroupSize(op, collective.getCollectiveGroup()))
        entry.groupSizes.push_back(*n);
      else
        entry.groupSizes.append(getSampleGroupSizes().begin(),
                                getSampleGroupSizes().end());
      // The interface counts a dynamically shaped all-reduce or broadcast
      // operand (the shard of a flat buffer) as 0 bytes: its size is not in
      // its type.
      bool sizeUnknown = llvm::any_of(op->getOperands(),
                                      [](Value v) {
                                        auto type =
                                            dyn_cast<ShapedType>(v.getType());
                                        return type && !type.hasStaticShape();
                                      }) &&
                         isa<AllReduceOp, BroadcastOp>(op);
      for (int64_t n : entry.groupSizes) {
        int64_t bytes = collective.getBytesSent(n);
        entry.bytesSent.push_back(sizeUnknown && n > 1 && bytes == 0
                                      ? std::nullopt
                                      : std::optional<int64_t>(bytes));
      }
      seq.entries.push_back(std::move(entry));
      return success();
    }
    if (auto call = dyn_cast<CallOp>(op)) {
      auto callee = SymbolTable::lookupNearestSymbolFrom<FuncOp>(
          op, call.getCalleeAttr());
      if (!callee || !active.insert(callee).second)
        return success();
      LogicalResult result = visitRegion(
          callee.getBody(), where + "/@" + callee.getSymName().str());
      active.erase(callee);
      return result;
    }
    if (op->getNumRegions() == 0)
      return success();
    std::string inner = where;
    if (isa<MicroStepsOp>(op)) {
      inner += "/micro-steps";
    } else {
      for (Value operand : op->getOperands())
        if (variance.isVarying(operand))
          return op->emitError("the collective sequence of the step program "
                               "is not rank-independent: this op's control "
                               "differs between ranks");
      inner += "/" + op->getName().stripDialect().str();
    }
    for (Region &region : op->getRegions())
      if (failed(visitRegion(region, inner)))
        return failure();
    return success();
  }

  const RankVariance &variance;
  DenseSet<Operation *> active;
};
} // namespace

FailureOr<CollectiveSeq>
md::computeCollectiveSequence(TrainOp train, const RankVariance &variance) {
  SequenceBuilder builder(variance);
  if (failed(builder.visitRegion(train.getStep(), "step")))
    return failure();
  return std::move(builder.seq);
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

namespace {
class VerifyCollectivesPass
    : public md::impl::VerifyCollectivesBase<VerifyCollectivesPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModelOp model = getOperation();
    const RankVariance &variance = getAnalysis<RankVariance>();
    if (!variance.succeeded()) {
      model.emitError("internal error: the rank-variance analysis failed");
      return signalPassFailure();
    }
    model.walk([&](CollectiveOpInterface) { ++numCollectives; });
    DesyncCheckOptions options;
    options.finalProgram = finalProgram;
    SmallVector<DesyncFinding> findings = checkDesync(model, variance, options);
    numFindings += findings.size();
    for (const DesyncFinding &finding : findings)
      emitDesyncFinding(finding);
    if (!findings.empty())
      return signalPassFailure();

    TrainOp train = model.getTrain();
    if (train && (finalProgram || printSequence)) {
      FailureOr<CollectiveSeq> seq = computeCollectiveSequence(train, variance);
      if (failed(seq))
        return signalPassFailure();
      if (printSequence) {
        llvm::outs() << "// @" << model.getSymName() << ", ";
        seq->print(llvm::outs());
      }
    }
    markAllAnalysesPreserved();
  }
};
} // namespace
