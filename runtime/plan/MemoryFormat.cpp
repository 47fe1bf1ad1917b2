//===- MemoryFormat.cpp - the memory section of both reports -------------===//

#include "runtime/plan/MemoryFormat.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace md::plan {

std::string BytesText(int64_t bytes) {
  if (bytes < 1024)
    return absl::StrCat(bytes, " B");
  const char *units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat("%.1f %s", v, units[u]);
}

std::string FormatMemoryText(const MemoryTotals &totals, int64_t worldSize) {
  std::string out =
      absl::StrCat("memory per rank at W = ", worldSize, ", at the peak\n");
  for (const MemoryRow &row : MemoryRows(totals))
    absl::StrAppendFormat(&out, "  %-13s %12s  (%d bytes)\n", row.name,
                          BytesText(row.bytes), row.bytes);
  return out;
}

std::string FormatMemoryJson(const MemoryTotals &totals, int indent) {
  std::string pad(indent + 2, ' ');
  std::string out = "{";
  const char *separator = "\n";
  for (const MemoryRow &row : MemoryRows(totals)) {
    // The names are fixed identifiers, so they need no escaping.
    absl::StrAppend(&out, separator, pad, "\"", row.name, "\": ", row.bytes);
    separator = ",\n";
  }
  absl::StrAppend(&out, "\n", std::string(indent, ' '), "}");
  return out;
}

} // namespace md::plan
