//===- Rendezvous.h - ranks on several machines find each other -*- C++ -*-===//
//
// Before ranks on different machines can talk they must meet: every rank
// knows only rank 0's address (MASTER_ADDR:MASTER_PORT, as with torchrun).
// Rendezvous is an all-gather of small blobs through rank 0: rank 0
// listens, every other rank connects to it (retrying until rank 0 is up)
// and sends its blob; once all have arrived, and agree on the world size
// and the job's fingerprint, rank 0 sends every rank all the blobs, indexed
// by rank, and closes its listening socket, so a later rendezvous can use
// the same port. The gloo comm uses it to meet and learn each rank's host
// (then Gloo connects through RendezvousStore.h on the same port), the
// nccl comm to hand out rank 0's NCCL id; launchers can use it to agree on
// anything small.
//
// Messages start with a magic and a version: a port scanner or another
// program that connects to rank 0 is answered with an error and ignored,
// and a rank that reaches something other than an md rank 0 says so.
// docs/runtime.md describes the wire format.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_NET_RENDEZVOUS_H
#define MD_RUNTIME_NET_RENDEZVOUS_H

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace md::net {

struct RendezvousOptions {
  std::string masterAddr = "127.0.0.1"; // host name or address of rank 0
  int masterPort = 29500;               // rank 0 listens here (all interfaces)
  int rank = 0, worldSize = 1;
  /// Must be equal on every rank (e.g. plan hash, world size, backend); a
  /// mismatch fails every rank with a message naming the odd rank and both values.
  std::string fingerprint;
  std::chrono::milliseconds timeout{300'000};
};

/// The most bytes one rank's payload may have.
inline constexpr size_t kMaxRendezvousPayload = size_t(1) << 20;
/// The most bytes a fingerprint may have.
inline constexpr size_t kMaxRendezvousFingerprint = size_t(64) << 10;

/// An all-gather of small blobs (each <= 1 MiB) through rank 0 over TCP:
/// returns every rank's payload, indexed by rank. Errors: DeadlineExceeded naming
/// the ranks that never arrived; FailedPrecondition for a fingerprint mismatch;
/// InvalidArgument for a duplicate rank or disagreeing world sizes; on the other
/// ranks the same message, prefixed by "rank 0: ", so every rank fails with the reason.
absl::StatusOr<std::vector<std::string>> Rendezvous(const RendezvousOptions &options,
                                                    std::string_view payload);

/// Rendezvous for a payload that names this rank's own address: `makePayload`
/// gets the host this rank reached rank 0 from (the local address of its
/// connection, which is an address of this machine that rank 0's network
/// routes to); on rank 0 it gets options.masterAddr, the name the others
/// reached it by.
absl::StatusOr<std::vector<std::string>> RendezvousWithAddress(
    const RendezvousOptions &options,
    const std::function<std::string(const std::string &host)> &makePayload);

} // namespace md::net

#endif // MD_RUNTIME_NET_RENDEZVOUS_H
