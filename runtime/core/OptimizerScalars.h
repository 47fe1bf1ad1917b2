//===- OptimizerScalars.h - per-step scalars of AdamW and SGD -*- C++ -*-===//
//
// As in PyTorch, an optimizer step derives its scalars (bias corrections,
// step size, 1 - lr * wd) in double, the way Python floats are, and rounds
// each to f32 once; every per-element operation is then f32. The CPU loop
// (runtime/cpu/Optimizer.cpp) and the CUDA kernels both take the scalars
// from here, so they round them alike. No dependencies: the .cu files
// include it.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_OPTIMIZERSCALARS_H
#define MD_RUNTIME_CORE_OPTIMIZERSCALARS_H

#include <cmath>
#include <cstdint>

namespace md::runtime {

/// One AdamW step's scalars: p = param * decay, m' = beta1 * m +
/// oneMinusBeta1 * g, v' = beta2 * v + oneMinusBeta2 * g * g,
/// param' = p - stepSize * (m' / (sqrt(v') / bc2Sqrt + eps)).
struct AdamWScalars {
  float decay, beta1, oneMinusBeta1, beta2, oneMinusBeta2, stepSize, bc2Sqrt,
      eps;
};

/// The scalars of one AdamW step of `args` (an AdamWArgs, Backend.h: a
/// template only so that this header includes nothing the .cu files cannot
/// take).
template <typename Args> AdamWScalars adamwScalars(const Args &args) {
  const double lr = args.lr, step = double(args.step); // step is 1-based
  const double bc1 = 1.0 - std::pow(args.beta1, step);
  const double bc2 = 1.0 - std::pow(args.beta2, step);
  AdamWScalars s;
  s.decay = float(1.0 - lr * args.weightDecay);
  s.beta1 = float(args.beta1);
  s.oneMinusBeta1 = float(1.0 - args.beta1);
  s.beta2 = float(args.beta2);
  s.oneMinusBeta2 = float(1.0 - args.beta2);
  s.stepSize = float(lr / bc1);
  s.bc2Sqrt = float(std::sqrt(bc2));
  s.eps = float(args.eps);
  return s;
}

/// One SGD step's scalars and switches: g += weightDecay * param when
/// applyDecay; with useMomentum buf' = firstStep ? g : momentum * buf +
/// oneMinusDampening * g and g = nesterov ? g + momentum * buf' : buf';
/// param' = param - lr * g.
struct SgdScalars {
  float lr, weightDecay, momentum, oneMinusDampening;
  bool applyDecay, useMomentum, firstStep, nesterov;
};

/// The scalars of one SGD step of `args` (an SgdArgs, Backend.h), a
/// template as adamwScalars.
template <typename Args> SgdScalars sgdScalars(const Args &args) {
  SgdScalars s;
  s.lr = args.lr;
  s.weightDecay = float(args.weightDecay);
  s.momentum = float(args.momentum);
  s.oneMinusDampening = float(1.0 - args.dampening);
  s.applyDecay = args.weightDecay != 0;
  s.useMomentum = args.momentum > 0;
  s.firstStep = args.step == 1; // step is 1-based
  s.nesterov = args.nesterov;
  return s;
}

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_OPTIMIZERSCALARS_H
