//===- Rows.h - softmax along one row, for the CPU kernels -*- C++ -*-===//
//
// Softmax (its own op), attention's probabilities and their gradients all
// normalise rows the same way, and the CUDA kernels mirror this arithmetic,
// so it is written once: the maximum and the exponentials in f32 (VecExp),
// their sum and the gradient's dot product in f64, each result rounded once.
// A row is n elements `stride` apart.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CPU_ROWS_H
#define MD_RUNTIME_CPU_ROWS_H

#include <cmath>
#include <cstdint>
#include <limits>

#include "runtime/cpu/VecMath.h"

namespace md::cpu {

/// The f64 sum of f(j) for j in [0, n): term j goes to partial sum j mod 4
/// and the four are added in order at the end. A fixed order, so the same
/// bits on every machine, without one chain of dependent additions (an f64
/// add waits for the one before it: four chains run four times as fast).
template <typename F> inline double laneSum(int64_t n, F f) {
  double s[4] = {};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    s[0] += f(j);
    s[1] += f(j + 1);
    s[2] += f(j + 2);
    s[3] += f(j + 3);
  }
  for (int l = 0; j < n; ++j, ++l)
    s[l] += f(j);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

/// The largest of a row (NaNs ignored, as fmax does; a NaN still reaches
/// the result through exp). Eight running maxima, combined at the end:
/// max is exact in any order, so this is the row's maximum, found without
/// a dependency from each element to the next.
inline float rowMax(const float *x, int64_t n, int64_t stride = 1) {
  constexpr int kLanes = 8;
  float m[kLanes];
  for (float &v : m)
    v = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const float v = x[(j + k) * stride];
      m[k] = v > m[k] ? v : m[k];
    }
  for (; j < n; ++j)
    m[0] = x[j * stride] > m[0] ? x[j * stride] : m[0];
  float r = m[0];
  for (int k = 1; k < kLanes; ++k)
    r = m[k] > r ? m[k] : r;
  return r;
}

/// y = exp(x - m) for a row, in chunks through VecExp; returns the sum of
/// the exponentials in f64: element j goes to partial sum j mod 4, and the
/// four are added in order at the end (a fixed order, so the same bits on
/// every machine, without one long chain of dependent additions). y may be
/// x; y = nullptr only sums.
inline double expRow(const float *x, float *y, int64_t n, float m,
                     int64_t stride = 1) {
  constexpr int64_t kChunk = 64;
  constexpr int kLanes = 4;
  float e[kChunk];
  double sum[kLanes] = {};
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t c = n - j0 < kChunk ? n - j0 : kChunk;
    for (int64_t k = 0; k < c; ++k)
      e[k] = x[(j0 + k) * stride] - m;
    VecExp(e, e, c);
    // kChunk is a multiple of kLanes, so element j0 + k adds to lane k % 4.
    int64_t k = 0;
    for (; k + kLanes <= c; k += kLanes)
      for (int l = 0; l < kLanes; ++l)
        sum[l] += e[k + l];
    for (int l = 0; k < c; ++k, ++l)
      sum[l] += e[k];
    if (y)
      for (int64_t q = 0; q < c; ++q)
        y[(j0 + q) * stride] = e[q];
  }
  return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

/// y = exp(x - max(x)) / sum(exp(x - max(x))). y may be x.
inline void softmaxRow(const float *x, float *y, int64_t n,
                       int64_t stride = 1) {
  const double sum = expRow(x, y, n, rowMax(x, n, stride), stride);
  for (int64_t j = 0; j < n; ++j)
    y[j * stride] = float(y[j * stride] / sum);
}

/// dx = y * (dy - sum(dy * y)) for a row y = softmax(x). dx may be dy.
inline void softmaxGradRow(const float *dy, const float *y, float *dx,
                           int64_t n, int64_t stride = 1) {
  const double dot = laneSum(n, [&](int64_t j) {
    return double(dy[j * stride]) * double(y[j * stride]);
  });
  const float dotF = float(dot);
  for (int64_t j = 0; j < n; ++j)
    dx[j * stride] = y[j * stride] * (dy[j * stride] - dotF);
}

} // namespace md::cpu

#endif // MD_RUNTIME_CPU_ROWS_H
