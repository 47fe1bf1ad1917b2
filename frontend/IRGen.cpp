//===- IRGen.cpp - semantic analysis and IR generation of the model -------===//
//
// Turns the model part of a .mdl file into the md dialect:
//
//   1. declaration checks over every block and model (duplicate names,
//      unknown layers, arguments of layers and blocks, recursion),
//   2. the selection of the model and its hyper-parameters (defaults, -D),
//   3. the instance tree of the model's params (built-in layers, user blocks,
//      repeated blocks), emitted as `md.param`s,
//   4. the forward with shape inference: one `md.func` per block
//      specialisation, built-in layers inlined as md ops,
//   5. the plan and the recipe (Plans.cpp, IRGenRecipe.cpp), then the
//      verifier.
//
// The generator is one class (ModelGen.h) whose phases live in IRGenParams.cpp
// (2, 3), IRGenForward.cpp and IRGenBuiltins.cpp (4); this file holds the
// declaration checks, the model selection and the driver.
//
// Errors are reported through Diagnostics as they are found; an erroneous
// value gets the error kind and is never reported on again, so one run shows
// several independent errors without cascades.
//
//===----------------------------------------------------------------------===//

#include "frontend/ModelGen.h"
#include "dialect/ParamGroups.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"

#include <functional>

namespace md::frontend::irgen {

const std::map<std::string, LayerInfo> &builtinLayers() {
  static const std::map<std::string, LayerInfo> layers = {
      {"Linear",
       {LayerKind::Linear, {{"in", true}, {"out", true}, {"bias", false}}}},
      {"Embedding", {LayerKind::Embedding, {{"n", true}, {"d", true}}}},
      {"LayerNorm", {LayerKind::LayerNorm, {{"d", true}, {"eps", false}}}},
      {"RMSNorm", {LayerKind::RMSNorm, {{"d", true}, {"eps", false}}}},
      {"BatchNorm", {LayerKind::BatchNorm, {{"c", true}, {"eps", false}}}},
      {"Attention",
       {LayerKind::Attention,
        {{"d", true},
         {"heads", true},
         {"kv_heads", false},
         {"bias", false},
         {"window", false},
         {"rope", false},
         {"qk_norm", false},
         {"head_dim", false}}}},
      {"Mlp", {LayerKind::Mlp, {{"d", true}, {"hidden", false}}}},
      {"GatedMlp",
       {LayerKind::GatedMlp, {{"d", true}, {"hidden", true}, {"bias", false}}}},
  };
  return layers;
}

const std::map<std::string, std::vector<Formal>> &builtinFunctions() {
  static const std::map<std::string, std::vector<Formal>> functions = {
      {"gelu", {{"x", true}, {"approximate", false}}},
      {"relu", {{"x", true}}},
      {"silu", {{"x", true}}},
      {"exp", {{"x", true}}},
      {"log", {{"x", true}}},
      {"sin", {{"x", true}}},
      {"cos", {{"x", true}}},
      {"tanh", {{"x", true}}},
      {"sigmoid", {{"x", true}}},
      {"abs", {{"x", true}}},
      {"neg", {{"x", true}}},
      {"sqrt", {{"x", true}}},
      {"rsqrt", {{"x", true}}},
      {"detach", {{"x", true}}},
      {"pow", {{"x", true}, {"exponent", true}}},
      {"clamp", {{"x", true}, {"min", false}, {"max", false}}},
      {"maximum", {{"a", true}, {"b", true}}},
      {"minimum", {{"a", true}, {"b", true}}},
      {"softmax", {{"x", true}, {"axis", false}}},
      {"cross_entropy",
       {{"logits", true}, {"targets", true}, {"ignore_index", false}}},
      {"transpose", {{"x", true}, {"dim0", false}, {"dim1", false}}},
      {"reshape", {{"x", true}, {"shape", true}}},
      {"arange", {{"start", true}, {"end", false}, {"step", false}}},
      {"concat", {{"tensors", true}, {"dim", false}}},
      {"stack", {{"tensors", true}, {"dim", false}}},
      {"split", {{"x", true}, {"size", true}, {"dim", false}}},
      {"chunk", {{"x", true}, {"chunks", true}, {"dim", false}}},
      {"permute", {{"x", true}, {"dims", true}}},
      {"unsqueeze", {{"x", true}, {"dim", true}}},
      {"squeeze", {{"x", true}, {"dim", true}}},
      {"flatten", {{"x", true}, {"start_dim", false}, {"end_dim", false}}},
      {"expand", {{"x", true}, {"shape", true}}},
      {"repeat_interleave", {{"x", true}, {"repeats", true}, {"dim", true}}},
      {"to", {{"x", true}, {"dtype", true}}},
      {"causal_attention",
       {{"q", true},
        {"k", true},
        {"v", true},
        {"heads", true},
        {"window", false}}},
      {"sum", {{"x", true}, {"dims", false}, {"keepdim", false}}},
      {"mean", {{"x", true}, {"dims", false}, {"keepdim", false}}},
  };
  return functions;
}

std::string describe(const Val &v) {
  switch (v.kind) {
  case Val::Kind::Error:
    return "an erroneous value";
  case Val::Kind::Number:
    return "the number " + formatNum(v.num);
  case Val::Kind::Bool:
    return v.boolean ? "'true'" : "'false'";
  case Val::Kind::Tensor:
    return formatType(v.type());
  case Val::Kind::Tuple:
    return "a tuple of " + std::to_string(v.elements.size()) + " values";
  case Val::Kind::Instance:
    if (v.instance->kind == Instance::Kind::Repeated)
      return "the repeated layer '" + v.instance->name + "'";
    return "the layer '" + v.instance->name + "' (" + v.instance->signature +
           ")";
  }
  return "a value";
}

Val literalValue(const Expr &e) {
  if (const auto *n = llvm::dyn_cast<NumberExpr>(&e))
    return Val::number(n->isInteger ? Num::integer(n->intValue)
                                    : Num::real(n->floatValue));
  return Val::boolVal(llvm::cast<BoolExpr>(e).value);
}

std::string formalsPhrase(llvm::ArrayRef<Formal> formals) {
  size_t required = 0;
  for (const Formal &f : formals)
    required += f.required;
  if (formals.empty())
    return "no arguments";
  std::string n = std::to_string(formals.size());
  std::string noun = formals.size() == 1 ? " argument" : " arguments";
  if (required == formals.size())
    return n + noun;
  return "at most " + n + noun;
}

/// A user block's formal arguments are its hyper-parameters.
std::vector<Formal> hyperFormals(const BlockDecl &block) {
  std::vector<Formal> formals;
  for (const HyperParam &hp : block.hyperParams)
    formals.push_back({hp.name, hp.defaultValue == nullptr});
  return formals;
}

//===----------------------------------------------------------------------===//
// Diagnostics
//===----------------------------------------------------------------------===//

void ModelGen::error(SMLoc l, const Twine &message) {
  ++errorCount;
  std::string text = message.str();
  lastErrorShown = reported.insert({l.getPointer(), text}).second;
  if (lastErrorShown)
    ctx.diags.error(l, text);
}

void ModelGen::note(SMLoc l, const Twine &message) {
  if (lastErrorShown)
    ctx.diags.note(l, message);
}

Val ModelGen::numberOrError(const NumResult &result, SMLoc l) {
  if (!result.value) {
    error(l, result.error);
    return Val::error();
  }
  return Val::number(*result.value);
}

//===----------------------------------------------------------------------===//
// Declaration checks
//===----------------------------------------------------------------------===//

std::optional<std::vector<const Expr *>>
ModelGen::bindArgs(llvm::ArrayRef<Argument> args,
                   llvm::ArrayRef<Formal> formals, StringRef callee,
                   SMLoc callLoc) {
  std::vector<const Expr *> bound(formals.size(), nullptr);
  bool ok = true, seenKeyword = false;
  size_t positional = 0, numPositional = 0;
  for (const Argument &arg : args)
    numPositional += arg.name.empty();
  for (const Argument &arg : args) {
    if (arg.name.empty()) {
      if (seenKeyword) {
        error(arg.value->loc, "positional argument after a keyword argument");
        ok = false;
        continue;
      }
      if (positional >= formals.size()) {
        error(arg.value->loc, "'" + callee + "' takes " +
                                  formalsPhrase(formals) + ", got " +
                                  Twine(numPositional));
        ok = false;
        break;
      }
      bound[positional++] = arg.value.get();
      continue;
    }
    seenKeyword = true;
    auto it = llvm::find_if(
        formals, [&](const Formal &f) { return f.name == arg.name; });
    if (it == formals.end()) {
      std::vector<std::string> names;
      for (const Formal &f : formals)
        names.push_back(f.name);
      error(arg.nameLoc,
            "unknown keyword argument '" + arg.name + "' for '" + callee + "'" +
                (names.empty() ? std::string(" (it takes no arguments)")
                               : " (expected " + joinNames(names) + ")"));
      ok = false;
      continue;
    }
    size_t index = it - formals.begin();
    if (bound[index]) {
      error(arg.nameLoc,
            "argument '" + arg.name + "' of '" + callee + "' is given twice");
      ok = false;
      continue;
    }
    bound[index] = arg.value.get();
  }
  if (ok)
    for (auto [k, formal] : llvm::enumerate(formals))
      if (formal.required && !bound[k]) {
        error(callLoc, "missing argument '" + formal.name + "' in call to '" +
                           callee + "'");
        ok = false;
      }
  if (!ok)
    return std::nullopt;
  return bound;
}

void ModelGen::checkDeclarations() {
  const auto &layers = builtinLayers();
  for (const BlockDecl &decl : module.blocks) {
    if (layers.count(decl.name)) {
      error(decl.loc,
            "'" + decl.name + "' is a built-in layer and cannot be redefined");
      continue;
    }
    auto [it, inserted] = decls.try_emplace(decl.name, &decl);
    if (!inserted) {
      error(decl.loc, "redefinition of '" + decl.name + "'");
      note(it->second->loc, "previous definition is here");
    }
  }

  for (const BlockDecl &decl : module.blocks) {
    // Hyper-parameters and params share one scope.
    llvm::StringMap<SMLoc> names;
    auto declare = [&](const std::string &name, SMLoc l) {
      auto [it, inserted] = names.try_emplace(name, l);
      if (!inserted) {
        error(l, "redefinition of '" + name + "'");
        note(it->second, "previous definition is here");
      }
    };
    for (const HyperParam &hp : decl.hyperParams)
      declare(hp.name, hp.loc);
    for (const ParamDecl &p : decl.params) {
      declare(p.name, p.loc);
      if (p.isRaw)
        continue;
      auto layer = layers.find(p.layer);
      if (layer != layers.end()) {
        (void)bindArgs(p.args, layer->second.formals, p.layer, p.layerLoc);
        continue;
      }
      auto target = decls.find(p.layer);
      if (target == decls.end()) {
        error(p.layerLoc, "unknown layer or block '" + p.layer + "'");
        continue;
      }
      if (target->second->isModel) {
        error(p.layerLoc, "'" + p.layer +
                              "' is a model; only blocks and built-in layers "
                              "can be instantiated");
        continue;
      }
      (void)bindArgs(p.args, hyperFormals(*target->second), p.layer,
                     p.layerLoc);
    }
    if (decl.forward) {
      llvm::StringMap<SMLoc> args;
      for (const ForwardArg &arg : decl.forward->args) {
        auto [it, inserted] = args.try_emplace(arg.name, arg.loc);
        if (!inserted) {
          error(arg.loc, "redefinition of '" + arg.name + "'");
          note(it->second, "previous definition is here");
        }
      }
    }
  }
  checkRecursion();

  // Reported once, at the second train, however many there are.
  if (module.trains.size() > 1) {
    std::string count =
        module.trains.size() > 2
            ? " (it has " + std::to_string(module.trains.size()) + ")"
            : std::string();
    error(module.trains[1].loc, "a file has at most one 'train'" + count);
    note(module.trains[0].loc, "the first 'train' is here");
  }
}

/// Reports every cycle of blocks instantiating each other, once, as
/// `A -> B -> A` starting from the block that comes first in the file.
void ModelGen::checkRecursion() {
  // Edges in source order: block -> (param, instantiated block).
  std::vector<const BlockDecl *> nodes;
  std::map<const BlockDecl *, size_t> order;
  for (const BlockDecl &decl : module.blocks)
    if (decls.lookup(decl.name) == &decl) {
      order[&decl] = nodes.size();
      nodes.push_back(&decl);
    }
  auto edges = [&](const BlockDecl *d) {
    std::vector<std::pair<const ParamDecl *, const BlockDecl *>> out;
    for (const ParamDecl &p : d->params) {
      if (p.isRaw)
        continue;
      const BlockDecl *target = decls.lookup(p.layer);
      if (target && !target->isModel)
        out.push_back({&p, target});
    }
    return out;
  };

  std::set<std::set<const BlockDecl *>> seenCycles;
  std::map<const BlockDecl *, int> state; // 0 new, 1 on stack, 2 done
  std::vector<const BlockDecl *> stack;
  std::function<void(const BlockDecl *)> dfs = [&](const BlockDecl *d) {
    state[d] = 1;
    stack.push_back(d);
    for (auto [param, target] : edges(d)) {
      if (state[target] == 1) {
        auto start = llvm::find(stack, target);
        std::vector<const BlockDecl *> cycle(start, stack.end());
        std::set<const BlockDecl *> members(cycle.begin(), cycle.end());
        for (const BlockDecl *m : cycle)
          cyclic.insert(m->name);
        if (!seenCycles.insert(members).second)
          continue;
        // Rotate so that the cycle starts at its first block in the file.
        auto first =
            std::min_element(cycle.begin(), cycle.end(), [&](auto *x, auto *y) {
              return order[x] < order[y];
            });
        std::rotate(cycle.begin(), first, cycle.end());
        std::string path;
        for (const BlockDecl *m : cycle)
          path += m->name + " -> ";
        path += cycle.front()->name;
        // Point at the param of the first block that continues the cycle.
        const BlockDecl *next = cycle.size() > 1 ? cycle[1] : cycle.front();
        SMLoc where = cycle.front()->loc;
        for (auto [p, t] : edges(cycle.front()))
          if (t == next) {
            where = p->layerLoc;
            break;
          }
        error(where, "block '" + cycle.front()->name +
                         "' instantiates itself: " + path);
        continue;
      }
      if (state[target] == 0)
        dfs(target);
    }
    stack.pop_back();
    state[d] = 2;
  };
  for (const BlockDecl *d : nodes)
    if (state[d] == 0)
      dfs(d);
}

const BlockDecl *ModelGen::selectModel() {
  std::vector<const BlockDecl *> models;
  for (const BlockDecl &decl : module.blocks)
    if (decl.isModel && decls.lookup(decl.name) == &decl)
      models.push_back(&decl);
  std::vector<std::string> names;
  for (const BlockDecl *m : models)
    names.push_back(m->name);

  if (!options.model.empty()) {
    for (const BlockDecl *m : models)
      if (m->name == options.model)
        return m;
    const BlockDecl *other = decls.lookup(options.model);
    if (other)
      error(SMLoc(),
            "--model " + options.model + ": '" + options.model +
                "' is a block, not a model" +
                (names.empty() ? std::string()
                               : "; the models are: " + joinNames(names)));
    else if (names.empty())
      error(SMLoc(),
            "--model " + options.model + ": the file declares no model");
    else
      error(SMLoc(), "--model " + options.model + ": no model named '" +
                         options.model +
                         "'; the models are: " + joinNames(names));
    return nullptr;
  }
  if (models.empty()) {
    error(SMLoc(), "the file declares no model");
    return nullptr;
  }
  if (models.size() > 1) {
    error(models[1]->loc, "the file declares several models (" +
                              joinNames(names) +
                              "); choose one with --model NAME");
    return nullptr;
  }
  return models.front();
}

bool ModelGen::bindModelHyperParams(const BlockDecl &model, Env &env) {
  bool ok = true;
  for (const auto &[name, text] : options.overrides) {
    bool known = llvm::any_of(model.hyperParams, [&, &name = name](auto &hp) {
      return hp.name == name;
    });
    if (!known) {
      std::vector<std::string> names;
      for (const HyperParam &hp : model.hyperParams)
        names.push_back(hp.name);
      error(SMLoc(),
            "-D " + name + "=" + text + ": model '" + model.name +
                "' has no hyper-parameter '" + name + "'" +
                (names.empty() ? std::string(" (it has none)")
                               : " (it has " + joinNames(names) + ")"));
      ok = false;
    }
  }
  for (const HyperParam &hp : model.hyperParams) {
    auto over = options.overrides.find(hp.name);
    if (over != options.overrides.end()) {
      StringRef text = StringRef(over->second).trim();
      int64_t i = 0;
      double d = 0;
      if (!text.getAsInteger(10, i)) {
        env[hp.name] = Val::number(Num::integer(i));
      } else if (!text.empty() && !text.getAsDouble(d) &&
                 (text.front() == '-' || text.front() == '+' ||
                  llvm::isDigit(text.front()))) {
        env[hp.name] = Val::number(Num::real(d));
      } else {
        error(SMLoc(), "-D " + hp.name + "=" + over->second + ": '" +
                           over->second + "' is not a number");
        env[hp.name] = Val::error();
        ok = false;
      }
      continue;
    }
    if (!hp.defaultValue) {
      error(hp.loc, "hyper-parameter '" + hp.name + "' of model '" +
                        model.name +
                        "' has no value; give it a default or "
                        "pass -D " +
                        hp.name + "=VALUE");
      env[hp.name] = Val::error();
      ok = false;
      continue;
    }
    Val v = evalConst(*hp.defaultValue, env, /*allowBatch=*/false);
    if (v.kind == Val::Kind::Bool) {
      error(hp.defaultValue->loc, "hyper-parameter '" + hp.name +
                                      "' must be a number, got " + describe(v));
      v = Val::error();
    }
    env[hp.name] = v;
    ok &= !v.isError();
  }
  return ok;
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

bool ModelGen::applyFreeze(Instance &root) {
  if (module.trains.empty())
    return true;
  const Setting *freeze = nullptr;
  for (const Setting &s : module.trains.front().settings)
    if (s.key == "freeze")
      freeze = &s;
  if (!freeze)
    return true;
  auto *list = llvm::dyn_cast<ListExpr>(freeze->value.get());
  if (!list) {
    error(freeze->value->loc,
          "'freeze' takes a list of parameter name patterns, such as "
          "freeze = [\"embed.*\", \"h.*.attn.{q,v}.weight\"]");
    return false;
  }
  std::vector<Instance *> leaves = root.leaves();
  bool ok = true;
  for (const ExprPtr &element : list->elements) {
    auto *pattern = llvm::dyn_cast<StringExpr>(element.get());
    if (!pattern) {
      error(element->loc, "a 'freeze' pattern is a string, such as "
                          "\"h.*.mlp.*\"");
      ok = false;
      continue;
    }
    llvm::Expected<llvm::GlobPattern> glob =
        md::compileParamGlob(pattern->value);
    if (!glob) {
      error(pattern->loc, "'" + pattern->value +
                              "' is not a valid pattern: " +
                              llvm::toString(glob.takeError()));
      ok = false;
      continue;
    }
    int64_t matched = 0;
    for (Instance *leaf : leaves)
      if (glob->match(leaf->path)) {
        leaf->frozen = true;
        ++matched;
      }
    if (matched == 0) {
      error(pattern->loc,
            "freeze pattern '" + pattern->value + "' matches no parameter" +
                (leaves.empty() ? std::string()
                                : " (parameters are named like '" +
                                      leaves.front()->path + "')"));
      ok = false;
    }
  }
  return ok;
}

mlir::OwningOpRef<mlir::ModuleOp> ModelGen::run() {
  mctx.loadDialect<md::MdDialect, mlir::arith::ArithDialect,
                   mlir::tensor::TensorDialect>();
  unsigned before = ctx.diags.getNumErrors();

  checkDeclarations();

  // `B` in a forward argument type is the recipe's micro batch.
  if (!module.trains.empty())
    for (const Setting &s : module.trains.front().settings)
      if (s.key == "micro_batch")
        if (auto *n = llvm::dyn_cast<NumberExpr>(s.value.get()))
          if (n->isInteger && n->intValue > 0)
            batch = n->intValue;

  mlir::OwningOpRef<mlir::ModuleOp> moduleOp =
      mlir::ModuleOp::create(b.getUnknownLoc());
  const BlockDecl *model = selectModel();
  if (model) {
    auto env = std::make_unique<Env>();
    bindModelHyperParams(*model, *env);
    std::vector<const BlockDecl *> stack{model};
    std::unique_ptr<Instance> root =
        buildBlock(*model, std::move(env), "", "", 0, model->loc, stack);

    // A parameter past any real model's size is a hyper-parameter gone
    // wrong (-D d=2147483648): an error naming it, not an element count
    // that wraps around.
    constexpr int64_t kMaxParamElements = int64_t(1) << 40;
    bool sizesOk = true;
    for (Instance *leaf : root->leaves()) {
      int64_t n = 1;
      bool over = false;
      for (int64_t d : leaf->type.getShape())
        over = over || __builtin_mul_overflow(n, d, &n);
      if (over || n > kMaxParamElements) {
        error(leaf->loc, "parameter '" + leaf->path + "' of type " +
                             formatType(leaf->type) +
                             " has more than 2^40 elements, md's limit for "
                             "one tensor");
        sizesOk = false;
      }
    }
    if (!sizesOk || !applyFreeze(*root))
      return nullptr;

    b.setInsertionPointToEnd(moduleOp->getBody());
    modelOp = md::ModelOp::create(b, loc(model->loc), model->name);
    b.setInsertionPointToEnd(&modelOp.getBody().front());
    for (Instance *leaf : root->leaves()) {
      symbols.insert(leaf->path);
      md::ParamOp::create(b, loc(leaf->loc), leaf->path, leaf->type, leaf->init,
                          b.getI64IntegerAttr(leaf->unit),
                          /*offset=*/nullptr, /*frozen=*/leaf->frozen);
    }
    genModelForward(*root, *model);
  }

  // The plan generator checks `blocks(h)` against this model and a
  // single-rank plan against the pinned world size: both come first.
  ctx.modelDecl = model;
  ctx.planOverrides = options.planOptions;
  ctx.modelOp = modelOp ? modelOp.getOperation() : nullptr;
  if (modelOp && options.worldSize) {
    if (*options.worldSize <= 0)
      error(SMLoc(),
            "--world-size must be positive, got " + Twine(*options.worldSize));
    else
      modelOp.setWorldSizeAttr(b.getI64IntegerAttr(*options.worldSize));
  }
  (void)checkPlans(module, ctx);
  if (modelOp) {
    if (!options.plan.empty()) {
      mlir::FailureOr<mlir::Attribute> plan =
          resolvePlan(module, options.plan, ctx);
      if (succeeded(plan))
        modelOp->setAttr(modelOp.getPlanAttrName(), *plan);
    }
    if (!module.trains.empty() && forwardOp)
      (void)emitTrain(module.trains.front(), modelOp, ctx);
  }

  if (ctx.diags.getNumErrors() != before || errorCount != 0)
    return nullptr;

  // Sema should have caught every user error: a verifier failure is a bug.
  std::string message;
  SMLoc where;
  {
    mlir::ScopedDiagnosticHandler handler(&mctx, [&](mlir::Diagnostic &diag) {
      if (diag.getSeverity() != mlir::DiagnosticSeverity::Error ||
          !message.empty())
        return mlir::success();
      message = diag.str();
      if (auto fileLoc =
              llvm::dyn_cast<mlir::FileLineColLoc>(diag.getLocation())) {
        llvm::SourceMgr &sm = ctx.diags.getSourceMgr();
        for (unsigned id = 1; id <= sm.getNumBuffers(); ++id)
          if (sm.getMemoryBuffer(id)->getBufferIdentifier() ==
              fileLoc.getFilename().getValue())
            where = sm.FindLocForLineAndColumn(id, fileLoc.getLine(),
                                               fileLoc.getColumn());
      }
      return mlir::success();
    });
    if (failed(mlir::verify(*moduleOp))) {
      ctx.diags.error(
          where, "internal error: the generated IR does not "
                 "verify: " +
                     (message.empty() ? std::string("(no message)") : message));
      return nullptr;
    }
  }
  return moduleOp;
}

} // namespace md::frontend::irgen

namespace md::frontend {

mlir::OwningOpRef<mlir::ModuleOp> generateIR(const Module &module,
                                             mlir::MLIRContext &context,
                                             const IRGenOptions &options,
                                             Diagnostics &diags) {
  IRGenContext ctx(context, diags);
  irgen::ModelGen gen(module, ctx, options);
  return gen.run();
}

} // namespace md::frontend
