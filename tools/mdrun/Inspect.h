//===- Inspect.h - mdrun --inspect: what a plan will do ---------*- C++ -*-===//
//
// Loads and verifies a plan file and prints, at a world size, its model and
// plan, parameters, units, buckets, memory per rank, collectives per step,
// the recipe and the hooks, as text or as JSON with stable keys
// (docs/plan-format.md, "Reading mdrun --inspect").
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_MDRUN_INSPECT_H
#define MD_TOOLS_MDRUN_INSPECT_H

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace md::mdrun {

enum class InspectFormat { Text, Json };

struct InspectOptions {
  std::string planPath;
  int64_t worldSize = 0; // 0: the pinned W, else 2, else the first that fits
  InspectFormat format = InspectFormat::Text;
};

/// Writes the report to `out`; an error (bad file, a world size the plan
/// cannot run at) leaves `out` empty.
absl::Status Inspect(const InspectOptions &options, std::string &out);

} // namespace md::mdrun

#endif // MD_TOOLS_MDRUN_INSPECT_H
