//===- Safetensors.cpp - weights files, written atomically ---------------===//

#include "runtime/exec/Safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "runtime/exec/JsonReader.h"
#include "runtime/core/Status.h"

namespace md::runtime {
namespace {

absl::Status ioError(const std::string &path, const char *what) {
  return absl::InternalError(
      absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

std::string dirName(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  return path.substr(0, slash);
}

int64_t dtypeBytes(const std::string &dtype) {
  if (dtype == "F32" || dtype == "I32")
    return 4;
  if (dtype == "BF16" || dtype == "F16")
    return 2;
  if (dtype == "I64" || dtype == "F64")
    return 8;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL")
    return 1;
  return 0;
}

} // namespace

bool WriteAll(int fd, const void *data, size_t bytes) {
  const char *p = static_cast<const char *>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

absl::Status MakeDirectories(const std::string &dir) {
  if (dir.empty() || dir == "." || dir == "/")
    return absl::OkStatus();
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": exists and is not a directory"));
  }
  absl::Status parent = MakeDirectories(dirName(dir));
  if (!parent.ok())
    return parent;
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
    return ioError(dir, "cannot create directory");
  return absl::OkStatus();
}

TemporaryLock::TemporaryLock(const std::string &path)
    : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) {
  if (fd_ >= 0)
    (void)::flock(fd_, LOCK_EX | LOCK_NB);
}

TemporaryLock::~TemporaryLock() {
  if (fd_ >= 0)
    ::close(fd_);
}

bool TemporaryWriterGone(const std::string &path) {
  int fd = ::open(path.c_str(),
                  O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return errno == ENOENT; // gone already, or not ours to judge
  // Another open file description's lock conflicts with this one, even in
  // this process; the lock taken here goes with the descriptor.
  const bool locked = ::flock(fd, LOCK_EX | LOCK_NB) != 0;
  const int why = errno;
  ::close(fd);
  if (!locked)
    return true;
  if (why == EWOULDBLOCK)
    return false; // a live writer holds it
  // No locks here (ENOLCK, EINVAL): the PID in the name, if any.
  absl::string_view name(path);
  size_t at = name.rfind(".tmp.");
  int64_t pid = 0;
  if (at == name.npos || !absl::SimpleAtoi(name.substr(at + 5), &pid) ||
      pid <= 0)
    return true;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

void RemoveDeadTemporaries(const std::string &path) {
  const std::string dir = dirName(path);
  size_t slash = path.find_last_of('/');
  const std::string prefix =
      (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  DIR *d = ::opendir(dir.c_str());
  if (d == nullptr)
    return;
  std::vector<std::string> dead;
  while (struct dirent *e = ::readdir(d)) {
    absl::string_view name(e->d_name);
    int64_t pid = 0;
    if (absl::ConsumePrefix(&name, prefix) &&
        name.find_first_not_of("0123456789") == name.npos &&
        absl::SimpleAtoi(name, &pid))
      dead.push_back(absl::StrCat(dir, "/", e->d_name));
  }
  ::closedir(d);
  for (const std::string &tmp : dead) {
    struct stat st;
    if (::lstat(tmp.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        TemporaryWriterGone(tmp))
      ::unlink(tmp.c_str());
  }
}

absl::Status SyncDirectory(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return ioError(dir, "cannot open directory");
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0 && errno != EINVAL)
    return ioError(dir, "cannot sync directory");
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string &path,
                                 const std::function<bool(int fd)> &write) {
  // Something that exists and is not a regular file (/dev/null, a FIFO, a
  // terminal) is written to as it is: renaming a temporary over it would
  // replace the device node, or fail.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode))
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": is a directory, not a file to write"));
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      return ioError(path, "cannot open");
    bool ok = write(fd);
    absl::Status s = ok ? absl::OkStatus() : ioError(path, "cannot write");
    if (::close(fd) != 0 && s.ok())
      s = ioError(path, "cannot close");
    return s;
  }
  std::string dir = dirName(path);
  absl::Status made = MakeDirectories(dir);
  if (!made.ok())
    return made;
  RemoveDeadTemporaries(path);
  std::string tmp = absl::StrFormat("%s.tmp.%d", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0)
    return ioError(tmp, "cannot create");
  // Held until the descriptor closes (or the process dies): a live
  // writer's temporary is never taken for a dead one's.
  (void)::flock(fd, LOCK_EX | LOCK_NB);
  if (!write(fd)) {
    absl::Status s = ioError(tmp, "cannot write");
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::fsync(fd) != 0) {
    absl::Status s = ioError(tmp, "cannot sync");
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::close(fd) != 0) {
    absl::Status s = ioError(tmp, "cannot close");
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = ioError(path, "cannot rename the temporary file over");
    ::unlink(tmp.c_str());
    return s;
  }
  return SyncDirectory(dir);
}

absl::Status WriteSafetensorsFrom(
    const std::string &path, absl::Span<const SafetensorsSource> tensors,
    const std::map<std::string, std::string> &metadata,
    const std::function<void(absl::Span<const uint8_t>)> &written,
    int64_t chunkBytes) {
  std::vector<const SafetensorsSource *> order;
  for (const SafetensorsSource &t : tensors)
    order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const SafetensorsSource *a, const SafetensorsSource *b) {
              return a->name < b->name;
            });
  std::vector<std::string> entries;
  if (!metadata.empty()) {
    std::vector<std::string> kv;
    for (const auto &[k, v] : metadata)
      kv.push_back(absl::StrCat(JsonQuote(k), ":", JsonQuote(v)));
    entries.push_back(
        absl::StrCat("\"__metadata__\":{", absl::StrJoin(kv, ","), "}"));
  }
  std::vector<int64_t> sizes;
  int64_t offset = 0;
  for (const SafetensorsSource *t : order) {
    int64_t elements = 1;
    for (int64_t d : t->shape)
      elements *= d;
    int64_t bytes = dtypeBytes(t->dtype);
    if (bytes == 0)
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor ", t->name, ": unknown dtype ", t->dtype));
    entries.push_back(absl::StrFormat(
        "%s:{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%d,%d]}",
        JsonQuote(t->name), t->dtype, absl::StrJoin(t->shape, ","), offset,
        offset + elements * bytes));
    sizes.push_back(elements * bytes);
    offset += elements * bytes;
  }
  std::string header = absl::StrCat("{", absl::StrJoin(entries, ","), "}");
  while (header.size() % 8 != 0)
    header += ' ';
  uint64_t n = header.size();
  uint8_t length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<uint8_t>(n >> (8 * i));
  auto emit = [&](int fd, const void *data, size_t bytes) {
    if (written)
      written({static_cast<const uint8_t *>(data), bytes});
    return WriteAll(fd, data, bytes);
  };
  // A tensor's fill failing is its error, not the file system's.
  absl::Status filled = absl::OkStatus();
  std::vector<uint8_t> stage(static_cast<size_t>(
      std::max<int64_t>(1, std::min(chunkBytes, std::max<int64_t>(offset, 1)))));
  absl::Status s = WriteFileAtomically(path, [&](int fd) {
    if (!emit(fd, length, 8) || !emit(fd, header.data(), header.size()))
      return false;
    for (size_t i = 0; i < order.size(); ++i)
      for (int64_t at = 0; at < sizes[i];) {
        int64_t len = std::min<int64_t>(sizes[i] - at, stage.size());
        filled = order[i]->fill(at, {stage.data(), static_cast<size_t>(len)});
        if (!filled.ok() || !emit(fd, stage.data(), static_cast<size_t>(len)))
          return false;
        at += len;
      }
    return true;
  });
  return filled.ok() ? s : filled;
}

absl::Status
WriteSafetensors(const std::string &path,
                 absl::Span<const SafetensorsTensor> tensors,
                 const std::map<std::string, std::string> &metadata) {
  std::vector<SafetensorsSource> sources;
  for (const SafetensorsTensor &t : tensors) {
    int64_t elements = 1;
    for (int64_t d : t.shape)
      elements *= d;
    if (elements * dtypeBytes(t.dtype) != static_cast<int64_t>(t.data.size()) &&
        dtypeBytes(t.dtype) != 0)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: tensor %s: %d bytes of data for shape [%s] of %s", path, t.name,
          t.data.size(), absl::StrJoin(t.shape, ", "), t.dtype));
    const std::vector<uint8_t> *data = &t.data;
    sources.push_back({t.name, t.dtype, t.shape,
                       [data](int64_t offset, absl::Span<uint8_t> out) {
                         std::memcpy(out.data(), data->data() + offset,
                                     out.size());
                         return absl::OkStatus();
                       }});
  }
  return WriteSafetensorsFrom(path, sources, metadata);
}

SafetensorsFile::~SafetensorsFile() {
  if (fd >= 0)
    ::close(fd);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>>
OpenSafetensors(const std::string &path) {
  auto file = std::make_unique<SafetensorsFile>();
  file->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file->fd < 0)
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  MD_ASSIGN_OR_RETURN(file->header, ReadSafetensorsHeader(file->fd, path));
  return file;
}

namespace {

/// Skips one JSON value of the kinds an index holds (objects, arrays,
/// strings, integers, true, false, null).
bool skipValue(JsonReader &json, int depth = 0) {
  if (depth > 32)
    return false;
  std::string text;
  int64_t number = 0;
  if (json.eat('{'))
    return json.items('}', [&] {
      return json.string(&text) && json.eat(':') && skipValue(json, depth + 1);
    });
  if (json.eat('['))
    return json.items(']', [&] { return skipValue(json, depth + 1); });
  if (json.peek('"'))
    return json.string(&text);
  return json.literal("true") || json.literal("false") ||
         json.literal("null") || json.integer(&number);
}

} // namespace

absl::StatusOr<SafetensorsSet> OpenSafetensorsSet(const std::string &path) {
  SafetensorsSet set;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    MD_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                        OpenSafetensors(path));
    set.header = file->header;
    set.files.push_back(std::move(file));
    set.paths.push_back(path);
    return set;
  }
  const std::string dir = absl::StrCat(absl::StripSuffix(path, "/"), "/");
  const std::string indexPath = dir + "model.safetensors.index.json";
  int fd = ::open(indexPath.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT)
      return absl::NotFoundError(
          absl::StrCat(indexPath, ": cannot open: ", std::strerror(errno)));
    // One shard: save_pretrained's model.safetensors.
    return OpenSafetensorsSet(dir + "model.safetensors");
  }
  std::string text;
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return absl::DataLossError(
          absl::StrCat(indexPath, ": cannot read: ", std::strerror(err)));
    }
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > (size_t{256} << 20)) {
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(indexPath, ": larger than 256 MiB; not an index"));
    }
  }
  ::close(fd);

  // {"metadata": {...}, "weight_map": {"tensor": "shard file", ...}}
  std::map<std::string, std::string> weightMap;
  bool sawMap = false;
  JsonReader json(text);
  auto bad = [&](const std::string &why) {
    return absl::InvalidArgumentError(
        absl::StrCat(indexPath, ": byte ", json.offset(), ": ", why));
  };
  std::string key, tensor, shard;
  bool ok = json.eat('{') && json.items('}', [&] {
    if (!json.string(&key) || !json.eat(':'))
      return false;
    if (key != "weight_map")
      return skipValue(json);
    sawMap = true;
    return json.eat('{') && json.items('}', [&] {
      if (!json.string(&tensor) || !json.eat(':') || !json.string(&shard))
        return false;
      return weightMap.emplace(tensor, shard).second;
    });
  }) && json.done();
  if (!ok)
    return bad("not an index of safetensors shards (expected an object "
               "with a weight_map of tensor names to file names, each "
               "tensor once)");
  if (!sawMap || weightMap.empty())
    return bad("has no weight_map naming the shards' tensors");

  std::map<std::string, int> fileOf;
  for (const auto &[name, file] : weightMap) {
    if (file.empty() || file.find('/') != std::string::npos || file == "." ||
        file == "..")
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s is in shard '%s', which is not a file name in %s",
          indexPath, name, file, dir));
    if (fileOf.count(file))
      continue;
    int index = static_cast<int>(set.files.size());
    fileOf[file] = index;
    MD_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> opened,
                        OpenSafetensors(dir + file));
    set.files.push_back(std::move(opened));
    set.paths.push_back(dir + file);
  }
  for (size_t f = 0; f < set.files.size(); ++f) {
    for (const auto &[name, entry] : set.files[f]->header.tensors) {
      auto listed = weightMap.find(name);
      if (listed == weightMap.end() ||
          fileOf.at(listed->second) != static_cast<int>(f))
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s holds %s, which %s puts %s", set.paths[f], name, indexPath,
            listed == weightMap.end()
                ? std::string("in no shard")
                : absl::StrCat("in ", listed->second)));
      SafetensorsEntry e = entry;
      e.file = static_cast<int>(f);
      set.header.tensors.emplace(name, std::move(e));
    }
    for (const auto &[k, v] : set.files[f]->header.metadata)
      set.header.metadata.emplace(k, v);
    set.header.fileBytes += set.files[f]->header.fileBytes;
  }
  for (const auto &[name, file] : weightMap)
    if (!set.header.tensors.count(name))
      return absl::InvalidArgumentError(
          absl::StrFormat("%s puts %s in %s, which does not hold it",
                          indexPath, name, dir + file));
  return set;
}

absl::StatusOr<std::vector<SafetensorsTensor>>
ReadSafetensors(const std::string &path,
                std::map<std::string, std::string> *metadata) {
  // The header, checked as every reader checks it, then each tensor's bytes.
  MD_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                      OpenSafetensors(path));
  if (metadata)
    *metadata = file->header.metadata;
  std::vector<SafetensorsTensor> out;
  for (const auto &[name, e] : file->header.tensors) {
    SafetensorsTensor t{name, e.dtype, e.shape, {}};
    t.data.resize(static_cast<size_t>(e.end - e.begin));
    if (!ReadAllAt(file->fd, t.data.data(), t.data.size(), e.begin))
      return ioError(path, "cannot read a tensor");
    out.push_back(std::move(t));
  }
  return out;
}

bool ReadAllAt(int fd, void *data, size_t bytes, int64_t offset) {
  char *p = static_cast<char *>(data);
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    if (n == 0) {
      errno = 0;
      return false;
    }
    p += n;
    offset += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

absl::StatusOr<SafetensorsHeader>
ReadSafetensorsHeader(int fd, const std::string &path) {
  auto bad = [&](const std::string &why) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a safetensors file: ", why));
  };
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return ioError(path, "cannot stat");
  SafetensorsHeader h;
  h.fileBytes = static_cast<int64_t>(st.st_size);
  uint8_t length[8];
  if (h.fileBytes < 8 || !ReadAllAt(fd, length, 8, 0))
    return bad("shorter than its header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t(length[i]) << (8 * i);
  if (n > static_cast<uint64_t>(h.fileBytes - 8))
    return bad("truncated header");
  std::string text(static_cast<size_t>(n), '\0');
  if (!ReadAllAt(fd, text.data(), text.size(), 8))
    return ioError(path, "cannot read the header");
  const int64_t dataStart = 8 + static_cast<int64_t>(n);
  JsonReader json(text);
  if (!json.eat('{'))
    return bad("header is not a JSON object");
  if (json.eat('}'))
    return h;
  do {
    std::string name;
    if (!json.string(&name) || !json.eat(':') || !json.eat('{'))
      return bad("bad header entry");
    bool isMeta = name == "__metadata__";
    SafetensorsEntry e;
    std::vector<int64_t> offsets;
    if (!json.peek('}')) {
      do {
        std::string key;
        if (!json.string(&key) || !json.eat(':'))
          return bad("bad header entry " + name);
        if (isMeta) {
          std::string value;
          if (!json.string(&value))
            return bad("bad metadata");
          h.metadata[key] = value;
        } else if (key == "dtype") {
          if (!json.string(&e.dtype))
            return bad("bad dtype of " + name);
        } else if (key == "shape") {
          if (!json.intArray(&e.shape))
            return bad("bad shape of " + name);
        } else if (key == "data_offsets") {
          if (!json.intArray(&offsets))
            return bad("bad data_offsets of " + name);
        } else {
          return bad("unknown key " + key + " of " + name);
        }
      } while (json.eat(','));
    }
    if (!json.eat('}'))
      return bad("bad header entry " + name);
    if (isMeta)
      continue;
    if (offsets.size() != 2 || offsets[0] < 0 || offsets[1] < offsets[0] ||
        offsets[1] > h.fileBytes - dataStart)
      return bad("data_offsets of " + name + " out of range");
    int64_t elements = 1;
    for (int64_t d : e.shape) {
      if (d < 0 || __builtin_mul_overflow(elements, d, &elements))
        return bad("bad shape of " + name);
    }
    int64_t width = dtypeBytes(e.dtype);
    if (width == 0 || elements * width != offsets[1] - offsets[0])
      return bad(absl::StrFormat("%s: %d bytes for shape [%s] of %s", name,
                                 offsets[1] - offsets[0],
                                 absl::StrJoin(e.shape, ", "), e.dtype));
    e.begin = dataStart + offsets[0];
    e.end = dataStart + offsets[1];
    h.tensors[name] = std::move(e);
  } while (json.eat(','));
  if (!json.eat('}'))
    return bad("header object not closed");
  return h;
}

} // namespace md::runtime
