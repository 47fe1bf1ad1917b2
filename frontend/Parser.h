//===- Parser.h - .mdl lexer and recursive-descent parser -------*- C++ -*-===//

#ifndef MD_FRONTEND_PARSER_H
#define MD_FRONTEND_PARSER_H

#include <memory>

#include "frontend/AST.h"
#include "frontend/Diagnostics.h"

namespace md::frontend {

/// Parses buffer `bufferId` of the diagnostics' SourceMgr. Always returns a
/// Module holding what could be parsed; syntax errors are reported through
/// `diags` (several per file where recovery is sensible), never by crashing.
std::unique_ptr<Module> parseModule(unsigned bufferId, Diagnostics &diags);

} // namespace md::frontend

#endif // MD_FRONTEND_PARSER_H
