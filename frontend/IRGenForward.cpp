//===- IRGenForward.cpp - the forward of the model ------------------------===//
//
// The forward with shape inference: statements, expressions and calls of
// `md.forward` and of one `md.func` per user-block specialisation.
//
//===----------------------------------------------------------------------===//

#include "frontend/ModelGen.h"

namespace md::frontend::irgen {

//===----------------------------------------------------------------------===//
// Forward: statements
//===----------------------------------------------------------------------===//

// A let may rebind a name (`x = x + attn(ln_1(x))`, the residual style of
// DESIGN.md's sketch): values are immutable, a rebinding only changes what
// the name refers to from here on. It may not hide a parameter instance or a
// hyper-parameter, whose names a reader expects to keep their meaning.
void ModelGen::bindLocal(FnState &fn, const std::string &name, SMLoc l, Val v) {
  if (Instance *child = fn.self->child(name)) {
    error(l, "'" + name + "' names a parameter of " + fn.owner +
                 "; a let cannot hide it");
    (void)child;
    v = Val::error();
  } else if (fn.self->hyper->count(name)) {
    error(l, "'" + name + "' names a hyper-parameter of " + fn.owner +
                 "; a let cannot hide it");
    v = Val::error();
  }
  fn.locals[name] = {v, l};
}

static const char *stmtKeyword(Stmt::Kind kind) {
  switch (kind) {
  case Stmt::Kind::If:
    return "if";
  case Stmt::Kind::For:
    return "for";
  case Stmt::Kind::Every:
    return "every";
  case Stmt::Kind::Stop:
    return "stop";
  case Stmt::Kind::Save:
    return "save";
  default:
    return "this statement";
  }
}

bool ModelGen::genBody(FnState &fn, const ForwardDecl &fwd,
                       std::vector<Val> &results, SMLoc &returnLoc) {
  unsigned before = errorCount;
  bool returned = false;
  for (const StmtPtr &stmt : fwd.body) {
    if (returned) {
      error(stmt->loc, "statement after 'return'");
      break;
    }
    switch (stmt->kind) {
    case Stmt::Kind::Let: {
      const auto &let = llvm::cast<LetStmt>(*stmt);
      Val v = eval(fn, *let.value);
      if (let.targets.size() == 1) {
        bindLocal(fn, let.targets[0].name, let.targets[0].loc, v);
        break;
      }
      bool unpack =
          v.kind == Val::Kind::Tuple && v.elements.size() == let.targets.size();
      if (!unpack && !v.isError())
        error(let.loc, "cannot unpack " + describe(v) + " into " +
                           Twine(let.targets.size()) + " names");
      llvm::StringMap<SMLoc> seen;
      for (auto [k, target] : llvm::enumerate(let.targets)) {
        auto [it, inserted] = seen.try_emplace(target.name, target.loc);
        if (!inserted) {
          error(target.loc,
                "'" + target.name + "' appears twice in the same assignment");
          note(it->second, "first occurrence is here");
          continue;
        }
        bindLocal(fn, target.name, target.loc,
                  unpack ? v.elements[k] : Val::error());
      }
      break;
    }
    case Stmt::Kind::Return: {
      const auto &ret = llvm::cast<ReturnStmt>(*stmt);
      returned = true;
      returnLoc = ret.loc;
      for (const ExprPtr &e : ret.values) {
        Val v = eval(fn, *e);
        if (v.kind == Val::Kind::Tuple)
          results.insert(results.end(), v.elements.begin(), v.elements.end());
        else
          results.push_back(v);
      }
      break;
    }
    case Stmt::Kind::Expr:
      error(stmt->loc, "an expression statement has no effect in a forward; "
                       "a forward holds assignments and a 'return'");
      break;
    default:
      error(stmt->loc, std::string("'") + stmtKeyword(stmt->kind) +
                           "' is not allowed in a forward; it belongs in the "
                           "train recipe");
      break;
    }
  }
  if (!returned)
    error(fwd.loc, "the forward of " + fn.owner + " has no 'return'");
  return errorCount == before;
}

void ModelGen::genModelForward(Instance &root, const BlockDecl &model) {
  if (!model.forward) {
    error(model.loc, "model '" + model.name + "' has no forward");
    return;
  }
  const ForwardDecl &fwd = *model.forward;
  FnState fn;
  fn.self = &root;
  fn.owner = "model '" + model.name + "'";

  std::vector<Type> argTypes;
  std::vector<bool> argOk;
  for (const ForwardArg &arg : fwd.args) {
    RankedTensorType type;
    if (!arg.type)
      error(arg.loc, "argument '" + arg.name +
                         "' of the model's forward needs a type, e.g. " +
                         arg.name + ": f32[B, 784]");
    else
      type = evalTensorType(*arg.type, *root.hyper, /*allowBatch=*/true,
                            /*floatOnly=*/false, "argument '" + arg.name + "'");
    argOk.push_back(static_cast<bool>(type));
    argTypes.push_back(type ? Type(type)
                            : Type(tensorType({}, b.getF32Type())));
  }

  b.setInsertionPointToEnd(&modelOp.getBody().front());
  forwardOp =
      md::ForwardOp::create(b, loc(fwd.loc), "forward",
                            b.getFunctionType(argTypes, {}), nullptr, nullptr);
  symbols.insert("forward");
  mlir::Block *entry = new mlir::Block();
  forwardOp.getBody().push_back(entry);
  for (auto [k, arg] : llvm::enumerate(fwd.args)) {
    mlir::Value v = entry->addArgument(argTypes[k], loc(arg.loc));
    if (!fn.locals.count(arg.name))
      fn.locals.try_emplace(arg.name, argOk[k] ? Val::tensor(v) : Val::error(),
                            arg.loc);
  }
  b.setInsertionPointToEnd(entry);

  std::vector<Val> results;
  SMLoc returnLoc = fwd.loc;
  genBody(fn, fwd, results, returnLoc);

  std::vector<Type> resultTypes;
  std::vector<mlir::Value> values;
  bool ok = true;
  RankedTensorType lossType = tensorType({}, b.getF32Type());
  if (!results.empty()) {
    const Val &loss = results.front();
    if (!loss.isError() && (!loss.isTensor() || loss.type() != lossType)) {
      error(returnLoc, "a model's forward must return the loss first, a "
                       "scalar f32 (f32[]), got " +
                           describe(loss));
      ok = false;
    }
  }
  for (const Val &v : results) {
    if (v.isTensor()) {
      values.push_back(v.value);
      resultTypes.push_back(v.value.getType());
      continue;
    }
    if (!v.isError() && &v != &results.front())
      error(returnLoc, "a forward must return tensors, got " + describe(v));
    ok = false;
  }
  forwardOp.setFunctionType(b.getFunctionType(argTypes, resultTypes));
  if (ok && !results.empty())
    md::ReturnOp::create(b, loc(returnLoc), values);
}

//===----------------------------------------------------------------------===//
// Forward: expressions
//===----------------------------------------------------------------------===//

Val ModelGen::eval(FnState &fn, const Expr &e) {
  switch (e.kind) {
  case Expr::Kind::Number:
  case Expr::Kind::Bool:
    return literalValue(e);
  case Expr::Kind::Name:
    return evalName(fn, llvm::cast<NameExpr>(e).name, e.loc);
  case Expr::Kind::Member:
    return evalMember(fn, llvm::cast<MemberExpr>(e));
  case Expr::Kind::Call:
    return evalCall(fn, llvm::cast<CallExpr>(e));
  case Expr::Kind::Unary:
    return evalUnary(fn, llvm::cast<UnaryExpr>(e));
  case Expr::Kind::Binary:
    return evalBinary(fn, llvm::cast<BinaryExpr>(e));
  case Expr::Kind::Tuple: {
    std::vector<Val> elements;
    for (const ExprPtr &el : llvm::cast<TupleExpr>(e).elements)
      elements.push_back(eval(fn, *el));
    return Val::tuple(std::move(elements));
  }
  case Expr::Kind::String:
    error(e.loc, "a string is not a value in a forward");
    return Val::error();
  case Expr::Kind::List:
    error(e.loc, "a list is only allowed as an argument of a built-in "
                 "(the shape of reshape, the dims of sum, the tensors of "
                 "concat, ...)");
    return Val::error();
  case Expr::Kind::Size:
    error(e.loc, "a size is not a value in a forward");
    return Val::error();
  case Expr::Kind::Record:
    error(e.loc, "a record is not a value in a forward");
    return Val::error();
  case Expr::Kind::Index:
    return evalIndex(fn, llvm::cast<IndexExpr>(e));
  }
  return Val::error();
}

Val ModelGen::leafValue(FnState &fn, Instance *leaf, SMLoc l) {
  if (fn.isFunc) {
    auto it = fn.leafArgs.find(leaf);
    if (it != fn.leafArgs.end())
      return Val::tensor(it->second);
    return Val::error();
  }
  return Val::tensor(
      md::ParamRefOp::create(b, loc(l), leaf->type, leaf->path).getResult());
}

Val ModelGen::instanceMember(FnState &fn, Instance *inst, SMLoc l) {
  switch (inst->kind) {
  case Instance::Kind::Raw:
    return leafValue(fn, inst, l);
  case Instance::Kind::Invalid:
    return Val::error();
  default:
    return Val::inst(inst);
  }
}

Val ModelGen::evalName(FnState &fn, const std::string &name, SMLoc l) {
  auto local = fn.locals.find(name);
  if (local != fn.locals.end())
    return local->second.first;
  auto hyper = fn.self->hyper->find(name);
  if (hyper != fn.self->hyper->end())
    return hyper->second;
  if (Instance *child = fn.self->child(name))
    return instanceMember(fn, child, l);
  if (name == "B")
    return Val::number(batchNum());
  error(l, "'" + name + "' is not defined");
  return Val::error();
}

Val ModelGen::evalMember(FnState &fn, const MemberExpr &e) {
  Val base = eval(fn, *e.base);
  if (base.isError())
    return base;
  if (base.kind != Val::Kind::Instance) {
    error(e.memberLoc, describe(base) + " has no member '" + e.member + "'");
    return Val::error();
  }
  Instance *inst = base.instance;
  Instance *child = inst->child(e.member);
  if (!child) {
    std::vector<std::string> names;
    for (const auto &c : inst->children)
      names.push_back(c->name);
    error(e.memberLoc,
          "'" + inst->name + "' has no parameter '" + e.member + "'" +
              (names.empty() ? std::string()
                             : " (it has " + joinNames(names) + ")"));
    return Val::error();
  }
  return instanceMember(fn, child, e.loc);
}

Val ModelGen::evalUnary(FnState &fn, const UnaryExpr &e) {
  if (e.op == UnaryOp::Not) {
    error(e.loc, "'not' is not allowed in a forward");
    return Val::error();
  }
  Val v = eval(fn, *e.operand);
  if (v.isError())
    return v;
  if (v.isNumber())
    return numberOrError(applyNumNeg(v.num), e.loc);
  if (!expectFloat(v, e.loc, "the operand of unary '-'"))
    return Val::error();
  return scale(v, -1.0, e.loc);
}

Val ModelGen::evalBinary(FnState &fn, const BinaryExpr &e) {
  const char *op = binaryOpSpelling(e.op);
  switch (e.op) {
  case BinaryOp::Add:
  case BinaryOp::Sub:
  case BinaryOp::Mul:
  case BinaryOp::Div:
  case BinaryOp::MatMul:
    break;
  default:
    error(e.opLoc, std::string("'") + op + "' is not allowed in a forward");
    return Val::error();
  }
  Val l = eval(fn, *e.lhs);
  Val r = eval(fn, *e.rhs);
  if (l.isError() || r.isError())
    return Val::error();
  auto operandOk = [](const Val &v) { return v.isNumber() || v.isTensor(); };
  if (!operandOk(l) || !operandOk(r)) {
    error(e.opLoc, std::string("'") + op + "' needs tensors or numbers, got " +
                       describe(l) + " and " + describe(r));
    return Val::error();
  }
  if (l.isNumber() && r.isNumber()) {
    if (e.op == BinaryOp::MatMul) {
      error(e.opLoc,
            "'@' needs tensors, got " + describe(l) + " and " + describe(r));
      return Val::error();
    }
    return numberOrError(applyNumBinary(e.op, l.num, r.num), e.opLoc);
  }
  if (e.op == BinaryOp::MatMul) {
    if (!l.isTensor() || !r.isTensor()) {
      error(e.opLoc,
            "'@' needs tensors, got " + describe(l) + " and " + describe(r));
      return Val::error();
    }
    return matmul(l, r, e.opLoc);
  }
  if (l.isTensor() && r.isTensor())
    return elementwise(e.op, l, r, e.opLoc);
  // A tensor and a number.
  const Val &t = l.isTensor() ? l : r;
  const Val &n = l.isTensor() ? r : l;
  bool scaling =
      e.op == BinaryOp::Mul || (e.op == BinaryOp::Div && l.isTensor());
  // Every other case (+, -, a number over a tensor) takes the number as
  // a tensor.
  bool shifting = !scaling;
  if (n.num.dynamic) {
    error(e.opLoc, "the batch size B is not known at compile time without a "
                   "train's micro_batch");
    return Val::error();
  }
  if (!expectFloat(t, e.opLoc, Twine("the tensor operand of '") + op + "'"))
    return Val::error();
  if (shifting) {
    // t + c, t - c, c + t, c - t, c / t: the number as a broadcast tensor
    // of t's type (rounded to it), then md.add, md.sub or md.div.
    Val c = numberLike(n.num.value(), t, e.opLoc);
    return l.isTensor() ? elementwise(e.op, l, c, e.opLoc)
                        : elementwise(e.op, c, r, e.opLoc);
  }
  double factor = n.num.value();
  if (e.op == BinaryOp::Div) {
    if (factor == 0) {
      error(e.opLoc, "division by zero");
      return Val::error();
    }
    factor = 1.0 / factor;
  }
  return scale(t, factor, e.opLoc);
}

//===----------------------------------------------------------------------===//
// Forward: calls
//===----------------------------------------------------------------------===//

Val ModelGen::evalCall(FnState &fn, const CallExpr &call) {
  const std::string &name = call.callee;
  auto local = fn.locals.find(name);
  if (local != fn.locals.end()) {
    if (local->second.first.kind == Val::Kind::Instance)
      return callInstance(fn, local->second.first.instance, call);
    if (!local->second.first.isError())
      error(call.loc, "'" + name + "' is not callable; it is " +
                          describe(local->second.first));
    return Val::error();
  }
  if (fn.self->hyper->count(name)) {
    error(call.loc, "'" + name + "' is a hyper-parameter, not callable");
    return Val::error();
  }
  if (Instance *inst = fn.self->child(name))
    return callInstance(fn, inst, call);
  auto builtin = builtinFunctions().find(name);
  if (builtin != builtinFunctions().end())
    return callBuiltin(fn, call, builtin->second);
  if (builtinLayers().count(name) || decls.count(name)) {
    error(call.loc, "'" + name +
                        "' is a layer type; declare an instance with 'param "
                        "name: " +
                        name + "(...)' and call it by its name");
    return Val::error();
  }
  error(call.loc, "'" + name + "' is not defined");
  return Val::error();
}

Val ModelGen::callInstance(FnState &fn, Instance *inst, const CallExpr &call) {
  if (inst->kind == Instance::Kind::Invalid)
    return Val::error();
  if (inst->kind == Instance::Kind::Raw) {
    error(call.loc, "'" + call.callee +
                        "' is a parameter, not a layer; it cannot be called");
    return Val::error();
  }
  // The formal arguments: a layer takes one input, a block its forward's.
  Instance *proto = inst->kind == Instance::Kind::Repeated
                        ? inst->children.front().get()
                        : inst;
  std::vector<Formal> formals;
  if (proto->kind == Instance::Kind::Layer) {
    formals.push_back({"x", true});
  } else if (proto->block->forward) {
    for (const ForwardArg &arg : proto->block->forward->args)
      formals.push_back({arg.name, true});
  } else {
    error(call.loc, "block '" + proto->block->name + "' (the type of '" +
                        call.callee + "') has no forward");
    return Val::error();
  }
  std::string calleeDesc = call.callee;
  auto bound = bindArgs(call.args, formals, calleeDesc, call.loc);
  if (!bound)
    return Val::error();
  std::vector<Val> args;
  bool ok = true;
  for (const Expr *e : *bound) {
    args.push_back(eval(fn, *e));
    ok &= !args.back().isError();
  }
  if (!ok)
    return Val::error();
  std::vector<Val> results =
      applyInstance(fn, inst, args, call.callee, call.loc);
  if (results.empty())
    return Val::error();
  if (results.size() == 1)
    return results.front();
  return Val::tuple(std::move(results));
}

/// Applies a layer, block or repeated instance to already evaluated
/// arguments; an empty result means an error (already reported).
std::vector<Val> ModelGen::applyInstance(FnState &fn, Instance *inst,
                                         const std::vector<Val> &args,
                                         const std::string &calleeName,
                                         SMLoc l) {
  switch (inst->kind) {
  case Instance::Kind::Layer: {
    Val v = applyLayer(fn, inst, args.front(), calleeName, l);
    if (v.isError())
      return {};
    return {v};
  }
  case Instance::Kind::Block:
    return applyBlock(fn, inst, args, calleeName, l);
  case Instance::Kind::Repeated: {
    // Each instance's results replace the leading arguments of the next;
    // arguments past its results are shared by every instance (h(x, cos,
    // sin) with `return x`): the call's results are the replaced ones.
    std::vector<Val> current = args;
    size_t varying = args.size();
    for (auto &child : inst->children) {
      std::vector<Val> next =
          applyInstance(fn, child.get(), current, calleeName, l);
      if (next.empty())
        return {};
      bool same = next.size() <= current.size() &&
                  (&child == &inst->children.front() || next.size() == varying);
      for (size_t k = 0; same && k < next.size(); ++k)
        same = next[k].isTensor() && current[k].isTensor() &&
               next[k].type() == current[k].type();
      if (!same) {
        auto list = [](const std::vector<Val> &vals) {
          std::string s;
          for (size_t k = 0; k < vals.size(); ++k)
            s += (k ? ", " : "") + describe(vals[k]);
          return s;
        };
        error(l, "the repeated layer '" + calleeName +
                     "' must map its leading inputs to results of the same "
                     "types (the inputs after them are shared), but " +
                     child->signature + " maps " + list(current) + " to " +
                     list(next));
        return {};
      }
      varying = next.size();
      std::copy(next.begin(), next.end(), current.begin());
    }
    current.resize(varying);
    return current;
  }
  default:
    return {};
  }
}

std::vector<Val> ModelGen::applyBlock(FnState &fn, Instance *inst,
                                      const std::vector<Val> &args,
                                      const std::string &calleeName, SMLoc l) {
  const BlockDecl &decl = *inst->block;
  if (!decl.forward) {
    error(l, "block '" + decl.name + "' (the type of '" + calleeName +
                 "') has no forward");
    return {};
  }
  std::vector<Type> argTypes;
  bool ok = true;
  for (auto [k, arg] : llvm::enumerate(args)) {
    const ForwardArg &formal = decl.forward->args[k];
    if (!arg.isTensor()) {
      error(l, "argument '" + formal.name + "' of '" + calleeName +
                   "' must be a tensor, got " + describe(arg));
      ok = false;
      continue;
    }
    if (formal.type) {
      RankedTensorType want =
          evalTensorType(*formal.type, *inst->hyper, /*allowBatch=*/true,
                         /*floatOnly=*/false, "argument '" + formal.name + "'");
      if (want &&
          !(want.getElementType() == arg.type().getElementType() &&
            want.getRank() == arg.type().getRank() &&
            llvm::all_of(
                llvm::zip(want.getShape(), arg.type().getShape()), [](auto p) {
                  return dimsCompatible(std::get<0>(p), std::get<1>(p));
                }))) {
        error(l, "argument '" + formal.name + "' of '" + calleeName +
                     "' must be " + formatType(want) + ", got " +
                     describe(arg));
        ok = false;
        continue;
      }
    }
    argTypes.push_back(arg.value.getType());
  }
  if (!ok)
    return {};
  Spec *spec = specialise(inst, argTypes);
  if (!spec || !spec->ok)
    return {};
  std::vector<mlir::Value> operands;
  for (const Val &arg : args)
    operands.push_back(arg.value);
  for (Instance *leaf : inst->leaves()) {
    Val v = leafValue(fn, leaf, l);
    if (v.isError())
      return {};
    operands.push_back(v.value);
  }
  auto call = md::CallOp::create(b, loc(l), spec->results, spec->symbol,
                                 operands, nullptr, nullptr);
  std::vector<Val> results;
  for (mlir::Value r : call.getResults())
    results.push_back(Val::tensor(r));
  return results;
}

Spec *ModelGen::specialise(Instance *inst, const std::vector<Type> &argTypes) {
  const BlockDecl &decl = *inst->block;
  std::string key = decl.name + "|" + inst->hyperKey + "|";
  for (Type t : argTypes) {
    llvm::raw_string_ostream os(key);
    t.print(os);
    os << ";";
  }
  auto found = specs.find(key);
  if (found != specs.end())
    return &found->second;

  // A fresh symbol: Block, Block.1, Block.2, ... skipping names in use.
  std::string symbol;
  unsigned &count = specCount[decl.name];
  do {
    symbol = count == 0 ? decl.name : decl.name + "." + std::to_string(count);
    ++count;
  } while (symbols.count(symbol));
  symbols.insert(symbol);
  Spec &spec = specs[key];
  spec.symbol = symbol;

  std::vector<Instance *> leaves = inst->leaves();
  std::vector<Type> inputs = argTypes;
  for (Instance *leaf : leaves)
    inputs.push_back(leaf->type);

  mlir::OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(forwardOp);
  auto func =
      md::FuncOp::create(b, loc(decl.loc), symbol,
                         b.getFunctionType(inputs, {}), nullptr, nullptr);
  mlir::Block *entry = new mlir::Block();
  func.getBody().push_back(entry);

  FnState fn;
  fn.self = inst;
  fn.isFunc = true;
  fn.owner = "block '" + decl.name + "'";
  for (auto [k, arg] : llvm::enumerate(decl.forward->args)) {
    mlir::Value v = entry->addArgument(argTypes[k], loc(arg.loc));
    if (!fn.locals.count(arg.name))
      fn.locals.try_emplace(arg.name, Val::tensor(v), arg.loc);
  }
  for (Instance *leaf : leaves)
    fn.leafArgs[leaf] = entry->addArgument(leaf->type, loc(leaf->loc));
  b.setInsertionPointToEnd(entry);

  std::vector<Val> results;
  SMLoc returnLoc = decl.forward->loc;
  bool ok = genBody(fn, *decl.forward, results, returnLoc);
  std::vector<Type> resultTypes;
  std::vector<mlir::Value> values;
  for (const Val &v : results) {
    if (v.isTensor()) {
      values.push_back(v.value);
      resultTypes.push_back(v.value.getType());
      continue;
    }
    if (!v.isError())
      error(returnLoc,
            "a block's forward must return tensors, got " + describe(v));
    ok = false;
  }
  if (results.empty())
    ok = false;
  func.setFunctionType(b.getFunctionType(inputs, resultTypes));
  if (ok)
    md::ReturnOp::create(b, loc(returnLoc), values);
  // std::map keeps `spec` valid while the body adds specialisations.
  spec.results = resultTypes;
  spec.ok = ok;
  return &spec;
}

} // namespace md::frontend::irgen
