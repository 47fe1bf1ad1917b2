//===- IRGenRecipeSettings.cpp - settings of a train recipe ---------------===//
//
// The settings of `train { ... }`: arguments of the setting calls, the data
// source, the optimizer and the schedule with the ranges of their
// attributes, batch sizes, and warnings for near misses of setting names.
//
//===----------------------------------------------------------------------===//

#include "frontend/RecipeEmitter.h"

#include "dialect/ParamGroups.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/GlobPattern.h"

#include <cmath>

namespace md::frontend::recipe {

std::optional<SmallVector<const Expr *>>
RecipeEmitter::bindArgs(ArrayRef<Argument> args, SMLoc loc, StringRef callee,
                        ArrayRef<StringRef> params) {
  SmallVector<const Expr *> bound(params.size(), nullptr);
  SmallVector<SMLoc> boundLoc(params.size());
  bool ok = true, sawNamed = false;
  unsigned positional = 0;
  for (const Argument &arg : args) {
    if (arg.name.empty()) {
      if (sawNamed) {
        diags.error(arg.value->loc, "positional argument after a named one "
                                    "in '" +
                                        callee + "'");
        ok = false;
        continue;
      }
      if (positional >= params.size()) {
        diags.error(arg.value->loc,
                    "'" + callee + "' takes " +
                        (params.empty()
                             ? std::string("no arguments")
                             : "at most " + std::to_string(params.size()) +
                                   " argument" +
                                   (params.size() == 1 ? "" : "s")) +
                        ", got " + std::to_string(args.size()));
        return std::nullopt;
      }
      bound[positional] = arg.value.get();
      boundLoc[positional] = arg.value->loc;
      ++positional;
      continue;
    }
    sawNamed = true;
    const StringRef *param = llvm::find(params, arg.name);
    if (param == params.end()) {
      diags.error(arg.nameLoc,
                  "unknown argument '" + arg.name + "' of '" + callee +
                      "'; expected " +
                      (params.empty() ? std::string("no arguments")
                                      : "one of: " + joinNames(params)));
      ok = false;
      continue;
    }
    size_t index = param - params.begin();
    if (bound[index]) {
      diags.error(arg.nameLoc, "argument '" + arg.name + "' of '" + callee +
                                   "' is given twice");
      diags.note(boundLoc[index], "previous definition is here");
      ok = false;
      continue;
    }
    bound[index] = arg.value.get();
    boundLoc[index] = arg.nameLoc;
  }
  (void)loc;
  if (!ok)
    return std::nullopt;
  return bound;
}

/// Reports that `expr`, the value of setting `what`, is not `expected`;
/// nullopt for the getters below to return.
static std::nullopt_t reportNot(Diagnostics &diags, const Expr &expr,
                                const Twine &what, StringRef expected) {
  diags.error(expr.loc,
              "'" + what + "' must be " + expected + ", got " + describe(expr));
  return std::nullopt;
}

std::optional<double> RecipeEmitter::getNumber(const Expr &expr,
                                               const Twine &what) {
  if (std::optional<Literal> literal = getLiteral(expr))
    return literal->floatValue;
  return reportNot(diags, expr, what, "a number");
}

std::optional<int64_t> RecipeEmitter::getInteger(const Expr &expr,
                                                 const Twine &what) {
  std::optional<Literal> literal = getLiteral(expr);
  if (literal && literal->isInteger)
    return literal->intValue;
  return reportNot(diags, expr, what, "an integer");
}

std::optional<bool> RecipeEmitter::getBool(const Expr &expr,
                                           const Twine &what) {
  if (const auto *value = dyn_cast<BoolExpr>(&expr))
    return value->value;
  return reportNot(diags, expr, what, "true or false");
}

std::optional<std::string> RecipeEmitter::getString(const Expr &expr,
                                                    const Twine &what) {
  if (const auto *value = dyn_cast<StringExpr>(&expr))
    return value->value;
  return reportNot(diags, expr, what, "a string");
}

DataAttr RecipeEmitter::getDataSource(const Expr &expr, StringRef what) {
  const auto *call = dyn_cast<CallExpr>(&expr);
  if (!call) {
    diags.error(expr.loc, "'" + what +
                              "' must be synthetic(...), npy(\"path\") or "
                              "tokens(\"path\"), got " +
                              describe(expr));
    return {};
  }
  MLIRContext *context = &ctx.context;
  if (call->callee == "synthetic") {
    auto args = bindArgs(call->args, call->loc, "synthetic", {"seed"});
    if (!args)
      return {};
    int64_t dataSeed = 0;
    if (const Expr *seed = (*args)[0]) {
      std::optional<int64_t> value = getInteger(*seed, "seed");
      if (!value)
        return {};
      if (*value < 0) {
        diags.error(seed->loc,
                    "'seed' must be >= 0, got " + std::to_string(*value));
        return {};
      }
      dataSeed = *value;
    }
    return DataAttr::get(context, DataKind::synthetic, "", dataSeed);
  }
  std::optional<DataKind> kind =
      llvm::StringSwitch<std::optional<DataKind>>(call->callee)
          .Case("npy", DataKind::npy)
          .Case("tokens", DataKind::tokens)
          .Default(std::nullopt);
  if (!kind) {
    diags.error(call->loc, "unknown data source '" + call->callee +
                               "'; expected one of: synthetic, npy, tokens");
    return {};
  }
  SmallVector<StringRef> params = {"path"};
  if (*kind == DataKind::tokens)
    params.push_back("seq");
  auto args = bindArgs(call->args, call->loc, call->callee, params);
  if (!args)
    return {};
  if (!(*args)[0]) {
    diags.error(call->loc, "'" + call->callee + "' needs a path: " +
                               call->callee + "(\"path\")");
    return {};
  }
  std::optional<std::string> path = getString(*(*args)[0], "path");
  if (!path)
    return {};
  if (path->empty()) {
    diags.error((*args)[0]->loc, "the data path is empty");
    return {};
  }
  if (params.size() > 1 && (*args)[1] && failed(checkSeq(*(*args)[1])))
    return {};
  return DataAttr::get(context, *kind, *path);
}

LogicalResult RecipeEmitter::checkSeq(const Expr &expr) {
  std::optional<int64_t> seq = getInteger(expr, "seq");
  if (!seq)
    return failure();
  if (*seq <= 0) {
    diags.error(expr.loc,
                "'seq' must be a positive integer, got " + describe(expr));
    return failure();
  }
  ForwardOp forward = model.getForward();
  if (!forward || forward.getArgumentTypes().empty())
    return success();
  auto input = dyn_cast<RankedTensorType>(forward.getArgumentTypes()[0]);
  if (!input || input.getRank() < 2 || input.isDynamicDim(1) ||
      input.getDimSize(1) == *seq)
    return success();
  diags.error(expr.loc, "seq = " + std::to_string(*seq) +
                            " does not match the sequence length " +
                            std::to_string(input.getDimSize(1)) +
                            " of the forward's first argument");
  return failure();
}

Attribute RecipeEmitter::getOptimizer(const Expr &expr) {
  const auto *call = dyn_cast<CallExpr>(&expr);
  StringRef name = call                  ? StringRef(call->callee)
                   : isa<NameExpr>(expr) ? StringRef(cast<NameExpr>(expr).name)
                                         : StringRef();
  if (name != "adamw" && name != "sgd") {
    diags.error(expr.loc,
                "unknown optimizer " +
                    (call ? "'" + call->callee + "'" : describe(expr)) +
                    "; expected adamw(lr = ...) or sgd(lr = ...)");
    return {};
  }
  if (!call) {
    diags.error(expr.loc,
                "'" + name + "' needs a learning rate: " + name + "(lr = ...)");
    return {};
  }
  bool isAdamW = name == "adamw";
  SmallVector<StringRef> params =
      isAdamW ? SmallVector<StringRef>{"lr", "betas", "eps", "weight_decay",
                                       "groups"}
              : SmallVector<StringRef>{"lr",           "momentum", "dampening",
                                       "weight_decay", "nesterov", "groups"};
  auto args = bindArgs(call->args, call->loc, name, params);
  if (!args)
    return {};
  if (!(*args)[0]) {
    diags.error(call->loc,
                "'" + name + "' needs a learning rate: " + name + "(lr = ...)");
    return {};
  }
  bool ok = true;
  // A number in range for `param`, or `fallback` when it is not given.
  auto number = [&](size_t index, double fallback,
                    function_ref<bool(double)> inRange,
                    StringRef range) -> double {
    const Expr *arg = (*args)[index];
    if (!arg)
      return fallback;
    std::optional<double> value = getNumber(*arg, params[index]);
    if (!value) {
      ok = false;
      return fallback;
    }
    if (!inRange(*value)) {
      diags.error(arg->loc, name + " " + params[index] + " must be " + range +
                                ", got " + formatDouble(*value));
      ok = false;
    }
    return *value;
  };
  auto nonNegative = [](double v) { return v >= 0; };
  // The attribute `build` makes from the parameter groups at argument
  // `index` (null when not given), once every argument is well formed; null
  // when one is not or the groups do not fit the optimizer.
  auto withGroups = [&](size_t index, double weightDecay,
                        function_ref<Attribute(ArrayAttr)> build) {
    ArrayAttr groups;
    const Expr *arg = (*args)[index];
    if (arg)
      ok &= succeeded(getParamGroups(*arg, weightDecay, groups));
    if (!ok)
      return Attribute();
    Attribute attr = build(groups);
    if (groups && failed(checkParamGroups(attr, *arg)))
      return Attribute();
    return attr;
  };
  double lr = number(0, 0, nonNegative, ">= 0");
  MLIRContext *context = &ctx.context;
  if (isAdamW) {
    double beta1 = 0.9, beta2 = 0.999;
    if (const Expr *betas = (*args)[1]) {
      const auto *tuple = dyn_cast<TupleExpr>(betas);
      if (!tuple || tuple->elements.size() != 2) {
        diags.error(betas->loc, "'betas' must be a pair of numbers such as "
                                "(0.9, 0.999), got " +
                                    describe(*betas));
        ok = false;
      } else {
        double *slots[] = {&beta1, &beta2};
        for (auto [i, element] : llvm::enumerate(tuple->elements)) {
          std::string what = "beta" + std::to_string(i + 1);
          std::optional<double> value = getNumber(*element, what);
          if (!value) {
            ok = false;
            continue;
          }
          if (!(*value >= 0 && *value < 1)) {
            diags.error(element->loc, "adamw " + what +
                                          " must be in [0, 1), got " +
                                          formatDouble(*value));
            ok = false;
          }
          *slots[i] = *value;
        }
      }
    }
    double eps = number(
        2, 1e-8, [](double v) { return v > 0; }, "> 0");
    double weightDecay = number(3, 0.01, nonNegative, ">= 0");
    return withGroups(4, weightDecay, [&](ArrayAttr groups) -> Attribute {
      return AdamWAttr::get(context, APFloat(lr), APFloat(beta1),
                            APFloat(beta2), APFloat(eps), APFloat(weightDecay),
                            groups);
    });
  }
  double momentum = number(1, 0, nonNegative, ">= 0");
  double dampening = number(
      2, 0, [](double) { return true; }, "");
  double weightDecay = number(3, 0, nonNegative, ">= 0");
  bool nesterov = false;
  if (const Expr *arg = (*args)[4]) {
    std::optional<bool> value = getBool(*arg, "nesterov");
    if (!value)
      ok = false;
    else
      nesterov = *value;
    // The same rule as torch.optim.SGD.
    if (nesterov && (momentum <= 0 || dampening != 0)) {
      diags.error(arg->loc, "sgd nesterov needs momentum > 0 and dampening "
                            "= 0, got momentum " +
                                formatDouble(momentum) + " and dampening " +
                                formatDouble(dampening));
      ok = false;
    }
  }
  return withGroups(5, weightDecay, [&](ArrayAttr groups) -> Attribute {
    return SGDAttr::get(context, APFloat(lr), APFloat(momentum),
                        APFloat(dampening), APFloat(weightDecay), nesterov,
                        groups);
  });
}

LogicalResult RecipeEmitter::getParamGroups(const Expr &expr,
                                            double weightDecay,
                                            ArrayAttr &groups) {
  const auto *list = dyn_cast<ListExpr>(&expr);
  if (!list || list->elements.empty()) {
    diags.error(expr.loc, "'groups' must be a list of group(...) such as "
                          "[group(ndim = 1, weight_decay = 0.0)], got " +
                              describe(expr));
    return failure();
  }
  MLIRContext *context = &ctx.context;
  SmallVector<Attribute> result;
  bool ok = true;
  for (const ExprPtr &element : list->elements) {
    const auto *call = dyn_cast<CallExpr>(element.get());
    if (!call || call->callee != "group") {
      diags.error(element->loc, "a parameter group is written group(match = "
                                "\"glob\", ndim = N, weight_decay = W, "
                                "lr_scale = S), got " +
                                    describe(*element));
      ok = false;
      continue;
    }
    SmallVector<StringRef> params = {"match", "ndim", "weight_decay",
                                     "lr_scale"};
    auto args = bindArgs(call->args, call->loc, "group", params);
    if (!args) {
      ok = false;
      continue;
    }
    std::string match;
    int64_t ndim = -1;
    double decay = weightDecay, lrScale = 1.0;
    bool groupOk = true;
    if (const Expr *arg = (*args)[0]) {
      std::optional<std::string> value = getString(*arg, "match");
      groupOk &= value.has_value();
      match = value.value_or("");
      if (value && value->empty()) {
        diags.error(arg->loc, "group match must not be empty");
        groupOk = false;
      } else if (value) {
        if (llvm::Error error = compileParamGlob(*value).takeError()) {
          diags.error(arg->loc, "group match \"" + *value +
                                    "\" is not a valid glob: " +
                                    llvm::toString(std::move(error)));
          groupOk = false;
        }
      }
    }
    if (const Expr *arg = (*args)[1]) {
      std::optional<int64_t> value = getInteger(*arg, "ndim");
      if (value && *value < 0) {
        diags.error(arg->loc,
                    "group ndim must be >= 0, got " + std::to_string(*value));
        value.reset();
      }
      groupOk &= value.has_value();
      ndim = value.value_or(-1);
    }
    auto number = [&](const Expr *arg, StringRef what, double &slot) {
      if (!arg)
        return;
      std::optional<double> value = getNumber(*arg, what);
      if (value && !(*value >= 0)) {
        diags.error(arg->loc, "group " + what + " must be >= 0, got " +
                                  formatDouble(*value));
        value.reset();
      }
      groupOk &= value.has_value();
      slot = value.value_or(slot);
    };
    number((*args)[2], "weight_decay", decay);
    number((*args)[3], "lr_scale", lrScale);
    if (groupOk && !(*args)[0] && !(*args)[1]) {
      diags.error(call->loc, "a group needs match = \"glob\" or ndim = N "
                             "to say which parameters it holds");
      groupOk = false;
    }
    ok &= groupOk;
    if (groupOk)
      result.push_back(ParamGroupAttr::get(context, match, ndim, APFloat(decay),
                                           APFloat(lrScale)));
  }
  if (!ok)
    return failure();
  groups = ArrayAttr::get(context, result);
  return success();
}

LogicalResult RecipeEmitter::checkParamGroups(Attribute optimizer,
                                              const Expr &groupsExpr) {
  const auto &list = cast<ListExpr>(groupsExpr);
  ParamGroupAssignment assignment = assignParamGroups(model, optimizer);
  // The name of a trainable parameter, to show what names look like.
  std::string example;
  for (ParamOp param : model.getBody().front().getOps<ParamOp>())
    if (!param.getFrozen()) {
      example = param.getSymName().str();
      break;
    }
  bool ok = true;
  for (auto [i, element] : llvm::enumerate(list.elements)) {
    std::string what =
        "group(" + assignment.groups[i + 1].attr.describe() + ")";
    if (assignment.matched[i] == 0) {
      diags.error(element->loc, what +
                                    " matches no trainable parameter of "
                                    "model '" +
                                    model.getSymName() + "'");
      if (!example.empty())
        diags.note(element->loc, "parameters are named like '" + example +
                                     "' (the path of the layer, then the "
                                     "parameter)");
      ok = false;
      continue;
    }
    if (assignment.groups[i + 1].members == 0) {
      diags.error(element->loc,
                  what + " is empty: every parameter it matches is in an "
                         "earlier group (the first group that matches a "
                         "parameter holds it)");
      // The earlier group that took the first of its matches.
      for (ParamOp param : model.getBody().front().getOps<ParamOp>()) {
        if (param.getFrozen() ||
            !assignment.groups[i + 1].attr.matches(
                param.getSymName(), param.getTensorType().getRank()))
          continue;
        unsigned holder = assignment.groupOf.lookup(param);
        diags.note(list.elements[holder - 1]->loc,
                   "'" + param.getSymName() + "' is in this group");
        break;
      }
      ok = false;
    }
  }
  return success(ok);
}

ScheduleAttr RecipeEmitter::getSchedule(const Expr &expr) {
  MLIRContext *context = &ctx.context;
  const auto *call = dyn_cast<CallExpr>(&expr);
  StringRef name = call                  ? StringRef(call->callee)
                   : isa<NameExpr>(expr) ? StringRef(cast<NameExpr>(expr).name)
                                         : StringRef();
  std::optional<ScheduleKind> kind = symbolizeScheduleKind(name);
  if (!kind) {
    diags.error(expr.loc,
                "unknown schedule " +
                    (call ? "'" + call->callee + "'" : describe(expr)) +
                    "; expected constant, linear(steps = N) or "
                    "cosine(steps = N)");
    return {};
  }
  if (*kind == ScheduleKind::constant) {
    if (call && !call->args.empty()) {
      diags.error(call->args[0].value->loc, "'constant' takes no arguments");
      return {};
    }
    // A constant rate has no horizon: training runs until `stop`.
    return ScheduleAttr::get(context, ScheduleKind::constant, 0,
                             std::numeric_limits<int64_t>::max(), APFloat(0.0));
  }
  if (!call) {
    diags.error(expr.loc, "'" + name + "' needs the number of steps: " + name +
                              "(steps = N)");
    return {};
  }
  SmallVector<StringRef> params = {"warmup", "steps"};
  if (*kind == ScheduleKind::cosine)
    params.push_back("min_lr");
  auto args = bindArgs(call->args, call->loc, name, params);
  if (!args)
    return {};
  if (!(*args)[1]) {
    diags.error(call->loc, "'" + name + "' needs the number of steps: " + name +
                               "(steps = N)");
    return {};
  }
  bool ok = true;
  int64_t warmup = 0;
  if (const Expr *arg = (*args)[0]) {
    std::optional<int64_t> value = getInteger(*arg, "warmup");
    if (value && *value < 0)
      diags.error(arg->loc, "schedule warmup must be >= 0, got " +
                                std::to_string(*value));
    ok &= value && *value >= 0;
    warmup = value.value_or(0);
  }
  const Expr *stepsArg = (*args)[1];
  std::optional<int64_t> steps = getInteger(*stepsArg, "steps");
  if (steps && *steps <= 0)
    diags.error(stepsArg->loc,
                "schedule steps must be > 0, got " + std::to_string(*steps));
  ok &= steps && *steps > 0;
  double minLr = 0;
  if (params.size() > 2 && (*args)[2]) {
    const Expr *arg = (*args)[2];
    std::optional<double> value = getNumber(*arg, "min_lr");
    if (value && !(*value >= 0))
      diags.error(arg->loc,
                  "schedule min_lr must be >= 0, got " + formatDouble(*value));
    ok &= value && *value >= 0;
    minLr = value.value_or(0);
  }
  if (!ok)
    return {};
  if (warmup > *steps) {
    diags.error((*args)[0]->loc, "schedule warmup (" + std::to_string(warmup) +
                                     " steps) is longer than the schedule (" +
                                     std::to_string(*steps) + " steps)");
    return {};
  }
  return ScheduleAttr::get(context, *kind, warmup, *steps, APFloat(minLr));
}

std::optional<int64_t> RecipeEmitter::getPositive(const Setting &setting) {
  std::optional<Literal> literal = getLiteral(*setting.value);
  if (!literal || !literal->isInteger || literal->intValue <= 0) {
    diags.error(setting.value->loc, "'" + setting.key +
                                        "' must be a positive integer, got " +
                                        describe(*setting.value));
    return std::nullopt;
  }
  return literal->intValue;
}

std::optional<StringRef> RecipeEmitter::getNearSetting(StringRef name) {
  if (llvm::is_contained(kBuiltinValues, name))
    return std::nullopt;
  for (StringRef key : kSettings) {
    // Short keys (`seed`) are a single edit away from ordinary words.
    unsigned allowed = key.size() >= 8 ? 2 : 1;
    if (name != key && name.edit_distance(key) <= allowed)
      return key;
  }
  return std::nullopt;
}

void RecipeEmitter::warnMisspeltSettings(
    const TrainDecl &train, const llvm::StringMap<const Setting *> &settings) {
  for (const StmtPtr &stmt : train.body) {
    const auto *let = dyn_cast<LetStmt>(stmt.get());
    if (!let || let->targets.size() != 1)
      continue;
    const LetStmt::Target &target = let->targets[0];
    std::optional<StringRef> near = getNearSetting(target.name);
    // A missing required setting has its note already.
    if (near && !settings.count(*near) &&
        !llvm::is_contained(kRequiredSettings, *near))
      diags.warning(target.loc, "'" + target.name +
                                    "' is a variable, not a train "
                                    "setting; did you mean '" +
                                    *near + "'?");
  }
}

void RecipeEmitter::warnUnusedConstants(const TrainDecl &train) {
  for (const StmtPtr &stmt : train.body) {
    const auto *let = dyn_cast<LetStmt>(stmt.get());
    if (!let || let->targets.size() != 1)
      continue;
    const LetStmt::Target &target = let->targets[0];
    if (getNearSetting(target.name))
      continue;
    auto it = scopes.front().find(target.name);
    bool constant =
        isa<NumberExpr, BoolExpr, SizeExpr, StringExpr>(*let->value);
    if (constant && it != scopes.front().end() && !it->second.used &&
        it->second.loc == target.loc)
      diags.warning(target.loc,
                    "'" + target.name +
                        "' is never used; it is not a train setting "
                        "(those are: " +
                        joinNames(kSettings) + ")");
  }
}

void RecipeEmitter::noteNearMiss(const TrainDecl &train, StringRef key) {
  for (const StmtPtr &stmt : train.body) {
    const auto *let = dyn_cast<LetStmt>(stmt.get());
    if (!let || let->targets.size() != 1)
      continue;
    StringRef name = let->targets[0].name;
    if (getNearSetting(name) == key) {
      diags.note(let->targets[0].loc,
                 "'" + name +
                     "' is a variable, not a setting; did you "
                     "mean '" +
                     key + "'?");
      return;
    }
  }
}

} // namespace md::frontend::recipe
