//===- EnumNames.h - names of enum values, from a table ---------*- C++ -*-===//
//
// md names the values of its small enums in messages, reports and JSON: the
// comm's reductions, collectives and groups, the flight recorder's states,
// the plan's dtypes and buffer roles. Every such enum is numbered from 0
// without gaps, so its names are one table in value order. Where a table is
// defined, a static_assert with namesEveryValue ties its length to the enum's
// last value, so a value added without a name fails to compile, as a switch
// with -Wswitch would. Header only and dependency-free: the runtime and the
// plan loader use it alike.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_ENUMNAMES_H
#define MD_RUNTIME_CORE_ENUMNAMES_H

#include <cstddef>
#include <optional>
#include <string_view>

namespace md::runtime {

/// names[value], or `unknown` for a value past the table (one read from a
/// corrupt plan or ring).
template <typename E, size_t N>
constexpr const char *enumName(const char *const (&names)[N], E value,
                               const char *unknown = "?") {
  auto index = static_cast<size_t>(value);
  return index < N ? names[index] : unknown;
}

/// The value whose name is `name`, or nullopt: the inverse of enumName,
/// for command lines and environment variables that spell a value.
template <typename E, size_t N>
constexpr std::optional<E> enumFromName(const char *const (&names)[N],
                                        std::string_view name) {
  for (size_t i = 0; i < N; ++i)
    if (name == names[i])
      return static_cast<E>(i);
  return std::nullopt;
}

/// Whether `names` has exactly one entry per value of E from 0 to `last`.
template <typename E, size_t N>
constexpr bool namesEveryValue(const char *const (&)[N], E last) {
  return N == static_cast<size_t>(last) + 1;
}

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_ENUMNAMES_H
