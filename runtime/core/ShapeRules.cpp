//===- ShapeRules.cpp - the shape rules of md's ops ----------------------===//

#include "runtime/core/ShapeRules.h"

#include <algorithm>

namespace md::rules {

bool ShapesCompatible(Dims a, Dims b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!DimsCompatible(a[i], b[i]))
      return false;
  return true;
}

Broadcast BroadcastShapes(Dims a, Dims b) {
  Broadcast r;
  const size_t rank = std::max(a.size(), b.size());
  r.shape.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    int64_t &out = r.shape[i];
    if (x == 1)
      out = y;
    else if (y == 1)
      out = x;
    else if (x == kDynamic)
      out = y; // a known y is the only size that can match
    else if (y == kDynamic || x == y)
      out = x;
    else {
      r.ok = false;
      r.dim = i;
      r.a = x;
      r.b = y;
      r.shape.clear();
      return r;
    }
  }
  return r;
}

bool BroadcastsTo(Dims from, Dims to) {
  if (from.size() > to.size())
    return false;
  Dims tail = to.subspan(to.size() - from.size());
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && !DimsCompatible(from[i], tail[i]))
      return false;
  return true;
}

std::optional<int64_t> NormalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

Reduction ReduceDims(Dims shape, Dims dims, bool keepdim) {
  Reduction r;
  const int64_t rank = static_cast<int64_t>(shape.size());
  r.reduced.assign(shape.size(), false);
  if (dims.empty()) {
    r.problem = Reduction::Problem::empty;
    return r;
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    std::optional<int64_t> d = NormalizeAxis(dims[i], rank);
    if (!d || r.reduced[*d]) {
      r.problem = !d ? Reduction::Problem::outOfRange
                     : Reduction::Problem::twice;
      r.dim = dims[i];
      r.index = i;
      return r;
    }
    r.reduced[*d] = true;
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (!r.reduced[i])
      r.shape.push_back(shape[i]);
    else if (keepdim)
      r.shape.push_back(1);
  }
  return r;
}

Matmul MatmulShapes(Dims a, Dims b, bool transposeA, bool transposeB) {
  Matmul r;
  if (a.size() < 2) {
    r.problem = Matmul::Problem::aRank;
    return r;
  }
  if (b.size() != 2 && b.size() != a.size()) {
    r.problem = Matmul::Problem::bRank;
    return r;
  }
  const size_t ra = a.size(), rb = b.size();
  r.batchedB = rb > 2;
  Dims batchDims = a.subspan(0, ra - 2);
  if (r.batchedB && !ShapesCompatible(batchDims, b.subspan(0, rb - 2))) {
    r.problem = Matmul::Problem::batch;
    return r;
  }
  r.m = transposeA ? a[ra - 1] : a[ra - 2];
  r.ka = transposeA ? a[ra - 2] : a[ra - 1];
  r.kb = transposeB ? b[rb - 1] : b[rb - 2];
  r.n = transposeB ? b[rb - 2] : b[rb - 1];
  if (!DimsCompatible(r.ka, r.kb)) {
    r.problem = Matmul::Problem::contraction;
    return r;
  }
  r.k = r.ka != kDynamic ? r.ka : r.kb;
  r.batch = 1;
  for (int64_t d : batchDims)
    r.batch = d == kDynamic || r.batch == kDynamic ? kDynamic : r.batch * d;
  r.shape.assign(batchDims.begin(), batchDims.end());
  r.shape.push_back(r.m);
  r.shape.push_back(r.n);
  return r;
}

Attention AttentionShape(Dims q, int64_t heads) {
  Attention r;
  if (q.size() != 3) {
    r.problem = Attention::Problem::rank;
    return r;
  }
  r.batch = q[0];
  r.seq = q[1];
  r.channels = q[2];
  r.heads = heads;
  if (heads <= 0) {
    r.problem = Attention::Problem::heads;
    return r;
  }
  if (r.channels != kDynamic && r.channels % heads != 0) {
    r.problem = Attention::Problem::indivisible;
    return r;
  }
  r.headDim = r.channels == kDynamic ? kDynamic : r.channels / heads;
  return r;
}

Slice SliceShape(Dims x, int64_t axis, int64_t start, int64_t step,
                 int64_t count) {
  Slice r;
  const int64_t rank = static_cast<int64_t>(x.size());
  if (axis < 0 || axis >= rank)
    r.problem = Slice::Problem::axis;
  else if (step < 1)
    r.problem = Slice::Problem::step;
  else if (start < 0)
    r.problem = Slice::Problem::start;
  else if (count < 1)
    r.problem = Slice::Problem::count;
  else if (__builtin_mul_overflow(count - 1, step, &r.last) ||
           __builtin_add_overflow(r.last, start, &r.last) ||
           (x[axis] != kDynamic && r.last >= x[axis]))
    r.problem = Slice::Problem::bounds;
  if (r.problem != Slice::Problem::none)
    return r;
  r.shape.assign(x.begin(), x.end());
  r.shape[axis] = count;
  return r;
}

Concat ConcatShapes(absl::Span<const Dims> inputs, int64_t axis) {
  Concat r;
  if (inputs.empty()) {
    r.problem = Concat::Problem::empty;
    return r;
  }
  Dims first = inputs[0];
  if (axis < 0 || axis >= static_cast<int64_t>(first.size())) {
    r.problem = Concat::Problem::axis;
    return r;
  }
  r.shape.assign(first.begin(), first.end());
  for (size_t i = 1; i < inputs.size(); ++i) {
    Dims in = inputs[i];
    r.index = i;
    if (in.size() != first.size()) {
      r.problem = Concat::Problem::rank;
      return r;
    }
    for (size_t d = 0; d < in.size(); ++d) {
      if (static_cast<int64_t>(d) == axis) {
        int64_t &sum = r.shape[d];
        if (sum == kDynamic || in[d] == kDynamic) {
          sum = kDynamic;
        } else if (__builtin_add_overflow(sum, in[d], &sum)) {
          r.problem = Concat::Problem::overflow;
          return r;
        }
        continue;
      }
      if (!DimsCompatible(r.shape[d], in[d])) {
        r.problem = Concat::Problem::dims;
        r.dim = d;
        return r;
      }
      if (r.shape[d] == kDynamic)
        r.shape[d] = in[d];
    }
  }
  return r;
}

std::optional<int64_t> ElementCount(Dims shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return std::nullopt;
  return n;
}

} // namespace md::rules
