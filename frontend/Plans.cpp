//===- Plans.cpp - plans and presets to the #md.plan attribute ------------===//
//
// A plan of a .mdl file starts from a built-in preset (`extends`, ddp when
// absent) and overrides some of its options. This file holds the presets,
// checks every option of every plan at its .mdl location, and resolves the
// plan `mdc --plan NAME` selects into a `#md.plan` attribute in which every
// field is explicit.
//
//===----------------------------------------------------------------------===//

#include "frontend/ExprText.h"
#include "frontend/IRGen.h"
#include "frontend/IRGenContext.h"
#include "frontend/Parser.h"
#include "frontend/Sema.h"

#include "dialect/MdOps.h"
#include "dialect/PlanOptions.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVectorExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Casting.h"

using namespace mlir;
using namespace md;
using namespace md::frontend;
using llvm::cast;
using llvm::dyn_cast;
using llvm::isa;

ArrayRef<StringRef> md::frontend::getBuiltinPlanNames() {
  return PlanAttr::getPresetNames();
}

namespace {

/// 25 MiB, the default bucket size of PyTorch DDP and FSDP.
constexpr int64_t kDefaultBucketCap = 25 * 1024 * 1024;

/// The values of a plan while its options are applied.
struct PlanValues {
  std::string name;
  std::string preset;
  ShardKind shard = ShardKind::none;
  std::optional<int64_t> shardGroupSize;
  WrapKind wrap = WrapKind::none;
  SmallVector<std::string> wrapBlocks;
  std::optional<int64_t> wrapMinParams;
  Type paramDtype, reduceDtype, bufferDtype, masterDtype;
  int64_t bucketCap = kDefaultBucketCap;
  bool prefetchForward = true;
  PrefetchBackward prefetchBackward = PrefetchBackward::pre;
  bool reshardAfterForward = false;
  SmallVector<std::string> checkpointActivations;
  // The options kept beside #md.plan (dialect/PlanOptions.h), unset
  // while they keep their defaults.
  bool shardedGradAccumulation = false;
  SMLoc gradAccumulationLoc;
  std::optional<std::pair<std::string, Interconnect>> interconnect;
  std::optional<int64_t> maxInflightAllGathers;

  PlanAttr toAttr(MLIRContext *context) const {
    auto strings = [&](ArrayRef<std::string> names) {
      SmallVector<StringAttr> attrs;
      for (const std::string &name : names)
        attrs.push_back(StringAttr::get(context, name));
      return attrs;
    };
    return PlanAttr::get(context, name, preset, shard, shardGroupSize, wrap,
                         strings(wrapBlocks), wrapMinParams, paramDtype,
                         reduceDtype, bufferDtype, masterDtype, bucketCap,
                         prefetchForward, prefetchBackward, reshardAfterForward,
                         strings(checkpointActivations));
  }
};

/// The params of `model` declared with a repeat count (`param h: B(d)[n]`).
SmallVector<StringRef> getRepeatedParams(const BlockDecl *model) {
  SmallVector<StringRef> names;
  if (model)
    for (const ParamDecl &param : model->params)
      if (!param.isRaw && param.repeat)
        names.push_back(param.name);
  return names;
}

/// The values of the built-in preset `preset` (which must be one of them).
PlanValues getPreset(StringRef preset, const BlockDecl *model,
                     MLIRContext *context) {
  PlanValues plan;
  plan.name = preset.str();
  plan.preset = preset.str();
  plan.shard = llvm::StringSwitch<ShardKind>(preset)
                   .Case("zero1", ShardKind::optimizer)
                   .Case("fsdp-grad-op", ShardKind::grad_op)
                   .Case("fsdp-full", ShardKind::full)
                   .Case("fsdp-hybrid", ShardKind::hybrid)
                   .Default(ShardKind::none);
  if (plan.shard == ShardKind::hybrid)
    plan.shardGroupSize = 8;
  // Every repeated block is a wrap unit: one unit for the whole model saves
  // no memory under FSDP.
  for (StringRef name : getRepeatedParams(model))
    plan.wrapBlocks.push_back(name.str());
  plan.wrap = plan.wrapBlocks.empty() ? WrapKind::none : WrapKind::blocks;
  Type f32 = Float32Type::get(context);
  Type bf16 = BFloat16Type::get(context);
  bool fullPrecision = preset == "single" || preset == "ddp";
  plan.paramDtype = fullPrecision ? f32 : bf16;
  plan.reduceDtype = plan.bufferDtype = plan.masterDtype = f32;
  plan.reshardAfterForward = preset == "fsdp-full";
  return plan;
}

/// The first model of the file, for plans checked without a chosen model.
const BlockDecl *getPlanModel(const Module &module, IRGenContext &ctx) {
  if (ctx.modelDecl)
    return ctx.modelDecl;
  for (const BlockDecl &decl : module.blocks)
    if (decl.isModel)
      return &decl;
  return nullptr;
}

/// Resolves one parallelism plan of the program (not the executable plan
/// file): applies its options to the values of its preset, reporting every
/// invalid option through `diags`.
class PlanResolver {
public:
  PlanResolver(const BlockDecl *model, int64_t worldSize, MLIRContext *context,
               Diagnostics &diags)
      : model(model), worldSize(worldSize), context(context), diags(diags) {}

  FailureOr<PlanValues> build(const PlanDecl &decl) {
    unsigned errors = diags.getNumErrors();
    StringRef preset =
        decl.extends.empty() ? StringRef("ddp") : StringRef(decl.extends);
    if (!llvm::is_contained(getBuiltinPlanNames(), preset)) {
      diags.error(decl.extendsLoc, "unknown preset '" + preset +
                                       "'; expected one of: " +
                                       joinNames(getBuiltinPlanNames()));
      preset = "ddp"; // check the options all the same
    }
    PlanValues plan = getPreset(preset, model, context);
    plan.name = decl.name;
    apply(decl, plan);
    if (diags.getNumErrors() != errors)
      return failure();
    return plan;
  }

  /// Applies the options of `decl` to `plan`; the options of a plan of the
  /// file, or those `mdc` flags set (applyOverrides).
  void apply(const PlanDecl &decl, PlanValues &plan) {
    forEachKnownSetting(diags, decl.options, "plan option", optionKeys(),
                        [&](const Setting &option) {
                          for (const PlanOption &known : options())
                            if (known.key == option.key)
                              (this->*known.apply)(*option.value, plan);
                        });
    // Checked once every option is applied: `shard` may come after it.
    if (plan.shardedGradAccumulation && plan.shard != ShardKind::grad_op &&
        plan.shard != ShardKind::full && plan.shard != ShardKind::hybrid)
      diags.error(plan.gradAccumulationLoc,
                  "'grad_accumulation = sharded' needs a plan that "
                  "reduce-scatters gradients (shard = grad_op, full or "
                  "hybrid), got shard = " +
                      stringifyShardKind(plan.shard));
  }

  /// Applies `mdc`'s plan flags, parsed as the options of a plan `decl`, to
  /// `plan`; fails when one is invalid.
  LogicalResult applyOverrides(const PlanDecl &decl, PlanValues &plan) {
    unsigned errors = diags.getNumErrors();
    apply(decl, plan);
    return success(diags.getNumErrors() == errors);
  }

private:
  /// A plan option and what applies its value.
  struct PlanOption {
    StringRef key;
    void (PlanResolver::*apply)(const Expr &value, PlanValues &plan);
  };
  /// Every plan option, in the order messages list them.
  static ArrayRef<PlanOption> options() {
    static const PlanOption table[] = {
        {"shard", &PlanResolver::applyShard},
        {"wrap", &PlanResolver::applyWrap},
        {"precision", &PlanResolver::applyPrecision},
        {"bucket_cap", &PlanResolver::applyBucketCap},
        {"prefetch", &PlanResolver::applyPrefetch},
        {"reshard_after_forward", &PlanResolver::applyReshardAfterForward},
        {"checkpoint_activations", &PlanResolver::applyCheckpointActivations},
        {"grad_accumulation", &PlanResolver::applyGradAccumulation},
        {"interconnect", &PlanResolver::applyInterconnect},
        {"max_inflight_allgathers", &PlanResolver::applyMaxInflightAllGathers}};
    return table;
  }

  /// The options' names, for forEachKnownSetting.
  static ArrayRef<StringRef> optionKeys() {
    static const SmallVector<StringRef> keys = llvm::map_to_vector(
        options(), [](const PlanOption &option) { return option.key; });
    return keys;
  }

  static const NameExpr *asName(const Expr &expr) {
    return dyn_cast<NameExpr>(&expr);
  }

  /// Whether `call` has one argument, positional or named `name`.
  static bool hasOneArgument(const CallExpr &call, StringRef name) {
    return call.args.size() == 1 &&
           (call.args[0].name.empty() || call.args[0].name == name);
  }

  /// The integer `value` of argument `name` when it is at least `min`;
  /// otherwise reports that it must be `expected` and returns nullopt.
  std::optional<int64_t> integerAtLeast(const Expr &value, int64_t min,
                                        StringRef name, StringRef expected) {
    const auto *number = dyn_cast<NumberExpr>(&value);
    if (number && number->isInteger && number->intValue >= min)
      return number->intValue;
    diags.error(value.loc, "'" + name + "' must be " + expected + ", got " +
                               describe(value));
    return std::nullopt;
  }

  /// `shard = none | optimizer | grad_op | full | hybrid(shard_group = N)`.
  void applyShard(const Expr &value, PlanValues &plan) {
    auto fail = [&] {
      diags.error(value.loc, "'shard' must be none, optimizer, grad_op, full "
                             "or hybrid(shard_group = N)");
    };
    if (const NameExpr *name = asName(value)) {
      std::optional<ShardKind> kind = symbolizeShardKind(name->name);
      if (!kind) {
        fail();
        return;
      }
      if (*kind == ShardKind::hybrid) {
        diags.error(value.loc, "'hybrid' needs the size of its shard group: "
                               "hybrid(shard_group = N)");
        return;
      }
      plan.shard = *kind;
      plan.shardGroupSize.reset();
      return;
    }
    const auto *call = dyn_cast<CallExpr>(&value);
    if (!call || call->callee != "hybrid") {
      fail();
      return;
    }
    if (!hasOneArgument(*call, "shard_group")) {
      SMLoc loc = call->args.empty()           ? call->loc
                  : call->args[0].name.empty() ? call->args[0].value->loc
                                               : call->args[0].nameLoc;
      diags.error(loc, "'hybrid' takes one argument, shard_group = N");
      return;
    }
    const Expr &group = *call->args[0].value;
    std::optional<int64_t> size =
        integerAtLeast(group, 2, "shard_group", "an integer > 1");
    if (!size)
      return;
    if (worldSize && worldSize % *size != 0) {
      diags.error(group.loc, "shard group of " + llvm::Twine(*size) +
                                 " ranks does not divide the world size " +
                                 llvm::Twine(worldSize));
      return;
    }
    plan.shard = ShardKind::hybrid;
    plan.shardGroupSize = *size;
  }

  /// `blocks(h, ...)`: each name a repeated param of the model. `what` is the
  /// option for messages.
  bool parseBlocks(const CallExpr &call, StringRef what,
                   SmallVectorImpl<std::string> &names) {
    if (call.args.empty()) {
      diags.error(call.loc,
                  "'blocks()' in '" + what + "' names no repeated parameter");
      return false;
    }
    SmallVector<StringRef> repeated = getRepeatedParams(model);
    bool ok = true;
    for (const Argument &arg : call.args) {
      const NameExpr *name = asName(*arg.value);
      if (!arg.name.empty() || !name) {
        diags.error(arg.name.empty() ? arg.value->loc : arg.nameLoc,
                    "'blocks(...)' takes the names of repeated parameters");
        ok = false;
        continue;
      }
      if (llvm::is_contained(names, name->name)) {
        diags.error(name->loc, "'" + name->name + "' is named twice in '" +
                                   describe(call) + "'");
        ok = false;
        continue;
      }
      if (model && !llvm::is_contained(repeated, name->name)) {
        diags.error(name->loc, "'" + describe(call) + "': '" + name->name +
                                   "' is not a repeated parameter of model '" +
                                   model->name + "'");
        if (repeated.empty())
          diags.note(model->loc, "model '" + model->name +
                                     "' declares no repeated parameter");
        else
          diags.note(model->loc, "the repeated parameters of '" + model->name +
                                     "' are: " + joinNames(repeated));
        ok = false;
        continue;
      }
      names.push_back(name->name);
    }
    return ok;
  }

  /// `wrap = blocks(h) | size(min_params = N) | none`.
  void applyWrap(const Expr &value, PlanValues &plan) {
    auto fail = [&] {
      diags.error(value.loc, "'wrap' must be blocks(<repeated parameters>), "
                             "size(min_params = N) or none");
    };
    if (const NameExpr *name = asName(value)) {
      if (name->name != "none")
        return fail();
      plan.wrap = WrapKind::none;
      plan.wrapBlocks.clear();
      plan.wrapMinParams.reset();
      return;
    }
    const auto *call = dyn_cast<CallExpr>(&value);
    if (!call)
      return fail();
    if (call->callee == "blocks") {
      SmallVector<std::string> names;
      if (!parseBlocks(*call, "wrap", names))
        return;
      plan.wrap = WrapKind::blocks;
      plan.wrapBlocks = std::move(names);
      plan.wrapMinParams.reset();
      return;
    }
    if (call->callee != "size")
      return fail();
    if (!hasOneArgument(*call, "min_params")) {
      diags.error(call->loc, "'size' takes one argument, min_params = N");
      return;
    }
    std::optional<int64_t> minParams = integerAtLeast(
        *call->args[0].value, 1, "min_params", "a positive integer");
    if (!minParams)
      return;
    plan.wrap = WrapKind::size;
    plan.wrapBlocks.clear();
    plan.wrapMinParams = *minParams;
  }

  /// `checkpoint_activations = blocks(h) | none`.
  void applyCheckpointActivations(const Expr &value, PlanValues &plan) {
    if (const NameExpr *name = asName(value); name && name->name == "none") {
      plan.checkpointActivations.clear();
      return;
    }
    const auto *call = dyn_cast<CallExpr>(&value);
    if (!call || call->callee != "blocks") {
      diags.error(value.loc, "'checkpoint_activations' must be "
                             "blocks(<repeated parameters>) or none");
      return;
    }
    SmallVector<std::string> names;
    if (parseBlocks(*call, "checkpoint_activations", names))
      plan.checkpointActivations = std::move(names);
  }

  /// Runs `fn` on each field of the record `value` of option `option`, each
  /// a known one of `fields` and given once; reports the others and a value
  /// that is no record (`example` shows one).
  template <typename Fn>
  void forEachField(const Expr &value, StringRef option, StringRef example,
                    ArrayRef<StringRef> fields, Fn fn) {
    const auto *record = dyn_cast<RecordExpr>(&value);
    if (!record) {
      diags.error(value.loc,
                  "'" + option + "' must be a record such as " + example);
      return;
    }
    forEachKnownSetting(diags, record->fields, (option + " field").str(),
                        fields, fn);
  }

  /// `precision = { param = bf16, reduce = f32, buffer = f32, master = f32 }`;
  /// fields left out keep the preset's dtype.
  void applyPrecision(const Expr &value, PlanValues &plan) {
    static const StringRef fields[] = {"param", "reduce", "buffer", "master"};
    forEachField(
        value, "precision",
        "{ param = bf16, reduce = f32, buffer = f32, master = f32 }", fields,
        [&](const Setting &field) {
          const NameExpr *name = asName(*field.value);
          Type type;
          if (name)
            type = llvm::StringSwitch<Type>(name->name)
                       .Case("bf16", BFloat16Type::get(context))
                       .Case("f16", Float16Type::get(context))
                       .Case("f32", Float32Type::get(context))
                       .Default(Type());
          if (!type) {
            diags.error(field.value->loc,
                        "'" + field.key + "' must be bf16, f16 or f32, got " +
                            describe(*field.value));
            return;
          }
          if (field.key == "master" && !type.isF32()) {
            diags.error(field.value->loc,
                        "'master' must be f32: md keeps master weights and "
                        "optimizer state in f32 in this version, got " +
                            name->name);
            return;
          }
          Type &slot = field.key == "param"    ? plan.paramDtype
                       : field.key == "reduce" ? plan.reduceDtype
                       : field.key == "buffer" ? plan.bufferDtype
                                               : plan.masterDtype;
          slot = type;
        });
  }

  /// `bucket_cap = 25 MiB`.
  void applyBucketCap(const Expr &value, PlanValues &plan) {
    const auto *size = dyn_cast<SizeExpr>(&value);
    if (!size) {
      diags.error(value.loc, "'bucket_cap' must be a size with a unit, such "
                             "as 25 MiB");
      return;
    }
    if (size->bytes <= 0) {
      diags.error(value.loc, "'bucket_cap' must be at least 1 byte, got " +
                                 describe(value));
      return;
    }
    plan.bucketCap = size->bytes;
  }

  /// `prefetch = { forward = true, backward = pre | post | none }`.
  void applyPrefetch(const Expr &value, PlanValues &plan) {
    static const StringRef fields[] = {"forward", "backward"};
    forEachField(value, "prefetch", "{ forward = true, backward = pre }",
                 fields, [&](const Setting &field) {
                   if (field.key == "forward") {
                     applyBool(*field.value, field.key, plan.prefetchForward);
                     return;
                   }
                   const NameExpr *name = asName(*field.value);
                   std::optional<PrefetchBackward> kind;
                   if (name)
                     kind = symbolizePrefetchBackward(name->name);
                   if (!kind) {
                     diags.error(field.value->loc,
                                 "'backward' must be pre, post or none, got " +
                                     describe(*field.value));
                     return;
                   }
                   plan.prefetchBackward = *kind;
                 });
  }

  /// `grad_accumulation = local | sharded`.
  void applyGradAccumulation(const Expr &value, PlanValues &plan) {
    const NameExpr *name = asName(value);
    if (!name || (name->name != "local" && name->name != "sharded")) {
      diags.error(value.loc,
                  "'grad_accumulation' must be local or sharded, got " +
                      describe(value));
      return;
    }
    plan.shardedGradAccumulation = name->name == "sharded";
    plan.gradAccumulationLoc = value.loc;
  }

  /// `interconnect = nvlink | pcie | infiniband | ethernet | shm |
  /// custom(alpha_us = A, beta_gbps = B)`.
  void applyInterconnect(const Expr &value, PlanValues &plan) {
    if (const NameExpr *name = asName(value)) {
      std::optional<Interconnect> link = getInterconnect(name->name);
      if (!link) {
        diags.error(value.loc,
                    "unknown interconnect '" + name->name +
                        "'; expected one of: " + getInterconnectNames() +
                        ", or custom(alpha_us = A, beta_gbps = B)");
        return;
      }
      plan.interconnect = {name->name, *link};
      return;
    }
    const auto *call = dyn_cast<CallExpr>(&value);
    if (!call || call->callee != "custom") {
      diags.error(value.loc, "'interconnect' must be a link name (" +
                                 getInterconnectNames() +
                                 ") or custom(alpha_us = A, beta_gbps = B)");
      return;
    }
    std::optional<double> alpha, beta;
    for (const Argument &arg : call->args) {
      SMLoc loc = arg.name.empty() ? arg.value->loc : arg.nameLoc;
      if (arg.name != "alpha_us" && arg.name != "beta_gbps") {
        diags.error(loc, "'custom' takes alpha_us = A (microseconds per "
                         "collective) and beta_gbps = B (GB/s per rank)");
        return;
      }
      std::optional<double> &slot = arg.name == "alpha_us" ? alpha : beta;
      if (slot) {
        diags.error(loc, "'" + arg.name + "' is given twice");
        return;
      }
      const auto *number = dyn_cast<NumberExpr>(arg.value.get());
      bool positive = number && number->floatValue > 0;
      if (!positive &&
          !(arg.name == "alpha_us" && number && number->floatValue == 0)) {
        diags.error(arg.value->loc,
                    "'" + arg.name + "' must be a number " +
                        (arg.name == "alpha_us" ? ">= 0" : "> 0") + ", got " +
                        describe(*arg.value));
        return;
      }
      slot = number->floatValue;
    }
    if (!alpha || !beta) {
      diags.error(call->loc, "'custom' needs both alpha_us = A and "
                             "beta_gbps = B");
      return;
    }
    plan.interconnect = {"custom", Interconnect{*alpha, *beta}};
  }

  /// `max_inflight_allgathers = N`, N >= 1.
  void applyMaxInflightAllGathers(const Expr &value, PlanValues &plan) {
    if (std::optional<int64_t> limit = integerAtLeast(
            value, 1, "max_inflight_allgathers", "an integer >= 1"))
      plan.maxInflightAllGathers = *limit;
  }

  /// `reshard_after_forward = true | false`.
  void applyReshardAfterForward(const Expr &value, PlanValues &plan) {
    applyBool(value, "reshard_after_forward", plan.reshardAfterForward);
  }

  /// Sets `slot` to `value`, which option `key` needs to be a bool.
  void applyBool(const Expr &value, StringRef key, bool &slot) {
    const auto *boolean = dyn_cast<BoolExpr>(&value);
    if (!boolean) {
      diags.error(value.loc, "'" + key + "' must be true or false, got " +
                                 describe(value));
      return;
    }
    slot = boolean->value;
  }

  static std::string describe(const Expr &expr) { return describeExpr(expr); }

  const BlockDecl *model;
  /// The world size pinned on the model, 0 when it is symbolic.
  int64_t worldSize;
  MLIRContext *context;
  Diagnostics &diags;
};

/// The world size pinned on the model op so far; 0 when it is symbolic.
int64_t getPinnedWorldSize(IRGenContext &ctx) {
  if (auto model = dyn_cast_or_null<ModelOp>(ctx.modelOp))
    if (IntegerAttr world = model.getWorldSizeAttr())
      return world.getInt();
  return 0;
}

/// Applies `ctx.planOverrides` (`mdc --interconnect` and the other plan
/// flags, each `option = value` in .mdl syntax) to `values`. They are parsed
/// as the body of a plan in a buffer of their own, named after the flags, so
/// that a bad value gets the same located error as in a .mdl file.
LogicalResult applyPlanOverrides(const BlockDecl *model, int64_t worldSize,
                                 IRGenContext &ctx, PlanValues &values) {
  std::string text = "plan flags {\n";
  for (const std::string &option : ctx.planOverrides)
    text += option + "\n";
  text += "}\n";
  llvm::SourceMgr &sm = ctx.diags.getSourceMgr();
  unsigned buffer = sm.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, "<mdc plan flags>"), SMLoc());
  std::unique_ptr<Module> parsed = parseModule(buffer, ctx.diags);
  if (!parsed || parsed->plans.size() != 1)
    return failure();
  PlanResolver builder(model, worldSize, &ctx.context, ctx.diags);
  return builder.applyOverrides(parsed->plans.front(), values);
}

/// The options of `values` kept beside #md.plan, on `model`; an option at its
/// default leaves no attribute.
void setPlanOptions(ModelOp model, const PlanValues &values) {
  if (values.shardedGradAccumulation)
    setShardedGradAccumulation(model);
  if (values.interconnect) {
    const auto &[name, link] = *values.interconnect;
    setPlanInterconnect(model, name, link);
  }
  if (values.maxInflightAllGathers)
    setPlanMaxInflightAllGathers(model, *values.maxInflightAllGathers);
}

} // namespace

LogicalResult md::frontend::checkPlans(const Module &module,
                                       IRGenContext &ctx) {
  ctx.plansChecked = true;
  unsigned errors = ctx.diags.getNumErrors();
  PlanResolver builder(getPlanModel(module, ctx), getPinnedWorldSize(ctx),
                      &ctx.context, ctx.diags);
  for (auto [i, plan] : llvm::enumerate(module.plans)) {
    for (const PlanDecl &previous : ArrayRef(module.plans).take_front(i)) {
      if (previous.name != plan.name)
        continue;
      ctx.diags.error(plan.loc, "plan '" + plan.name + "' is already defined");
      ctx.diags.note(previous.loc, "previous definition is here");
      break;
    }
    (void)builder.build(plan);
  }
  return success(ctx.diags.getNumErrors() == errors);
}

FailureOr<Attribute> md::frontend::resolvePlan(const Module &module,
                                               StringRef name,
                                               IRGenContext &ctx) {
  const BlockDecl *model = getPlanModel(module, ctx);
  int64_t worldSize = getPinnedWorldSize(ctx);
  const PlanDecl *decl = nullptr;
  for (const PlanDecl &plan : module.plans)
    if (plan.name == name) {
      decl = &plan;
      break;
    }

  PlanValues values;
  if (decl) {
    // checkPlans has reported this plan's errors already.
    Diagnostics silent(ctx.diags.getSourceMgr(), llvm::nulls());
    PlanResolver builder(model, worldSize, &ctx.context,
                        ctx.plansChecked ? silent : ctx.diags);
    FailureOr<PlanValues> built = builder.build(*decl);
    if (failed(built))
      return failure();
    values = std::move(*built);
  } else if (llvm::is_contained(getBuiltinPlanNames(), name)) {
    values = getPreset(name, model, &ctx.context);
  } else {
    SmallVector<StringRef> names;
    for (const PlanDecl &plan : module.plans)
      if (!llvm::is_contained(names, plan.name))
        names.push_back(plan.name);
    for (StringRef preset : getBuiltinPlanNames())
      if (!llvm::is_contained(names, preset))
        names.push_back(preset);
    ctx.diags.error(SMLoc(), "--plan " + name + ": unknown plan '" + name +
                                 "'; expected one of: " + joinNames(names));
    return failure();
  }

  if (!ctx.planOverrides.empty() &&
      failed(applyPlanOverrides(model, worldSize, ctx, values)))
    return failure();
  PlanAttr plan = values.toAttr(&ctx.context);
  if (auto modelOp = dyn_cast_or_null<ModelOp>(ctx.modelOp))
    setPlanOptions(modelOp, values);
  if (plan.isSingleRank()) {
    if (worldSize > 1) {
      ctx.diags.error(decl ? decl->loc : SMLoc(),
                      "plan '" + name +
                          "' runs on one rank, but the world "
                          "size is pinned to " +
                          llvm::Twine(worldSize));
      return failure();
    }
    if (auto modelOp = dyn_cast_or_null<ModelOp>(ctx.modelOp))
      modelOp.setWorldSize(1);
  }
  // A hybrid mesh's shard group is part of the model's mesh: collective
  // verifiers and group sizes read it from md.model.
  if (std::optional<int64_t> group = plan.getShardGroupSize()) {
    // A .mdl plan's shard group was checked against the pinned W where it
    // is written; a preset's is checked here.
    if (worldSize && worldSize % *group != 0) {
      ctx.diags.error(decl ? decl->loc : SMLoc(),
                      "plan '" + name + "' shards over groups of " +
                          llvm::Twine(*group) + " ranks, but the world size " +
                          "is pinned to " + llvm::Twine(worldSize) +
                          ", which is not a multiple of it");
      return failure();
    }
    if (auto modelOp = dyn_cast_or_null<ModelOp>(ctx.modelOp))
      modelOp.setShardGroupSize(*group);
  }
  return Attribute(plan);
}
