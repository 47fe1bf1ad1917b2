//===- NcclRegistration.cpp - the nccl and staged comms in the registry ---===//
//
// The CUDA backend's comms (runtime/rank/Registry.h):
//  - "nccl", ranks that each own a GPU, on one node or several: rank 0
//    makes the NCCL unique id and the rendezvous at rank 0's address hands
//    it to every rank (with the fingerprint check) before the communicators
//    are made;
//  - "shm-staged", ranks that share GPUs on one node: the device buffers
//    staged through host memory and the shm comm, a fallback with a
//    warning.
// Neither is named on the command line: the choice takes them.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/core/Status.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/nccl/NcclComm.h"
#include "runtime/nccl/StagedComm.h"
#include "runtime/net/Rendezvous.h"
#include "runtime/rank/Registry.h"
#include "runtime/shm/ShmComm.h"
#include "runtime/shm/ShmRegistration.h"

namespace md::rank {
namespace {

absl::StatusOr<cuda::CudaBackend *> cudaOf(runtime::Backend &backend,
                                           const char *comm) {
  auto *device = dynamic_cast<cuda::CudaBackend *>(&backend);
  if (device == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", comm, " comm runs on the CUDA backend, not ", backend.name()));
  return device;
}

absl::StatusOr<std::unique_ptr<runtime::Comm>>
makeNccl(const RankSpec &spec, runtime::Backend &backend) {
  MD_ASSIGN_OR_RETURN(cuda::CudaBackend * device, cudaOf(backend, "nccl"));
  // Rank 0 makes the NCCL id; the TCP rendezvous hands it to all.
  nccl::UniqueId id{};
  if (spec.rank == 0) {
    MD_ASSIGN_OR_RETURN(id, nccl::NewUniqueId());
  }
  MD_ASSIGN_OR_RETURN(
      std::vector<std::string> payloads,
      net::Rendezvous(RendezvousOptionsFor(spec),
                      spec.rank == 0 ? std::string_view(id.data(), id.size())
                                     : std::string_view()));
  if (payloads.empty() || payloads[0].size() != id.size())
    return absl::InternalError(
        "the rendezvous did not deliver rank 0's NCCL id");
  std::copy(payloads[0].begin(), payloads[0].end(), id.begin());
  nccl::NcclCommOptions o;
  o.rank = spec.rank;
  o.worldSize = spec.worldSize;
  o.shardSize = spec.shardSize;
  o.uniqueId = id;
  o.backend = device;
  o.timeout = spec.timeout;
  return nccl::NcclComm::create(o);
}

absl::StatusOr<std::unique_ptr<runtime::Comm>>
makeStaged(const RankSpec &spec, runtime::Backend &backend) {
  MD_ASSIGN_OR_RETURN(cuda::CudaBackend * device,
                      cudaOf(backend, "shm-staged"));
  MD_ASSIGN_OR_RETURN(std::unique_ptr<shm::ShmComm> host,
                      shm::ShmComm::create(shm::ShmCommOptionsFor(spec)));
  return std::make_unique<nccl::StagedComm>(std::move(host), *device);
}

} // namespace

absl::Status RegisterNcclComms(Registry &registry) {
  CommInfo nccl;
  nccl.name = "nccl";
  nccl.summary = "NCCL, a GPU per rank, on one node or several";
  nccl.needs.backends = {"cuda"};
  nccl.needs.devices = DeviceUse::OnePerRank;
  nccl.needs.rendezvous = true;
  nccl.preference = 10;
  nccl.make = makeNccl;
  MD_RETURN_IF_ERROR(registry.addComm(std::move(nccl)));

  CommInfo staged;
  staged.name = "shm-staged";
  staged.summary = "ranks sharing GPUs on one node: device buffers staged "
                   "through host memory and the shm comm";
  staged.needs.backends = {"cuda"};
  staged.needs.oneNode = true;
  staged.needs.oneNodeBecause = "their collectives go through host shared "
                                "memory";
  staged.needs.devices = DeviceUse::Shared;
  staged.preference = 20;
  staged.fallbackWarning = "ranks share GPUs and their collectives are staged "
                           "through host shared memory (same math, slower "
                           "than NCCL)";
  staged.make = makeStaged;
  staged.removeLeftovers = shm::ShmComm::removeSegment;
  return registry.addComm(std::move(staged));
}

} // namespace md::rank
