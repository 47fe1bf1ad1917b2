//===- PlanAccess.h - reading a verified plan's tables -*- C++ -*-===//
//
// The executor's parts read the plan's FlatBuffers tables directly (the
// loader has checked every index). Absent vectors and strings read as
// empty, and a plan dtype maps to the element type kernels see.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_PLANACCESS_H
#define MD_RUNTIME_EXEC_PLANACCESS_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/Tensor.h"
#include "runtime/plan/Schema.h"

namespace md::runtime::plan_access {

/// The length of a vector the plan may leave out.
template <typename T> uint32_t count(const flatbuffers::Vector<T> *v) {
  return v ? v->size() : 0;
}

/// A string the plan may leave out.
inline std::string str(const flatbuffers::String *s) {
  return s ? std::string(s->c_str(), s->size()) : std::string();
}

/// The plan's instructions block by block, in plan order; only those of
/// `opcode` when it is given. For the walks made once per run (evaluation,
/// saves, data feeds), not the step loop.
inline std::vector<const fb::Instruction *>
planInstructions(const fb::Plan &plan,
                 std::optional<fb::Opcode> opcode = std::nullopt) {
  std::vector<const fb::Instruction *> out;
  for (uint32_t b = 0; b < count(plan.blocks()); ++b) {
    const fb::Block *block = plan.blocks()->Get(b);
    for (uint32_t i = 0; i < count(block->instructions()); ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      if (!opcode || inst->opcode() == *opcode)
        out.push_back(inst);
    }
  }
  return out;
}

/// The runtime element type of a plan dtype; F64 and Bool are host scalars
/// that no kernel sees.
inline std::optional<DType> kernelDType(fb::DType t) {
  switch (t) {
  case fb::DType::F32:
    return DType::f32;
  case fb::DType::BF16:
    return DType::bf16;
  case fb::DType::F16:
    return DType::f16;
  case fb::DType::I32:
    return DType::i32;
  case fb::DType::I64:
    return DType::i64;
  default:
    return std::nullopt;
  }
}

} // namespace md::runtime::plan_access

#endif // MD_RUNTIME_EXEC_PLANACCESS_H
