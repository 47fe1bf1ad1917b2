//===- CostModel.h - time of collectives and compute ops -------*- C++ -*-===//
//
// The latency/bandwidth model md-bucketing chooses bucket boundaries with:
// a collective moving B bytes per rank over a link takes alpha + B / beta
// (Hockney's model, the one NCCL's tuner and nccl-tests' bus bandwidth are
// built on), and a compute op takes its FLOPs over a sustained rate. Times
// are integer nanoseconds so that every decision made with them is exact
// and the same on every machine.
//
//===----------------------------------------------------------------------===//

#ifndef MD_PASSES_ANALYSIS_COSTMODEL_H
#define MD_PASSES_ANALYSIS_COSTMODEL_H

#include "dialect/MdOps.h"
#include "dialect/PlanOptions.h"

#include "mlir/Support/LLVM.h"

namespace md {

struct CostModel {
  Interconnect link;
  /// Sustained compute rate of one rank, in TFLOP/s.
  double computeTflops;

  /// Nanoseconds to move `wireBytes` per rank in one collective.
  int64_t collectiveNs(int64_t wireBytes) const;
  /// Nanoseconds of `flops` floating-point operations.
  int64_t computeNs(int64_t flops) const;
  /// The bytes above which a collective's bandwidth term exceeds its latency
  /// (alpha x beta, Hockney's n_1/2): below it a collective is latency-bound
  /// and grouping it with others saves alpha each.
  int64_t latencyBoundBytes() const;
};

/// An estimate of the floating-point operations of `op` (and of the ops
/// nested in it): 2·M·N·K for a matrix product, twice that for its gradient,
/// 2·B·T²·D for causal attention (half of the T×T scores), one per output
/// element for every other compute op (elementwise and normalisation ops are
/// memory-bound; this is a lower bound), none for data movement, state and
/// collectives, and none for values whose size is symbolic in W.
int64_t estimateFlops(mlir::Operation *op);

} // namespace md

#endif // MD_PASSES_ANALYSIS_COSTMODEL_H
