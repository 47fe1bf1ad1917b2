//===- MappedFile.cpp - a read-only memory map of a whole file ------------===//

#include "runtime/data/MappedFile.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace md::data {

static absl::Status errnoStatus(int err, const std::string &path,
                                const char *what) {
  std::string message =
      absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  if (err == ENOENT)
    return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM)
    return absl::PermissionDeniedError(message);
  return absl::InvalidArgumentError(message);
}

absl::StatusOr<std::unique_ptr<MappedFile>>
MappedFile::Open(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errnoStatus(errno, path, "cannot open");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return errnoStatus(err, path, "cannot stat");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  if (st.st_size == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file"));
  }
  void *p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ,
                   MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    return errnoStatus(err, path, "cannot map");
  std::unique_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->data_ = static_cast<const uint8_t *>(p);
  file->size_ = st.st_size;
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr)
    ::munmap(const_cast<uint8_t *>(data_), static_cast<size_t>(size_));
}

} // namespace md::data
