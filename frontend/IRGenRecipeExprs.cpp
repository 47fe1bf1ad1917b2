//===- IRGenRecipeExprs.cpp - expressions of the hooks --------------------===//
//
// The expressions of a recipe's hooks: names and built-in values, calls
// (reductions over ranks, time, exists, evaluate), and unary and binary
// operators on i64, f64, i1 and tensor<f32> values.
//
//===----------------------------------------------------------------------===//

#include "frontend/RecipeEmitter.h"
#include "runtime/core/RankPath.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace md::frontend::recipe {

std::optional<Typed> RecipeEmitter::emitExpr(const Expr &expr) {
  Location loc = ctx.getLoc(expr.loc);
  switch (expr.kind) {
  case Expr::Kind::Number: {
    const auto &number = cast<NumberExpr>(expr);
    if (number.isInteger)
      return Typed{arith::ConstantIntOp::create(
                       builder, loc, builder.getI64Type(), number.intValue),
                   Kind::Int};
    return Typed{arith::ConstantFloatOp::create(builder, loc,
                                                builder.getF64Type(),
                                                APFloat(number.floatValue)),
                 Kind::Float};
  }
  case Expr::Kind::Bool:
    return Typed{arith::ConstantIntOp::create(builder, loc, builder.getI1Type(),
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
    diags.error(expr.loc, "'" + describe(*cast<MemberExpr>(expr).base) + "." +
                              cast<MemberExpr>(expr).member +
                              "' is not a value of the recipe: hooks read "
                              "rank, local_rank, world_size, step, epoch "
                              "and loss, not parameters");
    return std::nullopt;
  default:
    diags.error(expr.loc, describe(expr) + " is not a value of the recipe");
    return std::nullopt;
  }
}

std::optional<Typed> RecipeEmitter::emitName(const NameExpr &name) {
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

RankedTensorType RecipeEmitter::getScalarTensorType() {
  return RankedTensorType::get({}, builder.getF32Type());
}

bool RecipeEmitter::checkPositional(const CallExpr &call, size_t count,
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
  diags.error(call.loc, "'" + call.callee + "' takes " + std::to_string(count) +
                            " argument" + (count == 1 ? "" : "s") + ", got " +
                            std::to_string(call.args.size()) + ": " + usage);
  return false;
}

std::optional<Typed> RecipeEmitter::emitCall(const CallExpr &call) {
  Location loc = ctx.getLoc(call.loc);
  StringRef callee = call.callee;
  if (callee == "mean" || callee == "sum" || callee == "max" ||
      callee == "min" || callee == "any" || callee == "all")
    return emitReduction(call);
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
    // Each rank expands {rank}, {local_rank} and {world_size} when the hook
    // runs (runtime/core/RankPath.h).
    if (std::optional<std::string> bad = runtime::UnknownRankPlaceholder(*path)) {
      diags.error(arg.loc, "the path of 'exists' has '" + *bad +
                               "'; a brace in a path names a placeholder: "
                               "{rank}, {local_rank} or {world_size}");
      return std::nullopt;
    }
    return Typed{FileExistsOp::create(builder, loc, builder.getI1Type(),
                                      builder.getStringAttr(*path)),
                 Kind::Bool};
  }
  if (callee == "evaluate")
    return emitEvaluate(call);
  if (callee == "log" || callee == "print" || callee == "fail") {
    diags.error(call.loc, "'" + callee +
                              "' has no value; call it as a "
                              "statement");
    return std::nullopt;
  }
  static const StringRef settingValues[] = {"adamw",  "sgd",    "constant",
                                            "linear", "cosine", "synthetic",
                                            "npy",    "tokens"};
  if (llvm::is_contained(settingValues, callee)) {
    diags.error(call.loc, "'" + callee +
                              "(...)' is the value of a train "
                              "setting, not a value of the "
                              "hooks");
    return std::nullopt;
  }
  diags.error(call.loc, "unknown function '" + callee +
                            "'; expected one of: " + joinNames(kFunctions));
  return std::nullopt;
}

/// A reduction over ranks: an all-reduce of the value as a 0-d f32
/// tensor. A bool goes in as 0 or 1, so that `max` of it is true on some
/// rank (`any`), `min` true on every rank (`all`), `sum` the number of
/// ranks where it holds and `mean` their fraction; `max`, `min`, `any` and
/// `all` of a bool are bools again. The result is the same on every rank.
std::optional<Typed> RecipeEmitter::emitReduction(const CallExpr &call) {
  StringRef callee = call.callee;
  if (!checkPositional(call, 1, (callee + "(value)").str()))
    return std::nullopt;
  const Expr &arg = *call.args[0].value;
  std::optional<Typed> value = emitExpr(arg);
  if (!value)
    return std::nullopt;
  Location loc = ctx.getLoc(call.loc), argLoc = ctx.getLoc(arg.loc);
  bool isBool = value->kind == Kind::Bool;
  if ((callee == "any" || callee == "all") && !isBool) {
    diags.error(arg.loc, "'" + callee +
                             "' reduces a bool (a comparison, "
                             "exists(...)), got " +
                             kindName(value->kind) +
                             "; use max/min/sum/mean "
                             "for numbers");
    return std::nullopt;
  }
  ReductionKind reduction = ReductionKind::max;
  if (callee == "mean")
    reduction = ReductionKind::avg;
  else if (callee == "sum")
    reduction = ReductionKind::sum;
  else if (callee == "min" || callee == "all")
    reduction = ReductionKind::min;
  Value tensor;
  if (isBool) {
    Value asInt = arith::ExtUIOp::create(builder, argLoc, builder.getI64Type(),
                                         value->value);
    tensor = toTensor(Typed{asInt, Kind::Int}, argLoc);
  } else {
    tensor = toTensor(*value, argLoc);
  }
  Value reduced =
      AllReduceOp::create(builder, loc, tensor.getType(), Group::world,
                          IntegerAttr(), tensor, reduction);
  if (!isBool || reduction == ReductionKind::avg ||
      reduction == ReductionKind::sum)
    return Typed{reduced, Kind::Tensor};
  Value number = toF64(Typed{reduced, Kind::Tensor}, loc);
  Value zero = arith::ConstantFloatOp::create(
      builder, loc, builder.getF64Type(), APFloat(0.0));
  return Typed{arith::CmpFOp::create(builder, loc, arith::CmpFPredicate::OGT,
                                     number, zero),
               Kind::Bool};
}

std::optional<Typed> RecipeEmitter::emitEvaluate(const CallExpr &call) {
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
  auto op =
      EvaluateOp::create(builder, ctx.getLoc(call.loc), getScalarTensorType(),
                         getForwardSymbol(), data, batches, UnitAttr());
  return Typed{op.getResult(), Kind::Tensor};
}

FlatSymbolRefAttr RecipeEmitter::getForwardSymbol() {
  ForwardOp forward = model.getForward();
  return FlatSymbolRefAttr::get(&ctx.context,
                                forward ? forward.getSymName() : "forward");
}

Value RecipeEmitter::toF64(Typed value, Location loc) {
  switch (value.kind) {
  case Kind::Float:
    return value.value;
  case Kind::Int:
    return arith::SIToFPOp::create(builder, loc, builder.getF64Type(),
                                   value.value);
  case Kind::Tensor: {
    Value scalar =
        tensor::ExtractOp::create(builder, loc, value.value, ValueRange());
    return arith::ExtFOp::create(builder, loc, builder.getF64Type(), scalar);
  }
  case Kind::Bool:
    break;
  }
  llvm_unreachable("a bool is not a number");
}

Value RecipeEmitter::toTensor(Typed value, Location loc) {
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

std::optional<Typed> RecipeEmitter::emitUnary(const UnaryExpr &unary) {
  std::optional<Typed> operand = emitExpr(*unary.operand);
  if (!operand)
    return std::nullopt;
  Location loc = ctx.getLoc(unary.loc);
  if (unary.op == UnaryOp::Not) {
    if (operand->kind != Kind::Bool) {
      diags.error(unary.operand->loc,
                  "'not' needs a bool, got " + Twine(kindName(operand->kind)));
      return std::nullopt;
    }
    Value one =
        arith::ConstantIntOp::create(builder, loc, builder.getI1Type(), 1);
    return Typed{arith::XOrIOp::create(builder, loc, operand->value, one),
                 Kind::Bool};
  }
  if (operand->kind == Kind::Bool) {
    diags.error(unary.operand->loc, "'-' needs a number, got bool");
    return std::nullopt;
  }
  if (operand->kind == Kind::Int) {
    Value zero =
        arith::ConstantIntOp::create(builder, loc, builder.getI64Type(), 0);
    return Typed{arith::SubIOp::create(builder, loc, zero, operand->value),
                 Kind::Int};
  }
  Value value = toF64(*operand, ctx.getLoc(unary.operand->loc));
  return Typed{arith::NegFOp::create(builder, loc, value), Kind::Float};
}

namespace {

/// The predicates of a comparison operator on i64 and on f64. Ordered float
/// comparisons are false on NaN; `!=` is true on NaN, so that `loss != loss`
/// detects it.
struct Comparison {
  arith::CmpIPredicate ints;
  arith::CmpFPredicate floats;
};

Comparison getComparison(BinaryOp op) {
  switch (op) {
  case BinaryOp::Eq:
    return {arith::CmpIPredicate::eq, arith::CmpFPredicate::OEQ};
  case BinaryOp::Ne:
    return {arith::CmpIPredicate::ne, arith::CmpFPredicate::UNE};
  case BinaryOp::Lt:
    return {arith::CmpIPredicate::slt, arith::CmpFPredicate::OLT};
  case BinaryOp::Le:
    return {arith::CmpIPredicate::sle, arith::CmpFPredicate::OLE};
  case BinaryOp::Gt:
    return {arith::CmpIPredicate::sgt, arith::CmpFPredicate::OGT};
  default:
    return {arith::CmpIPredicate::sge, arith::CmpFPredicate::OGE};
  }
}

} // namespace

std::optional<Typed> RecipeEmitter::emitBinary(const BinaryExpr &binary) {
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
      return Typed{arith::AndIOp::create(builder, loc, lhs->value, rhs->value),
                   Kind::Bool};
    return Typed{arith::OrIOp::create(builder, loc, lhs->value, rhs->value),
                 Kind::Bool};
  case BinaryOp::MatMul:
    diags.error(binary.opLoc, "'@' is not defined on recipe values");
    return std::nullopt;
  case BinaryOp::Add:
  case BinaryOp::Sub:
  case BinaryOp::Mul:
  case BinaryOp::Div:
  case BinaryOp::Rem: {
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
      else if (binary.op == BinaryOp::Div)
        result = arith::DivSIOp::create(builder, loc, lhs->value, rhs->value);
      else // the sign of the dividend, as C and MLIR's remsi
        result = arith::RemSIOp::create(builder, loc, lhs->value, rhs->value);
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
    else if (binary.op == BinaryOp::Div)
      result = arith::DivFOp::create(builder, loc, a, b);
    else
      result = arith::RemFOp::create(builder, loc, a, b);
    return Typed{result, Kind::Float};
  }
  default:
    break;
  }

  // Comparisons.
  bool equality = binary.op == BinaryOp::Eq || binary.op == BinaryOp::Ne;
  if ((lhsBool || rhsBool) && (!(lhsBool && rhsBool) || !equality))
    return mismatch(equality ? "two bools or two numbers" : "numbers");
  Comparison cmp = getComparison(binary.op);
  if (lhsBool || bothInt)
    return Typed{
        arith::CmpIOp::create(builder, loc, cmp.ints, lhs->value, rhs->value),
        Kind::Bool};
  Value a = toF64(*lhs, ctx.getLoc(binary.lhs->loc)),
        b = toF64(*rhs, ctx.getLoc(binary.rhs->loc));
  return Typed{arith::CmpFOp::create(builder, loc, cmp.floats, a, b),
               Kind::Bool};
}

} // namespace md::frontend::recipe
