//===- Format.cpp - numbers as md's runtime tools print them --------------===//

#include "tools/cli/Format.h"

#include "absl/strings/str_cat.h"

namespace md::cli {

std::string WithCommas(int64_t n) {
  std::string digits = absl::StrCat(n), out;
  size_t first = 0;
  if (digits[0] == '-') { // the sign is no digit to group
    out += '-';
    first = 1;
  }
  for (size_t i = first; i < digits.size(); ++i) {
    if (i > first && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

} // namespace md::cli
