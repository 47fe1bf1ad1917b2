//===- Rank.h - a rank's backend and comm, made by name -*- C++ -*-===//
//
// MakeRank makes what one rank runs the executor on: the backend and the
// comm its RankSpec names, through their registered factories
// (Registry.h), the comm over that backend and, where the backend says so,
// wrapped by it (the CPU backend's comm thread queues a host comm's
// collectives on its comm stream). Each comm meets the others its own way
// inside its factory: shm through the segment MD_JOB_ID names, gloo
// through the rendezvous and its store, nccl by handing rank 0's unique id
// out through the rendezvous.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_RANK_RANK_H
#define MD_RUNTIME_RANK_RANK_H

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/core/Backend.h"
#include "runtime/core/Comm.h"
#include "runtime/rank/Registry.h"

namespace md::rank {

/// A rank's backend and comm, and how the banner describes them. The comm
/// holds on to the backend (its memory, its streams): it is declared after
/// the backend, so it goes first.
struct Rank {
  std::unique_ptr<runtime::Backend> backend;
  std::unique_ptr<runtime::Comm> comm;
  /// RankBackend's: "1 BLAS thread per rank, a comm thread".
  std::string where;
  /// RankBackend's further banner lines.
  std::vector<std::string> lines;
};

/// Makes spec.backend, then spec.comm over it. InvalidArgument for a name
/// the registry lacks (Unimplemented for a backend this build has not), a
/// comm that does not run on the backend, or a comm of one node whose ranks
/// are not (LOCAL_WORLD_SIZE < WORLD_SIZE); else the factories' errors. An
/// exception a library lets out of a factory is an error naming it, not a
/// terminate.
absl::StatusOr<Rank> MakeRank(const Registry &registry, const RankSpec &spec);

} // namespace md::rank

#endif // MD_RUNTIME_RANK_RANK_H
