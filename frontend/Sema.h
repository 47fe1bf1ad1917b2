//===- Sema.h - values, numbers and shapes of the model generator -*- C++
//-*-===//
//
// Helpers shared by the IR generators (ModelGen.h, RecipeEmitter.h, Plans.cpp):
// compile-time numbers (hyper-parameters, dims), the formatting of tensor
// types as the language writes them (`f32[8, 768]`), and numpy broadcasting
// of shapes.
//
//===----------------------------------------------------------------------===//

#ifndef MD_FRONTEND_SEMA_H
#define MD_FRONTEND_SEMA_H

#include <cstdint>
#include <optional>
#include <string>

#include "frontend/AST.h"
#include "frontend/Diagnostics.h"

#include "dialect/MdOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

namespace md::frontend {

/// A compile-time number: an int64 or a double. `dynamic` marks a number that
/// depends on the batch size `B` when no train fixes it.
struct Num {
  bool isInt = true;
  int64_t i = 0;
  double f = 0;
  bool dynamic = false;

  static Num integer(int64_t v) {
    Num n;
    n.i = v;
    n.f = static_cast<double>(v);
    return n;
  }
  static Num real(double v) {
    Num n;
    n.isInt = false;
    n.f = v;
    return n;
  }
  static Num dynamicBatch() {
    Num n;
    n.dynamic = true;
    return n;
  }
  double value() const { return isInt ? static_cast<double>(i) : f; }
};

/// "3", "0.02", "1e-05" (floats always show a '.' or an exponent), "B".
std::string formatNum(const Num &n);

/// Outcome of arithmetic on two numbers.
struct NumResult {
  std::optional<Num> value;
  std::string error; // set when value is empty
};

/// `a op b` for op in + - * /. Integer division must be exact; integer
/// overflow and division by zero are errors.
NumResult applyNumBinary(BinaryOp op, const Num &a, const Num &b);

/// `-n`; negating the most negative integer is an overflow error.
NumResult applyNumNeg(const Num &n);

/// The spelling of an operator: "+", "@", "==".
const char *binaryOpSpelling(BinaryOp op);

/// The element type for a dtype of the language (f32 bf16 f16 i32 i64), or
/// null when `dtype` is none of them.
mlir::Type parseDtype(mlir::MLIRContext *context, llvm::StringRef dtype);

/// "f32", "bf16", "f16", "i32", "i64".
std::string dtypeName(mlir::Type elementType);

/// `f32[8, 1024, 768]`, `f32[]` for a scalar, `?` for a dynamic dim.
std::string formatType(mlir::RankedTensorType type);

/// numpy broadcasting of two shapes: the dialect's, shared with md.add's
/// verifier.
using ::md::broadcastShapes;

/// Dims are compatible when equal or when either is dynamic.
bool dimsCompatible(int64_t a, int64_t b);

/// Runs `fn` on each of `settings` (a train's settings, a plan's options, a
/// record's fields) whose key is one of `keys` and not set before; reports
/// the others as an unknown or repeated `what` ("train setting", "plan
/// option", "precision field").
void forEachKnownSetting(Diagnostics &diags, llvm::ArrayRef<Setting> settings,
                         llvm::StringRef what,
                         llvm::ArrayRef<llvm::StringRef> keys,
                         llvm::function_ref<void(const Setting &)> fn);

} // namespace md::frontend

#endif // MD_FRONTEND_SEMA_H
