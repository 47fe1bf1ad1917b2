//===- Synthetic.cpp - endless generated data that a model can learn -----===//
//
// Every sample is a pure function of (seed, epoch, sample index), so a rank
// generates exactly its own samples and a rerun gets the same bits. The task
// itself (the teacher, the Markov chain) depends only on the shapes, not on
// the seed: `synthetic(seed = 1)` is held-out data of the task
// `synthetic(seed = 0)` trains on.
//
//   classification  fields (float[D...], int[]) with C classes:
//                   x ~ N(0, 1) elementwise, y = argmax_c (W x)_c for a fixed
//                   teacher W[C, D] ~ N(0, 1)
//   sequence        fields (int[T], int[T]) over a vocabulary of V tokens:
//                   a walk of T + 1 tokens on a fixed sparse Markov chain
//                   (Markov.h, chain seed 0: each token has min(4, V)
//                   successors, probabilities 0.6, 0.25, 0.1, 0.05);
//                   idx = its first T tokens, targets = its last T
//   anything else   float fields ~ N(0, 1), integer fields uniform in
//                   [0, bound)
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Random.h"
#include "runtime/data/Dataset.h"
#include "runtime/data/Markov.h"

namespace md::data {
namespace {

using runtime::Draw;
using runtime::DType;
using runtime::HashKey;

/// Keys the task (not the samples): a constant, so every seed shares it.
constexpr uint64_t kTaskKey = 0x6d642d7461736bull; // "md-task"

uint64_t sampleKey(uint64_t seed, int64_t epoch, int64_t index) {
  return HashKey(
      HashKey(HashKey(seed, 0x73616d706c65ull), static_cast<uint64_t>(epoch)),
      static_cast<uint64_t>(index));
}

void storeInt(const Field &f, void *out, int64_t i, int64_t v) {
  if (f.dtype == DType::i64)
    static_cast<int64_t *>(out)[i] = v;
  else
    static_cast<int32_t *>(out)[i] = static_cast<int32_t>(v);
}

bool isInt(const Field &f) { return f.dtype != DType::f32; }

class Synthetic final : public Dataset {
public:
  enum class Task { Classification, Sequence, Generic };

  Synthetic(uint64_t seed, std::vector<Field> fields, Task task)
      : Dataset(std::move(fields)), seed_(seed), task_(task) {}

  static absl::StatusOr<std::unique_ptr<Dataset>>
  Open(uint64_t seed, std::vector<Field> fields) {
    Task task = Task::Generic;
    if (fields.size() == 2 && !isInt(fields[0]) && isInt(fields[1]) &&
        fields[1].shape.empty() && fields[1].bound > 0)
      task = Task::Classification;
    else if (fields.size() == 2 && isInt(fields[0]) && isInt(fields[1]) &&
             fields[0].shape == fields[1].shape &&
             (fields[0].bound > 0 || fields[1].bound > 0))
      task = Task::Sequence;
    if (task == Task::Generic) {
      for (const Field &f : fields)
        if (isInt(f) && f.bound <= 0)
          return absl::InvalidArgumentError(absl::StrCat(
              "synthetic data: cannot tell the range of integer input '",
              f.name,
              "' (no embedding or cross_entropy of the plan reads it)"));
    }
    auto data = std::make_unique<Synthetic>(seed, std::move(fields), task);
    data->prepare();
    return std::unique_ptr<Dataset>(std::move(data));
  }

  int64_t size() const override { return -1; }

  std::string describe() const override {
    switch (task_) {
    case Task::Classification:
      return absl::StrFormat(
          "synthetic (seed %d): classification, %d features, %d classes", seed_,
          features_, classes_);
    case Task::Sequence:
      return absl::StrFormat(
          "synthetic (seed %d): Markov sequences, %d tokens, vocabulary %d",
          seed_, fields_[0].numel(), vocab_);
    case Task::Generic:
      break;
    }
    return absl::StrFormat("synthetic (seed %d): random tensors", seed_);
  }

  absl::Status read(int64_t epoch, absl::Span<const int64_t> indices,
                    absl::Span<void *const> out) override {
    for (size_t s = 0; s < indices.size(); ++s) {
      uint64_t key = sampleKey(seed_, epoch, indices[s]);
      int64_t b = static_cast<int64_t>(s);
      switch (task_) {
      case Task::Classification:
        classification(key, b, out);
        break;
      case Task::Sequence:
        sequence(key, b, out);
        break;
      case Task::Generic:
        generic(key, b, out);
        break;
      }
    }
    return absl::OkStatus();
  }

private:
  void prepare() {
    if (task_ == Task::Classification) {
      features_ = fields_[0].numel();
      classes_ = fields_[1].bound;
      uint64_t key =
          HashKey(HashKey(kTaskKey, static_cast<uint64_t>(features_)),
                  static_cast<uint64_t>(classes_));
      teacher_.resize(static_cast<size_t>(features_ * classes_));
      for (int64_t i = 0; i < features_ * classes_; ++i)
        teacher_[i] = runtime::StandardNormal(key, static_cast<uint64_t>(i));
    } else if (task_ == Task::Sequence) {
      int64_t a = fields_[0].bound, b = fields_[1].bound;
      vocab_ = a > 0 && b > 0 ? std::min(a, b) : std::max(a, b);
      chain_.emplace(vocab_, /*chainSeed=*/0);
    }
  }

  void classification(uint64_t key, int64_t b, absl::Span<void *const> out) {
    float *x = static_cast<float *>(out[0]) + b * features_;
    for (int64_t f = 0; f < features_; ++f)
      x[f] = static_cast<float>(
          runtime::StandardNormal(key, static_cast<uint64_t>(f)));
    int64_t best = 0;
    double bestScore = -INFINITY;
    for (int64_t c = 0; c < classes_; ++c) {
      double score = 0;
      const double *w = &teacher_[static_cast<size_t>(c * features_)];
      for (int64_t f = 0; f < features_; ++f)
        score += w[f] * static_cast<double>(x[f]);
      if (score > bestScore) {
        bestScore = score;
        best = c;
      }
    }
    storeInt(fields_[1], out[1], b, best);
  }

  void sequence(uint64_t key, int64_t b, absl::Span<void *const> out) {
    int64_t t = fields_[0].numel();
    chain_->walk(key, t + 1, [&](int64_t j, int64_t token) {
      if (j < t)
        storeInt(fields_[0], out[0], b * t + j, token);
      if (j > 0)
        storeInt(fields_[1], out[1], b * t + j - 1, token);
    });
  }

  void generic(uint64_t key, int64_t b, absl::Span<void *const> out) {
    for (size_t k = 0; k < fields_.size(); ++k) {
      const Field &f = fields_[k];
      uint64_t fieldKey = HashKey(key, k);
      int64_t n = f.numel();
      for (int64_t i = 0; i < n; ++i) {
        if (isInt(f))
          storeInt(f, out[k], b * n + i,
                   static_cast<int64_t>(
                       runtime::Below(Draw(fieldKey, static_cast<uint64_t>(i)),
                                      static_cast<uint64_t>(f.bound))));
        else
          static_cast<float *>(out[k])[b * n + i] = static_cast<float>(
              runtime::StandardNormal(fieldKey, static_cast<uint64_t>(i)));
      }
    }
  }

  uint64_t seed_;
  Task task_;
  int64_t features_ = 0, classes_ = 0;
  std::vector<double> teacher_;
  int64_t vocab_ = 0;
  std::optional<MarkovChain> chain_;
};

} // namespace

absl::StatusOr<std::unique_ptr<Dataset>>
OpenSynthetic(uint64_t seed, std::vector<Field> fields) {
  return Synthetic::Open(seed, std::move(fields));
}

} // namespace md::data
