//===- ASTDump.cpp - the AST as indented text (mdc --emit=ast) ------------===//
//
// One node per line, children indented by two spaces, declarations in source
// order with their line. Expressions print in a prefix form that shows the
// tree: `(+ x (* 2 y))`, `(- x)`, `(not c)`, calls as `f(a, k = v)`, members
// as `wte.weight`, `(tuple a b)`, lists `[a, b]`, records `{k = v}`, sizes
// `(size 25 MiB 26214400)`. Integers print as written, floats in their
// shortest round-tripping form with a '.' or exponent (`1.0`, `0.0006`,
// `1e-8`). The output is stable: lit tests check it.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "frontend/AST.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Casting.h"
#include "llvm/Support/SourceMgr.h"

using namespace md::frontend;
using llvm::raw_ostream;

namespace {

/// The shortest form that reads back as `value`, like Python's repr: fixed
/// notation for exponents -4 to 15 (with `.0` when it would look like an
/// integer: `1.0`, `2000.0`, `0.0006`), else a plain exponent (`1e-8`).
std::string formatFloat(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value < 0 ? "-inf" : "inf";
  char buf[400];
  int precision = 1;
  for (; precision < 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, value);
    if (std::strtod(buf, nullptr) == value)
      break;
  }
  std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, value);
  std::string s = buf;
  size_t e = s.find('e');
  int exponent = std::atoi(s.c_str() + e + 1);
  if (exponent >= -4 && exponent < 16) {
    int decimals = std::max(0, precision - 1 - exponent);
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, value);
    s = buf;
    if (s.find('.') == std::string::npos)
      s += ".0";
    return s;
  }
  // 1e-08 -> 1e-8, 1.5e+20 -> 1.5e20.
  return s.substr(0, e) + "e" + std::to_string(exponent);
}

void printString(raw_ostream &os, llvm::StringRef s) {
  os << '"';
  for (char c : s) {
    switch (c) {
    case '"': os << "\\\""; break;
    case '\\': os << "\\\\"; break;
    case '\n': os << "\\n"; break;
    case '\t': os << "\\t"; break;
    default:
      if (llvm::isPrint(c))
        os << c;
      else
        os << "\\x" << llvm::hexdigit(((unsigned char)c) >> 4, true)
           << llvm::hexdigit(((unsigned char)c) & 15, true);
    }
  }
  os << '"';
}

llvm::StringRef binaryOpSpelling(BinaryOp op) {
  switch (op) {
  case BinaryOp::Add: return "+";
  case BinaryOp::Sub: return "-";
  case BinaryOp::Mul: return "*";
  case BinaryOp::Div: return "/";
  case BinaryOp::Rem: return "%";
  case BinaryOp::MatMul: return "@";
  case BinaryOp::Eq: return "==";
  case BinaryOp::Ne: return "!=";
  case BinaryOp::Lt: return "<";
  case BinaryOp::Le: return "<=";
  case BinaryOp::Gt: return ">";
  case BinaryOp::Ge: return ">=";
  case BinaryOp::And: return "and";
  case BinaryOp::Or: return "or";
  }
  return "?";
}

void printExpr(raw_ostream &os, const Expr *expr);

void printArgs(raw_ostream &os, const std::vector<Argument> &args) {
  os << '(';
  llvm::interleaveComma(args, os, [&](const Argument &arg) {
    if (!arg.name.empty())
      os << arg.name << " = ";
    printExpr(os, arg.value.get());
  });
  os << ')';
}

void printExpr(raw_ostream &os, const Expr *expr) {
  if (!expr) {
    os << "<null>";
    return;
  }
  switch (expr->kind) {
  case Expr::Kind::Number: {
    auto *e = llvm::cast<NumberExpr>(expr);
    if (e->isInteger)
      os << e->intValue;
    else
      os << formatFloat(e->floatValue);
    return;
  }
  case Expr::Kind::String:
    printString(os, llvm::cast<StringExpr>(expr)->value);
    return;
  case Expr::Kind::Bool:
    os << (llvm::cast<BoolExpr>(expr)->value ? "true" : "false");
    return;
  case Expr::Kind::Name:
    os << llvm::cast<NameExpr>(expr)->name;
    return;
  case Expr::Kind::Member: {
    auto *e = llvm::cast<MemberExpr>(expr);
    printExpr(os, e->base.get());
    os << '.' << e->member;
    return;
  }
  case Expr::Kind::Call: {
    auto *e = llvm::cast<CallExpr>(expr);
    os << e->callee;
    printArgs(os, e->args);
    return;
  }
  case Expr::Kind::Unary: {
    auto *e = llvm::cast<UnaryExpr>(expr);
    os << '(' << (e->op == UnaryOp::Neg ? "-" : "not") << ' ';
    printExpr(os, e->operand.get());
    os << ')';
    return;
  }
  case Expr::Kind::Binary: {
    auto *e = llvm::cast<BinaryExpr>(expr);
    os << '(' << binaryOpSpelling(e->op) << ' ';
    printExpr(os, e->lhs.get());
    os << ' ';
    printExpr(os, e->rhs.get());
    os << ')';
    return;
  }
  case Expr::Kind::Tuple: {
    os << "(tuple";
    for (const ExprPtr &element : llvm::cast<TupleExpr>(expr)->elements) {
      os << ' ';
      printExpr(os, element.get());
    }
    os << ')';
    return;
  }
  case Expr::Kind::List: {
    os << '[';
    llvm::interleaveComma(llvm::cast<ListExpr>(expr)->elements, os,
                          [&](const ExprPtr &e) { printExpr(os, e.get()); });
    os << ']';
    return;
  }
  case Expr::Kind::Size: {
    auto *e = llvm::cast<SizeExpr>(expr);
    os << "(size ";
    if (e->value == std::floor(e->value) && std::fabs(e->value) < 1e15)
      os << static_cast<int64_t>(e->value);
    else
      os << formatFloat(e->value);
    os << ' ' << e->unit << ' ' << e->bytes << ')';
    return;
  }
  case Expr::Kind::Index: {
    auto *e = llvm::cast<IndexExpr>(expr);
    os << "(index ";
    printExpr(os, e->base.get());
    for (const IndexItem &item : e->items) {
      os << ' ';
      switch (item.kind) {
      case IndexItem::Kind::Ellipsis:
        os << "...";
        break;
      case IndexItem::Kind::Position:
        printExpr(os, item.position.get());
        break;
      case IndexItem::Kind::Range:
        os << "(range ";
        for (const ExprPtr *part : {&item.start, &item.end, &item.step}) {
          if (part != &item.start)
            os << ' ';
          if (*part)
            printExpr(os, part->get());
          else
            os << '_';
        }
        os << ')';
        break;
      }
    }
    os << ')';
    return;
  }
  case Expr::Kind::Record: {
    os << '{';
    llvm::interleaveComma(llvm::cast<RecordExpr>(expr)->fields, os,
                          [&](const Setting &field) {
                            os << field.key << " = ";
                            printExpr(os, field.value.get());
                          });
    os << '}';
    return;
  }
  }
}

void printType(raw_ostream &os, const TypeExpr &type) {
  os << type.dtype << '[';
  llvm::interleaveComma(type.dims, os,
                        [&](const ExprPtr &e) { printExpr(os, e.get()); });
  os << ']';
}

class Dumper {
public:
  Dumper(raw_ostream &os, const llvm::SourceMgr *sourceMgr)
      : os(os), sourceMgr(sourceMgr) {}

  void dump(const Module &module) {
    os << "Module\n";
    // Declarations in source order, whatever their kind.
    struct Decl {
      const char *ptr;
      const BlockDecl *block;
      const TrainDecl *train;
      const PlanDecl *plan;
    };
    std::vector<Decl> decls;
    for (const BlockDecl &b : module.blocks)
      decls.push_back({b.loc.getPointer(), &b, nullptr, nullptr});
    for (const TrainDecl &t : module.trains)
      decls.push_back({t.loc.getPointer(), nullptr, &t, nullptr});
    for (const PlanDecl &p : module.plans)
      decls.push_back({p.loc.getPointer(), nullptr, nullptr, &p});
    std::stable_sort(decls.begin(), decls.end(),
                     [](const Decl &a, const Decl &b) {
                       return std::less<const char *>()(a.ptr, b.ptr);
                     });
    for (const Decl &d : decls) {
      if (d.block)
        dumpBlock(*d.block, 1);
      else if (d.train)
        dumpTrain(*d.train, 1);
      else
        dumpPlan(*d.plan, 1);
    }
  }

private:
  raw_ostream &indent(unsigned level) { return os.indent(2 * level); }

  void printLine(llvm::SMLoc loc) {
    if (!sourceMgr || !loc.isValid() || !sourceMgr->FindBufferContainingLoc(loc))
      return;
    os << " (line " << sourceMgr->FindLineNumber(loc) << ')';
  }

  void dumpBlock(const BlockDecl &decl, unsigned level) {
    indent(level) << (decl.isModel ? "ModelDecl " : "BlockDecl ") << decl.name;
    printLine(decl.loc);
    os << '\n';
    for (const HyperParam &hp : decl.hyperParams) {
      indent(level + 1) << "HyperParam " << hp.name;
      if (hp.defaultValue) {
        os << " = ";
        printExpr(os, hp.defaultValue.get());
      }
      os << '\n';
    }
    for (const ParamDecl &param : decl.params) {
      indent(level + 1) << "ParamDecl " << param.name << ": ";
      if (param.isRaw) {
        printType(os, param.type);
        if (param.init) {
          os << " init ";
          printExpr(os, param.init.get());
        }
      } else {
        os << param.layer;
        printArgs(os, param.args);
        if (param.repeat) {
          os << '[';
          printExpr(os, param.repeat.get());
          os << ']';
        }
      }
      if (param.frozen)
        os << " frozen";
      os << '\n';
    }
    if (decl.forward) {
      indent(level + 1) << "ForwardDecl";
      printLine(decl.forward->loc);
      os << '\n';
      for (const ForwardArg &arg : decl.forward->args) {
        indent(level + 2) << "Arg " << arg.name;
        if (arg.type) {
          os << ": ";
          printType(os, *arg.type);
        }
        os << '\n';
      }
      dumpBody(decl.forward->body, level + 2);
    }
  }

  /// One `<label> key = value` line per setting of a train or option of a
  /// plan.
  void dumpSettings(const std::vector<Setting> &settings, const char *label,
                    unsigned level) {
    for (const Setting &setting : settings) {
      indent(level) << label << ' ' << setting.key << " = ";
      printExpr(os, setting.value.get());
      os << '\n';
    }
  }

  void dumpTrain(const TrainDecl &train, unsigned level) {
    indent(level) << "TrainDecl";
    printLine(train.loc);
    os << '\n';
    dumpSettings(train.settings, "Setting", level + 1);
    dumpBody(train.body, level + 1);
  }

  void dumpPlan(const PlanDecl &plan, unsigned level) {
    indent(level) << "PlanDecl " << plan.name;
    if (!plan.extends.empty())
      os << " extends " << plan.extends;
    printLine(plan.loc);
    os << '\n';
    dumpSettings(plan.options, "Option", level + 1);
  }

  void dumpBody(const Body &body, unsigned level) {
    for (const StmtPtr &stmt : body)
      dumpStmt(stmt.get(), level);
  }

  void dumpStmt(const Stmt *stmt, unsigned level) {
    indent(level);
    switch (stmt->kind) {
    case Stmt::Kind::Let: {
      auto *s = llvm::cast<LetStmt>(stmt);
      os << "Let ";
      llvm::interleaveComma(s->targets, os,
                            [&](const LetStmt::Target &t) { os << t.name; });
      os << " = ";
      printExpr(os, s->value.get());
      os << '\n';
      return;
    }
    case Stmt::Kind::Return: {
      auto *s = llvm::cast<ReturnStmt>(stmt);
      os << "Return ";
      llvm::interleaveComma(s->values, os,
                            [&](const ExprPtr &e) { printExpr(os, e.get()); });
      os << '\n';
      return;
    }
    case Stmt::Kind::Expr:
      os << "Expr ";
      printExpr(os, llvm::cast<ExprStmt>(stmt)->expr.get());
      os << '\n';
      return;
    case Stmt::Kind::If: {
      auto *s = llvm::cast<IfStmt>(stmt);
      os << "If ";
      printExpr(os, s->condition.get());
      os << '\n';
      indent(level + 1) << "Then\n";
      dumpBody(s->thenBody, level + 2);
      if (s->hasElse) {
        indent(level + 1) << "Else\n";
        dumpBody(s->elseBody, level + 2);
      }
      return;
    }
    case Stmt::Kind::For: {
      auto *s = llvm::cast<ForStmt>(stmt);
      os << "For " << s->var << " in ";
      printExpr(os, s->lo.get());
      os << " .. ";
      printExpr(os, s->hi.get());
      os << '\n';
      dumpBody(s->body, level + 1);
      return;
    }
    case Stmt::Kind::Every: {
      auto *s = llvm::cast<EveryStmt>(stmt);
      os << "Every ";
      printExpr(os, s->period.get());
      os << ' ' << s->unit << '\n';
      dumpBody(s->body, level + 1);
      return;
    }
    case Stmt::Kind::Stop:
      os << "Stop\n";
      return;
    case Stmt::Kind::Save:
      os << "Save checkpoint";
      printArgs(os, llvm::cast<SaveStmt>(stmt)->args);
      os << '\n';
      return;
    }
  }

  raw_ostream &os;
  const llvm::SourceMgr *sourceMgr;
};

} // namespace

void md::frontend::dumpAST(const Module &module, llvm::raw_ostream &os) {
  Dumper(os, module.sourceMgr).dump(module);
}
