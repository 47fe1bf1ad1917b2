//===- Sampler.h - which samples each rank reads, epoch by epoch -*- C++
//-*-===//
//
// The distributed sampler of md's recipe, torch's DistributedSampler made
// part of the program: every rank reads disjoint samples, every rank reads
// the same number of batches, and the order is a permutation seeded by
// (seed, epoch), so a new epoch reshuffles without anyone calling
// set_epoch. Per epoch, with n samples, W ranks and batches of B:
//
//   usable  = floor(n / (W B)) W B   (tail = drop)
//           = ceil(n / (W B)) W B    (tail = pad: wraps around to the start)
//   rank r's j-th sample = perm[(j W + r) mod n],  j in [0, usable / W)
//   rank r's batch b     = its samples j in [b B, (b + 1) B)
//
// An endless data set (synthetic) has no epochs: rank r's j-th sample is
// j W + r. docs/runtime.md, "Data", states the same.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_DATA_SAMPLER_H
#define MD_RUNTIME_DATA_SAMPLER_H

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace md::data {

/// What the sampler does with the samples that do not fill a last batch on
/// every rank (plan.fbs's TailPolicy).
enum class Tail { Drop, Pad };

struct SamplerOptions {
  /// Samples per epoch; -1 for an endless data set.
  int64_t datasetSize = -1;
  int64_t worldSize = 1;
  int64_t rank = 0;
  /// Samples per batch on one rank.
  int64_t batchSize = 1;
  /// Permute the samples (training); false reads them in order (evaluation).
  bool shuffle = true;
  uint64_t seed = 0;
  /// A new permutation every epoch (seed, epoch); false keeps epoch 0's.
  bool reshuffleEachEpoch = true;
  Tail tail = Tail::Drop;
};

/// How a training sampler orders its epochs and ends them, as mdrun's
/// banner and `--inspect` both say it: "random windows redrawn each epoch"
/// (no shuffle: a token file's samples are windows at offsets drawn from
/// (seed, epoch, index)), "reshuffled each epoch" or "shuffled once", then
/// "tail dropped" or "tail padded".
std::string DescribeOrder(bool shuffle, bool reshuffleEachEpoch, Tail tail);

class DistributedSampler {
public:
  /// InvalidArgument for a bad rank, world size or batch size, and for a
  /// finite data set too small for one batch on every rank.
  static absl::StatusOr<DistributedSampler>
  Create(const SamplerOptions &options);

  /// Batches every rank reads per epoch; -1 for an endless data set.
  int64_t batchesPerEpoch() const { return batchesPerEpoch_; }
  const SamplerOptions &options() const { return options_; }

  /// The sample indices (in [0, datasetSize)) of this rank's batch `batch`
  /// (in [0, batchesPerEpoch())) of `epoch`, in the order they are read.
  std::vector<int64_t> batch(int64_t epoch, int64_t batch);

  /// The permutation of epoch `epoch` (identity without shuffling); for
  /// tests. Finite data sets only.
  const std::vector<int64_t> &permutation(int64_t epoch);

private:
  explicit DistributedSampler(const SamplerOptions &options)
      : options_(options) {}

  SamplerOptions options_;
  int64_t batchesPerEpoch_ = -1;
  int64_t cachedEpoch_ = -1; // the epoch perm_ belongs to
  std::vector<int64_t> perm_;
};

/// Batches one after another: a sampler and the position of the next batch,
/// rolling over to the next epoch when one ends.
class BatchStream {
public:
  explicit BatchStream(DistributedSampler sampler)
      : sampler_(std::move(sampler)) {}

  struct Next {
    int64_t epoch = 0;
    std::vector<int64_t> indices;
  };
  /// The next batch of this rank.
  Next next();

  /// The epoch of the batch read last (0 before the first).
  int64_t epoch() const { return epoch_; }
  /// Batches read so far in all epochs.
  int64_t batchesRead() const { return read_; }
  /// Batches read so far of the epoch of the last one.
  int64_t batchesInEpoch() const { return inEpoch_; }
  /// Continues after `inEpoch` batches of epoch `epoch`, `read` in all (a
  /// resumed run: the sampler is a pure function of the position).
  void seek(int64_t epoch, int64_t inEpoch, int64_t read) {
    epoch_ = epoch;
    inEpoch_ = inEpoch;
    read_ = read;
  }
  const DistributedSampler &sampler() const { return sampler_; }

private:
  DistributedSampler sampler_;
  int64_t epoch_ = 0;
  int64_t inEpoch_ = 0;
  int64_t read_ = 0;
};

} // namespace md::data

#endif // MD_RUNTIME_DATA_SAMPLER_H
