//===- sgemm_bench.cpp - OpenBLAS sgemm GFLOP/s, for bench/cpu_step.sh ----===//
//
//   md-sgemm-bench [--config PxT]... [--reps R] [--min-ms MS] SHAPE...
//
// Times row-major cblas_sgemm (C = A B, alpha 1, beta 0, packed leading
// dims) for every SHAPE, `MxNxK` with an optional `:nn`, `:nt`, `:tn` or
// `:tt` for op(A) and op(B), under every configuration `PxT`: P processes
// running the same sgemm at the same time, each with T OpenBLAS threads
// (default: 1x1, 1x2, 2x1). Each configuration runs in forked children (the
// parent never calls BLAS, so no BLAS thread pool is forked); the children
// warm up, meet, calibrate a number of calls that lasts at least --min-ms
// (default 50), then time --reps repetitions (default 5) of that many calls.
// A process's rate is 2 M N K / (the best repetition's time per call); a
// configuration's rate is the sum over its processes.
//
// Output: comment lines starting with '#', then one line per shape and
// configuration:
//
//   sgemm M N K OPS PROCS THREADS CALLS BEST_MS GFLOPS
//
// BEST_MS is the slowest process's best time per call; GFLOPS the sum of
// the processes' rates (1e9 FLOP/s).
//
//===----------------------------------------------------------------------===//

#include <cblas.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/GemmShape.h"

namespace {

using md::bench::GemmShape;

struct Config {
  int procs = 1, threads = 1;
};

struct Result {
  double bestSeconds = 0; // per call
  int64_t calls = 0;
};

[[noreturn]] void usage(const char *message) {
  if (message)
    std::fprintf(stderr, "md-sgemm-bench: %s\n", message);
  std::fprintf(stderr, "usage: md-sgemm-bench [--config PxT]... [--reps R] "
                       "[--min-ms MS] MxNxK[:nn|nt|tn|tt]...\n");
  std::exit(2);
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void sgemm(const GemmShape &s, const float *a, const float *b, float *c) {
  // Row-major: op(A) is m x k, op(B) k x n; A stored k x m when transposed.
  // The shapes were parsed with every dim at most INT_MAX.
  int m = int(s.m), n = int(s.n), k = int(s.k);
  int lda = s.ta ? m : k, ldb = s.tb ? k : n;
  cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
              s.tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb,
              0.0f, c, n);
}

/// One process of a configuration: returns its best time per call. `ready`
/// is written once warmed up; `go` is read before calibrating.
Result measure(const GemmShape &s, int threads, int reps, double minSeconds,
               int ready, int go) {
  openblas_set_num_threads(threads);
  std::vector<float> a(size_t(s.m) * s.k), b(size_t(s.k) * s.n),
      c(size_t(s.m) * s.n);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float &x : a)
    x = u(rng);
  for (float &x : b)
    x = u(rng);
  sgemm(s, a.data(), b.data(), c.data()); // warm-up: pages, thread pool
  char byte = 1;
  if (write(ready, &byte, 1) != 1 || read(go, &byte, 1) != 1)
    std::exit(3);

  Result r;
  double t0 = now();
  sgemm(s, a.data(), b.data(), c.data());
  double one = std::max(now() - t0, 1e-7);
  r.calls = std::max<int64_t>(1, int64_t(std::ceil(minSeconds / one)));
  r.bestSeconds = 1e300;
  for (int rep = 0; rep < reps; ++rep) {
    t0 = now();
    for (int64_t i = 0; i < r.calls; ++i)
      sgemm(s, a.data(), b.data(), c.data());
    r.bestSeconds = std::min(r.bestSeconds, (now() - t0) / double(r.calls));
  }
  volatile float sink = c[0]; // keep the products
  (void)sink;
  return r;
}

/// Runs `config` in forked children; false if one fails.
bool run(const GemmShape &s, const Config &config, int reps, double minSeconds,
         std::vector<Result> &results) {
  int ready[2], go[2], out[2];
  if (pipe(ready) != 0 || pipe(go) != 0 || pipe(out) != 0)
    return false;
  std::vector<pid_t> children;
  for (int p = 0; p < config.procs; ++p) {
    pid_t pid = fork();
    if (pid < 0)
      return false;
    if (pid == 0) {
      close(ready[0]);
      close(go[1]);
      close(out[0]);
      Result r = measure(s, config.threads, reps, minSeconds, ready[1], go[0]);
      ssize_t n = write(out[1], &r, sizeof r);
      _exit(n == ssize_t(sizeof r) ? 0 : 3);
    }
    children.push_back(pid);
  }
  close(ready[1]);
  close(go[0]);
  close(out[1]);
  bool ok = true;
  char byte = 0;
  for (int p = 0; p < config.procs; ++p) // every child warmed up
    ok = ok && read(ready[0], &byte, 1) == 1;
  for (int p = 0; ok && p < config.procs; ++p) // then all start together
    ok = write(go[1], &byte, 1) == 1;
  close(go[1]);
  results.clear();
  for (int p = 0; ok && p < config.procs; ++p) {
    Result r;
    ok = read(out[0], &r, sizeof r) == ssize_t(sizeof r);
    results.push_back(r);
  }
  close(ready[0]);
  close(out[0]);
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<Config> configs;
  std::vector<GemmShape> shapes;
  std::vector<std::string> names;
  int reps = 5;
  double minMs = 50;
  md::bench::BenchArgs args(argc, argv, usage);
  while (args.next()) {
    std::string arg = args.arg();
    if (arg == "--help" || arg == "-h") {
      usage(nullptr);
    } else if (arg == "--config") {
      Config c;
      const char *v = args.value();
      if (std::sscanf(v, "%dx%d", &c.procs, &c.threads) != 2 || c.procs < 1 ||
          c.threads < 1)
        usage("--config takes PROCSxTHREADS, e.g. 2x1");
      configs.push_back(c);
    } else if (arg == "--reps") {
      reps = std::atoi(args.value());
      if (reps < 1)
        usage("--reps must be at least 1");
    } else if (arg == "--min-ms") {
      minMs = std::atof(args.value());
      if (!(minMs >= 0))
        usage("--min-ms must be >= 0");
    } else if (!arg.empty() && arg[0] == '-') {
      usage(("unknown option " + arg).c_str());
    } else {
      GemmShape s;
      if (!md::bench::ParseGemmShape(arg.c_str(), s, INT_MAX))
        usage(("bad shape " + arg).c_str());
      shapes.push_back(s);
    }
  }
  if (shapes.empty())
    usage("no shape given");
  if (configs.empty())
    configs = {{1, 1}, {1, 2}, {2, 1}};

  std::printf("# blas: %s\n", openblas_get_config());
  std::printf("# online cpus: %ld, reps %d, min %.0f ms per rep\n",
              sysconf(_SC_NPROCESSORS_ONLN), reps, minMs);
  std::printf("# sgemm M N K OPS PROCS THREADS CALLS BEST_MS GFLOPS\n");
  std::fflush(stdout); // before forking
  for (const GemmShape &s : shapes)
    for (const Config &c : configs) {
      std::vector<Result> results;
      if (!run(s, c, reps, minMs / 1e3, results)) {
        std::fprintf(stderr,
                     "md-sgemm-bench: %lldx%lldx%lld under %dx%d failed\n",
                     static_cast<long long>(s.m), static_cast<long long>(s.n),
                     static_cast<long long>(s.k), c.procs, c.threads);
        return 1;
      }
      double flops = 2.0 * s.m * s.n * s.k, gflops = 0, worst = 0;
      int64_t calls = 0;
      for (const Result &r : results) {
        gflops += flops / r.bestSeconds / 1e9;
        worst = std::max(worst, r.bestSeconds);
        calls = std::max(calls, r.calls);
      }
      std::printf("sgemm %lld %lld %lld %s %d %d %lld %.4f %.2f\n",
                  static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), s.ops().c_str(), c.procs,
                  c.threads, static_cast<long long>(calls), worst * 1e3,
                  gflops);
      std::fflush(stdout);
    }
  return 0;
}
