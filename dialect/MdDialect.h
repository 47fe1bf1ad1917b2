//===- MdDialect.h - the md dialect, its enums and attributes ---*- C++ -*-===//

#ifndef MD_DIALECT_MDDIALECT_H
#define MD_DIALECT_MDDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"

#include "dialect/MdDialect.h.inc"
#include "dialect/MdEnums.h.inc"

namespace mlir {
/// md's attributes have floating-point parameters (learning rates, betas);
/// MLIR parses those only as attributes, so teach the struct parser doubles.
template <>
struct FieldParser<llvm::APFloat> {
  static FailureOr<llvm::APFloat> parse(AsmParser &parser) {
    double value = 0;
    if (parser.parseFloat(value))
      return failure();
    return llvm::APFloat(value);
  }
};
} // namespace mlir

#define GET_ATTRDEF_CLASSES
#include "dialect/MdAttrs.h.inc"

#endif // MD_DIALECT_MDDIALECT_H
