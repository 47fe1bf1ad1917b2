//===- MdOptimizerOps.cpp - md optimizer ops -------------------------------------===//

#include "dialect/MdAsmUtils.h"
#include "dialect/MdOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace md;

#define GET_OP_CLASSES
#include "dialect/MdOptimizerOps.cpp.inc"
