//===- Tensor.h - element types and tensor views shared by every backend -*- C++ -*-===//
//
// A TensorRef is what a kernel sees of a tensor: a data pointer (host memory
// on the CPU backend, device memory on CUDA), an element type and a
// row-major shape. It owns nothing; buffers come from Backend::allocate. The
// element types are the ones the plan can hold: the three float types md
// computes with and the two index types.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_TENSOR_H
#define MD_RUNTIME_CORE_TENSOR_H

#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/types/span.h"

namespace md::runtime {

enum class DType : uint8_t { f32, bf16, f16, i32, i64 };

/// Bytes per element: 4, 2, 2, 4, 8.
int64_t dtypeSize(DType t);
/// The dialect's spelling: "f32", "bf16", "f16", "i32", "i64".
const char *dtypeName(DType t);
inline bool isFloat(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::f16;
}
inline bool isIndex(DType t) { return t == DType::i32 || t == DType::i64; }

/// Row-major dims; most tensors have at most four, so they live inline.
using Shape = absl::InlinedVector<int64_t, 6>;

/// "[8, 64, 768]"; "[]" for a scalar.
std::string shapeString(absl::Span<const int64_t> shape);

struct TensorRef {
  void *data = nullptr;
  DType dtype = DType::f32;
  Shape shape;

  TensorRef() = default;
  TensorRef(void *d, DType t, Shape s)
      : data(d), dtype(t), shape(std::move(s)) {}

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  /// Product of the dims (1 for a scalar). Only meaningful once
  /// checkTensor has accepted the shape (no negative dims, no overflow).
  int64_t numel() const;
  int64_t bytes() const { return numel() * dtypeSize(dtype); }
  /// "bf16[8, 768]".
  std::string str() const;
  template <typename T> T *as() const { return static_cast<T *>(data); }
};

/// Rejects negative dims, element counts that overflow int64 and a null
/// data pointer on a non-empty tensor. `what` names the operand in the
/// message ("matmul: a has a negative dim: f32[-1, 4]").
absl::Status checkTensor(const TensorRef &t, const char *op, const char *what);

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_TENSOR_H
