//===- MarkovTokens.cpp - md-data: token files from a Markov chain --------===//

#include "tools/md-data/MarkovTokens.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Random.h"
#include "runtime/core/Status.h"
#include "runtime/exec/Safetensors.h"
#include "runtime/data/Markov.h"
#include "tools/cli/CommandLine.h"
#include "tools/cli/Format.h"

// md-data's options; the help strings are the usage's lines. --vocab and
// --tokens are required: absl::nullopt is "not given".
ABSL_FLAG(absl::optional<md::cli::PositiveCount>, vocab, absl::nullopt,
          "the vocabulary: tokens lie in [0, V), 1 <= V <= 2^24");
ABSL_FLAG(absl::optional<md::cli::PositiveCount>, tokens, absl::nullopt,
          "how many tokens to write (N >= 1)");
ABSL_FLAG(md::cli::Seed, seed,
          md::cli::Seed{md::mddata::MarkovTokensOptions{}.seed},
          "which walk (default 0)");
ABSL_FLAG(md::cli::Seed, chain_seed,
          md::cli::Seed{md::mddata::MarkovTokensOptions{}.chainSeed},
          "which chain (default 0: the chain of synthetic(...) sequence data "
          "with the same vocabulary)");
ABSL_FLAG(std::string, output, "",
          "the file to write (atomically; directories are created)");
ABSL_FLAG(std::string, from, "",
          "convert: the input's layout: uint16, uint32, int32, int64 (raw "
          "little-endian) or npy (a 1-D integer array)");

namespace md::mddata {

namespace {

/// Counts up to here keep `width * tokens` and the like far from overflow.
constexpr int64_t kMaxCount = INT64_MAX / 2;

std::string notTooLarge(const cli::PositiveCount &n) {
  return n.value > kMaxCount ? "too large" : "";
}

const std::vector<cli::Section> &sections() {
  static const std::vector<cli::Section> sections = [] {
    cli::Section s;
    s.options = {
        cli::FlagOption(FLAGS_vocab, {"--vocab"}, "V",
                        [](const cli::PositiveCount &n) -> std::string {
                          if (n.value > kMaxCount)
                            return "too large";
                          if (n.value > kMaxVocab)
                            return absl::StrCat("more than ", kMaxVocab,
                                                " tokens (md-data's limit)");
                          return "";
                        }),
        cli::FlagOption(FLAGS_tokens, {"--tokens"}, "N", notTooLarge),
        cli::FlagOption(FLAGS_seed, {"--seed"}, "S"),
        cli::FlagOption(FLAGS_chain_seed, {"--chain-seed"}, "C"),
        cli::FlagOption(FLAGS_output, {"-o", "--output"}, "FILE")
            .needsNonEmpty("a file name"),
        cli::FlagOption(FLAGS_from, {"--from"}, "FORMAT")
            .needsNonEmpty("a format"),
        cli::HelpOption(),
    };
    return std::vector<cli::Section>{s};
  }();
  return sections;
}

} // namespace

std::string Usage() {
  return cli::Usage(
      "usage: md-data markov --vocab V --tokens N [--seed S] [--chain-seed C] "
      "-o FILE\n"
      "       md-data convert --from FORMAT IN -o FILE [--vocab V]\n"
      "\n"
      "convert rewrites the token ids of IN (raw uint16, uint32, int32 or\n"
      "int64, or a 1-D integer .npy array) as md's token file: uint16 for a\n"
      "vocabulary (V, or the largest id + 1) of at most 65536, else uint32.\n"
      "Every id is checked against it.\n"
      "\n"
      "markov:\n"
      "Writes N tokens as a flat little-endian file, uint16 for V <= 65536\n"
      "(nanoGPT's format) and uint32 beyond (what tokens(\"FILE\") reads for\n"
      "such a vocabulary): a walk on a fixed random Markov chain over\n"
      "V tokens, in which every token has 4 successors (probabilities 0.6, "
      "0.25,\n"
      "0.1, 0.05). A model can learn it down to the chain's entropy rate, "
      "which\n"
      "md-data prints. Files with the same --vocab and --chain-seed and other\n"
      "--seed values are samples of the same distribution (training and\n"
      "held-out data).\n",
      sections(),
      "Examples (training and held-out data from one chain):\n"
      "  md-data markov --vocab 512 --tokens 2000000 --seed 1 -o "
      "data/train.bin\n"
      "  md-data markov --vocab 512 --tokens 200000 --seed 2 -o data/val.bin\n"
      "  md-data convert --from int32 tokens.i32 --vocab 50257 -o "
      "data/train.bin\n",
      20);
}

absl::StatusOr<CommandLine> ParseCommandLine(int argc, char **argv) {
  absl::StatusOr<cli::Parsed> parsed = cli::Parse(sections(), argc, argv);
  if (!parsed.ok())
    return parsed.status();
  CommandLine cl;
  if (parsed->help) {
    cl.mode = CommandLine::Mode::Help;
    return cl;
  }
  const std::vector<std::string> &positional = parsed->positional;
  if (positional.empty())
    return absl::InvalidArgumentError(
        "no command given; expected 'markov' or 'convert'");
  if (positional[0] == "convert") {
    if (positional.size() != 2)
      return absl::InvalidArgumentError(
          positional.size() < 2
              ? "convert needs an input file"
              : absl::StrCat("unexpected argument '", positional[2], "'"));
    if (absl::GetFlag(FLAGS_tokens) || absl::GetFlag(FLAGS_seed).value != 0 ||
        absl::GetFlag(FLAGS_chain_seed).value != 0)
      return absl::InvalidArgumentError(
          "--tokens, --seed and --chain-seed go with markov, not convert");
    if (absl::GetFlag(FLAGS_from).empty())
      return absl::InvalidArgumentError(
          "convert needs --from uint16|uint32|int32|int64|npy");
    if (absl::GetFlag(FLAGS_output).empty())
      return absl::InvalidArgumentError("convert needs -o FILE");
    MD_ASSIGN_OR_RETURN(cl.convert.from,
                        ParseTokenFormat(absl::GetFlag(FLAGS_from)));
    cl.convert.input = positional[1];
    cl.convert.output = absl::GetFlag(FLAGS_output);
    if (const absl::optional<cli::PositiveCount> v = absl::GetFlag(FLAGS_vocab))
      cl.convert.vocab = v->value;
    cl.mode = CommandLine::Mode::Convert;
    return cl;
  }
  if (positional[0] != "markov")
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown command '", positional[0], "'; expected 'markov' or 'convert'"));
  if (positional.size() > 1)
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", positional[1], "'"));
  if (!absl::GetFlag(FLAGS_from).empty())
    return absl::InvalidArgumentError("--from goes with convert, not markov");
  const absl::optional<cli::PositiveCount> vocab = absl::GetFlag(FLAGS_vocab),
                                           tokens = absl::GetFlag(FLAGS_tokens);
  if (!vocab)
    return absl::InvalidArgumentError("markov needs --vocab V");
  if (!tokens)
    return absl::InvalidArgumentError("markov needs --tokens N");
  if (absl::GetFlag(FLAGS_output).empty())
    return absl::InvalidArgumentError("markov needs -o FILE");
  cl.mode = CommandLine::Mode::Markov;
  cl.markov.vocab = vocab->value;
  cl.markov.tokens = tokens->value;
  cl.markov.seed = absl::GetFlag(FLAGS_seed).value;
  cl.markov.chainSeed = absl::GetFlag(FLAGS_chain_seed).value;
  cl.markov.output = absl::GetFlag(FLAGS_output);
  return cl;
}

uint64_t WalkKey(uint64_t seed) {
  return runtime::HashKey(seed, 0x6d642d64617461ull); // "md-data"
}

absl::StatusOr<MarkovTokensResult>
WriteMarkovTokens(const MarkovTokensOptions &options) {
  if (options.vocab < 1 || options.vocab > kMaxVocab || options.tokens < 1)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d tokens over a vocabulary of %d: expected at least one token and "
        "a vocabulary of 1 to %d",
        options.tokens, options.vocab, kMaxVocab));
  data::MarkovChain chain(options.vocab, options.chainSeed);
  const uint64_t key = WalkKey(options.seed);
  constexpr int64_t kChunk = 1 << 16;
  const int64_t width = TokenBytes(options.vocab);
  std::vector<unsigned char> buffer(static_cast<size_t>(width * kChunk));
  absl::Status written =
      runtime::WriteFileAtomically(options.output, [&](int fd) {
        int64_t token = 0;
        for (int64_t begin = 0; begin < options.tokens; begin += kChunk) {
          int64_t end = std::min(options.tokens, begin + kChunk);
          for (int64_t j = begin; j < end; ++j) {
            token = j == 0 ? chain.first(key) : chain.next(token, key, j);
            size_t at = static_cast<size_t>(width * (j - begin));
            for (int64_t k = 0; k < width; ++k) // little-endian
              buffer[at + k] = static_cast<unsigned char>(token >> (8 * k));
          }
          if (!runtime::WriteAll(fd, buffer.data(),
                                 static_cast<size_t>(width * (end - begin))))
            return false;
        }
        return true;
      });
  if (!written.ok())
    return written;
  MarkovTokensResult result;
  result.bytes = width * options.tokens;
  result.entropyRate = chain.entropyRate();
  return result;
}

std::string Describe(const MarkovTokensOptions &options,
                     const MarkovTokensResult &result) {
  std::string line = absl::StrFormat(
      "md-data: wrote %s: %s uint%d tokens (%s bytes), a walk (seed %d) on "
      "the Markov chain over %d tokens (chain seed %d)",
      options.output, cli::WithCommas(options.tokens),
      8 * TokenBytes(options.vocab), cli::WithCommas(result.bytes),
      options.seed, options.vocab, options.chainSeed);
  if (result.entropyRate)
    absl::StrAppendFormat(&line,
                          "; entropy rate %.4f nats/token (the loss floor)",
                          *result.entropyRate);
  else
    absl::StrAppend(&line, "; no entropy rate (the chain has no unique "
                           "stationary distribution)");
  return line;
}

} // namespace md::mddata
