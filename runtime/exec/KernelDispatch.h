//===- KernelDispatch.h - kernel instructions to Backend calls -*- C++ -*-===//
//
// The executor's decoding of a kernel instruction (an MD_KERNEL row of
// runtime/core/Opcodes.def): its operands and attribute slots go into the
// row's argument struct and the row's Backend entry runs it. The decoders
// are generated from the table, so an instruction is read with the layout
// the loader verified and the emitter wrote.
//
// What the decoding needs of the executor comes in a KernelContext: the
// backend, the tensor of every plan buffer, and the reads of the host
// scalars some kernels take as numbers (the optimizers' learning rate and
// step), and for an optimizer update with parameter groups the ranges of
// its operands each group holds.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_KERNELDISPATCH_H
#define MD_RUNTIME_EXEC_KERNELDISPATCH_H

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/core/Backend.h"
#include "runtime/exec/OptimizerGroups.h"
#include "runtime/plan/plan_generated.h"

namespace md::runtime {

struct KernelContext {
  Backend &backend;
  /// The tensor of plan buffer x is refs[x].
  absl::Span<const TensorRef> refs;
  /// The value of the one-element host scalar buffer x (MD_HOST_F and
  /// MD_HOST_I operands).
  absl::FunctionRef<absl::StatusOr<double>(int32_t)> readFloat;
  absl::FunctionRef<absl::StatusOr<int64_t>(int32_t)> readInt;
  /// The parameter-group ranges of this rank's operands of an optimizer
  /// update that names its unit (OptimizerGroups.h); null for the others.
  const std::vector<OptimizerSegment> *optimizerSegments = nullptr;
};

/// Whether `opcode` runs as one Backend kernel.
bool IsKernelOpcode(fb::Opcode opcode);

/// The Backend entry a kernel opcode calls ("matmul", "binary"), or nullptr
/// for an opcode that is not a kernel.
const char *KernelEntryName(fb::Opcode opcode);

/// Decodes `inst` into its argument struct and calls its Backend entry on
/// the instruction's stream, returning what the kernel returns. `inst`
/// comes from a verified plan; an operand list shorter than its fixed
/// operands is InvalidArgument, a non-kernel opcode Unimplemented.
absl::Status DispatchKernel(const KernelContext &ctx,
                            const fb::Instruction &inst);

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_KERNELDISPATCH_H
