//===- IRGenParams.cpp - the model's params -------------------------------===//
//
// Compile-time evaluation of hyper-parameters, dimensions, tensor types and
// initialisers, and the instance tree of a model's params: built-in layers,
// user blocks and repeated blocks, each leaf a future `md.param`.
//
//===----------------------------------------------------------------------===//

#include "frontend/ModelGen.h"

namespace md::frontend::irgen {

//===----------------------------------------------------------------------===//
// Compile-time evaluation
//===----------------------------------------------------------------------===//

Val ModelGen::evalConst(const Expr &e, const Env &env, bool allowBatch) {
  switch (e.kind) {
  case Expr::Kind::Number:
  case Expr::Kind::Bool:
    return literalValue(e);
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
    error(t.loc,
          what + " must have a float dtype (f32, bf16 or f16), got " + t.dtype);
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
    return md::InitAttr::get(&mctx, md::InitKind::constant, {llvm::APFloat(v)});
  }
  if (name == "normal") {
    double mean = 0, stddev = 0.02;
    std::optional<std::vector<const Expr *>> bound;
    if (args.size() == 1 && args[0].name.empty())
      bound = std::vector<const Expr *>{nullptr, args[0].value.get()};
    else
      bound = bindArgs(args, {{"mean", false}, {"std", true}}, name, init->loc);
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

static std::string childPath(const std::string &prefix,
                             const std::string &name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::unique_ptr<Instance> ModelGen::newInstance(Instance::Kind kind,
                                                const std::string &name,
                                                const std::string &path,
                                                SMLoc l) {
  auto inst = std::make_unique<Instance>();
  inst->kind = kind;
  inst->name = name;
  inst->path = path;
  inst->loc = l;
  return inst;
}

std::unique_ptr<Instance> ModelGen::makeRaw(const std::string &name,
                                            const std::string &path,
                                            RankedTensorType type,
                                            md::InitAttr init, int64_t unit,
                                            SMLoc l) {
  auto inst = newInstance(Instance::Kind::Raw, name, path, l);
  inst->type = type;
  inst->init = init;
  inst->unit = unit;
  return inst;
}

std::unique_ptr<Instance>
ModelGen::makeLayer(LayerKind kind, int64_t a, int64_t bDim, bool bias,
                    double eps, const std::string &signature,
                    const std::string &name, const std::string &path,
                    int64_t unit, SMLoc l, const AttentionOptions &attn) {
  auto inst = newInstance(Instance::Kind::Layer, name, path, l);
  inst->attn = attn;
  if (!inst->attn.kvHeads)
    inst->attn.kvHeads = bDim;
  inst->layer = kind;
  inst->dimA = a;
  inst->dimB = bDim;
  inst->bias = bias;
  inst->eps = eps;
  inst->signature = signature;
  inst->unit = unit;
  Type f32 = b.getF32Type();
  auto raw = [&](const std::string &n, llvm::ArrayRef<int64_t> shape,
                 md::InitAttr init) {
    inst->children.push_back(
        makeRaw(n, childPath(path, n), tensorType(shape, f32), init, unit, l));
  };
  auto sub = [&](const std::string &n, int64_t in, int64_t out,
                 bool withBias = true) {
    inst->children.push_back(
        makeLayer(LayerKind::Linear, in, out, withBias, 0,
                  "Linear(" + std::to_string(in) + ", " + std::to_string(out) +
                      (withBias ? "" : ", bias = false") + ")",
                  n, childPath(path, n), unit, l));
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
  case LayerKind::Attention: {
    // q and proj d x d; k and v d x (kv_heads * d / heads).
    if (!inst->attn.headDim)
      inst->attn.headDim = a / bDim;
    const int64_t hd = inst->attn.headDim, kv = inst->attn.kvHeads * hd;
    sub("q", a, bDim * hd, bias);
    sub("k", a, kv, bias);
    sub("v", a, kv, bias);
    sub("proj", bDim * hd, a, bias);
    if (inst->attn.qkNorm)
      for (const char *n : {"q_norm", "k_norm"})
        inst->children.push_back(
            makeLayer(LayerKind::RMSNorm, hd, 0, false, inst->attn.qkEps,
                      "RMSNorm(" + std::to_string(hd) + ")", n,
                      childPath(path, n), unit, l));
    break;
  }
  case LayerKind::Mlp:
    sub("fc", a, bDim);
    sub("proj", bDim, a);
    break;
  case LayerKind::GatedMlp:
    sub("gate", a, bDim, bias);
    sub("up", a, bDim, bias);
    sub("down", bDim, a, bias);
    break;
  }
  return inst;
}

std::unique_ptr<Instance>
ModelGen::buildParam(const ParamDecl &p, const Env &env,
                     const std::string &prefix, int64_t unit,
                     std::vector<const BlockDecl *> &stack) {
  std::unique_ptr<Instance> inst = buildParamInstance(p, env, prefix, unit, stack);
  if (p.frozen)
    for (Instance *leaf : inst->leaves())
      leaf->frozen = true;
  return inst;
}

std::unique_ptr<Instance>
ModelGen::buildParamInstance(const ParamDecl &p, const Env &env,
                             const std::string &prefix, int64_t unit,
                             std::vector<const BlockDecl *> &stack) {
  std::string path = childPath(prefix, p.name);
  auto invalid = [&] {
    return newInstance(Instance::Kind::Invalid, p.name, path, p.loc);
  };
  if (!p.repeat) {
    auto inst = buildOne(p, env, p.name, path, unit, stack);
    return inst ? std::move(inst) : invalid();
  }
  std::optional<int64_t> n = dimOf(evalConst(*p.repeat, env, false),
                                   p.repeat->loc, "the repeat count");
  if (!n)
    return invalid();
  // Each instance becomes parameters, a wrap unit and code: a count past
  // any real model's (GPT-3 has 96 layers) is a typo or a -D gone wrong,
  // not a request to exhaust memory.
  constexpr int64_t kMaxRepeat = 65536;
  if (*n > kMaxRepeat) {
    error(p.repeat->loc, "the repeat count " + std::to_string(*n) +
                             " is more than md's limit of " +
                             std::to_string(kMaxRepeat) + " instances");
    return invalid();
  }
  auto rep = newInstance(Instance::Kind::Repeated, p.name, path, p.loc);
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
  if (layer != layers.end())
    return buildLayer(p, layer->second, env, name, path, unit);
  return buildUserBlock(p, env, name, path, unit, stack);
}

std::unique_ptr<Instance>
ModelGen::buildLayer(const ParamDecl &p, const LayerInfo &layer, const Env &env,
                     const std::string &name, const std::string &path,
                     int64_t unit) {
  auto bound = bindArgs(p.args, layer.formals, p.layer, p.layerLoc);
  if (!bound)
    return nullptr;
  const auto &formals = layer.formals;
  std::vector<Val> vals(formals.size());
  bool ok = true;
  // Attention's rope and qk_norm take forms, not values (read below).
  auto isForm = [&](size_t k) {
    return layer.kind == LayerKind::Attention && (k == 5 || k == 6);
  };
  for (size_t k = 0; k < formals.size(); ++k)
    if ((*bound)[k] && !isForm(k)) {
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
                                  (vals[k].isNumber() ? formatNum(vals[k].num)
                                                      : describe(vals[k])));
      return std::nullopt;
    }
    return vals[k].num.value();
  };
  // A true/false argument k into `out` (left as it is when not given);
  // false after reporting one that is not a bool.
  auto flag = [&](size_t k, bool &out) {
    if (!(*bound)[k])
      return true;
    if (vals[k].kind != Val::Kind::Bool) {
      error((*bound)[k]->loc, "argument '" + formals[k].name + "' of '" +
                                  p.layer + "' must be true or false, got " +
                                  describe(vals[k]));
      return false;
    }
    out = vals[k].boolean;
    return true;
  };
  LayerKind kind = layer.kind;
  int64_t a = 0, bDim = 0;
  AttentionOptions attn;
  bool bias = true;
  double epsValue = 0;
  std::string sig;
  switch (kind) {
  case LayerKind::Linear: {
    auto in = dim(0), out = dim(1);
    ok &= flag(2, bias);
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
    if (kind == LayerKind::Attention && (*bound)[7]) {
      auto h = dim(7);
      if (!h)
        return nullptr;
      attn.headDim = *h;
    } else if (kind == LayerKind::Attention && a % bDim != 0) {
      error(p.layerLoc, "Attention: d = " + Twine(a) +
                            " is not divisible by heads = " + Twine(bDim));
      return nullptr;
    }
    sig = p.layer + "(" + std::to_string(a) + ", " + std::to_string(bDim);
    if (kind == LayerKind::Attention) {
      // Attention(d, heads, kv_heads = heads, bias = true, window = none).
      if ((*bound)[2]) {
        auto kv = dim(2);
        if (!kv)
          return nullptr;
        if (bDim % *kv != 0) {
          error((*bound)[2]->loc,
                "Attention: heads = " + Twine(bDim) +
                    " is not a multiple of kv_heads = " + Twine(*kv));
          return nullptr;
        }
        attn.kvHeads = *kv;
        sig += ", kv_heads = " + std::to_string(*kv);
      }
      if (!flag(3, bias))
        return nullptr;
      if (!bias)
        sig += ", bias = false";
      if ((*bound)[4]) {
        auto w = dim(4);
        if (!w)
          return nullptr;
        attn.window = *w;
        sig += ", window = " + std::to_string(*w);
      }
      const int64_t hd = attn.headDim ? attn.headDim : a / bDim;
      if (attn.headDim)
        sig += ", head_dim = " + std::to_string(hd);
      if ((*bound)[5]) {
        if (!attentionRope(*(*bound)[5], env, attn))
          return nullptr;
        if (attn.ropeTheta) {
          if (hd % 2 != 0) {
            error((*bound)[5]->loc,
                  "Attention: RoPE needs an even head dim, got " +
                      Twine(attn.headDim ? "head_dim = " : "d / heads = ") +
                      Twine(hd));
            return nullptr;
          }
          sig += ", rope = rope(" + formatNum(Num::real(attn.ropeTheta));
          if (attn.ropeLlama3)
            sig += ", scaling = llama3(" +
                   formatNum(Num::real(attn.ropeFactor)) + ", " +
                   formatNum(Num::real(attn.ropeLow)) + ", " +
                   formatNum(Num::real(attn.ropeHigh)) + ", " +
                   formatNum(Num::real(attn.ropeOriginal)) + ")";
          sig += ")";
        }
      }
      if ((*bound)[6]) {
        if (!attentionQkNorm(*(*bound)[6], env, attn))
          return nullptr;
        if (attn.qkNorm)
          sig +=
              ", qk_norm = rms(eps = " + formatNum(Num::real(attn.qkEps)) + ")";
      }
    }
    sig += ")";
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
  case LayerKind::GatedMlp: {
    // GatedMlp(d, hidden, bias = false): SwiGLU, Llama's MLP.
    auto d = dim(0), h = dim(1);
    bias = false;
    if (!flag(2, bias) || !d || !h)
      return nullptr;
    a = *d;
    bDim = *h;
    sig = "GatedMlp(" + std::to_string(a) + ", " + std::to_string(bDim) +
          (bias ? ", bias = true" : "") + ")";
    break;
  }
  }
  return makeLayer(kind, a, bDim, bias, epsValue, sig, name, path, unit, p.loc,
                   attn);
}

// rope = none | rope(theta, scaling = none | llama3(factor, low_freq,
// high_freq, original_max)).
bool ModelGen::attentionRope(const Expr &e, const Env &env,
                             AttentionOptions &attn) {
  auto isNone = [](const Expr &x) {
    const auto *n = llvm::dyn_cast<NameExpr>(&x);
    return n && n->name == "none";
  };
  if (isNone(e))
    return true;
  const auto *call = llvm::dyn_cast<CallExpr>(&e);
  if (!call || call->callee != "rope") {
    error(e.loc, "argument 'rope' of 'Attention' must be none or "
                 "rope(theta, scaling = none | llama3(factor, low_freq, "
                 "high_freq, original_max)), got " +
                     describeExpr(e));
    return false;
  }
  static const Formal ropeFormals[] = {{"theta", true}, {"scaling", false}};
  auto bound = bindArgs(call->args, ropeFormals, "rope", call->loc);
  if (!bound)
    return false;
  std::optional<double> theta = positiveArg(*(*bound)[0], env, "theta", "rope");
  if (!theta)
    return false;
  attn.ropeTheta = *theta;
  const Expr *scaling = (*bound)[1];
  if (!scaling || isNone(*scaling))
    return true;
  const auto *llama3 = llvm::dyn_cast<CallExpr>(scaling);
  if (!llama3 || llama3->callee != "llama3") {
    error(scaling->loc, "argument 'scaling' of 'rope' must be none or "
                        "llama3(factor, low_freq, high_freq, original_max), "
                        "got " +
                            describeExpr(*scaling));
    return false;
  }
  static const Formal llama3Formals[] = {{"factor", true},
                                         {"low_freq", true},
                                         {"high_freq", true},
                                         {"original_max", true}};
  auto args = bindArgs(llama3->args, llama3Formals, "llama3", llama3->loc);
  if (!args)
    return false;
  double n[4];
  for (size_t k = 0; k < 4; ++k) {
    std::optional<double> v =
        positiveArg(*(*args)[k], env, llama3Formals[k].name, "llama3");
    if (!v)
      return false;
    n[k] = *v;
  }
  if (!(n[1] < n[2])) {
    error(llama3->loc, "llama3's low_freq " + formatNum(Num::real(n[1])) +
                           " must be below its high_freq " +
                           formatNum(Num::real(n[2])));
    return false;
  }
  attn.ropeLlama3 = true;
  attn.ropeFactor = n[0];
  attn.ropeLow = n[1];
  attn.ropeHigh = n[2];
  attn.ropeOriginal = n[3];
  return true;
}

// qk_norm = none | rms | rms(eps = E).
bool ModelGen::attentionQkNorm(const Expr &e, const Env &env,
                               AttentionOptions &attn) {
  if (const auto *n = llvm::dyn_cast<NameExpr>(&e)) {
    if (n->name == "none")
      return true;
    if (n->name == "rms") {
      attn.qkNorm = true;
      return true;
    }
  }
  const auto *call = llvm::dyn_cast<CallExpr>(&e);
  if (!call || call->callee != "rms") {
    error(e.loc, "argument 'qk_norm' of 'Attention' must be none, rms or "
                 "rms(eps = E), got " +
                     describeExpr(e));
    return false;
  }
  static const Formal rmsFormals[] = {{"eps", false}};
  auto bound = bindArgs(call->args, rmsFormals, "rms", call->loc);
  if (!bound)
    return false;
  attn.qkNorm = true;
  if (!(*bound)[0])
    return true;
  std::optional<double> eps = positiveArg(*(*bound)[0], env, "eps", "rms");
  if (!eps)
    return false;
  attn.qkEps = *eps;
  return true;
}

std::optional<double> ModelGen::positiveArg(const Expr &e, const Env &env,
                                            StringRef formal,
                                            StringRef callee) {
  Val v = evalConst(e, env, false);
  if (v.isError())
    return std::nullopt;
  if (!v.isNumber() || !(v.num.value() > 0)) {
    error(e.loc, "argument '" + formal + "' of '" + callee +
                     "' must be a positive number, got " + describe(v));
    return std::nullopt;
  }
  return v.num.value();
}

std::unique_ptr<Instance>
ModelGen::buildUserBlock(const ParamDecl &p, const Env &env,
                         const std::string &name, const std::string &path,
                         int64_t unit, std::vector<const BlockDecl *> &stack) {
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
  auto inst =
      buildBlock(*target, std::move(hyper), name, path, unit, p.loc, stack);
  stack.pop_back();
  return inst;
}

std::unique_ptr<Instance>
ModelGen::buildBlock(const BlockDecl &decl, std::unique_ptr<Env> env,
                     const std::string &name, const std::string &path,
                     int64_t unit, SMLoc l,
                     std::vector<const BlockDecl *> &stack) {
  auto inst = newInstance(Instance::Kind::Block, name, path, l);
  inst->block = &decl;
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

} // namespace md::frontend::irgen
