//===- Sampler.cpp - the distributed sampler ------------------------------===//

#include "runtime/data/Sampler.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Random.h"

namespace md::data {

absl::StatusOr<DistributedSampler>
DistributedSampler::Create(const SamplerOptions &options) {
  if (options.worldSize < 1)
    return absl::InvalidArgumentError(absl::StrFormat(
        "sampler: world size must be >= 1, got %d", options.worldSize));
  if (options.rank < 0 || options.rank >= options.worldSize)
    return absl::InvalidArgumentError(
        absl::StrFormat("sampler: rank %d is out of range for world size %d",
                        options.rank, options.worldSize));
  if (options.batchSize < 1)
    return absl::InvalidArgumentError(absl::StrFormat(
        "sampler: batch size must be >= 1, got %d", options.batchSize));
  DistributedSampler sampler(options);
  if (options.datasetSize < 0)
    return sampler;
  int64_t perStep = 0;
  if (__builtin_mul_overflow(options.worldSize, options.batchSize, &perStep))
    return absl::InvalidArgumentError("sampler: world size x batch overflows");
  int64_t n = options.datasetSize;
  int64_t batches =
      options.tail == Tail::Drop ? n / perStep : (n + perStep - 1) / perStep;
  if (batches == 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "the data set has %d samples, fewer than one batch of %d on each of "
        "%d ranks (%d samples)",
        n, options.batchSize, options.worldSize, perStep));
  sampler.batchesPerEpoch_ = batches;
  return sampler;
}

const std::vector<int64_t> &DistributedSampler::permutation(int64_t epoch) {
  int64_t keyEpoch = options_.reshuffleEachEpoch ? epoch : 0;
  if (!options_.shuffle)
    keyEpoch = 0;
  if (cachedEpoch_ == keyEpoch && !perm_.empty())
    return perm_;
  int64_t n = options_.datasetSize;
  perm_.resize(static_cast<size_t>(n));
  std::iota(perm_.begin(), perm_.end(), int64_t{0});
  if (options_.shuffle) {
    // Fisher-Yates, each swap's draw keyed by (seed, epoch, position).
    uint64_t key = runtime::HashKey(runtime::HashKey(options_.seed, 0x5a4d50),
                                    static_cast<uint64_t>(keyEpoch));
    for (int64_t i = n - 1; i > 0; --i) {
      int64_t j = static_cast<int64_t>(
          runtime::Below(runtime::Draw(key, static_cast<uint64_t>(i)),
                         static_cast<uint64_t>(i + 1)));
      std::swap(perm_[i], perm_[j]);
    }
  }
  cachedEpoch_ = keyEpoch;
  return perm_;
}

std::vector<int64_t> DistributedSampler::batch(int64_t epoch, int64_t b) {
  const int64_t w = options_.worldSize, r = options_.rank,
                bs = options_.batchSize;
  std::vector<int64_t> out(static_cast<size_t>(bs));
  if (options_.datasetSize < 0) {
    for (int64_t k = 0; k < bs; ++k)
      out[k] = (b * bs + k) * w + r;
    return out;
  }
  const std::vector<int64_t> &perm = permutation(epoch);
  int64_t n = options_.datasetSize;
  for (int64_t k = 0; k < bs; ++k) {
    int64_t j = b * bs + k;
    out[k] = perm[(j * w + r) % n];
  }
  return out;
}

BatchStream::Next BatchStream::next() {
  int64_t perEpoch = sampler_.batchesPerEpoch();
  if (perEpoch > 0 && inEpoch_ == perEpoch) {
    ++epoch_;
    inEpoch_ = 0;
  }
  Next n;
  n.epoch = epoch_;
  n.indices = sampler_.batch(epoch_, inEpoch_);
  ++inEpoch_;
  ++read_;
  return n;
}

std::string DescribeOrder(bool shuffle, bool reshuffleEachEpoch, Tail tail) {
  return absl::StrCat(!shuffle              ? "random windows redrawn each epoch"
                      : reshuffleEachEpoch ? "reshuffled each epoch"
                                           : "shuffled once",
                      ", tail ", tail == Tail::Drop ? "dropped" : "padded");
}

} // namespace md::data
