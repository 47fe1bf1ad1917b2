//===- CudaBackend.cpp - memory, streams, cuBLASLt and kernel dispatch ----===//
//
// Every op: the shared check (OpChecks.h), then sizes for the launchers in
// Kernels.h, which only queue work on the op's stream. GEMMs go through
// cuBLASLt in gemm(): row-major products are computed as their column-major
// transposes (C^T = op(B)^T op(A)^T), f32 compute for every input type
// (bf16 and f16 inputs accumulate in f32, f32 inputs are not rounded to
// TF32), the bias fused as the BIAS epilogue, and the heuristic's choice
// cached per shape, layout, types and pointer alignment. Every CUDA and
// cuBLASLt return code becomes an absl::Status naming the call.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/str_format.h"
#include "runtime/core/BackendChecks.h"
#include "runtime/core/OpChecks.h"
#include "runtime/core/Status.h"
#include "runtime/core/Strides.h"
#include "runtime/cuda/Device.h"
#include "runtime/cuda/Kernels.h"

namespace md::cuda {

using namespace md::runtime;
namespace k = md::cuda::kernels;

#define MD_CUDA(call) MD_RETURN_IF_ERROR(cudaStatus((call), #call))
#define MD_LAUNCH(call, what)                                                  \
  MD_RETURN_IF_ERROR(cudaStatus((call), what " kernel launch"))

namespace {

/// cuBLASLt's return codes as Status, naming the call.
absl::Status ltStatus(cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return absl::OkStatus();
  std::string msg = absl::StrFormat("%s: %s", what, cublasLtGetStatusString(s));
  switch (s) {
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return absl::UnimplementedError(msg);
  case CUBLAS_STATUS_ALLOC_FAILED:
    return absl::ResourceExhaustedError(msg);
  case CUBLAS_STATUS_INVALID_VALUE:
    return absl::InvalidArgumentError(msg);
  default:
    return absl::InternalError(msg);
  }
}
#define MD_LT(call) MD_RETURN_IF_ERROR(ltStatus((call), #call))

int dt(DType t) { return static_cast<int>(t); }
int dt(const TensorRef &t) { return static_cast<int>(t.dtype); }

cudaDataType_t cudaType(int t) {
  switch (static_cast<DType>(t)) {
  case DType::bf16:
    return CUDA_R_16BF;
  case DType::f16:
    return CUDA_R_16F;
  default:
    return CUDA_R_32F;
  }
}

absl::Status rankLimit(const char *op, size_t rank) {
  if (rank > size_t(k::kMaxRank))
    return absl::UnimplementedError(absl::StrFormat(
        "%s: the CUDA kernels take tensors of rank <= %d, got rank %d", op,
        k::kMaxRank, rank));
  return absl::OkStatus();
}

absl::StatusOr<k::Strided> strided(const char *op,
                                   absl::Span<const int64_t> shape,
                                   const std::vector<int64_t> &a,
                                   const std::vector<int64_t> &b = {}) {
  MD_RETURN_IF_ERROR(rankLimit(op, shape.size()));
  k::Strided s;
  s.rank = int(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    s.shape[i] = shape[i];
    s.strideA[i] = i < a.size() ? a[i] : 0;
    s.strideB[i] = i < b.size() ? b[i] : 0;
  }
  return s;
}

/// Device memory for one op's temporaries, allocated and freed in stream
/// order (cudaMallocAsync / cudaFreeAsync): the host never waits for it.
class Scratch {
public:
  explicit Scratch(cudaStream_t stream) : stream_(stream) {}
  ~Scratch() {
    if (ptr_)
      (void)cudaFreeAsync(ptr_, stream_);
  }
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
  absl::Status allocate(int64_t bytes, bool zeroed) {
    if (bytes < 8)
      bytes = 8;
    MD_RETURN_IF_ERROR(cudaStatus(
        cudaMallocAsync(&ptr_, size_t(bytes), stream_), "cudaMallocAsync"));
    if (zeroed)
      MD_RETURN_IF_ERROR(
          cudaStatus(cudaMemsetAsync(ptr_, 0, size_t(bytes), stream_),
                     "cudaMemsetAsync"));
    return absl::OkStatus();
  }
  template <typename T> T *as() const { return static_cast<T *>(ptr_); }

private:
  cudaStream_t stream_;
  void *ptr_ = nullptr;
};

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

/// The largest power of two (<= 256) dividing the address: what cuBLASLt's
/// heuristic may assume about a pointer.
int64_t alignmentOf(const void *p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int64_t al = 256;
  while (al > 1 && (a % uintptr_t(al)) != 0)
    al /= 2;
  return al;
}

} // namespace

struct CudaBackend::Impl {
  cudaStream_t streams[2] = {nullptr, nullptr};
  std::vector<cudaEvent_t> events;
  cublasLtHandle_t lt = nullptr;
  void *workspace = nullptr;
  int64_t *check = nullptr;     // device: {first bad position, count}
  int64_t *hostCheck = nullptr; // pinned: [0..1] initial values, [2..3] result
  std::map<std::vector<int64_t>, cublasLtMatmulAlgo_t> algos;
  std::function<absl::Status()> syncPoll;

  ~Impl() {
    for (cudaStream_t s : streams)
      if (s)
        (void)cudaStreamSynchronize(s);
    for (cudaEvent_t e : events)
      (void)cudaEventDestroy(e);
    if (lt)
      (void)cublasLtDestroy(lt);
    if (workspace)
      (void)cudaFree(workspace);
    if (check)
      (void)cudaFree(check);
    if (hostCheck)
      (void)cudaFreeHost(hostCheck);
    for (cudaStream_t s : streams)
      if (s)
        (void)cudaStreamDestroy(s);
  }
};

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::create(int ordinal) {
  MD_ASSIGN_OR_RETURN(std::vector<DeviceInfo> devices, queryDevices());
  if (ordinal < 0 || ordinal >= int(devices.size()))
    return absl::InvalidArgumentError(absl::StrFormat(
        "cuda backend: device %d does not exist (%d devices)", ordinal,
        devices.size()));
  // A binary without code for this device fails here, not at the first op.
  MD_RETURN_IF_ERROR(selfTest(ordinal));
  MD_CUDA(cudaSetDevice(ordinal));
  auto impl = std::make_unique<Impl>();
  for (cudaStream_t &s : impl->streams)
    MD_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  MD_LT(cublasLtCreate(&impl->lt));
  MD_CUDA(cudaMalloc(&impl->workspace, kWorkspaceBytes));
  MD_CUDA(cudaMalloc(reinterpret_cast<void **>(&impl->check),
                     2 * sizeof(int64_t)));
  MD_CUDA(cudaMallocHost(reinterpret_cast<void **>(&impl->hostCheck),
                         4 * sizeof(int64_t)));
  impl->hostCheck[0] = INT64_MAX;
  impl->hostCheck[1] = 0;
  std::unique_ptr<CudaBackend> backend(new CudaBackend(std::move(impl)));
  backend->device_ = ordinal;
  return backend;
}

//===----------------------------------------------------------------------===//
// Memory, streams, events
//===----------------------------------------------------------------------===//

absl::Status CudaBackend::checkStream(Stream stream) const {
  return checkStreamId("cuda backend", stream, numStreams());
}

absl::StatusOr<Buffer> CudaBackend::allocate(int64_t bytes) {
  MD_ASSIGN_OR_RETURN(const int64_t rounded,
                      allocationBytes("cuda backend", bytes));
  void *p = nullptr;
  MD_RETURN_IF_ERROR(cudaStatus(cudaMalloc(&p, size_t(rounded)),
                                absl::StrFormat("cudaMalloc of %d bytes",
                                                rounded)
                                    .c_str()));
  Buffer buffer(p, bytes, [](void *q) { (void)cudaFree(q); });
  // Zeroed before any stream can use it: allocation is set-up time, so the
  // host may wait here.
  cudaStream_t s = impl_->streams[0];
  MD_CUDA(cudaMemsetAsync(p, 0, size_t(rounded), s));
  MD_RETURN_IF_ERROR(waitStream(s, "allocate"));
  return buffer;
}

absl::Status CudaBackend::copy(void *dst, const void *src, int64_t bytes,
                               Stream stream) {
  MD_RETURN_IF_ERROR(checkStream(stream));
  MD_RETURN_IF_ERROR(checkCopy("cuda backend", dst, src, bytes));
  if (bytes == 0 || dst == src)
    return absl::OkStatus();
  cudaStream_t s = impl_->streams[stream.id];
  MD_CUDA(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, s));
  // A copy touching host memory completes before returning, as on the CPU
  // backend: the caller may read or free the host side right away.
  cudaPointerAttributes da{}, sa{};
  MD_CUDA(cudaPointerGetAttributes(&da, dst));
  MD_CUDA(cudaPointerGetAttributes(&sa, src));
  if (da.type != cudaMemoryTypeDevice || sa.type != cudaMemoryTypeDevice)
    MD_RETURN_IF_ERROR(waitStream(s, "copy"));
  return absl::OkStatus();
}

absl::Status CudaBackend::zero(void *dst, int64_t bytes, Stream stream) {
  MD_RETURN_IF_ERROR(checkStream(stream));
  MD_RETURN_IF_ERROR(checkZero("cuda backend", dst, bytes));
  if (bytes > 0)
    MD_CUDA(cudaMemsetAsync(dst, 0, size_t(bytes), impl_->streams[stream.id]));
  return absl::OkStatus();
}

absl::StatusOr<Event> CudaBackend::createEvent() {
  cudaEvent_t e = nullptr;
  MD_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  impl_->events.push_back(e);
  return Event{int(impl_->events.size()) - 1};
}

absl::Status CudaBackend::recordEvent(Stream stream, Event event) {
  MD_RETURN_IF_ERROR(checkStream(stream));
  MD_RETURN_IF_ERROR(
      checkEventId("cuda backend", event, int64_t(impl_->events.size())));
  MD_CUDA(cudaEventRecord(impl_->events[event.id], impl_->streams[stream.id]));
  return absl::OkStatus();
}

absl::Status CudaBackend::waitEvent(Stream stream, Event event) {
  MD_RETURN_IF_ERROR(checkStream(stream));
  MD_RETURN_IF_ERROR(
      checkEventId("cuda backend", event, int64_t(impl_->events.size())));
  MD_CUDA(cudaStreamWaitEvent(impl_->streams[stream.id],
                              impl_->events[event.id], 0));
  return absl::OkStatus();
}

absl::Status CudaBackend::synchronize(Stream stream) {
  MD_RETURN_IF_ERROR(checkStream(stream));
  return waitStream(impl_->streams[stream.id], "synchronize");
}

void *CudaBackend::nativeStream(Stream stream) const {
  if (stream.id < 0 || stream.id >= numStreams())
    return nullptr;
  return impl_->streams[stream.id];
}

void CudaBackend::setSyncPoll(std::function<absl::Status()> poll) {
  impl_->syncPoll = std::move(poll);
}

// The poll is asked first, so a comm that has already failed fails the
// wait at once. Latency: a few yields, then sleeps growing to 200 us.
absl::Status CudaBackend::waitStream(void *streamV, const char *what) {
  auto s = static_cast<cudaStream_t>(streamV);
  if (!impl_->syncPoll)
    return cudaStatus(
        cudaStreamSynchronize(s),
        absl::StrFormat("%s: cudaStreamSynchronize", what).c_str());
  std::chrono::microseconds nap{10};
  for (int i = 0;; ++i) {
    MD_RETURN_IF_ERROR(impl_->syncPoll());
    cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess)
      return absl::OkStatus();
    if (q != cudaErrorNotReady)
      return cudaStatus(q,
                        absl::StrFormat("%s: cudaStreamQuery", what).c_str());
    if (i < 16) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(200));
    }
  }
}

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
  if (g.bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    MD_LT(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                         &epi, sizeof epi));
    MD_LT(cublasLtMatmulDescSetAttribute(
        desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
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
  std::vector<int64_t> key = {g.in, g.out, g.transA, g.transB, g.m, g.n, g.k,
                              g.lda, g.ldb, g.ldc, g.batch, g.strideA,
                              g.strideB, g.strideC, g.bias != nullptr,
                              g.beta != 0.0f, alA, alB, alC, alBias};
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
          g.bias ? ", bias epilogue" : ""));
    it = impl_->algos.emplace(key, result.algo).first;
  }
  MD_LT(cublasLtMatmul(impl_->lt, desc.h, &g.alpha, g.b, la.h, g.a, lb.h,
                       &g.beta, g.c, lc.h, g.c, lc.h, &it->second,
                       impl_->workspace, kWorkspaceBytes, s));
  return absl::OkStatus();
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
  Gemm g;
  g.transA = args.transposeA;
  g.transB = args.transposeB;
  g.lda = g.transA ? d.m : d.k;
  g.ldb = g.transB ? d.k : d.n;
  g.ldc = d.n;
  g.a = args.a.data;
  g.b = args.b.data;
  g.c = args.out.data;
  g.in = g.out = dt(args.a);
  g.n = d.n;
  g.k = d.k;
  if (!d.batchedB && !g.transA) {
    g.m = rows; // the batch folds into M
  } else {
    g.m = d.m;
    g.batch = d.batch;
    g.strideA = d.m * d.k;
    g.strideB = d.batchedB ? d.k * d.n : 0;
    g.strideC = d.m * d.n;
  }
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
                   const char *b, char *da, void *db, int dbType,
                   float dbBeta, int64_t bStride) -> absl::Status {
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
    MD_RETURN_IF_ERROR(entry(m, d.batch, dy, a, b, da, args.db.data, t, 0.0f,
                             kk * n));
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
      MD_RETURN_IF_ERROR(entry(m, 1, dy + i * m * n * esz,
                               a + i * m * kk * esz, b, nullptr, dbF32,
                               dt(DType::f32), i > 0 ? 1.0f : 0.0f, 0));
    if (!direct)
      MD_LAUNCH(k::cast(dbF32, dt(DType::f32), args.db.data, dt(args.db),
                        kk * n, s),
                "matmul_grad db");
  }
  if (args.dbias)
    MD_LAUNCH(k::columnSums(args.dy.data, t, d.batch * m, n, args.dbias->data,
                            dt(*args.dbias), s),
              "matmul_grad dbias");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

#define MD_STREAM(args)                                                        \
  MD_RETURN_IF_ERROR(checkStream((args).stream));                              \
  cudaStream_t s = impl_->streams[(args).stream.id]

absl::Status CudaBackend::binary(const BinaryArgs &args) {
  MD_RETURN_IF_ERROR(checkBinary(args));
  MD_STREAM(args);
  const Shape &full = args.out.shape;
  MD_ASSIGN_OR_RETURN(k::Strided space,
                      strided("binary", full,
                              broadcastStrides(args.lhs.shape, full),
                              broadcastStrides(args.rhs.shape, full)));
  k::Binary op = args.op == BinaryOp::add   ? k::Binary::add
                 : args.op == BinaryOp::sub ? k::Binary::sub
                                            : k::Binary::mul;
  MD_LAUNCH(k::binary(op, args.lhs.data, dt(args.lhs), args.rhs.data,
                      dt(args.rhs), args.out.data, dt(args.out), space,
                      args.out.numel(), s),
            "binary");
  return absl::OkStatus();
}

absl::Status CudaBackend::scale(const ScaleArgs &args) {
  MD_RETURN_IF_ERROR(checkScale(args));
  MD_STREAM(args);
  MD_LAUNCH(k::unary(k::Unary::scale, args.x.data, dt(args.x), args.out.data,
                     dt(args.out), args.x.numel(), float(args.factor), s),
            "scale");
  return absl::OkStatus();
}

absl::Status CudaBackend::gelu(const GeluArgs &args) {
  MD_RETURN_IF_ERROR(checkGelu(args));
  MD_STREAM(args);
  MD_LAUNCH(k::unary(args.approximate ? k::Unary::geluTanh
                                      : k::Unary::geluExact,
                     args.x.data, dt(args.x), args.out.data, dt(args.out),
                     args.x.numel(), 1.0f, s),
            "gelu");
  return absl::OkStatus();
}

absl::Status CudaBackend::geluGrad(const GeluGradArgs &args) {
  MD_RETURN_IF_ERROR(checkGeluGrad(args));
  MD_STREAM(args);
  MD_LAUNCH(k::unaryGrad(args.approximate ? k::UnaryGrad::geluTanh
                                          : k::UnaryGrad::geluExact,
                         args.dy.data, dt(args.dy), args.x.data, dt(args.x),
                         args.dx.data, dt(args.dx), args.x.numel(), s),
            "gelu_grad");
  return absl::OkStatus();
}

absl::Status CudaBackend::relu(const ReluArgs &args) {
  MD_RETURN_IF_ERROR(checkRelu(args));
  MD_STREAM(args);
  MD_LAUNCH(k::unary(k::Unary::relu, args.x.data, dt(args.x), args.out.data,
                     dt(args.out), args.x.numel(), 1.0f, s),
            "relu");
  return absl::OkStatus();
}

absl::Status CudaBackend::reluGrad(const ReluGradArgs &args) {
  MD_RETURN_IF_ERROR(checkReluGrad(args));
  MD_STREAM(args);
  MD_LAUNCH(k::unaryGrad(k::UnaryGrad::relu, args.dy.data, dt(args.dy),
                         args.x.data, dt(args.x), args.dx.data, dt(args.dx),
                         args.x.numel(), s),
            "relu_grad");
  return absl::OkStatus();
}

absl::Status CudaBackend::accumulate(const AccumulateArgs &args) {
  MD_RETURN_IF_ERROR(checkAccumulate(args));
  MD_STREAM(args);
  MD_LAUNCH(k::accumulate(args.acc.data, dt(args.acc), args.g.data,
                          dt(args.g), args.out.data, dt(args.out),
                          args.acc.numel(), s),
            "accumulate");
  return absl::OkStatus();
}

absl::Status CudaBackend::cast(const CastArgs &args) {
  MD_RETURN_IF_ERROR(checkCast(args));
  MD_STREAM(args);
  if (args.x.dtype == args.out.dtype) {
    if (args.x.data != args.out.data && args.x.bytes() > 0)
      MD_CUDA(cudaMemcpyAsync(args.out.data, args.x.data,
                              size_t(args.x.bytes()), cudaMemcpyDeviceToDevice,
                              s));
    return absl::OkStatus();
  }
  MD_LAUNCH(k::cast(args.x.data, dt(args.x), args.out.data, dt(args.out),
                    args.x.numel(), s),
            "cast");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Norms, softmax
//===----------------------------------------------------------------------===//

namespace {

/// layer_norm, and rms_norm as a layer norm without mean or beta: one
/// kernel, whose `rms` flag selects the statistics.
absl::Status launchNorm(const LayerNormArgs &args, const RowDims &d, bool rms,
                        cudaStream_t s) {
  const void *beta = args.beta ? args.beta->data : nullptr;
  int bt = args.beta ? dt(*args.beta) : 0;
  return cudaStatus(
      k::layerNorm(args.x.data, dt(args.x), args.gamma.data, dt(args.gamma),
                   beta, bt, args.out.data, dt(args.out), d.rows, d.d, args.eps,
                   rms, nullptr, s),
      rms ? "rms_norm kernel launch" : "layer_norm kernel launch");
}

/// The gradients of launchNorm: dx row by row, which leaves each row's
/// statistics in scratch, then dgamma (and dbeta) over the rows from them.
absl::Status launchNormGrad(const LayerNormGradArgs &args, const RowDims &d,
                            bool rms, cudaStream_t s) {
  Scratch stats(s);
  MD_RETURN_IF_ERROR(stats.allocate(2 * d.rows * 4, false));
  MD_RETURN_IF_ERROR(
      cudaStatus(k::layerNormGradDx(args.dy.data, dt(args.dy), args.x.data,
                                    dt(args.x), args.gamma.data, dt(args.gamma),
                                    args.dx.data, dt(args.dx), d.rows, d.d,
                                    args.eps, rms, stats.as<float>(), s),
                 rms ? "rms_norm_grad dx kernel launch"
                     : "layer_norm_grad dx kernel launch"));
  void *dbeta = args.dbeta ? args.dbeta->data : nullptr;
  int dbt = args.dbeta ? dt(*args.dbeta) : 0;
  return cudaStatus(
      k::layerNormGradParams(args.dy.data, dt(args.dy), args.x.data, dt(args.x),
                             stats.as<float>(), d.rows, d.d, rms,
                             args.dgamma.data, dt(args.dgamma), dbeta, dbt, s),
      rms ? "rms_norm_grad dgamma kernel launch"
          : "layer_norm_grad dgamma kernel launch");
}

} // namespace

absl::Status CudaBackend::layerNorm(const LayerNormArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims d, checkLayerNorm(args));
  MD_STREAM(args);
  return launchNorm(args, d, /*rms=*/false, s);
}

absl::Status CudaBackend::layerNormGrad(const LayerNormGradArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims d, checkLayerNormGrad(args));
  MD_STREAM(args);
  return launchNormGrad(args, d, /*rms=*/false, s);
}

absl::Status CudaBackend::rmsNorm(const RmsNormArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims d, checkRmsNorm(args));
  MD_STREAM(args);
  return launchNorm({args.x, args.gamma, std::nullopt, args.out, args.eps}, d,
                    /*rms=*/true, s);
}

absl::Status CudaBackend::rmsNormGrad(const RmsNormGradArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims d, checkRmsNormGrad(args));
  MD_STREAM(args);
  return launchNormGrad({args.dy, args.x, args.gamma, args.dx, args.dgamma,
                         std::nullopt, args.eps},
                        d, /*rms=*/true, s);
}

absl::Status CudaBackend::batchNorm(const BatchNormArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims d, checkBatchNorm(args));
  MD_STREAM(args);
  MD_LAUNCH(k::batchNorm(args.x.data, dt(args.x), args.gamma.data,
                         dt(args.gamma), args.beta.data, dt(args.beta),
                         args.out.data, dt(args.out), args.mean.as<float>(),
                         args.invstd.as<float>(), d.rows, d.d, args.eps, s),
            "batch_norm");
  return absl::OkStatus();
}

absl::Status CudaBackend::batchNormGrad(const BatchNormGradArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims d, checkBatchNormGrad(args));
  MD_STREAM(args);
  Scratch sums(s);
  MD_RETURN_IF_ERROR(sums.allocate(2 * d.d * 4, false));
  MD_LAUNCH(k::batchNormGrad(args.dy.data, dt(args.dy), args.x.data,
                             dt(args.x), args.gamma.data, dt(args.gamma),
                             args.mean.as<const float>(),
                             args.invstd.as<const float>(), args.dx.data,
                             dt(args.dx), args.dgamma.data, dt(args.dgamma),
                             args.dbeta.data, dt(args.dbeta),
                             sums.as<float>(), d.rows, d.d, s),
            "batch_norm_grad");
  return absl::OkStatus();
}

absl::Status CudaBackend::softmax(const SoftmaxArgs &args) {
  MD_ASSIGN_OR_RETURN(AxisDims d, checkSoftmax(args));
  MD_STREAM(args);
  MD_LAUNCH(k::softmax(args.x.data, dt(args.x), args.out.data, dt(args.out),
                       d.outer, d.n, d.inner, s),
            "softmax");
  return absl::OkStatus();
}

absl::Status CudaBackend::softmaxGrad(const SoftmaxGradArgs &args) {
  MD_ASSIGN_OR_RETURN(AxisDims d, checkSoftmaxGrad(args));
  MD_STREAM(args);
  MD_LAUNCH(k::softmaxGrad(args.dy.data, dt(args.dy), args.y.data, dt(args.y),
                           args.dx.data, dt(args.dx), d.outer, d.n, d.inner,
                           s),
            "softmax_grad");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

namespace {
absl::Status attentionLimit(const char *op, const AttentionDims &d) {
  if (d.seq > k::maxAttentionSeq() || d.headDim > k::maxAttentionSeq())
    return absl::UnimplementedError(absl::StrFormat(
        "%s: T = %d (head dim %d) exceeds the CUDA kernel's limit of %d", op,
        d.seq, d.headDim, k::maxAttentionSeq()));
  return absl::OkStatus();
}
} // namespace

absl::Status CudaBackend::causalAttention(const CausalAttentionArgs &args) {
  MD_ASSIGN_OR_RETURN(AttentionDims d, checkCausalAttention(args));
  MD_RETURN_IF_ERROR(attentionLimit("causal_attention", d));
  MD_STREAM(args);
  MD_LAUNCH(k::attention(args.q.data, args.k.data, args.v.data, dt(args.q),
                         args.out.data, dt(args.out), d.batch, d.seq, d.heads,
                         d.headDim, s),
            "causal_attention");
  return absl::OkStatus();
}

absl::Status
CudaBackend::causalAttentionGrad(const CausalAttentionGradArgs &args) {
  MD_ASSIGN_OR_RETURN(AttentionDims d, checkCausalAttentionGrad(args));
  MD_RETURN_IF_ERROR(attentionLimit("causal_attention_grad", d));
  MD_STREAM(args);
  Scratch stats(s);
  MD_RETURN_IF_ERROR(stats.allocate(3 * d.batch * d.heads * d.seq * 8, false));
  MD_LAUNCH(k::attentionGrad(args.dout.data, dt(args.dout), args.q.data,
                             args.k.data, args.v.data, dt(args.q),
                             args.dq.data, args.dk.data, args.dv.data,
                             dt(args.dq), stats.as<double>(), d.batch, d.seq,
                             d.heads, d.headDim, s),
            "causal_attention_grad");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Index ops: embedding, cross-entropy
//===----------------------------------------------------------------------===//

absl::StatusOr<int64_t>
CudaBackend::checkIndices(const char *op, const char *what,
                          const TensorRef &ids, int64_t rows, bool hasIgnore,
                          int64_t ignoreIndex, Stream stream) {
  cudaStream_t s = impl_->streams[stream.id];
  int64_t *host = impl_->hostCheck;
  MD_CUDA(cudaMemcpyAsync(impl_->check, host, 2 * sizeof(int64_t),
                          cudaMemcpyHostToDevice, s));
  const bool i32 = ids.dtype == DType::i32;
  MD_LAUNCH(k::checkIndices(ids.data, i32, ids.numel(), rows, hasIgnore,
                            ignoreIndex, impl_->check, s),
            "index check");
  MD_CUDA(cudaMemcpyAsync(host + 2, impl_->check, 2 * sizeof(int64_t),
                          cudaMemcpyDeviceToHost, s));
  // The one wait in a kernel's path: a bad index must fail this call.
  MD_RETURN_IF_ERROR(waitStream(s, op));
  const int64_t bad = host[2], counted = host[3];
  if (bad == INT64_MAX)
    return counted;
  int64_t value = 0;
  int32_t value32 = 0;
  const char *at = ids.as<const char>() + bad * dtypeSize(ids.dtype);
  if (i32) {
    MD_CUDA(cudaMemcpy(&value32, at, 4, cudaMemcpyDeviceToHost));
    value = value32;
  } else {
    MD_CUDA(cudaMemcpy(&value, at, 8, cudaMemcpyDeviceToHost));
  }
  return indexOutOfRange(op, what, bad, value, rows,
                         hasIgnore ? std::optional<int64_t>(ignoreIndex)
                                   : std::nullopt);
}

absl::Status CudaBackend::embedding(const EmbeddingArgs &args) {
  MD_ASSIGN_OR_RETURN(EmbeddingDims d, checkEmbedding(args));
  MD_STREAM(args);
  MD_RETURN_IF_ERROR(
      checkIndices("embedding", "ids", args.ids, d.rows, false, 0, args.stream)
          .status());
  MD_LAUNCH(k::embedding(args.table.data, int(dtypeSize(args.table.dtype)),
                         args.ids.data, args.ids.dtype == DType::i32,
                         args.out.data, d.positions, d.d, s),
            "embedding");
  return absl::OkStatus();
}

// Scatter-add with f32 atomics into an f32 accumulator (the result itself
// when it is f32), rounded once into a bf16/f16 result. The order of the
// additions into one row is not fixed, unlike the CPU backend's.
absl::Status CudaBackend::embeddingGrad(const EmbeddingGradArgs &args) {
  MD_ASSIGN_OR_RETURN(EmbeddingDims d, checkEmbeddingGrad(args));
  MD_STREAM(args);
  MD_RETURN_IF_ERROR(checkIndices("embedding_grad", "ids", args.ids, d.rows,
                                  false, 0, args.stream)
                         .status());
  const bool direct = args.out.dtype == DType::f32;
  Scratch acc(s);
  float *target = args.out.as<float>();
  if (!direct) {
    MD_RETURN_IF_ERROR(acc.allocate(d.rows * d.d * 4, true));
    target = acc.as<float>();
  } else if (d.rows * d.d > 0) {
    MD_CUDA(cudaMemsetAsync(target, 0, size_t(d.rows * d.d * 4), s));
  }
  MD_LAUNCH(k::embeddingGrad(args.dy.data, dt(args.dy), args.ids.data,
                             args.ids.dtype == DType::i32, target, d.positions,
                             d.d, s),
            "embedding_grad");
  if (!direct)
    MD_LAUNCH(k::cast(target, dt(DType::f32), args.out.data, dt(args.out),
                      d.rows * d.d, s),
              "embedding_grad cast");
  return absl::OkStatus();
}

absl::Status CudaBackend::crossEntropy(const CrossEntropyArgs &args) {
  MD_ASSIGN_OR_RETURN(CrossEntropyDims d, checkCrossEntropy(args));
  MD_STREAM(args);
  const bool hasIgnore = args.ignoreIndex.has_value();
  const int64_t ignore = args.ignoreIndex.value_or(0);
  MD_ASSIGN_OR_RETURN(int64_t counted,
                      checkIndices("cross_entropy", "targets", args.targets,
                                   d.classes, hasIgnore, ignore, args.stream));
  Scratch losses(s);
  MD_RETURN_IF_ERROR(losses.allocate(d.positions * 8, false));
  MD_LAUNCH(k::crossEntropy(args.logits.data, dt(args.logits),
                            args.targets.data,
                            args.targets.dtype == DType::i32, hasIgnore,
                            ignore, d.positions, d.classes,
                            losses.as<double>(), counted,
                            args.out.as<float>(), s),
            "cross_entropy");
  return absl::OkStatus();
}

absl::Status CudaBackend::crossEntropyGrad(const CrossEntropyGradArgs &args) {
  MD_ASSIGN_OR_RETURN(CrossEntropyDims d, checkCrossEntropyGrad(args));
  MD_STREAM(args);
  const bool hasIgnore = args.ignoreIndex.has_value();
  const int64_t ignore = args.ignoreIndex.value_or(0);
  MD_ASSIGN_OR_RETURN(int64_t counted,
                      checkIndices("cross_entropy_grad", "targets",
                                   args.targets, d.classes, hasIgnore, ignore,
                                   args.stream));
  MD_LAUNCH(k::crossEntropyGrad(args.dloss.as<const float>(),
                                args.logits.data, dt(args.logits),
                                args.targets.data,
                                args.targets.dtype == DType::i32, hasIgnore,
                                ignore, d.positions, d.classes, counted,
                                args.dlogits.data, dt(args.dlogits), s),
            "cross_entropy_grad");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

absl::Status CudaBackend::reshape(const ReshapeArgs &args) {
  MD_RETURN_IF_ERROR(checkReshape(args));
  MD_STREAM(args);
  if (args.out.data != args.x.data && args.x.bytes() > 0)
    MD_CUDA(cudaMemcpyAsync(args.out.data, args.x.data, size_t(args.x.bytes()),
                            cudaMemcpyDeviceToDevice, s));
  return absl::OkStatus();
}

absl::Status CudaBackend::transpose(const TransposeArgs &args) {
  MD_RETURN_IF_ERROR(checkTranspose(args));
  MD_STREAM(args);
  std::vector<int64_t> xStrides = rowMajorStrides(args.x.shape);
  std::vector<int64_t> src(args.perm.size());
  for (size_t i = 0; i < args.perm.size(); ++i)
    src[i] = xStrides[args.perm[i]];
  MD_ASSIGN_OR_RETURN(k::Strided space,
                      strided("transpose", args.out.shape, src));
  MD_LAUNCH(k::permute(args.x.data, args.out.data,
                       int(dtypeSize(args.x.dtype)), space, args.out.numel(),
                       s),
            "transpose");
  return absl::OkStatus();
}

absl::Status CudaBackend::arange(const ArangeArgs &args) {
  MD_RETURN_IF_ERROR(checkArange(args));
  MD_STREAM(args);
  MD_LAUNCH(k::arange(args.out.data, args.out.dtype == DType::i32, args.start,
                      args.out.numel(), s),
            "arange");
  return absl::OkStatus();
}

absl::Status CudaBackend::flatten(const FlattenArgs &args) {
  MD_RETURN_IF_ERROR(checkFlatten(args));
  MD_STREAM(args);
  char *out = args.out.as<char>();
  int64_t offset = 0;
  for (const TensorRef &in : args.inputs) {
    if (in.bytes() > 0)
      MD_CUDA(cudaMemcpyAsync(out + offset, in.data, size_t(in.bytes()),
                              cudaMemcpyDeviceToDevice, s));
    offset += in.bytes();
  }
  if (args.out.bytes() > offset)
    MD_CUDA(cudaMemsetAsync(out + offset, 0,
                            size_t(args.out.bytes() - offset), s));
  return absl::OkStatus();
}

absl::Status CudaBackend::view(const ViewArgs &args) {
  MD_RETURN_IF_ERROR(checkView(args));
  MD_STREAM(args);
  const char *src =
      args.source.as<const char>() + args.offset * dtypeSize(args.source.dtype);
  if (args.out.data != src && args.out.bytes() > 0)
    MD_CUDA(cudaMemcpyAsync(args.out.data, src, size_t(args.out.bytes()),
                            cudaMemcpyDeviceToDevice, s));
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

namespace {

/// The kept and the reduced dims of x as two iteration spaces over x's
/// strides; `keptShape` gives the kept dims in output order.
absl::Status splitDims(const char *op, const Shape &xShape,
                       const std::vector<bool> &isReduced,
                       const std::vector<int64_t> &keptShape,
                       const std::vector<int64_t> &keptStrides,
                       k::Strided &kept, k::Strided &reduced,
                       int64_t &reducedN) {
  std::vector<int64_t> xs = rowMajorStrides(xShape);
  std::vector<int64_t> rShape, rStrides;
  reducedN = 1;
  for (size_t i = 0; i < xShape.size(); ++i)
    if (isReduced[i]) {
      rShape.push_back(xShape[i]);
      rStrides.push_back(xs[i]);
      reducedN *= xShape[i];
    }
  MD_ASSIGN_OR_RETURN(kept, strided(op, keptShape, keptStrides));
  MD_ASSIGN_OR_RETURN(reduced, strided(op, rShape, rStrides));
  return absl::OkStatus();
}

} // namespace

absl::Status CudaBackend::reduce(const ReduceArgs &args) {
  MD_ASSIGN_OR_RETURN(ReducedDims isReduced, checkReduce(args));
  MD_STREAM(args);
  std::vector<int64_t> xs = rowMajorStrides(args.x.shape);
  std::vector<int64_t> keptShape, keptStrides;
  for (size_t i = 0; i < args.x.shape.size(); ++i)
    if (!isReduced[i]) {
      keptShape.push_back(args.x.shape[i]);
      keptStrides.push_back(xs[i]);
    }
  k::Strided kept, reduced;
  int64_t reducedN = 0;
  MD_RETURN_IF_ERROR(splitDims("reduce", args.x.shape, isReduced, keptShape,
                               keptStrides, kept, reduced, reducedN));
  // A mean over zero elements is 0 / 0 = NaN, as in PyTorch.
  double divisor = args.kind == ReduceKind::mean
                       ? double(reducedCount(args.x.shape, isReduced))
                       : 1.0;
  MD_LAUNCH(k::reduceSum(args.x.data, dt(args.x), args.out.data, dt(args.out),
                         kept, args.out.numel(), reduced, reducedN, divisor,
                         s),
            "reduce");
  return absl::OkStatus();
}

absl::Status CudaBackend::reduceGrad(const ReduceGradArgs &args) {
  MD_ASSIGN_OR_RETURN(ReducedDims isReduced, checkReduceGrad(args));
  MD_STREAM(args);
  const Shape kept = keptShape(args.dx.shape, isReduced);
  MD_ASSIGN_OR_RETURN(k::Strided space,
                      strided("reduce_grad", args.dx.shape,
                              broadcastStrides(kept, args.dx.shape)));
  const bool mean = args.kind == ReduceKind::mean;
  MD_LAUNCH(k::broadcastTo(args.dy.data, dt(args.dy), args.dx.data,
                           dt(args.dx), space, args.dx.numel(), mean,
                           float(reducedCount(args.dx.shape, isReduced)), s),
            "reduce_grad");
  return absl::OkStatus();
}

// g summed over its extra leading dims and every dim where out has 1.
absl::Status CudaBackend::sumTo(const SumToArgs &args) {
  MD_RETURN_IF_ERROR(checkSumTo(args));
  MD_STREAM(args);
  const Shape &gs = args.g.shape, &os = args.out.shape;
  const size_t lead = gs.size() - os.size();
  std::vector<int64_t> gStrides = rowMajorStrides(gs);
  std::vector<bool> isReduced(gs.size());
  std::vector<int64_t> keptShape(os.begin(), os.end()), keptStrides;
  for (size_t i = 0; i < gs.size(); ++i)
    isReduced[i] = i < lead || os[i - lead] == 1;
  for (size_t i = 0; i < os.size(); ++i)
    keptStrides.push_back(os[i] == 1 ? 0 : gStrides[lead + i]);
  k::Strided kept, reduced;
  int64_t reducedN = 0;
  MD_RETURN_IF_ERROR(splitDims("sum_to", gs, isReduced, keptShape, keptStrides,
                               kept, reduced, reducedN));
  MD_LAUNCH(k::reduceSum(args.g.data, dt(args.g), args.out.data, dt(args.out),
                         kept, args.out.numel(), reduced, reducedN, 1.0, s),
            "sum_to");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

// The per-step scalars as runtime/cpu/Optimizer.cpp takes them
// (OptimizerScalars.h); the kernels repeat its f32 operations.
absl::Status CudaBackend::adamwUpdate(const AdamWArgs &args) {
  MD_RETURN_IF_ERROR(checkAdamW(args));
  MD_STREAM(args);
  const AdamWScalars sc = adamwScalars(args);
  MD_LAUNCH(k::adamw(args.param.data, dt(args.param), args.grad.data,
                     dt(args.grad), args.m.as<const float>(),
                     args.v.as<const float>(), args.newParam.data,
                     dt(args.newParam), args.newM.as<float>(),
                     args.newV.as<float>(), args.param.numel(), sc, s),
            "adamw_update");
  return absl::OkStatus();
}

absl::Status CudaBackend::sgdUpdate(const SgdArgs &args) {
  MD_RETURN_IF_ERROR(checkSgd(args));
  MD_STREAM(args);
  const SgdScalars sc = sgdScalars(args);
  const float *buf =
      sc.useMomentum ? args.momentumBuffer->as<const float>() : nullptr;
  float *newBuf = sc.useMomentum ? args.newMomentumBuffer->as<float>() : nullptr;
  MD_LAUNCH(k::sgd(args.param.data, dt(args.param), args.grad.data,
                   dt(args.grad), buf, args.newParam.data, dt(args.newParam),
                   newBuf, args.param.numel(), sc, s),
            "sgd_update");
  return absl::OkStatus();
}

// f64 sums of squares, one slot per block, the tensors one launch after
// another: a fixed order, so the same inputs give the same bits.
absl::Status CudaBackend::globalNorm(const GlobalNormArgs &args) {
  MD_RETURN_IF_ERROR(checkGlobalNorm(args));
  MD_STREAM(args);
  Scratch partials(s);
  MD_RETURN_IF_ERROR(partials.allocate(k::kNormPartials * 8, true));
  for (const TensorRef &t : args.inputs)
    MD_LAUNCH(k::normPartials(t.data, dt(t), t.numel(), partials.as<double>(),
                              s),
              "global_norm");
  MD_LAUNCH(k::normFinish(partials.as<double>(), args.out.as<float>(),
                          args.squared, s),
            "global_norm finish");
  return absl::OkStatus();
}

absl::Status CudaBackend::clip(const ClipArgs &args) {
  MD_RETURN_IF_ERROR(checkClip(args));
  MD_STREAM(args);
  for (size_t i = 0; i < args.grads.size(); ++i)
    MD_LAUNCH(k::clip(args.grads[i].data, dt(args.grads[i]), args.outs[i].data,
                      dt(args.outs[i]), args.grads[i].numel(),
                      args.norm.as<const float>(), float(args.maxNorm), s),
              "clip");
  return absl::OkStatus();
}

} // namespace md::cuda
