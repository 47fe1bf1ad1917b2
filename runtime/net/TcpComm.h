//===- TcpComm.h - collectives between rank processes over TCP -*- C++ -*-===//
//
// The comm of the CPU backend when the ranks run on several machines: host
// memory, TCP between every pair of ranks. Setting it up, every rank
// listens on a free port of every interface; a rendezvous through rank 0
// (Rendezvous.h) tells each rank where the others listen; then each rank
// connects to every lower rank, so the ranks form a full mesh of
// connections that every collective of every group reuses.
//
// A collective runs as a star through the group's first rank, the hub:
// each member sends the hub its contribution, the hub reduces them with
// ReduceInOrder in group order, exactly as ShmComm does, and sends each
// member its result. The same inputs give the same bits on every rank and
// under either comm. Large collectives run in chunks of `chunkBytes` per
// member, so the hub stages at most (group size - 1) chunks.
//
// Every message carries the collective (kind, dtype, count, reduction,
// root, group, sequence number); a member whose collective differs from
// the hub's fails the collective on both with FailedPrecondition naming
// both. No wait is unbounded: a peer that does not answer within the
// timeout is DeadlineExceeded, a closed connection is Unavailable, both
// naming the peer, the collective and its sequence number. A comm that
// failed stays failed and tells its peers, which fail too. docs/runtime.md
// describes the protocol.
//
// A TcpComm is used by one thread of its process at a time.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_NET_TCPCOMM_H
#define MD_RUNTIME_NET_TCPCOMM_H

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/CollectiveComm.h"
#include "runtime/net/Rendezvous.h"
#include "runtime/net/Socket.h"

namespace md::net {

/// Where rank 0 is and who this rank is, as for the rendezvous the comm
/// starts with. The fingerprint must be equal on every rank (e.g. the
/// plan's hash); the comm adds its own settings (mesh, chunk size, byte
/// order). The timeout bounds every wait: the rendezvous, connecting, a
/// peer's answer.
struct TcpCommOptions : RendezvousOptions {
  /// Ranks per shard group of the 2-D mesh; 0 means worldSize (no hybrid
  /// sharding).
  int shardSize = 0;
  /// Bytes a member sends the hub per step of a collective: at least 64.
  int64_t chunkBytes = int64_t(4) << 20;
};

class TcpComm final : public runtime::CollectiveComm {
public:
  /// Listens, meets the other ranks (Rendezvous) and connects to every one
  /// of them. Errors: InvalidArgument for bad options; the rendezvous'
  /// errors; DeadlineExceeded naming the ranks that did not connect in
  /// time; FailedPrecondition when a connection does not come from this
  /// job's ranks.
  static absl::StatusOr<std::unique_ptr<TcpComm>>
  create(const TcpCommOptions &options);

  ~TcpComm() override;
  TcpComm(const TcpComm &) = delete;
  TcpComm &operator=(const TcpComm &) = delete;

  const char *name() const override { return "tcp"; }
  int rank() const override { return options_.rank; }
  int worldSize() const override { return options_.worldSize; }
  absl::StatusOr<runtime::Group> group(runtime::GroupKind kind) const override;

  /// How many collectives this rank has started on groups of `kind`; the
  /// "#N" of error messages is this count for the failing one.
  uint64_t sequence(runtime::GroupKind kind) const;
  /// Where each rank accepted its peers, "host:port", as the rendezvous
  /// exchanged it (empty at world size 1).
  const std::vector<std::string> &addresses() const { return addresses_; }

private:
  struct Op; // one collective in flight, defined in TcpComm.cpp
  TcpComm(const TcpCommOptions &options, runtime::Mesh mesh);

  absl::Status connectMesh(Listener &listener, uint64_t job);
  /// Checks a collective's arguments (checkCollectiveCall), then runs it
  /// through the hub of `group`.
  absl::Status run(const runtime::CollectiveArgs &args,
                   const runtime::Group &group) override;
  absl::Status runHub(Op &op);
  absl::Status runMember(Op &op);
  /// Turns the failure of an exchange with the peers `ranks` into the
  /// comm's message.
  absl::Status peerError(const Op &op, const std::vector<int> &ranks,
                         const std::vector<Transfer> &transfers, int failed,
                         const absl::Status &status) const;
  /// Reads a frame header from `peer` that is not the data expected: an
  /// error report. Returns the error it carries.
  absl::Status readReport(const Op &op, int peer);
  /// Keeps `status` as this comm's state and tells every peer; returns it.
  absl::Status fail(absl::Status status);

  TcpCommOptions options_;
  runtime::Mesh mesh_;
  std::vector<std::string> addresses_;
  std::vector<Socket> peers_; // by rank; none for this rank
  /// A peer holds part of a message from us: an error report now would be
  /// read as data, so a failure only closes the connection.
  std::vector<bool> partial_;
  uint64_t seq_[3] = {0, 0, 0};
  absl::Status failed_;
};

} // namespace md::net

#endif // MD_RUNTIME_NET_TCPCOMM_H
