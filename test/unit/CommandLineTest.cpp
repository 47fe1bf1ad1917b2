//===- CommandLineTest.cpp - the runtime tools' command-line layer --------===//
//
// tools/cli on flags of its own: how arguments reach Abseil flags (values
// after '=' or a space, switches, aliases, positional arguments), the
// messages of a bad command line, the whole-number flag types, and the
// usage formatter (sections, hidden options, wrapping).
//
//===----------------------------------------------------------------------===//

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "tools/cli/CommandLine.h"
#include "tools/cli/Format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(absl::optional<md::cli::PositiveCount>, cli_test_count, absl::nullopt,
          "how many things to do, a number long enough that the usage has to "
          "wrap it over more than one line of the terminal");
ABSL_FLAG(absl::optional<md::cli::Count>, cli_test_port, absl::nullopt,
          "a port");
ABSL_FLAG(md::cli::Seed, cli_test_seed, md::cli::Seed{0}, "a seed");
ABSL_FLAG(std::string, cli_test_output, "", "the file to write");
ABSL_FLAG(bool, cli_test_quiet, false, "say nothing");
ABSL_FLAG(bool, cli_test_secret, false, "not in the usage");

namespace md::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

enum Tag { kNone, kOutput };

const std::vector<Section> &sections() {
  static const std::vector<Section> s = [] {
    std::vector<Section> v(2);
    v[0].heading = "Things:";
    v[0].options = {
        FlagOption(FLAGS_cli_test_count, {"--count"}, "N"),
        FlagOption(FLAGS_cli_test_port, {"--port"}, "P",
                   [](const Count &n) -> std::string {
                     return n.value > 65535 ? "not a port" : "";
                   }),
        FlagOption(FLAGS_cli_test_seed, {"--seed"}, "S"),
        FlagOption(FLAGS_cli_test_output, {"-o", "--output"}, "FILE")
            .needsNonEmpty("a file name")
            .withTag(kOutput),
        FlagOption(FLAGS_cli_test_quiet, {"--quiet"}, "").withAliases({"-q"}),
        FlagOption(FLAGS_cli_test_secret, {"--secret"}, "").hide(),
    };
    v[1].options = {HelpOption()};
    return v;
  }();
  return s;
}

absl::StatusOr<Parsed> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "tool");
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  return Parse(sections(), static_cast<int>(argv.size()), argv.data());
}

std::string errorOf(std::vector<std::string> args) {
  absl::StatusOr<Parsed> p = parse(std::move(args));
  EXPECT_FALSE(p.ok());
  return p.ok() ? "" : std::string(p.status().message());
}

TEST(CommandLine, SetsFlagsAndCollectsArguments) {
  absl::StatusOr<Parsed> p =
      parse({"in.txt", "--count=3", "--port", "0", "-", "--seed",
             "18446744073709551615", "-o", "x.bin", "-q", "--secret"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count)->value, 3);
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_port)->value, 0);
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_seed).value, UINT64_MAX);
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_output), "x.bin");
  EXPECT_TRUE(absl::GetFlag(FLAGS_cli_test_quiet));
  EXPECT_TRUE(absl::GetFlag(FLAGS_cli_test_secret));
  EXPECT_FALSE(p->help);
  EXPECT_THAT(p->positional, ElementsAre("in.txt", "-"));
  ASSERT_EQ(p->given.size(), 6u);
  EXPECT_EQ(p->given[0].arg, "--count=3");
  EXPECT_EQ(p->given[0].name, "--count");
  EXPECT_EQ(p->given[0].value, "3");
  EXPECT_EQ(p->given[3].name, "-o");
  EXPECT_EQ(p->given[3].option->tag, kOutput);
  EXPECT_EQ(p->given[4].name, "-q"); // an alias reaches its option
  EXPECT_EQ(p->given[4].value, "true");

  // A switch still takes an explicit value; --help is reported, not set.
  p = parse({"--quiet=false", "-h"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(absl::GetFlag(FLAGS_cli_test_quiet));
  EXPECT_TRUE(p->help);
  EXPECT_TRUE(p->given.size() == 1 && p->positional.empty());
}

TEST(CommandLine, ABadCommandLineNamesTheArgument) {
  EXPECT_EQ(errorOf({"--frob"}), "unknown option '--frob'");
  EXPECT_EQ(errorOf({"--count=x=y"}), "--count x=y: not a positive integer");
  EXPECT_EQ(errorOf({"-o=x"}), "unknown option '-o=x'"); // '=' after -- only
  EXPECT_EQ(errorOf({"--count", "0"}), "--count 0: not a positive integer");
  EXPECT_EQ(errorOf({"--count", "-2"}), "--count -2: not a positive integer");
  EXPECT_EQ(errorOf({"--port", "-1"}), "--port -1: not a non-negative integer");
  EXPECT_EQ(errorOf({"--port", "70000"}), "--port 70000: not a port");
  EXPECT_EQ(errorOf({"--seed", "-1"}), "--seed -1: not a non-negative integer");
  EXPECT_EQ(errorOf({"--seed", "18446744073709551616"}),
            "--seed 18446744073709551616: not a non-negative integer");
  EXPECT_EQ(errorOf({"--seed"}), "--seed needs a value");
  // Abseil takes an empty value for "unset"; md's tools offer no such thing.
  EXPECT_EQ(errorOf({"--count="}), "--count needs a value");
  EXPECT_EQ(errorOf({"--port", ""}), "--port needs a value");
  EXPECT_EQ(errorOf({"--output="}), "--output needs a file name");
  EXPECT_EQ(errorOf({"--quiet=perhaps"}), "--quiet perhaps: not a valid value");
  // A refused value does not reach its flag.
  EXPECT_EQ(errorOf({"--count", "5", "--port", "70000"}),
            "--port 70000: not a port");
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count)->value, 5);
  EXPECT_FALSE(absl::GetFlag(FLAGS_cli_test_port).has_value());
}

// An unknown long option gets the nearest spelling, when one is near
// (underscores for dashes: MdrunCommandLine.TorchrunSpellings).
TEST(CommandLine, TheNearestSpelling) {
  EXPECT_FALSE(parse({"--co_unt", "3"}).ok()); // no dash there to spell
  EXPECT_EQ(errorOf({"--coutn", "3"}),
            "unknown option '--coutn' (did you mean --count?)");
  EXPECT_EQ(errorOf({"--outptu=f"}),
            "unknown option '--outptu=f' (did you mean --output?)");
  EXPECT_EQ(errorOf({"--xyzzy-plugh"}), "unknown option '--xyzzy-plugh'");
  EXPECT_EQ(errorOf({"--coun"}), "unknown option '--coun' (did you mean "
                                 "--count?)");
}

TEST(CommandLine, EveryParseStartsFromTheDefaults) {
  ASSERT_TRUE(parse({"--count", "7", "--output", "f", "--quiet"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count)->value, 7);
  ASSERT_TRUE(parse({"--port", "80"}).ok());
  EXPECT_FALSE(absl::GetFlag(FLAGS_cli_test_count).has_value());
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_output), "");
  EXPECT_FALSE(absl::GetFlag(FLAGS_cli_test_quiet));
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_port)->value, 80);
  // Also when the command line is refused half-way.
  EXPECT_FALSE(parse({"--count", "7", "--frob"}).ok());
  ASSERT_TRUE(parse({}).ok());
  EXPECT_FALSE(absl::GetFlag(FLAGS_cli_test_count).has_value());
  EXPECT_FALSE(absl::GetFlag(FLAGS_cli_test_port).has_value());
}

TEST(CommandLine, UsageListsSectionsAndWrapsHelp) {
  std::string usage = Usage("usage: tool [options] IN\n", sections(),
                            "Examples:\n  tool x\n", 16);
  EXPECT_EQ(usage,
            "usage: tool [options] IN\n"
            "\n"
            "Things:\n"
            "  --count N     how many things to do, a number long enough that "
            "the usage has\n"
            "                to wrap it over more than one line of the "
            "terminal\n"
            "  --port P      a port\n"
            "  --seed S      a seed\n"
            "  -o, --output FILE\n"
            "                the file to write\n"
            "  --quiet       say nothing\n"
            "\n"
            "  --help        print this message\n"
            "\n"
            "Examples:\n"
            "  tool x\n");
  for (absl::string_view line : absl::StrSplit(usage, '\n'))
    EXPECT_LE(line.size(), 79u) << line;
}

TEST(Format, WithCommasGroupsThreeDigitsFromTheRight) {
  EXPECT_EQ(WithCommas(0), "0");
  EXPECT_EQ(WithCommas(999), "999");
  EXPECT_EQ(WithCommas(1000), "1,000");
  EXPECT_EQ(WithCommas(124439808), "124,439,808");
  EXPECT_EQ(WithCommas(-123), "-123");
  EXPECT_EQ(WithCommas(-1234567), "-1,234,567");
  EXPECT_EQ(WithCommas(INT64_MAX), "9,223,372,036,854,775,807");
  EXPECT_EQ(WithCommas(INT64_MIN), "-9,223,372,036,854,775,808");
}

} // namespace
} // namespace md::cli
