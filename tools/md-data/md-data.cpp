//===- md-data.cpp - writes token files for md's examples and tests -------===//
//
//   md-data markov --vocab V --tokens N [--seed S] [--chain-seed C] -o FILE
//
// Exit status: 0 success; 1 the file cannot be written; 2 a bad command
// line. docs/cli.md has the details.
//
//===----------------------------------------------------------------------===//

#include <cstdio>
#include <string>

#include "tools/md-data/MarkovTokens.h"

int main(int argc, char **argv) {
  using md::mddata::CommandLine;
  absl::StatusOr<CommandLine> cl = md::mddata::ParseCommandLine(argc, argv);
  if (!cl.ok()) {
    std::fprintf(stderr,
                 "md-data: error: %s\nusage: md-data markov|convert ... "
                 "(md-data --help lists the options)\n",
                 std::string(cl.status().message()).c_str());
    return 2;
  }
  if (cl->mode == CommandLine::Mode::Help) {
    std::fputs(md::mddata::Usage().c_str(), stdout);
    return 0;
  }
  if (cl->mode == CommandLine::Mode::Convert) {
    absl::StatusOr<md::mddata::ConvertTokensResult> converted =
        md::mddata::ConvertTokens(cl->convert);
    if (!converted.ok()) {
      std::fprintf(stderr, "md-data: error: %s\n",
                   std::string(converted.status().message()).c_str());
      return 1;
    }
    std::printf("%s\n", md::mddata::Describe(cl->convert, *converted).c_str());
    return 0;
  }
  absl::StatusOr<md::mddata::MarkovTokensResult> result =
      md::mddata::WriteMarkovTokens(cl->markov);
  if (!result.ok()) {
    std::fprintf(stderr, "md-data: error: %s\n",
                 std::string(result.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n", md::mddata::Describe(cl->markov, *result).c_str());
  return 0;
}
