//===- ShmRegistration.cpp - the shm comm in the runtime's registry -------===//
//
// "shm": the CPU backend's comm on one node (runtime/rank/Registry.h), the
// choice's first there; --comm shm names it.
//
//===----------------------------------------------------------------------===//

#include "runtime/shm/ShmRegistration.h"

namespace md::shm {

ShmCommOptions ShmCommOptionsFor(const rank::RankSpec &spec) {
  ShmCommOptions o;
  o.jobId = spec.jobId;
  o.rank = spec.rank;
  o.worldSize = spec.worldSize;
  o.shardSize = spec.shardSize;
  o.timeout = spec.timeout;
  // The ranks of one node check their plans as the rendezvous does across
  // nodes: the same file content, W, backend and comm.
  o.fingerprint = spec.fingerprint;
  return o;
}

} // namespace md::shm

namespace md::rank {

absl::Status RegisterShmComm(Registry &registry) {
  CommInfo info;
  info.name = "shm";
  info.summary = "POSIX shared memory between the rank processes of one node";
  info.needs.backends = {"cpu"};
  info.needs.oneNode = true;
  info.needs.oneNodeBecause = "shared memory";
  info.nameable = true;
  info.preference = 10;
  info.make =
      [](const RankSpec &spec,
         runtime::Backend &) -> absl::StatusOr<std::unique_ptr<runtime::Comm>> {
    return shm::ShmComm::create(shm::ShmCommOptionsFor(spec));
  };
  info.removeLeftovers = shm::ShmComm::removeSegment;
  return registry.addComm(std::move(info));
}

} // namespace md::rank
