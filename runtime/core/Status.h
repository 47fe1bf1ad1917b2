//===- Status.h - early returns on absl::Status -*- C++ -*-===//
//
// The Abseil release md builds against has no public status macros; these
// two keep the runtime's error paths one line each. StatusOfCall turns an
// exception that a library lets out (or std::bad_alloc) into a Status, at
// the few places every kernel and comm call passes through, so none reaches
// std::terminate.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_STATUS_H
#define MD_RUNTIME_CORE_STATUS_H

#include <exception>
#include <new>
#include <string>

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

namespace md::runtime {

/// f() (an absl::Status); an exception escaping it is an error naming
/// what() ("matmul"; called only then, so it may build a string):
/// ResourceExhausted for std::bad_alloc, Internal for anything else.
template <typename F, typename What>
absl::Status StatusOfCall(F &&f, What &&what) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc &) {
    return absl::ResourceExhaustedError(std::string(what()) +
                                        ": out of host memory");
  } catch (const std::exception &e) {
    return absl::InternalError(std::string(what()) +
                               ": a library threw: " + e.what());
  } catch (...) {
    return absl::InternalError(std::string(what()) +
                               ": a library threw a non-standard exception");
  }
}

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_STATUS_H
