//===- Diagnostics.h - .mdl diagnostics through llvm::SourceMgr -*- C++ -*-===//
//
// Every frontend message goes through here: `file:line:col: error: message`,
// the source line and a caret, then any notes. Errors are counted so that the
// driver can exit 1 after reporting as many as recovery allows.
//
//===----------------------------------------------------------------------===//

#ifndef MD_FRONTEND_DIAGNOSTICS_H
#define MD_FRONTEND_DIAGNOSTICS_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/SMLoc.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

namespace md::frontend {

class Diagnostics {
public:
  explicit Diagnostics(llvm::SourceMgr &sourceMgr,
                       llvm::raw_ostream &os = llvm::errs())
      : sourceMgr(sourceMgr), os(os) {}

  void error(llvm::SMLoc loc, const llvm::Twine &message) {
    ++numErrors;
    print(loc, llvm::SourceMgr::DK_Error, message);
  }
  void warning(llvm::SMLoc loc, const llvm::Twine &message) {
    print(loc, llvm::SourceMgr::DK_Warning, message);
  }
  void note(llvm::SMLoc loc, const llvm::Twine &message) {
    print(loc, llvm::SourceMgr::DK_Note, message);
  }

  unsigned getNumErrors() const { return numErrors; }
  bool hasErrors() const { return numErrors != 0; }
  llvm::SourceMgr &getSourceMgr() { return sourceMgr; }

private:
  /// A message without a location (about the command line: `--plan x`)
  /// reads `error: message` rather than `<unknown>:0: error: message`.
  void print(llvm::SMLoc loc, llvm::SourceMgr::DiagKind kind,
             const llvm::Twine &message) {
    if (loc.isValid())
      sourceMgr.PrintMessage(os, loc, kind, message);
    else
      llvm::SMDiagnostic("", kind, message.str()).print(nullptr, os);
  }

  llvm::SourceMgr &sourceMgr;
  llvm::raw_ostream &os;
  unsigned numErrors = 0;
};

} // namespace md::frontend

#endif // MD_FRONTEND_DIAGNOSTICS_H
