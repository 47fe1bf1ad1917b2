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

/// `step` is 1-based.
inline AdamWScalars adamwScalars(double lr, int64_t step, double beta1,
                                 double beta2, double eps, double weightDecay) {
  const double bc1 = 1.0 - std::pow(beta1, double(step));
  const double bc2 = 1.0 - std::pow(beta2, double(step));
  AdamWScalars s;
  s.decay = float(1.0 - lr * weightDecay);
  s.beta1 = float(beta1);
  s.oneMinusBeta1 = float(1.0 - beta1);
  s.beta2 = float(beta2);
  s.oneMinusBeta2 = float(1.0 - beta2);
  s.stepSize = float(lr / bc1);
  s.bc2Sqrt = float(std::sqrt(bc2));
  s.eps = float(eps);
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

/// `step` is 1-based.
inline SgdScalars sgdScalars(float lr, int64_t step, double momentum,
                             double dampening, double weightDecay,
                             bool nesterov) {
  SgdScalars s;
  s.lr = lr;
  s.weightDecay = float(weightDecay);
  s.momentum = float(momentum);
  s.oneMinusDampening = float(1.0 - dampening);
  s.applyDecay = weightDecay != 0;
  s.useMomentum = momentum > 0;
  s.firstStep = step == 1;
  s.nesterov = nesterov;
  return s;
}

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_OPTIMIZERSCALARS_H
