//===- Dataset.h - the samples a plan trains and evaluates on -*- C++ -*-===//
//
// A Dataset turns sample indices into the tensors of a batch. Which tensors
// a batch holds comes from the plan: the outputs of its `batch` instruction
// (one Field each, the batch dim left out). Three kinds, as in plan.fbs's
// DataKind:
//
//   synthetic  endless, generated from (seed, epoch, sample index): a
//              learnable classification task for (f32[D...], int[]) samples
//              and a learnable sequence task for (int[T], int[T]) samples
//   npy        .npy arrays (float32, int32, int64), memory-mapped, one file
//              per field
//   tokens     a nanoGPT-style uint16 token file, memory-mapped, read as
//              windows of T + 1 tokens at random offsets
//
// Samples are written into host memory in the field's staging type: f32 for
// float fields, i32 or i64 for integer fields. docs/runtime.md, "Data",
// specifies every generator and file convention.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_DATA_DATASET_H
#define MD_RUNTIME_DATA_DATASET_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/core/Tensor.h"
#include "runtime/data/MappedFile.h"

namespace md::data {

/// One tensor of every sample.
struct Field {
  /// Staging type: f32 for float tensors, i32 or i64 for integer tensors.
  runtime::DType dtype = runtime::DType::f32;
  /// The sample's shape (the batch's shape without its first dim).
  std::vector<int64_t> shape;
  /// Integer fields: values lie in [0, bound) (class count, vocabulary);
  /// 0 when the plan does not say.
  int64_t bound = 0;
  /// For messages: the plan's buffer name.
  std::string name;

  int64_t numel() const;
};

class Dataset {
public:
  virtual ~Dataset();
  /// Samples per epoch; -1 for an endless data set.
  virtual int64_t size() const = 0;
  /// "synthetic (seed 0): classification, 8 features, 4 classes".
  virtual std::string describe() const = 0;
  /// Writes samples `indices` of `epoch`, one after the other, into out[k]
  /// for each field k (indices.size() * numel elements of its dtype).
  virtual absl::Status read(int64_t epoch, absl::Span<const int64_t> indices,
                            absl::Span<void *const> out) = 0;
  const std::vector<Field> &fields() const { return fields_; }

  /// What a launcher checks before it starts ranks, beyond what opening
  /// checked: values a read would refuse (a token id outside the model's
  /// vocabulary) and files that fit but hold something else (32-bit tokens
  /// read as 16-bit ones), with their counts and the file. Reads at most a
  /// few MiB of the data, evenly spread. OK for sources it cannot check.
  virtual absl::Status checkContents() const { return absl::OkStatus(); }

protected:
  explicit Dataset(std::vector<Field> fields) : fields_(std::move(fields)) {}
  std::vector<Field> fields_;
};

enum class DataKind { Synthetic, Npy, Tokens };

struct DataSource {
  DataKind kind = DataKind::Synthetic;
  std::string path;  // npy, tokens
  uint64_t seed = 0; // synthetic: which samples; tokens: window offsets
};

/// Opens `source` for samples of `fields`, checking that the files exist and
/// fit the fields (shapes, dtypes, lengths). Messages name the file.
absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const DataSource &source,
                                                     std::vector<Field> fields);

/// The file a field of an npy source is read from: `path` itself for a
/// single field, else `path` with ".<k>" before its extension
/// ("data/train.npy" -> "data/train.0.npy", "data/train.1.npy").
std::string NpyFieldPath(const std::string &path, size_t field, size_t fields);

/// A .npy file's array, memory-mapped: its dtype as numpy writes it
/// ("<f4", "<i4", "<i8", "<u2", "<u4", "<u8", "<i2"), shape and elements
/// (C order; OpenNpy reads f4, i4 and i8 only). Errors name the file.
struct NpyArray {
  std::unique_ptr<MappedFile> file;
  std::string descr;
  int64_t itemSize = 0;
  std::vector<int64_t> shape;
  const uint8_t *data = nullptr;
};
absl::StatusOr<NpyArray> OpenNpyArray(const std::string &path);

// The sources one by one (OpenDataset dispatches to them).
absl::StatusOr<std::unique_ptr<Dataset>>
OpenSynthetic(uint64_t seed, std::vector<Field> fields);
absl::StatusOr<std::unique_ptr<Dataset>> OpenNpy(const std::string &path,
                                                 std::vector<Field> fields);
absl::StatusOr<std::unique_ptr<Dataset>>
OpenTokens(const std::string &path, uint64_t seed, std::vector<Field> fields);

} // namespace md::data

#endif // MD_RUNTIME_DATA_DATASET_H
