//===- cuda_gemm_bench.cpp - md's cuBLASLt GEMM alone, for gpu_gpt2.sh ----===//
//
//   md-gemm-bench-cuda [--device D] [--reps R] [--min-ms MS] [--dtype bf16|f32]
//                      [--peak-tflops X] SHAPE...
//
// Times CudaBackend::gemm — the exact cuBLASLt call md's matmul kernels
// make (row-major C = op(A) op(B), f32 accumulation, the heuristic cached
// per shape, md's workspace) — on one device for every SHAPE, `MxNxK`
// with an optional `:nn`, `:nt`, `:tn` or `:tt` for op(A) and op(B). Inputs
// are random; each shape warms up, calibrates a number of back-to-back
// calls lasting at least --min-ms (default 50), then times --reps
// repetitions (default 5) with CUDA events; the rate is 2 M N K / the best
// repetition's time per call.
//
// Output: comment lines starting with '#' (the device, its dense peak for
// the dtype when known or given), then one line per shape:
//
//   gemm M N K OPS DTYPE CALLS BEST_US TFLOPS
//
// Without a usable device it says why on stderr and exits 77 (a skip).
//
//===----------------------------------------------------------------------===//

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/GemmShape.h"
#include "runtime/core/NumberFormat.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Device.h"

namespace {

using md::runtime::DType;

using md::bench::GemmShape;

[[noreturn]] void usage(const char *message) {
  if (message)
    std::fprintf(stderr, "md-gemm-bench-cuda: %s\n", message);
  std::fprintf(
      stderr,
      "usage: md-gemm-bench-cuda [--device D] [--reps R] [--min-ms "
      "MS] [--dtype bf16|f32] [--peak-tflops X] MxNxK[:nn|nt|tn|tt]...\n");
  std::exit(2);
}

/// Dense peak TFLOP/s of the tensor cores for `dtype` inputs with f32
/// accumulation, from the vendor's data sheets (no sparsity); 0 when the
/// device is not in the table.
double knownPeak(const std::string &name, DType dtype) {
  struct Entry {
    const char *match;
    double bf16, tf32;
  };
  // More specific names first.
  static const Entry table[] = {
      {"H100 PCIe", 756.0, 378.0}, {"H100 NVL", 835.0, 418.0},
      {"H100", 989.4, 494.7},      {"H200", 989.4, 494.7},
      {"GH200", 989.4, 494.7},     {"B200", 2250.0, 1100.0},
      {"A100", 312.0, 156.0},      {"L40S", 362.0, 183.0},
      {"A10", 125.0, 62.5},        {"RTX 4090", 165.2, 82.6},
  };
  for (const Entry &e : table)
    if (name.find(e.match) != std::string::npos)
      return dtype == DType::bf16 ? e.bf16 : e.tf32;
  return 0;
}

struct Options {
  int device = 0, reps = 5;
  double minMs = 50, peak = 0;
  DType dtype = DType::bf16;
  std::vector<GemmShape> shapes;
};

/// The command line; exits through usage() on a bad one or --help.
Options parseOptions(int argc, char **argv) {
  Options o;
  md::bench::BenchArgs args(argc, argv, usage);
  while (args.next()) {
    std::string a = args.arg();
    if (a == "--device") {
      o.device = std::atoi(args.value());
    } else if (a == "--reps") {
      o.reps = std::atoi(args.value());
      if (o.reps < 1)
        usage("--reps must be positive");
    } else if (a == "--min-ms") {
      o.minMs = std::atof(args.value());
      if (!(o.minMs > 0))
        usage("--min-ms must be positive");
    } else if (a == "--peak-tflops") {
      o.peak = std::atof(args.value());
      if (!(o.peak > 0))
        usage("--peak-tflops must be positive");
    } else if (a == "--dtype") {
      std::string d = args.value();
      if (d == "bf16")
        o.dtype = DType::bf16;
      else if (d == "f32")
        o.dtype = DType::f32;
      else
        usage("--dtype is bf16 or f32");
    } else if (a == "-h" || a == "--help") {
      usage(nullptr);
    } else {
      GemmShape s;
      if (!md::bench::ParseGemmShape(a.c_str(), s))
        usage(("bad shape '" + a + "'").c_str());
      o.shapes.push_back(s);
    }
  }
  if (o.shapes.empty())
    usage("no shapes");
  return o;
}

const char *dtypeText(DType dtype) {
  return dtype == DType::bf16 ? "bf16" : "f32";
}

/// The '#' lines: the device, its peak (given, known or unknown) and what
/// is timed.
void printHeader(const Options &o, const md::cuda::DeviceInfo &info,
                 double peak) {
  std::printf("# device %d: %s, sm_%d%d, %d SMs, %.1f GiB\n", o.device,
              info.name.c_str(), info.computeMajor, info.computeMinor,
              info.multiprocessors,
              static_cast<double>(info.totalMemoryBytes) / (1 << 30));
  if (peak > 0)
    std::printf("# peak %.1f TFLOP/s dense %s (f32 accumulation)\n", peak,
                o.dtype == DType::bf16 ? "bf16" : "tf32");
  else
    std::printf("# peak unknown for this device (give --peak-tflops)\n");
  std::printf("# %s inputs and output, f32 accumulation, best of %d "
              "repetitions of >= %.0f ms\n",
              dtypeText(o.dtype), o.reps, o.minMs);
}

/// Times CudaBackend::gemm on one stream with CUDA events.
class GemmTimer {
public:
  GemmTimer(md::cuda::CudaBackend &backend, DType dtype)
      : backend_(backend), dtype_(dtype),
        stream_(static_cast<cudaStream_t>(
            backend.nativeStream(md::runtime::kComputeStream))) {
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~GemmTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }

  /// A device buffer of `n` normally distributed elements.
  absl::StatusOr<md::runtime::Buffer> randomBuffer(int64_t n) {
    const int64_t es = dtype_ == DType::bf16 ? 2 : 4;
    absl::StatusOr<md::runtime::Buffer> b = backend_.allocate(n * es);
    if (!b.ok())
      return b.status();
    std::vector<uint16_t> h16;
    std::vector<float> h32(static_cast<size_t>(n));
    for (float &v : h32)
      v = normal_(rng_);
    const void *src = h32.data();
    if (dtype_ == DType::bf16) {
      h16.resize(h32.size());
      for (size_t j = 0; j < h32.size(); ++j)
        h16[j] = md::runtime::f32ToBf16(h32[j]);
      src = h16.data();
    }
    absl::Status st =
        backend_.copy(b->data(), src, n * es, md::runtime::kComputeStream);
    if (st.ok())
      st = backend_.synchronize(md::runtime::kComputeStream);
    if (!st.ok())
      return st;
    return b;
  }

  /// Milliseconds for `calls` back-to-back GEMMs; exits on a failed call.
  double run(const md::cuda::CudaBackend::Gemm &g, int64_t calls) {
    cudaEventRecord(start_, stream_);
    for (int64_t j = 0; j < calls; ++j) {
      absl::Status st = backend_.gemm(g, md::runtime::kComputeStream);
      if (!st.ok()) {
        std::fprintf(stderr, "md-gemm-bench-cuda: %s\n",
                     std::string(st.message()).c_str());
        std::exit(1);
      }
    }
    cudaEventRecord(stop_, stream_);
    cudaEventSynchronize(stop_);
    float ms = 0;
    cudaEventElapsedTime(&ms, start_, stop_);
    return ms;
  }

private:
  md::cuda::CudaBackend &backend_;
  DType dtype_;
  cudaStream_t stream_;
  cudaEvent_t start_, stop_;
  std::mt19937 rng_{42};
  std::normal_distribution<float> normal_{0.0f, 1.0f};
};

/// Benchmarks shape `s` and prints its line; false (having said why) when
/// its buffers cannot be made.
bool benchShape(const Options &o, GemmTimer &timer, const GemmShape &s) {
  absl::StatusOr<md::runtime::Buffer> a = timer.randomBuffer(s.m * s.k),
                                      b = timer.randomBuffer(s.k * s.n),
                                      c = timer.randomBuffer(s.m * s.n);
  if (!a.ok() || !b.ok() || !c.ok()) {
    std::fprintf(stderr, "md-gemm-bench-cuda: %lldx%lldx%lld: %s\n",
                 static_cast<long long>(s.m), static_cast<long long>(s.n),
                 static_cast<long long>(s.k),
                 std::string((!a.ok()   ? a
                              : !b.ok() ? b
                                        : c)
                                 .status()
                                 .message())
                     .c_str());
    return false;
  }
  md::cuda::CudaBackend::Gemm g;
  g.transA = s.ta;
  g.transB = s.tb;
  g.m = s.m;
  g.n = s.n;
  g.k = s.k;
  g.a = a->data();
  g.b = b->data();
  g.c = c->data();
  g.lda = s.ta ? s.m : s.k;
  g.ldb = s.tb ? s.k : s.n;
  g.ldc = s.n;
  g.in = g.out = static_cast<int>(o.dtype);
  timer.run(g, 3); // warm-up and the heuristic's cache
  int64_t calls = 1;
  for (double ms = timer.run(g, calls); ms < o.minMs && calls < (1 << 20);
       ms = timer.run(g, calls))
    calls *= 2;
  double best = 1e30;
  for (int r = 0; r < o.reps; ++r)
    best = std::min(best, timer.run(g, calls) / static_cast<double>(calls));
  double tflops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) *
                  static_cast<double>(s.k) / (best * 1e-3) / 1e12;
  std::printf("gemm %lld %lld %lld %s %s %lld %.2f %.1f\n",
              static_cast<long long>(s.m), static_cast<long long>(s.n),
              static_cast<long long>(s.k), s.ops().c_str(), dtypeText(o.dtype),
              static_cast<long long>(calls), best * 1e3, tflops);
  std::fflush(stdout);
  return true;
}

} // namespace

int main(int argc, char **argv) {
  const Options o = parseOptions(argc, argv);
  absl::StatusOr<std::vector<md::cuda::DeviceInfo>> devices =
      md::cuda::queryDevices();
  if (!devices.ok() || o.device < 0 ||
      o.device >= static_cast<int>(devices->size())) {
    std::fprintf(
        stderr, "md-gemm-bench-cuda: no usable device %d: %s\n", o.device,
        devices.ok() ? "out of range"
                     : std::string(devices.status().message()).c_str());
    return 77;
  }
  const md::cuda::DeviceInfo &info = (*devices)[o.device];
  absl::StatusOr<std::unique_ptr<md::cuda::CudaBackend>> made =
      md::cuda::CudaBackend::create(o.device);
  if (!made.ok()) {
    std::fprintf(stderr, "md-gemm-bench-cuda: %s\n",
                 std::string(made.status().message()).c_str());
    return 77;
  }
  printHeader(o, info, o.peak > 0 ? o.peak : knownPeak(info.name, o.dtype));
  GemmTimer timer(**made, o.dtype);
  for (const GemmShape &s : o.shapes)
    if (!benchShape(o, timer, s))
      return 1;
  return 0;
}
