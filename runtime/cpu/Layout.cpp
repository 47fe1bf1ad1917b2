//===- Layout.cpp - reshape, transpose, arange, flatten, view -------------===//
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

} // namespace

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
