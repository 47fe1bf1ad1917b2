//===- Strides.h - row-major, broadcast, reduced strides -*- C++ -*-===//
//
// The index arithmetic that the CPU and the CUDA kernels share for
// broadcasting binary ops and for reductions over some dims: both walk a
// row-major tensor through the strides these functions give, so both
// backends agree on which element meets which.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_STRIDES_H
#define MD_RUNTIME_CORE_STRIDES_H

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "runtime/core/Tensor.h"

namespace md::runtime {

/// Row-major element strides of `shape`.
inline std::vector<int64_t> rowMajorStrides(absl::Span<const int64_t> shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = int64_t(shape.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

/// Row-major strides of `shape` seen as a tensor of shape `full` (which it
/// broadcasts to, aligned at the last dim): 0 wherever `shape` has a 1 or
/// lacks the leading dim.
inline std::vector<int64_t> broadcastStrides(absl::Span<const int64_t> shape,
                                             absl::Span<const int64_t> full) {
  size_t r = full.size(), lead = r - shape.size();
  std::vector<int64_t> strides(r, 0);
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[lead + i] = shape[i] == 1 ? 0 : s;
    s *= shape[i];
  }
  return strides;
}

/// `full` with every dim that `reduced` marks set to 1: the shape of a
/// reduction's result with its dims kept.
inline Shape keptShape(absl::Span<const int64_t> full,
                       const std::vector<bool> &reduced) {
  Shape s(full.begin(), full.end());
  for (size_t i = 0; i < s.size(); ++i)
    if (reduced[i])
      s[i] = 1;
  return s;
}

/// How many elements of `full` go into each element of the reduction over
/// the dims that `reduced` marks.
inline int64_t reducedCount(absl::Span<const int64_t> full,
                            const std::vector<bool> &reduced) {
  int64_t n = 1;
  for (size_t i = 0; i < full.size(); ++i)
    if (reduced[i])
      n *= full[i];
  return n;
}

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_STRIDES_H
