//===- VecMathIsa.h - one ISA's array loops for VecMath -*- C++ -*-===//
//
// Included by one source file per ISA (VecMath*.cpp), each compiled with that
// ISA's flags so that sleef.h declares its vector types' functions. A file
// defines VM_VEC (the vector type), VM_WIDTH, VM_LOAD/VM_STORE and the two
// SLEEF functions, then includes this to get `ExpArray` and `TanhArray`.
//
//===----------------------------------------------------------------------===//

#include <cstdint>
#include <cstring>

namespace {

template <typename F> void mapArray(const float *x, float *y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + VM_WIDTH <= n; i += VM_WIDTH)
    VM_STORE(y + i, f(VM_LOAD(x + i)));
  if (i < n) {
    // The tail through the same function, so an element's bits never depend
    // on where it sits; zeros pad the unused lanes.
    float in[VM_WIDTH] = {}, out[VM_WIDTH];
    std::memcpy(in, x + i, (n - i) * sizeof(float));
    VM_STORE(out, f(VM_LOAD(in)));
    std::memcpy(y + i, out, (n - i) * sizeof(float));
  }
}

} // namespace
