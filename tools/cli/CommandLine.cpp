//===- CommandLine.cpp - command lines on Abseil flags --------------------===//
//
// The argument loop and the usage formatter of CommandLine.h: how md's
// spellings reach Abseil's flag parsers, and how help strings are laid out.
//
//===----------------------------------------------------------------------===//

#include "tools/cli/CommandLine.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace md::cli {

namespace {

/// The widest usage line: what a terminal of 80 columns shows unwrapped.
constexpr size_t kWidth = 79;

const Option *findExactly(const std::vector<Section> &sections,
                          absl::string_view name) {
  for (const Section &s : sections)
    for (const Option &o : s.options)
      if (std::find(o.names.begin(), o.names.end(), name) != o.names.end() ||
          std::find(o.aliases.begin(), o.aliases.end(), name) !=
              o.aliases.end())
        return &o;
  return nullptr;
}

/// The option `name` spells: as listed, or a long option with underscores
/// for its dashes (`--nproc_per_node`, as torchrun and Abseil take both).
const Option *find(const std::vector<Section> &sections,
                   absl::string_view name) {
  if (const Option *o = findExactly(sections, name))
    return o;
  if (!absl::StartsWith(name, "--") ||
      name.find('_') == absl::string_view::npos)
    return nullptr;
  std::string dashed(name);
  std::replace(dashed.begin() + 2, dashed.end(), '_', '-');
  return findExactly(sections, dashed);
}

/// Levenshtein distance (small strings: option names).
size_t editDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

} // namespace

std::string NearestSpelling(const std::vector<Section> &sections,
                            absl::string_view name) {
  std::string dashed(name);
  if (absl::StartsWith(dashed, "--"))
    std::replace(dashed.begin() + 2, dashed.end(), '_', '-');
  std::string best;
  size_t bestDistance = std::max<size_t>(2, dashed.size() / 4) + 1;
  for (const Section &s : sections)
    for (const Option &o : s.options) {
      if (o.hidden)
        continue;
      for (const std::vector<std::string> *list : {&o.names, &o.aliases})
        for (const std::string &spelling : *list) {
          size_t d = editDistance(dashed, spelling);
          // A prefix of a spelling ("--nproc") is near it too.
          if (dashed.size() >= 4 && absl::StartsWith(spelling, dashed))
            d = std::min<size_t>(d, 1);
          if (d < bestDistance) {
            bestDistance = d;
            best = spelling;
          }
        }
    }
  return best;
}

namespace {

/// `text` in lines of at most kWidth columns, the first after `left`, the
/// others indented to `column`. A word longer than a line gets one alone.
std::string wrap(const std::string &left, absl::string_view text,
                 size_t column) {
  std::string out = left, line;
  if (out.size() + 1 > column)
    out += "\n"; // a long spelling gets its own line
  size_t at = out.rfind('\n') == std::string::npos
                  ? out.size()
                  : out.size() - out.rfind('\n') - 1;
  out.append(column - at, ' ');
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    size_t add = line.empty() ? word.size() : line.size() + 1 + word.size();
    if (!line.empty() && column + add > kWidth) {
      out += line + "\n" + std::string(column, ' ');
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  return out + line + "\n";
}

} // namespace

Option HelpOption() {
  Option o;
  o.names = {"--help"};
  o.aliases = {"-h"};
  o.help = "print this message";
  o.isSwitch = true;
  return o;
}

absl::StatusOr<Parsed> Parse(const std::vector<Section> &sections, int argc,
                             char **argv) {
  for (const Section &s : sections)
    for (const Option &o : s.options)
      if (o.reset)
        o.reset();
  Parsed parsed;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], name = arg, value;
    bool hasValue = false;
    if (absl::StartsWith(arg, "--") && arg.find('=') != std::string::npos) {
      name = arg.substr(0, arg.find('='));
      value = arg.substr(arg.find('=') + 1);
      hasValue = true;
    }
    const Option *option = find(sections, name);
    if (option == nullptr) {
      if (absl::StartsWith(arg, "-") && arg != "-") {
        std::string near = absl::StartsWith(arg, "--")
                               ? NearestSpelling(sections, name)
                               : std::string();
        return absl::InvalidArgumentError(absl::StrCat(
            "unknown option '", arg, "'",
            near.empty() ? "" : absl::StrCat(" (did you mean ", near, "?)")));
      }
      parsed.positional.push_back(arg);
      continue;
    }
    if (!option->set) { // --help
      parsed.help = true;
      continue;
    }
    if (!hasValue) {
      if (option->isSwitch) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      }
    }
    if (value.empty() && !option->needs.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(name, " needs ", option->needs));
    std::string detail;
    if (!option->set(value, &detail))
      return absl::InvalidArgumentError(
          absl::StrCat(name, " ", value, ": ",
                       detail.empty() ? "not a valid value" : detail));
    parsed.given.push_back({option, arg, name, value});
  }
  return parsed;
}

std::string Usage(absl::string_view intro, const std::vector<Section> &sections,
                  absl::string_view outro, int column) {
  std::string out(intro);
  for (const Section &s : sections) {
    out += "\n";
    if (!s.heading.empty())
      absl::StrAppend(&out, s.heading, "\n");
    for (const Option &o : s.options) {
      if (o.hidden)
        continue;
      std::string left = absl::StrCat("  ", absl::StrJoin(o.names, ", "));
      if (!o.metavar.empty())
        absl::StrAppend(&left, " ", o.metavar);
      out += wrap(left, o.help, static_cast<size_t>(column));
    }
  }
  if (!outro.empty())
    absl::StrAppend(&out, "\n", outro);
  return out;
}

} // namespace md::cli
