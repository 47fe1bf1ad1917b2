//===- Summary.h - what a plan does, in numbers, at a world size -*- C++
//-*-===//
//
// The facts `mdrun --inspect` prints (and tests check): parameters, units,
// buckets, memory per rank, collectives per step, the recipe at W, and the
// hooks. Communication volumes follow nccl-tests: a collective's `bytes` is
// its full buffer (all_gather: the gathered result; reduce_scatter: the
// input; all_reduce, broadcast: the operand) and `busBytes` scales it by the
// bus factor of a ring of n ranks: all_reduce 2(n-1)/n, all_gather and
// reduce_scatter (n-1)/n, broadcast 1, barrier 0; nothing moves when n = 1.
//
// Floating-point operations count the GEMM-class opcodes only, as their
// CPU kernels execute them (docs/plan-format.md gives the formula per
// opcode): matmul 2·batch·M·N·K (+ batch·M·N with a bias), matmul_grad
// 4·batch·M·N·K (dA and dB; + batch·M·N with dbias), causal_attention
// 4·B·T²·C (Q K^T in full and P V), causal_attention_grad 10·B·T²·C (P
// recomputed, dV, dP, dQ, dK). Elementwise ops, norms, softmax, losses and
// optimizer updates are not counted.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_PLAN_SUMMARY_H
#define MD_RUNTIME_PLAN_SUMMARY_H

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/plan/Loader.h"
#include "runtime/plan/Memory.h"

namespace md::plan {

/// Bytes a collective instruction moves at `world` (see the file comment).
struct CollectiveVolume {
  int64_t bytes = 0;
  int64_t busBytes = 0;
};
CollectiveVolume CollectiveBytes(const fb::Plan &plan,
                                 const fb::Instruction &inst,
                                 const WorldBinding &world);

struct CollectiveTally {
  std::string kind; // "all_gather", "reduce_scatter", "all_reduce",
                    // "broadcast", "barrier"
  int64_t count = 0;
  int64_t bytes = 0;
  int64_t busBytes = 0;
};

/// Floating-point operations of one GEMM-class instruction (the formulas of
/// the file comment; 0 for every other opcode), saturating at INT64_MAX.
/// The plan must have loaded (its shapes are then known to be consistent).
int64_t InstructionFlops(const fb::Plan &plan, const fb::Instruction &inst);

/// The opcodes InstructionFlops counts.
bool CountsFlops(fb::Opcode opcode);

struct FlopTally {
  std::string kind;  // "matmul", "matmul_grad", "causal_attention",
                     // "causal_attention_grad"
  int64_t count = 0; // instructions run per step (on one rank)
  int64_t flops = 0; // their floating-point operations (on one rank)
};

struct BucketSummary {
  int64_t id = 0;          // -1: collectives without a bucket
  int64_t collectives = 0; // in one pass over the step program
  int64_t bytes = 0;       // their full-buffer bytes
  std::vector<std::string> kinds;
};

struct UnitSummary {
  int32_t id = 0;
  std::string name;
  int64_t numel = 0;
  int64_t params = 0; // parameters packed into it
};

struct HookSummary {
  int64_t period = 0; // 0: runs after every step (outside any every)
  std::string unit;   // "steps", "seconds", "minutes"
  std::vector<std::string>
      actions; // e.g. "log train", "evaluate data/val.bin", "if: print, exit"
  bool communicates = false;
};

struct PlanSummary {
  WorldBinding world;
  int64_t paramCount = 0;
  int64_t paramElements = 0;
  int64_t paramBytes = 0; // in their declared dtypes
  int64_t trainableElements = 0;
  std::vector<UnitSummary> units;
  int64_t persistentBuffers = 0;
  int64_t transientBuffers = 0;
  int64_t stepInstructions = 0;       // the step tree
  int64_t hookInstructions = 0;       // the hooks tree
  std::vector<BucketSummary> buckets; // by id, -1 first
  MemoryReport memory;
  /// One step at W: the step block once plus its micro-steps body A - 1
  /// times. Collectives inside an if or for of the step are not in here but
  /// in `conditionalCollectives`.
  std::vector<CollectiveTally> perStep; // every kind, in a fixed order
  CollectiveTally perStepTotal;
  int64_t conditionalCollectives = 0;
  /// Floating-point operations of one optimizer step at W, counted like
  /// `perStep` (step block once, micro-steps body A - 1 times, hooks not at
  /// all; GEMM-class instructions inside an if or for of the step are not
  /// counted but in `conditionalFlopInstructions`). Every rank runs the same
  /// shapes, so all ranks do W times one rank's count. Sums saturate at
  /// INT64_MAX.
  std::vector<FlopTally> flops; // every counted opcode, in a fixed order
  int64_t flopsPerRank = 0;     // the sum of `flops`
  int64_t flopsAllRanks = 0;    // flopsPerRank * W
  int64_t conditionalFlopInstructions = 0;
  std::vector<HookSummary> hooks;
};

/// Summarises `plan` at `worldSize` (errors of BindWorldSize and
/// PerRankMemory pass through).
absl::StatusOr<PlanSummary> Summarize(const LoadedPlan &plan,
                                      int64_t worldSize);

} // namespace md::plan

#endif // MD_RUNTIME_PLAN_SUMMARY_H
