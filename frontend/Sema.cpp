//===- Sema.cpp - values, numbers and shapes of the model generator -------===//

#include "frontend/Sema.h"
#include "frontend/ExprText.h"
#include "runtime/core/EnumNames.h"
#include "runtime/core/ShapeRules.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace mlir;

namespace md::frontend {

std::string formatNum(const Num &n) {
  if (n.dynamic)
    return "B";
  if (n.isInt)
    return std::to_string(n.i);
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format("%g", n.f);
  if (std::isfinite(n.f) && s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

constexpr const char *kBinaryOpSpellings[] = {"+", "-",  "*",   "/", "@",
                                              "%", "==", "!=",  "<", "<=",
                                              ">", ">=", "and", "or"};
static_assert(md::runtime::namesEveryValue(kBinaryOpSpellings, BinaryOp::Or));

const char *binaryOpSpelling(BinaryOp op) {
  return md::runtime::enumName(kBinaryOpSpellings, op);
}

NumResult applyNumNeg(const Num &n) {
  NumResult result;
  Num neg = n;
  if (neg.isInt) {
    if (neg.i == INT64_MIN) {
      result.error = "integer overflow in -" + formatNum(n);
      return result;
    }
    neg.i = -neg.i;
    neg.f = static_cast<double>(neg.i);
  } else {
    neg.f = -neg.f;
  }
  result.value = neg;
  return result;
}

NumResult applyNumBinary(BinaryOp op, const Num &a, const Num &b) {
  NumResult result;
  if (a.dynamic || b.dynamic) {
    Num n = Num::dynamicBatch();
    n.isInt = a.isInt && b.isInt;
    result.value = n;
    return result;
  }
  if (a.isInt && b.isInt) {
    int64_t out = 0;
    switch (op) {
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::Mul: {
      bool overflow =
          op == BinaryOp::Add   ? __builtin_add_overflow(a.i, b.i, &out)
          : op == BinaryOp::Sub ? __builtin_sub_overflow(a.i, b.i, &out)
                                : __builtin_mul_overflow(a.i, b.i, &out);
      if (overflow)
        result.error = "integer overflow in " + std::to_string(a.i) + " " +
                       binaryOpSpelling(op) + " " + std::to_string(b.i);
      break;
    }
    case BinaryOp::Div:
      if (b.i == 0)
        result.error = "division by zero";
      else if ((a.i == INT64_MIN && b.i == -1) || a.i % b.i != 0)
        result.error = "integer division " + std::to_string(a.i) + " / " +
                       std::to_string(b.i) +
                       " is not exact (write a float, e.g. " +
                       std::to_string(a.i) + ".0 / " + std::to_string(b.i) +
                       ", for a fraction)";
      else
        out = a.i / b.i;
      break;
    default:
      result.error = std::string("'") + binaryOpSpelling(op) +
                     "' is not defined on numbers";
      break;
    }
    if (result.error.empty())
      result.value = Num::integer(out);
    return result;
  }
  double x = a.value(), y = b.value(), out = 0;
  switch (op) {
  case BinaryOp::Add:
    out = x + y;
    break;
  case BinaryOp::Sub:
    out = x - y;
    break;
  case BinaryOp::Mul:
    out = x * y;
    break;
  case BinaryOp::Div:
    if (y == 0) {
      result.error = "division by zero";
      return result;
    }
    out = x / y;
    break;
  default:
    result.error =
        std::string("'") + binaryOpSpelling(op) + "' is not defined on numbers";
    return result;
  }
  result.value = Num::real(out);
  return result;
}

Type parseDtype(MLIRContext *context, llvm::StringRef dtype) {
  if (dtype == "f32")
    return Float32Type::get(context);
  if (dtype == "bf16")
    return BFloat16Type::get(context);
  if (dtype == "f16")
    return Float16Type::get(context);
  if (dtype == "i32")
    return IntegerType::get(context, 32);
  if (dtype == "i64")
    return IntegerType::get(context, 64);
  return {};
}

std::string dtypeName(Type elementType) {
  if (elementType.isF32())
    return "f32";
  if (elementType.isBF16())
    return "bf16";
  if (elementType.isF16())
    return "f16";
  if (elementType.isInteger(32))
    return "i32";
  if (elementType.isInteger(64))
    return "i64";
  std::string s;
  llvm::raw_string_ostream os(s);
  elementType.print(os);
  return s;
}

std::string formatType(RankedTensorType type) {
  std::string s = dtypeName(type.getElementType()) + "[";
  bool first = true;
  for (int64_t dim : type.getShape()) {
    if (!first)
      s += ", ";
    first = false;
    s += ShapedType::isDynamic(dim) ? std::string("?") : std::to_string(dim);
  }
  return s + "]";
}

bool dimsCompatible(int64_t a, int64_t b) {
  return md::rules::DimsCompatible(a, b); // runtime/core/ShapeRules.h
}

void forEachKnownSetting(Diagnostics &diags, llvm::ArrayRef<Setting> settings,
                         llvm::StringRef what,
                         llvm::ArrayRef<llvm::StringRef> keys,
                         llvm::function_ref<void(const Setting &)> fn) {
  llvm::SmallVector<const Setting *> seen;
  for (const Setting &setting : settings) {
    if (!llvm::is_contained(keys, setting.key)) {
      diags.error(setting.keyLoc, "unknown " + what + " '" + setting.key +
                                      "'; expected one of: " + joinNames(keys));
      continue;
    }
    const Setting *const *previous = llvm::find_if(
        seen, [&](const Setting *s) { return s->key == setting.key; });
    if (previous != seen.end()) {
      diags.error(setting.keyLoc, what + " '" + setting.key + "' is set twice");
      diags.note((*previous)->keyLoc, "previous definition is here");
      continue;
    }
    seen.push_back(&setting);
    fn(setting);
  }
}

} // namespace md::frontend
