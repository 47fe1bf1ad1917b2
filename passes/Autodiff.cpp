//===- Autodiff.cpp - md-autodiff: reverse-mode differentiation -----------===//
//
// Builds `md.func @<forward>.grad` next to the `md.forward` that `md.train`
// names (docs/passes.md, "After md-autodiff"): the forward with every
// `md.call` inlined, then the backward ops in reverse order, seeded by an
// extra `%dloss` argument, returning the forward's results and one gradient
// per trainable parameter. The per-op rules live in VjpRules.cpp; this file
// does the inlining, the unit tags, the activity analysis (which values
// depend on trainable parameters) and the summation of gradients.
//
//===----------------------------------------------------------------------===//

#include "dialect/MdDiscardableAttrs.h"
#include "passes/Passes.h"
#include "passes/analysis/VjpRules.h"

#include "dialect/MdOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace md {
#define GEN_PASS_DEF_AUTODIFF
#include "passes/Passes.h.inc"
} // namespace md

using namespace mlir;
using namespace md;

namespace {

/// The root unit: everything outside the wrapped blocks.
constexpr int64_t kRootUnit = 0;

int64_t unitOf(ParamOp param) {
  std::optional<uint64_t> unit = param.getUnit();
  return unit ? static_cast<int64_t>(*unit) : kRootUnit;
}

bool isFloatValue(Value value) {
  return isa<FloatType>(getElementTypeOrSelf(value.getType()));
}

/// Tags every op inserted through the builder it listens to with the
/// current unit and, while the backward pass is built, `md.backward`.
struct UnitTagger : public OpBuilder::Listener {
  void notifyOperationInserted(Operation *op, OpBuilder::InsertPoint) override {
    mark::setUnit(op, unit);
    if (backward)
      mark::setBackward(op);
    else
      mark::clearBackward(op);
  }

  int64_t unit = kRootUnit;
  bool backward = false;
};

/// Builds the gradient function of one forward.
class GradientBuilder {
public:
  GradientBuilder(ModelOp model, ForwardOp forward)
      : model(model), forward(forward), symbols(model),
        builder(model.getContext(), &tagger) {}

  /// Builds `@<forward>.grad` after the forward; on failure, after the
  /// diagnostics, the model is left as it was.
  FailureOr<FuncOp> build();

  int64_t numInlinedCalls = 0;
  int64_t numBackwardOps = 0;

private:
  LogicalResult inlineBody(Block &body, IRMapping &mapping, int64_t unit,
                           std::optional<Location> callSite,
                           SmallVectorImpl<FuncOp> &callStack,
                           SmallVectorImpl<Value> &results);
  LogicalResult inlineCall(CallOp call, IRMapping &mapping, int64_t unit,
                           std::optional<Location> callSite,
                           SmallVectorImpl<FuncOp> &callStack);
  int64_t unitOfCall(CallOp call, IRMapping &mapping, int64_t enclosing);
  ParamOp trainableParam(Value value);
  void findVariedValues(Block &body);
  LogicalResult differentiate(Block &body, ArrayRef<Operation *> forwardOps,
                              Value loss, Value dloss);
  void addGradient(Value value, Value gradient, Location loc);
  LogicalResult checkEveryParamHasGradient();

  ModelOp model;
  ForwardOp forward;
  SymbolTable symbols;
  UnitTagger tagger;
  OpBuilder builder;

  /// Float values that depend on a trainable parameter: the only ones whose
  /// gradient the loss can need.
  DenseSet<Value> varied;
  /// The gradient of each forward value the loss depends on, summed over
  /// its uses so far.
  DenseMap<Value, Value> gradients;
  /// The gradient of each trainable parameter, summed over its
  /// `md.param_ref`s so far (tied weights).
  DenseMap<Operation *, Value> paramGradients;
  /// Where each parameter is first read, for the note of the unused-
  /// parameter error.
  DenseMap<Operation *, Location> firstUse;
};

} // namespace

ParamOp GradientBuilder::trainableParam(Value value) {
  auto ref = value.getDefiningOp<ParamRefOp>();
  if (!ref)
    return {};
  auto param = symbols.lookup<ParamOp>(ref.getParam());
  return param && !param.getFrozen() ? param : ParamOp();
}

/// The unit of an inlined call: that of the parameters passed to it when
/// they all belong to one unit, the root unit when they span several, and
/// the enclosing call's when it gets none (a parameter-free helper block
/// computes for its caller).
int64_t GradientBuilder::unitOfCall(CallOp call, IRMapping &mapping,
                                    int64_t enclosing) {
  llvm::SmallSetVector<int64_t, 2> units;
  for (Value operand : call.getOperands())
    if (auto ref = mapping.lookupOrDefault(operand).getDefiningOp<ParamRefOp>())
      if (auto param = symbols.lookup<ParamOp>(ref.getParam()))
        units.insert(unitOf(param));
  if (units.empty())
    return enclosing;
  return units.size() == 1 ? units.front() : kRootUnit;
}

LogicalResult GradientBuilder::inlineCall(CallOp call, IRMapping &mapping,
                                          int64_t unit,
                                          std::optional<Location> callSite,
                                          SmallVectorImpl<FuncOp> &callStack) {
  auto callee = symbols.lookup<FuncOp>(call.getCallee());
  if (!callee)
    return call.emitOpError("calls '")
           << call.getCallee() << "', which is not an 'md.func' of the model";
  if (llvm::is_contained(callStack, callee)) {
    InFlightDiagnostic diag =
        call.emitOpError("calls '")
        << call.getCallee()
        << "' recursively; md-autodiff inlines every call and cannot "
           "inline a recursion";
    diag.attachNote(callee.getLoc())
        << "'" << callee.getName() << "' is defined here";
    return diag;
  }
  if (!callee.getBody().hasOneBlock())
    return callee.emitOpError("has ")
           << callee.getBody().getBlocks().size()
           << " blocks; md-autodiff inlines single-block functions only";

  Block &body = callee.getBody().front();
  IRMapping calleeMapping;
  for (auto [arg, operand] :
       llvm::zip_equal(body.getArguments(), call.getOperands()))
    calleeMapping.map(arg, mapping.lookupOrDefault(operand));
  Location here =
      callSite ? CallSiteLoc::get(call.getLoc(), *callSite) : call.getLoc();
  SmallVector<Value> results;
  callStack.push_back(callee);
  LogicalResult inlined =
      inlineBody(body, calleeMapping, unitOfCall(call, mapping, unit), here,
                 callStack, results);
  callStack.pop_back();
  if (failed(inlined))
    return failure();
  mapping.map(call.getResults(), results);
  ++numInlinedCalls;
  return success();
}

/// Clones `body` at the builder, inlining its calls. Ops get `unit` (an
/// `md.param_ref` its parameter's unit) and, inside a call, a location
/// that names the call site. The values `body` returns go to `results`.
LogicalResult GradientBuilder::inlineBody(Block &body, IRMapping &mapping,
                                          int64_t unit,
                                          std::optional<Location> callSite,
                                          SmallVectorImpl<FuncOp> &callStack,
                                          SmallVectorImpl<Value> &results) {
  for (Operation &op : body) {
    if (auto ret = dyn_cast<ReturnOp>(op)) {
      for (Value operand : ret.getOperands())
        results.push_back(mapping.lookupOrDefault(operand));
      return success();
    }
    if (auto call = dyn_cast<CallOp>(op)) {
      if (failed(inlineCall(call, mapping, unit, callSite, callStack)))
        return failure();
      continue;
    }
    WalkResult nestedCall = op.walk([](CallOp nested) {
      nested.emitOpError("is nested in a region; md-autodiff inlines "
                         "calls in the body of a function only");
      return WalkResult::interrupt();
    });
    if (nestedCall.wasInterrupted())
      return failure();

    tagger.unit = unit;
    if (auto ref = dyn_cast<ParamRefOp>(op))
      if (auto param = symbols.lookup<ParamOp>(ref.getParam()))
        tagger.unit = unitOf(param);
    Operation *clone = builder.clone(op, mapping);
    if (callSite)
      clone->setLoc(CallSiteLoc::get(op.getLoc(), *callSite));
  }
  return body.getParentOp()->emitOpError(
      "has no 'md.return'; md-autodiff needs the values it returns");
}

void GradientBuilder::findVariedValues(Block &body) {
  for (Operation &op : body) {
    if (auto ref = dyn_cast<ParamRefOp>(op)) {
      if (auto param = symbols.lookup<ParamOp>(ref.getParam())) {
        firstUse.try_emplace(param, op.getLoc());
        if (!param.getFrozen())
          varied.insert(ref.getResult());
      }
      continue;
    }
    // What md.detach gives is a constant to the backward: no rule asks for
    // its gradient, so none is computed to be dropped.
    if (isa<DetachOp>(op))
      continue;
    bool readsVaried = llvm::any_of(
        op.getOperands(), [&](Value v) { return varied.contains(v); });
    if (!readsVaried && op.getNumRegions() != 0) {
      llvm::SetVector<Value> captured;
      for (Region &region : op.getRegions())
        getUsedValuesDefinedAbove(region, captured);
      readsVaried =
          llvm::any_of(captured, [&](Value v) { return varied.contains(v); });
    }
    if (readsVaried)
      for (Value result : op.getResults())
        if (isFloatValue(result))
          varied.insert(result);
  }
}

/// Sums `gradient` into the gradient of `value`. A parameter's gradient is
/// summed per parameter, not per `md.param_ref`, so that the sum is complete
/// right after its last contribution in backward order.
void GradientBuilder::addGradient(Value value, Value gradient, Location loc) {
  assert(value.getType() == gradient.getType() &&
         "a gradient has the type of its value");
  Value *slot;
  if (ParamOp param = trainableParam(value))
    slot = &paramGradients[param];
  else
    slot = &gradients[value];
  *slot = *slot ? AddOp::create(builder, loc, *slot, gradient).getResult()
                : gradient;
}

LogicalResult GradientBuilder::differentiate(Block &body,
                                             ArrayRef<Operation *> forwardOps,
                                             Value loss, Value dloss) {
  builder.setInsertionPointToEnd(&body);
  tagger.backward = true;
  Location lossLoc = forward.getLoc();
  if (varied.contains(loss))
    addGradient(loss, dloss, lossLoc);

  auto needsGradient = [&](Value v) { return varied.contains(v); };
  Location currentLoc = lossLoc;
  auto sink = [&](Value operand, Value gradient) {
    addGradient(operand, gradient, currentLoc);
  };
  VjpContext context{builder, needsGradient, sink};

  for (Operation *op : llvm::reverse(forwardOps)) {
    SmallVector<Value> resultGradients;
    bool any = false;
    for (Value result : op->getResults()) {
      resultGradients.push_back(gradients.lookup(result));
      any |= resultGradients.back() != nullptr;
    }
    if (!any)
      continue;
    tagger.unit = mark::unit(op).value_or(kRootUnit);
    currentLoc = op->getLoc();
    Operation *last = body.empty() ? nullptr : &body.back();
    if (failed(emitVjp(op, resultGradients, context)))
      return failure();
    for (Operation *it = last ? last->getNextNode() : &body.front(); it;
         it = it->getNextNode())
      ++numBackwardOps;
  }
  return success();
}

LogicalResult GradientBuilder::checkEveryParamHasGradient() {
  // The first few are named; a program with thousands gets one more error
  // that counts the rest, so the report stays as long as it is useful.
  constexpr int64_t kNamed = 8;
  int64_t missing = 0;
  ParamOp firstUnnamed;
  for (auto param : model.getBody().getOps<ParamOp>()) {
    if (param.getFrozen() || paramGradients.lookup(param))
      continue;
    if (++missing > kNamed) {
      if (!firstUnnamed)
        firstUnnamed = param;
      continue;
    }
    InFlightDiagnostic diag =
        param.emitError("parameter '")
        << param.getSymName() << "' does not affect the loss of @"
        << forward.getSymName()
        << ": it would get no gradient (mark it frozen or remove it)";
    auto use = firstUse.find(param);
    if (use != firstUse.end())
      diag.attachNote(use->second)
          << "it is read here, but the loss does not depend on it";
  }
  if (firstUnnamed)
    firstUnnamed.emitError()
        << missing - kNamed << " more parameters, from '"
        << firstUnnamed.getSymName() << "' on, do not affect the loss of @"
        << forward.getSymName() << " either (" << missing << " in all)";
  return success(missing == 0);
}

FailureOr<FuncOp> GradientBuilder::build() {
  MLIRContext *ctx = model.getContext();
  std::string name = (forward.getSymName() + ".grad").str();
  if (Operation *existing = symbols.lookup(name)) {
    InFlightDiagnostic diag = forward.emitOpError("cannot add @")
                              << name << ": the model already has it";
    diag.attachNote(existing->getLoc()) << "@" << name << " is defined here";
    return diag;
  }
  if (!forward.getBody().hasOneBlock())
    return forward.emitOpError("has ")
           << forward.getBody().getBlocks().size()
           << " blocks; md-autodiff differentiates a single-block body";

  // The signature: the forward's arguments and %dloss; the results are set
  // once the gradients are known.
  FunctionType forwardType = forward.getFunctionType();
  auto lossType = RankedTensorType::get({}, Float32Type::get(ctx));
  SmallVector<Type> inputs(forwardType.getInputs());
  inputs.push_back(lossType);
  OpBuilder funcBuilder(forward);
  funcBuilder.setInsertionPointAfter(forward);
  auto grad = FuncOp::create(funcBuilder, forward.getLoc(), name,
                             FunctionType::get(ctx, inputs, {}),
                             /*arg_attrs=*/nullptr, /*res_attrs=*/nullptr);
  Block &forwardBody = forward.getBody().front();
  Block *body = new Block();
  grad.getBody().push_back(body);
  for (BlockArgument arg : forwardBody.getArguments())
    body->addArgument(arg.getType(), arg.getLoc());
  Value dloss = body->addArgument(lossType, forward.getLoc());
  for (unsigned i = 0, e = forwardType.getNumInputs(); i < e; ++i)
    if (DictionaryAttr attrs = forward.getArgAttrDict(i))
      grad.setArgAttrs(i, attrs);

  auto fail = [&]() -> FailureOr<FuncOp> {
    grad.erase();
    return failure();
  };

  // Forward: the body with every call inlined.
  IRMapping mapping;
  mapping.map(forwardBody.getArguments(), body->getArguments().drop_back());
  builder.setInsertionPointToEnd(body);
  SmallVector<FuncOp> callStack;
  SmallVector<Value> results;
  if (failed(inlineBody(forwardBody, mapping, kRootUnit, std::nullopt,
                        callStack, results)))
    return fail();
  SmallVector<Operation *> forwardOps;
  for (Operation &op : *body)
    forwardOps.push_back(&op);

  // Backward.
  findVariedValues(*body);
  if (failed(differentiate(*body, forwardOps, results.front(), dloss)) ||
      failed(checkEveryParamHasGradient()))
    return fail();

  // The results: the forward's, then one gradient per trainable parameter.
  SmallVector<Value> returned(results);
  SmallVector<FlatSymbolRefAttr> gradOf;
  for (auto param : model.getBody().getOps<ParamOp>()) {
    if (param.getFrozen())
      continue;
    returned.push_back(paramGradients.lookup(param));
    gradOf.push_back(FlatSymbolRefAttr::get(param.getSymNameAttr()));
  }
  tagger.unit = kRootUnit;
  tagger.backward = false;
  ReturnOp::create(builder, forward.getBody().front().getTerminator()->getLoc(),
                   returned);
  grad.setType(FunctionType::get(ctx, inputs, ValueRange(returned).getTypes()));
  for (unsigned i = 0, e = forwardType.getNumResults(); i < e; ++i)
    if (DictionaryAttr attrs = forward.getResultAttrDict(i))
      grad.setResultAttrs(i, attrs);
  for (auto [i, param] : llvm::enumerate(gradOf))
    mark::setGradOf(grad, forwardType.getNumResults() + i, param);
  return grad;
}

namespace {

struct AutodiffPass : public md::impl::AutodiffBase<AutodiffPass> {
  void runOnOperation() override {
    ModelOp model = getOperation();
    ForwardOp forward;
    if (TrainOp train = model.getTrain()) {
      forward = SymbolTable::lookupNearestSymbolFrom<ForwardOp>(
          train, train.getForwardAttr());
      if (!forward) {
        train.emitOpError("names '")
            << train.getForward() << "', which is not an 'md.forward'";
        return signalPassFailure();
      }
    } else {
      forward = model.getForward();
    }
    if (!forward) {
      model.emitOpError("has no 'md.forward' to differentiate");
      return signalPassFailure();
    }

    GradientBuilder gradient(model, forward);
    FailureOr<FuncOp> grad = gradient.build();
    numInlinedCalls += gradient.numInlinedCalls;
    numBackwardOps += gradient.numBackwardOps;
    if (failed(grad))
      return signalPassFailure();
    // The backward is built: md.detach has done its work and is the
    // identity from here on (no plan has an instruction for it).
    model.walk([](DetachOp detach) {
      detach.getResult().replaceAllUsesWith(detach.getX());
      detach.erase();
    });
  }
};

} // namespace
