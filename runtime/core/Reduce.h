//===- Reduce.h - the element-wise reduction every host comm shares -*- C++ -*-===//
//
// A collective's reduction on the host: out[j] = src[0][j] op src[1][j] op
// ... op src[n-1][j], accumulated in that order. Every comm that reduces in
// host memory (shm, gloo) calls this one function, so that the same inputs
// give the same bits whichever comm carried them:
//  - f32 adds, multiplies and compares in f32; bf16 and f16 are widened to
//    f32, accumulated there and rounded once at the end (round to nearest
//    even);
//  - max and min let a NaN win, as torch.max does;
//  - integers wrap around (two's complement), as in NCCL;
//  - avg is the sum divided by n; for integers the division truncates
//    toward zero.
//
// Those are the operations of the element-by-element loop, in its order;
// Reduce.cpp runs them a block of elements at a time, vectorised.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_REDUCE_H
#define MD_RUNTIME_CORE_REDUCE_H

#include <cstdint>
#include <vector>

#include "runtime/core/Comm.h"
#include "runtime/core/Tensor.h"

namespace md::runtime {

/// Reduces `len` elements of `dtype` from each of `srcs` (at least one) into
/// `out`, in the order of `srcs`. `out` may be one of the sources, exactly
/// (same address), but must not overlap them otherwise.
void ReduceInOrder(DType dtype, ReduceOp op,
                   const std::vector<const void *> &srcs, void *out,
                   int64_t len);
/// The same on `n` sources at `srcs`, without a vector: what the comms call
/// per chunk.
void ReduceInOrder(DType dtype, ReduceOp op, const void *const *srcs, int n,
                   void *out, int64_t len);

/// ReduceInOrder with the kernels of the baseline ISA (SSE2 on x86-64),
/// whatever the CPU has; ReduceInOrder picks the AVX2 ones where it can.
/// Both give the same bits; this is for the tests that check so.
void ReduceInOrderBaseline(DType dtype, ReduceOp op, const void *const *srcs,
                           int n, void *out, int64_t len);

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_REDUCE_H
