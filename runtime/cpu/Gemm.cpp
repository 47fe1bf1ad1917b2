//===- Gemm.cpp - the CPU backend's GEMM: oneDNN, OpenBLAS, or loops ------===//
//
// Which libraries can run the f32 GEMM is a build choice (MD_CPU_GEMM in
// runtime/cpu/CMakeLists.txt):
//   - oneDNN (the default when libdnnl is found): dnnl::matmul, whose JIT
//     kernels use the widest vector ISA the cap allows. On the 2-core
//     AVX-512 machine md is developed on it ran the GPT models' GEMM shapes
//     1.2-2.7x faster than Debian's OpenBLAS 0.3.21 with one thread
//     (docs/runtime-cpu.md). A matmul primitive is built once per shape,
//     strides, types, alpha and beta and cached per thread (building one
//     costs far more than running a small one; attention runs thousands of
//     small GEMMs per step).
//   - OpenBLAS beside it (found with it): cblas_sgemm, which the f32 path
//     takes at the avx2 level, where oneDNN 2.6.3 has only its gemm:jit
//     kernels and they ran the weight gradients' shapes (A^T B, K = B * T)
//     at 41-45 GFLOP/s against OpenBLAS's 84-102 with one thread; and only
//     while OpenBLAS runs its AVX2 kernels (Haswell, Zen): OpenBLAS picks
//     them when it is loaded, from OPENBLAS_CORETYPE or the CPU, before md
//     could cap it, so above the cap it is not used.
//   - OpenBLAS alone, or neither: cblas_sgemm, or plain loops with the same
//     interface, so the CPU backend exists everywhere, only slower.
//
// 16-bit operands (Gemm.h) run on oneDNN's bf16 matmul only where it runs
// on bf16 dot-product instructions; elsewhere they are widened. Debian's
// oneDNN 2.6.3 creates no bf16 matmul below AVX-512 (it throws), emulates
// one on plain AVX-512 at a fraction of its f32 speed, and has no f16
// matmul on the CPU (docs/runtime-cpu.md has the measurements). The probe
// finds this out by building one small matmul per type, so a later oneDNN
// that can do more is used without a change here.
//
// Every oneDNN call is inside a try: a dnnl::error becomes a Status.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Gemm.h"

#include "runtime/core/NumberFormat.h"
#include "runtime/cpu/CpuIsa.h"
#include "runtime/cpu/Storage.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#if MD_CPU_GEMM_ONEDNN
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>

#include <omp.h>

#include "oneapi/dnnl/dnnl.hpp"
#endif
#if MD_CPU_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace md::cpu {

using runtime::DType;

namespace {

/// The thread count setBlasThreads asked for (0: the library's default).
std::atomic<int> gThreads{0};

/// One GEMM as errors describe it.
struct GemmShape {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  DType at, bt;

  /// "C f32[64, 32] = A bf16[64, 16] x B^T bf16[32, 16] (lda 16, ldb 16,
  /// ldc 32, alpha 1, beta 0)"
  std::string str() const {
    return absl::StrFormat(
        "C f32[%d, %d] = A%s %s[%d, %d] x B%s %s[%d, %d] (lda %d, ldb %d, "
        "ldc %d, alpha %g, beta %g)",
        m, n, ta ? "^T" : "", runtime::dtypeName(at), ta ? k : m, ta ? m : k,
        tb ? "^T" : "", runtime::dtypeName(bt), tb ? n : k, tb ? k : n, lda,
        ldb, ldc, alpha, beta);
  }
};

std::string isaText() {
  const GemmPaths &p = gemmPaths();
  return p.isa;
}

absl::Status libraryError(const char *kernel, const char *what,
                          const GemmShape &s, const std::string &why) {
  return absl::InternalError(absl::StrFormat(
      "%s: %s failed for the GEMM %s on ISA %s: %s", kernel, what, s.str(),
      isaText(), why));
}

#if MD_CPU_GEMM_ONEDNN

std::string dnnlVersion() {
  const dnnl_version_t *v = dnnl_version();
  return absl::StrFormat("oneDNN %d.%d.%d", v->major, v->minor, v->patch);
}

std::string dnnlIsaName(dnnl_cpu_isa_t isa) {
  switch (isa) {
  case dnnl_cpu_isa_sse41:
    return "sse41";
  case dnnl_cpu_isa_avx:
    return "avx";
  case dnnl_cpu_isa_avx2:
    return "avx2";
  case dnnl_cpu_isa_avx2_vnni:
    return "avx2_vnni";
  case dnnl_cpu_isa_avx512_core:
    return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni:
    return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16:
    return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx:
    return "avx512_core_amx";
  default:
    return absl::StrFormat("0x%x", static_cast<int>(isa));
  }
}

/// Whether oneDNN's kernels may use bf16 dot products (the ISA values are
/// bit masks, each level containing the ones below it).
bool dnnlHasBf16Dot() {
  const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const unsigned bf16 = dnnl_cpu_isa_avx512_core_bf16;
  return (isa & bf16) == bf16;
}

/// What a cached primitive was built for.
using GemmKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int64_t, float, float, DType, DType>;

dnnl::memory::data_type dnnlType(DType t) {
  using dt = dnnl::memory::data_type;
  switch (t) {
  case DType::bf16:
    return dt::bf16;
  case DType::f16:
    return dt::f16;
  default:
    return dt::f32;
  }
}

/// One thread's oneDNN engine, stream and matmul primitives. Primitives may
/// run on several threads at once, but the memory objects whose handles are
/// reset on every call may not, hence one cache per thread.
class DnnlGemm {
public:
  /// Runs the GEMM; any oneDNN error is a Status.
  absl::Status run(const char *kernel, const GemmShape &s, const void *a,
                   const void *b, float *c) {
    try {
      if (!engine_) {
        engine_.emplace(dnnl::engine::kind::cpu, 0);
        stream_.emplace(*engine_);
      }
      applyThreads();
      GemmKey key{s.ta, s.tb,  s.m,     s.n,    s.k,  s.lda,
                  s.ldb, s.ldc, s.alpha, s.beta, s.at, s.bt};
      auto it = cache_.find(key);
      if (it == cache_.end())
        it = cache_.emplace(key, build(s)).first;
      Entry &e = *it->second;
      e.a.set_data_handle(const_cast<void *>(a));
      e.b.set_data_handle(const_cast<void *>(b));
      e.c.set_data_handle(c);
      std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}};
      if (e.scratchpad)
        args.emplace(DNNL_ARG_SCRATCHPAD,
                     dnnl::memory(*e.scratchpad, *engine_, scratch_.data()));
      e.matmul.execute(*stream_, args);
      stream_->wait();
    } catch (const dnnl::error &e) {
      return libraryError(kernel, (dnnlVersion() + "'s matmul").c_str(), s,
                          absl::StrFormat("%s (dnnl status %d)", e.what(),
                                          static_cast<int>(e.status)));
    } catch (const std::bad_alloc &) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s: out of host memory building oneDNN's matmul for the GEMM %s",
          kernel, s.str()));
    } catch (const std::exception &e) {
      return libraryError(kernel, (dnnlVersion() + "'s matmul").c_str(), s,
                          e.what());
    }
    return absl::OkStatus();
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

  std::unique_ptr<Entry> build(const GemmShape &s) {
    using dt = dnnl::memory::data_type;
    // Row-major with leading dims; a transposed operand swaps its strides.
    dnnl::memory::desc ad({s.m, s.k}, dnnlType(s.at),
                          s.ta ? dnnl::memory::dims{1, s.lda}
                               : dnnl::memory::dims{s.lda, 1});
    dnnl::memory::desc bd({s.k, s.n}, dnnlType(s.bt),
                          s.tb ? dnnl::memory::dims{1, s.ldb}
                               : dnnl::memory::dims{s.ldb, 1});
    dnnl::memory::desc cd({s.m, s.n}, dt::f32, dnnl::memory::dims{s.ldc, 1});
    dnnl::primitive_attr attr;
    // The scratchpad is ours, one per thread that only grows: left to
    // oneDNN, a primitive that needs one allocates it on every call.
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (s.alpha != 1.0f)
      attr.set_output_scales(0, {s.alpha});
    if (s.beta != 0.0f) {
      // dst = alpha A B + beta dst; with beta = 0 dst is never read.
      dnnl::post_ops ops;
      ops.append_sum(s.beta);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr,
                                    *engine_);
    auto e = std::make_unique<Entry>();
    e->matmul = dnnl::matmul(pd);
    e->a = dnnl::memory(ad, *engine_, DNNL_MEMORY_NONE);
    e->b = dnnl::memory(bd, *engine_, DNNL_MEMORY_NONE);
    e->c = dnnl::memory(cd, *engine_, DNNL_MEMORY_NONE);
    dnnl::memory::desc sd = pd.scratchpad_desc();
    if (sd.get_size() > 0) {
      e->scratchpad = sd;
      if (scratch_.size() < sd.get_size())
        scratch_.resize(sd.get_size());
    }
    return e;
  }

  std::optional<dnnl::engine> engine_;
  std::optional<dnnl::stream> stream_;
  std::map<GemmKey, std::unique_ptr<Entry>> cache_;
  std::vector<char> scratch_;
  int applied_ = 0;
};

DnnlGemm &threadGemm() {
  thread_local DnnlGemm gemm;
  return gemm;
}

/// Builds a 64x64x64 matmul of operand type `t` (no run): the
/// implementation's name, or why it cannot be created.
struct Probe {
  bool created = false;
  std::string impl; // "brg:avx512_core_bf16"
  std::string why;
};
Probe probe(DType t) {
  Probe p;
  try {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::memory::desc ad({64, 64}, dnnlType(t), dnnl::memory::dims{64, 1});
    dnnl::memory::desc cd({64, 64}, dnnl::memory::data_type::f32,
                          dnnl::memory::dims{64, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, ad, cd), engine);
    p.created = true;
    p.impl = pd.impl_info_str();
  } catch (const std::exception &e) {
    p.why = e.what();
  }
  return p;
}

#endif // MD_CPU_GEMM_ONEDNN

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

/// The f32 GEMM on gemmPaths()'s f32 path (both operands f32).
absl::Status f32Gemm(const char *kernel, const GemmShape &s, const float *a,
                     const float *b, float *c) {
  switch (gemmPaths().f32.path) {
  case GemmPath::onednn:
#if MD_CPU_GEMM_ONEDNN
    return threadGemm().run(kernel, s, a, b, c);
#else
    break;
#endif
  case GemmPath::openblas:
#if MD_CPU_HAVE_OPENBLAS
    cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
                s.tb ? CblasTrans : CblasNoTrans, int(s.m), int(s.n), int(s.k),
                s.alpha, a, int(s.lda), b, int(s.ldb), s.beta, c, int(s.ldc));
    return absl::OkStatus();
#else
    break;
#endif
  case GemmPath::widened:
  case GemmPath::reference:
    break;
  }
  // i-p-j order: the inner loop runs along rows of B and C.
  std::vector<float> row(s.n);
  for (int64_t i = 0; i < s.m; ++i) {
    std::fill(row.begin(), row.end(), 0.0f);
    for (int64_t p = 0; p < s.k; ++p) {
      float aip = s.ta ? a[p * s.lda + i] : a[i * s.lda + p];
      for (int64_t j = 0; j < s.n; ++j)
        row[j] += aip * (s.tb ? b[j * s.ldb + p] : b[p * s.ldb + j]);
    }
    for (int64_t j = 0; j < s.n; ++j)
      c[i * s.ldc + j] = s.alpha * row[j] +
                         (s.beta == 0.0f ? 0.0f : s.beta * c[i * s.ldc + j]);
  }
  return absl::OkStatus();
}

/// Rows `rows` of a row-major [*, cols] operand with leading dim `ld`,
/// widened into `out` as [rows, cols] (leading dim cols).
void widenRows(DType t, const void *base, int64_t ld, int64_t row0,
               int64_t rows, int64_t col0, int64_t cols, float *out) {
  const int64_t es = runtime::dtypeSize(t);
  const char *p = static_cast<const char *>(base);
  for (int64_t r = 0; r < rows; ++r)
    toF32(t, p + ((row0 + r) * ld + col0) * es, out + r * cols, cols);
}

/// Rows of C per widened block of A: about 64K elements of A at a time, so
/// the block stays in L2 while the GEMM reads it. A constant of the shape,
/// so the blocks, and the bits, are the same on every run.
int64_t widenedBlockRows(int64_t m, int64_t k) {
  constexpr int64_t kElements = 1 << 16;
  int64_t rows = std::max<int64_t>(16, kElements / std::max<int64_t>(k, 1));
  return std::min(rows, m);
}

/// The widened path: B widened whole (once per call), A a block of C's
/// rows at a time; f32 operands are used as they are.
absl::Status widenedGemm(const char *kernel, const GemmShape &s,
                         const GemmOperand &a, const GemmOperand &b,
                         float *c) {
  thread_local std::vector<float> bufA, bufB;
  try {
    const float *bf = static_cast<const float *>(b.data);
    int64_t ldb = s.ldb;
    if (b.dtype != DType::f32) {
      const int64_t rows = s.tb ? s.n : s.k, cols = s.tb ? s.k : s.n;
      bufB.resize(static_cast<size_t>(rows * cols));
      widenRows(b.dtype, b.data, s.ldb, 0, rows, 0, cols, bufB.data());
      bf = bufB.data();
      ldb = cols;
    }
    GemmShape f = s;
    f.ldb = ldb;
    f.at = f.bt = DType::f32;
    if (a.dtype == DType::f32)
      return f32Gemm(kernel, f, static_cast<const float *>(a.data), bf, c);
    const int64_t block = widenedBlockRows(s.m, s.k);
    bufA.resize(static_cast<size_t>(block * s.k));
    for (int64_t i0 = 0; i0 < s.m; i0 += block) {
      const int64_t rows = std::min(block, s.m - i0);
      GemmShape part = f;
      part.m = rows;
      if (!s.ta) {
        // op(A) rows [i0, i0 + rows) are A's rows.
        widenRows(a.dtype, a.data, s.lda, i0, rows, 0, s.k, bufA.data());
        part.lda = s.k;
      } else {
        // A is [k, m]: op(A)'s rows are A's columns [i0, i0 + rows).
        widenRows(a.dtype, a.data, s.lda, 0, s.k, i0, rows, bufA.data());
        part.lda = rows;
      }
      if (absl::Status st =
              f32Gemm(kernel, part, bufA.data(), bf, c + i0 * s.ldc);
          !st.ok())
        return st;
    }
  } catch (const std::bad_alloc &) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: out of host memory widening the operands of the GEMM %s", kernel,
        s.str()));
  }
  return absl::OkStatus();
}

bool is16(DType t) { return t == DType::bf16 || t == DType::f16; }

/// A MD_CPU_GEMM_* variable: "auto" (or unset) or one of `paths`;
/// anything else is auto with a warning in `warning`.
std::string forcedPath(const char *variable,
                       std::initializer_list<const char *> paths,
                       std::string *warning) {
  const char *env = std::getenv(variable);
  if (env == nullptr || *env == 0)
    return "auto";
  std::string v = absl::AsciiStrToLower(env);
  if (v == "auto")
    return v;
  std::string names = "auto";
  for (const char *p : paths) {
    if (v == p)
      return v;
    absl::StrAppend(&names, ", ", p);
  }
  *warning = absl::StrFormat("%s=%s is not one of %s: ignored", variable, env,
                             names);
  return "auto";
}

#if MD_CPU_HAVE_OPENBLAS
/// The ISA level OpenBLAS's kernels need (its core type as
/// openblas_get_corename names it): its AVX-512 cores, its AVX2 and AVX
/// ones (AVX alone counts as avx2: it is not in the sse41 baseline), and
/// the older ones.
IsaLevel openBlasLevel(const std::string &core) {
  for (const char *c : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (core == c)
      return IsaLevel::avx512;
  for (const char *c : {"Haswell", "Zen", "Sandybridge", "Bulldozer",
                        "Piledriver", "Steamroller", "Excavator"})
    if (core == c)
      return IsaLevel::avx2;
  return IsaLevel::sse41;
}
#endif

/// The f32 route: oneDNN, OpenBLAS at the avx2 level (its AVX2 kernels),
/// or what the build has.
GemmRoute f32Route(const CpuIsaConfig &isa) {
  GemmRoute r;
  std::string forced =
      forcedPath("MD_CPU_GEMM_F32", {"onednn", "openblas"}, &r.warning);
  std::string onednn, onednnWhy;
#if MD_CPU_GEMM_ONEDNN
  Probe f32 = probe(DType::f32);
  if (f32.created)
    onednn = absl::StrFormat("%s f32 matmul (%s)", dnnlVersion(), f32.impl);
  else
    onednnWhy = absl::StrFormat("%s creates no f32 matmul here: %s",
                                dnnlVersion(), f32.why);
#else
  onednnWhy = "this build has no oneDNN";
#endif
  std::string openblas, openblasWhy;
  bool openblasAvx2 = false;
#if MD_CPU_HAVE_OPENBLAS
  const std::string core = openblas_get_corename();
  const IsaLevel level = openBlasLevel(core);
  openblas = absl::StrFormat("cblas_sgemm (OpenBLAS, %s kernels)", core);
  openblasAvx2 = core == "Haswell" || core == "Zen";
  if (level > isa.effective)
    openblasWhy = absl::StrFormat(
        "OpenBLAS runs its %s kernels, above ISA %s (OPENBLAS_CORETYPE=%s "
        "caps it)",
        core, IsaLevelName(isa.effective),
        OpenBlasCoreType(isa.effective));
#else
  openblasWhy = "this build has no OpenBLAS";
#endif
  if (forced == "openblas") {
    if (!openblas.empty()) {
      r.path = GemmPath::openblas;
      r.text = absl::StrCat(openblas, ", MD_CPU_GEMM_F32=openblas");
      if (!openblasWhy.empty())
        r.warning = absl::StrCat("MD_CPU_GEMM_F32=openblas: ", openblasWhy);
      return r;
    }
    r.warning = absl::StrCat("MD_CPU_GEMM_F32=openblas: ", openblasWhy);
  } else if (forced == "onednn" && onednn.empty()) {
    r.warning = absl::StrCat("MD_CPU_GEMM_F32=onednn: ", onednnWhy);
  }
  const bool wantOpenBlas = forced == "auto" && isa.effective == IsaLevel::avx2 &&
                            openblasAvx2 && openblasWhy.empty();
  if (!wantOpenBlas && !onednn.empty()) {
    r.path = GemmPath::onednn;
    r.text = forced == "onednn" ? absl::StrCat(onednn, ", MD_CPU_GEMM_F32=onednn")
                                : onednn;
  } else if (!openblas.empty() && (wantOpenBlas || openblasWhy.empty())) {
    r.path = GemmPath::openblas;
    r.text = openblas;
  } else {
    r.path = GemmPath::reference;
    r.text = absl::StrFormat("plain loops (%s; %s)", onednnWhy, openblasWhy);
  }
  return r;
}

GemmPaths probePaths() {
  GemmPaths p;
  const CpuIsaConfig &isa = CpuIsa(); // applies the cap before any primitive
  p.isa = isa.str();
#if MD_CPU_GEMM_ONEDNN
  absl::StrAppend(&p.isa, ", oneDNN ",
                  dnnlIsaName(dnnl_get_effective_cpu_isa()));
#endif
  p.f32 = f32Route(isa);
  for (DType t : {DType::bf16, DType::f16}) {
    GemmRoute &r = t == DType::bf16 ? p.bf16 : p.f16;
    const char *variable =
        t == DType::bf16 ? "MD_CPU_GEMM_BF16" : "MD_CPU_GEMM_F16";
    const char *name = runtime::dtypeName(t);
    std::string warning;
    const std::string forced =
        forcedPath(variable, {"onednn", "widened"}, &warning);
#if MD_CPU_GEMM_ONEDNN
    const std::string version = dnnlVersion();
    Probe pr = probe(t);
    // bf16 runs on oneDNN where it has dot-product instructions for it;
    // oneDNN's emulation on plain AVX-512 is slower than widening.
    const bool fast = pr.created && (t != DType::bf16 || dnnlHasBf16Dot());
    if (forced == "onednn" || (forced == "auto" && fast)) {
      r.path = GemmPath::onednn;
      r.text = absl::StrFormat(
          "%s %s matmul (%s%s)", version, name,
          pr.created ? pr.impl : "not created at start",
          forced == "onednn" ? absl::StrCat(", ", variable, "=onednn") : "");
      if (!pr.created)
        warning = absl::StrFormat(
            "%s=onednn, but %s creates no %s matmul on this CPU (%s): its "
            "first %s GEMM fails",
            variable, version, name, pr.why, name);
      r.warning = warning;
      continue;
    }
    const std::string why =
        forced == "widened"
            ? absl::StrCat(variable, "=widened")
        : !pr.created
            ? absl::StrFormat("%s creates no %s matmul here", version, name)
            : absl::StrFormat("no %s dot-product instructions under ISA %s",
                              name, IsaLevelName(isa.effective));
#else
    if (forced == "onednn")
      warning = absl::StrFormat("%s=onednn, but this build has no oneDNN: "
                                "widened",
                                variable);
    const std::string why = "the build's GEMM library has no 16-bit GEMM";
#endif
    r.path = GemmPath::widened;
    r.text = absl::StrFormat(
        "widened to f32 in blocks, then the f32 GEMM (%s)", why);
    r.warning = warning;
  }
  return p;
}

absl::Status checkOperands(const char *kernel, const GemmShape &s,
                           const GemmOperand &a, const GemmOperand &b) {
  for (const GemmOperand *o : {&a, &b})
    if (!runtime::isFloat(o->dtype))
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: a GEMM operand of type %s (f32, bf16 or f16 only): %s", kernel,
          runtime::dtypeName(o->dtype), s.str()));
  return absl::OkStatus();
}

} // namespace

const GemmRoute &GemmPaths::of(DType dtype) const {
  switch (dtype) {
  case DType::bf16:
    return bf16;
  case DType::f16:
    return f16;
  default:
    return f32;
  }
}

std::string GemmPaths::str() const {
  return absl::StrFormat("f32: %s; bf16: %s; f16: %s", f32.text, bf16.text,
                         f16.text);
}

const GemmPaths &gemmPaths() {
  static const GemmPaths paths = probePaths();
  return paths;
}

absl::Status gemmVia(GemmPath path, const char *kernel, bool transA,
                     bool transB, int64_t m, int64_t n, int64_t k, float alpha,
                     const GemmOperand &a, const GemmOperand &b, float beta,
                     float *c, int64_t ldc) {
  const GemmShape s{transA, transB, m,     n,    k,       a.ld,
                    b.ld,   ldc,    alpha, beta, a.dtype, b.dtype};
  if (absl::Status st = checkOperands(kernel, s, a, b); !st.ok())
    return st;
  if (emptyProduct(m, n, k, beta, c, ldc))
    return absl::OkStatus();
  if (a.dtype == DType::f32 && b.dtype == DType::f32)
    return f32Gemm(kernel, s, static_cast<const float *>(a.data),
                   static_cast<const float *>(b.data), c);
  if (path == GemmPath::onednn && a.dtype == b.dtype && is16(a.dtype)) {
#if MD_CPU_GEMM_ONEDNN
    return threadGemm().run(kernel, s, a.data, b.data, c);
#else
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: this build's GEMM library (%s) has no %s GEMM", kernel,
        blasName(), runtime::dtypeName(a.dtype)));
#endif
  }
  return widenedGemm(kernel, s, a, b, c);
}

absl::Status gemm(const char *kernel, bool transA, bool transB, int64_t m,
                  int64_t n, int64_t k, float alpha, const GemmOperand &a,
                  const GemmOperand &b, float beta, float *c, int64_t ldc) {
  GemmPath path = GemmPath::widened;
  if (a.dtype == b.dtype)
    path = gemmPaths().of(a.dtype).path;
  return gemmVia(path, kernel, transA, transB, m, n, k, alpha, a, b, beta, c,
                 ldc);
}

absl::Status sgemm(const char *kernel, bool transA, bool transB, int64_t m,
                   int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc) {
  return gemm(kernel, transA, transB, m, n, k, alpha, {DType::f32, a, lda},
              {DType::f32, b, ldb}, beta, c, ldc);
}

void setBlasThreads(int threads) {
  gThreads.store(threads, std::memory_order_relaxed);
#if MD_CPU_HAVE_OPENBLAS
  if (threads > 0)
    openblas_set_num_threads(threads);
#endif
}

const char *blasName() {
#if MD_CPU_GEMM_ONEDNN && MD_CPU_HAVE_OPENBLAS
  static const std::string name = [] {
    // "OpenBLAS 0.3.21 NO_LAPACKE ...": its first two words.
    std::string config = openblas_get_config();
    size_t end = config.find(' ', config.find(' ') + 1);
    return dnnlVersion() + " matmul, " + config.substr(0, end);
  }();
  return name.c_str();
#elif MD_CPU_GEMM_ONEDNN
  static const std::string name = dnnlVersion() + " matmul";
  return name.c_str();
#elif MD_CPU_HAVE_OPENBLAS
  return openblas_get_config();
#else
  return "none (reference loops)";
#endif
}

} // namespace md::cpu
