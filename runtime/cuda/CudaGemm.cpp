//===- CudaGemm.cpp - cuBLASLt GEMMs: matmul, matmul_gelu, matmul_grad ----===//
//
// GEMMs go through cuBLASLt in gemm(): row-major products are computed as
// their column-major transposes (C^T = op(B)^T op(A)^T), f32 compute for
// every input type (bf16 and f16 inputs accumulate in f32, f32 inputs are
// not rounded to TF32), the bias fused as the BIAS epilogue, and the
// heuristic's choice cached per shape, layout, types and pointer alignment.
// matmul, matmul_gelu (the GELU_AUX epilogue) and matmul_grad lower onto it.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackendImpl.h"

#include <algorithm>

#include "runtime/core/OpChecks.h"

namespace md::cuda {

//===----------------------------------------------------------------------===//
// GEMM
//===----------------------------------------------------------------------===//

namespace {

template <typename T, cublasStatus_t (*Destroy)(T)> struct LtHandle {
  T h = nullptr;
  ~LtHandle() {
    if (h)
      (void)Destroy(h);
  }
};

absl::Status setLayout(cublasLtMatrixLayout_t l, int64_t batch,
                       int64_t stride) {
  if (batch == 1)
    return absl::OkStatus();
  int32_t count = int32_t(batch);
  MD_LT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                         &count, sizeof count));
  MD_LT(cublasLtMatrixLayoutSetAttribute(
      l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  return absl::OkStatus();
}

} // namespace

// Row-major C[m, n] = op(A) op(B) is column-major C^T[n, m] =
// op(B)^T op(A)^T, and a row-major buffer read column-major is its
// transpose: so cuBLASLt's first operand is B's buffer with B's flag, the
// second A's buffer with A's flag, and the dims are (n, m, k).
absl::Status CudaBackend::gemm(const Gemm &g, Stream stream) {
  for (int64_t v : {g.m, g.n, g.k, g.batch})
    if (v > INT32_MAX)
      return absl::UnimplementedError(absl::StrFormat(
          "cuda backend: GEMM dim %d exceeds cuBLASLt's int32 range", v));
  cudaStream_t s = impl_->streams[stream.id];
  const cudaDataType_t in = cudaType(g.in), out = cudaType(g.out);
  LtHandle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> desc;
  MD_LT(cublasLtMatmulDescCreate(&desc.h, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opFirst = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opSecond = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  MD_LT(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSA,
                                       &opFirst, sizeof opFirst));
  MD_LT(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSB,
                                       &opSecond, sizeof opSecond));
  if (g.bias || g.geluAux) {
    cublasLtEpilogue_t epi =
        !g.geluAux ? CUBLASLT_EPILOGUE_BIAS
                   : (g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                             : CUBLASLT_EPILOGUE_GELU_AUX);
    MD_LT(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                         &epi, sizeof epi));
    if (g.bias)
      MD_LT(cublasLtMatmulDescSetAttribute(
          desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
  }
  if (g.geluAux) {
    // The aux matrix is the GELU's input in D's layout: column-major
    // [n, m] with leading dim auxLd, i.e. row-major [m, n] like C.
    MD_LT(cublasLtMatmulDescSetAttribute(
        desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux,
        sizeof g.aux));
    MD_LT(cublasLtMatmulDescSetAttribute(desc.h,
                                         CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                         &g.auxLd, sizeof g.auxLd));
  }
  LtHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> la, lb, lc;
  // First operand (B's buffer): stored [n, k] column-major without
  // transB, [k, n] with it.
  MD_LT(cublasLtMatrixLayoutCreate(&la.h, in, g.transB ? g.k : g.n,
                                   g.transB ? g.n : g.k, g.ldb));
  MD_LT(cublasLtMatrixLayoutCreate(&lb.h, in, g.transA ? g.m : g.k,
                                   g.transA ? g.k : g.m, g.lda));
  MD_LT(cublasLtMatrixLayoutCreate(&lc.h, out, g.n, g.m, g.ldc));
  MD_RETURN_IF_ERROR(setLayout(la.h, g.batch, g.strideB));
  MD_RETURN_IF_ERROR(setLayout(lb.h, g.batch, g.strideA));
  MD_RETURN_IF_ERROR(setLayout(lc.h, g.batch, g.strideC));

  const int64_t alB = alignmentOf(g.b), alA = alignmentOf(g.a),
                alC = alignmentOf(g.c), alBias = alignmentOf(g.bias);
  std::vector<int64_t> key = {g.in,
                              g.out,
                              g.transA,
                              g.transB,
                              g.m,
                              g.n,
                              g.k,
                              g.lda,
                              g.ldb,
                              g.ldc,
                              g.batch,
                              g.strideA,
                              g.strideB,
                              g.strideC,
                              g.bias != nullptr,
                              g.geluAux,
                              g.auxLd,
                              g.beta != 0.0f,
                              alA,
                              alB,
                              alC,
                              alBias};
  auto it = impl_->algos.find(key);
  if (it == impl_->algos.end()) {
    LtHandle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> pref;
    MD_LT(cublasLtMatmulPreferenceCreate(&pref.h));
    uint64_t ws = kWorkspaceBytes;
    MD_LT(cublasLtMatmulPreferenceSetAttribute(
        pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    uint32_t a32 = uint32_t(alB), b32 = uint32_t(alA), c32 = uint32_t(alC);
    MD_LT(cublasLtMatmulPreferenceSetAttribute(
        pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a32, sizeof a32));
    MD_LT(cublasLtMatmulPreferenceSetAttribute(
        pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b32, sizeof b32));
    MD_LT(cublasLtMatmulPreferenceSetAttribute(
        pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c32, sizeof c32));
    MD_LT(cublasLtMatmulPreferenceSetAttribute(
        pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c32, sizeof c32));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    MD_LT(cublasLtMatmulAlgoGetHeuristic(impl_->lt, desc.h, la.h, lb.h, lc.h,
                                         lc.h, pref.h, 1, &result, &found));
    if (found == 0)
      return absl::UnimplementedError(absl::StrFormat(
          "cuda backend: cuBLASLt has no algorithm for a %s x %s -> %s GEMM "
          "(m %d, n %d, k %d, batch %d%s)",
          dtypeName(DType(g.in)), dtypeName(DType(g.in)),
          dtypeName(DType(g.out)), g.m, g.n, g.k, g.batch,
          g.geluAux ? ", gelu aux epilogue"
                    : (g.bias ? ", bias epilogue" : "")));
    it = impl_->algos.emplace(key, result.algo).first;
  }
  MD_LT(cublasLtMatmul(impl_->lt, desc.h, &g.alpha, g.b, la.h, g.a, lb.h,
                       &g.beta, g.c, lc.h, g.c, lc.h, &it->second,
                       impl_->workspace, kWorkspaceBytes, s));
  return absl::OkStatus();
}

/// The GEMM of op_a(a) · op_b(b) into c (md.matmul's product, in a's
/// element type): one GEMM with the batch folded into M when b is shared
/// and a is not transposed, else a strided batch of them.
CudaBackend::Gemm CudaBackend::productGemm(const TensorRef &a,
                                           const TensorRef &b,
                                           const TensorRef &c, bool transA,
                                           bool transB, const MatmulDims &d) {
  Gemm g;
  g.transA = transA;
  g.transB = transB;
  g.lda = transA ? d.m : d.k;
  g.ldb = transB ? d.k : d.n;
  g.ldc = d.n;
  g.a = a.data;
  g.b = b.data;
  g.c = c.data;
  g.in = g.out = dt(a);
  g.n = d.n;
  g.k = d.k;
  if (!d.batchedB && !transA) {
    g.m = d.batch * d.m; // the batch folds into M
  } else {
    g.m = d.m;
    g.batch = d.batch;
    g.strideA = d.m * d.k;
    g.strideB = d.batchedB ? d.k * d.n : 0;
    g.strideC = d.m * d.n;
  }
  return g;
}

absl::Status CudaBackend::matmul(const MatmulArgs &args) {
  MD_ASSIGN_OR_RETURN(MatmulDims d, checkMatmul(args));
  MD_RETURN_IF_ERROR(checkStream(args.stream));
  cudaStream_t s = impl_->streams[args.stream.id];
  const int64_t rows = d.batch * d.m;
  if (rows == 0 || d.n == 0)
    return absl::OkStatus();
  const void *bias = args.bias ? args.bias->data : nullptr;
  if (d.k == 0) {
    MD_LAUNCH(k::fillRows(bias, dt(args.a), args.out.data, dt(args.out), rows,
                          d.n, s),
              "matmul (empty contraction)");
    return absl::OkStatus();
  }
  Gemm g = productGemm(args.a, args.b, args.out, args.transposeA,
                       args.transposeB, d);
  g.bias = bias;
  absl::Status fused = gemm(g, args.stream);
  if (fused.ok() || !bias || fused.code() != absl::StatusCode::kUnimplemented)
    return fused;
  // No algorithm with the bias epilogue: the product in f32, then the bias
  // added and rounded once, as the CPU backend does.
  Scratch tmp(s);
  MD_RETURN_IF_ERROR(tmp.allocate(rows * d.n * 4, false));
  g.bias = nullptr;
  g.c = tmp.as<void>();
  g.out = dt(DType::f32);
  MD_RETURN_IF_ERROR(gemm(g, args.stream));
  MD_ASSIGN_OR_RETURN(k::Strided space,
                      strided("matmul", {rows, d.n}, {d.n, 1}, {0, 1}));
  MD_LAUNCH(k::binary(k::Binary::add, tmp.as<void>(), dt(DType::f32), bias,
                      dt(args.a), args.out.data, dt(args.out), space,
                      rows * d.n, s),
            "matmul bias");
  return absl::OkStatus();
}

// cuBLASLt's GELU_AUX(_BIAS) epilogue computes both results in one GEMM
// where it applies: the tanh GELU (`approximate`; its GELU is that form),
// one GEMM (b shared and a not transposed, so that the batch folds into M,
// as in matmul), an aux leading dim divisible by 8 and an aux pointer
// aligned to 16 bytes, as the cuBLASLt documentation requires, and an
// algorithm for it. Otherwise, and for the exact GELU, md.matmul into pre
// and then md.gelu of it. The epilogue's GELU runs inside the GEMM kernel,
// with its own arithmetic, so `out` need not have the unfused pair's bits:
// the conformance tests compare it within the GELU's tolerance.
absl::Status CudaBackend::matmulGelu(const MatmulGeluArgs &args) {
  MD_ASSIGN_OR_RETURN(MatmulDims d, checkMatmulGelu(args));
  MD_RETURN_IF_ERROR(checkStream(args.stream));
  const int64_t rows = d.batch * d.m;
  const bool epilogue = args.approximate && !d.batchedB && !args.transposeA &&
                        rows > 0 && d.n > 0 && d.k > 0 && d.n % 8 == 0 &&
                        alignmentOf(args.pre.data) >= 16;
  if (epilogue) {
    // One GEMM: the batch folds into M (b shared, a not transposed).
    Gemm g = productGemm(args.a, args.b, args.out, false, args.transposeB, d);
    g.bias = args.bias ? args.bias->data : nullptr;
    g.geluAux = true;
    g.aux = args.pre.data;
    g.auxLd = d.n;
    absl::Status fused = gemm(g, args.stream);
    if (fused.code() != absl::StatusCode::kUnimplemented)
      return fused;
  }
  return matmulThenGelu(args);
}

// The CPU backend's formulas (runtime/cpu/Matmul.cpp), one GEMM each:
//   da = dy b^T (-,-)   dy b (-,tb)   b dy^T (ta,-)   b^T dy^T (ta,tb)
//   db = a^T dy (-,-)   dy^T a (-,tb) a dy (ta,-)     dy^T a^T (ta,tb)
// A shared b's gradient sums over the batch: folded into one GEMM when a is
// not transposed, else accumulated GEMM by GEMM (beta = 1) in f32.
absl::Status CudaBackend::matmulGrad(const MatmulGradArgs &args) {
  MD_ASSIGN_OR_RETURN(MatmulDims d, checkMatmulGrad(args));
  MD_RETURN_IF_ERROR(checkStream(args.stream));
  cudaStream_t s = impl_->streams[args.stream.id];
  const bool ta = args.transposeA, tb = args.transposeB;
  const int64_t m = d.m, n = d.n, kk = d.k;
  const int64_t lda = ta ? m : kk, ldb = tb ? kk : n;
  const int t = dt(args.a);
  const int64_t esz = dtypeSize(args.a.dtype);

  // da (and db for a batched b or a folded batch) for `batch` entries of
  // `rows` rows each; db goes to dbPtr with type dbType and beta dbBeta.
  auto entry = [&](int64_t rows, int64_t batch, const char *dy, const char *a,
                   const char *b, char *da, void *db, int dbType, float dbBeta,
                   int64_t bStride) -> absl::Status {
    if (rows * kk > 0) {
      Gemm g;
      g.in = g.out = t;
      g.batch = batch;
      if (!ta) {
        g.transA = false, g.transB = !tb, g.m = rows, g.n = kk, g.k = n;
        g.a = dy, g.lda = n, g.b = b, g.ldb = ldb, g.c = da, g.ldc = kk;
        g.strideA = rows * n, g.strideB = bStride, g.strideC = rows * kk;
      } else {
        g.transA = tb, g.transB = true, g.m = kk, g.n = rows, g.k = n;
        g.a = b, g.lda = ldb, g.b = dy, g.ldb = n, g.c = da, g.ldc = rows;
        g.strideA = bStride, g.strideB = rows * n, g.strideC = rows * kk;
      }
      if (n == 0)
        MD_CUDA(cudaMemsetAsync(da, 0, size_t(batch * rows * kk * esz), s));
      else
        MD_RETURN_IF_ERROR(gemm(g, args.stream));
    }
    if (db == nullptr || kk * n == 0)
      return absl::OkStatus();
    Gemm g;
    g.in = t;
    g.out = dbType;
    g.beta = dbBeta;
    g.batch = batch;
    if (!tb) {
      g.transA = !ta, g.transB = false, g.m = kk, g.n = n, g.k = rows;
      g.a = a, g.lda = lda, g.b = dy, g.ldb = n, g.c = db, g.ldc = n;
      g.strideA = rows * kk, g.strideB = rows * n, g.strideC = kk * n;
    } else {
      g.transA = true, g.transB = ta, g.m = n, g.n = kk, g.k = rows;
      g.a = dy, g.lda = n, g.b = a, g.ldb = lda, g.c = db, g.ldc = kk;
      g.strideA = rows * n, g.strideB = rows * kk, g.strideC = kk * n;
    }
    if (rows == 0) {
      if (dbBeta == 0.0f)
        MD_CUDA(cudaMemsetAsync(
            db, 0, size_t(batch * kk * n * dtypeSize(DType(dbType))), s));
      return absl::OkStatus();
    }
    return gemm(g, args.stream);
  };

  const char *dy = args.dy.as<const char>(), *a = args.a.as<const char>(),
             *b = args.b.as<const char>();
  char *da = args.da.as<char>();
  if (d.batchedB) {
    MD_RETURN_IF_ERROR(
        entry(m, d.batch, dy, a, b, da, args.db.data, t, 0.0f, kk * n));
  } else if (!ta) {
    MD_RETURN_IF_ERROR(
        entry(d.batch * m, 1, dy, a, b, da, args.db.data, t, 0.0f, 0));
  } else {
    // da for every entry in one batched GEMM with b shared, then db summed
    // entry by entry into an f32 accumulator.
    MD_RETURN_IF_ERROR(entry(m, d.batch, dy, a, b, da, nullptr, t, 0.0f, 0));
    const bool direct = args.db.dtype == DType::f32;
    Scratch acc(s);
    void *dbF32 = args.db.data;
    if (!direct) {
      MD_RETURN_IF_ERROR(acc.allocate(kk * n * 4, false));
      dbF32 = acc.as<void>();
    }
    if (d.batch == 0 && kk * n > 0)
      MD_CUDA(cudaMemsetAsync(dbF32, 0, size_t(kk * n * 4), s));
    for (int64_t i = 0; i < d.batch; ++i)
      MD_RETURN_IF_ERROR(entry(m, 1, dy + i * m * n * esz, a + i * m * kk * esz,
                               b, nullptr, dbF32, dt(DType::f32),
                               i > 0 ? 1.0f : 0.0f, 0));
    if (!direct)
      MD_LAUNCH(
          k::cast(dbF32, dt(DType::f32), args.db.data, dt(args.db), kk * n, s),
          "matmul_grad db");
  }
  if (args.dbias)
    MD_LAUNCH(k::columnSums(args.dy.data, t, d.batch * m, n, args.dbias->data,
                            dt(*args.dbias), s),
              "matmul_grad dbias");
  return absl::OkStatus();
}

} // namespace md::cuda
