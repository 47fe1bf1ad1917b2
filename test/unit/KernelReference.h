//===- KernelReference.h - the md ops as naive f64 loops -*- C++ -*-===//
//
// Straight transcriptions of docs/dialect.md's formulas, in double and in
// the most obvious loop order. The kernel tests compare backends against
// them, and the gradient tests differentiate them numerically. Shapes are
// passed as the few sizes each op needs.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TEST_UNIT_KERNELREFERENCE_H
#define MD_TEST_UNIT_KERNELREFERENCE_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

namespace md::test::ref {

using Vec = std::vector<double>;

/// op_a(a) · op_b(b) + bias for `batch` products; b shared unless batchedB.
inline Vec matmul(const Vec &a, const Vec &b, const Vec *bias, int64_t batch,
                  int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                  bool batchedB) {
  Vec out(batch * m * n);
  for (int64_t e = 0; e < batch; ++e) {
    const double *ae = a.data() + e * m * k;
    const double *be = b.data() + (batchedB ? e * k * n : 0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += (ta ? ae[p * m + i] : ae[i * k + p]) *
               (tb ? be[j * k + p] : be[p * n + j]);
        out[(e * m + i) * n + j] = s + (bias ? (*bias)[j] : 0.0);
      }
  }
  return out;
}

/// Index of the element of `shape` (aligned at the last dim of `full`)
/// that full index `idx` reads under broadcasting.
inline int64_t broadcastIndex(const std::vector<int64_t> &idx,
                              const std::vector<int64_t> &full,
                              const std::vector<int64_t> &shape) {
  int64_t off = 0, lead = int64_t(full.size() - shape.size());
  for (size_t i = 0; i < shape.size(); ++i)
    off = off * shape[i] + (shape[i] == 1 ? 0 : idx[lead + i]);
  return off;
}

/// Calls f(multi-index, linear index) over a row-major shape.
template <typename F>
void forEachIndex(const std::vector<int64_t> &shape, F f) {
  int64_t total = 1;
  for (int64_t d : shape)
    total *= d;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t lin = 0; lin < total; ++lin) {
    f(idx, lin);
    for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
}

inline std::vector<int64_t> broadcastShape(const std::vector<int64_t> &a,
                                           const std::vector<int64_t> &b) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

/// op: 0 add, 1 sub, 2 mul, 3 div, 4 maximum, 5 minimum (runtime::BinaryOp's
/// order; maximum and minimum NaN when either operand is).
inline Vec binary(int op, const Vec &l, const std::vector<int64_t> &ls,
                  const Vec &r, const std::vector<int64_t> &rs) {
  std::vector<int64_t> full = broadcastShape(ls, rs);
  Vec out;
  forEachIndex(full, [&](const std::vector<int64_t> &idx, int64_t) {
    double a = l[broadcastIndex(idx, full, ls)];
    double b = r[broadcastIndex(idx, full, rs)];
    bool nan = std::isnan(a) || std::isnan(b);
    out.push_back(op == 0   ? a + b
                  : op == 1 ? a - b
                  : op == 2 ? a * b
                  : op == 3 ? a / b
                  : nan     ? std::nan("")
                  : op == 4 ? std::max(a, b)
                            : std::min(a, b));
  });
  return out;
}

inline double gelu(double x, bool approximate) {
  if (!approximate)
    return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

inline Vec layerNorm(const Vec &x, int64_t rows, int64_t d, const Vec &gamma,
                     const Vec *beta, double eps) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < d; ++j)
      mean += x[r * d + j] / d;
    for (int64_t j = 0; j < d; ++j)
      var += (x[r * d + j] - mean) * (x[r * d + j] - mean) / d;
    for (int64_t j = 0; j < d; ++j)
      y[r * d + j] = (x[r * d + j] - mean) / std::sqrt(var + eps) * gamma[j] +
                     (beta ? (*beta)[j] : 0.0);
  }
  return y;
}

inline Vec rmsNorm(const Vec &x, int64_t rows, int64_t d, const Vec &gamma,
                   double eps) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < d; ++j)
      ms += x[r * d + j] * x[r * d + j] / d;
    for (int64_t j = 0; j < d; ++j)
      y[r * d + j] = x[r * d + j] / std::sqrt(ms + eps) * gamma[j];
  }
  return y;
}

struct BatchNormOut {
  Vec y, mean, invstd;
};
inline BatchNormOut batchNorm(const Vec &x, int64_t rows, int64_t c,
                              const Vec &gamma, const Vec &beta, double eps) {
  BatchNormOut o{Vec(x.size()), Vec(c), Vec(c)};
  for (int64_t j = 0; j < c; ++j) {
    double mean = 0, var = 0;
    for (int64_t r = 0; r < rows; ++r)
      mean += x[r * c + j] / rows;
    for (int64_t r = 0; r < rows; ++r)
      var += (x[r * c + j] - mean) * (x[r * c + j] - mean) / rows;
    o.mean[j] = mean;
    o.invstd[j] = 1 / std::sqrt(var + eps);
    for (int64_t r = 0; r < rows; ++r)
      o.y[r * c + j] = (x[r * c + j] - mean) * o.invstd[j] * gamma[j] + beta[j];
  }
  return o;
}

/// Softmax of x seen as [outer, n, inner] along the middle dim.
inline Vec softmax(const Vec &x, int64_t outer, int64_t n, int64_t inner) {
  Vec y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < n; ++j)
        m = std::max(m, x[(o * n + j) * inner + i]);
      for (int64_t j = 0; j < n; ++j)
        s += std::exp(x[(o * n + j) * inner + i] - m);
      for (int64_t j = 0; j < n; ++j)
        y[(o * n + j) * inner + i] = std::exp(x[(o * n + j) * inner + i] - m) / s;
    }
  return y;
}

inline Vec causalAttention(const Vec &q, const Vec &k, const Vec &v,
                           int64_t batch, int64_t t, int64_t c, int64_t heads,
                           int64_t window = 0) {
  const int64_t d = c / heads;
  Vec out(q.size(), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < t; ++i) {
        const int64_t lo = window > 0 && i >= window ? i - window + 1 : 0;
        auto at = [&](const Vec &x, int64_t pos, int64_t ch) {
          return x[(b * t + pos) * c + h * d + ch];
        };
        Vec s(i + 1);
        double m = -INFINITY;
        for (int64_t j = lo; j <= i; ++j) {
          double dot = 0;
          for (int64_t ch = 0; ch < d; ++ch)
            dot += at(q, i, ch) * at(k, j, ch);
          s[j] = dot / std::sqrt(double(d));
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int64_t j = lo; j <= i; ++j)
          sum += std::exp(s[j] - m);
        for (int64_t ch = 0; ch < d; ++ch) {
          double o = 0;
          for (int64_t j = lo; j <= i; ++j)
            o += std::exp(s[j] - m) / sum * at(v, j, ch);
          out[(b * t + i) * c + h * d + ch] = o;
        }
      }
  return out;
}

/// The analytic f64 gradients of causal attention (row i sees the keys
/// (i - window, i] with a window, [0, i] without) for upstream dout, as
/// {dq, dk, dv}: dV_j = sum_i p_ij dO_i, dP_ij = dO_i . v_j,
/// dS_ij = p_ij (dP_ij - sum_k p_ik dP_ik), dQ_i = sum_j dS_ij k_j / sqrt(d),
/// dK_j = sum_i dS_ij q_i / sqrt(d).
inline std::vector<Vec> causalAttentionGrad(const Vec &q, const Vec &k,
                                            const Vec &v, const Vec &dout,
                                            int64_t batch, int64_t t, int64_t c,
                                            int64_t heads, int64_t window = 0) {
  const int64_t d = c / heads;
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<Vec> g(3, Vec(q.size(), 0.0));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < t; ++i) {
        const int64_t lo = window > 0 && i >= window ? i - window + 1 : 0;
        auto at = [&](int64_t pos, int64_t ch) {
          return (b * t + pos) * c + h * d + ch;
        };
        Vec p(i + 1), dp(i + 1);
        double m = -INFINITY, sum = 0, dsum = 0;
        for (int64_t j = lo; j <= i; ++j) {
          double s = 0;
          for (int64_t ch = 0; ch < d; ++ch)
            s += q[at(i, ch)] * k[at(j, ch)];
          p[j] = s * scale;
          m = std::max(m, p[j]);
        }
        for (int64_t j = lo; j <= i; ++j) {
          p[j] = std::exp(p[j] - m);
          sum += p[j];
        }
        for (int64_t j = lo; j <= i; ++j) {
          p[j] /= sum;
          for (int64_t ch = 0; ch < d; ++ch)
            dp[j] += dout[at(i, ch)] * v[at(j, ch)];
          dsum += p[j] * dp[j];
        }
        for (int64_t j = lo; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - dsum);
          for (int64_t ch = 0; ch < d; ++ch) {
            g[0][at(i, ch)] += ds * k[at(j, ch)] * scale;
            g[1][at(j, ch)] += ds * q[at(i, ch)] * scale;
            g[2][at(j, ch)] += p[j] * dout[at(i, ch)];
          }
        }
      }
  return g;
}

/// Mean cross-entropy; targets equal to ignore are skipped.
inline double crossEntropy(const Vec &logits, int64_t rows, int64_t classes,
                           const std::vector<int64_t> &targets,
                           std::optional<int64_t> ignore) {
  double total = 0;
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (ignore && targets[r] == *ignore)
      continue;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < classes; ++j)
      m = std::max(m, logits[r * classes + j]);
    for (int64_t j = 0; j < classes; ++j)
      s += std::exp(logits[r * classes + j] - m);
    total += m + std::log(s) - logits[r * classes + targets[r]];
    ++n;
  }
  return total / n;
}

/// Sum (or mean) of x over the dims flagged in `reduced`, keepdim layout.
inline Vec reduce(const Vec &x, const std::vector<int64_t> &shape,
                  const std::vector<bool> &reduced, bool mean) {
  std::vector<int64_t> outShape = shape;
  int64_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i)
    if (reduced[i]) {
      outShape[i] = 1;
      count *= shape[i];
    }
  int64_t outN = 1;
  for (int64_t d : outShape)
    outN *= d;
  Vec out(outN, 0.0);
  forEachIndex(shape, [&](const std::vector<int64_t> &idx, int64_t lin) {
    out[broadcastIndex(idx, shape, outShape)] += x[lin];
  });
  if (mean)
    for (double &o : out)
      o /= count;
  return out;
}

/// g summed down to `outShape` (which broadcasts to gShape).
inline Vec sumTo(const Vec &g, const std::vector<int64_t> &gShape,
                 const std::vector<int64_t> &outShape) {
  int64_t outN = 1;
  for (int64_t d : outShape)
    outN *= d;
  Vec out(outN, 0.0);
  forEachIndex(gShape, [&](const std::vector<int64_t> &idx, int64_t lin) {
    out[broadcastIndex(idx, gShape, outShape)] += g[lin];
  });
  return out;
}

/// The row-major linear index of multi-index `idx` in `shape`.
inline int64_t linearIndex(const std::vector<int64_t> &idx,
                           const std::vector<int64_t> &shape) {
  int64_t off = 0;
  for (size_t i = 0; i < shape.size(); ++i)
    off = off * shape[i] + idx[i];
  return off;
}

// The layout ops move elements of any type: T is double for the gradient
// tests, an element's bit pattern for the bitwise ones.

/// md.slice: x's elements start, start + step, ... (`count` of them) along
/// `axis`, every other dim whole.
template <typename T>
std::vector<T> slice(const std::vector<T> &x, const std::vector<int64_t> &shape,
                     int64_t axis, int64_t start, int64_t step, int64_t count) {
  std::vector<int64_t> outShape = shape;
  outShape[axis] = count;
  std::vector<T> out;
  forEachIndex(outShape, [&](const std::vector<int64_t> &idx, int64_t) {
    std::vector<int64_t> src = idx;
    src[axis] = start + idx[axis] * step;
    out.push_back(x[linearIndex(src, shape)]);
  });
  return out;
}

/// md.slice_grad: zeros of `shape`, with dy at the positions md.slice read.
template <typename T>
std::vector<T> sliceGrad(const std::vector<T> &dy,
                         const std::vector<int64_t> &shape, int64_t axis,
                         int64_t start, int64_t step, int64_t count) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<T> dx(n, T(0));
  std::vector<int64_t> dyShape = shape;
  dyShape[axis] = count;
  forEachIndex(dyShape, [&](const std::vector<int64_t> &idx, int64_t lin) {
    std::vector<int64_t> dst = idx;
    dst[axis] = start + idx[axis] * step;
    dx[linearIndex(dst, shape)] = dy[lin];
  });
  return dx;
}

/// md.concat: the inputs one after another along `axis`.
template <typename T>
std::vector<T> concat(const std::vector<std::vector<T>> &inputs,
                      const std::vector<std::vector<int64_t>> &shapes,
                      int64_t axis) {
  std::vector<int64_t> outShape = shapes[0];
  outShape[axis] = 0;
  for (const std::vector<int64_t> &s : shapes)
    outShape[axis] += s[axis];
  std::vector<T> out;
  forEachIndex(outShape, [&](const std::vector<int64_t> &idx, int64_t) {
    std::vector<int64_t> src = idx;
    size_t k = 0;
    while (src[axis] >= shapes[k][axis])
      src[axis] -= shapes[k++][axis];
    out.push_back(inputs[k][linearIndex(src, shapes[k])]);
  });
  return out;
}

/// md.expand: x broadcast (numpy's rules) to `outShape`.
template <typename T>
std::vector<T> expand(const std::vector<T> &x,
                      const std::vector<int64_t> &shape,
                      const std::vector<int64_t> &outShape) {
  std::vector<T> out;
  forEachIndex(outShape, [&](const std::vector<int64_t> &idx, int64_t) {
    out.push_back(x[broadcastIndex(idx, outShape, shape)]);
  });
  return out;
}

} // namespace md::test::ref

#endif // MD_TEST_UNIT_KERNELREFERENCE_H
