//===- ExprText.h - expressions as diagnostics quote them -------*- C++ -*-===//
//
// The recipe and plan generators quote the values they reject
// (`'shard' must be ..., got zero3`, `'blocks(foo)': 'foo' is not ...`);
// this renders an expression back into source-like text for them.
//
//===----------------------------------------------------------------------===//

#ifndef MD_FRONTEND_EXPRTEXT_H
#define MD_FRONTEND_EXPRTEXT_H

#include <string>

#include "frontend/AST.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

namespace md::frontend {

/// `foo`, `3`, `2.5`, `-1`, `"path"`, `blocks(h, g)`, `25 MiB`; composite
/// values read as `a tuple`, `a list`, `a record`.
std::string describeExpr(const Expr &expr);

/// `a, b, c`: the names a diagnostic offers.
std::string joinNames(llvm::ArrayRef<llvm::StringRef> names);
std::string joinNames(llvm::ArrayRef<std::string> names);

} // namespace md::frontend

#endif // MD_FRONTEND_EXPRTEXT_H
