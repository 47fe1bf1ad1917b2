//===- Source.h - a .mdl program to compile ---------------------*- C++ -*-===//
//
// The text of one .mdl file and the names it goes by, read from a file or
// standard input or held in memory, and how it enters the SourceMgr the
// frontend's diagnostics print through. It needs LLVM's Support library
// only, not MLIR, so that the parser's fuzz target (test/fuzz) builds it
// with its own compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MD_COMPILE_SOURCE_H
#define MD_COMPILE_SOURCE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/ErrorOr.h"
#include "llvm/Support/SourceMgr.h"

#include <string>

namespace md {

struct Source {
  /// The file as it was named ("-": standard input). The plan records it
  /// (Header.source_file) and messages about the file as a whole name it.
  std::string path;
  /// What located diagnostics call the file: `path`, or "<stdin>".
  std::string bufferName;
  std::string text;

  /// A program held in memory: `name` is its path and its buffer name.
  static Source fromText(llvm::StringRef name, llvm::StringRef text);
};

/// Reads `path` ("-": standard input).
llvm::ErrorOr<Source> readSource(llvm::StringRef path);

/// Adds a copy of `source`'s text to `sourceMgr` as a new buffer named
/// `source.bufferName` and returns the buffer's id.
unsigned addSource(const Source &source, llvm::SourceMgr &sourceMgr);

} // namespace md

#endif // MD_COMPILE_SOURCE_H
