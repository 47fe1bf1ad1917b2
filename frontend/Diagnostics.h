//===- Diagnostics.h - .mdl diagnostics through llvm::SourceMgr -*- C++ -*-===//
//
// Every frontend message goes through here: `file:line:col: error: message`,
// the source line and a caret, then any notes. Errors are counted so that the
// driver can exit 1 after reporting as many as recovery allows; past the
// error limit (clang's -ferror-limit; mdc --error-limit, 20 by default) the
// rest are counted but not shown, and one line says so.
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
    silenced = errorLimit != 0 && numErrors > errorLimit;
    if (!silenced) {
      print(loc, llvm::SourceMgr::DK_Error, message);
    } else if (numErrors == errorLimit + 1) {
      // Where the first error not shown is.
      print(loc, llvm::SourceMgr::DK_Error,
            llvm::Twine("too many errors emitted, stopping now "
                        "(--error-limit ") +
                llvm::Twine(errorLimit) + "; 0: no limit)");
    }
  }
  void warning(llvm::SMLoc loc, const llvm::Twine &message) {
    silenced = errorLimit != 0 && numErrors > errorLimit;
    if (!silenced)
      print(loc, llvm::SourceMgr::DK_Warning, message);
  }
  /// A note belongs to the error or warning before it, and is shown with it.
  void note(llvm::SMLoc loc, const llvm::Twine &message) {
    if (!silenced)
      print(loc, llvm::SourceMgr::DK_Note, message);
  }

  /// Errors shown at most; 0: no limit.
  void setErrorLimit(unsigned limit) { errorLimit = limit; }
  unsigned getErrorLimit() const { return errorLimit; }

  unsigned getNumErrors() const { return numErrors; }
  bool hasErrors() const { return numErrors != 0; }
  llvm::SourceMgr &getSourceMgr() { return sourceMgr; }

private:
  /// A message without a location is about the whole file or the command
  /// line (no model, a bad -D, an unknown --plan): it reads
  /// `file: error: message` rather than `<unknown>:0: error: message`.
  /// Like the located ones, it goes to the SourceMgr's handler when one is
  /// set (`mdc --check` collects diagnostics that way).
  void print(llvm::SMLoc loc, llvm::SourceMgr::DiagKind kind,
             const llvm::Twine &message) {
    if (loc.isValid() || sourceMgr.getNumBuffers() == 0) {
      sourceMgr.PrintMessage(os, loc, kind, message);
      return;
    }
    llvm::StringRef file =
        sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID())
            ->getBufferIdentifier();
    llvm::SMDiagnostic diag(file, kind, message.str());
    if (llvm::SourceMgr::DiagHandlerTy handler = sourceMgr.getDiagHandler()) {
      handler(diag, sourceMgr.getDiagContext());
      return;
    }
    diag.print(nullptr, os);
  }

  llvm::SourceMgr &sourceMgr;
  llvm::raw_ostream &os;
  unsigned numErrors = 0;
  unsigned errorLimit = 20;
  bool silenced = false; // the last error or warning was not shown
};

} // namespace md::frontend

#endif // MD_FRONTEND_DIAGNOSTICS_H
