//===- MarkovTokens.h - md-data: token files from a Markov chain -*- C++
//-*-===//
//
// What `md-data markov` does, as a library for the tool and its tests: parse
// the command line, and write N tokens of a walk on runtime/data's Markov
// chain as a flat little-endian token file: uint16 (nanoGPT's format) for a
// vocabulary of at most 65536 tokens, uint32 beyond, which is the rule the
// `tokens("path")` data source reads them by. docs/cli.md has the command line.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_MD_DATA_MARKOVTOKENS_H
#define MD_TOOLS_MD_DATA_MARKOVTOKENS_H

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/md-data/ConvertTokens.h"

namespace md::mddata {

/// The --help text (and what follows a command-line error).
std::string Usage();

/// The largest vocabulary a uint16 token file holds; larger ones are
/// written as uint32.
constexpr int64_t kMaxUint16Vocab = 65536;
/// The largest vocabulary md-data writes (the chain keeps 4 successors per
/// token in memory).
constexpr int64_t kMaxVocab = int64_t(1) << 24;

/// Bytes per token in a file of `vocab` tokens: 2 or 4.
inline int64_t TokenBytes(int64_t vocab) {
  return vocab > kMaxUint16Vocab ? 4 : 2;
}

struct MarkovTokensOptions {
  int64_t vocab = 0;      // V, in [1, kMaxVocab]
  int64_t tokens = 0;     // N >= 1
  uint64_t seed = 0;      // which walk
  uint64_t chainSeed = 0; // which chain (0: synthetic data's chain)
  std::string output;
};

struct CommandLine {
  enum class Mode { Help, Markov, Convert } mode = Mode::Markov;
  MarkovTokensOptions markov;
  ConvertTokensOptions convert;
};

/// Parses argv through md-data's Abseil flags (tools/cli); every parse
/// starts from their defaults. A bad command line is an InvalidArgumentError
/// whose message names the argument (the tool exits 2).
absl::StatusOr<CommandLine> ParseCommandLine(int argc, char **argv);

/// The key of the walk that `--seed seed` writes.
uint64_t WalkKey(uint64_t seed);

struct MarkovTokensResult {
  int64_t bytes = 0;
  /// The chain's entropy rate (nats per token), when it has one.
  std::optional<double> entropyRate;
};

/// Writes the file atomically (a temporary file, fsync, rename), creating
/// missing directories. I/O errors name the file.
absl::StatusOr<MarkovTokensResult>
WriteMarkovTokens(const MarkovTokensOptions &options);

/// The line md-data prints after writing.
std::string Describe(const MarkovTokensOptions &options,
                     const MarkovTokensResult &result);

} // namespace md::mddata

#endif // MD_TOOLS_MD_DATA_MARKOVTOKENS_H
