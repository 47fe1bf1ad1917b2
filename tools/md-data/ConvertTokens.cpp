//===- ConvertTokens.cpp - md-data convert ---------------------------------===//
//
// Two passes over the memory-mapped input: the ids' range (for the width,
// and to refuse a bad id before anything is written), then the output, a
// chunk at a time, through WriteFileAtomically.
//
//===----------------------------------------------------------------------===//

#include "tools/md-data/ConvertTokens.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/exec/Safetensors.h"
#include "runtime/core/Status.h"
#include "runtime/data/Dataset.h"
#include "runtime/data/MappedFile.h"
#include "tools/cli/Format.h"
#include "tools/md-data/MarkovTokens.h"

namespace md::mddata {
namespace {

/// The input's elements: where they start, how many, of what kind.
struct Ids {
  const uint8_t *data = nullptr;
  int64_t count = 0;
  int width = 2;       // bytes per element
  bool isSigned = false;
  std::string source;  // for messages
  int64_t at(int64_t i) const {
    const uint8_t *p = data + i * width;
    switch (width) {
    case 2: {
      uint16_t u;
      std::memcpy(&u, p, 2);
      return isSigned ? int64_t(int16_t(u)) : int64_t(u);
    }
    case 4: {
      uint32_t u;
      std::memcpy(&u, p, 4);
      return isSigned ? int64_t(int32_t(u)) : int64_t(u);
    }
    default: {
      uint64_t u;
      std::memcpy(&u, p, 8);
      // uint64 ids above int64's range read as negative: refused below.
      return static_cast<int64_t>(u);
    }
    }
  }
};

constexpr const char *kNames[] = {"uint16", "uint32", "int32", "int64", "npy"};

} // namespace

const char *TokenFormatName(TokenFormat f) {
  return kNames[static_cast<int>(f)];
}

absl::StatusOr<TokenFormat> ParseTokenFormat(const std::string &name) {
  for (int i = 0; i < 5; ++i)
    if (name == kNames[i])
      return static_cast<TokenFormat>(i);
  return absl::InvalidArgumentError(absl::StrCat(
      "--from ", name, ": expected uint16, uint32, int32, int64 or npy"));
}

absl::StatusOr<ConvertTokensResult>
ConvertTokens(const ConvertTokensOptions &options) {
  if (options.input == options.output)
    return absl::InvalidArgumentError(absl::StrCat(
        options.input, ": the output would overwrite the input; give another "
                       "-o FILE"));
  Ids ids;
  std::unique_ptr<data::MappedFile> raw;
  data::NpyArray npy;
  if (options.from == TokenFormat::npy) {
    MD_ASSIGN_OR_RETURN(npy, data::OpenNpyArray(options.input));
    if (npy.shape.size() != 1 || npy.descr == "<f4")
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: a token file is a 1-D integer array, not %s of %d dims",
          options.input, npy.descr, npy.shape.size()));
    ids.data = npy.data;
    ids.count = npy.shape[0];
    ids.width = static_cast<int>(npy.itemSize);
    ids.isSigned = npy.descr[1] == 'i';
    ids.source = absl::StrCat("npy ", npy.descr);
  } else {
    MD_ASSIGN_OR_RETURN(raw, data::MappedFile::Open(options.input));
    const TokenFormat f = options.from;
    ids.width = f == TokenFormat::uint16 ? 2 : f == TokenFormat::int64 ? 8 : 4;
    ids.isSigned = f == TokenFormat::int32 || f == TokenFormat::int64;
    ids.source = TokenFormatName(f);
    if (raw->size() % ids.width != 0)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %d bytes is not a whole number of %s tokens", options.input,
          raw->size(), ids.source));
    ids.data = raw->data();
    ids.count = raw->size() / ids.width;
  }
  if (ids.count < 1)
    return absl::InvalidArgumentError(
        absl::StrCat(options.input, ": no tokens"));
  // The range, and the first bad id.
  int64_t largest = 0;
  for (int64_t i = 0; i < ids.count; ++i) {
    const int64_t v = ids.at(i);
    if (v < 0)
      return absl::OutOfRangeError(absl::StrFormat(
          "%s: token %d at position %d is negative (read as %s)",
          options.input, v, i, ids.source));
    if (options.vocab > 0 && v >= options.vocab)
      return absl::OutOfRangeError(absl::StrFormat(
          "%s: token %d at position %d is outside --vocab %d", options.input,
          v, i, options.vocab));
    largest = std::max(largest, v);
  }
  ConvertTokensResult r;
  r.tokens = ids.count;
  r.largest = largest;
  r.source = ids.source;
  r.vocab = options.vocab > 0 ? options.vocab : largest + 1;
  if (r.vocab > kMaxVocab)
    return absl::OutOfRangeError(absl::StrFormat(
        "%s: the vocabulary would be %d tokens, more than md reads (%d)",
        options.input, r.vocab, kMaxVocab));
  const int64_t width = TokenBytes(r.vocab);
  constexpr int64_t kChunk = 1 << 16;
  std::vector<unsigned char> buffer(static_cast<size_t>(width * kChunk));
  MD_RETURN_IF_ERROR(runtime::WriteFileAtomically(options.output, [&](int fd) {
    for (int64_t begin = 0; begin < ids.count; begin += kChunk) {
      const int64_t end = std::min(ids.count, begin + kChunk);
      for (int64_t j = begin; j < end; ++j) {
        const int64_t v = ids.at(j);
        const size_t at = static_cast<size_t>(width * (j - begin));
        for (int64_t k = 0; k < width; ++k) // little-endian
          buffer[at + k] = static_cast<unsigned char>(v >> (8 * k));
      }
      if (!runtime::WriteAll(fd, buffer.data(),
                             static_cast<size_t>(width * (end - begin))))
        return false;
    }
    return true;
  }));
  r.bytes = width * ids.count;
  return r;
}

std::string Describe(const ConvertTokensOptions &options,
                     const ConvertTokensResult &r) {
  return absl::StrFormat(
      "md-data: wrote %s: %s uint%d tokens (%s bytes) from %s (%s), ids 0 "
      "to %d, for a vocabulary of %d",
      options.output, cli::WithCommas(r.tokens), 8 * TokenBytes(r.vocab),
      cli::WithCommas(r.bytes), options.input, r.source, r.largest, r.vocab);
}

} // namespace md::mddata
