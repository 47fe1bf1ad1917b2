//===- Gemm.cpp - the CPU backend's GEMM: oneDNN, OpenBLAS, or loops ------===//
//
// Which library runs sgemm is a build choice (MD_CPU_GEMM in
// runtime/cpu/CMakeLists.txt):
//   - oneDNN (the default when libdnnl is found): dnnl::matmul, whose JIT
//     kernels use the CPU's widest vector ISA. On the 2-core AVX-512 machine
//     md is developed on it ran the GPT models' GEMM shapes 1.2-2.7x faster
//     than Debian's OpenBLAS 0.3.21 with one thread (docs/runtime-cpu.md).
//     A matmul primitive is built once per shape, strides, alpha and beta and
//     cached per thread (building one costs far more than running a small
//     one; attention runs thousands of small GEMMs per step).
//   - OpenBLAS: cblas_sgemm.
//   - neither: plain loops with the same interface, so the CPU backend exists
//     everywhere, only slower.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Gemm.h"

#include "runtime/core/NumberFormat.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#if MD_CPU_GEMM_ONEDNN
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>

#include <omp.h>

#include "oneapi/dnnl/dnnl.hpp"
#elif MD_CPU_GEMM_OPENBLAS
#include <cblas.h>
#endif

namespace md::cpu {
namespace {

/// The thread count setBlasThreads asked for (0: the library's default).
std::atomic<int> gThreads{0};

#if MD_CPU_GEMM_ONEDNN

/// What a cached primitive was built for.
using GemmKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int64_t, float, float, bool>;

/// One thread's oneDNN engine, stream and matmul primitives. Primitives may
/// run on several threads at once, but the memory objects whose handles are
/// reset on every call may not, hence one cache per thread.
class DnnlGemm {
public:
  DnnlGemm() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  /// a and b are f32, or bf16 with `bf16`.
  void run(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
           float beta, float *c, int64_t ldc, bool bf16) {
    applyThreads();
    GemmKey key{transA, transB, m, n, k, lda, ldb, ldc, alpha, beta, bf16};
    auto it = cache_.find(key);
    if (it == cache_.end())
      it = cache_.emplace(key, build(key)).first;
    Entry &e = *it->second;
    e.a.set_data_handle(const_cast<void *>(a));
    e.b.set_data_handle(const_cast<void *>(b));
    e.c.set_data_handle(c);
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}};
    if (e.scratchpad)
      args.emplace(DNNL_ARG_SCRATCHPAD,
                   dnnl::memory(*e.scratchpad, engine_, scratch_.data()));
    e.matmul.execute(stream_, args);
    stream_.wait();
  }

private:
  struct Entry {
    dnnl::matmul matmul;
    dnnl::memory a, b, c;
    std::optional<dnnl::memory::desc> scratchpad;
  };

  // OpenMP's thread count is a per-thread setting: set it on the thread
  // that runs the GEMMs, whenever setBlasThreads changed it.
  void applyThreads() {
    int want = gThreads.load(std::memory_order_relaxed);
    if (want > 0 && want != applied_) {
      omp_set_num_threads(want);
      applied_ = want;
    }
  }

  std::unique_ptr<Entry> build(const GemmKey &key) {
    auto [transA, transB, m, n, k, lda, ldb, ldc, alpha, beta, bf16] = key;
    using dt = dnnl::memory::data_type;
    const dt in = bf16 ? dt::bf16 : dt::f32;
    // Row-major with leading dims; a transposed operand swaps its strides.
    dnnl::memory::desc ad({m, k}, in,
                          transA ? dnnl::memory::dims{1, lda}
                                 : dnnl::memory::dims{lda, 1});
    dnnl::memory::desc bd({k, n}, in,
                          transB ? dnnl::memory::dims{1, ldb}
                                 : dnnl::memory::dims{ldb, 1});
    dnnl::memory::desc cd({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    // The scratchpad is ours, one per thread that only grows: left to
    // oneDNN, a primitive that needs one allocates it on every call.
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (alpha != 1.0f)
      attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      // dst = alpha A B + beta dst; with beta = 0 dst is never read.
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr,
                                    engine_);
    auto e = std::make_unique<Entry>();
    e->matmul = dnnl::matmul(pd);
    e->a = dnnl::memory(ad, engine_, DNNL_MEMORY_NONE);
    e->b = dnnl::memory(bd, engine_, DNNL_MEMORY_NONE);
    e->c = dnnl::memory(cd, engine_, DNNL_MEMORY_NONE);
    dnnl::memory::desc sd = pd.scratchpad_desc();
    if (sd.get_size() > 0) {
      e->scratchpad = sd;
      if (scratch_.size() < sd.get_size())
        scratch_.resize(sd.get_size());
    }
    return e;
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<GemmKey, std::unique_ptr<Entry>> cache_;
  std::vector<char> scratch_;
  int applied_ = 0;
};

#endif

/// An empty product: nothing for m = 0 or n = 0; beta * C for k = 0 (GEMM
/// libraries disagree on k = 0 and refuse leading dims of 0). Returns
/// whether the product was empty.
bool emptyProduct(int64_t m, int64_t n, int64_t k, float beta, float *c,
                  int64_t ldc) {
  if (m == 0 || n == 0)
    return true;
  if (k != 0)
    return false;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
  return true;
}

#if MD_CPU_GEMM_ONEDNN
DnnlGemm &threadGemm() {
  thread_local DnnlGemm gemm;
  return gemm;
}
#endif

} // namespace

void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, float beta, float *c, int64_t ldc) {
  if (emptyProduct(m, n, k, beta, c, ldc))
    return;
#if MD_CPU_GEMM_ONEDNN
  threadGemm().run(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                   /*bf16=*/false);
#elif MD_CPU_GEMM_OPENBLAS
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
      c[i * ldc + j] =
          alpha * row[j] + (beta == 0.0f ? 0.0f : beta * c[i * ldc + j]);
  }
#endif
}

bool haveGemmBf16() {
#if MD_CPU_GEMM_ONEDNN
  return true;
#else
  return false;
#endif
}

void gemmBf16(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
              float alpha, const uint16_t *a, int64_t lda, const uint16_t *b,
              int64_t ldb, float beta, float *c, int64_t ldc) {
  if (emptyProduct(m, n, k, beta, c, ldc))
    return;
#if MD_CPU_GEMM_ONEDNN
  threadGemm().run(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                   /*bf16=*/true);
#else
  // Callers ask haveGemmBf16() first; widen rather than fail if one did not.
  auto widen = [](const uint16_t *p, int64_t rows, int64_t ld) {
    std::vector<float> w(rows * ld);
    for (int64_t i = 0; i < rows * ld; ++i)
      w[i] = runtime::bf16ToF32(p[i]);
    return w;
  };
  std::vector<float> wa = widen(a, transA ? k : m, lda);
  std::vector<float> wb = widen(b, transB ? n : k, ldb);
  sgemm(transA, transB, m, n, k, alpha, wa.data(), lda, wb.data(), ldb, beta, c,
        ldc);
#endif
}

void setBlasThreads(int threads) {
  gThreads.store(threads, std::memory_order_relaxed);
#if MD_CPU_GEMM_OPENBLAS
  openblas_set_num_threads(threads);
#endif
}

const char *blasName() {
#if MD_CPU_GEMM_ONEDNN
  static const std::string name = [] {
    const dnnl_version_t *v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." +
           std::to_string(v->minor) + "." + std::to_string(v->patch) +
           " matmul";
  }();
  return name.c_str();
#elif MD_CPU_GEMM_OPENBLAS
  return openblas_get_config();
#else
  return "none (reference loops)";
#endif
}

} // namespace md::cpu
