//===- MdOptimizerOps.td - md optimizer ops ---------------------------*- tablegen -*-===//

#ifndef MD_DIALECT_MDOPTIMIZEROPS_TD
#define MD_DIALECT_MDOPTIMIZEROPS_TD

include "dialect/MdBase.td"
include "dialect/MdAttrs.td"
include "dialect/MdInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

#endif // MD_DIALECT_MDOPTIMIZEROPS_TD
