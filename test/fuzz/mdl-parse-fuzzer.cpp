//===- mdl-parse-fuzzer.cpp - libFuzzer target for the .mdl parser --------===//
//
// Feeds arbitrary bytes, as a program of the compile library
// (compile/Source.h), through the lexer, the parser and dumpAST, with
// diagnostics and the dump going to a null stream. Any crash, hang, sanitizer
// report or runaway memory is a bug: the parser must reject bad input with
// diagnostics, never by failing. Built with clang++ -fsanitize=fuzzer,address,
// undefined from compile/Source.cpp and frontend/{Lexer,Parser,ASTDump}.cpp
// (see CMakeLists.txt).
//
//===----------------------------------------------------------------------===//

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "compile/Source.h"
#include "frontend/AST.h"
#include "frontend/Diagnostics.h"
#include "frontend/Parser.h"

#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  md::Source source = md::Source::fromText(
      "fuzz.mdl", llvm::StringRef(reinterpret_cast<const char *>(data), size));
  llvm::SourceMgr sourceMgr;
  unsigned bufferId = md::addSource(source, sourceMgr);
  llvm::raw_null_ostream null;
  md::frontend::Diagnostics diags(sourceMgr, null);
  std::unique_ptr<md::frontend::Module> module =
      md::frontend::parseModule(bufferId, diags);
  if (!module)
    std::abort(); // parseModule always returns a module
  md::frontend::dumpAST(*module, null);
  return 0;
}
