//===- LrSchedule.cpp - the recipe's learning rate at a step -------------===//

#include "runtime/exec/LrSchedule.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace md::runtime {

double LrSchedule::at(int64_t it) const {
  if (it < 0)
    it = 0;
  if (it < warmup)
    return lr * static_cast<double>(it + 1) / static_cast<double>(warmup + 1);
  if (kind == Kind::Constant)
    return lr;
  if (it >= steps)
    return minLr;
  double r =
      static_cast<double>(it - warmup) / static_cast<double>(steps - warmup);
  if (kind == Kind::Linear)
    return minLr + (1.0 - r) * (lr - minLr);
  return minLr + 0.5 * (1.0 + std::cos(M_PI * r)) * (lr - minLr);
}

std::string LrSchedule::str() const {
  switch (kind) {
  case Kind::Constant:
    if (warmup > 0)
      return absl::StrFormat("constant(lr = %g, warmup = %d)", lr, warmup);
    return absl::StrFormat("constant(lr = %g)", lr);
  case Kind::Linear:
    return absl::StrFormat(
        "linear(lr = %g, warmup = %d, steps = %d, min_lr = %g)", lr, warmup,
        steps, minLr);
  case Kind::Cosine:
    return absl::StrFormat(
        "cosine(lr = %g, warmup = %d, steps = %d, min_lr = %g)", lr, warmup,
        steps, minLr);
  }
  return "?";
}

} // namespace md::runtime
