//===- Tensor.cpp - element types and tensor views ------------------------===//

#include "runtime/core/Tensor.h"

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/core/EnumNames.h"

namespace md::runtime {

int64_t dtypeSize(DType t) {
  switch (t) {
  case DType::f32:
  case DType::i32:
    return 4;
  case DType::bf16:
  case DType::f16:
    return 2;
  case DType::i64:
    return 8;
  }
  return 0;
}

constexpr const char *kDTypeNames[] = {"f32", "bf16", "f16", "i32", "i64"};
static_assert(namesEveryValue(kDTypeNames, DType::i64));

const char *dtypeName(DType t) { return enumName(kDTypeNames, t); }

std::string shapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string TensorRef::str() const {
  return absl::StrCat(dtypeName(dtype), shapeString(shape));
}

absl::Status checkTensor(const TensorRef &t, const char *op, const char *what) {
  if (dtypeSize(t.dtype) == 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s has an unknown element type %d", op, what,
                        static_cast<int>(t.dtype)));
  // Keep the byte count representable too: kernels index with int64.
  const int64_t limit = INT64_MAX / 8;
  int64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 0)
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s has a negative dim: %s", op, what, t.str()));
    if (d != 0 && n > limit / d)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s has too many elements: %s", op, what, t.str()));
    n *= d;
  }
  if (n > 0 && t.data == nullptr)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s %s has no data (null pointer)", op, what, t.str()));
  return absl::OkStatus();
}

} // namespace md::runtime
