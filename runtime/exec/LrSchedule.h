//===- LrSchedule.h - the recipe's learning rate at a step -*- C++ -*-===//
//
// The schedules of md's recipe, written as nanoGPT's get_lr (a LambdaLR
// warmup + decay): with `it` the 0-based index of the optimizer step,
//
//   it < warmup:   lr * (it + 1) / (warmup + 1)
//   it >= steps:   min_lr                              (linear, cosine)
//   otherwise:     r = (it - warmup) / (steps - warmup)
//                  constant: lr
//                  linear:   min_lr + (1 - r) * (lr - min_lr)
//                  cosine:   min_lr + 0.5 * (1 + cos(pi * r)) * (lr - min_lr)
//
// computed in double; the plan's `lr` instruction rounds it to f32.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_LRSCHEDULE_H
#define MD_RUNTIME_EXEC_LRSCHEDULE_H

#include <cstdint>
#include <string>

namespace md::runtime {

struct LrSchedule {
  enum class Kind { Constant, Linear, Cosine };
  Kind kind = Kind::Constant;
  double lr = 0.0;    // peak learning rate
  double minLr = 0.0; // learning rate at `steps` and after
  int64_t warmup = 0; // warmup steps
  int64_t steps = 0;  // where the decay ends

  /// The learning rate of optimizer step `it` (0-based).
  double at(int64_t it) const;
  /// "cosine(lr = 0.001, warmup = 10, steps = 100, min_lr = 0)".
  std::string str() const;
};

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_LRSCHEDULE_H
