//===- Checkpoint.h - the files of md's checkpoints -*- C++ -*-===//
//
// A plan's `save` writes one of two checkpoints (docs/runtime.md):
//   - full: dir/step_NNNNNNNN.safetensors, every parameter by name at its
//     global shape in F32, written by rank 0 (what PyTorch loads);
//   - sharded: the directory dir/step_NNNNNNNN holding rank_RRRRR.safetensors
//     per rank (its persistent buffers as it holds them) and meta.json,
//     written under dir/step_NNNNNNNN.tmp and renamed into place.
// This file names those files and writes their contents; the executor
// decides what goes in them and keeps the ranks in step.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_CHECKPOINT_H
#define MD_RUNTIME_CORE_CHECKPOINT_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/core/Executor.h"
#include "runtime/plan/Schema.h"

namespace md::runtime {

/// Where a `save` of `format` at step `step` writes: under `dir`
/// ("checkpoints" when empty), step_%08d.safetensors (full) or the
/// directory step_%08d (sharded).
std::string CheckpointPath(const std::string &dir, fb::CheckpointFormat format,
                           int64_t step);
/// The file of rank `rank` in the sharded checkpoint directory `dir`.
std::string ShardFileName(const std::string &dir, int rank);

/// The safetensors dtype of a plan dtype ("F32", "BF16", ..., "BOOL").
const char *SafetensorsDType(fb::DType t);

/// Writes `params` as F32 safetensors at `path`, atomically.
absl::Status
WriteFullCheckpoint(const std::string &path,
                    const std::vector<NamedTensor> &params,
                    const std::map<std::string, std::string> &meta);

/// What meta.json of a sharded checkpoint says.
struct ShardedCheckpointInfo {
  std::string model, plan;
  int64_t worldSize = 0, shardGroupSize = 0, step = 0, epoch = 0, seed = 0;
};
/// meta.json's text (one line of JSON).
std::string ShardedCheckpointMeta(const ShardedCheckpointInfo &info);

/// Publishes the finished sharded checkpoint `tmp` (its ranks' files and
/// meta.json written) as `dir`, then syncs the parent directory. An older
/// `dir` loses its ranks' files and meta.json and is replaced; when it
/// holds other files too it stays (FailedPrecondition), and so does `tmp`.
absl::Status PublishShardedCheckpoint(const std::string &tmp,
                                      const std::string &dir);

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_CHECKPOINT_H
