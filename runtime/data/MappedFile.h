//===- MappedFile.h - a read-only memory map of a whole file -*- C++ -*-===//
//
// The npy and tokens readers map their files instead of reading them: the
// page cache holds the data once however many ranks read it, and a file
// larger than memory still works.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_DATA_MAPPEDFILE_H
#define MD_RUNTIME_DATA_MAPPEDFILE_H

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace md::data {

class MappedFile {
public:
  /// Maps `path` read-only. NotFound / PermissionDenied / InvalidArgument
  /// (a directory, an empty file) with the path and the system's reason.
  static absl::StatusOr<std::unique_ptr<MappedFile>>
  Open(const std::string &path);
  ~MappedFile();
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

  const uint8_t *data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string &path() const { return path_; }

private:
  MappedFile() = default;
  std::string path_;
  const uint8_t *data_ = nullptr;
  int64_t size_ = 0;
};

} // namespace md::data

#endif // MD_RUNTIME_DATA_MAPPEDFILE_H
