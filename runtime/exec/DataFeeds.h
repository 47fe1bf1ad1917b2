//===- DataFeeds.h - the data a plan's batch instructions read -*- C++ -*-===//
//
// A plan's `batch` instructions read samples from a data set named by the
// recipe (training) or by an `evaluate` (held-out data). DataFeeds owns
// those sources for one rank: it derives the fields (names, shapes, element
// types, index bounds) from the batch instruction's outputs, opens the data
// set and its distributed sampler, and copies each batch to the device,
// casting floats to bf16/f16 where the plan's inputs are. While an
// evaluation runs, batches come from its feed instead of the training one.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_DATAFEEDS_H
#define MD_RUNTIME_EXEC_DATAFEEDS_H

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/core/Backend.h"
#include "runtime/exec/Executor.h"
#include "runtime/data/Dataset.h"
#include "runtime/data/Sampler.h"
#include "runtime/plan/Schema.h"

namespace md::runtime {

/// Synthetic data is endless; an evaluation that asks for "all" of it reads
/// this many samples (docs/runtime.md).
inline constexpr int64_t kSyntheticEvalSamples = 1024;

class DataFeeds {
public:
  /// `samplerSeed` draws the training order (and the token windows).
  DataFeeds(const fb::Plan &plan, int64_t worldSize, int rank,
            uint64_t samplerSeed);
  ~DataFeeds();
  DataFeeds(const DataFeeds &) = delete;
  DataFeeds &operator=(const DataFeeds &) = delete;

  /// Checks that every batch of the step reads the same tensors and opens
  /// the recipe's training data for them (nothing when the plan reads none).
  absl::Status openTraining();
  /// Opens every data source the plan reads (the training data and each
  /// evaluation's) as a rank would and checks their contents
  /// (Dataset::checkContents): what a launcher runs before it starts
  /// ranks, so that a missing file, a file of another token width or ids
  /// outside the vocabulary are found before launch. Errors name the file.
  /// Without `training` (an --evaluate run), the evaluations' sources only.
  absl::Status checkSources(bool training);
  /// The training data, the sampler and the tokens per sample, for the
  /// startup banner ("none" without training data).
  void describe(RunInfo &info) const;

  /// Reads the next batch of the feed in use (the evaluation's while one
  /// runs, else the training data) into `outs`, the batch instruction's
  /// outputs in order, on the compute stream.
  absl::Status read(absl::Span<const TensorRef> outs, Backend &backend);
  /// The epoch of the last training batch read (0 before the first).
  int64_t epoch() const { return epoch_; }

  /// Where the training data stands: the epoch of the last batch read, the
  /// batches this rank has read of it, and in all. The sampler is a pure
  /// function of it, so a checkpoint keeps it and a resumed run seeks to it.
  struct Position {
    int64_t epoch = 0, batchesInEpoch = 0, batchesRead = 0;
  };
  Position position() const;
  /// Continues the training data at `pos`, saved by ranks that read
  /// `savedSamplesPerBatch` samples per batch over all ranks (W x micro
  /// batch). At another W the position in the epoch is converted through
  /// the samples read of it, which is exact as both runs read whole global
  /// batches; the epochs' lengths can still differ (the tail dropped or
  /// padded depends on W x micro batch).
  void resume(const Position &pos, int64_t savedSamplesPerBatch);

  /// Runs an evaluation over held-out data set `dataset`: `runBody` once
  /// per batch (`batches`, or one epoch when <= 0), each run reading its
  /// batch through read() and returning its loss. Returns the mean loss
  /// (NaN over no batches). Without a batch instruction (`batch` null) the
  /// body reads no data and runs once.
  absl::StatusOr<double>
  evaluate(int32_t dataset, const fb::Instruction *batch, int64_t batches,
           absl::FunctionRef<absl::StatusOr<double>()> runBody);

private:
  struct Feed;

  absl::StatusOr<std::vector<data::Field>>
  batchFields(const fb::Instruction &batch, int64_t *batchSize) const;
  /// The number of rows of the table an integer batch input indexes (0
  /// when it indexes none): the data's ids must stay below it.
  int64_t indexBound(int32_t buffer) const;
  absl::StatusOr<std::unique_ptr<Feed>>
  open(int32_t dataset, const fb::Instruction &batch, bool training) const;

  const fb::Plan &plan_;
  int64_t worldSize_;
  int rank_;
  uint64_t samplerSeed_;
  std::unique_ptr<Feed> train_;
  Feed *eval_ = nullptr; // the feed of the evaluation running, if any
  int64_t epoch_ = 0;
};

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_DATAFEEDS_H
