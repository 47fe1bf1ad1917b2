//===- GlooComm.h - collectives between ranks over Gloo -------*- C++ -*-===//
//
// The comm of the CPU backend when the ranks run on several machines (and
// on one machine with `--comm gloo`): host memory, moved over Gloo's
// transport (TCP; the library under PyTorch's CPU backend). Every member
// exchanges data with every other directly, where the star md used before
// sent everything through one rank (docs/decisions/0007).
//
// Gloo only moves bytes here; the reductions are md's own ReduceInOrder,
// in group order, as in ShmComm, so the same inputs give the same bits
// under either comm, for every collective, dtype and group size:
//  - reduce_scatter sends block j of the send buffer to member j (an
//    all-to-all), then this member adds the n blocks it holds in group
//    order: each member sends and receives (n-1)/n of the buffer, a ring
//    reduce-scatter's traffic, in one step;
//  - all_reduce is that on n shards of the buffer, then every member sends
//    its reduced shard to every other (an all-gather): 2(n-1)/n of the
//    buffer, a ring all-reduce's traffic. One of at most 64 KiB across the
//    group goes whole to every member, which reduces it all: one exchange.
//    The pieces travel in segments (about 4 a piece, 64-512 KiB each):
//    a member reduces each segment as it arrives, while the next ones are
//    on the wire, and sends each reduced segment on at once;
//  - all_gather sends this member's block to every other; broadcast sends
//    the root's buffer to every other member.
//
// Setting it up, the ranks meet through rank 0 (Rendezvous.h), each
// listens on an address it reached rank 0 from, and Gloo connects every
// pair of each group (the world, and on a 2-D mesh the shard and
// replicate groups) through the key-value store rank 0 serves next
// (RendezvousStore.h), which implements Gloo's Store.
//
// Before its data, each collective exchanges a 48-byte header with every
// member of its group (the CollectiveDesc: kind, dtype, count, reduction,
// root, group, sequence number); data of up to 32 KiB per member that is
// one exchange (small collectives) travels with it. A member whose header
// differs fails the collective on every member with FailedPrecondition
// naming both; a member that does not send its header within the timeout is
// DeadlineExceeded, and one whose connection closed is Unavailable, both
// naming it, the collective and its sequence number; so is a failure in
// the data phase. A comm that failed stays failed and closes its
// connections, so that its peers learn at once.
//
// Creating one for more than one rank sets SIGPIPE to be ignored in the
// process: Gloo writes to its sockets without MSG_NOSIGNAL, and a peer
// that dies must fail a collective with its name, not kill this rank.
//
// A GlooComm is used by one thread of its process at a time.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_GLOO_GLOOCOMM_H
#define MD_RUNTIME_GLOO_GLOOCOMM_H

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/CollectiveComm.h"
#include "runtime/net/Rendezvous.h"

namespace gloo {
class Context;
namespace transport {
class Device;
} // namespace transport
} // namespace gloo

namespace md::gloo {

/// Where rank 0 is and who this rank is, as for the rendezvous the comm
/// starts with. The fingerprint must be equal on every rank (e.g. the
/// plan's hash); the comm adds its own settings (mesh, byte order). The
/// timeout bounds every wait: the rendezvous, connecting, a collective.
struct GlooCommOptions : net::RendezvousOptions {
  /// Ranks per shard group of the 2-D mesh; 0 means worldSize (no hybrid
  /// sharding).
  int shardSize = 0;
};

class GlooComm final : public runtime::HostMeshComm {
public:
  /// Meets the other ranks and connects the groups. Errors: InvalidArgument
  /// for bad options; the rendezvous' errors (a mismatched fingerprint is
  /// FailedPrecondition naming the odd rank); Unavailable or
  /// DeadlineExceeded when Gloo cannot connect a pair in time.
  static absl::StatusOr<std::unique_ptr<GlooComm>>
  create(const GlooCommOptions &options);

  ~GlooComm() override;

  const char *name() const override { return "gloo"; }
  // rank(), worldSize(), group() and sequence() are HostMeshComm's.
  /// Where each rank's Gloo device listens, "host:port" (empty at world
  /// size 1).
  const std::vector<std::string> &addresses() const { return addresses_; }

private:
  struct Op; // one collective in flight, defined in GlooComm.cpp
  GlooComm(const GlooCommOptions &options, runtime::Mesh mesh);

  absl::Status connect();
  /// Checks a collective's arguments (checkCollectiveCall), exchanges the
  /// headers, then moves the data.
  absl::Status run(const runtime::CollectiveArgs &args,
                   const runtime::Group &group) override;
  /// Sends this member's header to every member and checks theirs.
  absl::Status exchangeHeaders(const Op &op);
  /// What this rank sends member `peer` of op's group, and where what
  /// `peer` sends it lands (either may be empty).
  struct Transfer {
    int peer;
    const char *send;
    size_t sendBytes;
    char *recv;
    size_t recvBytes;
  };
  /// Posts every transfer at once on Gloo's pairs and waits for them;
  /// `*waitingFor` is the rank waited for when Gloo throws.
  void exchange(const Op &op, const std::vector<Transfer> &transfers,
                int *waitingFor);
  /// The data of op's collective (exchange's exceptions).
  void moveData(const Op &op, int *waitingFor);
  /// The result of a collective whose data came with the headers.
  void finishInline(const Op &op);
  /// reduce_scatter and all_reduce.
  void reduce(const Op &op, int *waitingFor);
  /// The members of op's group whose connections with this rank are gone.
  std::vector<int> closedPeers(const Op &op) const;
  /// Turns an exception of Gloo's into the comm's error.
  absl::Status glooError(const Op &op, const char *phase,
                         const std::exception &e, bool io,
                         int waitingFor) const;
  /// Keeps `status` as this comm's state, closes the connections; returns
  /// it.
  absl::Status fail(absl::Status status);
  /// A buffer of at least `bytes` for received blocks, reused.
  char *staging(int64_t bytes);

  GlooCommOptions options_;
  std::shared_ptr<::gloo::transport::Device> device_;
  /// By group kind; null for a group of one rank. When the shard or the
  /// replicate group is the world, it shares the world's.
  std::shared_ptr<::gloo::Context> contexts_[3];
  std::vector<std::string> addresses_;
  std::vector<char> staging_;
  /// The headers sent and received, with any inlined data.
  std::vector<char> headerOut_, headerIn_;
  absl::Status failed_;
};

} // namespace md::gloo

#endif // MD_RUNTIME_GLOO_GLOOCOMM_H
