//===- CheckpointMeta.h - meta.json of a sharded checkpoint -*- C++ -*-===//
//
// meta.json describes a sharded checkpoint completely (docs/runtime.md,
// "Checkpoint format"): what was saved (model, plan, world size, step,
// the data sampler's position, the seeds), every file with its size and
// XXH3-64 checksum, and every logical tensor with its global shape, dtype
// and the pieces of it each rank's file holds (CheckpointLayout.h), and,
// last, an XXH3-64 checksum of its own text. Loading trusts nothing it has
// not checked: meta.json's checksum, fields and ranges, then the files'
// sizes and checksums, and each file's header against meta.json (the save
// id, rank and step it repeats, the pieces meta.json places in it), each
// failure naming the file.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_CHECKPOINTMETA_H
#define MD_RUNTIME_EXEC_CHECKPOINTMETA_H

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/exec/CheckpointLayout.h"

namespace md::runtime {

/// The version of meta.json this md writes. Version 3 ends with
/// "meta_xxh3", the checksum of the text before it; version 2, which has
/// none, is still read (ShardedMeta::checksummed is then false).
inline constexpr int64_t kShardedFormatVersion = 3;
/// The oldest version this md reads.
inline constexpr int64_t kOldestShardedFormatVersion = 2;

struct CheckpointFile {
  std::string name; // relative to the checkpoint directory
  int64_t bytes = 0;
  uint64_t xxh3 = 0;
};

struct ShardedMeta {
  std::string id; // the save's unique id (its temporary directory's)
  std::string model, plan;
  int64_t worldSize = 0, shardGroupSize = 0;
  int64_t step = 0;
  /// The training data's position: the epoch of the last batch, the
  /// batches every rank has read of it and in all, and the samples in one
  /// rank's batch.
  int64_t epoch = 0, batchesInEpoch = 0, batchesRead = 0, microBatch = 0;
  int64_t seed = 0, samplerSeed = 0;
  std::vector<CheckpointFile> files; // files[r]: rank r's
  std::vector<TensorLayout> tensors;
  /// The format version read, and whether meta.json carried its own
  /// checksum (version 3 on), which then held.
  int64_t version = kShardedFormatVersion;
  bool checksummed = true;
};

/// meta.json's text.
std::string ShardedMetaJson(const ShardedMeta &meta);
/// Parses meta.json's text (`path` names it in messages): a foreign or
/// newer format, a missing field or a piece outside its tensor or files is
/// an InvalidArgument naming the file and the field; text whose checksum
/// ("meta_xxh3") does not hold (an edit, a disk's fault) is a DataLoss
/// naming both checksums.
absl::StatusOr<ShardedMeta> ParseShardedMeta(const std::string &text,
                                             const std::string &path);
/// Reads and parses `dir`/meta.json.
absl::StatusOr<ShardedMeta> ReadShardedMeta(const std::string &dir);

/// XXH3-64 of the file at `path`, and its size.
absl::StatusOr<CheckpointFile> HashFile(const std::string &path);

/// XXH3-64 and size of a byte stream fed in pieces: a file as it is
/// written (HashFile's result for the file, without reading it back).
class StreamHash {
public:
  StreamHash();
  ~StreamHash();
  StreamHash(const StreamHash &) = delete;
  StreamHash &operator=(const StreamHash &) = delete;
  void update(const void *data, size_t bytes);
  uint64_t digest() const;
  int64_t bytes() const { return bytes_; }

private:
  void *state_; // an XXH3_state_t
  int64_t bytes_ = 0;
};

/// What is wrong with a checkpoint's file, found by one rank and told to
/// the others as numbers (so that every rank reports it alike).
enum class FileProblem : int64_t {
  None = 0,
  Missing = 1,    // `found`: errno of stat
  Size = 2,       // `found`: its size
  Checksum = 3,   // `found`: its XXH3-64
  Unreadable = 4, // `found`: errno of reading it
  // The file's safetensors header against meta.json (CheckRankFile):
  Header = 5, // not a rank file of an md sharded checkpoint
  SaveId = 6, // `found`: the save id its header names (-1: none)
  Step = 7,   // `found`: the step its header names (-1: none)
  Rank = 8,   // `found`: the rank its header names (-1: none)
  Piece = 9,  // `found`: the index of the piece it does not hold, counting
              // every tensor's pieces in meta.json's order
};
struct FileCheck {
  FileProblem problem = FileProblem::None;
  int64_t found = 0;
};
/// Checks file `f` of checkpoint `dir`: present, of its size, and (with
/// `checksum`) of its checksum.
FileCheck CheckCheckpointFile(const std::string &dir, const CheckpointFile &f,
                              bool checksum);
/// The error `check` of file `f` in `dir` is, naming the file and what is
/// wrong with it (OK for no problem).
absl::Status FileCheckStatus(const std::string &dir, const CheckpointFile &f,
                             const FileCheck &check);
/// FileCheckStatus of CheckCheckpointFile.
absl::Status VerifyCheckpointFile(const std::string &dir,
                                  const CheckpointFile &f, bool checksum);

/// Checks rank `r`'s file of checkpoint `dir` (read as `meta`): as
/// CheckCheckpointFile, and with `full` also its checksum and its header,
/// which must be an md rank file naming meta.json's save id and step and
/// rank `r`, and hold every piece meta.json places in it (a file tensor of
/// the piece's dtype with at least offset + count elements).
FileCheck CheckRankFile(const std::string &dir, const ShardedMeta &meta,
                        int64_t r, bool full);
/// The error `check` of rank `r`'s file is (OK for no problem), naming the
/// file and the field that does not match.
absl::Status RankFileCheckStatus(const std::string &dir,
                                 const ShardedMeta &meta, int64_t r,
                                 const FileCheck &check);

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_CHECKPOINTMETA_H
