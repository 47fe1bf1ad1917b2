//===- ExprText.cpp - expressions as diagnostics quote them ---------------===//

#include "frontend/ExprText.h"
#include "frontend/Sema.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Casting.h"

using namespace md::frontend;
using llvm::cast;

std::string md::frontend::joinNames(llvm::ArrayRef<llvm::StringRef> names) {
  return llvm::join(names, ", ");
}

std::string md::frontend::joinNames(llvm::ArrayRef<std::string> names) {
  return llvm::join(names, ", ");
}

std::string md::frontend::describeExpr(const Expr &expr) {
  switch (expr.kind) {
  case Expr::Kind::Number: {
    const auto &number = cast<NumberExpr>(expr);
    return formatNum(number.isInteger ? Num::integer(number.intValue)
                                      : Num::real(number.floatValue));
  }
  case Expr::Kind::String:
    return "\"" + cast<StringExpr>(expr).value + "\"";
  case Expr::Kind::Bool:
    return cast<BoolExpr>(expr).value ? "true" : "false";
  case Expr::Kind::Name:
    return cast<NameExpr>(expr).name;
  case Expr::Kind::Member: {
    const auto &member = cast<MemberExpr>(expr);
    return describeExpr(*member.base) + "." + member.member;
  }
  case Expr::Kind::Unary: {
    const auto &unary = cast<UnaryExpr>(expr);
    return (unary.op == UnaryOp::Neg ? "-" : "not ") +
           describeExpr(*unary.operand);
  }
  case Expr::Kind::Binary: {
    const auto &binary = cast<BinaryExpr>(expr);
    return describeExpr(*binary.lhs) + " " + binaryOpSpelling(binary.op) +
           " " + describeExpr(*binary.rhs);
  }
  case Expr::Kind::Call: {
    const auto &call = cast<CallExpr>(expr);
    std::string text = call.callee + "(";
    for (size_t i = 0; i < call.args.size(); ++i) {
      if (i)
        text += ", ";
      if (!call.args[i].name.empty())
        text += call.args[i].name + " = ";
      text += describeExpr(*call.args[i].value);
    }
    return text + ")";
  }
  case Expr::Kind::Size: {
    const auto &size = cast<SizeExpr>(expr);
    return formatNum(Num::real(size.value)) + " " + size.unit;
  }
  case Expr::Kind::Tuple:
    return "a tuple";
  case Expr::Kind::List:
    return "a list";
  case Expr::Kind::Record:
    return "a record";
  case Expr::Kind::Index: {
    const auto &index = cast<IndexExpr>(expr);
    std::string text = describeExpr(*index.base) + "[";
    for (size_t i = 0; i < index.items.size(); ++i) {
      const IndexItem &item = index.items[i];
      if (i)
        text += ", ";
      if (item.kind == IndexItem::Kind::Ellipsis)
        text += "...";
      else if (item.kind == IndexItem::Kind::Position)
        text += describeExpr(*item.position);
      else {
        if (item.start)
          text += describeExpr(*item.start);
        text += ":";
        if (item.end)
          text += describeExpr(*item.end);
        if (item.step)
          text += ":" + describeExpr(*item.step);
      }
    }
    return text + "]";
  }
  }
  return "an expression";
}
