//===- MdDiscardableAttrs.h - what passes leave on ops ----------*- C++ -*-===//
//
// Typed accessors of the md dialect's discardable attributes, the marks one
// pass leaves on ops for later passes, the memory analysis and the emitter
// (md.unit, md.backward, md.stream, ...). Each is declared once, with its
// type, in the dialect's `discardableAttrs` (MdBase.td); the dialect
// verifies every `md.`-prefixed attribute against that list, and code reads
// and writes them only through the functions below, never by a string.
//
//===----------------------------------------------------------------------===//

#ifndef MD_DIALECT_MDDISCARDABLEATTRS_H
#define MD_DIALECT_MDDISCARDABLEATTRS_H

#include "dialect/MdDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <optional>

namespace md::mark {

/// md.unit: the FSDP unit an op belongs to.
std::optional<int64_t> unit(mlir::Operation *op);
void setUnit(mlir::Operation *op, int64_t unit);
/// Gives `to` the unit of `from`, if it has one.
void copyUnit(mlir::Operation *from, mlir::Operation *to);

/// md.units: the units a packed bucket's reduction carries.
std::optional<llvm::ArrayRef<int64_t>> units(mlir::Operation *op);
void setUnits(mlir::Operation *op, llvm::ArrayRef<int64_t> units);

/// md.backward: an op of the backward pass.
bool isBackward(mlir::Operation *op);
void setBackward(mlir::Operation *op);
void clearBackward(mlir::Operation *op);

/// md.phase: when a unit's gather runs ("forward", "backward", "step").
std::optional<llvm::StringRef> phase(mlir::Operation *op);
void setPhase(mlir::Operation *op, llvm::StringRef phase);

/// md.recompute: a forward op cloned into the backward pass.
bool isRecompute(mlir::Operation *op);
void setRecompute(mlir::Operation *op);

/// md.grad_of, on result `result` of a gradient function: the parameter it
/// is the gradient of (null when the result is not a gradient).
mlir::FlatSymbolRefAttr gradOf(mlir::FunctionOpInterface fn, unsigned result);
void setGradOf(mlir::FunctionOpInterface fn, unsigned result,
               mlir::FlatSymbolRefAttr param);

/// md.bucket_buffer: the flat buffer a packed bucket reduces.
bool isBucketBuffer(mlir::Operation *op);
void setBucketBuffer(mlir::Operation *op);

/// md.bucket_table, on md.model: the bucket table --explain prints.
mlir::ArrayAttr bucketTable(mlir::Operation *model);
void setBucketTable(mlir::Operation *model, mlir::ArrayAttr table);

/// md.sync_batch_norm: the statistics all-reduce of a synchronised batch
/// norm.
bool isSyncBatchNorm(mlir::Operation *op);
void setSyncBatchNorm(mlir::Operation *op);

/// md.stream: the stream an op runs on (0 compute, 1 comm).
std::optional<int64_t> stream(mlir::Operation *op);
void setStream(mlir::Operation *op, int64_t stream);
/// md.record: the event an op records when it ends.
std::optional<int64_t> record(mlir::Operation *op);
void setRecord(mlir::Operation *op, int64_t event);
/// md.wait: the events an op waits for before it starts.
std::optional<llvm::ArrayRef<int64_t>> waits(mlir::Operation *op);
void setWaits(mlir::Operation *op, llvm::ArrayRef<int64_t> events);
/// Removes md.stream, md.record and md.wait.
void clearStreamOrder(mlir::Operation *op);

/// md.memory, on md.model: the per-rank bytes of the step program.
mlir::DictionaryAttr memory(mlir::Operation *model);
void setMemory(mlir::Operation *model, mlir::DictionaryAttr bytes);

} // namespace md::mark

#endif // MD_DIALECT_MDDISCARDABLEATTRS_H
