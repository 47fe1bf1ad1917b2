//===- MemoryFormat.h - the memory section of both reports ------*- C++ -*-===//
//
// The one rendering of the per-rank memory that `mdc --explain` and
// `mdrun --inspect` print: both call these functions on the same
// MemoryTotals (Memory.h), so their memory sections are the same bytes,
// as text and as JSON. A test compares them for every model, preset and
// world size (test/lit/target/emit-models.test). MLIR-free, so the runtime
// tools and the compiler share it.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_PLAN_MEMORYFORMAT_H
#define MD_RUNTIME_PLAN_MEMORYFORMAT_H

#include <cstdint>
#include <string>

#include "runtime/plan/Memory.h"

namespace md::plan {

/// A byte count for people: "848 B" below 1 KiB, else one decimal and a
/// binary unit ("1.3 KiB", "25.0 MiB").
std::string BytesText(int64_t bytes);

/// The memory section as text: a heading naming `worldSize`, then one line
/// per MemoryRows row with its human and its exact bytes:
///
///   memory per rank at W = 2, at the peak
///     params               424 B  (424 bytes)
///     ...
///     peak               4.2 KiB  (4328 bytes)
std::string FormatMemoryText(const MemoryTotals &totals, int64_t worldSize);

/// The memory section as a JSON object, the rows as keys in MemoryRows'
/// order with exact bytes, laid out for a member of an object whose own
/// members are indented by `indent` spaces (2 for a top-level object's):
/// the rows `indent` + 2 deep, the closing brace `indent` deep. The text
/// starts at "{" and ends at "}", with no newline after.
std::string FormatMemoryJson(const MemoryTotals &totals, int indent);

} // namespace md::plan

#endif // MD_RUNTIME_PLAN_MEMORYFORMAT_H
