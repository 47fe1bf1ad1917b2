//===- RankPath.h - per-rank file names in the recipe -----------*- C++ -*-===//
//
// A path in the recipe's hooks (`exists("stop.{rank}")`) may name a file per
// rank through the placeholders {rank}, {local_rank} and {world_size}. The
// plan is one file for every rank, so the path travels unexpanded and each
// executor expands it with its own values when the hook runs. mdc checks the
// placeholders when it compiles the recipe and the executor checks them
// again (a plan is input too); both call UnknownRankPlaceholder, so they
// accept the same paths. It includes nothing but the standard library: the
// frontend includes it without linking the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_RANKPATH_H
#define MD_RUNTIME_CORE_RANKPATH_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace md::runtime {

/// The value a placeholder names, or -1 for an unknown name.
struct RankValues {
  int64_t rank = 0, localRank = 0, worldSize = 1;

  int64_t lookup(std::string_view name) const {
    if (name == "rank")
      return rank;
    if (name == "local_rank")
      return localRank;
    if (name == "world_size")
      return worldSize;
    return -1;
  }
};

/// The first brace group of `path` that is not one of the placeholders
/// (`{step}`, or a `{` without its `}`), or nullopt when every one is known.
/// A path with no braces is always fine.
inline std::optional<std::string> UnknownRankPlaceholder(std::string_view path) {
  const RankValues probe;
  for (size_t open = path.find_first_of("{}"); open != std::string_view::npos;
       open = path.find_first_of("{}", open + 1)) {
    if (path[open] == '}')
      return std::string("}");
    size_t close = path.find('}', open);
    if (close == std::string_view::npos)
      return std::string(path.substr(open));
    std::string_view name = path.substr(open + 1, close - open - 1);
    if (probe.lookup(name) < 0)
      return std::string(path.substr(open, close - open + 1));
    open = close;
  }
  return std::nullopt;
}

/// `path` with each placeholder replaced by this rank's value. Call it on a
/// path UnknownRankPlaceholder accepts; other braces are copied as they are.
inline std::string ExpandRankPath(std::string_view path,
                                  const RankValues &values) {
  std::string out;
  out.reserve(path.size());
  size_t at = 0;
  for (size_t open = path.find('{'); open != std::string_view::npos;
       open = path.find('{', at)) {
    size_t close = path.find('}', open);
    if (close == std::string_view::npos)
      break;
    int64_t value = values.lookup(path.substr(open + 1, close - open - 1));
    if (value < 0) {
      out.append(path.substr(at, close + 1 - at));
    } else {
      out.append(path.substr(at, open - at));
      out.append(std::to_string(value));
    }
    at = close + 1;
  }
  out.append(path.substr(at));
  return out;
}

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_RANKPATH_H
