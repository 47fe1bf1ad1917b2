//===- Source.cpp - a .mdl program to compile -----------------------------===//

#include "compile/Source.h"

#include "llvm/Support/MemoryBuffer.h"

using namespace md;

Source Source::fromText(llvm::StringRef name, llvm::StringRef text) {
  return Source{name.str(), name.str(), text.str()};
}

llvm::ErrorOr<Source> md::readSource(llvm::StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/true);
  if (std::error_code ec = file.getError())
    return ec;
  return Source{path.str(), (*file)->getBufferIdentifier().str(),
                (*file)->getBuffer().str()};
}

unsigned md::addSource(const Source &source, llvm::SourceMgr &sourceMgr) {
  return sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(source.text, source.bufferName),
      llvm::SMLoc());
}
