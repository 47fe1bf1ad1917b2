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

#include "runtime/core/NumberFormat.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Device.h"

namespace {

using md::runtime::DType;

struct Shape {
  int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  std::string ops = "nn";
};

[[noreturn]] void usage(const char *message) {
  if (message)
    std::fprintf(stderr, "md-gemm-bench-cuda: %s\n", message);
  std::fprintf(stderr,
               "usage: md-gemm-bench-cuda [--device D] [--reps R] [--min-ms "
               "MS] [--dtype bf16|f32] [--peak-tflops X] MxNxK[:nn|nt|tn|tt]...\n");
  std::exit(2);
}

bool parseShape(const char *text, Shape &s) {
  long long m = 0, n = 0, k = 0;
  char ops[3] = {'n', 'n', 0};
  int used = 0;
  if (std::sscanf(text, "%lldx%lldx%lld%n", &m, &n, &k, &used) != 3)
    return false;
  if (text[used] == ':') {
    if (std::strlen(text + used + 1) != 2)
      return false;
    ops[0] = text[used + 1];
    ops[1] = text[used + 2];
  } else if (text[used] != '\0') {
    return false;
  }
  for (char c : {ops[0], ops[1]})
    if (c != 'n' && c != 't')
      return false;
  if (m < 1 || n < 1 || k < 1 || m > (1 << 20) || n > (1 << 20) ||
      k > (1 << 20))
    return false;
  s.m = m;
  s.n = n;
  s.k = k;
  s.ta = ops[0] == 't';
  s.tb = ops[1] == 't';
  s.ops = ops;
  return true;
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

} // namespace

int main(int argc, char **argv) {
  int device = 0, reps = 5;
  double minMs = 50, peak = 0;
  DType dtype = DType::bf16;
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char * {
      if (i + 1 >= argc)
        usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--device") {
      device = std::atoi(value());
    } else if (a == "--reps") {
      reps = std::atoi(value());
      if (reps < 1)
        usage("--reps must be positive");
    } else if (a == "--min-ms") {
      minMs = std::atof(value());
      if (!(minMs > 0))
        usage("--min-ms must be positive");
    } else if (a == "--peak-tflops") {
      peak = std::atof(value());
      if (!(peak > 0))
        usage("--peak-tflops must be positive");
    } else if (a == "--dtype") {
      std::string d = value();
      if (d == "bf16")
        dtype = DType::bf16;
      else if (d == "f32")
        dtype = DType::f32;
      else
        usage("--dtype is bf16 or f32");
    } else if (a == "-h" || a == "--help") {
      usage(nullptr);
    } else {
      Shape s;
      if (!parseShape(argv[i], s))
        usage(("bad shape '" + a + "'").c_str());
      shapes.push_back(s);
    }
  }
  if (shapes.empty())
    usage("no shapes");

  absl::StatusOr<std::vector<md::cuda::DeviceInfo>> devices =
      md::cuda::queryDevices();
  if (!devices.ok() || device < 0 ||
      device >= static_cast<int>(devices->size())) {
    std::fprintf(stderr, "md-gemm-bench-cuda: no usable device %d: %s\n",
                 device,
                 devices.ok() ? "out of range"
                              : std::string(devices.status().message()).c_str());
    return 77;
  }
  const md::cuda::DeviceInfo &info = (*devices)[device];
  absl::StatusOr<std::unique_ptr<md::cuda::CudaBackend>> made =
      md::cuda::CudaBackend::create(device);
  if (!made.ok()) {
    std::fprintf(stderr, "md-gemm-bench-cuda: %s\n",
                 std::string(made.status().message()).c_str());
    return 77;
  }
  md::cuda::CudaBackend &backend = **made;
  if (peak == 0)
    peak = knownPeak(info.name, dtype);
  std::printf("# device %d: %s, sm_%d%d, %d SMs, %.1f GiB\n", device,
              info.name.c_str(), info.computeMajor, info.computeMinor,
              info.multiprocessors,
              static_cast<double>(info.totalMemoryBytes) / (1 << 30));
  if (peak > 0)
    std::printf("# peak %.1f TFLOP/s dense %s (f32 accumulation)\n", peak,
                dtype == DType::bf16 ? "bf16" : "tf32");
  else
    std::printf("# peak unknown for this device (give --peak-tflops)\n");
  std::printf("# %s inputs and output, f32 accumulation, best of %d "
              "repetitions of >= %.0f ms\n",
              dtype == DType::bf16 ? "bf16" : "f32", reps, minMs);

  const int64_t es = dtype == DType::bf16 ? 2 : 4;
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  cudaStream_t stream = static_cast<cudaStream_t>(
      backend.nativeStream(md::runtime::kComputeStream));
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (const Shape &s : shapes) {
    int64_t na = s.m * s.k, nb = s.k * s.n, nc = s.m * s.n;
    auto fill = [&](int64_t n) -> absl::StatusOr<md::runtime::Buffer> {
      absl::StatusOr<md::runtime::Buffer> b = backend.allocate(n * es);
      if (!b.ok())
        return b.status();
      std::vector<uint16_t> h16;
      std::vector<float> h32(static_cast<size_t>(n));
      for (float &v : h32)
        v = normal(rng);
      const void *src = h32.data();
      if (dtype == DType::bf16) {
        h16.resize(h32.size());
        for (size_t j = 0; j < h32.size(); ++j)
          h16[j] = md::runtime::f32ToBf16(h32[j]);
        src = h16.data();
      }
      absl::Status st =
          backend.copy(b->data(), src, n * es, md::runtime::kComputeStream);
      if (st.ok())
        st = backend.synchronize(md::runtime::kComputeStream);
      if (!st.ok())
        return st;
      return b;
    };
    absl::StatusOr<md::runtime::Buffer> a = fill(na), b = fill(nb), c = fill(nc);
    if (!a.ok() || !b.ok() || !c.ok()) {
      std::fprintf(stderr, "md-gemm-bench-cuda: %lldx%lldx%lld: %s\n",
                   static_cast<long long>(s.m), static_cast<long long>(s.n),
                   static_cast<long long>(s.k),
                   std::string((!a.ok() ? a : !b.ok() ? b : c).status().message())
                       .c_str());
      return 1;
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
    g.in = g.out = static_cast<int>(dtype);
    auto run = [&](int64_t calls) -> double {
      cudaEventRecord(start, stream);
      for (int64_t j = 0; j < calls; ++j) {
        absl::Status st = backend.gemm(g, md::runtime::kComputeStream);
        if (!st.ok()) {
          std::fprintf(stderr, "md-gemm-bench-cuda: %s\n",
                       std::string(st.message()).c_str());
          std::exit(1);
        }
      }
      cudaEventRecord(stop, stream);
      cudaEventSynchronize(stop);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      return ms;
    };
    run(3); // warm-up and the heuristic's cache
    int64_t calls = 1;
    for (double ms = run(calls); ms < minMs && calls < (1 << 20);
         ms = run(calls))
      calls *= 2;
    double best = 1e30;
    for (int r = 0; r < reps; ++r)
      best = std::min(best, run(calls) / static_cast<double>(calls));
    double tflops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) *
                    static_cast<double>(s.k) / (best * 1e-3) / 1e12;
    std::printf("gemm %lld %lld %lld %s %s %lld %.2f %.1f\n",
                static_cast<long long>(s.m), static_cast<long long>(s.n),
                static_cast<long long>(s.k), s.ops.c_str(),
                dtype == DType::bf16 ? "bf16" : "f32",
                static_cast<long long>(calls), best * 1e3, tflops);
    std::fflush(stdout);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 0;
}
