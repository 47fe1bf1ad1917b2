//===- Builtin.h - the backends and comms this build has -*- C++ -*-===//
//
// BuiltinRegistry holds every backend and comm this build compiled, each
// registered by the file its own folder names to the build
// (MD_RANK_REGISTRATIONS, runtime/rank/CMakeLists.txt): the CPU backend
// and the shm and gloo comms always, the CUDA backend and the nccl and
// shm-staged comms with CUDA. Linking MDRanks links them all.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_RANK_BUILTIN_H
#define MD_RUNTIME_RANK_BUILTIN_H

#include "runtime/rank/Registry.h"

namespace md::rank {

/// Filled on first use (thread-safe), then only read. A registration that
/// failed is its status(), which ChooseRank and MakeRank return.
const Registry &BuiltinRegistry();

} // namespace md::rank

#endif // MD_RUNTIME_RANK_BUILTIN_H
