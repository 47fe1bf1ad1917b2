//===- Reduce.cpp - in-order reductions for the host comms ----------------===//

#include "runtime/core/Reduce.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "runtime/core/NumberFormat.h"

namespace md::runtime {
namespace {

// Each element reads every source before `out` is written, which is what
// makes `out` == srcs[i] safe.
template <typename T, typename Load, typename Store>
void reduceFloats(const std::vector<const void *> &srcs, void *outV,
                  int64_t len, ReduceOp op, Load load, Store store) {
  const int n = int(srcs.size());
  T *out = static_cast<T *>(outV);
  for (int64_t j = 0; j < len; ++j) {
    float acc = load(static_cast<const T *>(srcs[0])[j]);
    for (int i = 1; i < n; ++i) {
      float x = load(static_cast<const T *>(srcs[i])[j]);
      switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        acc = acc + x;
        break;
      case ReduceOp::prod:
        acc = acc * x;
        break;
      case ReduceOp::max: // NaN wins, as in torch.max
        if (x > acc || std::isnan(x))
          acc = x;
        break;
      case ReduceOp::min:
        if (x < acc || std::isnan(x))
          acc = x;
        break;
      }
    }
    if (op == ReduceOp::avg)
      acc = acc / float(n);
    out[j] = store(acc);
  }
}

template <typename T>
void reduceInts(const std::vector<const void *> &srcs, void *outV, int64_t len,
                ReduceOp op) {
  using U = std::make_unsigned_t<T>;
  const int n = int(srcs.size());
  T *out = static_cast<T *>(outV);
  for (int64_t j = 0; j < len; ++j) {
    T acc = static_cast<const T *>(srcs[0])[j];
    for (int i = 1; i < n; ++i) {
      T x = static_cast<const T *>(srcs[i])[j];
      switch (op) {
      case ReduceOp::sum: // two's complement wrap-around, as in NCCL
      case ReduceOp::avg:
        acc = T(U(acc) + U(x));
        break;
      case ReduceOp::prod:
        acc = T(U(acc) * U(x));
        break;
      case ReduceOp::max:
        acc = std::max(acc, x);
        break;
      case ReduceOp::min:
        acc = std::min(acc, x);
        break;
      }
    }
    if (op == ReduceOp::avg)
      acc = acc / T(n); // truncates toward zero
    out[j] = acc;
  }
}

} // namespace

void ReduceInOrder(DType dtype, ReduceOp op,
                   const std::vector<const void *> &srcs, void *out,
                   int64_t len) {
  if (srcs.empty())
    return;
  switch (dtype) {
  case DType::f32:
    reduceFloats<float>(srcs, out, len, op, [](float v) { return v; },
                        [](float v) { return v; });
    break;
  case DType::bf16:
    reduceFloats<uint16_t>(srcs, out, len, op, bf16ToF32, f32ToBf16);
    break;
  case DType::f16:
    reduceFloats<uint16_t>(srcs, out, len, op, f16ToF32, f32ToF16);
    break;
  case DType::i32:
    reduceInts<int32_t>(srcs, out, len, op);
    break;
  case DType::i64:
    reduceInts<int64_t>(srcs, out, len, op);
    break;
  }
}

} // namespace md::runtime
