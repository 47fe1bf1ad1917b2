//===- Dataset.cpp - opening a data source --------------------------------===//

#include "runtime/data/Dataset.h"

#include "absl/strings/str_cat.h"

namespace md::data {

Dataset::~Dataset() = default;

int64_t Field::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string NpyFieldPath(const std::string &path, size_t field, size_t fields) {
  if (fields == 1)
    return path;
  size_t slash = path.find_last_of('/');
  size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return absl::StrCat(path, ".", field);
  return absl::StrCat(path.substr(0, dot), ".", field, path.substr(dot));
}

absl::StatusOr<std::unique_ptr<Dataset>>
OpenDataset(const DataSource &source, std::vector<Field> fields) {
  for (const Field &f : fields) {
    if (f.dtype != runtime::DType::f32 && f.dtype != runtime::DType::i32 &&
        f.dtype != runtime::DType::i64)
      return absl::InvalidArgumentError(absl::StrCat(
          "data field '", f.name, "': staging type ",
          runtime::dtypeName(f.dtype), " is not one of f32, i32, i64"));
  }
  switch (source.kind) {
  case DataKind::Synthetic:
    return OpenSynthetic(source.seed, std::move(fields));
  case DataKind::Npy:
    return OpenNpy(source.path, std::move(fields));
  case DataKind::Tokens:
    return OpenTokens(source.path, source.seed, std::move(fields));
  }
  return absl::InvalidArgumentError("unknown data kind");
}

} // namespace md::data
