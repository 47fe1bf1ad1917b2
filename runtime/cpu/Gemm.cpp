//===- Gemm.cpp - cblas_sgemm, or loops where there is no BLAS ------------===//

#include "runtime/cpu/Gemm.h"

#include <vector>

#if MD_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace md::cpu {

void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, float beta, float *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  // BLAS libraries disagree on k = 0 and refuse leading dims of 0; the
  // answer is just beta * C.
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
#if MD_HAVE_OPENBLAS
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), alpha,
              a, int(lda), b, int(ldb), beta, c, int(ldc));
#else
  // i-p-j order: the inner loop runs along rows of B and C.
  std::vector<float> row(n);
  for (int64_t i = 0; i < m; ++i) {
    std::fill(row.begin(), row.end(), 0.0f);
    for (int64_t p = 0; p < k; ++p) {
      float aip = transA ? a[p * lda + i] : a[i * lda + p];
      for (int64_t j = 0; j < n; ++j)
        row[j] += aip * (transB ? b[j * ldb + p] : b[p * ldb + j]);
    }
    for (int64_t j = 0; j < n; ++j)
      c[i * ldc + j] = alpha * row[j] +
                       (beta == 0.0f ? 0.0f : beta * c[i * ldc + j]);
  }
#endif
}

void setBlasThreads(int threads) {
#if MD_HAVE_OPENBLAS
  openblas_set_num_threads(threads);
#else
  (void)threads;
#endif
}

const char *blasName() {
#if MD_HAVE_OPENBLAS
  return openblas_get_config();
#else
  return "none (reference loops)";
#endif
}

} // namespace md::cpu
