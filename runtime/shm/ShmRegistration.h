//===- ShmRegistration.h - the shm comm's options for a rank -*- C++ -*-===//
//
// What the shm comm's registration (ShmRegistration.cpp) makes its comm
// with, for the comms that run one underneath (runtime/nccl's staged comm).
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_SHM_SHMREGISTRATION_H
#define MD_RUNTIME_SHM_SHMREGISTRATION_H

#include "runtime/rank/Registry.h"
#include "runtime/shm/ShmComm.h"

namespace md::shm {

/// The segment spec.jobId names, this rank and the mesh, the timeout and
/// the fingerprint the ranks of the node compare as they attach.
ShmCommOptions ShmCommOptionsFor(const rank::RankSpec &spec);

} // namespace md::shm

#endif // MD_RUNTIME_SHM_SHMREGISTRATION_H
