//===- Passes.td - md's passes ------------------------------*- tablegen -*-===//
//
// One `def` per pass, each implemented in its own passes/<Name>.cpp. The
// order they run in is docs/passes.md's table and passes/Pipeline.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef MD_PASSES_TD
#define MD_PASSES_TD

include "mlir/Pass/PassBase.td"

#endif // MD_PASSES_TD
