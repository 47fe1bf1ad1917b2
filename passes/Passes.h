//===- Passes.h - md's passes -----------------------------------*- C++ -*-===//

#ifndef MD_PASSES_PASSES_H
#define MD_PASSES_PASSES_H

#include "dialect/MdOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Pass/Pass.h"

namespace md {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace md

#endif // MD_PASSES_PASSES_H
