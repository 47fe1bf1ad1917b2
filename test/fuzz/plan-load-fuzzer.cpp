//===- plan-load-fuzzer.cpp - libFuzzer target over the plan loader -----===//
//
// Feeds arbitrary bytes to LoadPlan (both verification stages) and, when a
// plan is accepted, to what consumes it: BindWorldSize, PerRankMemory and
// Summarize at a few world sizes. Any crash, sanitizer report, leak or hang
// is a bug: the loader must refuse what it cannot vouch for.
//
//===----------------------------------------------------------------------===//

#include <cstddef>
#include <cstdint>

#include "runtime/plan/Loader.h"
#include "runtime/plan/Memory.h"
#include "runtime/plan/Summary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace md::plan;
  absl::StatusOr<LoadedPlan> loaded = LoadPlan(absl::MakeConstSpan(data, size));
  if (!loaded.ok())
    return 0;
  for (int64_t worldSize : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{8}}) {
    if (!BindWorldSize(*loaded, worldSize).ok())
      continue;
    (void)PerRankMemory(*loaded, worldSize);
    (void)Summarize(*loaded, worldSize);
  }
  return 0;
}
