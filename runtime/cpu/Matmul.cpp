//===- Matmul.cpp - md.matmul, md.matmul_gelu and md.matmul_grad ---------===//
//
// Every product is a GEMM (Gemm.h): when every operand of the op is bf16
// and the library has a bf16 GEMM, on the bf16 data as it is (f32
// accumulation; the products of bf16 values are exact in f32, so this is
// the f32 product of the widened values up to the order of the sums);
// otherwise an sgemm on f32 data (bf16/f16 operands widened first). Results
// are rounded once at the end. A batched
// product is a loop of sgemms in batch order; when b is shared and a is not
// transposed the batch folds into M and the whole product is a single sgemm.
// The weight gradient of a shared b sums over the batch by accumulating the
// sgemms (beta = 1) in batch order, so the sum has a fixed order.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/core/NumberFormat.h"
#include "runtime/core/OpChecks.h"
#include "runtime/core/Status.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/Storage.h"

namespace md::cpu {

using namespace md::runtime;

namespace {

/// cblas takes int dims: refuse products that do not fit rather than
/// truncate them.
absl::Status checkBlasRange(const char *op, const MatmulDims &d) {
  int64_t rows = d.batchedB ? d.m : d.batch * d.m;
  for (int64_t v : {rows, d.m, d.n, d.k})
    if (v > INT_MAX)
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: dim %d exceeds the BLAS int range", op, v));
  return absl::OkStatus();
}

/// The operands of one op's GEMMs: all bf16 and passed as they are
/// (gemmBf16), or all f32 (bf16/f16 ones widened into copies).
class GemmOperands {
public:
  GemmOperands(std::initializer_list<const TensorRef *> tensors) {
    bf16_ = haveGemmBf16();
    for (const TensorRef *t : tensors)
      bf16_ = bf16_ && t->dtype == DType::bf16;
    for (const TensorRef *t : tensors) {
      if (bf16_)
        raw_.push_back(t->as<const uint16_t>());
      else
        f32_.emplace_back(*t);
    }
  }

  /// Operand i from element `offset` on.
  const void *at(int i, int64_t offset) const {
    if (bf16_)
      return raw_[i] + offset;
    return f32_[i].data() + offset;
  }
  /// Element `index` of operand i, as f32.
  float value(int i, int64_t index) const {
    return bf16_ ? runtime::bf16ToF32(raw_[i][index]) : f32_[i][index];
  }

  /// sgemm's contract on operands from at().
  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
            const void *a, int64_t lda, const void *b, int64_t ldb, float beta,
            float *c, int64_t ldc) const {
    if (bf16_)
      gemmBf16(ta, tb, m, n, k, alpha, static_cast<const uint16_t *>(a), lda,
               static_cast<const uint16_t *>(b), ldb, beta, c, ldc);
    else
      sgemm(ta, tb, m, n, k, alpha, static_cast<const float *>(a), lda,
            static_cast<const float *>(b), ldb, beta, c, ldc);
  }

private:
  bool bf16_ = false;
  std::vector<const uint16_t *> raw_;
  std::vector<F32In> f32_;
};

} // namespace

absl::Status CpuBackend::matmul(const MatmulArgs &args) {
  MD_ASSIGN_OR_RETURN(MatmulDims d, checkMatmul(args));
  MD_RETURN_IF_ERROR(checkBlasRange("matmul", d));
  const GemmOperands ops({&args.a, &args.b});
  enum { A, B };
  F32Out out(args.out);
  const bool ta = args.transposeA, tb = args.transposeB;
  // Row-major leading dims: a is [m, k] ([k, m] with ta), b [k, n] ([n, k]).
  int64_t lda = ta ? d.m : d.k, ldb = tb ? d.k : d.n;
  if (!d.batchedB && !ta) {
    ops.gemm(false, tb, d.batch * d.m, d.n, d.k, 1.0f, ops.at(A, 0), lda,
             ops.at(B, 0), ldb, 0.0f, out.data(), d.n);
  } else {
    for (int64_t i = 0; i < d.batch; ++i)
      ops.gemm(ta, tb, d.m, d.n, d.k, 1.0f, ops.at(A, i * d.m * d.k), lda,
               ops.at(B, d.batchedB ? i * d.k * d.n : 0), ldb, 0.0f,
               out.data() + i * d.m * d.n, d.n);
  }
  if (args.bias) {
    F32In bias(*args.bias);
    float *o = out.data();
    for (int64_t r = 0; r < d.batch * d.m; ++r)
      for (int64_t j = 0; j < d.n; ++j)
        o[r * d.n + j] += bias[j];
  }
  out.store();
  return absl::OkStatus();
}

// md.matmul into pre, then md.gelu of pre into out: the same GEMM (and
// bias) and the same vectorised GELU as the two unfused ops, so the bits
// are theirs; what the fusion saves on the CPU is the plan's separate
// instruction and its dispatch.
absl::Status CpuBackend::matmulGelu(const MatmulGeluArgs &args) {
  MD_RETURN_IF_ERROR(checkMatmulGelu(args).status());
  return matmulThenGelu(args);
}

// With y = op_a(a) op_b(b):  d op_a(a) = dy op_b(b)^T,  d op_b(b) = op_a(a)^T
// dy, and da, db are those or their transposes. Written out per flag:
//   da = dy b^T (-,-)   dy b (-,tb)   b dy^T (ta,-)   b^T dy^T (ta,tb)
//   db = a^T dy (-,-)   dy^T a (-,tb) a dy (ta,-)     dy^T a^T (ta,tb)
absl::Status CpuBackend::matmulGrad(const MatmulGradArgs &args) {
  MD_ASSIGN_OR_RETURN(MatmulDims d, checkMatmulGrad(args));
  MD_RETURN_IF_ERROR(checkBlasRange("matmul_grad", d));
  const GemmOperands ops({&args.dy, &args.a, &args.b});
  enum { DY, A, B };
  F32Out da(args.da), db(args.db);
  const bool ta = args.transposeA, tb = args.transposeB;
  const int64_t m = d.m, n = d.n, k = d.k;
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;

  // One [m, k] x [k, n] entry of the batch: da for it, and its db
  // contribution (accumulated when b is shared).
  auto entry = [&](int64_t rows, const void *dyE, const void *aE,
                   const void *bE, float *daE, float *dbE, float dbBeta) {
    if (!ta)
      ops.gemm(false, !tb, rows, k, n, 1.0f, dyE, n, bE, ldb, 0.0f, daE, k);
    else
      ops.gemm(tb, true, k, rows, n, 1.0f, bE, ldb, dyE, n, 0.0f, daE, rows);
    if (!tb)
      ops.gemm(!ta, false, k, n, rows, 1.0f, aE, lda, dyE, n, dbBeta, dbE, n);
    else
      ops.gemm(true, ta, n, k, rows, 1.0f, dyE, n, aE, lda, dbBeta, dbE, k);
  };

  if (!d.batchedB && !ta) {
    // The batch folds into M: a is [batch * m, k] rows, dy [batch * m, n].
    entry(d.batch * m, ops.at(DY, 0), ops.at(A, 0), ops.at(B, 0), da.data(),
          db.data(), 0.0f);
  } else {
    if (!d.batchedB && d.batch == 0)
      std::fill(db.data(), db.data() + k * n, 0.0f);
    for (int64_t i = 0; i < d.batch; ++i) {
      int64_t bOff = d.batchedB ? i * k * n : 0;
      float dbBeta = (!d.batchedB && i > 0) ? 1.0f : 0.0f;
      entry(m, ops.at(DY, i * m * n), ops.at(A, i * m * k), ops.at(B, bOff),
            da.data() + i * m * k, db.data() + bOff, dbBeta);
    }
  }
  if (args.dbias) {
    // Column sums of dy over every row, in row order, in f64.
    std::vector<double> acc(n, 0.0);
    for (int64_t r = 0; r < d.batch * m; ++r)
      for (int64_t j = 0; j < n; ++j)
        acc[j] += ops.value(DY, r * n + j);
    storeSums(*args.dbias, acc);
  }
  da.store();
  db.store();
  return absl::OkStatus();
}

} // namespace md::cpu
