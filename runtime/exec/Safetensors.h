//===- Safetensors.h - weights files, written atomically -*- C++ -*-===//
//
// md writes weights as safetensors (Hugging Face's format: an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype,
// shape and byte range, then the raw little-endian data), so that PyTorch
// (`safetensors.torch.load_file`) reads them as they are. Every file md
// writes goes through WriteFileAtomically: a temporary name in the same
// directory, fsync, rename over the final name, fsync of the directory, so
// a crash leaves either the old file or the new one, never half of one.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_SAFETENSORS_H
#define MD_RUNTIME_EXEC_SAFETENSORS_H

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "runtime/core/Json.h"

namespace md::runtime {

struct SafetensorsTensor {
  std::string name;
  std::string dtype; // "F32", "BF16", "F16", "I32", "I64"
  std::vector<int64_t> shape;
  std::vector<uint8_t> data; // little-endian, row-major
};

/// Writes `tensors` (in name order) and `metadata` (the header's
/// "__metadata__", string to string) to `path`, atomically.
absl::Status
WriteSafetensors(const std::string &path,
                 absl::Span<const SafetensorsTensor> tensors,
                 const std::map<std::string, std::string> &metadata = {});

/// A tensor to write whose bytes are produced a chunk at a time (a device
/// buffer copied out piecewise): `fill` copies bytes [offset, offset +
/// out.size()) of the tensor into `out`.
struct SafetensorsSource {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::function<absl::Status(int64_t offset, absl::Span<uint8_t> out)> fill;
};

/// WriteSafetensors of tensors filled a chunk at a time through one staging
/// buffer of `chunkBytes`, so that a file of any size needs no copy of its
/// tensors in memory. `written`, when given, sees every byte of the file in
/// order as it is written (to hash the file without reading it back).
absl::Status WriteSafetensorsFrom(
    const std::string &path, absl::Span<const SafetensorsSource> tensors,
    const std::map<std::string, std::string> &metadata,
    const std::function<void(absl::Span<const uint8_t>)> &written = nullptr,
    int64_t chunkBytes = int64_t(16) << 20);

/// Reads a safetensors file (for tests and tools): every tensor, by name,
/// and the metadata; the header is checked as ReadSafetensorsHeader does.
absl::StatusOr<std::vector<SafetensorsTensor>>
ReadSafetensors(const std::string &path,
                std::map<std::string, std::string> *metadata = nullptr);

/// A safetensors file's header: where each tensor's bytes lie, without
/// reading them (a checkpoint loader reads only the byte ranges it needs).
struct SafetensorsEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0; // byte offsets from the file's start
  /// Set by a name map's `transpose` rule (NameMap.h): this [c, r] entry is
  /// columns [firstCol, firstCol + c) of the file's [r, fileCols] tensor at
  /// [begin, end), transposed, so its element (i, j) is the file's element
  /// (j, firstCol + i).
  struct Transposed {
    int64_t fileCols = 0, firstCol = 0;
  };
  std::optional<Transposed> transposed;
  /// Which file of a SafetensorsSet holds the bytes (0 for a single file).
  int file = 0;
};
struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
  int64_t fileBytes = 0;
};
/// Reads the header of the safetensors file `fd` (named `path` in
/// messages) and checks every tensor's byte range against the file's size
/// and its dtype and shape.
absl::StatusOr<SafetensorsHeader>
ReadSafetensorsHeader(int fd, const std::string &path);
/// A safetensors file open for reading, with its checked header; the
/// descriptor closes with it. Readers of a whole file and of a rank's
/// ranges both start here.
struct SafetensorsFile {
  int fd = -1;
  SafetensorsHeader header;
  SafetensorsFile() = default;
  SafetensorsFile(const SafetensorsFile &) = delete;
  SafetensorsFile &operator=(const SafetensorsFile &) = delete;
  ~SafetensorsFile();
};
/// Opens `path` and reads its header (ReadSafetensorsHeader). NotFound
/// "<path>: cannot open: <why>" when it cannot be opened.
absl::StatusOr<std::unique_ptr<SafetensorsFile>>
OpenSafetensors(const std::string &path);
/// The safetensors files of one model: one file, or a folder that Hugging
/// Face's save_pretrained wrote, whose model.safetensors.index.json maps
/// every tensor to one of its shards (else its model.safetensors). `header`
/// holds every tensor of every file, each entry's `file` indexing `files`
/// and `paths`; the index and the shards must agree (every tensor of a
/// shard in the index under that shard, every indexed tensor in its shard,
/// no tensor twice, shard names without a directory).
struct SafetensorsSet {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::vector<std::string> paths;
  SafetensorsHeader header;
};
absl::StatusOr<SafetensorsSet> OpenSafetensorsSet(const std::string &path);

/// pread(2) of exactly `bytes` at `offset`; false with errno set (0 at the
/// end of the file).
bool ReadAllAt(int fd, void *data, size_t bytes, int64_t offset);

/// Creates or replaces `path` with what `write` writes to the open file
/// descriptor it gets: a temporary file next to it (`path`.tmp.PID, held
/// under TemporaryLock while it is written), fsync, rename, and an fsync of
/// the directory. The temporaries of `path` that writers now gone left (a
/// kill mid-write) are removed first. A `path` that exists and is not a
/// regular file (/dev/null, a FIFO) is written directly instead; a
/// directory is an error. `write` returns false (with errno set) on a
/// failed write.
absl::Status WriteFileAtomically(const std::string &path,
                                 const std::function<bool(int fd)> &write);

/// An exclusive flock(2) on the temporary `path` (a file or a save's
/// directory) that this process is writing, held until it is destroyed (or
/// the process ends, however it ends): what TemporaryWriterGone asks.
class TemporaryLock {
public:
  explicit TemporaryLock(const std::string &path);
  ~TemporaryLock();
  TemporaryLock(const TemporaryLock &) = delete;
  TemporaryLock &operator=(const TemporaryLock &) = delete;

private:
  int fd_ = -1;
};

/// Whether the process that wrote the temporary `path` is gone, so that
/// the temporary is garbage: no process holds its TemporaryLock. On a file
/// system without locks, a name ending in .tmp.PID is judged by whether
/// process PID still exists on this machine, and any other is taken as
/// gone.
bool TemporaryWriterGone(const std::string &path);

/// Removes the temporaries WriteFileAtomically left for `path`
/// (`path`.tmp.PID) whose writers are gone.
void RemoveDeadTemporaries(const std::string &path);

/// write(2) of all `bytes`, retrying short writes; false with errno set.
bool WriteAll(int fd, const void *data, size_t bytes);

/// Creates `dir` and its missing parents (mkdir -p).
absl::Status MakeDirectories(const std::string &dir);

/// fsync of a directory, so that a rename inside it is durable.
absl::Status SyncDirectory(const std::string &dir);

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_SAFETENSORS_H
