//===- ConvertTokens.h - md-data convert: token files into md's format -*- C++ -*-===//
//
// `md-data convert --from FORMAT IN -o OUT [--vocab V]` rewrites token ids
// that another tool wrote (a raw little-endian uint16, uint32, int32 or
// int64 file, or a 1-D integer .npy array) as the token file `tokens(...)`
// reads: uint16 for a vocabulary of at most 65536 tokens, uint32 beyond
// (the vocabulary is V, or the largest id + 1). Every id is checked against
// it, a negative one too; the output is written atomically.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_MD_DATA_CONVERTTOKENS_H
#define MD_TOOLS_MD_DATA_CONVERTTOKENS_H

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace md::mddata {

/// The input's layout: a raw file of one integer type, or .npy.
enum class TokenFormat { uint16, uint32, int32, int64, npy };
/// "uint16", "uint32", "int32", "int64", "npy".
const char *TokenFormatName(TokenFormat f);
/// A format by name; InvalidArgument listing the names.
absl::StatusOr<TokenFormat> ParseTokenFormat(const std::string &name);

struct ConvertTokensOptions {
  TokenFormat from = TokenFormat::uint16;
  std::string input, output;
  int64_t vocab = 0; // 0: the largest id + 1
};

struct ConvertTokensResult {
  int64_t tokens = 0, bytes = 0;
  int64_t vocab = 0;   // what the width was chosen for
  int64_t largest = 0; // the largest id
  std::string source;  // "int32", "npy <i8"
};

/// Converts; errors name the file and, for a bad id, its position.
absl::StatusOr<ConvertTokensResult>
ConvertTokens(const ConvertTokensOptions &options);

/// The line md-data prints after writing.
std::string Describe(const ConvertTokensOptions &options,
                     const ConvertTokensResult &result);

} // namespace md::mddata

#endif // MD_TOOLS_MD_DATA_CONVERTTOKENS_H
