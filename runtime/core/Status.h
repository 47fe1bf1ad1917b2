//===- Status.h - early returns on absl::Status -*- C++ -*-===//
//
// The Abseil release md builds against has no public status macros; these
// two keep the runtime's error paths one line each.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_STATUS_H
#define MD_RUNTIME_CORE_STATUS_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

/// Returns the status of `expr` from the enclosing function unless it is OK.
#define MD_RETURN_IF_ERROR(expr)                                               \
  do {                                                                         \
    ::absl::Status md_status_ = (expr);                                        \
    if (!md_status_.ok())                                                      \
      return md_status_;                                                       \
  } while (0)

#define MD_STATUS_CONCAT_INNER(a, b) a##b
#define MD_STATUS_CONCAT(a, b) MD_STATUS_CONCAT_INNER(a, b)

/// `MD_ASSIGN_OR_RETURN(auto x, f());` declares x from a StatusOr, or
/// returns its error.
#define MD_ASSIGN_OR_RETURN(lhs, expr)                                         \
  MD_ASSIGN_OR_RETURN_IMPL(MD_STATUS_CONCAT(md_statusor_, __LINE__), lhs, expr)
#define MD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                               \
  auto tmp = (expr);                                                           \
  if (!tmp.ok())                                                               \
    return tmp.status();                                                       \
  lhs = std::move(*tmp)

#endif // MD_RUNTIME_CORE_STATUS_H
