//===- MarkovTokens.cpp - md-data: token files from a Markov chain --------===//

#include "tools/md-data/MarkovTokens.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Random.h"
#include "runtime/core/Safetensors.h"
#include "runtime/data/Markov.h"

namespace md::mddata {

const char *const kUsage =
    "usage: md-data markov --vocab V --tokens N [--seed S] [--chain-seed C] "
    "-o FILE\n"
    "\n"
    "Writes N tokens as a flat little-endian file, uint16 for V <= 65536\n"
    "(nanoGPT's format) and uint32 beyond (what tokens(\"FILE\") reads for\n"
    "such a vocabulary): a walk on a fixed random Markov chain over\n"
    "V tokens, in which every token has 4 successors (probabilities 0.6, 0.25,\n"
    "0.1, 0.05). A model can learn it down to the chain's entropy rate, which\n"
    "md-data prints. Files with the same --vocab and --chain-seed and other\n"
    "--seed values are samples of the same distribution (training and\n"
    "held-out data).\n"
    "\n"
    "  --vocab V         the vocabulary: tokens lie in [0, V), 1 <= V <= 2^24\n"
    "  --tokens N        how many tokens to write (N >= 1)\n"
    "  --seed S          which walk (default 0)\n"
    "  --chain-seed C    which chain (default 0: the chain of synthetic(...)\n"
    "                    sequence data with the same vocabulary)\n"
    "  -o, --output FILE the file to write (atomically; directories are "
    "created)\n"
    "  --help            print this message\n";

namespace {

absl::StatusOr<uint64_t> number(const std::string &name,
                                const std::string &text, uint64_t min) {
  uint64_t n = 0;
  if (text.empty() || text[0] == '-' || text[0] == '+' ||
      !absl::SimpleAtoi(text, &n) || n < min)
    return absl::InvalidArgumentError(absl::StrCat(
        name, " ", text,
        min > 0 ? ": not a positive integer" : ": not a non-negative integer"));
  return n;
}

std::string withCommas(int64_t n) {
  std::string digits = absl::StrCat(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

} // namespace

absl::StatusOr<CommandLine> ParseCommandLine(int argc, char **argv) {
  CommandLine cl;
  bool help = false, haveVocab = false, haveTokens = false, haveOutput = false;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string name = arg, value;
    bool hasValue = false;
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      name = arg.substr(0, arg.find('='));
      value = arg.substr(arg.find('=') + 1);
      hasValue = true;
    }
    auto take = [&]() -> absl::StatusOr<std::string> {
      if (hasValue)
        return value;
      if (i + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      return std::string(argv[++i]);
    };
    if (name == "--help" || name == "-h") {
      help = true;
    } else if (name == "--vocab" || name == "--tokens" || name == "--seed" ||
               name == "--chain-seed") {
      absl::StatusOr<std::string> text = take();
      if (!text.ok())
        return text.status();
      bool positive = name == "--vocab" || name == "--tokens";
      absl::StatusOr<uint64_t> n = number(name, *text, positive ? 1 : 0);
      if (!n.ok())
        return n.status();
      if (positive && *n > static_cast<uint64_t>(INT64_MAX / 2))
        return absl::InvalidArgumentError(
            absl::StrCat(name, " ", *text, ": too large"));
      if (name == "--vocab") {
        if (*n > static_cast<uint64_t>(kMaxVocab))
          return absl::InvalidArgumentError(absl::StrCat(
              "--vocab ", *text, ": more than ", kMaxVocab,
              " tokens (md-data's limit)"));
        cl.markov.vocab = static_cast<int64_t>(*n);
        haveVocab = true;
      } else if (name == "--tokens") {
        cl.markov.tokens = static_cast<int64_t>(*n);
        haveTokens = true;
      } else if (name == "--seed") {
        cl.markov.seed = *n;
      } else {
        cl.markov.chainSeed = *n;
      }
    } else if (name == "-o" || name == "--output") {
      absl::StatusOr<std::string> path = take();
      if (!path.ok())
        return path.status();
      if (path->empty())
        return absl::InvalidArgumentError(
            absl::StrCat(name, " needs a file name"));
      cl.markov.output = *path;
      haveOutput = true;
    } else if (arg.rfind("-", 0) == 0 && arg != "-") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option '", arg, "'"));
    } else {
      positional.push_back(arg);
    }
  }
  if (help) {
    cl.mode = CommandLine::Mode::Help;
    return cl;
  }
  if (positional.empty())
    return absl::InvalidArgumentError("no command given; expected 'markov'");
  if (positional[0] != "markov")
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown command '", positional[0], "'; expected 'markov'"));
  if (positional.size() > 1)
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", positional[1], "'"));
  if (!haveVocab)
    return absl::InvalidArgumentError("markov needs --vocab V");
  if (!haveTokens)
    return absl::InvalidArgumentError("markov needs --tokens N");
  if (!haveOutput)
    return absl::InvalidArgumentError("markov needs -o FILE");
  cl.mode = CommandLine::Mode::Markov;
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
      options.output, withCommas(options.tokens),
      8 * TokenBytes(options.vocab), withCommas(result.bytes),
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
