//===- PlanAccess.h - reading a verified plan's tables -*- C++ -*-===//
//
// The executor's parts read the plan's FlatBuffers tables directly (the
// loader has checked every index). Absent vectors and strings read as
// empty, and a plan dtype maps to the element type kernels see.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_PLANACCESS_H
#define MD_RUNTIME_CORE_PLANACCESS_H

#include <cstdint>
#include <optional>
#include <string>

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

#endif // MD_RUNTIME_CORE_PLANACCESS_H
