//===- Checkpoint.h - the files of md's checkpoints -*- C++ -*-===//
//
// A plan's `save` writes one of two checkpoints (docs/runtime.md):
//   - full: dir/step_NNNNNNNN.safetensors, every parameter by name at its
//     global shape in F32, written by rank 0 (what PyTorch loads);
//   - sharded: the directory dir/step_NNNNNNNN holding rank_RRRRR.safetensors
//     per rank (its shard of every state) and meta.json (CheckpointMeta.h),
//     written under dir/step_NNNNNNNN.tmp-<save id> and renamed into place.
// This file names those files, writes their contents, publishes a sharded
// checkpoint and finds the newest one; the executor decides what goes in
// them and keeps the ranks in step.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_CHECKPOINT_H
#define MD_RUNTIME_EXEC_CHECKPOINT_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/exec/Executor.h"
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

/// Publishes the finished sharded checkpoint `tmp` (its ranks' files and
/// meta.json written and synced) as `dir`, then syncs the parent directory.
/// An older `dir` is swapped out in one atomic rename (RENAME_EXCHANGE) and
/// only then removed, so a crash leaves the old checkpoint or the new one
/// published, never neither. When the older `dir` holds other files than a
/// checkpoint's it stays (FailedPrecondition), and so does `tmp`.
absl::Status PublishShardedCheckpoint(const std::string &tmp,
                                      const std::string &dir);

/// A fresh id for a save: 16 hex digits from the system's random source.
/// It names the save's temporary directory, so that a later run never
/// publishes what a dead one left half written.
std::string NewSaveId();
/// The temporary directory of save `id` of the checkpoint `dir`.
std::string SaveTempDir(const std::string &dir, const std::string &id);
/// Puts back under its own name each published checkpoint that a save on a
/// file system without RENAME_EXCHANGE set aside (step_N.tmp-ID.old) and
/// that no step_N replaced: the save died between its two renames, so the
/// old checkpoint is the one to keep.
absl::Status RestoreSetAsideCheckpoints(const std::string &parent);
/// Removes the temporaries that saves of dead runs left in `parent`, but
/// `keep`, after putting back what RestoreSetAsideCheckpoints finds: a
/// sharded save's directory (step_N.tmp, step_N.tmp-ID) and a full
/// checkpoint's file (step_N.safetensors.tmp.PID), each only when its
/// writer is gone (TemporaryWriterGone: a live save holds its lock).
absl::Status RemoveStaleTemporaries(const std::string &parent,
                                    const std::string &keep);

/// The step of the newest published sharded checkpoint under `dir` (a
/// step_NNNNNNNN directory holding meta.json) of a step below `before`, or
/// -1 when there is none. `dir` is a save's directory ("" for
/// "checkpoints").
int64_t LatestShardedCheckpointStep(const std::string &dir,
                                    int64_t before = INT64_MAX);

/// A save's `keep = K`: of the complete md checkpoints of `format` under the
/// save's directory `dir` ("" for "checkpoints"), keeps the one of step
/// `written` (just published) and the K - 1 others of the highest steps,
/// and removes the rest; returns the paths removed, oldest first. Only what
/// md's saves publish counts and is ever removed: a name of the format's
/// pattern (step_NNNNNNNN.safetensors, step_NNNNNNNN/) whose contents say
/// it is md's checkpoint of that step (a full one's safetensors metadata; a
/// sharded one's meta.json, every file it lists at its size, nothing else
/// in the directory). Anything else — foreign files, temporaries of saves
/// in progress, a checkpoint of the other format, a damaged one — stays.
/// A sharded checkpoint is first renamed to a temporary name (at once
/// invisible to --resume auto; a crash then leaves a stale temporary that
/// the next save removes), then deleted. `keep` must be at least 1.
absl::StatusOr<std::vector<std::string>>
RetainNewestCheckpoints(const std::string &dir, fb::CheckpointFormat format,
                        int64_t keep, int64_t written);

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_CHECKPOINT_H
