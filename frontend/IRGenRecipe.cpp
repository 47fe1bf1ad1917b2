//===- IRGenRecipe.cpp - the train recipe to md.train and its hooks -------===//
//
// Turns `train { ... }` into `md.train`: its settings become the op's
// attributes (data source, batch sizes, optimizer, schedule, seed, clipping),
// checked here at their .mdl locations before the attributes' own verifiers
// could complain; its statements become the ops of the `hooks` region, which
// runs after every step on every rank. Scalars are i64, f64 and i1 values of
// arith; the loss and reduced metrics are tensor<f32>. Rank-dependent control
// flow is kept as written: the desync checker judges it later.
//
//===----------------------------------------------------------------------===//

#include "frontend/ExprText.h"
#include "frontend/IRGenContext.h"
#include "frontend/Sema.h"

#include "dialect/MdOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Casting.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace md;
using namespace md::frontend;
using llvm::cast;
using llvm::dyn_cast;
using llvm::isa;

namespace {

const StringRef kSettings[] = {"data",     "global_batch",   "micro_batch",
                               "optimizer", "schedule",      "clip_grad_norm",
                               "seed",     "sync_batch_norm"};
const StringRef kRequiredSettings[] = {"data", "global_batch", "micro_batch",
                                       "optimizer"};
/// Values every hook can read without defining them.
const StringRef kBuiltinValues[] = {"rank", "local_rank", "world_size",
                                    "step", "epoch",      "loss"};
/// Functions of the recipe.
const StringRef kFunctions[] = {"mean",     "sum", "max",  "time", "exists",
                                "evaluate", "log", "print"};

std::string formatDouble(double value) { return formatNum(Num::real(value)); }

std::string describe(const Expr &expr) { return describeExpr(expr); }

/// A literal number, possibly negated: `3`, `-1`, `6e-4`.
struct Literal {
  bool isInteger;
  int64_t intValue;
  double floatValue;
};

std::optional<Literal> getLiteral(const Expr &expr) {
  if (const auto *number = dyn_cast<NumberExpr>(&expr))
    return Literal{number->isInteger, number->intValue, number->floatValue};
  if (const auto *unary = dyn_cast<UnaryExpr>(&expr))
    if (unary->op == UnaryOp::Neg)
      if (std::optional<Literal> inner = getLiteral(*unary->operand)) {
        if (inner->isInteger &&
            inner->intValue == std::numeric_limits<int64_t>::min())
          return std::nullopt;
        return Literal{inner->isInteger, -inner->intValue,
                       -inner->floatValue};
      }
  return std::nullopt;
}

/// The kinds of runtime values a hook computes with.
enum class Kind { Int, Float, Bool, Tensor };

const char *kindName(Kind kind) {
  switch (kind) {
  case Kind::Int:
    return "int";
  case Kind::Float:
    return "float";
  case Kind::Bool:
    return "bool";
  case Kind::Tensor:
    return "f32 tensor";
  }
  llvm_unreachable("unknown kind");
}

struct Typed {
  Value value;
  Kind kind;
};

class RecipeEmitter {
public:
  RecipeEmitter(ModelOp model, IRGenContext &ctx)
      : model(model), ctx(ctx), diags(ctx.diags), builder(&ctx.context) {}

  LogicalResult emit(const TrainDecl &train);

private:
  //===--------------------------------------------------------------------===//
  // Settings
  //===--------------------------------------------------------------------===//

  /// Binds `args` to `params` (positionally in order, then by name). Reports
  /// unknown names, repeats, and positional arguments after named ones.
  std::optional<SmallVector<const Expr *>>
  bindArgs(ArrayRef<Argument> args, SMLoc loc, StringRef callee,
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
                          (params.empty() ? std::string("no arguments")
                                          : "at most " +
                                                std::to_string(params.size()) +
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

  /// A literal number (any sign) for `what`; reports anything else.
  std::optional<double> getNumber(const Expr &expr, const Twine &what) {
    if (std::optional<Literal> literal = getLiteral(expr))
      return literal->floatValue;
    diags.error(expr.loc,
                "'" + what + "' must be a number, got " + describe(expr));
    return std::nullopt;
  }

  /// A literal integer (any sign) for `what`; reports anything else.
  std::optional<int64_t> getInteger(const Expr &expr, const Twine &what) {
    std::optional<Literal> literal = getLiteral(expr);
    if (literal && literal->isInteger)
      return literal->intValue;
    diags.error(expr.loc,
                "'" + what + "' must be an integer, got " + describe(expr));
    return std::nullopt;
  }

  std::optional<bool> getBool(const Expr &expr, const Twine &what) {
    if (const auto *value = dyn_cast<BoolExpr>(&expr))
      return value->value;
    diags.error(expr.loc,
                "'" + what + "' must be true or false, got " + describe(expr));
    return std::nullopt;
  }

  std::optional<std::string> getString(const Expr &expr, const Twine &what) {
    if (const auto *value = dyn_cast<StringExpr>(&expr))
      return value->value;
    diags.error(expr.loc,
                "'" + what + "' must be a string, got " + describe(expr));
    return std::nullopt;
  }

  /// `synthetic(seed = 0)`, `npy("path")`, `tokens("path"[, seq = N])`.
  DataAttr getDataSource(const Expr &expr, StringRef what) {
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
          diags.error(seed->loc, "'seed' must be >= 0, got " +
                                     std::to_string(*value));
          return {};
        }
        dataSeed = *value;
      }
      return DataAttr::get(context, DataKind::synthetic, "", dataSeed);
    }
    std::optional<DataKind> kind = llvm::StringSwitch<std::optional<DataKind>>(
                                       call->callee)
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
      diags.error(call->loc,
                  "'" + call->callee + "' needs a path: " + call->callee +
                      "(\"path\")");
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

  /// `tokens(..., seq = N)` must agree with the sequence length of the
  /// forward's first argument, which fixes the shape of a batch.
  LogicalResult checkSeq(const Expr &expr) {
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

  /// `adamw(lr, betas = (0.9, 0.999), eps = 1e-8, weight_decay = 0.01)` or
  /// `sgd(lr, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false)`.
  /// The ranges are those of #md.adamw and #md.sgd.
  Attribute getOptimizer(const Expr &expr) {
    const auto *call = dyn_cast<CallExpr>(&expr);
    StringRef name = call ? StringRef(call->callee)
                          : isa<NameExpr>(expr)
                              ? StringRef(cast<NameExpr>(expr).name)
                              : StringRef();
    if (name != "adamw" && name != "sgd") {
      diags.error(expr.loc, "unknown optimizer " +
                                (call ? "'" + call->callee + "'"
                                      : describe(expr)) +
                                "; expected adamw(lr = ...) or sgd(lr = ...)");
      return {};
    }
    if (!call) {
      diags.error(expr.loc, "'" + name + "' needs a learning rate: " + name +
                                "(lr = ...)");
      return {};
    }
    bool isAdamW = name == "adamw";
    SmallVector<StringRef> params =
        isAdamW ? SmallVector<StringRef>{"lr", "betas", "eps", "weight_decay"}
                : SmallVector<StringRef>{"lr", "momentum", "dampening",
                                         "weight_decay", "nesterov"};
    auto args = bindArgs(call->args, call->loc, name, params);
    if (!args)
      return {};
    if (!(*args)[0]) {
      diags.error(call->loc, "'" + name + "' needs a learning rate: " + name +
                                 "(lr = ...)");
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
        diags.error(arg->loc, name + " " + params[index] + " must be " +
                                  range + ", got " + formatDouble(*value));
        ok = false;
      }
      return *value;
    };
    auto nonNegative = [](double v) { return v >= 0; };
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
      if (!ok)
        return {};
      return AdamWAttr::get(context, APFloat(lr), APFloat(beta1),
                            APFloat(beta2), APFloat(eps),
                            APFloat(weightDecay));
    }
    double momentum = number(1, 0, nonNegative, ">= 0");
    double dampening = number(2, 0, [](double) { return true; }, "");
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
    if (!ok)
      return {};
    return SGDAttr::get(context, APFloat(lr), APFloat(momentum),
                        APFloat(dampening), APFloat(weightDecay), nesterov);
  }

  /// `constant`, `constant()`, `linear(warmup = 0, steps = N)`,
  /// `cosine(warmup = 0, steps = N, min_lr = 0.0)`.
  ScheduleAttr getSchedule(const Expr &expr) {
    MLIRContext *context = &ctx.context;
    const auto *call = dyn_cast<CallExpr>(&expr);
    StringRef name = call ? StringRef(call->callee)
                          : isa<NameExpr>(expr)
                              ? StringRef(cast<NameExpr>(expr).name)
                              : StringRef();
    std::optional<ScheduleKind> kind = symbolizeScheduleKind(name);
    if (!kind) {
      diags.error(expr.loc, "unknown schedule " +
                                (call ? "'" + call->callee + "'"
                                      : describe(expr)) +
                                "; expected constant, linear(steps = N) or "
                                "cosine(steps = N)");
      return {};
    }
    if (*kind == ScheduleKind::constant) {
      if (call && !call->args.empty()) {
        diags.error(call->args[0].value->loc,
                    "'constant' takes no arguments");
        return {};
      }
      // A constant rate has no horizon: training runs until `stop`.
      return ScheduleAttr::get(context, ScheduleKind::constant, 0,
                               std::numeric_limits<int64_t>::max(),
                               APFloat(0.0));
    }
    if (!call) {
      diags.error(expr.loc, "'" + name + "' needs the number of steps: " +
                                name + "(steps = N)");
      return {};
    }
    SmallVector<StringRef> params = {"warmup", "steps"};
    if (*kind == ScheduleKind::cosine)
      params.push_back("min_lr");
    auto args = bindArgs(call->args, call->loc, name, params);
    if (!args)
      return {};
    if (!(*args)[1]) {
      diags.error(call->loc, "'" + name + "' needs the number of steps: " +
                                 name + "(steps = N)");
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
      diags.error(stepsArg->loc, "schedule steps must be > 0, got " +
                                     std::to_string(*steps));
    ok &= steps && *steps > 0;
    double minLr = 0;
    if (params.size() > 2 && (*args)[2]) {
      const Expr *arg = (*args)[2];
      std::optional<double> value = getNumber(*arg, "min_lr");
      if (value && !(*value >= 0))
        diags.error(arg->loc, "schedule min_lr must be >= 0, got " +
                                  formatDouble(*value));
      ok &= value && *value >= 0;
      minLr = value.value_or(0);
    }
    if (!ok)
      return {};
    if (warmup > *steps) {
      diags.error((*args)[0]->loc,
                  "schedule warmup (" + std::to_string(warmup) +
                      " steps) is longer than the schedule (" +
                      std::to_string(*steps) + " steps)");
      return {};
    }
    return ScheduleAttr::get(context, *kind, warmup, *steps, APFloat(minLr));
  }

  /// A positive integer setting (`global_batch`, `micro_batch`).
  std::optional<int64_t> getPositive(const Setting &setting) {
    std::optional<Literal> literal = getLiteral(*setting.value);
    if (!literal || !literal->isInteger || literal->intValue <= 0) {
      diags.error(setting.value->loc, "'" + setting.key +
                                          "' must be a positive integer, got " +
                                          describe(*setting.value));
      return std::nullopt;
    }
    return literal->intValue;
  }

  /// The setting `name` is a near miss of, if any.
  static std::optional<StringRef> getNearSetting(StringRef name) {
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

  /// A top-level `key = value` whose key is no setting is a variable of the
  /// hooks. Warns where it looks like a misspelt setting.
  void warnMisspeltSettings(const TrainDecl &train,
                            const llvm::StringMap<const Setting *> &settings) {
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

  /// Warns about a top-level constant that nothing reads: most likely a
  /// setting md does not have (`steps = 1000`).
  void warnUnusedConstants(const TrainDecl &train) {
    for (const StmtPtr &stmt : train.body) {
      const auto *let = dyn_cast<LetStmt>(stmt.get());
      if (!let || let->targets.size() != 1)
        continue;
      const LetStmt::Target &target = let->targets[0];
      if (getNearSetting(target.name))
        continue;
      auto it = scopes.front().find(target.name);
      bool constant = isa<NumberExpr, BoolExpr, SizeExpr, StringExpr>(
          *let->value);
      if (constant && it != scopes.front().end() && !it->second.used &&
          it->second.loc == target.loc)
        diags.warning(target.loc,
                      "'" + target.name +
                          "' is never used; it is not a train setting "
                          "(those are: " +
                          joinNames(kSettings) + ")");
    }
  }

  /// Notes a top-level variable whose name is a near miss of `key`.
  void noteNearMiss(const TrainDecl &train, StringRef key) {
    for (const StmtPtr &stmt : train.body) {
      const auto *let = dyn_cast<LetStmt>(stmt.get());
      if (!let || let->targets.size() != 1)
        continue;
      StringRef name = let->targets[0].name;
      if (getNearSetting(name) == key) {
        diags.note(let->targets[0].loc,
                   "'" + name + "' is a variable, not a setting; did you "
                                "mean '" +
                       key + "'?");
        return;
      }
    }
  }

  //===--------------------------------------------------------------------===//
  // Hooks
  //===--------------------------------------------------------------------===//

  struct Binding {
    Typed value;
    SMLoc loc;
    bool used = false;
    /// The value when the let binds a literal (`n = 100`), so that a
    /// constant such as the period of `every` can name it.
    std::optional<Literal> literal;
  };

  Binding *lookup(StringRef name) {
    for (auto &scope : llvm::reverse(scopes)) {
      auto it = scope.find(name);
      if (it != scope.end())
        return &it->second;
    }
    return nullptr;
  }

  /// Binds `name` in the innermost scope unless it is taken.
  bool define(StringRef name, SMLoc loc, Typed value) {
    if (llvm::is_contained(kBuiltinValues, name)) {
      diags.error(loc, "'" + name + "' is a built-in value and cannot be "
                                    "redefined");
      return false;
    }
    if (const Binding *previous = lookup(name)) {
      diags.error(loc, "'" + name + "' is already defined");
      diags.note(previous->loc, "previous definition is here");
      return false;
    }
    scopes.back()[name] = Binding{value, loc};
    return true;
  }

  void emitBody(const Body &body) {
    scopes.emplace_back();
    for (const StmtPtr &stmt : body)
      emitStmt(*stmt);
    scopes.pop_back();
  }

  /// Runs `fn` with the insertion point before the terminator of `block`.
  template <typename Fn>
  void inBlock(Block *block, Fn fn) {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(block->getTerminator());
    fn();
  }

  void emitStmt(const Stmt &stmt) {
    Location loc = ctx.getLoc(stmt.loc);
    switch (stmt.kind) {
    case Stmt::Kind::Let: {
      const auto &let = cast<LetStmt>(stmt);
      if (let.targets.size() != 1) {
        diags.error(let.targets[1].loc,
                    "a recipe value is a single value; it cannot be "
                    "destructured into " +
                        std::to_string(let.targets.size()) + " names");
        return;
      }
      std::optional<Typed> value = emitExpr(*let.value);
      if (value && define(let.targets[0].name, let.targets[0].loc, *value))
        lookup(let.targets[0].name)->literal = getLiteral(*let.value);
      return;
    }
    case Stmt::Kind::Return:
      diags.error(stmt.loc, "'return' is not allowed in train; use 'stop' to "
                            "end training");
      return;
    case Stmt::Kind::Expr: {
      const Expr &expr = *cast<ExprStmt>(stmt).expr;
      const auto *call = dyn_cast<CallExpr>(&expr);
      if (call && (call->callee == "log" || call->callee == "print")) {
        emitLogOrPrint(*call);
        return;
      }
      if (call && call->callee == "evaluate") {
        (void)emitExpr(expr);
        return;
      }
      diags.error(expr.loc, "this expression has no effect; only log(...), "
                            "print(...) and evaluate(...) can stand alone");
      return;
    }
    case Stmt::Kind::If: {
      const auto &ifStmt = cast<IfStmt>(stmt);
      std::optional<Typed> cond = emitExpr(*ifStmt.condition);
      if (cond && cond->kind != Kind::Bool) {
        diags.error(ifStmt.condition->loc,
                    "the condition of 'if' must be a bool, got " +
                        Twine(kindName(cond->kind)));
        cond.reset();
      }
      if (!cond) {
        // Check the branches all the same, into a block that is dropped.
        emitDetached(ifStmt.thenBody);
        emitDetached(ifStmt.elseBody);
        return;
      }
      auto op = IfOp::create(builder, loc, TypeRange(), cond->value,
                             ifStmt.hasElse);
      inBlock(op.thenBlock(), [&] { emitBody(ifStmt.thenBody); });
      if (ifStmt.hasElse)
        inBlock(op.elseBlock(), [&] { emitBody(ifStmt.elseBody); });
      return;
    }
    case Stmt::Kind::For: {
      const auto &forStmt = cast<ForStmt>(stmt);
      std::optional<Typed> lo = emitExpr(*forStmt.lo);
      std::optional<Typed> hi = emitExpr(*forStmt.hi);
      bool ok = lo && hi;
      for (auto [bound, expr] :
           {std::pair(&lo, forStmt.lo.get()), std::pair(&hi, forStmt.hi.get())})
        if (*bound && (*bound)->kind != Kind::Int) {
          diags.error(expr->loc, "the bounds of 'for' must be ints, got " +
                                     Twine(kindName((*bound)->kind)));
          ok = false;
        }
      if (!ok) {
        // Check the body all the same, with the variable bound to a
        // placeholder, into a block that is dropped.
        Block scratch;
        OpBuilder::InsertionGuard guard(builder);
        builder.setInsertionPointToEnd(&scratch);
        Value placeholder = arith::ConstantIntOp::create(
            builder, loc, builder.getI64Type(), 0);
        emitLoopBody(forStmt, placeholder);
        return;
      }
      auto op = ForOp::create(builder, loc, lo->value, hi->value);
      Block *body = &op.getBody().front();
      body->getArgument(0).setLoc(ctx.getLoc(forStmt.varLoc));
      inBlock(body, [&] { emitLoopBody(forStmt, op.getInductionVar()); });
      return;
    }
    case Stmt::Kind::Every: {
      const auto &every = cast<EveryStmt>(stmt);
      std::optional<int64_t> period = getPeriod(*every.period);
      std::optional<PeriodUnit> unit =
          llvm::StringSwitch<std::optional<PeriodUnit>>(every.unit)
              .Case("step", PeriodUnit::steps)
              .Case("steps", PeriodUnit::steps)
              .Case("second", PeriodUnit::seconds)
              .Case("seconds", PeriodUnit::seconds)
              .Case("minute", PeriodUnit::minutes)
              .Case("minutes", PeriodUnit::minutes)
              .Default(std::nullopt);
      if (!unit)
        diags.error(every.unitLoc, "unknown unit '" + every.unit +
                                       "' in 'every'; expected steps, "
                                       "seconds or minutes");
      if (!period || !unit) {
        emitDetached(every.body);
        return;
      }
      auto op = EveryOp::create(builder, loc, static_cast<uint64_t>(*period),
                                *unit, /*rank0_only=*/false);
      EveryOp::ensureTerminator(op.getBody(), builder, loc);
      inBlock(&op.getBody().front(), [&] { emitBody(every.body); });
      return;
    }
    case Stmt::Kind::Stop:
      ExitOp::create(builder, loc, StringAttr());
      return;
    case Stmt::Kind::Save:
      emitSave(cast<SaveStmt>(stmt));
      return;
    }
  }

  /// The body of `for`, with its variable bound to `inductionVar`.
  void emitLoopBody(const ForStmt &forStmt, Value inductionVar) {
    scopes.emplace_back();
    if (define(forStmt.var, forStmt.varLoc, Typed{inductionVar, Kind::Int}))
      for (const StmtPtr &inner : forStmt.body)
        emitStmt(*inner);
    scopes.pop_back();
  }

  /// Checks `body` without keeping its ops (after an error in the statement
  /// that holds it).
  void emitDetached(const Body &body) {
    Block scratch;
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToEnd(&scratch);
    emitBody(body);
  }

  /// The period of `every`: a constant positive integer.
  std::optional<int64_t> getPeriod(const Expr &expr) {
    std::optional<Literal> literal = getLiteral(expr);
    if (const auto *name = dyn_cast<NameExpr>(&expr))
      if (Binding *binding = lookup(name->name); binding && binding->literal) {
        binding->used = true;
        literal = binding->literal;
      }
    if (!literal) {
      diags.error(expr.loc, "the period of 'every' must be a constant "
                            "integer, got " +
                                describe(expr));
      return std::nullopt;
    }
    if (!literal->isInteger) {
      diags.error(expr.loc, "the period of 'every' must be an integer, got " +
                                describe(expr));
      return std::nullopt;
    }
    if (literal->intValue <= 0) {
      diags.error(expr.loc, "the period of 'every' must be positive, got " +
                                describe(expr));
      return std::nullopt;
    }
    return literal->intValue;
  }

  /// `save checkpoint(full|sharded [, "dir"])`.
  void emitSave(const SaveStmt &save) {
    auto usage = [&](SMLoc loc) {
      diags.error(loc, "expected checkpoint(full) or checkpoint(sharded), "
                       "optionally with a directory: checkpoint(full, "
                       "\"dir\")");
    };
    if (save.args.empty() || save.args.size() > 2) {
      usage(save.args.size() > 2 ? save.args[2].value->loc : save.loc);
      return;
    }
    for (const Argument &arg : save.args)
      if (!arg.name.empty()) {
        diags.error(arg.nameLoc, "checkpoint(...) takes no named arguments, "
                                 "got '" +
                                     arg.name + "'");
        return;
      }
    const Expr &format = *save.args[0].value;
    const auto *name = dyn_cast<NameExpr>(&format);
    std::optional<CheckpointFormat> kind;
    if (name)
      kind = symbolizeCheckpointFormat(name->name);
    if (!kind) {
      diags.error(format.loc, "the checkpoint format must be full or "
                              "sharded, got " +
                                  describe(format));
      return;
    }
    StringAttr path;
    if (save.args.size() == 2) {
      const Expr &dir = *save.args[1].value;
      const auto *value = dyn_cast<StringExpr>(&dir);
      if (!value) {
        diags.error(dir.loc, "the checkpoint directory must be a string, "
                             "got " +
                                 describe(dir));
        return;
      }
      if (value->value.empty()) {
        diags.error(dir.loc, "the checkpoint directory is empty");
        return;
      }
      path = builder.getStringAttr(value->value);
    }
    SaveOp::create(builder, ctx.getLoc(save.loc),
                   CheckpointFormatAttr::get(&ctx.context, *kind), path,
                   UnitAttr());
  }

  /// `log(name, values...)` and `print(message, values...)`.
  void emitLogOrPrint(const CallExpr &call) {
    bool isLog = call.callee == "log";
    if (call.args.empty() || (isLog && call.args.size() < 2)) {
      diags.error(call.loc, isLog ? "log needs a name and at least one "
                                    "value: log(\"name\", value, ...)"
                                  : "print needs a message: print(\"message\", "
                                    "value, ...)");
      return;
    }
    bool ok = true;
    for (const Argument &arg : call.args)
      if (!arg.name.empty()) {
        diags.error(arg.nameLoc, "'" + call.callee +
                                     "' takes no named arguments, got '" +
                                     arg.name + "'");
        ok = false;
      }
    if (!ok)
      return;
    const auto *tag = dyn_cast<StringExpr>(call.args[0].value.get());
    if (!tag) {
      diags.error(call.args[0].value->loc,
                  "the first argument of '" + call.callee +
                      "' must be a string, got " +
                      describe(*call.args[0].value));
      ok = false;
    }
    SmallVector<Value> values;
    for (const Argument &arg : ArrayRef(call.args).drop_front()) {
      std::optional<Typed> value = emitExpr(*arg.value);
      if (!value) {
        ok = false;
        continue;
      }
      values.push_back(value->value);
    }
    if (!ok)
      return;
    Location loc = ctx.getLoc(call.loc);
    if (isLog)
      LogOp::create(builder, loc, builder.getStringAttr(tag->value), values,
                    UnitAttr());
    else
      PrintOp::create(builder, loc, builder.getStringAttr(tag->value), values,
                      UnitAttr());
  }

  //===--------------------------------------------------------------------===//
  // Expressions
  //===--------------------------------------------------------------------===//

  std::optional<Typed> emitExpr(const Expr &expr) {
    Location loc = ctx.getLoc(expr.loc);
    switch (expr.kind) {
    case Expr::Kind::Number: {
      const auto &number = cast<NumberExpr>(expr);
      if (number.isInteger)
        return Typed{arith::ConstantIntOp::create(builder, loc,
                                                  builder.getI64Type(),
                                                  number.intValue),
                     Kind::Int};
      return Typed{arith::ConstantFloatOp::create(
                       builder, loc, builder.getF64Type(),
                       APFloat(number.floatValue)),
                   Kind::Float};
    }
    case Expr::Kind::Bool:
      return Typed{arith::ConstantIntOp::create(builder, loc,
                                                builder.getI1Type(),
                                                cast<BoolExpr>(expr).value),
                   Kind::Bool};
    case Expr::Kind::Name:
      return emitName(cast<NameExpr>(expr));
    case Expr::Kind::Call:
      return emitCall(cast<CallExpr>(expr));
    case Expr::Kind::Unary:
      return emitUnary(cast<UnaryExpr>(expr));
    case Expr::Kind::Binary:
      return emitBinary(cast<BinaryExpr>(expr));
    case Expr::Kind::String:
      diags.error(expr.loc, "a string is not a value here; strings are the "
                            "first argument of log and print, and the "
                            "argument of exists");
      return std::nullopt;
    case Expr::Kind::Member:
      diags.error(expr.loc, "'" + describe(*cast<MemberExpr>(expr).base) +
                                "." + cast<MemberExpr>(expr).member +
                                "' is not a value of the recipe: hooks read "
                                "rank, local_rank, world_size, step, epoch "
                                "and loss, not parameters");
      return std::nullopt;
    default:
      diags.error(expr.loc, describe(expr) + " is not a value of the recipe");
      return std::nullopt;
    }
  }

  std::optional<Typed> emitName(const NameExpr &name) {
    if (Binding *binding = lookup(name.name)) {
      binding->used = true;
      return binding->value;
    }
    Location loc = ctx.getLoc(name.loc);
    Type i64 = builder.getI64Type();
    if (name.name == "rank")
      return Typed{RankOp::create(builder, loc, i64), Kind::Int};
    if (name.name == "local_rank")
      return Typed{LocalRankOp::create(builder, loc, i64), Kind::Int};
    if (name.name == "world_size")
      return Typed{WorldSizeOp::create(builder, loc, i64), Kind::Int};
    if (name.name == "step")
      return Typed{StepOp::create(builder, loc, i64), Kind::Int};
    if (name.name == "epoch")
      return Typed{EpochOp::create(builder, loc, i64), Kind::Int};
    if (name.name == "loss")
      return Typed{LossOp::create(builder, loc, getScalarTensorType()),
                   Kind::Tensor};
    if (llvm::is_contained(kFunctions, name.name)) {
      diags.error(name.loc, "'" + name.name + "' is a function; call it: " +
                                name.name + "(...)");
      return std::nullopt;
    }
    diags.error(name.loc, "'" + name.name + "' is not defined");
    return std::nullopt;
  }

  RankedTensorType getScalarTensorType() {
    return RankedTensorType::get({}, builder.getF32Type());
  }

  /// Checks that `call` has exactly `count` positional arguments.
  bool checkPositional(const CallExpr &call, size_t count,
                       StringRef usage) {
    for (const Argument &arg : call.args)
      if (!arg.name.empty()) {
        diags.error(arg.nameLoc, "'" + call.callee +
                                     "' takes no named arguments, got '" +
                                     arg.name + "'");
        return false;
      }
    if (call.args.size() == count)
      return true;
    diags.error(call.loc, "'" + call.callee + "' takes " +
                              std::to_string(count) + " argument" +
                              (count == 1 ? "" : "s") + ", got " +
                              std::to_string(call.args.size()) + ": " + usage);
    return false;
  }

  std::optional<Typed> emitCall(const CallExpr &call) {
    Location loc = ctx.getLoc(call.loc);
    StringRef callee = call.callee;
    if (callee == "mean" || callee == "sum" || callee == "max") {
      if (!checkPositional(call, 1, (callee + "(value)").str()))
        return std::nullopt;
      const Expr &arg = *call.args[0].value;
      std::optional<Typed> value = emitExpr(arg);
      if (!value)
        return std::nullopt;
      if (value->kind == Kind::Bool) {
        diags.error(arg.loc, "'" + callee + "' reduces numbers, got bool");
        return std::nullopt;
      }
      ReductionKind reduction = callee == "mean"  ? ReductionKind::avg
                                : callee == "sum" ? ReductionKind::sum
                                                  : ReductionKind::max;
      Value tensor = toTensor(*value, ctx.getLoc(arg.loc));
      Value reduced = AllReduceOp::create(builder, loc, tensor.getType(),
                                          Group::world, IntegerAttr(), tensor,
                                          reduction);
      return Typed{reduced, Kind::Tensor};
    }
    if (callee == "time") {
      if (!checkPositional(call, 0, "time()"))
        return std::nullopt;
      return Typed{WallTimeOp::create(builder, loc, builder.getF64Type()),
                   Kind::Float};
    }
    if (callee == "exists") {
      if (!checkPositional(call, 1, "exists(\"path\")"))
        return std::nullopt;
      const Expr &arg = *call.args[0].value;
      std::optional<std::string> path = getString(arg, "path");
      if (!path)
        return std::nullopt;
      if (path->empty()) {
        diags.error(arg.loc, "the path of 'exists' is empty");
        return std::nullopt;
      }
      return Typed{FileExistsOp::create(builder, loc, builder.getI1Type(),
                                        builder.getStringAttr(*path)),
                   Kind::Bool};
    }
    if (callee == "evaluate")
      return emitEvaluate(call);
    if (callee == "log" || callee == "print") {
      diags.error(call.loc, "'" + callee + "' has no value; call it as a "
                                           "statement");
      return std::nullopt;
    }
    static const StringRef settingValues[] = {
        "adamw",  "sgd",       "constant", "linear",
        "cosine", "synthetic", "npy",      "tokens"};
    if (llvm::is_contained(settingValues, callee)) {
      diags.error(call.loc, "'" + callee + "(...)' is the value of a train "
                                           "setting, not a value of the "
                                           "hooks");
      return std::nullopt;
    }
    diags.error(call.loc, "unknown function '" + callee +
                              "'; expected one of: " + joinNames(kFunctions));
    return std::nullopt;
  }

  /// `evaluate(<data source>[, batches = N])`.
  std::optional<Typed> emitEvaluate(const CallExpr &call) {
    auto args = bindArgs(call.args, call.loc, "evaluate", {"data", "batches"});
    if (!args)
      return std::nullopt;
    if (!(*args)[0]) {
      diags.error(call.loc, "'evaluate' needs a data source: "
                            "evaluate(tokens(\"path\"))");
      return std::nullopt;
    }
    DataAttr data = getDataSource(*(*args)[0], "evaluate");
    IntegerAttr batches;
    if (const Expr *arg = (*args)[1]) {
      std::optional<Literal> literal = getLiteral(*arg);
      if (!literal || !literal->isInteger || literal->intValue <= 0) {
        diags.error(arg->loc, "'batches' must be a positive integer, got " +
                                  describe(*arg));
        return std::nullopt;
      }
      batches = builder.getI64IntegerAttr(literal->intValue);
    }
    if (!data)
      return std::nullopt;
    auto op = EvaluateOp::create(builder, ctx.getLoc(call.loc),
                                 getScalarTensorType(), getForwardSymbol(),
                                 data, batches, UnitAttr());
    return Typed{op.getResult(), Kind::Tensor};
  }

  FlatSymbolRefAttr getForwardSymbol() {
    ForwardOp forward = model.getForward();
    return FlatSymbolRefAttr::get(&ctx.context,
                                  forward ? forward.getSymName() : "forward");
  }

  /// A number as f64: ints convert, f32 tensors are read.
  Value toF64(Typed value, Location loc) {
    switch (value.kind) {
    case Kind::Float:
      return value.value;
    case Kind::Int:
      return arith::SIToFPOp::create(builder, loc, builder.getF64Type(),
                                     value.value);
    case Kind::Tensor: {
      Value scalar =
          tensor::ExtractOp::create(builder, loc, value.value, ValueRange());
      return arith::ExtFOp::create(builder, loc, builder.getF64Type(),
                                   scalar);
    }
    case Kind::Bool:
      break;
    }
    llvm_unreachable("a bool is not a number");
  }

  /// A number as tensor<f32>, the operand of a reduction over ranks.
  Value toTensor(Typed value, Location loc) {
    if (value.kind == Kind::Tensor)
      return value.value;
    Value f32;
    if (value.kind == Kind::Int)
      f32 = arith::SIToFPOp::create(builder, loc, builder.getF32Type(),
                                    value.value);
    else
      f32 = arith::TruncFOp::create(builder, loc, builder.getF32Type(),
                                    value.value);
    return tensor::FromElementsOp::create(builder, loc, getScalarTensorType(),
                                          ValueRange{f32});
  }

  std::optional<Typed> emitUnary(const UnaryExpr &unary) {
    std::optional<Typed> operand = emitExpr(*unary.operand);
    if (!operand)
      return std::nullopt;
    Location loc = ctx.getLoc(unary.loc);
    if (unary.op == UnaryOp::Not) {
      if (operand->kind != Kind::Bool) {
        diags.error(unary.operand->loc, "'not' needs a bool, got " +
                                            Twine(kindName(operand->kind)));
        return std::nullopt;
      }
      Value one = arith::ConstantIntOp::create(builder, loc,
                                               builder.getI1Type(), 1);
      return Typed{arith::XOrIOp::create(builder, loc, operand->value, one),
                   Kind::Bool};
    }
    if (operand->kind == Kind::Bool) {
      diags.error(unary.operand->loc, "'-' needs a number, got bool");
      return std::nullopt;
    }
    if (operand->kind == Kind::Int) {
      Value zero = arith::ConstantIntOp::create(builder, loc,
                                                builder.getI64Type(), 0);
      return Typed{arith::SubIOp::create(builder, loc, zero, operand->value),
                   Kind::Int};
    }
    Value value = toF64(*operand, ctx.getLoc(unary.operand->loc));
    return Typed{arith::NegFOp::create(builder, loc, value),
                 Kind::Float};
  }

  std::optional<Typed> emitBinary(const BinaryExpr &binary) {
    std::optional<Typed> lhs = emitExpr(*binary.lhs);
    std::optional<Typed> rhs = emitExpr(*binary.rhs);
    if (!lhs || !rhs)
      return std::nullopt;
    Location loc = ctx.getLoc(binary.opLoc);
    std::string op = binaryOpSpelling(binary.op);
    auto mismatch = [&](StringRef needs) -> std::optional<Typed> {
      diags.error(binary.opLoc, "'" + op + "' needs " + needs + ", got " +
                                    kindName(lhs->kind) + " and " +
                                    kindName(rhs->kind));
      return std::nullopt;
    };
    bool lhsBool = lhs->kind == Kind::Bool, rhsBool = rhs->kind == Kind::Bool;
    bool bothInt = lhs->kind == Kind::Int && rhs->kind == Kind::Int;

    switch (binary.op) {
    case BinaryOp::And:
    case BinaryOp::Or:
      if (!lhsBool || !rhsBool)
        return mismatch("two bools");
      // Both sides are always evaluated: a short circuit would skip a
      // collective on some ranks.
      if (binary.op == BinaryOp::And)
        return Typed{arith::AndIOp::create(builder, loc, lhs->value,
                                           rhs->value),
                     Kind::Bool};
      return Typed{arith::OrIOp::create(builder, loc, lhs->value, rhs->value),
                   Kind::Bool};
    case BinaryOp::MatMul:
      diags.error(binary.opLoc, "'@' is not defined on recipe values");
      return std::nullopt;
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::Mul:
    case BinaryOp::Div: {
      if (lhsBool || rhsBool)
        return mismatch("numbers");
      if (bothInt) {
        Value result;
        if (binary.op == BinaryOp::Add)
          result = arith::AddIOp::create(builder, loc, lhs->value, rhs->value);
        else if (binary.op == BinaryOp::Sub)
          result = arith::SubIOp::create(builder, loc, lhs->value, rhs->value);
        else if (binary.op == BinaryOp::Mul)
          result = arith::MulIOp::create(builder, loc, lhs->value, rhs->value);
        else
          result =
              arith::DivSIOp::create(builder, loc, lhs->value, rhs->value);
        return Typed{result, Kind::Int};
      }
      Value a = toF64(*lhs, ctx.getLoc(binary.lhs->loc)),
            b = toF64(*rhs, ctx.getLoc(binary.rhs->loc));
      Value result;
      if (binary.op == BinaryOp::Add)
        result = arith::AddFOp::create(builder, loc, a, b);
      else if (binary.op == BinaryOp::Sub)
        result = arith::SubFOp::create(builder, loc, a, b);
      else if (binary.op == BinaryOp::Mul)
        result = arith::MulFOp::create(builder, loc, a, b);
      else
        result = arith::DivFOp::create(builder, loc, a, b);
      return Typed{result, Kind::Float};
    }
    default:
      break;
    }

    // Comparisons.
    bool equality = binary.op == BinaryOp::Eq || binary.op == BinaryOp::Ne;
    if (lhsBool || rhsBool) {
      if (!(lhsBool && rhsBool) || !equality)
        return mismatch(equality ? "two bools or two numbers" : "numbers");
      auto predicate = binary.op == BinaryOp::Eq ? arith::CmpIPredicate::eq
                                                 : arith::CmpIPredicate::ne;
      return Typed{arith::CmpIOp::create(builder, loc, predicate, lhs->value,
                                         rhs->value),
                   Kind::Bool};
    }
    if (bothInt) {
      arith::CmpIPredicate predicate;
      switch (binary.op) {
      case BinaryOp::Eq:
        predicate = arith::CmpIPredicate::eq;
        break;
      case BinaryOp::Ne:
        predicate = arith::CmpIPredicate::ne;
        break;
      case BinaryOp::Lt:
        predicate = arith::CmpIPredicate::slt;
        break;
      case BinaryOp::Le:
        predicate = arith::CmpIPredicate::sle;
        break;
      case BinaryOp::Gt:
        predicate = arith::CmpIPredicate::sgt;
        break;
      default:
        predicate = arith::CmpIPredicate::sge;
        break;
      }
      return Typed{arith::CmpIOp::create(builder, loc, predicate, lhs->value,
                                         rhs->value),
                   Kind::Bool};
    }
    // Ordered comparisons are false on NaN; `!=` is true on NaN, so that
    // `loss != loss` detects it.
    arith::CmpFPredicate predicate;
    switch (binary.op) {
    case BinaryOp::Eq:
      predicate = arith::CmpFPredicate::OEQ;
      break;
    case BinaryOp::Ne:
      predicate = arith::CmpFPredicate::UNE;
      break;
    case BinaryOp::Lt:
      predicate = arith::CmpFPredicate::OLT;
      break;
    case BinaryOp::Le:
      predicate = arith::CmpFPredicate::OLE;
      break;
    case BinaryOp::Gt:
      predicate = arith::CmpFPredicate::OGT;
      break;
    default:
      predicate = arith::CmpFPredicate::OGE;
      break;
    }
    Value a = toF64(*lhs, ctx.getLoc(binary.lhs->loc)),
          b = toF64(*rhs, ctx.getLoc(binary.rhs->loc));
    return Typed{arith::CmpFOp::create(builder, loc, predicate, a, b),
                 Kind::Bool};
  }

  ModelOp model;
  IRGenContext &ctx;
  Diagnostics &diags;
  OpBuilder builder;
  SmallVector<llvm::StringMap<Binding>> scopes;
};

LogicalResult RecipeEmitter::emit(const TrainDecl &train) {
  unsigned errors = diags.getNumErrors();

  // Settings: each known, each once.
  llvm::StringMap<const Setting *> settings;
  for (const Setting &setting : train.settings) {
    if (!llvm::is_contained(kSettings, setting.key)) {
      diags.error(setting.keyLoc, "unknown train setting '" + setting.key +
                                      "'; expected one of: " +
                                      joinNames(kSettings));
      continue;
    }
    auto [it, inserted] = settings.try_emplace(setting.key, &setting);
    if (!inserted) {
      diags.error(setting.keyLoc,
                  "train setting '" + setting.key + "' is set twice");
      diags.note(it->second->keyLoc, "previous definition is here");
    }
  }
  for (StringRef key : kRequiredSettings)
    if (!settings.count(key)) {
      diags.error(train.loc, "train is missing the required setting '" + key +
                                 "'");
      noteNearMiss(train, key);
    }
  auto get = [&](StringRef key) -> const Setting * {
    return settings.lookup(key);
  };

  DataAttr data;
  if (const Setting *s = get("data"))
    data = getDataSource(*s->value, "data");
  std::optional<int64_t> global, micro;
  if (const Setting *s = get("global_batch"))
    global = getPositive(*s);
  if (const Setting *s = get("micro_batch"))
    micro = getPositive(*s);
  if (global && micro) {
    const Setting *globalSetting = get("global_batch");
    std::optional<uint64_t> world = model.getWorldSize();
    if (*global % *micro != 0) {
      diags.error(globalSetting->value->loc,
                  "global_batch " + std::to_string(*global) +
                      " is not a multiple of micro_batch " +
                      std::to_string(*micro));
      diags.note(get("micro_batch")->value->loc, "micro_batch is set here");
    } else if (world && *global % (*micro * static_cast<int64_t>(*world))) {
      int64_t w = static_cast<int64_t>(*world);
      diags.error(globalSetting->value->loc,
                  "global_batch " + std::to_string(*global) +
                      " is not a multiple of micro_batch x world size = " +
                      std::to_string(*micro) + " x " + std::to_string(w) +
                      " = " + std::to_string(*micro * w));
    }
  }
  Attribute optimizer;
  if (const Setting *s = get("optimizer"))
    optimizer = getOptimizer(*s->value);
  ScheduleAttr schedule = ScheduleAttr::get(
      &ctx.context, ScheduleKind::constant, 0,
      std::numeric_limits<int64_t>::max(), APFloat(0.0));
  if (const Setting *s = get("schedule"))
    schedule = getSchedule(*s->value);
  int64_t seed = 0;
  if (const Setting *s = get("seed")) {
    std::optional<Literal> literal = getLiteral(*s->value);
    if (!literal || !literal->isInteger || literal->intValue < 0)
      diags.error(s->value->loc, "'seed' must be a non-negative integer, "
                                 "got " +
                                     describe(*s->value));
    else
      seed = literal->intValue;
  }
  FloatAttr clip;
  if (const Setting *s = get("clip_grad_norm")) {
    std::optional<Literal> literal = getLiteral(*s->value);
    if (!literal || !(literal->floatValue > 0))
      diags.error(s->value->loc, "'clip_grad_norm' must be a positive "
                                 "number, got " +
                                     describe(*s->value));
    else
      clip = builder.getF64FloatAttr(literal->floatValue);
  }
  bool syncBatchNorm = false;
  if (const Setting *s = get("sync_batch_norm"))
    syncBatchNorm = getBool(*s->value, "sync_batch_norm").value_or(false);

  if (!model.getForward() && !diags.hasErrors())
    diags.error(train.loc, "model '" + model.getSymName() +
                               "' has no forward function to train");

  // Hooks, into a region of their own until md.train exists.
  Region hooks;
  hooks.push_back(new Block());
  builder.setInsertionPointToEnd(&hooks.front());
  scopes.emplace_back();
  warnMisspeltSettings(train, settings);
  for (const StmtPtr &stmt : train.body)
    emitStmt(*stmt);
  if (diags.getNumErrors() == errors)
    warnUnusedConstants(train);
  scopes.clear();

  if (diags.getNumErrors() != errors)
    return failure();

  builder.setInsertionPointToEnd(&model.getBody().front());
  auto op = TrainOp::create(
      builder, ctx.getLoc(train.loc), getForwardSymbol(), data,
      builder.getI64IntegerAttr(*global), builder.getI64IntegerAttr(*micro),
      optimizer, schedule, builder.getI64IntegerAttr(seed), clip,
      syncBatchNorm ? builder.getUnitAttr() : UnitAttr());
  op.getStep().push_back(new Block());
  op.getHooks().takeBody(hooks);
  return success();
}

} // namespace

LogicalResult md::frontend::emitTrain(const TrainDecl &train, ModelOp model,
                                      IRGenContext &ctx) {
  // A plan that runs on one rank pins W = 1, where resolvePlan could not
  // (generateIR did not hand it the model op).
  if (PlanAttr plan = model.getPlanAttr(); plan && plan.isSingleRank()) {
    std::optional<uint64_t> world = model.getWorldSize();
    if (world && *world != 1) {
      ctx.diags.error(SMLoc(), "plan '" + plan.getName() +
                                   "' runs on one rank, but the world size "
                                   "is pinned to " +
                                   Twine(*world));
      return failure();
    }
    model.setWorldSize(1);
  }
  return RecipeEmitter(model, ctx).emit(train);
}
