//===- Layout.cpp - reshape, transpose, slice, concat, expand, ... --------===//
//
// Data movement only: elements are copied as bytes, so every element type
// (floats and indices) moves exactly.
//
//===----------------------------------------------------------------------===//

#include <cstring>
#include <vector>

#include "runtime/core/OpChecks.h"
#include "runtime/core/Status.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Storage.h"

namespace md::cpu {

using namespace md::runtime;

namespace {

template <typename T>
void permute(const TensorRef &x, const TensorRef &out,
             const std::vector<int64_t> &srcStrides) {
  const T *src = x.as<const T>();
  T *dst = out.as<T>();
  std::vector<int64_t> unused(out.rank(), 0);
  forEachBroadcast(out.shape, srcStrides, unused,
                   [&](int64_t i, int64_t s, int64_t) { dst[i] = src[s]; });
}

/// x as [outer, dim, inner] around `axis`: the row-major blocks a slice or
/// a concat along it moves whole.
struct AxisBlocks {
  int64_t outer = 1, dim = 1, inner = 1;
};
AxisBlocks axisBlocks(const Shape &shape, int64_t axis) {
  AxisBlocks b;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis)
      b.outer *= shape[d];
    else if (d == axis)
      b.dim = shape[d];
    else
      b.inner *= shape[d];
  }
  return b;
}

/// Copies the slice's elements between the whole tensor (x of md.slice,
/// dx of md.slice_grad) and the sliced one, one run of `inner` elements (a
/// run of count * inner when step is 1) at a time; `gather` reads the
/// whole into the sliced, else the sliced is scattered into the whole.
void copySlice(char *whole, const Shape &wholeShape, char *sliced,
               int64_t count, int64_t axis, int64_t start, int64_t step,
               int64_t elemBytes, bool gather) {
  AxisBlocks b = axisBlocks(wholeShape, axis);
  const int64_t run = (step == 1 ? count : 1) * b.inner * elemBytes;
  const int64_t runs = step == 1 ? 1 : count;
  for (int64_t o = 0; o < b.outer; ++o)
    for (int64_t k = 0; k < runs; ++k) {
      char *w = whole + ((o * b.dim + start + k * step) * b.inner) * elemBytes;
      char *p = sliced + ((o * count + k) * b.inner) * elemBytes;
      if (gather)
        std::memcpy(p, w, run);
      else
        std::memcpy(w, p, run);
    }
}

} // namespace

absl::Status CpuBackend::slice(const SliceArgs &args) {
  MD_RETURN_IF_ERROR(checkSlice(args));
  copySlice(args.x.as<char>(), args.x.shape, args.out.as<char>(),
            args.out.shape[args.axis], args.axis, args.start, args.step,
            dtypeSize(args.x.dtype), /*gather=*/true);
  return absl::OkStatus();
}

absl::Status CpuBackend::sliceGrad(const SliceGradArgs &args) {
  MD_RETURN_IF_ERROR(checkSliceGrad(args));
  if (args.dx.bytes() > 0)
    std::memset(args.dx.data, 0, args.dx.bytes());
  copySlice(args.dx.as<char>(), args.dx.shape, args.dy.as<char>(),
            args.dy.shape[args.axis], args.axis, args.start, args.step,
            dtypeSize(args.dx.dtype), /*gather=*/false);
  return absl::OkStatus();
}

// Per outer index, each input's [dim, inner] block in turn.
absl::Status CpuBackend::concat(const ConcatArgs &args) {
  MD_RETURN_IF_ERROR(checkConcat(args));
  const int64_t es = dtypeSize(args.out.dtype);
  AxisBlocks ob = axisBlocks(args.out.shape, args.axis);
  char *out = args.out.as<char>();
  for (int64_t o = 0; o < ob.outer; ++o) {
    int64_t at = 0;
    for (const TensorRef &in : args.inputs) {
      const int64_t block = in.shape[args.axis] * ob.inner;
      std::memcpy(out + (o * ob.dim * ob.inner + at) * es,
                  in.as<const char>() + o * block * es, block * es);
      at += block;
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::expand(const ExpandArgs &args) {
  MD_RETURN_IF_ERROR(checkExpand(args));
  std::vector<int64_t> src = broadcastStrides(args.x.shape, args.out.shape);
  switch (dtypeSize(args.x.dtype)) {
  case 2:
    permute<uint16_t>(args.x, args.out, src);
    break;
  case 4:
    permute<uint32_t>(args.x, args.out, src);
    break;
  default:
    permute<uint64_t>(args.x, args.out, src);
    break;
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::reshape(const ReshapeArgs &args) {
  MD_RETURN_IF_ERROR(checkReshape(args));
  if (args.out.data != args.x.data && args.x.bytes() > 0)
    std::memmove(args.out.data, args.x.data, args.x.bytes());
  return absl::OkStatus();
}

// out[i_0, ..., i_n] = x[j] with j[perm[k]] = i_k: walking out in row-major
// order, out dim k steps x by x's stride of dim perm[k].
absl::Status CpuBackend::transpose(const TransposeArgs &args) {
  MD_RETURN_IF_ERROR(checkTranspose(args));
  int64_t r = args.x.rank();
  std::vector<int64_t> xStrides(r, 1), srcStrides(r);
  for (int64_t i = r - 2; i >= 0; --i)
    xStrides[i] = xStrides[i + 1] * args.x.shape[i + 1];
  for (int64_t k = 0; k < r; ++k)
    srcStrides[k] = xStrides[args.perm[k]];
  switch (dtypeSize(args.x.dtype)) {
  case 2:
    permute<uint16_t>(args.x, args.out, srcStrides);
    break;
  case 4:
    permute<uint32_t>(args.x, args.out, srcStrides);
    break;
  default:
    permute<uint64_t>(args.x, args.out, srcStrides);
    break;
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::arange(const ArangeArgs &args) {
  MD_RETURN_IF_ERROR(checkArange(args));
  int64_t n = args.out.numel();
  for (int64_t i = 0; i < n; ++i) {
    if (args.out.dtype == DType::i32)
      args.out.as<int32_t>()[i] = int32_t(args.start + i);
    else
      args.out.as<int64_t>()[i] = args.start + i;
  }
  return absl::OkStatus();
}

// The inputs back to back from offset 0, then zeros up to the end.
absl::Status CpuBackend::flatten(const FlattenArgs &args) {
  MD_RETURN_IF_ERROR(checkFlatten(args));
  char *out = args.out.as<char>();
  int64_t offset = 0;
  for (const TensorRef &in : args.inputs) {
    if (in.bytes() > 0)
      std::memmove(out + offset, in.data, in.bytes());
    offset += in.bytes();
  }
  if (args.out.bytes() > offset)
    std::memset(out + offset, 0, args.out.bytes() - offset);
  return absl::OkStatus();
}

absl::Status CpuBackend::view(const ViewArgs &args) {
  MD_RETURN_IF_ERROR(checkView(args));
  const char *src =
      args.source.as<const char>() + args.offset * dtypeSize(args.source.dtype);
  if (args.out.data != src && args.out.bytes() > 0)
    std::memmove(args.out.data, src, args.out.bytes());
  return absl::OkStatus();
}

} // namespace md::cpu
