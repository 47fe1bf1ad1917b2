//===- Checkpoint.cpp - the files of md's checkpoints ---------------------===//
//
// Names, contents and the atomic publication of full and sharded
// checkpoints, finding the newest one and removing old ones (Checkpoint.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "runtime/exec/CheckpointMeta.h"
#include "runtime/core/EnumNames.h"
#include "runtime/exec/Safetensors.h"
#include "runtime/core/Status.h"

namespace md::runtime {

std::string CheckpointPath(const std::string &dir, fb::CheckpointFormat format,
                           int64_t step) {
  std::string base = dir.empty() ? std::string("checkpoints") : dir;
  if (format == fb::CheckpointFormat::Full)
    return absl::StrFormat("%s/step_%08d.safetensors", base, step);
  return absl::StrFormat("%s/step_%08d", base, step);
}

std::string ShardFileName(const std::string &dir, int rank) {
  return absl::StrFormat("%s/rank_%05d.safetensors", dir, rank);
}

// safetensors' spelling of each plan dtype, in fb::DType order.
constexpr const char *kSafetensorsDTypeNames[] = {"?",   "F32", "BF16", "F16",
                                                  "I32", "I64", "F64",  "BOOL"};
static_assert(namesEveryValue(kSafetensorsDTypeNames, fb::DType::MAX));

const char *SafetensorsDType(fb::DType t) {
  return enumName(kSafetensorsDTypeNames, t);
}

absl::Status
WriteFullCheckpoint(const std::string &path,
                    const std::vector<NamedTensor> &params,
                    const std::map<std::string, std::string> &meta) {
  std::vector<SafetensorsTensor> tensors;
  for (const NamedTensor &p : params) {
    SafetensorsTensor t;
    t.name = p.name;
    t.dtype = "F32";
    t.shape = p.shape;
    t.data.resize(p.values.size() * 4);
    std::memcpy(t.data.data(), p.values.data(), t.data.size());
    tensors.push_back(std::move(t));
  }
  return WriteSafetensors(path, tensors, meta);
}

namespace {

/// Whether `name` is one of a sharded checkpoint's own files.
bool isCheckpointFile(const std::string &name) {
  return name == "meta.json" || (absl::StartsWith(name, "rank_") &&
                                 absl::EndsWith(name, ".safetensors"));
}

/// Removes the directory `dir` holding a checkpoint's files (and files
/// that WriteFileAtomically left half written); FailedPrecondition when
/// it holds anything else, which stays.
absl::Status removeCheckpointDir(const std::string &dir) {
  DIR *d = ::opendir(dir.c_str());
  if (d == nullptr)
    return absl::InternalError(
        absl::StrCat(dir, ": cannot open: ", std::strerror(errno)));
  std::vector<std::string> names;
  while (struct dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..")
      names.push_back(name);
  }
  ::closedir(d);
  for (const std::string &name : names) {
    bool ours = isCheckpointFile(name) ||
                (name.find(".tmp.") != std::string::npos &&
                 isCheckpointFile(name.substr(0, name.find(".tmp."))));
    if (ours)
      ::unlink((dir + "/" + name).c_str());
  }
  if (::rmdir(dir.c_str()) != 0)
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: exists and holds other files; not replacing it", dir));
  return absl::OkStatus();
}

/// Whether `dir` holds files other than a checkpoint's.
bool holdsOtherFiles(const std::string &dir) {
  DIR *d = ::opendir(dir.c_str());
  if (d == nullptr)
    return false;
  bool other = false;
  while (struct dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != ".." && !isCheckpointFile(name))
      other = true;
  }
  ::closedir(d);
  return other;
}

std::string parentOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

} // namespace

absl::Status PublishShardedCheckpoint(const std::string &tmp,
                                      const std::string &dir) {
  if (::access(dir.c_str(), F_OK) == 0) {
    if (holdsOtherFiles(dir))
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: exists and holds other files; not replacing it", dir));
    // Swap the new checkpoint in and the old one out in one step; the old
    // one, now under the temporary name, goes afterwards.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(),
                    RENAME_EXCHANGE) == 0) {
      MD_RETURN_IF_ERROR(SyncDirectory(parentOf(dir)));
      return removeCheckpointDir(tmp);
    }
    if (errno != EINVAL && errno != ENOSYS)
      return absl::InternalError(
          absl::StrFormat("%s: cannot exchange it with %s: %s", dir, tmp,
                          std::strerror(errno)));
    // A file system without RENAME_EXCHANGE: move the old one aside first.
    // A crash before the second rename leaves no `dir`; the next save or
    // --resume auto puts the set-aside one back (RestoreSetAsideCheckpoints).
    std::string old = tmp + ".old";
    if (::rename(dir.c_str(), old.c_str()) != 0)
      return absl::InternalError(absl::StrFormat("%s: cannot move it aside: %s",
                                                 dir, std::strerror(errno)));
    if (::rename(tmp.c_str(), dir.c_str()) != 0)
      return absl::InternalError(absl::StrFormat(
          "%s: cannot rename %s: %s", dir, tmp, std::strerror(errno)));
    MD_RETURN_IF_ERROR(SyncDirectory(parentOf(dir)));
    return removeCheckpointDir(old);
  }
  if (::rename(tmp.c_str(), dir.c_str()) != 0)
    return absl::InternalError(absl::StrFormat("%s: cannot rename %s: %s", dir,
                                               tmp, std::strerror(errno)));
  return SyncDirectory(parentOf(dir));
}

std::string NewSaveId() {
  std::random_device rd;
  uint64_t v = (uint64_t(rd()) << 32) ^ rd();
  return absl::StrFormat("%016x", v);
}

std::string SaveTempDir(const std::string &dir, const std::string &id) {
  return absl::StrCat(dir, ".tmp-", id);
}

absl::Status RestoreSetAsideCheckpoints(const std::string &parent) {
  DIR *d = ::opendir(parent.c_str());
  if (d == nullptr)
    return absl::OkStatus(); // nothing saved there yet
  std::vector<std::string> names;
  while (struct dirent *e = ::readdir(d))
    names.push_back(e->d_name);
  ::closedir(d);
  bool restored = false;
  for (const std::string &name : names) {
    size_t tmp = name.find(".tmp");
    if (!absl::StartsWith(name, "step_") || tmp == std::string::npos ||
        !absl::EndsWith(name, ".old"))
      continue;
    const std::string from = absl::StrCat(parent, "/", name);
    const std::string to = absl::StrCat(parent, "/", name.substr(0, tmp));
    // Only a whole published checkpoint was ever set aside; when `to` is
    // there, the publication finished and this one is merely stale.
    if (::access(to.c_str(), F_OK) == 0 ||
        ::access((from + "/meta.json").c_str(), F_OK) != 0)
      continue;
    if (::rename(from.c_str(), to.c_str()) != 0)
      return absl::InternalError(absl::StrFormat(
          "%s: cannot put back the checkpoint a failed save set aside as "
          "%s: %s",
          to, from, std::strerror(errno)));
    restored = true;
  }
  return restored ? SyncDirectory(parent) : absl::OkStatus();
}

absl::Status RemoveStaleTemporaries(const std::string &parent,
                                    const std::string &keep) {
  MD_RETURN_IF_ERROR(RestoreSetAsideCheckpoints(parent));
  DIR *d = ::opendir(parent.c_str());
  if (d == nullptr)
    return absl::OkStatus(); // nothing saved there yet
  std::vector<std::string> stale;
  while (struct dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    size_t tmp = name.find(".tmp");
    if (!absl::StartsWith(name, "step_") || tmp == std::string::npos)
      continue;
    std::string path = absl::StrCat(parent, "/", name);
    if (path != keep)
      stale.push_back(path);
  }
  ::closedir(d);
  for (const std::string &path : stale) {
    struct stat st;
    // Only what a writer now gone left: a save in progress (of another
    // run sharing the directory) holds its temporary's lock.
    if (::lstat(path.c_str(), &st) != 0 || !TemporaryWriterGone(path))
      continue;
    if (S_ISREG(st.st_mode)) {
      // A full checkpoint's temporary (step_N.safetensors.tmp.PID).
      if (::unlink(path.c_str()) != 0 && errno != ENOENT)
        return absl::InternalError(
            absl::StrFormat("%s: cannot remove a dead save's temporary: %s",
                            path, std::strerror(errno)));
      continue;
    }
    if (!S_ISDIR(st.st_mode))
      continue;
    absl::Status s = removeCheckpointDir(path);
    if (!s.ok())
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": a dead save's temporary directory holds other files; "
                "remove it by hand"));
  }
  return absl::OkStatus();
}

namespace {

/// The step in `name` when it is the name CheckpointPath gives a checkpoint
/// of `format` (step_ and at least 8 digits, then .safetensors for a full
/// one), else nullopt.
std::optional<int64_t> checkpointStep(absl::string_view name,
                                      fb::CheckpointFormat format) {
  if (format == fb::CheckpointFormat::Full &&
      !absl::ConsumeSuffix(&name, ".safetensors"))
    return std::nullopt;
  int64_t step = 0;
  if (name.size() < 13 || !absl::ConsumePrefix(&name, "step_") ||
      name.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(name, &step))
    return std::nullopt;
  return step;
}

/// The names in directory `dir` (none when it cannot be read).
std::vector<std::string> listDirectory(const std::string &dir) {
  std::vector<std::string> names;
  DIR *d = ::opendir(dir.c_str());
  if (d == nullptr)
    return names;
  while (struct dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..")
      names.push_back(std::move(name));
  }
  ::closedir(d);
  return names;
}

/// Whether `path` is a complete md checkpoint of `format` saved at `step`
/// (RetainNewestCheckpoints says what that takes).
bool isCompleteCheckpoint(const std::string &path, fb::CheckpointFormat format,
                          int64_t step) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0)
    return false;
  if (format == fb::CheckpointFormat::Full) {
    if (!S_ISREG(st.st_mode))
      return false;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return false;
    absl::StatusOr<SafetensorsHeader> header = ReadSafetensorsHeader(fd, path);
    ::close(fd);
    if (!header.ok())
      return false;
    const auto &meta = header->metadata;
    auto saved = meta.find("step");
    return meta.count("model") && meta.count("world_size") &&
           saved != meta.end() && saved->second == absl::StrCat(step);
  }
  if (!S_ISDIR(st.st_mode) || holdsOtherFiles(path))
    return false;
  absl::StatusOr<ShardedMeta> meta = ReadShardedMeta(path);
  if (!meta.ok() || meta->step != step)
    return false;
  for (const CheckpointFile &f : meta->files)
    if (!VerifyCheckpointFile(path, f, /*checksum=*/false).ok())
      return false;
  return true;
}

} // namespace

int64_t LatestShardedCheckpointStep(const std::string &saveDir,
                                    int64_t before) {
  std::string dir = saveDir.empty() ? std::string("checkpoints") : saveDir;
  int64_t best = -1;
  for (const std::string &name : listDirectory(dir)) {
    std::optional<int64_t> step =
        checkpointStep(name, fb::CheckpointFormat::Sharded);
    if (!step || *step <= best || *step >= before ||
        ::access(absl::StrCat(dir, "/", name, "/meta.json").c_str(), F_OK) != 0)
      continue;
    best = *step;
  }
  return best;
}

absl::StatusOr<std::vector<std::string>>
RetainNewestCheckpoints(const std::string &saveDir, fb::CheckpointFormat format,
                        int64_t keep, int64_t written) {
  if (keep < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "keep = ", keep, ": a save keeps at least the checkpoint it wrote"));
  const std::string dir =
      saveDir.empty() ? std::string("checkpoints") : saveDir;
  // The others, newest first.
  std::vector<std::pair<int64_t, std::string>> others;
  for (const std::string &name : listDirectory(dir)) {
    std::optional<int64_t> step = checkpointStep(name, format);
    if (!step || *step == written)
      continue;
    std::string path = absl::StrCat(dir, "/", name);
    if (isCompleteCheckpoint(path, format, *step))
      others.emplace_back(*step, std::move(path));
  }
  std::sort(others.begin(), others.end(), std::greater<>());
  std::vector<std::string> removed;
  for (size_t i = others.size(); i-- > static_cast<size_t>(keep - 1);) {
    const std::string &path = others[i].second;
    if (format == fb::CheckpointFormat::Full) {
      if (::unlink(path.c_str()) != 0)
        return absl::InternalError(
            absl::StrFormat("%s: cannot remove it (keep = %d): %s", path, keep,
                            std::strerror(errno)));
    } else {
      std::string doomed = SaveTempDir(path, NewSaveId());
      if (::rename(path.c_str(), doomed.c_str()) != 0)
        return absl::InternalError(absl::StrFormat(
            "%s: cannot move it aside to remove it (keep = %d): %s", path, keep,
            std::strerror(errno)));
      MD_RETURN_IF_ERROR(removeCheckpointDir(doomed));
    }
    removed.push_back(path);
  }
  return removed;
}

} // namespace md::runtime
