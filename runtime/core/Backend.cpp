//===- Backend.cpp - buffers, arenas, kernels made of kernels -------------===//

#include "runtime/core/Backend.h"

#include "absl/strings/str_format.h"

namespace md::runtime {

const char *ElementwiseFnName(ElementwiseFn fn) {
  switch (fn) {
  case ElementwiseFn::exp:
    return "exp";
  case ElementwiseFn::log:
    return "log";
  case ElementwiseFn::sin:
    return "sin";
  case ElementwiseFn::cos:
    return "cos";
  case ElementwiseFn::tanh:
    return "tanh";
  case ElementwiseFn::sigmoid:
    return "sigmoid";
  case ElementwiseFn::abs:
    return "abs";
  case ElementwiseFn::neg:
    return "neg";
  case ElementwiseFn::sqrt:
    return "sqrt";
  case ElementwiseFn::rsqrt:
    return "rsqrt";
  }
  return "elementwise";
}

Backend::~Backend() = default;

static int64_t alignUp(int64_t n) {
  return (n + kAllocAlignment - 1) / kAllocAlignment * kAllocAlignment;
}

absl::StatusOr<void *> Arena::take(int64_t bytes) {
  if (bytes < 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("arena: negative allocation of %d bytes", bytes));
  int64_t start = alignUp(used_);
  if (bytes > block_.bytes() - start)
    return absl::ResourceExhaustedError(
        absl::StrFormat("arena: %d bytes requested, %d of %d left", bytes,
                        block_.bytes() - start, block_.bytes()));
  used_ = start + bytes;
  return static_cast<char *>(block_.data()) + start;
}

absl::StatusOr<void *> Arena::at(int64_t offset, int64_t bytes) const {
  if (offset < 0 || bytes < 0 || offset % kAllocAlignment != 0 ||
      bytes > block_.bytes() || offset > block_.bytes() - bytes)
    return absl::InvalidArgumentError(absl::StrFormat(
        "arena: block [%d, %d + %d) is not an aligned block of the %d-byte "
        "arena",
        offset, offset, bytes, block_.bytes()));
  return static_cast<char *>(block_.data()) + offset;
}

absl::Status Backend::matmulThenGelu(const MatmulGeluArgs &args) {
  MatmulArgs product;
  product.a = args.a;
  product.b = args.b;
  product.bias = args.bias;
  product.out = args.pre;
  product.transposeA = args.transposeA;
  product.transposeB = args.transposeB;
  product.stream = args.stream;
  if (absl::Status s = matmul(product); !s.ok())
    return s;
  GeluArgs activation;
  activation.x = args.pre;
  activation.out = args.out;
  activation.approximate = args.approximate;
  activation.stream = args.stream;
  return gelu(activation);
}

} // namespace md::runtime
