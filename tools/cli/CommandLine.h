//===- CommandLine.h - command lines on Abseil flags ------------*- C++ -*-===//
//
// mdrun and md-data keep their option values in Abseil flags (ABSL_FLAG: a
// type with its parser, a default and a help text). This file is the thin
// layer they add on top, for what Abseil 20220623's absl::ParseCommandLine
// does not do: it exits (status 1) on a bad argument, where md's tools
// return a Status and exit 2 after naming the argument and printing their
// usage; it spells flags as C++ identifiers (--log_every), where md spells
// them with dashes and has short forms (-o, -h); and it does not tell the
// caller which options were given, which mdrun needs to refuse training
// options next to --inspect. So a tool lists its options (spellings,
// metavariable, flag) in sections; Parse sets the flags through Abseil's
// parsers (the flag type's AbslParseFlag) and returns what it saw; Usage
// formats --help from the flags' help strings.
//
// Flags are process-wide. Parse first resets every flag it knows to its
// default, and a tool copies the values into its options struct, so every
// parse starts from the defaults and tests can parse many command lines in
// one process. (absl::FlagSaver would do that too, but 20220623 logs a line
// on standard error for each flag it restores.)
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_CLI_COMMANDLINE_H
#define MD_TOOLS_CLI_COMMANDLINE_H

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"

namespace md::cli {

/// A whole number of at least `Min` as a flag type: "--steps N". A value
/// below `Min`, or not a number, is refused as "not a positive integer"
/// (Min >= 1) or "not a non-negative integer". Abseil checks that a flag's
/// every value parses back, so "not given" is absl::optional's nullopt
/// rather than a number below `Min`.
template <typename Int, Int Min> struct Integer { Int value = Min; };
using Count = Integer<int64_t, 0>;
using PositiveCount = Integer<int64_t, 1>;
using Seed = Integer<uint64_t, 0>;

template <typename Int, Int Min>
bool AbslParseFlag(absl::string_view text, Integer<Int, Min> *out,
                   std::string *error) {
  Int value = 0;
  // SimpleAtoi takes a sign; a '-' before an unsigned number is refused
  // rather than wrapped.
  if (text.empty() || (text[0] == '-' && std::is_unsigned_v<Int>) ||
      !absl::SimpleAtoi(text, &value) || value < Min) {
    *error = Min > 0 ? "not a positive integer" : "not a non-negative integer";
    return false;
  }
  out->value = value;
  return true;
}
template <typename Int, Int Min>
std::string AbslUnparseFlag(Integer<Int, Min> n) {
  return absl::StrCat(n.value);
}

/// What an option's `check` looks at: the flag's value, or for an
/// absl::optional flag (whose default, absl::nullopt, says "not given") the
/// value it holds.
template <typename T> struct Checked {
  using type = T;
  static const T *get(const T &v) { return &v; }
};
template <typename T> struct Checked<absl::optional<T>> {
  using type = T;
  static const T *get(const absl::optional<T> &v) {
    return v.has_value() ? &*v : nullptr;
  }
};

/// One option: how the command line spells it, what the usage says of it,
/// and how its value reaches its flag.
struct Option {
  /// The spellings the usage lists ("-o", "--output"), then ones it accepts
  /// without listing them ("-h").
  std::vector<std::string> names, aliases;
  /// What the usage calls the value ("N"); empty for a switch.
  std::string metavar;
  /// The usage's text: the flag's help string.
  std::string help;
  /// Accepted but not in the usage (mdrun's --worker).
  bool hidden = false;
  /// A switch takes no value (--no-fallback); `--name=false` still parses.
  bool isSwitch = false;
  /// The tool's own grouping, for rules across options (what goes with
  /// mdrun's --inspect).
  int tag = 0;
  /// What an empty value lacks ("a file name": `-o ''` is refused as "-o
  /// needs a file name"); empty: an empty value goes to the parser.
  std::string needs;
  /// Parses `text` into the flag; on failure `detail` says why ("not a
  /// positive integer"). Null for --help, which Parse reports itself.
  std::function<bool(absl::string_view text, std::string *detail)> set;
  /// Puts the flag back to its default.
  std::function<void()> reset;

  Option &withTag(int t) {
    tag = t;
    return *this;
  }
  Option &withAliases(std::vector<std::string> a) {
    aliases = std::move(a);
    return *this;
  }
  Option &needsNonEmpty(std::string what) {
    needs = std::move(what);
    return *this;
  }
  Option &hide() {
    hidden = true;
    return *this;
  }
};

/// The option that sets `flag`. `check`, when given, vets a parsed value
/// and returns why it is refused ("more than 65536 nodes"), or "". The
/// flag's value now is its default: make options before parsing (tools
/// build their sections on first use).
/// An absl::optional flag refuses an empty value ("--steps needs a value"),
/// which Abseil would take for "unset"; `check` sees the value it holds.
template <typename T>
Option
FlagOption(absl::Flag<T> &flag, std::vector<std::string> names,
           std::string metavar,
           std::function<std::string(const typename Checked<T>::type &)> check =
               nullptr) {
  Option o;
  o.names = std::move(names);
  o.metavar = std::move(metavar);
  o.help = absl::GetFlagReflectionHandle(flag).Help();
  o.isSwitch = std::is_same_v<T, bool>;
  if (!std::is_same_v<typename Checked<T>::type, T>)
    o.needs = "a value";
  o.set = [&flag, check](absl::string_view text, std::string *detail) {
    T value{};
    if (!absl::ParseFlag(std::string(text), &value, detail))
      return false;
    if (const auto *v = Checked<T>::get(value); check && v != nullptr) {
      *detail = check(*v);
      if (!detail->empty())
        return false;
    }
    absl::SetFlag(&flag, value);
    return true;
  };
  o.reset = [&flag, initial = absl::GetFlag(flag)] {
    absl::SetFlag(&flag, initial);
  };
  return o;
}

/// --help (and -h): "print this message".
Option HelpOption();

/// A group of options in the usage, under a heading ("" for none).
struct Section {
  std::string heading;
  std::vector<Option> options;
};

/// One option as given: the argument as typed ("--format=json"), the
/// spelling ("--format") and the value text ("json"; "true" for a switch).
struct Given {
  const Option *option = nullptr;
  std::string arg, name, value;
};

struct Parsed {
  bool help = false;
  std::vector<Given> given; // in order
  std::vector<std::string> positional;
};

/// Resets the flags of `sections` to their defaults, then sets those that
/// argv[1..] name and collects the other arguments.
/// Options take their value after '=' or as the next argument; a lone '-'
/// is an argument. A long option may spell its dashes as underscores
/// (`--log_every`). A bad command line is an InvalidArgumentError that
/// names the argument: "unknown option '--frob'" (with "(did you mean
/// --from?)" when a spelling is near), "--steps needs a value",
/// "--steps x: not a non-negative integer" (what the flag's parser or check
/// said), "-o needs a file name" (Option::needs). Options keep pointing into
/// `sections`.
absl::StatusOr<Parsed> Parse(const std::vector<Section> &sections, int argc,
                             char **argv);

/// The listed spelling nearest to `name` (an option the tool does not
/// have), or "" when none is near: what "did you mean" offers.
std::string NearestSpelling(const std::vector<Section> &sections,
                            absl::string_view name);

/// The --help text: `intro` (the synopsis and what the tool does), the
/// sections, each option's help wrapped beside its spellings at `column`,
/// then `outro` (examples), blank lines between them.
std::string Usage(absl::string_view intro, const std::vector<Section> &sections,
                  absl::string_view outro, int column);

} // namespace md::cli

#endif // MD_TOOLS_CLI_COMMANDLINE_H
