//===- Reduce.cpp - sum, mean, their gradients and sum_to -----------------===//
//
// A reduction walks its input in row-major order and adds every element to
// its output slot in an f64 accumulator, so each output is summed in
// increasing input order whatever dims are reduced. The output slot of an
// input element comes from broadcastStrides: the output seen with its
// reduced dims kept as 1 broadcasts back to the input's shape.
//
//===----------------------------------------------------------------------===//

#include <vector>

#include "runtime/core/OpChecks.h"
#include "runtime/core/Status.h"
#include "runtime/core/Strides.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Storage.h"

namespace md::cpu {

using namespace md::runtime;

namespace {

/// acc[slot(i)] += x[i] over the row-major elements of x (shape `full`),
/// where `small` is a shape that broadcasts to `full`.
std::vector<double> sumInto(const float *x, const Shape &full,
                            const Shape &small, int64_t smallNumel) {
  std::vector<double> acc(smallNumel, 0.0);
  std::vector<int64_t> ones(full.size(), 0);
  forEachBroadcast(full, broadcastStrides(small, full), ones,
                   [&](int64_t i, int64_t slot, int64_t) { acc[slot] += x[i]; });
  return acc;
}

} // namespace

absl::Status CpuBackend::reduce(const ReduceArgs &args) {
  MD_ASSIGN_OR_RETURN(ReducedDims reduced, checkReduce(args));
  F32In x(args.x);
  F32Out out(args.out);
  std::vector<double> acc = sumInto(x.data(), args.x.shape,
                                    keptShape(args.x.shape, reduced),
                                    args.out.numel());
  // A mean over zero elements is 0 / 0 = NaN, as in PyTorch.
  double divisor = args.kind == ReduceKind::mean
                       ? double(reducedCount(args.x.shape, reduced))
                       : 1.0;
  for (size_t i = 0; i < acc.size(); ++i)
    out[int64_t(i)] = float(acc[i] / divisor);
  out.store();
  return absl::OkStatus();
}

// Every element of dx gets the dy of the output it went into, divided by
// the number of elements reduced for a mean.
absl::Status CpuBackend::reduceGrad(const ReduceGradArgs &args) {
  MD_ASSIGN_OR_RETURN(ReducedDims reduced, checkReduceGrad(args));
  F32In dy(args.dy);
  F32Out dx(args.dx);
  float divisor = args.kind == ReduceKind::mean
                      ? float(reducedCount(args.dx.shape, reduced))
                      : 1.0f;
  std::vector<int64_t> ones(args.dx.rank(), 0);
  forEachBroadcast(args.dx.shape,
                   broadcastStrides(keptShape(args.dx.shape, reduced),
                                    args.dx.shape),
                   ones, [&](int64_t i, int64_t slot, int64_t) {
                     dx[i] = args.kind == ReduceKind::mean ? dy[slot] / divisor
                                                           : dy[slot];
                   });
  dx.store();
  return absl::OkStatus();
}

// The reverse of a broadcast: g summed over its extra leading dims and over
// every dim where out has 1.
absl::Status CpuBackend::sumTo(const SumToArgs &args) {
  MD_RETURN_IF_ERROR(checkSumTo(args));
  F32In g(args.g);
  storeSums(args.out,
            sumInto(g.data(), args.g.shape, args.out.shape, args.out.numel()));
  return absl::OkStatus();
}

} // namespace md::cpu
