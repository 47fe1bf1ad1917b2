//===- Format.h - numbers as md's runtime tools print them ------*- C++ -*-===//
//
// The text forms that mdrun and md-data share in what they print for a
// person (not in reports a program reads, which keep plain numbers).
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_CLI_FORMAT_H
#define MD_TOOLS_CLI_FORMAT_H

#include <cstdint>
#include <string>

namespace md::cli {

/// `n` in decimal with a comma between groups of three digits:
/// 1234567 -> "1,234,567", -123 -> "-123".
std::string WithCommas(int64_t n);

} // namespace md::cli

#endif // MD_TOOLS_CLI_FORMAT_H
