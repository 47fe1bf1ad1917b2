//===- IRGenLayout.cpp - indexing, slicing, joining and reshaping ---------===//
//
// The built-ins that move elements without computing on them: `x[...]`
// indexing and slicing, concat, stack, split, chunk, permute, transpose of
// two dims, unsqueeze, squeeze, flatten, expand, repeat_interleave, arange
// with a start and step, and `to(x, dtype)`. Each lowers to md.slice,
// md.concat, md.expand, md.transpose, md.reshape, md.arange or md.cast, with
// numpy's and PyTorch's rules for negative dims and bounds; every size is
// known at compile time.
//
//===----------------------------------------------------------------------===//

#include "frontend/ModelGen.h"
#include "runtime/core/ShapeRules.h"

namespace md::frontend::irgen {

namespace {

std::string shapeText(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    s += (i ? ", " : "") +
         (ShapedType::isDynamic(d) ? std::string("?") : std::to_string(d));
  return s + "]";
}

/// ceil(n / d) for n >= 0, d > 0.
int64_t ceilDiv(int64_t n, int64_t d) { return (n + d - 1) / d; }

} // namespace

//===----------------------------------------------------------------------===//
// Building blocks
//===----------------------------------------------------------------------===//

std::optional<int64_t> ModelGen::dimArg(FnState &fn, const Expr *e,
                                        std::optional<int64_t> fallback,
                                        int64_t rank, const Twine &what,
                                        SMLoc at) {
  std::optional<int64_t> d;
  if (e)
    d = constInt(fn, *e, what);
  else if (fallback)
    d = fallback;
  else {
    error(at, what + " is required");
    return std::nullopt;
  }
  if (!d)
    return std::nullopt;
  std::optional<int64_t> n = md::rules::NormalizeAxis(*d, rank);
  if (!n) {
    error(e ? e->loc : at, what + " " + Twine(*d) + " is out of range for " +
                               Twine(rank) + " dims (-" + Twine(rank) +
                               " to " + Twine(rank - 1) + ")");
    return std::nullopt;
  }
  return n;
}

Val ModelGen::sliceDim(const Val &x, int64_t axis, int64_t start,
                       int64_t step, int64_t count, SMLoc l) {
  RankedTensorType xt = x.type();
  if (start == 0 && step == 1 && count == xt.getShape()[axis])
    return x;
  llvm::SmallVector<int64_t> shape(xt.getShape());
  shape[axis] = count;
  return Val::tensor(md::SliceOp::create(
      b, loc(l), tensorType(shape, xt.getElementType()), x.value,
      b.getI64IntegerAttr(axis), b.getI64IntegerAttr(start),
      b.getI64IntegerAttr(step)));
}

Val ModelGen::reshapeTo(const Val &x, llvm::ArrayRef<int64_t> shape, SMLoc l) {
  if (x.type().getShape() == shape)
    return x;
  return Val::tensor(md::ReshapeOp::create(
      b, loc(l), tensorType(shape, x.type().getElementType()), x.value));
}

bool ModelGen::staticDim(const Val &x, int64_t axis, SMLoc l,
                         const Twine &what) {
  if (!ShapedType::isDynamic(x.type().getShape()[axis]))
    return true;
  error(l, what + " needs a known size along dim " + Twine(axis) + " of " +
               formatType(x.type()) +
               " (B is known once a train gives micro_batch)");
  return false;
}

Val ModelGen::concatDim(llvm::ArrayRef<Val> parts, int64_t axis, SMLoc l) {
  if (parts.size() == 1)
    return parts[0];
  llvm::SmallVector<int64_t> shape(parts[0].type().getShape());
  shape[axis] = 0;
  llvm::SmallVector<mlir::Value> values;
  for (const Val &p : parts) {
    shape[axis] += p.type().getShape()[axis];
    values.push_back(p.value);
  }
  return Val::tensor(md::ConcatOp::create(
      b, loc(l), tensorType(shape, parts[0].type().getElementType()), values,
      b.getI64IntegerAttr(axis)));
}

//===----------------------------------------------------------------------===//
// x[...]
//===----------------------------------------------------------------------===//

// numpy's basic indexing: the items name x's dims from the left, `...`
// standing for as many as the others leave. A position picks one element
// and drops its dim; a range keeps it. Bounds count from the end when
// negative and are clipped to the dim, as Python's; a step is positive.
Val ModelGen::evalIndex(FnState &fn, const IndexExpr &e) {
  Val x = eval(fn, *e.base);
  if (x.isError())
    return x;
  if (!expectTensor(x, e.loc, "an indexed value"))
    return Val::error();
  RankedTensorType xt = x.type();
  const int64_t rank = xt.getRank();
  int64_t named = 0;
  const IndexItem *ellipsis = nullptr;
  for (const IndexItem &item : e.items) {
    if (item.kind != IndexItem::Kind::Ellipsis) {
      ++named;
      continue;
    }
    if (ellipsis) {
      error(item.loc, "an index has at most one '...'");
      return Val::error();
    }
    ellipsis = &item;
  }
  if (e.items.empty()) {
    error(e.loc, "an index needs at least one item, e.g. x[0] or x[:, 1:4]");
    return Val::error();
  }
  if (named > rank) {
    error(e.loc, "too many indices (" + Twine(named) + ") for " +
                     formatType(xt) + " of rank " + Twine(rank));
    return Val::error();
  }
  Val y = x;
  llvm::SmallVector<int64_t> kept; // the dims that stay, in x's numbering
  llvm::SmallVector<bool> dropped(rank, false);
  int64_t dim = 0;
  for (const IndexItem &item : e.items) {
    if (item.kind == IndexItem::Kind::Ellipsis) {
      dim += rank - named;
      continue;
    }
    const int64_t size = xt.getShape()[dim];
    if (item.kind == IndexItem::Kind::Position) {
      std::optional<int64_t> p = constInt(fn, *item.position, "a position");
      if (!p)
        return Val::error();
      if (!staticDim(x, dim, item.loc, "a position"))
        return Val::error();
      if (*p < -size || *p >= size) {
        error(item.loc, "position " + Twine(*p) + " is out of range for dim " +
                            Twine(dim) + " of " + formatType(xt) +
                            " (size " + Twine(size) + ")");
        return Val::error();
      }
      y = sliceDim(y, dim, *p < 0 ? *p + size : *p, 1, 1, item.loc);
      dropped[dim] = true;
      ++dim;
      continue;
    }
    // A range.
    if (!item.start && !item.end && !item.step) {
      ++dim;
      continue;
    }
    if (!staticDim(x, dim, item.loc, "a range"))
      return Val::error();
    int64_t step = 1;
    if (item.step) {
      std::optional<int64_t> s = constInt(fn, *item.step, "a step");
      if (!s)
        return Val::error();
      if (*s < 1) {
        error(item.step->loc, "a step must be positive, got " + Twine(*s) +
                                  " (md slices forwards only, as PyTorch)");
        return Val::error();
      }
      step = *s;
    }
    auto bound = [&](const ExprPtr &b, int64_t fallback,
                     const char *what) -> std::optional<int64_t> {
      if (!b)
        return fallback;
      std::optional<int64_t> v = constInt(fn, *b, what);
      if (!v)
        return std::nullopt;
      int64_t r = *v < 0 ? *v + size : *v;
      return std::clamp<int64_t>(r, 0, size);
    };
    std::optional<int64_t> start = bound(item.start, 0, "a range's start");
    std::optional<int64_t> end = bound(item.end, size, "a range's end");
    if (!start || !end)
      return Val::error();
    if (*end <= *start) {
      error(item.loc, "the range " + Twine(*start) + ":" + Twine(*end) +
                          " of dim " + Twine(dim) + " of " + formatType(xt) +
                          " is empty; md has no empty tensors");
      return Val::error();
    }
    y = sliceDim(y, dim, *start, step, ceilDiv(*end - *start, step), item.loc);
    ++dim;
  }
  llvm::SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d)
    if (!dropped[d])
      shape.push_back(y.type().getShape()[d]);
  return reshapeTo(y, shape, e.loc);
}

//===----------------------------------------------------------------------===//
// The layout built-ins
//===----------------------------------------------------------------------===//

bool isLayoutBuiltin(llvm::StringRef name) {
  return llvm::is_contained(
      {"concat", "stack", "split", "chunk", "permute", "transpose",
       "unsqueeze", "squeeze", "flatten", "expand", "repeat_interleave",
       "arange", "to", "causal_attention"},
      name);
}

Val ModelGen::layoutBuiltin(FnState &fn, const CallExpr &call,
                            llvm::ArrayRef<const Expr *> args) {
  const std::string &name = call.callee;
  SMLoc l = call.loc;

  if (name == "arange") {
    // arange(n), or arange(start, end, step = 1).
    std::optional<int64_t> first = constInt(
        fn, *args[0], args[1] ? "arange's start" : "the argument of arange");
    if (!first)
      return Val::error();
    int64_t start = 0, end = *first, step = 1;
    if (args[1]) {
      std::optional<int64_t> e = constInt(fn, *args[1], "arange's end");
      if (!e)
        return Val::error();
      start = *first;
      end = *e;
    }
    if (args[2]) {
      if (!args[1]) {
        error(args[2]->loc, "arange's step needs a start and an end: "
                            "arange(start, end, step)");
        return Val::error();
      }
      std::optional<int64_t> s = constInt(fn, *args[2], "arange's step");
      if (!s)
        return Val::error();
      if (*s < 1) {
        error(args[2]->loc,
              "arange's step must be positive, got " + Twine(*s));
        return Val::error();
      }
      step = *s;
    }
    if (end <= start) {
      error(args[1] ? l : args[0]->loc, args[1] ? "arange(" + Twine(start) + ", " + Twine(end) +
                             ") is empty: the end must be above the start"
                       : "arange needs a positive length, got " + Twine(end));
      return Val::error();
    }
    Val r = Val::tensor(md::ArangeOp::create(
        b, loc(l), tensorType({end - start}, b.getI64Type()),
        b.getI64IntegerAttr(start), b.getI64IntegerAttr(end)));
    return sliceDim(r, 0, 0, step, ceilDiv(end - start, step), l);
  }

  if (name == "concat" || name == "stack") {
    auto *list = llvm::dyn_cast<ListExpr>(args[0]);
    if (!list || list->elements.empty()) {
      error(args[0]->loc, "the tensors of " + name +
                              " must be a list, e.g. " + name +
                              "([a, b], dim = -1)");
      return Val::error();
    }
    std::vector<Val> parts;
    bool ok = true;
    for (const ExprPtr &el : list->elements) {
      Val v = eval(fn, *el);
      ok &= !v.isError() && expectTensor(v, el->loc, "a tensor of " + name);
      parts.push_back(v);
    }
    if (!ok)
      return Val::error();
    RankedTensorType first = parts[0].type();
    const int64_t rank = first.getRank() + (name == "stack" ? 1 : 0);
    std::optional<int64_t> axis = dimArg(fn, args[1], 0, rank, "dim", l);
    if (!axis)
      return Val::error();
    for (auto [i, p] : llvm::enumerate(parts)) {
      RankedTensorType t = p.type();
      bool same = t.getElementType() == first.getElementType() &&
                  t.getRank() == first.getRank();
      for (int64_t d = 0; same && d < t.getRank(); ++d)
        same = (name == "concat" && d == *axis) ||
               md::rules::DimsCompatible(t.getShape()[d], first.getShape()[d]);
      if (!same) {
        error(list->elements[i]->loc,
              "tensor " + Twine(i) + " of " + name + " is " + formatType(t) +
                  ", but tensor 0 is " + formatType(first) +
                  (name == "concat"
                       ? ": they must agree but along dim " + Twine(*axis)
                       : Twine(": they must have one shape")));
        return Val::error();
      }
    }
    if (name == "stack") {
      for (Val &p : parts) {
        llvm::SmallVector<int64_t> shape(p.type().getShape());
        shape.insert(shape.begin() + *axis, 1);
        p = reshapeTo(p, shape, l);
      }
    } else {
      for (auto [i, p] : llvm::enumerate(parts))
        if (!staticDim(p, *axis, list->elements[i]->loc, "concat"))
          return Val::error();
    }
    return concatDim(parts, *axis, l);
  }

  if (name == "causal_attention") {
    // causal_attention(q, k, v, heads, window = none): md.causal_attention
    // on [B, T, C] split into `heads` heads, 1 / sqrt(C / heads) scaled (the
    // Attention layer's core, for a block that makes its own q, k and v);
    // with a window W, position i sees the W positions (i - W, i].
    Val qkv[3];
    const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; ++i) {
      qkv[i] = eval(fn, *args[i]);
      if (qkv[i].isError())
        return qkv[i];
      if (!expectFloat(qkv[i], args[i]->loc,
                       Twine("causal_attention's ") + names[i]))
        return Val::error();
    }
    std::optional<int64_t> heads = constInt(fn, *args[3], "heads");
    if (!heads)
      return Val::error();
    mlir::IntegerAttr window;
    if (args[4]) {
      std::optional<int64_t> w = constInt(fn, *args[4], "window");
      if (!w)
        return Val::error();
      if (*w <= 0) {
        error(args[4]->loc, "causal_attention's window must be a positive "
                            "number of positions, got " +
                                Twine(*w));
        return Val::error();
      }
      window = b.getI64IntegerAttr(*w);
    }
    RankedTensorType qt = qkv[0].type();
    for (int i = 1; i < 3; ++i)
      if (qkv[i].type() != qt) {
        error(args[i]->loc, Twine("causal_attention's ") + names[i] + " " +
                                formatType(qkv[i].type()) +
                                " must be q's type " + formatType(qt));
        return Val::error();
      }
    md::rules::Attention a = md::rules::AttentionShape(
        md::rules::Dims(qt.getShape().data(), qt.getRank()), *heads);
    if (a.problem != md::rules::Attention::Problem::none) {
      error(l, "causal_attention needs q, k, v of shape [B, T, C] with C a "
               "multiple of heads (" + Twine(*heads) + "), got " +
                   formatType(qt));
      return Val::error();
    }
    return Val::tensor(md::CausalAttentionOp::create(
        b, loc(l), qt, qkv[0].value, qkv[1].value, qkv[2].value,
        b.getI64IntegerAttr(*heads), window));
  }

  if (name == "to") {
    Val x = eval(fn, *args[0]);
    if (x.isError())
      return x;
    if (!expectTensor(x, l, "the input of to"))
      return Val::error();
    auto *dtype = llvm::dyn_cast<NameExpr>(args[1]);
    Type target;
    if (dtype && dtype->name == "f32")
      target = b.getF32Type();
    else if (dtype && dtype->name == "bf16")
      target = b.getBF16Type();
    else if (dtype && dtype->name == "f16")
      target = b.getF16Type();
    if (!target) {
      error(args[1]->loc, "to(x, dtype) converts to f32, bf16 or f16, got " +
                              describeExpr(*args[1]));
      return Val::error();
    }
    if (x.type().getElementType() == target)
      return x;
    return Val::tensor(md::CastOp::create(
        b, loc(l), tensorType(x.type().getShape(), target), x.value));
  }

  Val x = eval(fn, *args[0]);
  if (x.isError())
    return x;
  if (!expectTensor(x, l, "the input of " + name))
    return Val::error();
  RankedTensorType xt = x.type();
  const int64_t rank = xt.getRank();
  llvm::ArrayRef<int64_t> xs = xt.getShape();

  if (name == "split" || name == "chunk") {
    // split(x, size, dim = 0): pieces of `size` (the last may be smaller);
    // chunk(x, n, dim = 0): n pieces of ceil(d / n) (PyTorch's).
    std::optional<int64_t> axis = dimArg(fn, args[2], 0, rank, "dim", l);
    std::optional<int64_t> k =
        constInt(fn, *args[1], name == "split" ? "split's size" : "chunk's count");
    if (!axis || !k)
      return Val::error();
    if (*k < 1) {
      error(args[1]->loc, (name == "split" ? "split's size" : "chunk's count") +
                              Twine(" must be positive, got ") + Twine(*k));
      return Val::error();
    }
    if (!staticDim(x, *axis, l, name))
      return Val::error();
    const int64_t d = xs[*axis];
    const int64_t size = name == "split" ? *k : ceilDiv(d, *k);
    std::vector<Val> pieces;
    for (int64_t at = 0; at < d; at += size)
      pieces.push_back(sliceDim(x, *axis, at, 1, std::min(size, d - at), l));
    return Val::tuple(std::move(pieces));
  }

  if (name == "permute") {
    auto *list = llvm::dyn_cast<ListExpr>(args[1]);
    if (!list) {
      error(args[1]->loc, "the dims of permute must be a list, e.g. "
                          "permute(x, [0, 2, 1, 3])");
      return Val::error();
    }
    if (static_cast<int64_t>(list->elements.size()) != rank) {
      error(args[1]->loc, "permute of " + formatType(xt) + " needs " +
                              Twine(rank) + " dims, got " +
                              Twine(list->elements.size()));
      return Val::error();
    }
    llvm::SmallVector<int64_t> perm, shape;
    llvm::SmallVector<bool> seen(rank, false);
    for (const ExprPtr &el : list->elements) {
      std::optional<int64_t> d = dimArg(fn, el.get(), std::nullopt, rank,
                                        "a dim of permute", el->loc);
      if (!d)
        return Val::error();
      if (seen[*d]) {
        error(el->loc, "dim " + Twine(*d) + " appears twice in permute");
        return Val::error();
      }
      seen[*d] = true;
      perm.push_back(*d);
      shape.push_back(xs[*d]);
    }
    return Val::tensor(md::TransposeOp::create(
        b, loc(l), tensorType(shape, xt.getElementType()), x.value, perm));
  }

  if (name == "transpose") {
    // transpose(x) swaps the last two dims; transpose(x, i, j) dims i, j.
    if (rank < 2) {
      error(l, "transpose swaps two dims and needs rank >= 2, got " +
                   formatType(xt));
      return Val::error();
    }
    if (bool(args[1]) != bool(args[2])) {
      error(l, "transpose takes both dims, transpose(x, i, j), or neither");
      return Val::error();
    }
    std::optional<int64_t> i = dimArg(fn, args[1], -2, rank, "dim0", l);
    std::optional<int64_t> j = dimArg(fn, args[2], -1, rank, "dim1", l);
    if (!i || !j)
      return Val::error();
    llvm::SmallVector<int64_t> perm, shape(xs);
    for (int64_t k = 0; k < rank; ++k)
      perm.push_back(k);
    std::swap(perm[*i], perm[*j]);
    std::swap(shape[*i], shape[*j]);
    return Val::tensor(md::TransposeOp::create(
        b, loc(l), tensorType(shape, xt.getElementType()), x.value, perm));
  }

  if (name == "unsqueeze") {
    std::optional<int64_t> d =
        dimArg(fn, args[1], std::nullopt, rank + 1, "dim", l);
    if (!d)
      return Val::error();
    llvm::SmallVector<int64_t> shape(xs);
    shape.insert(shape.begin() + *d, 1);
    return reshapeTo(x, shape, l);
  }

  if (name == "squeeze") {
    std::optional<int64_t> d = dimArg(fn, args[1], std::nullopt, rank, "dim", l);
    if (!d)
      return Val::error();
    if (xs[*d] != 1) {
      error(args[1]->loc, "squeeze drops a dim of size 1; dim " + Twine(*d) +
                              " of " + formatType(xt) + " has size " +
                              (ShapedType::isDynamic(xs[*d])
                                   ? std::string("B")
                                   : std::to_string(xs[*d])));
      return Val::error();
    }
    llvm::SmallVector<int64_t> shape(xs);
    shape.erase(shape.begin() + *d);
    return reshapeTo(x, shape, l);
  }

  if (name == "flatten") {
    // flatten(x, start_dim = 0, end_dim = -1): dims start..end as one.
    if (rank == 0)
      return reshapeTo(x, {1}, l);
    std::optional<int64_t> s = dimArg(fn, args[1], 0, rank, "start_dim", l);
    std::optional<int64_t> e = dimArg(fn, args[2], -1, rank, "end_dim", l);
    if (!s || !e)
      return Val::error();
    if (*e < *s) {
      error(l, "flatten's end_dim " + Twine(*e) + " is before its start_dim " +
                   Twine(*s));
      return Val::error();
    }
    llvm::SmallVector<int64_t> shape(xs.begin(), xs.begin() + *s);
    int64_t n = 1;
    for (int64_t d = *s; d <= *e; ++d)
      n = ShapedType::isDynamic(xs[d]) || ShapedType::isDynamic(n)
              ? ShapedType::kDynamic
              : n * xs[d];
    shape.push_back(n);
    shape.append(xs.begin() + *e + 1, xs.end());
    return reshapeTo(x, shape, l);
  }

  if (name == "expand") {
    // expand(x, [dims]): PyTorch's Tensor.expand; -1 keeps x's dim, new
    // dims lead.
    auto *list = llvm::dyn_cast<ListExpr>(args[1]);
    if (!list) {
      error(args[1]->loc, "the shape of expand must be a list, e.g. "
                          "expand(x, [B, T, heads, hd])");
      return Val::error();
    }
    const int64_t n = static_cast<int64_t>(list->elements.size());
    if (n < rank) {
      error(args[1]->loc, "expand to " + Twine(n) + " dims cannot hold " +
                              formatType(xt) + " of rank " + Twine(rank));
      return Val::error();
    }
    llvm::SmallVector<int64_t> shape;
    for (auto [k, el] : llvm::enumerate(list->elements)) {
      Val v = eval(fn, *el);
      if (v.isError())
        return v;
      const int64_t xd = int64_t(k) - (n - rank);
      if (v.isNumber() && v.num.isInt && !v.num.dynamic && v.num.i == -1) {
        if (xd < 0) {
          error(el->loc, "-1 keeps a dim of x, but dim " + Twine(k) +
                             " of expand's shape is a new one");
          return Val::error();
        }
        shape.push_back(xs[xd]);
        continue;
      }
      std::optional<int64_t> d = dimOf(v, el->loc, "a dim of expand");
      if (!d)
        return Val::error();
      shape.push_back(*d);
    }
    if (!md::rules::BroadcastsTo(
            md::rules::Dims(xs.data(), xs.size()),
            md::rules::Dims(shape.data(), shape.size()))) {
      error(args[1]->loc, "cannot expand " + formatType(xt) + " to " +
                              shapeText(shape) +
                              ": each dim of x must be the new one or 1");
      return Val::error();
    }
    if (shape == llvm::ArrayRef<int64_t>(xs))
      return x;
    return Val::tensor(md::ExpandOp::create(
        b, loc(l), tensorType(shape, xt.getElementType()), x.value));
  }

  if (name == "repeat_interleave") {
    // repeat_interleave(x, repeats, dim): each element of dim `dim`
    // repeated `repeats` times in place, [a, b] -> [a, a, b, b]: x as [...,
    // d, 1, ...], expanded to [..., d, r, ...], read as [..., d * r, ...].
    std::optional<int64_t> r = constInt(fn, *args[1], "repeats");
    std::optional<int64_t> d = dimArg(fn, args[2], std::nullopt, rank, "dim", l);
    if (!r || !d)
      return Val::error();
    if (*r < 1) {
      error(args[1]->loc, "repeats must be positive, got " + Twine(*r));
      return Val::error();
    }
    if (*r == 1)
      return x;
    if (!staticDim(x, *d, l, "repeat_interleave"))
      return Val::error();
    llvm::SmallVector<int64_t> one(xs), many(xs), out(xs);
    one.insert(one.begin() + *d + 1, 1);
    many.insert(many.begin() + *d + 1, *r);
    out[*d] = xs[*d] * *r;
    Val u = reshapeTo(x, one, l);
    Val e = Val::tensor(md::ExpandOp::create(
        b, loc(l), tensorType(many, xt.getElementType()), u.value));
    return reshapeTo(e, out, l);
  }

  error(l, "'" + name + "' is not implemented");
  return Val::error();
}

} // namespace md::frontend::irgen
