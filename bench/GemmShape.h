//===- GemmShape.h - the SHAPE argument of md's GEMM benches ----*- C++ -*-===//
//
// md-sgemm-bench and md-gemm-bench-cuda both take GEMM shapes on their
// command lines as `MxNxK` with an optional `:nn`, `:nt`, `:tn` or `:tt`
// for op(A) and op(B); this parses that form once for both, and walks their
// hand-written option loops (BenchArgs).
//
//===----------------------------------------------------------------------===//

#ifndef MD_BENCH_GEMMSHAPE_H
#define MD_BENCH_GEMMSHAPE_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace md::bench {

/// Row-major C = op(A) op(B): op(A) is m x k, op(B) is k x n.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;

  /// op(A) and op(B) as the argument spells them: "nn", "nt", "tn" or "tt".
  std::string ops() const {
    return std::string{ta ? 't' : 'n', tb ? 't' : 'n'};
  }
};

/// Parses `MxNxK[:ops]` with every dimension in [1, maxDim]; false when
/// `text` is not of that form.
inline bool ParseGemmShape(const char *text, GemmShape &s,
                           int64_t maxDim = int64_t{1} << 20) {
  long long m = 0, n = 0, k = 0;
  char ops[3] = "nn";
  int used = 0;
  if (std::sscanf(text, "%lldx%lldx%lld%n", &m, &n, &k, &used) != 3)
    return false;
  if (text[used] == ':') {
    if (std::strlen(text + used + 1) != 2)
      return false;
    std::memcpy(ops, text + used + 1, 2);
  } else if (text[used] != '\0') {
    return false;
  }
  for (char c : {ops[0], ops[1]})
    if (c != 'n' && c != 't')
      return false;
  for (long long d : {m, n, k})
    if (d < 1 || d > maxDim)
      return false;
  s.m = m;
  s.n = n;
  s.k = k;
  s.ta = ops[0] == 't';
  s.tb = ops[1] == 't';
  return true;
}

/// The command line of a GEMM bench, one argument at a time: next() moves
/// to the next argument, value() takes the one after an option and calls
/// `usage` (which does not return) with "<option> needs a value" when there
/// is none.
class BenchArgs {
public:
  BenchArgs(int argc, char **argv, void (*usage)(const char *))
      : argc_(argc), argv_(argv), usage_(usage) {}

  bool next() { return ++i_ < argc_; }
  std::string arg() const { return argv_[i_]; }
  const char *value() {
    if (i_ + 1 >= argc_) {
      usage_((arg() + " needs a value").c_str());
      std::abort(); // usage exits
    }
    return argv_[++i_];
  }

private:
  int argc_;
  char **argv_;
  void (*usage_)(const char *);
  int i_ = 0;
};

} // namespace md::bench

#endif // MD_BENCH_GEMMSHAPE_H
