//===- Json.h - JSON string literals for the runtime's files -*- C++ -*-===//
//
// The runtime writes small JSON documents by hand (safetensors headers,
// checkpoint metadata, flight-recorder rings, traces, metrics); this is
// their one way of quoting a string: quotes and backslashes escaped,
// control characters as \u00XX, other bytes as they are.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_JSON_H
#define MD_RUNTIME_CORE_JSON_H

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace md::runtime {

/// `s` as a JSON string literal, quotes included.
inline std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_JSON_H
