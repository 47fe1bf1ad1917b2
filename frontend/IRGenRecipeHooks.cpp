//===- IRGenRecipeHooks.cpp - statements of the hooks ---------------------===//
//
// The statements of a recipe's hooks region (let, if, for, every, save,
// log and print, stop and fail) with their scopes of typed bindings.
//
//===----------------------------------------------------------------------===//

#include "frontend/RecipeEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace md::frontend::recipe {

RecipeEmitter::Binding *RecipeEmitter::lookup(StringRef name) {
  for (auto &scope : llvm::reverse(scopes)) {
    auto it = scope.find(name);
    if (it != scope.end())
      return &it->second;
  }
  return nullptr;
}

bool RecipeEmitter::define(StringRef name, SMLoc loc, Typed value) {
  if (llvm::is_contained(kBuiltinValues, name)) {
    diags.error(loc, "'" + name +
                         "' is a built-in value and cannot be "
                         "redefined");
    return false;
  }
  if (const Binding *previous = lookup(name)) {
    diags.error(loc, "'" + name + "' is already defined");
    diags.note(previous->loc, "previous definition is here");
    return false;
  }
  scopes.back()[name] =
      Binding{value, loc, /*used=*/false, /*literal=*/std::nullopt};
  return true;
}

void RecipeEmitter::emitBody(const Body &body) {
  scopes.emplace_back();
  for (const StmtPtr &stmt : body)
    emitStmt(*stmt);
  scopes.pop_back();
}

void RecipeEmitter::emitStmt(const Stmt &stmt) {
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
    if (call && call->callee == "fail") {
      emitFail(*call);
      return;
    }
    diags.error(expr.loc, "this expression has no effect; only log(...), "
                          "print(...), evaluate(...) and fail(...) can stand "
                          "alone");
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
    auto op =
        IfOp::create(builder, loc, TypeRange(), cond->value, ifStmt.hasElse);
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
      Value placeholder =
          arith::ConstantIntOp::create(builder, loc, builder.getI64Type(), 0);
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
    ExitOp::create(builder, loc, StringAttr(), UnitAttr());
    return;
  case Stmt::Kind::Save:
    emitSave(cast<SaveStmt>(stmt));
    return;
  }
}

void RecipeEmitter::emitLoopBody(const ForStmt &forStmt, Value inductionVar) {
  scopes.emplace_back();
  if (define(forStmt.var, forStmt.varLoc, Typed{inductionVar, Kind::Int}))
    for (const StmtPtr &inner : forStmt.body)
      emitStmt(*inner);
  scopes.pop_back();
}

void RecipeEmitter::emitDetached(const Body &body) {
  Block scratch;
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(&scratch);
  emitBody(body);
}

std::optional<Literal> RecipeEmitter::getConstant(const Expr &expr) {
  if (const auto *name = dyn_cast<NameExpr>(&expr))
    if (Binding *binding = lookup(name->name); binding && binding->literal) {
      binding->used = true;
      return binding->literal;
    }
  return getLiteral(expr);
}

std::optional<int64_t> RecipeEmitter::getPeriod(const Expr &expr) {
  std::optional<Literal> literal = getConstant(expr);
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

void RecipeEmitter::emitSave(const SaveStmt &save) {
  auto usage = [&](SMLoc loc) {
    diags.error(loc, "expected checkpoint(full) or checkpoint(sharded), "
                     "optionally with a directory and how many to keep: "
                     "checkpoint(sharded, \"dir\", keep = 3)");
  };
  // The format and the directory by position, then `keep` by name.
  SmallVector<const Expr *, 2> positional;
  const Argument *keepArg = nullptr;
  for (const Argument &arg : save.args) {
    if (arg.name.empty()) {
      if (keepArg) {
        diags.error(arg.value->loc, "positional argument after a named one "
                                    "in 'checkpoint'");
        return;
      }
      if (positional.size() == 2) {
        usage(arg.value->loc);
        return;
      }
      positional.push_back(arg.value.get());
      continue;
    }
    if (arg.name != "keep") {
      diags.error(arg.nameLoc, "unknown argument '" + arg.name +
                                   "' of 'checkpoint'; expected keep");
      return;
    }
    if (keepArg) {
      diags.error(arg.nameLoc, "'keep' is given twice");
      diags.note(keepArg->nameLoc, "first given here");
      return;
    }
    keepArg = &arg;
  }
  if (positional.empty()) {
    usage(save.loc);
    return;
  }
  const Expr &format = *positional[0];
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
  if (positional.size() == 2) {
    const Expr &dir = *positional[1];
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
    // One checkpoint is one directory for every rank (a sharded one already
    // holds a file per rank), so a per-rank name would split it.
    if (value->value.find_first_of("{}") != std::string::npos) {
      diags.error(dir.loc,
                  "the checkpoint directory '" + value->value +
                      "' has a brace; a checkpoint is one directory for "
                      "every rank, so its name cannot be per rank ({rank} "
                      "is for the paths of 'exists')");
      return;
    }
    path = builder.getStringAttr(value->value);
  }
  IntegerAttr keep;
  if (keepArg) {
    const Expr &count = *keepArg->value;
    std::optional<Literal> literal = getConstant(count);
    if (!literal || !literal->isInteger) {
      diags.error(count.loc,
                  "'keep' must be a constant integer, got " + describe(count));
      return;
    }
    // The save keeps the checkpoint it writes: fewer than one is no save.
    if (literal->intValue < 1) {
      diags.error(count.loc,
                  "'keep' must be at least 1 (the checkpoint just written "
                  "is always kept), got " +
                      describe(count));
      return;
    }
    keep = builder.getI64IntegerAttr(literal->intValue);
  }
  SaveOp::create(builder, ctx.getLoc(save.loc),
                 CheckpointFormatAttr::get(&ctx.context, *kind), path, keep,
                 UnitAttr());
}

void RecipeEmitter::emitFail(const CallExpr &call) {
  if (call.args.size() != 1 || !call.args[0].name.empty()) {
    diags.error(call.loc, "fail needs one message and nothing else: "
                          "fail(\"why\")");
    return;
  }
  const Expr &message = *call.args[0].value;
  const auto *text = dyn_cast<StringExpr>(&message);
  if (!text) {
    diags.error(message.loc, "the message of 'fail' must be a string, got " +
                                 describe(message));
    return;
  }
  // The message is what mdrun prints for the failed run: it says why.
  if (text->value.empty()) {
    diags.error(message.loc, "the message of 'fail' is empty; say why the "
                             "run fails");
    return;
  }
  ExitOp::create(builder, ctx.getLoc(call.loc),
                 builder.getStringAttr(text->value), builder.getUnitAttr());
}

void RecipeEmitter::emitLogOrPrint(const CallExpr &call) {
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
                    "' must be a string, got " + describe(*call.args[0].value));
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

} // namespace md::frontend::recipe
