//===- Norms.cpp - layer norm, rms norm, batch norm and their gradients ---===//
//
// Statistics (means, variances, the sums of the gradients) are accumulated
// in f64 (a row's sums in four interleaved partial sums, Rows.h's laneSum)
// and rounded to f32 once; the per-element arithmetic is f32. The
// variance is computed in two passes (mean first, then the mean of squared
// deviations), which stays accurate when |mean| >> std, where the one-pass
// E[x^2] - E[x]^2 cancels. The gradients recompute the statistics exactly
// as the forward does, so a forward and its gradient see the same mean and
// 1/std bit for bit. Layer and rms norm and their gradients read and
// write bf16 rows through a row-sized buffer instead of whole-tensor f32
// copies (Storage.h).
//
//===----------------------------------------------------------------------===//

#include <cmath>
#include <optional>
#include <vector>

#include "runtime/core/OpChecks.h"
#include "runtime/core/Status.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Rows.h"
#include "runtime/cpu/Storage.h"

namespace md::cpu {

using namespace md::runtime;

namespace {

struct RowStats {
  float mean = 0, rstd = 0;
};

/// Mean and 1 / sqrt(biased var + eps) of one row of d elements.
RowStats layerNormStats(const float *x, int64_t d, double eps) {
  const double mean =
      laneSum(d, [&](int64_t j) { return double(x[j]); }) / double(d);
  const double var = laneSum(d,
                             [&](int64_t j) {
                               double dev = x[j] - mean;
                               return dev * dev;
                             }) /
                     double(d);
  return {float(mean), float(1.0 / std::sqrt(var + eps))};
}

/// 1 / sqrt(mean(x^2) + eps) of one row.
float rmsNormScale(const float *x, int64_t d, double eps) {
  const double sq =
      laneSum(d, [&](int64_t j) { return double(x[j]) * double(x[j]); });
  return float(1.0 / std::sqrt(sq / double(d) + eps));
}

/// y = (x - mean) * rstd * gamma (+ beta), per row of the last dim: layer
/// norm, and with `rms` rms norm as the same with mean 0 and no beta
/// (x - 0 is x exactly, so the bits of x * r * gamma).
void normRows(const TensorRef &xIn, const TensorRef &gammaIn,
              const std::optional<TensorRef> &betaIn, const TensorRef &outT,
              const RowDims &dims, double eps, bool rms) {
  F32In gamma(gammaIn);
  std::optional<F32In> betaF32;
  const float *beta = nullptr;
  if (betaIn)
    beta = betaF32.emplace(*betaIn).data();
  const int64_t d = dims.d;
  // A row at a time (Storage.h's chunk views, a chunk being a row): a bf16
  // row is widened into xb and its result rounded from yb.
  std::vector<float> xb(d), yb(d);
  for (int64_t r = 0; r < dims.rows; ++r) {
    const float *xr = chunkIn(xIn, r * d, d, xb.data());
    float *yr = chunkOut(outT, r * d, yb.data());
    RowStats s = rms ? RowStats{0.0f, rmsNormScale(xr, d, eps)}
                     : layerNormStats(xr, d, eps);
    for (int64_t j = 0; j < d; ++j) {
      float y = (xr[j] - s.mean) * s.rstd * gamma[j];
      yr[j] = beta ? y + beta[j] : y;
    }
    chunkStore(outT, r * d, d, yr);
  }
}

} // namespace

// y = (x - mean) * rstd * gamma + beta, per row of the last dim.
absl::Status CpuBackend::layerNorm(const LayerNormArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims dims, checkLayerNorm(args));
  normRows(args.x, args.gamma, args.beta, args.out, dims, args.eps,
           /*rms=*/false);
  return absl::OkStatus();
}

// With xhat = (x - mean) * rstd and g = dy * gamma, per row:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
// and over the rows: dgamma = sum(dy * xhat), dbeta = sum(dy).
absl::Status CpuBackend::layerNormGrad(const LayerNormGradArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims dims, checkLayerNormGrad(args));
  F32In gamma(args.gamma);
  const int64_t d = dims.d;
  std::vector<double> dgamma(d, 0.0), dbeta(d, 0.0);
  std::vector<float> xhat(d), g(d), xb(d), dyb(d), dxb(d);
  for (int64_t r = 0; r < dims.rows; ++r) {
    const float *xr = chunkIn(args.x, r * d, d, xb.data()),
                *dyr = chunkIn(args.dy, r * d, d, dyb.data());
    RowStats s = layerNormStats(xr, d, args.eps);
    for (int64_t j = 0; j < d; ++j) {
      xhat[j] = (xr[j] - s.mean) * s.rstd;
      g[j] = dyr[j] * gamma[j];
      dgamma[j] += double(dyr[j]) * double(xhat[j]);
      dbeta[j] += dyr[j];
    }
    const double sumG = laneSum(d, [&](int64_t j) { return double(g[j]); });
    const double sumGX =
        laneSum(d, [&](int64_t j) { return double(g[j]) * double(xhat[j]); });
    float meanG = float(sumG / double(d)), meanGX = float(sumGX / double(d));
    float *dxr = chunkOut(args.dx, r * d, dxb.data());
    for (int64_t j = 0; j < d; ++j)
      dxr[j] = s.rstd * (g[j] - meanG - xhat[j] * meanGX);
    chunkStore(args.dx, r * d, d, dxr);
  }
  storeSums(args.dgamma, dgamma);
  if (args.dbeta)
    storeSums(*args.dbeta, dbeta);
  return absl::OkStatus();
}

// y = x * r * gamma with r = 1 / sqrt(mean(x^2) + eps).
absl::Status CpuBackend::rmsNorm(const RmsNormArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims dims, checkRmsNorm(args));
  normRows(args.x, args.gamma, std::nullopt, args.out, dims, args.eps,
           /*rms=*/true);
  return absl::OkStatus();
}

// With g = dy * gamma, per row: dx = r * g - x * r^3 * mean(g * x);
// over the rows: dgamma = sum(dy * x * r).
absl::Status CpuBackend::rmsNormGrad(const RmsNormGradArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims dims, checkRmsNormGrad(args));
  F32In gamma(args.gamma);
  const int64_t d = dims.d;
  std::vector<double> dgamma(d, 0.0);
  std::vector<float> xb(d), dyb(d), dxb(d);
  for (int64_t r = 0; r < dims.rows; ++r) {
    const float *xr = chunkIn(args.x, r * d, d, xb.data()),
                *dyr = chunkIn(args.dy, r * d, d, dyb.data());
    float s = rmsNormScale(xr, d, args.eps);
    for (int64_t j = 0; j < d; ++j)
      dgamma[j] += double(dyr[j] * xr[j] * s);
    const double sumGX = laneSum(d, [&](int64_t j) {
      return double(dyr[j] * gamma[j]) * double(xr[j]);
    });
    // r^3 * mean(g * x) in f64, rounded once.
    float c = float(double(s) * s * s * (sumGX / double(d)));
    float *dxr = chunkOut(args.dx, r * d, dxb.data());
    for (int64_t j = 0; j < d; ++j)
      dxr[j] = s * (dyr[j] * gamma[j]) - xr[j] * c;
    chunkStore(args.dx, r * d, d, dxr);
  }
  storeSums(args.dgamma, dgamma);
  return absl::OkStatus();
}

// Channels last: x is `rows` rows of C channels; statistics per channel
// over the rows. y = (x - mean) * invstd * gamma + beta.
absl::Status CpuBackend::batchNorm(const BatchNormArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims dims, checkBatchNorm(args));
  F32In x(args.x), gamma(args.gamma), beta(args.beta);
  const int64_t c = dims.d, rows = dims.rows;
  // Rows outer, channels inner: one pass over memory per statistic, and
  // each channel's sum still runs in row order.
  std::vector<double> sum(c, 0.0), sq(c, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c; ++j)
      sum[j] += x[r * c + j];
  std::vector<float> mean(c), invstd(c);
  std::vector<double> meanD(c);
  for (int64_t j = 0; j < c; ++j)
    meanD[j] = sum[j] / double(rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c; ++j) {
      double dev = x[r * c + j] - meanD[j];
      sq[j] += dev * dev;
    }
  for (int64_t j = 0; j < c; ++j) {
    mean[j] = float(meanD[j]);
    invstd[j] = float(1.0 / std::sqrt(sq[j] / double(rows) + args.eps));
  }
  F32Out out(args.out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c; ++j)
      out[r * c + j] =
          (x[r * c + j] - mean[j]) * invstd[j] * gamma[j] + beta[j];
  out.store();
  float *m = args.mean.as<float>(), *is = args.invstd.as<float>();
  for (int64_t j = 0; j < c; ++j) {
    m[j] = mean[j];
    is[j] = invstd[j];
  }
  return absl::OkStatus();
}

// With xhat = (x - mean) * invstd and n rows: dbeta = sum(dy),
// dgamma = sum(dy * xhat), dx = gamma * invstd * (dy - dbeta/n - xhat *
// dgamma/n).
absl::Status CpuBackend::batchNormGrad(const BatchNormGradArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims dims, checkBatchNormGrad(args));
  F32In dy(args.dy), x(args.x), gamma(args.gamma);
  const float *mean = args.mean.as<const float>();
  const float *invstd = args.invstd.as<const float>();
  const int64_t c = dims.d, rows = dims.rows;
  std::vector<double> dbeta(c, 0.0), dgamma(c, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c; ++j) {
      float xhat = (x[r * c + j] - mean[j]) * invstd[j];
      dbeta[j] += dy[r * c + j];
      dgamma[j] += double(dy[r * c + j]) * double(xhat);
    }
  std::vector<float> dbetaN(c), dgammaN(c);
  for (int64_t j = 0; j < c; ++j) {
    dbetaN[j] = float(dbeta[j] / double(rows));
    dgammaN[j] = float(dgamma[j] / double(rows));
  }
  F32Out dx(args.dx);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c; ++j) {
      float xhat = (x[r * c + j] - mean[j]) * invstd[j];
      dx[r * c + j] = gamma[j] * invstd[j] *
                      (dy[r * c + j] - dbetaN[j] - xhat * dgammaN[j]);
    }
  dx.store();
  storeSums(args.dgamma, dgamma);
  storeSums(args.dbeta, dbeta);
  return absl::OkStatus();
}

} // namespace md::cpu
