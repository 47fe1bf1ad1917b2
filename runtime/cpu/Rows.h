//===- Rows.h - softmax along one row, for the CPU kernels -*- C++ -*-===//
//
// Softmax (its own op), attention's probabilities and their gradients all
// normalise rows the same way, and the CUDA kernels mirror this arithmetic,
// so it is written once: the maximum and the exponentials in f32, their
// sum and the gradient's dot product in f64, each result rounded once.
// A row is n elements `stride` apart.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CPU_ROWS_H
#define MD_RUNTIME_CPU_ROWS_H

#include <cmath>
#include <cstdint>
#include <limits>

namespace md::cpu {

/// y = exp(x - max(x)) / sum(exp(x - max(x))). y may be x.
inline void softmaxRow(const float *x, float *y, int64_t n,
                       int64_t stride = 1) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j)
    m = std::fmax(m, x[j * stride]);
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    float e = std::exp(x[j * stride] - m);
    y[j * stride] = e;
    sum += e;
  }
  for (int64_t j = 0; j < n; ++j)
    y[j * stride] = float(y[j * stride] / sum);
}

/// dx = y * (dy - sum(dy * y)) for a row y = softmax(x). dx may be dy.
inline void softmaxGradRow(const float *dy, const float *y, float *dx,
                           int64_t n, int64_t stride = 1) {
  double dot = 0;
  for (int64_t j = 0; j < n; ++j)
    dot += double(dy[j * stride]) * double(y[j * stride]);
  const float dotF = float(dot);
  for (int64_t j = 0; j < n; ++j)
    dx[j * stride] = y[j * stride] * (dy[j * stride] - dotF);
}

} // namespace md::cpu

#endif // MD_RUNTIME_CPU_ROWS_H
