//===- Matmul.cpp - md.matmul, md.matmul_gelu and md.matmul_grad ---------===//
//
// Every product is a GEMM (Gemm.h) on the operands as they are stored: the
// library's 16-bit GEMM where gemmPaths() chose it for their type, else
// the f32 GEMM on operands widened a block at a time (f32 accumulation
// either way; the products of bf16 values are exact in f32, so the two
// differ only in the order of the sums). Results are rounded once at the
// end. A batched product is a loop of GEMMs in batch order; when b is
// shared and a is not transposed the batch folds into M and the whole
// product is a single GEMM. The weight gradient of a shared b sums over the
// batch by accumulating the GEMMs (beta = 1) in batch order, so the sum has
// a fixed order.
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

/// The operands of one op's GEMMs, as they are stored: Gemm.h's gemm runs
/// them on the library's 16-bit GEMM or widens them in blocks, whichever
/// gemmPaths() chose for their type.
class GemmOperands {
public:
  GemmOperands(const char *kernel,
               std::initializer_list<const TensorRef *> tensors)
      : kernel_(kernel), tensors_(tensors) {}

  /// Operand i from element `offset` on, with leading dim `ld`.
  GemmOperand at(int i, int64_t offset, int64_t ld) const {
    const TensorRef &t = *tensors_[i];
    return {t.dtype,
            static_cast<const char *>(t.data) + offset * dtypeSize(t.dtype),
            ld};
  }
  /// Elements [index, index + n) of operand i, as f32, into `out`.
  void values(int i, int64_t index, int64_t n, float *out) const {
    const TensorRef &t = *tensors_[i];
    toF32(t.dtype,
          static_cast<const char *>(t.data) + index * dtypeSize(t.dtype), out,
          n);
  }

  /// Gemm.h's gemm on operands from at().
  absl::Status gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                    float alpha, const GemmOperand &a, const GemmOperand &b,
                    float beta, float *c, int64_t ldc) const {
    return cpu::gemm(kernel_, ta, tb, m, n, k, alpha, a, b, beta, c, ldc);
  }

private:
  const char *kernel_;
  std::vector<const TensorRef *> tensors_;
};

} // namespace

absl::Status CpuBackend::matmul(const MatmulArgs &args) {
  MD_ASSIGN_OR_RETURN(MatmulDims d, checkMatmul(args));
  MD_RETURN_IF_ERROR(checkBlasRange("matmul", d));
  const GemmOperands ops("matmul", {&args.a, &args.b});
  enum { A, B };
  F32Out out(args.out);
  const bool ta = args.transposeA, tb = args.transposeB;
  // Row-major leading dims: a is [m, k] ([k, m] with ta), b [k, n] ([n, k]).
  int64_t lda = ta ? d.m : d.k, ldb = tb ? d.k : d.n;
  if (!d.batchedB && !ta) {
    MD_RETURN_IF_ERROR(ops.gemm(false, tb, d.batch * d.m, d.n, d.k, 1.0f,
                                ops.at(A, 0, lda), ops.at(B, 0, ldb), 0.0f,
                                out.data(), d.n));
  } else {
    for (int64_t i = 0; i < d.batch; ++i)
      MD_RETURN_IF_ERROR(ops.gemm(
          ta, tb, d.m, d.n, d.k, 1.0f, ops.at(A, i * d.m * d.k, lda),
          ops.at(B, d.batchedB ? i * d.k * d.n : 0, ldb), 0.0f,
          out.data() + i * d.m * d.n, d.n));
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
  const GemmOperands ops("matmul_grad", {&args.dy, &args.a, &args.b});
  enum { DY, A, B };
  F32Out da(args.da), db(args.db);
  const bool ta = args.transposeA, tb = args.transposeB;
  const int64_t m = d.m, n = d.n, k = d.k;
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;

  // One [m, k] x [k, n] entry of the batch: da for it, and its db
  // contribution (accumulated when b is shared). dyE's leading dim is n,
  // aE's lda, bE's ldb.
  auto entry = [&](int64_t rows, const GemmOperand &dyE, const GemmOperand &aE,
                   const GemmOperand &bE, float *daE, float *dbE,
                   float dbBeta) -> absl::Status {
    if (!ta)
      MD_RETURN_IF_ERROR(
          ops.gemm(false, !tb, rows, k, n, 1.0f, dyE, bE, 0.0f, daE, k));
    else
      MD_RETURN_IF_ERROR(
          ops.gemm(tb, true, k, rows, n, 1.0f, bE, dyE, 0.0f, daE, rows));
    if (!tb)
      return ops.gemm(!ta, false, k, n, rows, 1.0f, aE, dyE, dbBeta, dbE, n);
    return ops.gemm(true, ta, n, k, rows, 1.0f, dyE, aE, dbBeta, dbE, k);
  };

  if (!d.batchedB && !ta) {
    // The batch folds into M: a is [batch * m, k] rows, dy [batch * m, n].
    MD_RETURN_IF_ERROR(entry(d.batch * m, ops.at(DY, 0, n), ops.at(A, 0, lda),
                             ops.at(B, 0, ldb), da.data(), db.data(), 0.0f));
  } else {
    if (!d.batchedB && d.batch == 0)
      std::fill(db.data(), db.data() + k * n, 0.0f);
    for (int64_t i = 0; i < d.batch; ++i) {
      int64_t bOff = d.batchedB ? i * k * n : 0;
      float dbBeta = (!d.batchedB && i > 0) ? 1.0f : 0.0f;
      MD_RETURN_IF_ERROR(entry(m, ops.at(DY, i * m * n, n),
                               ops.at(A, i * m * k, lda),
                               ops.at(B, bOff, ldb), da.data() + i * m * k,
                               db.data() + bOff, dbBeta));
    }
  }
  if (args.dbias) {
    // Column sums of dy over every row, in row order, in f64.
    std::vector<double> acc(n, 0.0);
    std::vector<float> row(n);
    for (int64_t r = 0; r < d.batch * m; ++r) {
      ops.values(DY, r * n, n, row.data());
      for (int64_t j = 0; j < n; ++j)
        acc[j] += row[j];
    }
    storeSums(*args.dbias, acc);
  }
  da.store();
  db.store();
  return absl::OkStatus();
}

} // namespace md::cpu
