//===- Optimizer.cpp - AdamW, SGD, global norm and clipping ---------------===//
//
// The updates follow torch.optim.AdamW / torch.optim.SGD (single-tensor,
// foreach=False paths) operation by operation, so that a parameter trained
// here and in PyTorch agrees to the last bit or two. As in PyTorch, the
// per-step scalars (bias corrections, step size, 1 - lr * wd) are computed
// in double, the way Python floats are, and rounded to f32 once; every
// per-element operation is f32. The update may run in place (new* == the
// operands).
//
//===----------------------------------------------------------------------===//

#include <cmath>

#include "runtime/core/OpChecks.h"
#include "runtime/core/OptimizerScalars.h"
#include "runtime/core/Status.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Storage.h"

namespace md::cpu {

using namespace md::runtime;

// One AdamW step (torch.optim.AdamW, amsgrad=False, maximize=False):
//   p      = param * (1 - lr * weight_decay)       param.mul_(1 - lr * wd)
//   m'     = beta1 * m + (1 - beta1) * g
//   v'     = beta2 * v + (1 - beta2) * g * g        v.mul_(b2).addcmul_(g, g, 1 - b2)
//   bc1    = 1 - beta1^step,  bc2 = 1 - beta2^step
//   denom  = sqrt(v') / sqrt(bc2) + eps
//   param' = p - (lr / bc1) * (m' / denom)         param.addcdiv_(m', denom, -lr / bc1)
// PyTorch writes the m update as m.lerp_(g, 1 - beta1); the dialect (and
// this kernel) use the beta1 * m + (1 - beta1) * g form it stands for,
// which can differ from lerp's rounding in the last bit of m.
absl::Status CpuBackend::adamwUpdate(const AdamWArgs &args) {
  MD_RETURN_IF_ERROR(checkAdamW(args));
  F32In param(args.param), grad(args.grad);
  const float *m = args.m.as<const float>(), *v = args.v.as<const float>();
  F32Out newParam(args.newParam);
  float *newM = args.newM.as<float>(), *newV = args.newV.as<float>();

  const AdamWScalars s = adamwScalars(args);

  int64_t n = args.param.numel();
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    float p = param[i] * s.decay;
    float mi = s.beta1 * m[i] + s.oneMinusBeta1 * g;
    float vi = s.beta2 * v[i] + s.oneMinusBeta2 * g * g;
    float denom = std::sqrt(vi) / s.bc2Sqrt + s.eps;
    newParam[i] = p - s.stepSize * (mi / denom);
    newM[i] = mi;
    newV[i] = vi;
  }
  newParam.store();
  return absl::OkStatus();
}

// One SGD step (torch.optim.SGD, maximize=False):
//   g = g + weight_decay * param                     when weight_decay != 0
//   buf' = step == 1 ? g : momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf' : buf'        when momentum > 0
//   param' = param - lr * g
absl::Status CpuBackend::sgdUpdate(const SgdArgs &args) {
  MD_RETURN_IF_ERROR(checkSgd(args));
  F32In param(args.param), grad(args.grad);
  F32Out newParam(args.newParam);
  const SgdScalars s = sgdScalars(args);
  const float *buf =
      s.useMomentum ? args.momentumBuffer->as<const float>() : nullptr;
  float *newBuf = s.useMomentum ? args.newMomentumBuffer->as<float>() : nullptr;

  int64_t n = args.param.numel();
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (s.applyDecay)
      g = g + s.weightDecay * param[i];
    if (s.useMomentum) {
      float b = s.firstStep ? g : s.momentum * buf[i] + s.oneMinusDampening * g;
      newBuf[i] = b;
      g = s.nesterov ? g + s.momentum * b : b;
    }
    newParam[i] = param[i] - s.lr * g;
  }
  newParam.store();
  return absl::OkStatus();
}

// sqrt(sum of x^2) over every element of every input, inputs in order and
// elements in order, accumulated in f64 (each square of an f32 is exact in
// f64) and rounded to f32 once.
absl::Status CpuBackend::globalNorm(const GlobalNormArgs &args) {
  MD_RETURN_IF_ERROR(checkGlobalNorm(args));
  double sum = 0;
  for (const TensorRef &t : args.inputs) {
    F32In x(t);
    int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i)
      sum += double(x[i]) * double(x[i]);
  }
  *args.out.as<float>() = float(args.squared ? sum : std::sqrt(sum));
  return absl::OkStatus();
}

// torch.nn.utils.clip_grad_norm_ given the total norm, in f32:
//   scale = min(1, max_norm / (norm + 1e-6));  g' = g * scale
// A NaN norm gives a NaN scale (torch.clamp keeps NaN), so the NaN reaches
// the gradients instead of being clipped away. (PyTorch itself evaluates
// max_norm / t as t.reciprocal() * max_norm, one rounding more than the
// dialect's division.)
absl::Status CpuBackend::clip(const ClipArgs &args) {
  MD_RETURN_IF_ERROR(checkClip(args));
  const float norm = *args.norm.as<const float>();
  float scale = float(args.maxNorm) / (norm + 1e-6f);
  if (scale > 1.0f)
    scale = 1.0f;
  for (size_t k = 0; k < args.grads.size(); ++k) {
    F32In g(args.grads[k]);
    F32Out out(args.outs[k]);
    int64_t n = args.grads[k].numel();
    for (int64_t i = 0; i < n; ++i)
      out[i] = g[i] * scale;
    out.store();
  }
  return absl::OkStatus();
}

} // namespace md::cpu
