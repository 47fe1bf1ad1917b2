//===- BackendChecks.h - checks every backend makes alike -*- C++ -*-===//
//
// The memory and stream methods of Backend (allocate, copy, zero, events,
// streams) take the same arguments on every backend and refuse the same
// bad ones with the same message, only the backend's name differs. These
// checks are written here once; `backend` starts each message ("cpu
// backend: stream 2 does not exist (2 streams)").
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_BACKENDCHECKS_H
#define MD_RUNTIME_CORE_BACKENDCHECKS_H

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Backend.h"

namespace md::runtime {

/// A stream or event handle: an index below the `count` the backend holds
/// ("cpu backend: event 3 was not created (2 events)").
inline absl::Status checkHandleId(const char *backend, const char *kind,
                                  int64_t id, int64_t count,
                                  const char *otherwise) {
  if (id >= 0 && id < count)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: %s %d %s (%d %ss)", backend, kind, id, otherwise, count, kind));
}

/// A stream index below numStreams.
inline absl::Status checkStreamId(const char *backend, Stream stream,
                                  int numStreams) {
  return checkHandleId(backend, "stream", stream.id, numStreams,
                       "does not exist");
}

/// An event that createEvent() made: an index below numEvents.
inline absl::Status checkEventId(const char *backend, Event event,
                                 int64_t numEvents) {
  return checkHandleId(backend, "event", event.id, numEvents,
                       "was not created");
}

/// The bytes to reserve for allocate(bytes): rounded up to kAllocAlignment,
/// and never 0 (aligned_alloc wants a multiple of the alignment, and an
/// empty buffer still gets an address of its own).
inline absl::StatusOr<int64_t> allocationBytes(const char *backend,
                                               int64_t bytes) {
  if (bytes < 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot allocate %d bytes", backend, bytes));
  int64_t rounded =
      (bytes + kAllocAlignment - 1) / kAllocAlignment * kAllocAlignment;
  return rounded == 0 ? kAllocAlignment : rounded;
}

/// copy(dst, src, bytes): a byte count that is not negative, and buffers
/// whenever there is something to copy.
inline absl::Status checkCopy(const char *backend, const void *dst,
                              const void *src, int64_t bytes) {
  if (bytes < 0 || (bytes > 0 && (dst == nullptr || src == nullptr)))
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: bad copy of %d bytes from %p to %p", backend, bytes, src, dst));
  return absl::OkStatus();
}

/// zero(dst, bytes): likewise.
inline absl::Status checkZero(const char *backend, const void *dst,
                              int64_t bytes) {
  if (bytes < 0 || (bytes > 0 && dst == nullptr))
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: bad zero of %d bytes at %p", backend, bytes, dst));
  return absl::OkStatus();
}

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_BACKENDCHECKS_H
