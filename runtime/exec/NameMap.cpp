//===- NameMap.cpp - parsing and applying --init-map files ----------------===//

#include "runtime/exec/NameMap.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace md::runtime {
namespace {

int stars(const std::string &s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '*'));
}

/// Whether `name` matches `pattern` (at most one '*', standing for a
/// non-empty run of digits); the digits go to `index`.
bool matches(const std::string &pattern, const std::string &name,
             std::string *index) {
  size_t star = pattern.find('*');
  if (star == std::string::npos) {
    index->clear();
    return pattern == name;
  }
  const std::string prefix = pattern.substr(0, star);
  const std::string suffix = pattern.substr(star + 1);
  if (name.size() <= prefix.size() + suffix.size() ||
      name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  for (char c : digits)
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
  *index = digits;
  return true;
}

std::string substitute(const std::string &pattern, const std::string &index) {
  size_t star = pattern.find('*');
  if (star == std::string::npos)
    return pattern;
  return pattern.substr(0, star) + index + pattern.substr(star + 1);
}

} // namespace

absl::StatusOr<NameMap> ParseNameMap(const std::string &text,
                                     const std::string &path) {
  NameMap map;
  map.path = path;
  int lineNo = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++lineNo;
    line = line.substr(0, line.find('#'));
    std::vector<std::string> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (words.empty())
      continue;
    auto bad = [&](const std::string &why) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s:%d: %s", path, lineNo, why));
    };
    NameRule rule;
    rule.line = lineNo;
    if (words[0] == "ignore") {
      if (words.size() != 2)
        return bad("expected 'ignore FILE_TENSOR'");
      rule.ignore = true;
      rule.file = words[1];
      if (stars(rule.file) > 1)
        return bad("a name has at most one '*'");
    } else if (words[0] == "map") {
      const char *expected =
          "expected 'map MD_PARAMETER FILE_TENSOR [transpose] [rows K/N]'";
      if (words.size() < 3)
        return bad(expected);
      if (words.size() > 3 && words[3] == "transpose") {
        rule.transpose = true;
        words.erase(words.begin() + 3);
      }
      if (words.size() != 3 && words.size() != 5)
        return bad(expected);
      rule.md = words[1];
      rule.file = words[2];
      if (stars(rule.md) > 1 || stars(rule.file) > 1)
        return bad("a name has at most one '*'");
      if (stars(rule.md) != stars(rule.file))
        return bad(absl::StrCat("'", rule.md, "' and '", rule.file,
                                "' must both have a '*' or neither"));
      if (words.size() == 5) {
        std::vector<std::string> kn = absl::StrSplit(words[4], '/');
        if (words[3] != "rows" || kn.size() != 2 ||
            !absl::SimpleAtoi(kn[0], &rule.part) ||
            !absl::SimpleAtoi(kn[1], &rule.parts) || rule.parts < 1 ||
            rule.part < 0 || rule.part >= rule.parts)
          return bad(absl::StrCat("expected 'rows K/N' with 0 <= K < N, not '",
                                  words[3], " ", words[4], "'"));
      }
    } else {
      return bad(absl::StrCat("unknown rule '", words[0],
                              "' (a rule is 'map' or 'ignore')"));
    }
    map.rules.push_back(std::move(rule));
  }
  return map;
}

absl::StatusOr<NameMap> ReadNameMap(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot read the name map"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseNameMap(text.str(), path);
}

absl::StatusOr<SafetensorsHeader> ApplyNameMap(const NameMap &map,
                                               const SafetensorsHeader &file,
                                               const std::string &weightsPath) {
  SafetensorsHeader out;
  out.metadata = file.metadata;
  out.fileBytes = file.fileBytes;
  std::map<std::string, int> placedBy; // md name -> the rule's line
  std::vector<bool> used(map.rules.size(), false);
  for (const auto &[name, entry] : file.tensors) {
    bool placed = false;
    for (size_t r = 0; r < map.rules.size(); ++r) {
      const NameRule &rule = map.rules[r];
      std::string index;
      if (!matches(rule.file, name, &index))
        continue;
      used[r] = true;
      placed = true;
      if (rule.ignore)
        continue;
      const std::string md = substitute(rule.md, index);
      auto [it, fresh] = placedBy.emplace(md, rule.line);
      if (!fresh)
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: lines %d and %d both place %s", map.path,
                            std::min(rule.line, it->second),
                            std::max(rule.line, it->second), md));
      SafetensorsEntry e = entry;
      if (rule.transpose) {
        if (e.shape.size() != 2 || e.shape[1] % rule.parts != 0)
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s:%d: %s in %s is [%s]: 'transpose' takes a 2-D tensor whose "
              "%d columns split into %d equal blocks",
              map.path, rule.line, name, weightsPath,
              absl::StrJoin(e.shape, ", "),
              e.shape.size() == 2 ? e.shape[1] : 0, rule.parts));
        const int64_t cols = e.shape[1] / rule.parts;
        e.transposed = SafetensorsEntry::Transposed{e.shape[1],
                                                    rule.part * cols};
        e.shape = {cols, e.shape[0]};
      } else if (rule.parts > 1) {
        if (e.shape.empty() || e.shape[0] % rule.parts != 0)
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s:%d: %s's %d rows in %s do not split into %d equal blocks",
              map.path, rule.line, name, e.shape.empty() ? 0 : e.shape[0],
              weightsPath, rule.parts));
        const int64_t rowBytes = (e.end - e.begin) / e.shape[0];
        const int64_t block = e.shape[0] / rule.parts;
        e.begin += rule.part * block * rowBytes;
        e.end = e.begin + block * rowBytes;
        e.shape[0] = block;
      }
      out.tensors.emplace(md, std::move(e));
    }
    if (!placed)
      return absl::InvalidArgumentError(
          absl::StrFormat("%s holds %s, which %s neither maps nor ignores",
                          weightsPath, name, map.path));
  }
  for (size_t r = 0; r < map.rules.size(); ++r)
    if (!used[r] && !map.rules[r].ignore)
      return absl::InvalidArgumentError(
          absl::StrFormat("%s:%d: %s holds no tensor '%s'", map.path,
                          map.rules[r].line, weightsPath, map.rules[r].file));
  return out;
}

} // namespace md::runtime
