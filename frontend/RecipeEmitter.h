//===- RecipeEmitter.h - the generator of md.train --------------*- C++ -*-===//
//
// Private to frontend/. `train { ... }` becomes `md.train` through one class,
// RecipeEmitter, whose members are defined by concern:
//
//   IRGenRecipe.cpp          the driver: settings to attributes, md.train;
//   IRGenRecipeSettings.cpp  the settings: data source, optimizer, schedule,
//                            batch sizes, near misses of setting names;
//   IRGenRecipeHooks.cpp     the statements of the hooks region;
//   IRGenRecipeExprs.cpp     the expressions of the hooks: names, calls,
//                            unary and binary operators on typed scalars.
//
// This header holds the class, the recipe's vocabulary and its value kinds.
//
//===----------------------------------------------------------------------===//

#ifndef MD_FRONTEND_RECIPEEMITTER_H
#define MD_FRONTEND_RECIPEEMITTER_H

#include "frontend/ExprText.h"
#include "frontend/IRGenContext.h"
#include "frontend/Sema.h"

#include "dialect/MdOps.h"
#include "runtime/core/EnumNames.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Casting.h"

#include <limits>
#include <optional>
#include <string>

namespace md::frontend::recipe {

using namespace mlir;
using llvm::cast;
using llvm::dyn_cast;
using llvm::isa;

inline const StringRef kSettings[] = {
    "data",     "global_batch",   "micro_batch", "optimizer",
    "schedule", "clip_grad_norm", "seed",        "sync_batch_norm",
    "freeze"};
inline const StringRef kRequiredSettings[] = {"data", "global_batch",
                                              "micro_batch", "optimizer"};
/// Values every hook can read without defining them.
inline const StringRef kBuiltinValues[] = {"rank", "local_rank", "world_size",
                                           "step", "epoch",      "loss"};
/// Functions of the recipe.
inline const StringRef kFunctions[] = {"mean",     "sum", "max",   "min",
                                       "any",      "all", "time",  "exists",
                                       "evaluate", "log", "print", "fail"};

inline std::string formatDouble(double value) {
  return formatNum(Num::real(value));
}

inline std::string describe(const Expr &expr) { return describeExpr(expr); }

/// A literal number, possibly negated: `3`, `-1`, `6e-4`.
struct Literal {
  bool isInteger;
  int64_t intValue;
  double floatValue;
};

inline std::optional<Literal> getLiteral(const Expr &expr) {
  if (const auto *number = dyn_cast<NumberExpr>(&expr))
    return Literal{number->isInteger, number->intValue, number->floatValue};
  if (const auto *unary = dyn_cast<UnaryExpr>(&expr))
    if (unary->op == UnaryOp::Neg)
      if (std::optional<Literal> inner = getLiteral(*unary->operand)) {
        if (inner->isInteger &&
            inner->intValue == std::numeric_limits<int64_t>::min())
          return std::nullopt;
        return Literal{inner->isInteger, -inner->intValue, -inner->floatValue};
      }
  return std::nullopt;
}

/// The kinds of runtime values a hook computes with.
enum class Kind { Int, Float, Bool, Tensor };

inline constexpr const char *kKindNames[] = {"int", "float", "bool",
                                             "f32 tensor"};
static_assert(md::runtime::namesEveryValue(kKindNames, Kind::Tensor));

inline const char *kindName(Kind kind) {
  return md::runtime::enumName(kKindNames, kind);
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
  std::optional<SmallVector<const Expr *>> bindArgs(ArrayRef<Argument> args,
                                                    SMLoc loc, StringRef callee,
                                                    ArrayRef<StringRef> params);

  /// A literal number (any sign) for `what`; reports anything else.
  std::optional<double> getNumber(const Expr &expr, const Twine &what);

  /// A literal integer (any sign) for `what`; reports anything else.
  std::optional<int64_t> getInteger(const Expr &expr, const Twine &what);

  std::optional<bool> getBool(const Expr &expr, const Twine &what);

  std::optional<std::string> getString(const Expr &expr, const Twine &what);

  /// `synthetic(seed = 0)`, `npy("path")`, `tokens("path"[, seq = N])`.
  DataAttr getDataSource(const Expr &expr, StringRef what);

  /// `tokens(..., seq = N)` must agree with the sequence length of the
  /// forward's first argument, which fixes the shape of a batch.
  LogicalResult checkSeq(const Expr &expr);

  /// `adamw(lr, betas = (0.9, 0.999), eps = 1e-8, weight_decay = 0.01)` or
  /// `sgd(lr, momentum = 0, dampening = 0, weight_decay = 0, nesterov =
  /// false)`. The ranges are those of #md.adamw and #md.sgd.
  Attribute getOptimizer(const Expr &expr);

  /// `[group(match = "glob", ndim = N, weight_decay = W, lr_scale = S),
  /// ...]`: the optimizer's parameter groups, a group's weight decay
  /// defaulting to the optimizer's `weightDecay`.
  LogicalResult getParamGroups(const Expr &expr, double weightDecay,
                               ArrayAttr &groups);

  /// Reports a group of `optimizer` that holds no parameter of the model:
  /// one that matches none, or whose matches all went to earlier groups.
  LogicalResult checkParamGroups(Attribute optimizer, const Expr &groupsExpr);

  /// `constant`, `constant()`, `linear(warmup = 0, steps = N)`,
  /// `cosine(warmup = 0, steps = N, min_lr = 0.0)`.
  ScheduleAttr getSchedule(const Expr &expr);

  /// A positive integer setting (`global_batch`, `micro_batch`).
  std::optional<int64_t> getPositive(const Setting &setting);

  /// The setting `name` is a near miss of, if any.
  static std::optional<StringRef> getNearSetting(StringRef name);

  /// A top-level `key = value` whose key is no setting is a variable of the
  /// hooks. Warns where it looks like a misspelt setting.
  void warnMisspeltSettings(const TrainDecl &train,
                            const llvm::StringMap<const Setting *> &settings);

  /// Warns about a top-level constant that nothing reads: most likely a
  /// setting md does not have (`steps = 1000`).
  void warnUnusedConstants(const TrainDecl &train);

  /// Notes a top-level variable whose name is a near miss of `key`.
  void noteNearMiss(const TrainDecl &train, StringRef key);

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

  Binding *lookup(StringRef name);

  /// Binds `name` in the innermost scope unless it is taken.
  bool define(StringRef name, SMLoc loc, Typed value);

  void emitBody(const Body &body);

  /// Runs `fn` with the insertion point before the terminator of `block`.
  template <typename Fn> void inBlock(Block *block, Fn fn) {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(block->getTerminator());
    fn();
  }

  void emitStmt(const Stmt &stmt);

  /// The body of `for`, with its variable bound to `inductionVar`.
  void emitLoopBody(const ForStmt &forStmt, Value inductionVar);

  /// Checks `body` without keeping its ops (after an error in the statement
  /// that holds it).
  void emitDetached(const Body &body);

  /// A literal number, or a name bound to one (`n = 3`), else nullopt.
  std::optional<Literal> getConstant(const Expr &expr);

  /// The period of `every`: a constant positive integer.
  std::optional<int64_t> getPeriod(const Expr &expr);

  /// `save checkpoint(full|sharded [, "dir"] [, keep = K])`.
  void emitSave(const SaveStmt &save);

  /// `fail("why")`: ends the run after this step as failed.
  void emitFail(const CallExpr &call);

  /// `log(name, values...)` and `print(message, values...)`.
  void emitLogOrPrint(const CallExpr &call);

  //===--------------------------------------------------------------------===//
  // Expressions
  //===--------------------------------------------------------------------===//

  std::optional<Typed> emitExpr(const Expr &expr);

  std::optional<Typed> emitName(const NameExpr &name);

  RankedTensorType getScalarTensorType();

  /// Checks that `call` has exactly `count` positional arguments.
  bool checkPositional(const CallExpr &call, size_t count, StringRef usage);

  std::optional<Typed> emitCall(const CallExpr &call);

  /// `evaluate(<data source>[, batches = N])`.
  std::optional<Typed> emitReduction(const CallExpr &call);
  std::optional<Typed> emitEvaluate(const CallExpr &call);

  FlatSymbolRefAttr getForwardSymbol();

  /// A number as f64: ints convert, f32 tensors are read.
  Value toF64(Typed value, Location loc);

  /// A number as tensor<f32>, the operand of a reduction over ranks.
  Value toTensor(Typed value, Location loc);

  std::optional<Typed> emitUnary(const UnaryExpr &unary);

  std::optional<Typed> emitBinary(const BinaryExpr &binary);

  ModelOp model;
  IRGenContext &ctx;
  Diagnostics &diags;
  OpBuilder builder;
  SmallVector<llvm::StringMap<Binding>> scopes;
};

} // namespace md::frontend::recipe

#endif // MD_FRONTEND_RECIPEEMITTER_H
