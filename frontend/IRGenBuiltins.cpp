//===- IRGenBuiltins.cpp - built-in layers and functions ------------------===//
//
// The built-in layers (Linear, LayerNorm, Attention, ...), the tensor
// operators and the built-in functions (gelu, softmax, reshape, sum, ...),
// inlined as md ops with their shapes inferred and checked.
//
//===----------------------------------------------------------------------===//

#include <cmath>
#include <limits>

#include "frontend/ModelGen.h"
#include "runtime/core/ShapeRules.h"

namespace md::frontend::irgen {

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
    in = md::ReshapeOp::create(
        b, loc(l), tensorType({1, lin->dimA}, xt.getElementType()), in);
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
  // The weight and, `withBias`, the bias of a norm over the last dimension
  // of an input of rank `minRank` or more; nullopt once an error is reported.
  auto normParams =
      [&](int64_t minRank,
          bool withBias) -> std::optional<std::pair<mlir::Value, mlir::Value>> {
    if (!lastDim(inst->dimA, minRank))
      return std::nullopt;
    Val g = leafValue(fn, inst->child("weight"), l);
    Val bt = withBias ? leafValue(fn, inst->child("bias"), l) : Val();
    if (g.isError() || (withBias && bt.isError()))
      return std::nullopt;
    return std::make_pair(g.value, bt.value);
  };
  switch (inst->layer) {
  case LayerKind::Linear:
    return linear(fn, inst, x, calleeName, l);
  case LayerKind::LayerNorm: {
    auto gb = normParams(1, /*withBias=*/true);
    if (!gb)
      return Val::error();
    return Val::tensor(md::LayerNormOp::create(b, loc(l), xt, x.value,
                                               gb->first, gb->second,
                                               b.getF64FloatAttr(inst->eps)));
  }
  case LayerKind::RMSNorm: {
    auto gb = normParams(1, /*withBias=*/false);
    if (!gb)
      return Val::error();
    return Val::tensor(md::RmsNormOp::create(b, loc(l), xt, x.value, gb->first,
                                             b.getF64FloatAttr(inst->eps)));
  }
  case LayerKind::BatchNorm: {
    auto gb = normParams(2, /*withBias=*/true);
    if (!gb)
      return Val::error();
    auto stats = tensorType({inst->dimA}, b.getF32Type());
    auto op =
        md::BatchNormOp::create(b, loc(l), xt, stats, stats, x.value, gb->first,
                                gb->second, b.getF64FloatAttr(inst->eps));
    return Val::tensor(op.getY());
  }
  case LayerKind::Attention: {
    if (xt.getRank() != 3 ||
        !dimsCompatible(xt.getShape().back(), inst->dimA)) {
      error(l, who + " expects an input of shape f32[B, T, " +
                   Twine(inst->dimA) + "], got " + formatType(xt));
      return Val::error();
    }
    Val q = linear(fn, inst->child("q"), x, calleeName + ".q", l);
    Val k = linear(fn, inst->child("k"), x, calleeName + ".k", l);
    Val v = linear(fn, inst->child("v"), x, calleeName + ".v", l);
    if (q.isError() || k.isError() || v.isError())
      return Val::error();
    // Grouped-query attention: each of the kv_heads key/value heads serves
    // heads / kv_heads query heads in a row (repeat_interleave, Hugging
    // Face's repeat_kv): [B, T, kv * hd] as [B, T, kv, 1, hd], expanded to
    // [B, T, kv, g, hd], read as [B, T, heads * hd].
    const AttentionOptions &attn = inst->attn;
    const int64_t heads = inst->dimB, kvHeads = attn.kvHeads, hd = attn.headDim;
    const int64_t bt[2] = {xt.getShape()[0], xt.getShape()[1]};
    // Qwen3's q_norm and k_norm, then RoPE, on each head: q [B, T, heads,
    // hd], k [B, T, kv_heads, hd].
    if (attn.qkNorm || attn.ropeTheta) {
      std::optional<std::pair<Val, Val>> tables;
      if (attn.ropeTheta) {
        if (!staticDim(x, 1, l, who + "'s RoPE"))
          return Val::error();
        tables = ropeTables(attn, bt[1], hd, l);
        if (!tables)
          return Val::error();
      }
      auto perHead = [&](const Val &t, int64_t n, const char *norm) {
        Val u = reshapeTo(t, {bt[0], bt[1], n, hd}, l);
        if (attn.qkNorm && !u.isError())
          u = applyLayer(fn, inst->child(norm), u, calleeName + "." + norm, l);
        if (tables && !u.isError())
          u = applyRope(u, *tables, l);
        return reshapeTo(u, {bt[0], bt[1], n * hd}, l);
      };
      q = perHead(q, heads, "q_norm");
      k = perHead(k, kvHeads, "k_norm");
      if (q.isError() || k.isError())
        return Val::error();
    }
    if (kvHeads != heads) {
      auto repeat = [&](const Val &t) {
        Val u = reshapeTo(t, {bt[0], bt[1], kvHeads, 1, hd}, l);
        Val e = Val::tensor(md::ExpandOp::create(
            b, loc(l),
            tensorType({bt[0], bt[1], kvHeads, heads / kvHeads, hd},
                       t.type().getElementType()),
            u.value));
        return reshapeTo(e, {bt[0], bt[1], heads * hd}, l);
      };
      k = repeat(k);
      v = repeat(v);
      if (k.isError() || v.isError())
        return Val::error();
    }
    mlir::Value att = md::CausalAttentionOp::create(
        b, loc(l), q.type(), q.value, k.value, v.value,
        b.getI64IntegerAttr(heads),
        attn.window ? b.getI64IntegerAttr(attn.window) : mlir::IntegerAttr());
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
    return linear(fn, inst->child("proj"), Val::tensor(g), calleeName + ".proj",
                  l);
  }
  case LayerKind::GatedMlp: {
    // down(silu(gate(x)) * up(x)), as Llama's MLP (SwiGLU).
    if (!lastDim(inst->dimA, 1))
      return Val::error();
    Val g = linear(fn, inst->child("gate"), x, calleeName + ".gate", l);
    Val u = linear(fn, inst->child("up"), x, calleeName + ".up", l);
    if (g.isError() || u.isError())
      return Val::error();
    mlir::Value s = md::SiluOp::create(b, loc(l), g.type(), g.value);
    mlir::Value h = md::MulOp::create(b, loc(l), g.type(), s, u.value);
    return linear(fn, inst->child("down"), Val::tensor(h), calleeName + ".down",
                  l);
  }
  case LayerKind::Embedding:
    break;
  }
  return Val::error();
}

// The ops models/llama.mdl's forward writes for its tables, in its order:
// inv_freq = exp(to(arange(0, hd, 2), f32) * (-log(theta) / hd)), Llama
// 3.1's scaling of it, angles = t * inv_freq for t < T, both halves.
std::optional<std::pair<Val, Val>>
ModelGen::ropeTables(const AttentionOptions &attn, int64_t T, int64_t hd,
                     SMLoc l) {
  Type f32 = b.getF32Type();
  auto range = [&](int64_t end) {
    return Val::tensor(
        md::ArangeOp::create(b, loc(l), tensorType({end}, b.getI64Type()),
                             b.getI64IntegerAttr(0), b.getI64IntegerAttr(end)));
  };
  auto toF32 = [&](const Val &t) {
    return Val::tensor(md::CastOp::create(
        b, loc(l), tensorType(t.type().getShape(), f32), t.value));
  };
  auto fn = [&](const Val &t, md::ElementwiseFn f) {
    return Val::tensor(
        md::ElementwiseOp::create(b, loc(l), t.type(), t.value, f));
  };
  Val invFreq = toF32(sliceDim(range(hd), 0, 0, 2, hd / 2, l));
  invFreq = fn(scale(invFreq, -std::log(attn.ropeTheta) / double(hd), l),
               md::ElementwiseFn::exp);
  if (attn.ropeLlama3) {
    // s = clamp((f * (original / 2 pi) - low) / (high - low), 0, 1);
    // f * ((1 - s) / factor + s).
    Val s = scale(invFreq, attn.ropeOriginal / 6.283185307179586, l);
    Val low = numberLike(attn.ropeLow, s, l);
    s = elementwise(BinaryOp::Sub, s, low, l);
    s = scale(s, 1.0 / (attn.ropeHigh - attn.ropeLow), l);
    s = Val::tensor(md::ClampOp::create(b, loc(l), s.type(), s.value,
                                        b.getF64FloatAttr(0.0),
                                        b.getF64FloatAttr(1.0)));
    Val one = numberLike(1.0, s, l);
    Val m =
        scale(elementwise(BinaryOp::Sub, one, s, l), 1.0 / attn.ropeFactor, l);
    m = elementwise(BinaryOp::Add, m, s, l);
    invFreq = elementwise(BinaryOp::Mul, invFreq, m, l);
  }
  if (invFreq.isError())
    return std::nullopt;
  Val freqs = reshapeTo(invFreq, {1, hd / 2}, l);
  Val positions = reshapeTo(toF32(range(T)), {T, 1}, l);
  Val angles = elementwise(BinaryOp::Mul, positions, freqs, l);
  if (angles.isError())
    return std::nullopt;
  Val emb = concatDim({angles, angles}, 1, l);
  // One statement per op: the order of the plan's instructions is fixed.
  Val cosT = reshapeTo(fn(emb, md::ElementwiseFn::cos), {T, 1, hd}, l);
  Val sinT = reshapeTo(fn(emb, md::ElementwiseFn::sin), {T, 1, hd}, l);
  return std::make_pair(cosT, sinT);
}

// x * cos + concat([-x2, x1], dim = -1) * sin (rotate_half).
Val ModelGen::applyRope(const Val &x, const std::pair<Val, Val> &tables,
                        SMLoc l) {
  const int64_t last = x.type().getRank() - 1,
                half = x.type().getShape()[last] / 2;
  Val xCos = elementwise(BinaryOp::Mul, x, tables.first, l);
  Val x2 = scale(sliceDim(x, last, half, 1, half, l), -1.0, l);
  Val x1 = sliceDim(x, last, 0, 1, half, l);
  Val xSin = elementwise(BinaryOp::Mul, concatDim({x2, x1}, last, l),
                         tables.second, l);
  if (xCos.isError() || xSin.isError())
    return Val::error();
  return elementwise(BinaryOp::Add, xCos, xSin, l);
}

//===----------------------------------------------------------------------===//
// Operators and built-in functions
//===----------------------------------------------------------------------===//

Val ModelGen::scale(const Val &x, double factor, SMLoc l) {
  return Val::tensor(md::ScaleOp::create(b, loc(l), x.type(), x.value,
                                         b.getF64FloatAttr(factor)));
}

Val ModelGen::numberLike(double value, const Val &like, SMLoc l) {
  mlir::Type elem = like.type().getElementType();
  mlir::Value one =
      md::ArangeOp::create(b, loc(l), tensorType({1}, b.getI64Type()),
                           b.getI64IntegerAttr(1), b.getI64IntegerAttr(2));
  Val c = Val::tensor(
      md::CastOp::create(b, loc(l), tensorType({1}, elem), one).getResult());
  c = scale(c, value, l);
  int64_t rank = like.type().getRank();
  if (rank == 1)
    return c;
  return Val::tensor(md::ReshapeOp::create(
      b, loc(l), tensorType(std::vector<int64_t>(rank, 1), elem), c.value));
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
  // The rule is the dialect's and the runtime's (ShapeRules.h); the words
  // are the language's.
  llvm::ArrayRef<int64_t> as = at.getShape(), bs = bt.getShape();
  md::rules::Matmul rule =
      md::rules::MatmulShapes(md::rules::Dims(as.data(), as.size()),
                              md::rules::Dims(bs.data(), bs.size()), false,
                              false);
  switch (rule.problem) {
  case md::rules::Matmul::Problem::none:
    break;
  case md::rules::Matmul::Problem::aRank: // refused above
  case md::rules::Matmul::Problem::bRank:
    error(l, "matmul needs a right operand of rank 2 or of the rank of the "
             "left one: " +
                 both);
    return Val::error();
  case md::rules::Matmul::Problem::batch:
    error(l, "matmul batch dimensions differ: " + both);
    return Val::error();
  case md::rules::Matmul::Problem::contraction:
    error(l, "matmul contracting dimensions differ: " + both + " (" +
                 Twine(rule.ka) + " vs " + Twine(rule.kb) + ")");
    return Val::error();
  }
  llvm::SmallVector<int64_t> shape(rule.shape.begin(), rule.shape.end());
  return Val::tensor(
      md::MatmulOp::create(b, loc(l), tensorType(shape, at.getElementType()),
                           a.value, bv.value, mlir::Value(), false, false));
}

RankedTensorType ModelGen::broadcastFloatType(const Val &l, const Val &r,
                                              SMLoc at,
                                              const std::string &what) {
  if (!expectFloat(l, at, "the left operand of " + what) ||
      !expectFloat(r, at, "the right operand of " + what))
    return nullptr;
  RankedTensorType lt = l.type(), rt = r.type();
  if (lt.getElementType() != rt.getElementType()) {
    error(at, "element types differ in " + what + ": " + formatType(lt) +
                  " and " + formatType(rt));
    return nullptr;
  }
  auto shape = broadcastShapes(lt.getShape(), rt.getShape());
  if (!shape) {
    error(at, "shape mismatch in " + what + ": " + formatType(lt) + " and " +
                  formatType(rt) + " do not broadcast");
    return nullptr;
  }
  return tensorType(*shape, lt.getElementType());
}

Val ModelGen::elementwise(BinaryOp op, const Val &l, const Val &r, SMLoc at) {
  RankedTensorType type = broadcastFloatType(
      l, r, at, std::string("'") + binaryOpSpelling(op) + "'");
  if (!type)
    return Val::error();
  mlir::Location where = loc(at);
  switch (op) {
  case BinaryOp::Add:
    return Val::tensor(md::AddOp::create(b, where, type, l.value, r.value));
  case BinaryOp::Sub:
    return Val::tensor(md::SubOp::create(b, where, type, l.value, r.value));
  case BinaryOp::Div:
    return Val::tensor(md::DivOp::create(b, where, type, l.value, r.value));
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

std::optional<int64_t> ModelGen::constIntOr(FnState &fn, const Expr *e,
                                            int64_t fallback,
                                            const Twine &what) {
  return e ? constInt(fn, *e, what) : fallback;
}

std::optional<bool> ModelGen::constBoolOr(FnState &fn, const Expr *e,
                                          bool fallback, const Twine &what) {
  return e ? constBool(fn, *e, what) : fallback;
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
        target += (k ? ", " : "") + (static_cast<int>(k) == inferred
                                         ? std::string("-1")
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
                 " changes the number of elements (" + Twine(inCount) + " vs " +
                 Twine(outCount) + ")");
    return Val::error();
  }
  return Val::tensor(md::ReshapeOp::create(b, loc(l), result, x.value));
}

Val ModelGen::reduce(FnState &fn, const CallExpr &call, const Val &x,
                     const Expr *dimsExpr, const Expr *keepdimExpr,
                     bool isMean) {
  const char *name = isMean ? "mean" : "sum";
  std::optional<bool> keepdimArg =
      constBoolOr(fn, keepdimExpr, /*fallback=*/false, "keepdim");
  if (!keepdimArg)
    return Val::error();
  bool keepdim = *keepdimArg;
  if (!expectFloat(x, call.loc, Twine("the input of ") + name))
    return Val::error();
  RankedTensorType xt = x.type();
  int64_t rank = xt.getRank();
  llvm::SmallVector<int64_t> dims;
  if (dimsExpr) {
    auto *list = llvm::dyn_cast<ListExpr>(dimsExpr);
    if (!list) {
      error(dimsExpr->loc,
            Twine("the dims of ") + name + " must be a list, e.g. dims = [-1]");
      return Val::error();
    }
    llvm::SmallVector<bool> seen(rank, false);
    for (const ExprPtr &el : list->elements) {
      auto d = constInt(fn, *el, "a dim");
      if (!d)
        return Val::error();
      if (*d < -rank || *d >= rank) {
        error(el->loc,
              "dim " + Twine(*d) + " is out of range for " + formatType(xt));
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
    return Val::tensor(
        md::MeanOp::create(b, loc(call.loc), type, x.value, dims, keepdim));
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

  if (isLayoutBuiltin(name))
    return layoutBuiltin(fn, call, args);

  Val x = eval(fn, *args[0]);
  if (x.isError())
    return x;
  std::string what = "the input of " + name;

  // exp(n), log(n), ..., pow(n, c) of a number known at compile time are
  // numbers (in double), so that hyper-parameters can be computed:
  // -log(theta) / hd for a table of angles.
  if (x.isNumber() && !x.num.dynamic &&
      (name == "pow" || md::symbolizeElementwiseFn(name))) {
    const double v = x.num.value();
    double r = 0;
    if (name == "pow") {
      Val c = eval(fn, *args[1]);
      if (c.isError())
        return c;
      if (!c.isNumber() || c.num.dynamic) {
        error(args[1]->loc, "pow's exponent must be a number known at "
                            "compile time, got " + describe(c));
        return Val::error();
      }
      r = std::pow(v, c.num.value());
    } else {
      switch (*md::symbolizeElementwiseFn(name)) {
      case md::ElementwiseFn::exp: r = std::exp(v); break;
      case md::ElementwiseFn::log: r = std::log(v); break;
      case md::ElementwiseFn::sin: r = std::sin(v); break;
      case md::ElementwiseFn::cos: r = std::cos(v); break;
      case md::ElementwiseFn::tanh: r = std::tanh(v); break;
      case md::ElementwiseFn::sigmoid: r = 1 / (1 + std::exp(-v)); break;
      case md::ElementwiseFn::abs: r = std::fabs(v); break;
      case md::ElementwiseFn::neg: r = -v; break;
      case md::ElementwiseFn::sqrt: r = std::sqrt(v); break;
      case md::ElementwiseFn::rsqrt: r = 1 / std::sqrt(v); break;
      }
    }
    if (!std::isfinite(r)) {
      error(l, name + " of " + formatNum(x.num) + " is not a finite number");
      return Val::error();
    }
    return Val::number(Num::real(r));
  }

  if (name == "gelu" || name == "relu" || name == "silu") {
    std::optional<bool> approximate =
        constBoolOr(fn, name == "gelu" ? args[1] : nullptr,
                    /*fallback=*/false, "approximate");
    if (!approximate)
      return Val::error();
    if (!expectFloat(x, l, what))
      return Val::error();
    if (name == "relu")
      return Val::tensor(md::ReluOp::create(b, loc(l), x.type(), x.value));
    if (name == "silu")
      return Val::tensor(md::SiluOp::create(b, loc(l), x.type(), x.value));
    return Val::tensor(
        md::GeluOp::create(b, loc(l), x.type(), x.value, *approximate));
  }
  if (name == "pow") {
    if (!expectFloat(x, l, what))
      return Val::error();
    Val c = eval(fn, *args[1]);
    if (c.isError())
      return c;
    if (!c.isNumber() || c.num.dynamic) {
      error(args[1]->loc, "pow's exponent must be a number known at compile "
                          "time, got " + describe(c));
      return Val::error();
    }
    return Val::tensor(md::PowOp::create(b, loc(l), x.type(), x.value,
                                         b.getF64FloatAttr(c.num.value())));
  }
  if (name == "maximum" || name == "minimum") {
    // torch.maximum / torch.minimum with numpy broadcasting; a number
    // operand is a bound (maximum(x, 0.0) is clamp(x, min = 0.0)), and of
    // two numbers known at compile time the result is a number.
    bool larger = name == "maximum";
    Val y = eval(fn, *args[1]);
    if (y.isError())
      return y;
    auto known = [](const Val &v) { return v.isNumber() && !v.num.dynamic; };
    if (known(x) && known(y)) {
      double a = x.num.value(), c = y.num.value();
      return Val::number(Num::real(larger ? std::max(a, c) : std::min(a, c)));
    }
    if (x.isTensor() && y.isTensor()) {
      RankedTensorType type = broadcastFloatType(x, y, l, name);
      if (!type)
        return Val::error();
      if (larger)
        return Val::tensor(
            md::MaximumOp::create(b, loc(l), type, x.value, y.value));
      return Val::tensor(
          md::MinimumOp::create(b, loc(l), type, x.value, y.value));
    }
    const Val &t = x.isTensor() ? x : y;
    const Val &n = x.isTensor() ? y : x;
    const Expr *numberArg = x.isTensor() ? args[1] : args[0];
    if (!t.isTensor() || !known(n)) {
      error(numberArg->loc, name + " takes two tensors, or a tensor and a "
                                   "number known at compile time, got " +
                                   describe(x) + " and " + describe(y));
      return Val::error();
    }
    if (!expectFloat(t, l, "the tensor operand of " + name))
      return Val::error();
    double inf = std::numeric_limits<double>::infinity();
    double c = n.num.value();
    return Val::tensor(md::ClampOp::create(
        b, loc(l), t.type(), t.value, b.getF64FloatAttr(larger ? c : -inf),
        b.getF64FloatAttr(larger ? inf : c)));
  }
  if (name == "clamp") {
    // clamp(x, min = lo, max = hi), either bound optional (torch's).
    if (!args[1] && !args[2]) {
      error(l, "clamp needs min, max or both, e.g. clamp(x, min = -1.0, "
               "max = 1.0)");
      return Val::error();
    }
    double bounds[2] = {-std::numeric_limits<double>::infinity(),
                        std::numeric_limits<double>::infinity()};
    for (int k = 0; k < 2; ++k) {
      if (!args[1 + k])
        continue;
      Val v = eval(fn, *args[1 + k]);
      if (v.isError())
        return v;
      if (!v.isNumber() || v.num.dynamic) {
        error(args[1 + k]->loc, Twine("clamp's ") + (k ? "max" : "min") +
                                    " must be a number known at compile "
                                    "time, got " + describe(v));
        return Val::error();
      }
      bounds[k] = v.num.value();
    }
    if (!(bounds[0] <= bounds[1])) {
      error(l, "clamp's min " + formatNum(Num::real(bounds[0])) +
                   " is above its max " + formatNum(Num::real(bounds[1])));
      return Val::error();
    }
    if (!expectFloat(x, l, what))
      return Val::error();
    return Val::tensor(md::ClampOp::create(b, loc(l), x.type(), x.value,
                                           b.getF64FloatAttr(bounds[0]),
                                           b.getF64FloatAttr(bounds[1])));
  }
  if (name == "detach") {
    if (!expectFloat(x, l, what))
      return Val::error();
    return Val::tensor(md::DetachOp::create(b, loc(l), x.type(), x.value));
  }
  // exp(x), log(x), ...: md.elementwise of the function of that name.
  if (std::optional<md::ElementwiseFn> elementwise =
          md::symbolizeElementwiseFn(name)) {
    if (!expectFloat(x, l, what))
      return Val::error();
    return Val::tensor(md::ElementwiseOp::create(b, loc(l), x.type(), x.value,
                                                 *elementwise));
  }
  if (name == "softmax") {
    std::optional<int64_t> axisArg =
        constIntOr(fn, args[1], /*fallback=*/-1, "axis");
    if (!axisArg)
      return Val::error();
    int64_t axis = *axisArg;
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
      error(args[1]->loc,
            "cross_entropy targets must be i32 or i64, got " + formatType(tt));
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

} // namespace md::frontend::irgen
