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
// Errors are reported through Diagnostics as they are found; an erroneous
// value gets the error kind and is never reported on again, so one run shows
// several independent errors without cascades.
//
//===----------------------------------------------------------------------===//

#include "frontend/IRGen.h"
#include "frontend/IRGenContext.h"
#include "frontend/Sema.h"

#include "dialect/MdOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Casting.h"

#include <functional>
#include <map>
#include <set>

using llvm::SMLoc;
using llvm::StringRef;
using llvm::Twine;
using mlir::RankedTensorType;
using mlir::ShapedType;
using mlir::Type;

namespace md::frontend {
namespace {

//===----------------------------------------------------------------------===//
// Instances: the tree of a model's params
//===----------------------------------------------------------------------===//

enum class LayerKind {
  Linear,
  Embedding,
  LayerNorm,
  RMSNorm,
  BatchNorm,
  Attention,
  Mlp
};

/// One formal argument of a layer, a block or a built-in function.
struct Formal {
  std::string name;
  bool required;
};

struct LayerInfo {
  LayerKind kind;
  std::vector<Formal> formals;
};

const std::map<std::string, LayerInfo> &builtinLayers() {
  static const std::map<std::string, LayerInfo> layers = {
      {"Linear",
       {LayerKind::Linear, {{"in", true}, {"out", true}, {"bias", false}}}},
      {"Embedding", {LayerKind::Embedding, {{"n", true}, {"d", true}}}},
      {"LayerNorm", {LayerKind::LayerNorm, {{"d", true}, {"eps", false}}}},
      {"RMSNorm", {LayerKind::RMSNorm, {{"d", true}, {"eps", false}}}},
      {"BatchNorm", {LayerKind::BatchNorm, {{"c", true}, {"eps", false}}}},
      {"Attention", {LayerKind::Attention, {{"d", true}, {"heads", true}}}},
      {"Mlp", {LayerKind::Mlp, {{"d", true}, {"hidden", false}}}},
  };
  return layers;
}

const std::map<std::string, std::vector<Formal>> &builtinFunctions() {
  static const std::map<std::string, std::vector<Formal>> functions = {
      {"gelu", {{"x", true}, {"approximate", false}}},
      {"relu", {{"x", true}}},
      {"softmax", {{"x", true}, {"axis", false}}},
      {"cross_entropy",
       {{"logits", true}, {"targets", true}, {"ignore_index", false}}},
      {"transpose", {{"x", true}}},
      {"reshape", {{"x", true}, {"shape", true}}},
      {"arange", {{"n", true}}},
      {"sum", {{"x", true}, {"dims", false}, {"keepdim", false}}},
      {"mean", {{"x", true}, {"dims", false}, {"keepdim", false}}},
  };
  return functions;
}

struct Val;
using Env = llvm::StringMap<Val>;

struct Instance {
  enum class Kind {
    Raw,      // a tensor parameter: a leaf
    Layer,    // a built-in layer; its children are its params
    Block,    // a user block (or the model itself)
    Repeated, // `[n]`: children "0" .. "n-1"
    Invalid,  // could not be built (already reported)
  };
  Kind kind = Kind::Invalid;
  std::string name; // local name: "fc", "0", "weight"
  std::string path; // dotted path from the model: "h.0.mlp.fc"
  SMLoc loc;        // the declaration to point at

  // Raw.
  RankedTensorType type;
  md::InitAttr init;
  int64_t unit = 0;

  // Layer.
  LayerKind layer = LayerKind::Linear;
  int64_t dimA = 0, dimB = 0; // in/out, n/d, d, d/heads, d/hidden
  bool bias = true;
  double eps = 0;
  std::string signature; // "Linear(768, 3072)", "Block(d = 768, heads = 12)"

  // Block.
  const BlockDecl *block = nullptr;
  std::unique_ptr<Env> hyper;
  std::string hyperKey;

  std::vector<std::unique_ptr<Instance>> children;

  Instance *child(StringRef childName) const {
    for (const auto &c : children)
      if (c->name == childName)
        return c.get();
    return nullptr;
  }
  void collectLeaves(std::vector<Instance *> &leaves) {
    if (kind == Kind::Raw) {
      leaves.push_back(this);
      return;
    }
    for (auto &c : children)
      c->collectLeaves(leaves);
  }
  std::vector<Instance *> leaves() {
    std::vector<Instance *> out;
    collectLeaves(out);
    return out;
  }
};

//===----------------------------------------------------------------------===//
// Values of the forward
//===----------------------------------------------------------------------===//

struct Val {
  enum class Kind { Error, Number, Bool, Tensor, Tuple, Instance };
  Kind kind = Kind::Error;
  Num num;
  bool boolean = false;
  mlir::Value value;
  std::vector<Val> elements;
  frontend::Instance *instance = nullptr;

  static Val error() { return Val(); }
  static Val number(Num n) {
    Val v;
    v.kind = Kind::Number;
    v.num = n;
    return v;
  }
  static Val boolVal(bool b) {
    Val v;
    v.kind = Kind::Bool;
    v.boolean = b;
    return v;
  }
  static Val tensor(mlir::Value value) {
    Val v;
    v.kind = Kind::Tensor;
    v.value = value;
    return v;
  }
  static Val tuple(std::vector<Val> elements) {
    Val v;
    v.kind = Kind::Tuple;
    v.elements = std::move(elements);
    return v;
  }
  static Val inst(frontend::Instance *instance) {
    Val v;
    v.kind = Kind::Instance;
    v.instance = instance;
    return v;
  }
  bool isError() const { return kind == Kind::Error; }
  bool isTensor() const { return kind == Kind::Tensor; }
  bool isNumber() const { return kind == Kind::Number; }
  RankedTensorType type() const {
    return llvm::cast<RankedTensorType>(value.getType());
  }
};

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

bool isFloatType(Type t) { return t.isF32() || t.isBF16() || t.isF16(); }
bool isIndexType(Type t) { return t.isInteger(32) || t.isInteger(64); }

std::string joinNames(const std::vector<std::string> &names) {
  std::string s;
  for (size_t k = 0; k < names.size(); ++k)
    s += (k ? ", " : "") + names[k];
  return s;
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
// The generator
//===----------------------------------------------------------------------===//

/// One user-block specialisation: (block, hyper-parameters, argument types).
struct Spec {
  std::string symbol;
  std::vector<Type> results;
  bool ok = false;
};

/// The state of the function being emitted (md.forward or one md.func).
struct FnState {
  Instance *self = nullptr; // whose params and hyper-parameters are in scope
  bool isFunc = false;
  std::string owner; // "model 'mlp'" or "block 'Block'"
  llvm::DenseMap<const Instance *, mlir::Value> leafArgs; // md.func only
  llvm::StringMap<std::pair<Val, SMLoc>> locals;
};

class ModelGen {
public:
  ModelGen(const Module &module, IRGenContext &ctx, const IRGenOptions &options)
      : module(module), ctx(ctx), options(options), mctx(ctx.context),
        b(&ctx.context) {}

  mlir::OwningOpRef<mlir::ModuleOp> run();

private:
  // Diagnostics -----------------------------------------------------------
  void error(SMLoc loc, const Twine &message);
  void note(SMLoc loc, const Twine &message);
  /// The number of `result`, or its error reported at `loc`.
  Val numberOrError(const NumResult &result, SMLoc loc);

  // Declarations ----------------------------------------------------------
  void checkDeclarations();
  void checkRecursion();
  std::optional<std::vector<const Expr *>>
  bindArgs(llvm::ArrayRef<Argument> args, llvm::ArrayRef<Formal> formals,
           StringRef callee, SMLoc loc);
  const BlockDecl *selectModel();
  bool bindModelHyperParams(const BlockDecl &model, Env &env);

  // Compile-time evaluation -----------------------------------------------
  Val evalConst(const Expr &e, const Env &env, bool allowBatch);
  std::optional<int64_t> evalDim(const Expr &e, const Env &env,
                                 bool allowBatch);
  std::optional<int64_t> dimOf(const Val &v, SMLoc loc, const Twine &what);
  RankedTensorType evalTensorType(const TypeExpr &t, const Env &env,
                                  bool allowBatch, bool floatOnly,
                                  StringRef what);
  md::InitAttr evalInit(const Expr *init, int64_t rank, const Env &env);
  Num batchNum() const {
    return batch ? Num::integer(*batch) : Num::dynamicBatch();
  }

  // Instances -------------------------------------------------------------
  std::unique_ptr<Instance> buildParam(const ParamDecl &p, const Env &env,
                                       const std::string &prefix, int64_t unit,
                                       std::vector<const BlockDecl *> &stack);
  std::unique_ptr<Instance> buildOne(const ParamDecl &p, const Env &env,
                                     const std::string &name,
                                     const std::string &path, int64_t unit,
                                     std::vector<const BlockDecl *> &stack);
  std::unique_ptr<Instance>
  buildBlock(const BlockDecl &decl, std::unique_ptr<Env> env,
             const std::string &name, const std::string &path, int64_t unit,
             SMLoc loc, std::vector<const BlockDecl *> &stack);
  std::unique_ptr<Instance> makeRaw(const std::string &name,
                                    const std::string &path,
                                    RankedTensorType type, md::InitAttr init,
                                    int64_t unit, SMLoc loc);
  std::unique_ptr<Instance> makeLayer(LayerKind kind, int64_t a, int64_t bDim,
                                      bool bias, double eps,
                                      const std::string &signature,
                                      const std::string &name,
                                      const std::string &path, int64_t unit,
                                      SMLoc loc);
  md::InitAttr initNormal(double mean, double stddev);
  md::InitAttr initSimple(md::InitKind kind);

  // Forward ---------------------------------------------------------------
  void genModelForward(Instance &root, const BlockDecl &model);
  bool genBody(FnState &fn, const ForwardDecl &fwd, std::vector<Val> &results,
               SMLoc &returnLoc);
  void bindLocal(FnState &fn, const std::string &name, SMLoc loc, Val v);
  Val eval(FnState &fn, const Expr &e);
  Val evalName(FnState &fn, const std::string &name, SMLoc loc);
  Val evalMember(FnState &fn, const MemberExpr &e);
  Val evalCall(FnState &fn, const CallExpr &e);
  Val evalUnary(FnState &fn, const UnaryExpr &e);
  Val evalBinary(FnState &fn, const BinaryExpr &e);
  Val leafValue(FnState &fn, Instance *leaf, SMLoc loc);
  Val instanceMember(FnState &fn, Instance *inst, SMLoc loc);

  Val callInstance(FnState &fn, Instance *inst, const CallExpr &call);
  std::vector<Val> applyInstance(FnState &fn, Instance *inst,
                                 const std::vector<Val> &args,
                                 const std::string &calleeName, SMLoc loc);
  Val applyLayer(FnState &fn, Instance *inst, const Val &x,
                 const std::string &calleeName, SMLoc loc);
  std::vector<Val> applyBlock(FnState &fn, Instance *inst,
                              const std::vector<Val> &args,
                              const std::string &calleeName, SMLoc loc);
  Spec *specialise(Instance *inst, const std::vector<Type> &argTypes);
  Val callBuiltin(FnState &fn, const CallExpr &call,
                  const std::vector<Formal> &formals);

  // Tensor helpers --------------------------------------------------------
  bool expectTensor(const Val &v, SMLoc loc, const Twine &what);
  bool expectFloat(const Val &v, SMLoc loc, const Twine &what);
  std::optional<int64_t> constInt(FnState &fn, const Expr &e,
                                  const Twine &what);
  std::optional<bool> constBool(FnState &fn, const Expr &e, const Twine &what);
  Val linear(FnState &fn, Instance *lin, const Val &x,
             const std::string &calleeName, SMLoc loc);
  Val scale(const Val &x, double factor, SMLoc loc);
  Val matmul(const Val &a, const Val &bVal, SMLoc loc);
  Val elementwise(BinaryOp op, const Val &l, const Val &r, SMLoc loc);
  Val reduce(FnState &fn, const CallExpr &call, const Val &x,
             const Expr *dims, const Expr *keepdim, bool isMean);
  Val reshape(FnState &fn, const Val &x, const Expr &shape, SMLoc loc);

  mlir::Location loc(SMLoc l) { return ctx.getLoc(l); }
  RankedTensorType tensorType(llvm::ArrayRef<int64_t> shape, Type elt) {
    return RankedTensorType::get(shape, elt);
  }

  const Module &module;
  IRGenContext &ctx;
  const IRGenOptions &options;
  mlir::MLIRContext &mctx;
  mlir::OpBuilder b;

  std::set<std::pair<const char *, std::string>> reported;
  bool lastErrorShown = false;
  unsigned errorCount = 0; // every error found, shown or deduplicated

  llvm::StringMap<const BlockDecl *> decls; // first definition of each name
  std::set<std::string> cyclic;             // blocks on an instantiation cycle
  std::optional<int64_t> batch;             // the train's micro_batch
  int64_t nextUnit = 1;

  md::ModelOp modelOp;
  md::ForwardOp forwardOp;
  llvm::StringSet<> symbols;
  std::map<std::string, Spec> specs;
  std::map<std::string, unsigned> specCount;
};

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
    auto it = llvm::find_if(formals,
                            [&](const Formal &f) { return f.name == arg.name; });
    if (it == formals.end()) {
      std::vector<std::string> names;
      for (const Formal &f : formals)
        names.push_back(f.name);
      error(arg.nameLoc,
            "unknown keyword argument '" + arg.name + "' for '" + callee +
                "'" +
                (names.empty() ? std::string(" (it takes no arguments)")
                               : " (expected " + joinNames(names) + ")"));
      ok = false;
      continue;
    }
    size_t index = it - formals.begin();
    if (bound[index]) {
      error(arg.nameLoc, "argument '" + arg.name + "' of '" + callee +
                             "' is given twice");
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
      error(decl.loc, "'" + decl.name +
                          "' is a built-in layer and cannot be redefined");
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
        auto first = std::min_element(
            cycle.begin(), cycle.end(), [&](auto *x, auto *y) {
              return order[x] < order[y];
            });
        std::rotate(cycle.begin(), first, cycle.end());
        std::string path;
        for (const BlockDecl *m : cycle)
          path += m->name + " -> ";
        path += cycle.front()->name;
        // Point at the param of the first block that continues the cycle.
        const BlockDecl *next =
            cycle.size() > 1 ? cycle[1] : cycle.front();
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
      error(SMLoc(), "--model " + options.model + ": '" + options.model +
                         "' is a block, not a model" +
                         (names.empty() ? std::string()
                                        : "; the models are: " +
                                              joinNames(names)));
    else if (names.empty())
      error(SMLoc(), "--model " + options.model +
                         ": the file declares no model");
    else
      error(SMLoc(), "--model " + options.model + ": no model named '" +
                         options.model + "'; the models are: " +
                         joinNames(names));
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
      error(SMLoc(), "-D " + name + "=" + text + ": model '" + model.name +
                         "' has no hyper-parameter '" + name + "'" +
                         (names.empty() ? std::string(" (it has none)")
                                        : " (it has " + joinNames(names) +
                                              ")"));
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
                        model.name + "' has no value; give it a default or "
                        "pass -D " + hp.name + "=VALUE");
      env[hp.name] = Val::error();
      ok = false;
      continue;
    }
    Val v = evalConst(*hp.defaultValue, env, /*allowBatch=*/false);
    if (v.kind == Val::Kind::Bool) {
      error(hp.defaultValue->loc, "hyper-parameter '" + hp.name +
                                      "' must be a number, got " +
                                      describe(v));
      v = Val::error();
    }
    env[hp.name] = v;
    ok &= !v.isError();
  }
  return ok;
}

//===----------------------------------------------------------------------===//
// Compile-time evaluation
//===----------------------------------------------------------------------===//

Val ModelGen::evalConst(const Expr &e, const Env &env, bool allowBatch) {
  switch (e.kind) {
  case Expr::Kind::Number: {
    const auto &n = llvm::cast<NumberExpr>(e);
    return Val::number(n.isInteger ? Num::integer(n.intValue)
                                   : Num::real(n.floatValue));
  }
  case Expr::Kind::Bool:
    return Val::boolVal(llvm::cast<BoolExpr>(e).value);
  case Expr::Kind::Name: {
    const auto &n = llvm::cast<NameExpr>(e);
    auto it = env.find(n.name);
    if (it != env.end())
      return it->second;
    if (allowBatch && n.name == "B")
      return Val::number(batchNum());
    error(e.loc, "'" + n.name + "' is not defined");
    return Val::error();
  }
  case Expr::Kind::Unary: {
    const auto &u = llvm::cast<UnaryExpr>(e);
    Val v = evalConst(*u.operand, env, allowBatch);
    if (v.isError())
      return v;
    if (u.op == UnaryOp::Neg && v.isNumber())
      return numberOrError(applyNumNeg(v.num), e.loc);
    if (u.op == UnaryOp::Not && v.kind == Val::Kind::Bool)
      return Val::boolVal(!v.boolean);
    error(e.loc, std::string(u.op == UnaryOp::Neg ? "'-'" : "'not'") +
                     " is not defined on " + describe(v));
    return Val::error();
  }
  case Expr::Kind::Binary: {
    const auto &bin = llvm::cast<BinaryExpr>(e);
    if (bin.op != BinaryOp::Add && bin.op != BinaryOp::Sub &&
        bin.op != BinaryOp::Mul && bin.op != BinaryOp::Div) {
      error(bin.opLoc, std::string("'") + binaryOpSpelling(bin.op) +
                           "' is not allowed in a compile-time expression; "
                           "use + - * /");
      return Val::error();
    }
    Val l = evalConst(*bin.lhs, env, allowBatch);
    Val r = evalConst(*bin.rhs, env, allowBatch);
    if (l.isError() || r.isError())
      return Val::error();
    if (!l.isNumber() || !r.isNumber()) {
      error(bin.opLoc, std::string("'") + binaryOpSpelling(bin.op) +
                           "' needs numbers, got " + describe(l) + " and " +
                           describe(r));
      return Val::error();
    }
    return numberOrError(applyNumBinary(bin.op, l.num, r.num), bin.opLoc);
  }
  default:
    error(e.loc, "expected a compile-time number");
    return Val::error();
  }
}

std::optional<int64_t> ModelGen::dimOf(const Val &v, SMLoc l,
                                       const Twine &what) {
  if (v.isError())
    return std::nullopt;
  if (v.isNumber() && v.num.dynamic && v.num.isInt)
    return ShapedType::kDynamic;
  if (!v.isNumber() || !v.num.isInt || v.num.i <= 0) {
    error(l, what + " must be a positive integer, got " +
                 (v.isNumber() ? formatNum(v.num) : describe(v)));
    return std::nullopt;
  }
  return v.num.i;
}

std::optional<int64_t> ModelGen::evalDim(const Expr &e, const Env &env,
                                         bool allowBatch) {
  return dimOf(evalConst(e, env, allowBatch), e.loc, "a dimension");
}

RankedTensorType ModelGen::evalTensorType(const TypeExpr &t, const Env &env,
                                          bool allowBatch, bool floatOnly,
                                          StringRef what) {
  Type elt = parseDtype(&mctx, t.dtype);
  bool ok = true;
  if (!elt) {
    error(t.loc, "unknown dtype '" + t.dtype +
                     "'; expected f32, bf16, f16, i32 or i64");
    ok = false;
  } else if (floatOnly && !isFloatType(elt)) {
    error(t.loc, what + " must have a float dtype (f32, bf16 or f16), got " +
                     t.dtype);
    ok = false;
  }
  llvm::SmallVector<int64_t> shape;
  for (const ExprPtr &d : t.dims) {
    std::optional<int64_t> dim = evalDim(*d, env, allowBatch);
    if (!dim)
      ok = false;
    else
      shape.push_back(*dim);
  }
  if (!ok)
    return {};
  return tensorType(shape, elt);
}

md::InitAttr ModelGen::initNormal(double mean, double stddev) {
  return md::InitAttr::get(&mctx, md::InitKind::normal,
                           {llvm::APFloat(mean), llvm::APFloat(stddev)});
}

md::InitAttr ModelGen::initSimple(md::InitKind kind) {
  return md::InitAttr::get(&mctx, kind, {});
}

md::InitAttr ModelGen::evalInit(const Expr *init, int64_t rank,
                                const Env &env) {
  if (!init)
    return rank >= 2 ? initNormal(0.0, 0.02) : initSimple(md::InitKind::zeros);
  std::string name;
  llvm::ArrayRef<Argument> args;
  if (auto *n = llvm::dyn_cast<NameExpr>(init)) {
    name = n->name;
  } else if (auto *c = llvm::dyn_cast<CallExpr>(init)) {
    name = c->callee;
    args = c->args;
  } else {
    error(init->loc, "expected an initialiser: zeros, ones, constant(v), "
                     "normal(std), normal(mean, std) or uniform(lo, hi)");
    return {};
  }
  auto number = [&](const Expr *e, double &out) {
    Val v = evalConst(*e, env, false);
    if (v.isError())
      return false;
    if (!v.isNumber()) {
      error(e->loc, "an argument of '" + name + "' must be a number, got " +
                        describe(v));
      return false;
    }
    out = v.num.value();
    return true;
  };
  if (name == "zeros" || name == "ones") {
    if (!bindArgs(args, {}, name, init->loc))
      return {};
    return initSimple(name == "zeros" ? md::InitKind::zeros
                                      : md::InitKind::ones);
  }
  if (name == "constant") {
    auto bound = bindArgs(args, {{"value", true}}, name, init->loc);
    double v = 0;
    if (!bound || !number((*bound)[0], v))
      return {};
    return md::InitAttr::get(&mctx, md::InitKind::constant,
                             {llvm::APFloat(v)});
  }
  if (name == "normal") {
    double mean = 0, stddev = 0.02;
    std::optional<std::vector<const Expr *>> bound;
    if (args.size() == 1 && args[0].name.empty())
      bound = std::vector<const Expr *>{nullptr, args[0].value.get()};
    else
      bound = bindArgs(args, {{"mean", false}, {"std", true}}, name,
                       init->loc);
    if (!bound)
      return {};
    if ((*bound)[0] && !number((*bound)[0], mean))
      return {};
    if (!number((*bound)[1], stddev))
      return {};
    if (!(stddev > 0)) {
      error((*bound)[1]->loc, "the standard deviation of 'normal' must be "
                              "positive, got " +
                                  formatNum(Num::real(stddev)));
      return {};
    }
    return initNormal(mean, stddev);
  }
  if (name == "uniform") {
    auto bound = bindArgs(args, {{"lo", true}, {"hi", true}}, name, init->loc);
    double lo = 0, hi = 0;
    if (!bound || !number((*bound)[0], lo) || !number((*bound)[1], hi))
      return {};
    if (!(lo < hi)) {
      error(init->loc, "'uniform' needs lo < hi, got " +
                           formatNum(Num::real(lo)) + " and " +
                           formatNum(Num::real(hi)));
      return {};
    }
    return md::InitAttr::get(&mctx, md::InitKind::uniform,
                             {llvm::APFloat(lo), llvm::APFloat(hi)});
  }
  error(init->loc, "unknown initialiser '" + name +
                       "'; expected zeros, ones, constant(v), normal(std), "
                       "normal(mean, std) or uniform(lo, hi)");
  return {};
}

//===----------------------------------------------------------------------===//
// Instances
//===----------------------------------------------------------------------===//

std::string childPath(const std::string &prefix, const std::string &name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::unique_ptr<Instance> ModelGen::makeRaw(const std::string &name,
                                            const std::string &path,
                                            RankedTensorType type,
                                            md::InitAttr init, int64_t unit,
                                            SMLoc l) {
  auto inst = std::make_unique<Instance>();
  inst->kind = Instance::Kind::Raw;
  inst->name = name;
  inst->path = path;
  inst->loc = l;
  inst->type = type;
  inst->init = init;
  inst->unit = unit;
  return inst;
}

std::unique_ptr<Instance>
ModelGen::makeLayer(LayerKind kind, int64_t a, int64_t bDim, bool bias,
                    double eps, const std::string &signature,
                    const std::string &name, const std::string &path,
                    int64_t unit, SMLoc l) {
  auto inst = std::make_unique<Instance>();
  inst->kind = Instance::Kind::Layer;
  inst->layer = kind;
  inst->name = name;
  inst->path = path;
  inst->loc = l;
  inst->dimA = a;
  inst->dimB = bDim;
  inst->bias = bias;
  inst->eps = eps;
  inst->signature = signature;
  inst->unit = unit;
  Type f32 = b.getF32Type();
  auto raw = [&](const std::string &n, llvm::ArrayRef<int64_t> shape,
                 md::InitAttr init) {
    inst->children.push_back(makeRaw(n, childPath(path, n),
                                     tensorType(shape, f32), init, unit, l));
  };
  auto sub = [&](const std::string &n, int64_t in, int64_t out) {
    inst->children.push_back(makeLayer(
        LayerKind::Linear, in, out, true, 0,
        "Linear(" + std::to_string(in) + ", " + std::to_string(out) + ")", n,
        childPath(path, n), unit, l));
  };
  switch (kind) {
  case LayerKind::Linear:
    raw("weight", {bDim, a}, initNormal(0.0, 0.02));
    if (bias)
      raw("bias", {bDim}, initSimple(md::InitKind::zeros));
    break;
  case LayerKind::Embedding:
    raw("weight", {a, bDim}, initNormal(0.0, 0.02));
    break;
  case LayerKind::LayerNorm:
  case LayerKind::BatchNorm:
    raw("weight", {a}, initSimple(md::InitKind::ones));
    raw("bias", {a}, initSimple(md::InitKind::zeros));
    break;
  case LayerKind::RMSNorm:
    raw("weight", {a}, initSimple(md::InitKind::ones));
    break;
  case LayerKind::Attention:
    for (const char *n : {"q", "k", "v", "proj"})
      sub(n, a, a);
    break;
  case LayerKind::Mlp:
    sub("fc", a, bDim);
    sub("proj", bDim, a);
    break;
  }
  return inst;
}

std::unique_ptr<Instance>
ModelGen::buildParam(const ParamDecl &p, const Env &env,
                     const std::string &prefix, int64_t unit,
                     std::vector<const BlockDecl *> &stack) {
  std::string path = childPath(prefix, p.name);
  auto invalid = [&] {
    auto inst = std::make_unique<Instance>();
    inst->kind = Instance::Kind::Invalid;
    inst->name = p.name;
    inst->path = path;
    inst->loc = p.loc;
    return inst;
  };
  if (!p.repeat) {
    auto inst = buildOne(p, env, p.name, path, unit, stack);
    return inst ? std::move(inst) : invalid();
  }
  std::optional<int64_t> n = dimOf(evalConst(*p.repeat, env, false),
                                   p.repeat->loc, "the repeat count");
  if (!n)
    return invalid();
  auto rep = std::make_unique<Instance>();
  rep->kind = Instance::Kind::Repeated;
  rep->name = p.name;
  rep->path = path;
  rep->loc = p.loc;
  for (int64_t k = 0; k < *n; ++k) {
    // Each repeated instance is a unit of its own unless the param already
    // sits in one (a repeated block nested in a repeated block).
    int64_t u = unit == 0 ? nextUnit++ : unit;
    std::string name = std::to_string(k);
    auto inst = buildOne(p, env, name, childPath(path, name), u, stack);
    if (!inst)
      return invalid();
    rep->signature = inst->signature;
    rep->children.push_back(std::move(inst));
  }
  rep->signature += "[" + std::to_string(*n) + "]";
  return rep;
}

std::unique_ptr<Instance>
ModelGen::buildOne(const ParamDecl &p, const Env &env, const std::string &name,
                   const std::string &path, int64_t unit,
                   std::vector<const BlockDecl *> &stack) {
  if (p.isRaw) {
    RankedTensorType type =
        evalTensorType(p.type, env, /*allowBatch=*/false, /*floatOnly=*/true,
                       "parameter '" + p.name + "'");
    if (!type)
      return nullptr;
    md::InitAttr init = evalInit(p.init.get(), type.getRank(), env);
    if (!init)
      return nullptr;
    return makeRaw(name, path, type, init, unit, p.loc);
  }

  const auto &layers = builtinLayers();
  auto layer = layers.find(p.layer);
  if (layer != layers.end()) {
    auto bound = bindArgs(p.args, layer->second.formals, p.layer, p.layerLoc);
    if (!bound)
      return nullptr;
    const auto &formals = layer->second.formals;
    std::vector<Val> vals(formals.size());
    bool ok = true;
    for (size_t k = 0; k < formals.size(); ++k)
      if ((*bound)[k]) {
        vals[k] = evalConst(*(*bound)[k], env, false);
        ok &= !vals[k].isError();
      }
    if (!ok)
      return nullptr;
    auto dim = [&](size_t k) {
      return dimOf(vals[k], (*bound)[k]->loc,
                   "argument '" + formals[k].name + "' of '" + p.layer + "'");
    };
    auto eps = [&](size_t k, double dflt) -> std::optional<double> {
      if (!(*bound)[k])
        return dflt;
      if (!vals[k].isNumber() || !(vals[k].num.value() > 0)) {
        error((*bound)[k]->loc, "argument 'eps' of '" + p.layer +
                                    "' must be a positive number, got " +
                                    (vals[k].isNumber()
                                         ? formatNum(vals[k].num)
                                         : describe(vals[k])));
        return std::nullopt;
      }
      return vals[k].num.value();
    };
    LayerKind kind = layer->second.kind;
    int64_t a = 0, bDim = 0;
    bool bias = true;
    double epsValue = 0;
    std::string sig;
    switch (kind) {
    case LayerKind::Linear: {
      auto in = dim(0), out = dim(1);
      if ((*bound)[2]) {
        if (vals[2].kind != Val::Kind::Bool) {
          error((*bound)[2]->loc,
                "argument 'bias' of 'Linear' must be true or false, got " +
                    describe(vals[2]));
          ok = false;
        } else {
          bias = vals[2].boolean;
        }
      }
      if (!in || !out || !ok)
        return nullptr;
      a = *in;
      bDim = *out;
      sig = "Linear(" + std::to_string(a) + ", " + std::to_string(bDim) +
            (bias ? "" : ", bias = false") + ")";
      break;
    }
    case LayerKind::Embedding:
    case LayerKind::Attention: {
      auto x = dim(0), y = dim(1);
      if (!x || !y)
        return nullptr;
      a = *x;
      bDim = *y;
      if (kind == LayerKind::Attention && a % bDim != 0) {
        error(p.layerLoc, "Attention: d = " + Twine(a) +
                              " is not divisible by heads = " + Twine(bDim));
        return nullptr;
      }
      sig = p.layer + "(" + std::to_string(a) + ", " + std::to_string(bDim) +
            ")";
      break;
    }
    case LayerKind::LayerNorm:
    case LayerKind::RMSNorm:
    case LayerKind::BatchNorm: {
      auto d = dim(0);
      auto e = eps(1, kind == LayerKind::RMSNorm ? 1e-6 : 1e-5);
      if (!d || !e)
        return nullptr;
      a = *d;
      epsValue = *e;
      sig = p.layer + "(" + std::to_string(a) + ")";
      break;
    }
    case LayerKind::Mlp: {
      auto d = dim(0);
      if (!d)
        return nullptr;
      a = *d;
      if ((*bound)[1]) {
        auto h = dim(1);
        if (!h)
          return nullptr;
        bDim = *h;
      } else if (__builtin_mul_overflow(a, int64_t(4), &bDim)) {
        error(p.layerLoc, "integer overflow in 4 * " + Twine(a));
        return nullptr;
      }
      sig = "Mlp(" + std::to_string(a) + ", " + std::to_string(bDim) + ")";
      break;
    }
    }
    return makeLayer(kind, a, bDim, bias, epsValue, sig, name, path, unit,
                     p.loc);
  }

  const BlockDecl *target = decls.lookup(p.layer);
  if (!target || target->isModel)
    return nullptr; // reported by checkDeclarations
  if (cyclic.count(target->name) || llvm::is_contained(stack, target))
    return nullptr; // reported by checkRecursion
  auto bound = bindArgs(p.args, hyperFormals(*target), p.layer, p.layerLoc);
  if (!bound)
    return nullptr;
  auto hyper = std::make_unique<Env>();
  bool ok = true;
  for (auto [k, hp] : llvm::enumerate(target->hyperParams)) {
    Val v = (*bound)[k] ? evalConst(*(*bound)[k], env, false)
                        : evalConst(*hp.defaultValue, *hyper, false);
    if (v.kind == Val::Kind::Bool) {
      error(((*bound)[k] ? (*bound)[k] : hp.defaultValue.get())->loc,
            "hyper-parameter '" + hp.name + "' of '" + target->name +
                "' must be a number, got " + describe(v));
      v = Val::error();
    }
    ok &= !v.isError();
    (*hyper)[hp.name] = v;
  }
  if (!ok)
    return nullptr;
  stack.push_back(target);
  auto inst = buildBlock(*target, std::move(hyper), name, path, unit, p.loc,
                         stack);
  stack.pop_back();
  return inst;
}

std::unique_ptr<Instance>
ModelGen::buildBlock(const BlockDecl &decl, std::unique_ptr<Env> env,
                     const std::string &name, const std::string &path,
                     int64_t unit, SMLoc l,
                     std::vector<const BlockDecl *> &stack) {
  auto inst = std::make_unique<Instance>();
  inst->kind = Instance::Kind::Block;
  inst->block = &decl;
  inst->name = name;
  inst->path = path;
  inst->loc = l;
  inst->unit = unit;
  std::string key, sig;
  for (const HyperParam &hp : decl.hyperParams) {
    const Val &v = (*env)[hp.name];
    std::string text = formatNum(v.num);
    if (!v.num.isInt) {
      char buf[64];
      snprintf(buf, sizeof(buf), "%.17g", v.num.f);
      key += hp.name + "=" + buf + ";";
    } else {
      key += hp.name + "=" + text + ";";
    }
    sig += (sig.empty() ? "" : ", ") + hp.name + " = " + text;
  }
  inst->hyperKey = key;
  inst->signature = decl.name + "(" + sig + ")";
  for (const ParamDecl &p : decl.params)
    inst->children.push_back(buildParam(p, *env, path, unit, stack));
  inst->hyper = std::move(env);
  return inst;
}

//===----------------------------------------------------------------------===//
// Forward: statements
//===----------------------------------------------------------------------===//

// A let may rebind a name (`x = x + attn(ln_1(x))`, the residual style of
// DESIGN.md's sketch): values are immutable, a rebinding only changes what
// the name refers to from here on. It may not hide a parameter instance or a
// hyper-parameter, whose names a reader expects to keep their meaning.
void ModelGen::bindLocal(FnState &fn, const std::string &name, SMLoc l,
                         Val v) {
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

const char *stmtKeyword(Stmt::Kind kind) {
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
      bool unpack = v.kind == Val::Kind::Tuple &&
                    v.elements.size() == let.targets.size();
      if (!unpack && !v.isError())
        error(let.loc, "cannot unpack " + describe(v) + " into " +
                           Twine(let.targets.size()) + " names");
      llvm::StringMap<SMLoc> seen;
      for (auto [k, target] : llvm::enumerate(let.targets)) {
        auto [it, inserted] = seen.try_emplace(target.name, target.loc);
        if (!inserted) {
          error(target.loc, "'" + target.name +
                                "' appears twice in the same assignment");
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
                            /*floatOnly=*/false,
                            "argument '" + arg.name + "'");
    argOk.push_back(static_cast<bool>(type));
    argTypes.push_back(type ? Type(type)
                            : Type(tensorType({}, b.getF32Type())));
  }

  b.setInsertionPointToEnd(&modelOp.getBody().front());
  forwardOp = md::ForwardOp::create(b, loc(fwd.loc), "forward",
                                    b.getFunctionType(argTypes, {}), nullptr,
                                    nullptr);
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
  case Expr::Kind::Number: {
    const auto &n = llvm::cast<NumberExpr>(e);
    return Val::number(n.isInteger ? Num::integer(n.intValue)
                                   : Num::real(n.floatValue));
  }
  case Expr::Kind::Bool:
    return Val::boolVal(llvm::cast<BoolExpr>(e).value);
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
    error(e.loc, "a list is only allowed as the shape of reshape or the "
                 "dims of sum and mean");
    return Val::error();
  case Expr::Kind::Size:
    error(e.loc, "a size is not a value in a forward");
    return Val::error();
  case Expr::Kind::Record:
    error(e.loc, "a record is not a value in a forward");
    return Val::error();
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
    error(e.opLoc, std::string("'") + op +
                       "' needs tensors or numbers, got " + describe(l) +
                       " and " + describe(r));
    return Val::error();
  }
  if (l.isNumber() && r.isNumber()) {
    if (e.op == BinaryOp::MatMul) {
      error(e.opLoc, "'@' needs tensors, got " + describe(l) + " and " +
                         describe(r));
      return Val::error();
    }
    return numberOrError(applyNumBinary(e.op, l.num, r.num), e.opLoc);
  }
  if (e.op == BinaryOp::MatMul) {
    if (!l.isTensor() || !r.isTensor()) {
      error(e.opLoc, "'@' needs tensors, got " + describe(l) + " and " +
                         describe(r));
      return Val::error();
    }
    return matmul(l, r, e.opLoc);
  }
  if (l.isTensor() && r.isTensor()) {
    if (e.op == BinaryOp::Div) {
      error(e.opLoc, "'/' between tensors is not supported; divide by a "
                     "number instead, got " +
                         describe(l) + " and " + describe(r));
      return Val::error();
    }
    return elementwise(e.op, l, r, e.opLoc);
  }
  // A tensor and a number.
  const Val &t = l.isTensor() ? l : r;
  const Val &n = l.isTensor() ? r : l;
  bool scaling = e.op == BinaryOp::Mul || (e.op == BinaryOp::Div && l.isTensor());
  if (!scaling) {
    error(e.opLoc, std::string("'") + op + "' between " + describe(l) +
                       " and " + describe(r) +
                       " is not supported; only '*' and '/' scale a tensor "
                       "by a number");
    return Val::error();
  }
  if (n.num.dynamic) {
    error(e.opLoc, "the batch size B is not known at compile time without a "
                   "train's micro_batch");
    return Val::error();
  }
  if (!expectFloat(t, e.opLoc, Twine("the tensor operand of '") + op + "'"))
    return Val::error();
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
    std::vector<Val> current = args;
    for (auto &child : inst->children) {
      std::vector<Val> next = applyInstance(fn, child.get(), current,
                                            calleeName, l);
      if (next.empty())
        return {};
      bool same = next.size() == current.size();
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
                     "' must map its input to the same type, but " +
                     child->signature + " maps " + list(current) + " to " +
                     list(next));
        return {};
      }
      current = std::move(next);
    }
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
                         /*floatOnly=*/false,
                         "argument '" + formal.name + "'");
      if (want && !(want.getElementType() == arg.type().getElementType() &&
                    want.getRank() == arg.type().getRank() &&
                    llvm::all_of(llvm::zip(want.getShape(),
                                           arg.type().getShape()),
                                 [](auto p) {
                                   return dimsCompatible(std::get<0>(p),
                                                         std::get<1>(p));
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
  auto func = md::FuncOp::create(b, loc(decl.loc), symbol,
                                 b.getFunctionType(inputs, {}), nullptr,
                                 nullptr);
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
      error(returnLoc, "a block's forward must return tensors, got " +
                           describe(v));
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

//===----------------------------------------------------------------------===//
// Built-in layers
//===----------------------------------------------------------------------===//

bool ModelGen::expectTensor(const Val &v, SMLoc l, const Twine &what) {
  if (v.isError())
    return false;
  if (v.isTensor())
    return true;
  error(l, what + " must be a tensor, got " + describe(v));
  return false;
}

bool ModelGen::expectFloat(const Val &v, SMLoc l, const Twine &what) {
  if (!expectTensor(v, l, what))
    return false;
  if (isFloatType(v.type().getElementType()))
    return true;
  error(l, what + " must be a float tensor (f32, bf16 or f16), got " +
               describe(v));
  return false;
}

Val ModelGen::linear(FnState &fn, Instance *lin, const Val &x,
                     const std::string &calleeName, SMLoc l) {
  Val w = leafValue(fn, lin->child("weight"), l);
  Val bias = lin->bias ? leafValue(fn, lin->child("bias"), l) : Val();
  if (w.isError() || (lin->bias && bias.isError()))
    return Val::error();
  RankedTensorType xt = x.type();
  llvm::ArrayRef<int64_t> shape = xt.getShape();
  if (xt.getRank() < 1 || !dimsCompatible(shape.back(), lin->dimA)) {
    error(l, "'" + calleeName + "' (" + lin->signature +
                 ") expects an input of shape f32[..., " + Twine(lin->dimA) +
                 "], got " + formatType(xt));
    return Val::error();
  }
  mlir::Value in = x.value;
  if (xt.getRank() == 1)
    in = md::ReshapeOp::create(b, loc(l), tensorType({1, lin->dimA},
                                                     xt.getElementType()),
                               in);
  auto inType = llvm::cast<RankedTensorType>(in.getType());
  llvm::SmallVector<int64_t> out(inType.getShape());
  out.back() = lin->dimB;
  auto resultType = tensorType(out, xt.getElementType());
  mlir::Value y = md::MatmulOp::create(b, loc(l), resultType, in, w.value,
                                       lin->bias ? bias.value : mlir::Value(),
                                       /*transpose_a=*/false,
                                       /*transpose_b=*/true);
  if (xt.getRank() == 1)
    y = md::ReshapeOp::create(b, loc(l),
                              tensorType({lin->dimB}, xt.getElementType()), y);
  return Val::tensor(y);
}

Val ModelGen::applyLayer(FnState &fn, Instance *inst, const Val &x,
                         const std::string &calleeName, SMLoc l) {
  std::string who = "'" + calleeName + "' (" + inst->signature + ")";
  if (inst->layer == LayerKind::Embedding) {
    if (!expectTensor(x, l, "the input of " + who))
      return Val::error();
    if (!isIndexType(x.type().getElementType())) {
      error(l, "embedding ids must be i32 or i64, got " + describe(x));
      return Val::error();
    }
    Val table = leafValue(fn, inst->child("weight"), l);
    if (table.isError())
      return table;
    llvm::SmallVector<int64_t> shape(x.type().getShape());
    shape.push_back(inst->dimB);
    return Val::tensor(md::EmbeddingOp::create(
        b, loc(l), tensorType(shape, b.getF32Type()), table.value, x.value));
  }
  if (!expectFloat(x, l, "the input of " + who))
    return Val::error();
  RankedTensorType xt = x.type();
  if (!xt.getElementType().isF32()) {
    error(l, who + " has f32 parameters; its input must be f32, got " +
                 formatType(xt));
    return Val::error();
  }
  auto lastDim = [&](int64_t d, int64_t minRank) {
    if (xt.getRank() >= minRank && dimsCompatible(xt.getShape().back(), d))
      return true;
    std::string dims = "f32[";
    for (int64_t k = 1; k < minRank; ++k)
      dims += "?, ";
    error(l, who + " expects an input of shape " +
                 (minRank > 1 ? dims + "..., " : std::string("f32[..., ")) +
                 std::to_string(d) + "], got " + formatType(xt));
    return false;
  };
  switch (inst->layer) {
  case LayerKind::Linear:
    return linear(fn, inst, x, calleeName, l);
  case LayerKind::LayerNorm: {
    if (!lastDim(inst->dimA, 1))
      return Val::error();
    Val g = leafValue(fn, inst->child("weight"), l);
    Val bt = leafValue(fn, inst->child("bias"), l);
    if (g.isError() || bt.isError())
      return Val::error();
    return Val::tensor(md::LayerNormOp::create(b, loc(l), xt, x.value, g.value,
                                               bt.value,
                                               b.getF64FloatAttr(inst->eps)));
  }
  case LayerKind::RMSNorm: {
    if (!lastDim(inst->dimA, 1))
      return Val::error();
    Val g = leafValue(fn, inst->child("weight"), l);
    if (g.isError())
      return g;
    return Val::tensor(md::RmsNormOp::create(b, loc(l), xt, x.value, g.value,
                                             b.getF64FloatAttr(inst->eps)));
  }
  case LayerKind::BatchNorm: {
    if (!lastDim(inst->dimA, 2))
      return Val::error();
    Val g = leafValue(fn, inst->child("weight"), l);
    Val bt = leafValue(fn, inst->child("bias"), l);
    if (g.isError() || bt.isError())
      return Val::error();
    auto stats = tensorType({inst->dimA}, b.getF32Type());
    auto op = md::BatchNormOp::create(b, loc(l), xt, stats, stats, x.value,
                                      g.value, bt.value,
                                      b.getF64FloatAttr(inst->eps));
    return Val::tensor(op.getY());
  }
  case LayerKind::Attention: {
    if (xt.getRank() != 3 || !dimsCompatible(xt.getShape().back(), inst->dimA)) {
      error(l, who + " expects an input of shape f32[B, T, " +
                   Twine(inst->dimA) + "], got " + formatType(xt));
      return Val::error();
    }
    Val q = linear(fn, inst->child("q"), x, calleeName + ".q", l);
    Val k = linear(fn, inst->child("k"), x, calleeName + ".k", l);
    Val v = linear(fn, inst->child("v"), x, calleeName + ".v", l);
    if (q.isError() || k.isError() || v.isError())
      return Val::error();
    mlir::Value att = md::CausalAttentionOp::create(
        b, loc(l), q.type(), q.value, k.value, v.value,
        static_cast<uint64_t>(inst->dimB));
    return linear(fn, inst->child("proj"), Val::tensor(att),
                  calleeName + ".proj", l);
  }
  case LayerKind::Mlp: {
    if (!lastDim(inst->dimA, 1))
      return Val::error();
    Val h = linear(fn, inst->child("fc"), x, calleeName + ".fc", l);
    if (h.isError())
      return h;
    mlir::Value g = md::GeluOp::create(b, loc(l), h.type(), h.value,
                                       /*approximate=*/true);
    return linear(fn, inst->child("proj"), Val::tensor(g),
                  calleeName + ".proj", l);
  }
  case LayerKind::Embedding:
    break;
  }
  return Val::error();
}

//===----------------------------------------------------------------------===//
// Operators and built-in functions
//===----------------------------------------------------------------------===//

Val ModelGen::scale(const Val &x, double factor, SMLoc l) {
  return Val::tensor(md::ScaleOp::create(b, loc(l), x.type(), x.value,
                                         b.getF64FloatAttr(factor)));
}

Val ModelGen::matmul(const Val &a, const Val &bv, SMLoc l) {
  if (!expectFloat(a, l, "the left operand of '@'") ||
      !expectFloat(bv, l, "the right operand of '@'"))
    return Val::error();
  RankedTensorType at = a.type(), bt = bv.type();
  std::string both = formatType(at) + " @ " + formatType(bt);
  if (at.getElementType() != bt.getElementType()) {
    error(l, "element types differ in '@': " + both);
    return Val::error();
  }
  if (at.getRank() < 2 || bt.getRank() < 2) {
    error(l, "matmul needs operands of rank >= 2: " + both);
    return Val::error();
  }
  if (bt.getRank() != 2 && bt.getRank() != at.getRank()) {
    error(l, "matmul needs a right operand of rank 2 or of the rank of the "
             "left one: " +
                 both);
    return Val::error();
  }
  llvm::ArrayRef<int64_t> as = at.getShape(), bs = bt.getShape();
  if (bt.getRank() > 2)
    for (int64_t k = 0; k + 2 < at.getRank(); ++k)
      if (!dimsCompatible(as[k], bs[k])) {
        error(l, "matmul batch dimensions differ: " + both);
        return Val::error();
      }
  int64_t ka = as.back(), kb = bs[bs.size() - 2];
  if (!dimsCompatible(ka, kb)) {
    error(l, "matmul contracting dimensions differ: " + both + " (" +
                 Twine(ka) + " vs " + Twine(kb) + ")");
    return Val::error();
  }
  llvm::SmallVector<int64_t> shape(as.drop_back());
  shape.push_back(bs.back());
  return Val::tensor(md::MatmulOp::create(
      b, loc(l), tensorType(shape, at.getElementType()), a.value, bv.value,
      mlir::Value(), false, false));
}

Val ModelGen::elementwise(BinaryOp op, const Val &l, const Val &r, SMLoc at) {
  std::string spelling = std::string("'") + binaryOpSpelling(op) + "'";
  if (!expectFloat(l, at, "the left operand of " + spelling) ||
      !expectFloat(r, at, "the right operand of " + spelling))
    return Val::error();
  RankedTensorType lt = l.type(), rt = r.type();
  if (lt.getElementType() != rt.getElementType()) {
    error(at, "element types differ in " + spelling + ": " + formatType(lt) +
                  " and " + formatType(rt));
    return Val::error();
  }
  auto shape = broadcastShapes(lt.getShape(), rt.getShape());
  if (!shape) {
    error(at, "shape mismatch in " + spelling + ": " + formatType(lt) +
                  " and " + formatType(rt) + " do not broadcast");
    return Val::error();
  }
  auto type = tensorType(*shape, lt.getElementType());
  mlir::Location where = loc(at);
  switch (op) {
  case BinaryOp::Add:
    return Val::tensor(md::AddOp::create(b, where, type, l.value, r.value));
  case BinaryOp::Sub:
    return Val::tensor(md::SubOp::create(b, where, type, l.value, r.value));
  default:
    return Val::tensor(md::MulOp::create(b, where, type, l.value, r.value));
  }
}

std::optional<int64_t> ModelGen::constInt(FnState &fn, const Expr &e,
                                          const Twine &what) {
  Val v = eval(fn, e);
  if (v.isError())
    return std::nullopt;
  if (!v.isNumber() || !v.num.isInt || v.num.dynamic) {
    error(e.loc, what + " must be an integer known at compile time, got " +
                     (v.isNumber() ? formatNum(v.num) : describe(v)));
    return std::nullopt;
  }
  return v.num.i;
}

std::optional<bool> ModelGen::constBool(FnState &fn, const Expr &e,
                                        const Twine &what) {
  Val v = eval(fn, e);
  if (v.isError())
    return std::nullopt;
  if (v.kind != Val::Kind::Bool) {
    error(e.loc, what + " must be true or false, got " + describe(v));
    return std::nullopt;
  }
  return v.boolean;
}

Val ModelGen::reshape(FnState &fn, const Val &x, const Expr &shapeExpr,
                      SMLoc l) {
  auto *list = llvm::dyn_cast<ListExpr>(&shapeExpr);
  if (!list) {
    error(shapeExpr.loc, "the shape of reshape must be a list of dims, e.g. "
                         "reshape(x, [B, T * C])");
    return Val::error();
  }
  llvm::SmallVector<int64_t> shape;
  int inferred = -1;
  bool ok = true;
  for (auto [k, el] : llvm::enumerate(list->elements)) {
    Val v = eval(fn, *el);
    if (v.isError()) {
      ok = false;
      continue;
    }
    if (v.isNumber() && v.num.isInt && !v.num.dynamic && v.num.i == -1 &&
        inferred < 0) {
      inferred = static_cast<int>(k);
      shape.push_back(ShapedType::kDynamic);
      continue;
    }
    std::optional<int64_t> d = dimOf(v, el->loc, "a dimension of reshape");
    if (!d) {
      ok = false;
      continue;
    }
    shape.push_back(*d);
  }
  if (!ok || !expectTensor(x, l, "the input of reshape"))
    return Val::error();
  RankedTensorType xt = x.type();
  auto staticProduct = [](llvm::ArrayRef<int64_t> s, int &numDynamic) {
    int64_t p = 1;
    numDynamic = 0;
    for (int64_t d : s) {
      if (ShapedType::isDynamic(d))
        ++numDynamic;
      else
        p *= d;
    }
    return p;
  };
  int inDyn = 0, outDyn = 0;
  int64_t inCount = staticProduct(xt.getShape(), inDyn);
  if (inferred >= 0) {
    shape[inferred] = 1;
    int tmp = 0;
    int64_t rest = staticProduct(shape, tmp);
    if (inDyn == 0 && tmp == 0 && rest > 0 && inCount % rest == 0) {
      shape[inferred] = inCount / rest;
    } else if (inDyn == 0 && tmp == 0) {
      std::string target;
      for (auto [k, dim] : llvm::enumerate(shape))
        target += (k ? ", " : "") +
                  (static_cast<int>(k) == inferred ? std::string("-1")
                                                   : std::to_string(dim));
      error(l, "cannot reshape " + formatType(xt) + " to [" + target +
                   "]: its " + Twine(inCount) +
                   " elements are not a multiple of " + Twine(rest));
      return Val::error();
    } else {
      shape[inferred] = ShapedType::kDynamic;
    }
  }
  int64_t outCount = staticProduct(shape, outDyn);
  auto result = tensorType(shape, xt.getElementType());
  // A dynamic dim (B without a train) may stand for B times anything: only
  // fully static shapes are compared.
  if (inDyn == 0 && outDyn == 0 && inCount != outCount) {
    error(l, "reshape from " + formatType(xt) + " to " + formatType(result) +
                 " changes the number of elements (" + Twine(inCount) +
                 " vs " + Twine(outCount) + ")");
    return Val::error();
  }
  return Val::tensor(md::ReshapeOp::create(b, loc(l), result, x.value));
}

Val ModelGen::reduce(FnState &fn, const CallExpr &call, const Val &x,
                     const Expr *dimsExpr, const Expr *keepdimExpr,
                     bool isMean) {
  const char *name = isMean ? "mean" : "sum";
  bool keepdim = false;
  if (keepdimExpr) {
    auto k = constBool(fn, *keepdimExpr, "keepdim");
    if (!k)
      return Val::error();
    keepdim = *k;
  }
  if (!expectFloat(x, call.loc, Twine("the input of ") + name))
    return Val::error();
  RankedTensorType xt = x.type();
  int64_t rank = xt.getRank();
  llvm::SmallVector<int64_t> dims;
  if (dimsExpr) {
    auto *list = llvm::dyn_cast<ListExpr>(dimsExpr);
    if (!list) {
      error(dimsExpr->loc, Twine("the dims of ") + name +
                               " must be a list, e.g. dims = [-1]");
      return Val::error();
    }
    llvm::SmallVector<bool> seen(rank, false);
    for (const ExprPtr &el : list->elements) {
      auto d = constInt(fn, *el, "a dim");
      if (!d)
        return Val::error();
      if (*d < -rank || *d >= rank) {
        error(el->loc, "dim " + Twine(*d) + " is out of range for " +
                           formatType(xt));
        return Val::error();
      }
      int64_t n = *d < 0 ? *d + rank : *d;
      if (seen[n]) {
        error(el->loc, "dim " + Twine(*d) + " is listed twice");
        return Val::error();
      }
      seen[n] = true;
      dims.push_back(n);
    }
    if (dims.empty()) {
      error(dimsExpr->loc, Twine("the dims of ") + name + " must not be empty");
      return Val::error();
    }
  } else {
    for (int64_t k = 0; k < rank; ++k)
      dims.push_back(k);
  }
  if (dims.empty())
    return x; // a scalar reduced over no dims
  llvm::SmallVector<int64_t> shape;
  for (int64_t k = 0; k < rank; ++k) {
    if (!llvm::is_contained(dims, k))
      shape.push_back(xt.getShape()[k]);
    else if (keepdim)
      shape.push_back(1);
  }
  auto type = tensorType(shape, xt.getElementType());
  if (isMean)
    return Val::tensor(md::MeanOp::create(b, loc(call.loc), type, x.value,
                                          dims, keepdim));
  return Val::tensor(
      md::SumOp::create(b, loc(call.loc), type, x.value, dims, keepdim));
}

Val ModelGen::callBuiltin(FnState &fn, const CallExpr &call,
                          const std::vector<Formal> &formals) {
  const std::string &name = call.callee;
  auto bound = bindArgs(call.args, formals, name, call.loc);
  if (!bound)
    return Val::error();
  const std::vector<const Expr *> &args = *bound;
  SMLoc l = call.loc;

  if (name == "arange") {
    auto n = constInt(fn, *args[0], "the argument of arange");
    if (!n)
      return Val::error();
    if (*n <= 0) {
      error(args[0]->loc, "arange needs a positive length, got " + Twine(*n));
      return Val::error();
    }
    return Val::tensor(md::ArangeOp::create(
        b, loc(l), tensorType({*n}, b.getI64Type()), b.getI64IntegerAttr(0),
        b.getI64IntegerAttr(*n)));
  }

  Val x = eval(fn, *args[0]);
  if (x.isError())
    return x;
  std::string what = "the input of " + name;

  if (name == "gelu" || name == "relu") {
    bool approximate = false;
    if (name == "gelu" && args[1]) {
      auto a = constBool(fn, *args[1], "approximate");
      if (!a)
        return Val::error();
      approximate = *a;
    }
    if (!expectFloat(x, l, what))
      return Val::error();
    if (name == "relu")
      return Val::tensor(md::ReluOp::create(b, loc(l), x.type(), x.value));
    return Val::tensor(
        md::GeluOp::create(b, loc(l), x.type(), x.value, approximate));
  }
  if (name == "softmax") {
    int64_t axis = -1;
    if (args[1]) {
      auto a = constInt(fn, *args[1], "axis");
      if (!a)
        return Val::error();
      axis = *a;
    }
    if (!expectFloat(x, l, what))
      return Val::error();
    int64_t rank = x.type().getRank();
    if (axis < -rank || axis >= rank) {
      error(args[1] ? args[1]->loc : l, "axis " + Twine(axis) +
                                            " is out of range for " +
                                            formatType(x.type()));
      return Val::error();
    }
    return Val::tensor(md::SoftmaxOp::create(b, loc(l), x.type(), x.value,
                                             b.getI64IntegerAttr(axis)));
  }
  if (name == "transpose") {
    if (!expectTensor(x, l, what))
      return Val::error();
    RankedTensorType xt = x.type();
    if (xt.getRank() < 2) {
      error(l, "transpose swaps the last two dims and needs rank >= 2, got " +
                   formatType(xt));
      return Val::error();
    }
    llvm::SmallVector<int64_t> perm, shape(xt.getShape());
    for (int64_t k = 0; k < xt.getRank(); ++k)
      perm.push_back(k);
    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
    std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
    return Val::tensor(md::TransposeOp::create(
        b, loc(l), tensorType(shape, xt.getElementType()), x.value, perm));
  }
  if (name == "reshape")
    return reshape(fn, x, *args[1], l);
  if (name == "sum" || name == "mean")
    return reduce(fn, call, x, args[1], args[2], name == "mean");
  if (name == "cross_entropy") {
    Val t = eval(fn, *args[1]);
    std::optional<int64_t> ignore;
    if (args[2]) {
      ignore = constInt(fn, *args[2], "ignore_index");
      if (!ignore)
        return Val::error();
    }
    if (t.isError())
      return t;
    if (!expectFloat(x, l, "the logits of cross_entropy") ||
        !expectTensor(t, l, "the targets of cross_entropy"))
      return Val::error();
    RankedTensorType xt = x.type(), tt = t.type();
    if (!isIndexType(tt.getElementType())) {
      error(args[1]->loc, "cross_entropy targets must be i32 or i64, got " +
                              formatType(tt));
      return Val::error();
    }
    llvm::ArrayRef<int64_t> lead = xt.getShape().drop_back();
    bool match = xt.getRank() >= 1 && tt.getRank() == xt.getRank() - 1 &&
                 llvm::all_of(llvm::zip(lead, tt.getShape()), [](auto p) {
                   return dimsCompatible(std::get<0>(p), std::get<1>(p));
                 });
    if (!match) {
      error(l, "cross_entropy targets " + formatType(tt) +
                   " do not match the leading dims of the logits " +
                   formatType(xt));
      return Val::error();
    }
    return Val::tensor(md::CrossEntropyOp::create(
        b, loc(l), tensorType({}, b.getF32Type()), x.value, t.value,
        ignore ? b.getI64IntegerAttr(*ignore) : mlir::IntegerAttr()));
  }
  error(l, "'" + name + "' is not implemented");
  return Val::error();
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

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

    b.setInsertionPointToEnd(moduleOp->getBody());
    modelOp = md::ModelOp::create(b, loc(model->loc), model->name);
    b.setInsertionPointToEnd(&modelOp.getBody().front());
    for (Instance *leaf : root->leaves()) {
      symbols.insert(leaf->path);
      md::ParamOp::create(b, loc(leaf->loc), leaf->path, leaf->type,
                          leaf->init, b.getI64IntegerAttr(leaf->unit),
                          /*offset=*/nullptr, /*frozen=*/false);
    }
    genModelForward(*root, *model);
  }

  // The plan generator checks `blocks(h)` against this model and a
  // single-rank plan against the pinned world size: both come first.
  ctx.modelDecl = model;
  ctx.modelOp = modelOp ? modelOp.getOperation() : nullptr;
  if (modelOp && options.worldSize) {
    if (*options.worldSize <= 0)
      error(SMLoc(), "--world-size must be positive, got " +
                         Twine(*options.worldSize));
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
      if (auto fileLoc = llvm::dyn_cast<mlir::FileLineColLoc>(diag.getLocation())) {
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
      ctx.diags.error(where, "internal error: the generated IR does not "
                             "verify: " +
                                 (message.empty() ? std::string("(no message)")
                                                  : message));
      return nullptr;
    }
  }
  return moduleOp;
}

} // namespace

mlir::OwningOpRef<mlir::ModuleOp> generateIR(const Module &module,
                                             mlir::MLIRContext &context,
                                             const IRGenOptions &options,
                                             Diagnostics &diags) {
  IRGenContext ctx(context, diags);
  ModelGen gen(module, ctx, options);
  return gen.run();
}

} // namespace md::frontend
