//===- CheckpointMeta.cpp - meta.json of a sharded checkpoint -------------===//
//
// Writing and parsing meta.json, and the files' checksums and headers
// (CheckpointMeta.h). The parser reads the JSON md writes (objects,
// arrays, strings, integers, null) through JsonReader, the cursor the
// safetensors header reader uses too; anything else is a foreign file.
// meta.json's own checksum covers its text byte for byte up to its last
// field, so that any edit (a step, an id, a dtype, a shape, a piece's
// offset) is found before a field is believed.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/CheckpointMeta.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/exec/JsonReader.h"
#include "runtime/exec/Safetensors.h"
#include "runtime/core/Status.h"

namespace md::runtime {
namespace {

/// A JSON value: null, integer, string, array or object.
struct Json {
  enum class Kind { Null, Int, String, Array, Object } kind = Kind::Null;
  int64_t i = 0;
  std::string s;
  std::vector<Json> items;
  std::map<std::string, Json> fields;
};

/// Reads the JSON md writes into a Json tree.
class Parser {
public:
  explicit Parser(const std::string &text) : json_(text) {}

  bool parse(Json *out) { return value(out, 0) && json_.done(); }
  size_t offset() const { return json_.offset(); }

private:
  bool value(Json *out, int depth) {
    if (depth > 16)
      return false;
    if (json_.peek('"')) {
      out->kind = Json::Kind::String;
      return json_.string(&out->s);
    }
    if (json_.eat('[')) {
      out->kind = Json::Kind::Array;
      return json_.items(']', [&] {
        out->items.emplace_back();
        return value(&out->items.back(), depth + 1);
      });
    }
    if (json_.eat('{')) {
      out->kind = Json::Kind::Object;
      return json_.items('}', [&] {
        std::string key;
        return json_.string(&key) && json_.eat(':') &&
               value(&out->fields[key], depth + 1);
      });
    }
    if (json_.literal("null"))
      return true;
    out->kind = Json::Kind::Int;
    return json_.integer(&out->i);
  }

  JsonReader json_;
};

/// Field access with messages naming the file and the field.
class Fields {
public:
  Fields(const std::string &path) : path_(path) {}
  absl::Status bad(const std::string &field, const std::string &why) const {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": ", field, ": ", why));
  }
  absl::StatusOr<const Json *> get(const Json &obj, const std::string &where,
                                   const std::string &key,
                                   Json::Kind kind) const {
    std::string field = where.empty() ? key : absl::StrCat(where, ".", key);
    auto it = obj.fields.find(key);
    if (it == obj.fields.end())
      return bad(field, "missing");
    if (it->second.kind != kind)
      return bad(field, "of the wrong type");
    return &it->second;
  }
  absl::StatusOr<int64_t> integer(const Json &obj, const std::string &where,
                                  const std::string &key, int64_t min) const {
    auto v = get(obj, where, key, Json::Kind::Int);
    if (!v.ok())
      return v.status();
    if ((*v)->i < min)
      return bad(where.empty() ? key : absl::StrCat(where, ".", key),
                 absl::StrFormat("%d is below %d", (*v)->i, min));
    return (*v)->i;
  }
  absl::StatusOr<std::string> text(const Json &obj, const std::string &where,
                                   const std::string &key) const {
    auto v = get(obj, where, key, Json::Kind::String);
    if (!v.ok())
      return v.status();
    return (*v)->s;
  }
  /// Calls `each` on every item of `array` (the field `field`) with its
  /// path, "files[2]"; an item that is not an object is bad.
  absl::Status eachObject(
      const Json &array, const std::string &field,
      const std::function<absl::Status(const Json &, const std::string &)>
          &each) const {
    for (size_t k = 0; k < array.items.size(); ++k) {
      std::string where = absl::StrCat(field, "[", k, "]");
      if (array.items[k].kind != Json::Kind::Object)
        return bad(where, "not an object");
      MD_RETURN_IF_ERROR(each(array.items[k], where));
    }
    return absl::OkStatus();
  }

private:
  std::string path_;
};

/// One entry of meta.json's "tensors" (at `where`): its layout, whose
/// pieces must cover it once, on ranks below `worldSize`.
absl::StatusOr<TensorLayout> parseTensorLayout(const Fields &f, const Json &e,
                                               const std::string &where,
                                               int64_t worldSize) {
  TensorLayout t;
  MD_ASSIGN_OR_RETURN(t.name, f.text(e, where, "name"));
  MD_ASSIGN_OR_RETURN(t.dtype, f.text(e, where, "dtype"));
  const Json *shape = nullptr;
  MD_ASSIGN_OR_RETURN(shape, f.get(e, where, "shape", Json::Kind::Array));
  for (const Json &d : shape->items) {
    if (d.kind != Json::Kind::Int || d.i < 0 || d.i > (int64_t(1) << 40))
      return f.bad(where + ".shape", "not a shape");
    t.shape.push_back(d.i);
  }
  const int64_t numel = ShapeElements(t.shape);
  const Json *pieces = nullptr;
  MD_ASSIGN_OR_RETURN(pieces, f.get(e, where, "pieces", Json::Kind::Array));
  int64_t covered = 0;
  MD_RETURN_IF_ERROR(f.eachObject(
      *pieces, where + ".pieces",
      [&](const Json &q, const std::string &pw) -> absl::Status {
        TensorPiece piece;
        MD_ASSIGN_OR_RETURN(piece.rank, f.integer(q, pw, "rank", 0));
        MD_ASSIGN_OR_RETURN(piece.fileTensor, f.text(q, pw, "tensor"));
        MD_ASSIGN_OR_RETURN(piece.offset, f.integer(q, pw, "offset", 0));
        MD_ASSIGN_OR_RETURN(piece.start, f.integer(q, pw, "start", 0));
        MD_ASSIGN_OR_RETURN(piece.count, f.integer(q, pw, "count", 1));
        if (piece.rank >= worldSize)
          return f.bad(pw + ".rank",
                       absl::StrFormat("%d, but the world size is %d",
                                       piece.rank, worldSize));
        // Pieces are listed by start and cover the tensor once.
        if (piece.start != covered || piece.count > numel - piece.start)
          return f.bad(pw,
                       absl::StrFormat("elements [%d, %d) do not continue "
                                       "the %d before them in a tensor "
                                       "of %d",
                                       piece.start, piece.start + piece.count,
                                       covered, numel));
        covered += piece.count;
        t.pieces.push_back(std::move(piece));
        return absl::OkStatus();
      }));
  if (covered != numel)
    return f.bad(where, absl::StrFormat("its pieces cover %d of %d elements",
                                        covered, numel));
  return t;
}

/// meta.json ends with its checksum, the XXH3-64 of every byte before
/// this line: kChecksumKey, 16 hex digits, kChecksumEnd.
constexpr absl::string_view kChecksumKey = "  \"meta_xxh3\": \"";
constexpr absl::string_view kChecksumEnd = "\"\n}\n";

/// Checks the checksum that ends meta.json's `text` (version 3 on).
absl::Status checkMetaChecksum(const std::string &text,
                               const std::string &path) {
  const size_t tail = kChecksumKey.size() + 16 + kChecksumEnd.size();
  uint64_t stated = 0;
  absl::string_view t(text);
  if (t.size() < tail ||
      t.substr(t.size() - tail, kChecksumKey.size()) != kChecksumKey ||
      !absl::EndsWith(t, kChecksumEnd) ||
      !absl::SimpleHexAtoi(t.substr(t.size() - tail + kChecksumKey.size(), 16),
                           &stated))
    return absl::DataLossError(absl::StrCat(
        path, ": meta_xxh3: missing, or not the last field as md writes it "
              "(edited or damaged)"));
  const uint64_t found = XXH3_64bits(text.data(), text.size() - tail);
  if (found != stated)
    return absl::DataLossError(absl::StrFormat(
        "%s: XXH3-64 checksum %016x of its text, but its meta_xxh3 is %016x "
        "(edited or corrupt)",
        path, found, stated));
  return absl::OkStatus();
}

} // namespace

std::string ShardedMetaJson(const ShardedMeta &m) {
  std::string s = absl::StrFormat(
      "{\n  \"format\": \"md-sharded\",\n  \"version\": %d,\n  \"id\": %s,\n"
      "  \"model\": %s,\n  \"plan\": %s,\n  \"world_size\": %d,\n"
      "  \"shard_group_size\": %d,\n  \"step\": %d,\n  \"epoch\": %d,\n"
      "  \"batches_in_epoch\": %d,\n  \"batches_read\": %d,\n"
      "  \"micro_batch\": %d,\n  \"seed\": %d,\n  \"sampler_seed\": %d,\n"
      "  \"files\": [",
      kShardedFormatVersion, JsonQuote(m.id), JsonQuote(m.model),
      JsonQuote(m.plan), m.worldSize, m.shardGroupSize, m.step, m.epoch,
      m.batchesInEpoch, m.batchesRead, m.microBatch, m.seed, m.samplerSeed);
  for (size_t f = 0; f < m.files.size(); ++f)
    absl::StrAppendFormat(
        &s, "%s\n    {\"name\": %s, \"bytes\": %d, \"xxh3\": \"%016x\"}",
        f ? "," : "", JsonQuote(m.files[f].name), m.files[f].bytes,
        m.files[f].xxh3);
  absl::StrAppend(&s, "\n  ],\n  \"tensors\": [");
  for (size_t k = 0; k < m.tensors.size(); ++k) {
    const TensorLayout &t = m.tensors[k];
    absl::StrAppendFormat(
        &s,
        "%s\n    {\"name\": %s, \"dtype\": %s, \"shape\": [%s], "
        "\"pieces\": [",
        k ? "," : "", JsonQuote(t.name), JsonQuote(t.dtype),
        absl::StrJoin(t.shape, ", "));
    for (size_t p = 0; p < t.pieces.size(); ++p) {
      const TensorPiece &q = t.pieces[p];
      absl::StrAppendFormat(&s,
                            "%s{\"rank\": %d, \"tensor\": %s, \"offset\": %d, "
                            "\"start\": %d, \"count\": %d}",
                            p ? ", " : "", q.rank, JsonQuote(q.fileTensor),
                            q.offset, q.start, q.count);
    }
    absl::StrAppend(&s, "]}");
  }
  absl::StrAppend(&s, "\n  ],\n");
  absl::StrAppendFormat(&s, "%s%016x%s", kChecksumKey,
                        XXH3_64bits(s.data(), s.size()), kChecksumEnd);
  return s;
}

absl::StatusOr<ShardedMeta> ParseShardedMeta(const std::string &text,
                                             const std::string &path) {
  Json root;
  Parser parser(text);
  if (!parser.parse(&root) || root.kind != Json::Kind::Object)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: not an md checkpoint's meta.json (not the JSON md writes, at "
        "byte %d)",
        path, parser.offset()));
  Fields f(path);
  std::string format;
  MD_ASSIGN_OR_RETURN(format, f.text(root, "", "format"));
  if (format != "md-sharded")
    return f.bad("format", absl::StrCat("\"", format,
                                        "\", not an md sharded checkpoint"));
  int64_t version = 0;
  MD_ASSIGN_OR_RETURN(version, f.integer(root, "", "version", 1));
  if (version < kOldestShardedFormatVersion || version > kShardedFormatVersion)
    return f.bad("version",
                 absl::StrFormat("%d; this md reads versions %d to %d%s",
                                 version, kOldestShardedFormatVersion,
                                 kShardedFormatVersion,
                                 version < kOldestShardedFormatVersion
                                     ? " (version 1 lists no tensor layout "
                                       "and cannot be loaded)"
                                     : " (a newer md saved it)"));
  ShardedMeta m;
  m.version = version;
  m.checksummed = version >= 3;
  // The checksum first: no field of an edited file is believed.
  if (m.checksummed)
    MD_RETURN_IF_ERROR(checkMetaChecksum(text, path));
  else if (root.fields.count("meta_xxh3"))
    return absl::DataLossError(absl::StrFormat(
        "%s: version %d, which has no meta_xxh3, but it carries one (edited)",
        path, version));
  MD_ASSIGN_OR_RETURN(m.id, f.text(root, "", "id"));
  MD_ASSIGN_OR_RETURN(m.model, f.text(root, "", "model"));
  MD_ASSIGN_OR_RETURN(m.plan, f.text(root, "", "plan"));
  MD_ASSIGN_OR_RETURN(m.worldSize, f.integer(root, "", "world_size", 1));
  MD_ASSIGN_OR_RETURN(m.shardGroupSize,
                      f.integer(root, "", "shard_group_size", 1));
  MD_ASSIGN_OR_RETURN(m.step, f.integer(root, "", "step", 0));
  MD_ASSIGN_OR_RETURN(m.epoch, f.integer(root, "", "epoch", 0));
  MD_ASSIGN_OR_RETURN(m.batchesInEpoch,
                      f.integer(root, "", "batches_in_epoch", 0));
  MD_ASSIGN_OR_RETURN(m.batchesRead, f.integer(root, "", "batches_read", 0));
  MD_ASSIGN_OR_RETURN(m.microBatch, f.integer(root, "", "micro_batch", 0));
  MD_ASSIGN_OR_RETURN(m.seed, f.integer(root, "", "seed", INT64_MIN));
  MD_ASSIGN_OR_RETURN(m.samplerSeed,
                      f.integer(root, "", "sampler_seed", INT64_MIN));
  const Json *files = nullptr;
  MD_ASSIGN_OR_RETURN(files, f.get(root, "", "files", Json::Kind::Array));
  if (static_cast<int64_t>(files->items.size()) != m.worldSize)
    return f.bad("files", absl::StrFormat("%d files for world size %d",
                                          files->items.size(), m.worldSize));
  MD_RETURN_IF_ERROR(f.eachObject(
      *files, "files",
      [&](const Json &e, const std::string &where) -> absl::Status {
        CheckpointFile file;
        MD_ASSIGN_OR_RETURN(file.name, f.text(e, where, "name"));
        if (file.name.empty() || file.name.find('/') != std::string::npos ||
            file.name[0] == '.')
          return f.bad(where + ".name",
                       "\"" + file.name + "\" is not a file name");
        MD_ASSIGN_OR_RETURN(file.bytes, f.integer(e, where, "bytes", 0));
        std::string hex;
        MD_ASSIGN_OR_RETURN(hex, f.text(e, where, "xxh3"));
        if (hex.size() != 16 || !absl::SimpleHexAtoi(hex, &file.xxh3))
          return f.bad(where + ".xxh3", "\"" + hex + "\" is not 16 hex digits");
        m.files.push_back(std::move(file));
        return absl::OkStatus();
      }));
  const Json *tensors = nullptr;
  MD_ASSIGN_OR_RETURN(tensors, f.get(root, "", "tensors", Json::Kind::Array));
  MD_RETURN_IF_ERROR(f.eachObject(
      *tensors, "tensors",
      [&](const Json &e, const std::string &where) -> absl::Status {
        MD_ASSIGN_OR_RETURN(TensorLayout t,
                            parseTensorLayout(f, e, where, m.worldSize));
        m.tensors.push_back(std::move(t));
        return absl::OkStatus();
      }));
  return m;
}

absl::StatusOr<ShardedMeta> ReadShardedMeta(const std::string &dir) {
  std::string path = dir + "/meta.json";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(absl::StrCat(
        path, ": cannot open: ", std::strerror(errno),
        errno == ENOENT ? " (not a complete md sharded checkpoint)" : ""));
  std::string text;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > (size_t(1) << 30))
      break;
  }
  ::close(fd);
  return ParseShardedMeta(text, path);
}

StreamHash::StreamHash() : state_(XXH3_createState()) {
  // XXH3_createState is malloc; like any allocation, md does not recover
  // from its failure.
  if (state_ == nullptr)
    std::abort();
  XXH3_64bits_reset(static_cast<XXH3_state_t *>(state_));
}

StreamHash::~StreamHash() {
  XXH3_freeState(static_cast<XXH3_state_t *>(state_));
}

void StreamHash::update(const void *data, size_t bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t *>(state_), data, bytes);
  bytes_ += static_cast<int64_t>(bytes);
}

uint64_t StreamHash::digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t *>(state_));
}

absl::StatusOr<CheckpointFile> HashFile(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  StreamHash hash;
  CheckpointFile f;
  size_t slash = path.find_last_of('/');
  f.name = slash == std::string::npos ? path : path.substr(slash + 1);
  std::vector<char> buf(size_t(1) << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      absl::Status s = absl::InternalError(
          absl::StrCat(path, ": cannot read: ", std::strerror(errno)));
      ::close(fd);
      return s;
    }
    if (n == 0)
      break;
    hash.update(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  f.bytes = hash.bytes();
  f.xxh3 = hash.digest();
  return f;
}

FileCheck CheckCheckpointFile(const std::string &dir, const CheckpointFile &f,
                              bool checksum) {
  std::string path = absl::StrCat(dir, "/", f.name);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return {FileProblem::Missing, errno};
  if (static_cast<int64_t>(st.st_size) != f.bytes)
    return {FileProblem::Size, static_cast<int64_t>(st.st_size)};
  if (!checksum)
    return {};
  absl::StatusOr<CheckpointFile> h = HashFile(path);
  if (!h.ok())
    return {FileProblem::Unreadable, errno};
  if (h->xxh3 != f.xxh3)
    return {FileProblem::Checksum, static_cast<int64_t>(h->xxh3)};
  return {};
}

absl::Status FileCheckStatus(const std::string &dir, const CheckpointFile &f,
                             const FileCheck &check) {
  std::string path = absl::StrCat(dir, "/", f.name);
  switch (check.problem) {
  case FileProblem::None:
    return absl::OkStatus();
  case FileProblem::Missing:
    return absl::NotFoundError(
        absl::StrCat(path, ": missing (meta.json lists it): ",
                     std::strerror(static_cast<int>(check.found))));
  case FileProblem::Size:
    return absl::DataLossError(absl::StrFormat(
        "%s: %d bytes, but meta.json lists %d (%s)", path, check.found, f.bytes,
        check.found < f.bytes ? "truncated" : "not the file saved"));
  case FileProblem::Checksum:
    return absl::DataLossError(absl::StrFormat(
        "%s: XXH3-64 checksum %016x, but meta.json lists %016x (corrupt)", path,
        static_cast<uint64_t>(check.found), f.xxh3));
  case FileProblem::Unreadable:
    return absl::DataLossError(absl::StrCat(
        path, ": cannot read: ", std::strerror(static_cast<int>(check.found))));
  default: // a header's problem: RankFileCheckStatus words it
    break;
  }
  return absl::InternalError("unknown file problem");
}

absl::Status VerifyCheckpointFile(const std::string &dir,
                                  const CheckpointFile &f, bool checksum) {
  return FileCheckStatus(dir, f, CheckCheckpointFile(dir, f, checksum));
}

namespace {

/// The integer a rank file's header metadata gives `key`, -1 when it has
/// none or it is not one.
int64_t headerInt(const SafetensorsHeader &h, const std::string &key) {
  auto it = h.metadata.find(key);
  int64_t v = -1;
  if (it == h.metadata.end() || !absl::SimpleAtoi(it->second, &v) || v < 0)
    return -1;
  return v;
}

} // namespace

FileCheck CheckRankFile(const std::string &dir, const ShardedMeta &meta,
                        int64_t r, bool full) {
  const CheckpointFile &f = meta.files[r];
  FileCheck check = CheckCheckpointFile(dir, f, full);
  if (check.problem != FileProblem::None || !full)
    return check;
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      OpenSafetensors(absl::StrCat(dir, "/", f.name));
  if (!file.ok())
    return {FileProblem::Header, 0};
  const SafetensorsHeader &h = (*file)->header;
  auto format = h.metadata.find("format");
  if (format == h.metadata.end() || format->second != "md-sharded-rank")
    return {FileProblem::Header, 0};
  auto id = h.metadata.find("id");
  if (id == h.metadata.end() || id->second != meta.id) {
    uint64_t v = 0;
    bool hex = id != h.metadata.end() && id->second.size() == 16 &&
               absl::SimpleHexAtoi(id->second, &v);
    return {FileProblem::SaveId, hex ? static_cast<int64_t>(v) : -1};
  }
  if (int64_t step = headerInt(h, "step"); step != meta.step)
    return {FileProblem::Step, step};
  if (int64_t rank = headerInt(h, "rank"); rank != r)
    return {FileProblem::Rank, rank};
  int64_t index = 0;
  for (const TensorLayout &t : meta.tensors)
    for (const TensorPiece &p : t.pieces) {
      if (p.rank == r) {
        auto e = h.tensors.find(p.fileTensor);
        if (e == h.tensors.end() || e->second.dtype != t.dtype ||
            ShapeElements(e->second.shape) < p.offset + p.count)
          return {FileProblem::Piece, index};
      }
      ++index;
    }
  return {};
}

absl::Status RankFileCheckStatus(const std::string &dir,
                                 const ShardedMeta &meta, int64_t r,
                                 const FileCheck &check) {
  const CheckpointFile &f = meta.files[r];
  const std::string path = absl::StrCat(dir, "/", f.name);
  switch (check.problem) {
  case FileProblem::Header:
    return absl::DataLossError(absl::StrCat(
        path, ": not a rank file of an md sharded checkpoint (its header "
              "does not read as one of format md-sharded-rank)"));
  case FileProblem::SaveId:
    return absl::DataLossError(absl::StrFormat(
        "%s: %s, but meta.json's id is %s (a file of another save)", path,
        check.found == -1 ? std::string("its header names no save id")
                          : absl::StrFormat("written by save %016x",
                                            static_cast<uint64_t>(check.found)),
        meta.id));
  case FileProblem::Step:
    return absl::DataLossError(absl::StrFormat(
        "%s: %s, but meta.json says step %d", path,
        check.found == -1 ? std::string("its header names no step")
                          : absl::StrFormat("holds step %d", check.found),
        meta.step));
  case FileProblem::Rank:
    return absl::DataLossError(absl::StrFormat(
        "%s: %s, but meta.json lists it as rank %d's", path,
        check.found == -1
            ? std::string("its header names no rank")
            : absl::StrFormat("holds rank %d's state", check.found),
        r));
  case FileProblem::Piece: {
    int64_t index = 0;
    for (const TensorLayout &t : meta.tensors)
      for (const TensorPiece &p : t.pieces)
        if (index++ == check.found)
          return absl::DataLossError(absl::StrFormat(
              "%s: holds no %s tensor '%s' of %d elements or more, which "
              "meta.json places %s's elements [%d, %d) in",
              path, t.dtype, p.fileTensor, p.offset + p.count, t.name,
              p.start, p.start + p.count));
    return absl::DataLossError(
        absl::StrCat(path, ": does not hold a piece meta.json places in it"));
  }
  default:
    return FileCheckStatus(dir, f, check);
  }
}

} // namespace md::runtime
