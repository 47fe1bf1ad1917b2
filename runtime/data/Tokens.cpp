//===- Tokens.cpp - windows of a nanoGPT-style token file -----------------===//
//
// The file is a flat array of little-endian tokens, memory-mapped: uint16
// (nanoGPT's prepare.py writes np.uint16) when the model's vocabulary fits
// in 16 bits (at most 65536 tokens, or unknown), uint32 when it does not. A sample is a window of T + 1 tokens
// at an offset drawn from (seed, epoch, sample index) in [0, len - T): idx is
// its first T tokens and targets its last T, as nanoGPT's get_batch. An
// epoch is floor((len - 1) / T) samples, about one pass over the tokens.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Random.h"
#include "runtime/data/Dataset.h"
#include "runtime/data/MappedFile.h"

namespace md::data {
namespace {

class Tokens final : public Dataset {
public:
  Tokens(std::vector<Field> fields, std::unique_ptr<MappedFile> file,
         uint64_t seed, int64_t width)
      : Dataset(std::move(fields)), file_(std::move(file)), seed_(seed),
        width_(width) {
    length_ = file_->size() / width_;
    window_ = fields_[0].numel();
  }

  int64_t size() const override { return (length_ - 1) / window_; }
  std::string describe() const override {
    return absl::StrFormat("tokens %s (%d uint%d tokens, windows of %d + 1)",
                           file_->path(), length_, 8 * width_, window_);
  }

  absl::Status read(int64_t epoch, absl::Span<const int64_t> indices,
                    absl::Span<void *const> out) override {
    const int64_t t = window_;
    uint64_t key = runtime::HashKey(runtime::HashKey(seed_, 0x746f6bull),
                                    static_cast<uint64_t>(epoch));
    int64_t bound = fields_[0].bound > 0 ? fields_[0].bound : fields_[1].bound;
    for (size_t s = 0; s < indices.size(); ++s) {
      int64_t start = static_cast<int64_t>(
          runtime::Below(runtime::Draw(key, static_cast<uint64_t>(indices[s])),
                         static_cast<uint64_t>(length_ - t)));
      for (int64_t i = 0; i <= t; ++i) {
        int64_t token = tokenAt(start + i);
        if (bound > 0 && token >= bound)
          return absl::OutOfRangeError(absl::StrFormat(
              "%s: token %d at position %d is outside the model's vocabulary "
              "of %d",
              file_->path(), token, start + i, bound));
        int64_t at = static_cast<int64_t>(s) * t + i;
        if (i < t)
          store(0, out[0], at, token);
        if (i > 0)
          store(1, out[1], at - 1, token);
      }
    }
    return absl::OkStatus();
  }

  // The tokens of 64 blocks of 16K, evenly spread over the file (the whole
  // of a file of up to 1M tokens): the ids outside the vocabulary, and
  // the sign of a 32-bit file read as 16-bit tokens: every second token
  // (the high halves) zero while the others are not.
  absl::Status checkContents() const override {
    constexpr int64_t kBlock = 1 << 14, kBlocks = 64;
    const int64_t bound =
        fields_[0].bound > 0 ? fields_[0].bound : fields_[1].bound;
    // A small file whole, a large one in disjoint blocks.
    const bool whole = length_ <= kBlock * kBlocks;
    const int64_t blocks = whole ? 1 : kBlocks;
    int64_t scanned = 0, outside = 0, firstOutside = -1, oddZeros = 0,
            evenZeros = 0, odd = 0;
    int64_t largest = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      // Blocks start at even positions, so odd positions are high halves.
      int64_t start =
          whole ? 0 : ((length_ - kBlock) * b / (kBlocks - 1)) & ~int64_t(1);
      const int64_t end = whole ? length_ : start + kBlock;
      for (int64_t i = start; i < end; ++i) {
        const int64_t token = tokenAt(i);
        ++scanned;
        largest = std::max(largest, token);
        if (bound > 0 && token >= bound) {
          ++outside;
          if (firstOutside < 0)
            firstOutside = i;
        }
        if (i % 2 == 1) {
          ++odd;
          oddZeros += token == 0;
        } else {
          evenZeros += token == 0;
        }
      }
    }
    const char *type = width_ == 2 ? "uint16" : "uint32";
    if (width_ == 2 && odd >= 64 && oddZeros >= odd * 9 / 10 &&
        evenZeros <= (scanned - odd) / 2)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s looks like 32-bit tokens: read as the uint16 tokens a vocabulary "
          "of %d takes, %d of its %d tokens at odd positions are 0 (of %d "
          "scanned); convert it: md-data convert --from uint32 %s -o FILE",
          file_->path(), bound, oddZeros, odd, scanned, file_->path()));
    if (outside > 0)
      return absl::OutOfRangeError(absl::StrFormat(
          "%s: %d of %d %s tokens scanned are outside the model's vocabulary "
          "of %d (the first at position %d is %d, the largest %d)",
          file_->path(), outside, scanned, type, bound, firstOutside,
          tokenAt(firstOutside), largest));
    return absl::OkStatus();
  }

private:
  int64_t tokenAt(int64_t i) const {
    if (width_ == 2) {
      uint16_t token;
      std::memcpy(&token, file_->data() + 2 * i, 2);
      return token;
    }
    uint32_t token;
    std::memcpy(&token, file_->data() + 4 * i, 4);
    return token;
  }

  void store(size_t k, void *out, int64_t i, int64_t v) const {
    if (fields_[k].dtype == runtime::DType::i64)
      static_cast<int64_t *>(out)[i] = v;
    else
      static_cast<int32_t *>(out)[i] = static_cast<int32_t>(v);
  }

  std::unique_ptr<MappedFile> file_;
  uint64_t seed_;
  int64_t width_; // bytes per token: 2 or 4
  int64_t length_ = 0, window_ = 0;
};

} // namespace

absl::StatusOr<std::unique_ptr<Dataset>>
OpenTokens(const std::string &path, uint64_t seed, std::vector<Field> fields) {
  if (fields.size() != 2 || fields[0].dtype == runtime::DType::f32 ||
      fields[1].dtype == runtime::DType::f32 ||
      fields[0].shape != fields[1].shape || fields[0].shape.size() != 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "tokens data feeds a forward of two integer inputs of shape [B, T] "
        "(idx, targets), but the batch does not have that form"));
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok())
    return file.status();
  int64_t t = fields[0].shape[0];
  int64_t vocab = fields[0].bound > 0 ? fields[0].bound : fields[1].bound;
  int64_t width = vocab > 65536 ? 4 : 2;
  const char *type = width == 2 ? "uint16" : "uint32";
  if ((*file)->size() % width != 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d bytes is not a whole number of %s tokens (a vocabulary of %d "
        "takes %s)",
        path, (*file)->size(), type, vocab, type));
  if ((*file)->size() / width < t + 1)
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d tokens, fewer than one window of %d + 1", path,
                        (*file)->size() / width, t));
  return std::unique_ptr<Dataset>(
      new Tokens(std::move(fields), std::move(*file), seed, width));
}

} // namespace md::data
