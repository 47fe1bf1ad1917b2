//===- ExecutorCheckpoints.cpp - the executor's checkpoints ---------------===//
//
// Gathering the parameters from the ranks' shards of the master weights,
// a plan's `save`: a full checkpoint (the gathered parameters, written by
// rank 0) or a sharded one (every rank's shard of the state a future step
// needs, meta.json listing the files and the tensors' layout), and loading
// a sharded checkpoint to resume from, at this plan and world size whatever
// they were at the save. All are collectives, so every rank calls them at
// the same point; Checkpoint.h, CheckpointMeta.h and CheckpointLayout.h
// name, describe and write the files.
//
//===----------------------------------------------------------------------===//

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "runtime/exec/Checkpoint.h"
#include "runtime/exec/CheckpointLayout.h"
#include "runtime/exec/CheckpointMeta.h"
#include "runtime/exec/ExecutorImpl.h"
#include "runtime/exec/NameMap.h"
#include "runtime/core/NumberFormat.h"
#include "runtime/exec/Safetensors.h"
#include "runtime/core/Status.h"
#include "runtime/plan/MemoryFormat.h"

namespace md::runtime {

using namespace plan_access;

absl::StatusOr<std::vector<std::optional<std::vector<float>>>>
Executor::Impl::gatherUnits() {
  std::vector<std::optional<std::vector<float>>> units(count(plan_.units()));
  for (uint32_t i = 0; i < count(plan_.buffers()); ++i) {
    int32_t x = static_cast<int32_t>(i);
    const fb::Buffer &b = buf(x);
    // A trainable unit's master weights (f32), a frozen unit's parameters
    // (in the param dtype, widened exactly).
    bool frozen = b.role() == fb::StateRole::Frozen;
    if ((b.role() != fb::StateRole::Master && !frozen) || b.unit() < 0 ||
        layout_.buffers[x].placement != Placement::Persistent)
      continue;
    if (b.dtype() != fb::DType::F32 &&
        (!frozen || (b.dtype() != fb::DType::BF16 &&
                     b.dtype() != fb::DType::F16)))
      return absl::UnimplementedError(
          absl::StrFormat("master weights '%s' are %s; md saves f32 masters",
                          str(b.name()), plan::DTypeName(b.dtype())));
    const int64_t n = b.numel();
    const int64_t width = esize(x);
    std::vector<uint8_t> raw(static_cast<size_t>(n * width), 0);
    if (b.size_kind() == fb::SizeKind::Shard) {
      const Group &g = group(static_cast<int64_t>(b.group()));
      int64_t s = layout_.buffers[x].elements;
      MD_ASSIGN_OR_RETURN(Buffer tmp, backend_.allocate(s * g.size() * width));
      MD_RETURN_IF_ERROR(backend_.synchronize(kComputeStream));
      MD_RETURN_IF_ERROR(
          comm_.allGather(ptrs_[x], tmp.data(), s, ref(x).dtype, g));
      MD_RETURN_IF_ERROR(
          backend_.copy(raw.data(), tmp.data(), n * width, kCommStream));
      MD_RETURN_IF_ERROR(backend_.synchronize(kCommStream));
    } else {
      MD_RETURN_IF_ERROR(toHost(raw.data(), x, 0, n * width));
    }
    std::vector<float> &host = units[b.unit()].emplace();
    host.assign(static_cast<size_t>(n), 0.0f);
    if (width == 4) {
      std::memcpy(host.data(), raw.data(), static_cast<size_t>(n * 4));
    } else {
      for (int64_t k = 0; k < n; ++k) {
        uint16_t v = static_cast<uint16_t>(raw[2 * k] | (raw[2 * k + 1] << 8));
        host[k] = b.dtype() == fb::DType::BF16 ? bf16ToF32(v) : f16ToF32(v);
      }
    }
  }
  return units;
}

absl::StatusOr<std::vector<NamedTensor>> Executor::Impl::gatherParameters() {
  MD_ASSIGN_OR_RETURN(std::vector<std::optional<std::vector<float>>> units,
                      gatherUnits());
  std::vector<NamedTensor> out;
  for (uint32_t p = 0; p < count(plan_.params()); ++p) {
    const fb::Param *param = plan_.params()->Get(p);
    NamedTensor t;
    t.name = str(param->name());
    int64_t numel = 1;
    for (uint32_t d = 0; d < count(param->shape()); ++d) {
      t.shape.push_back(param->shape()->Get(d));
      numel *= param->shape()->Get(d);
    }
    if (param->offset() >= 0 && param->unit() >= 0 && units[param->unit()]) {
      const std::vector<float> &u = *units[param->unit()];
      t.values.assign(u.begin() + param->offset(),
                      u.begin() + param->offset() + numel);
    } else {
      // A frozen parameter in no buffer: its initialiser's values.
      t.values.resize(static_cast<size_t>(numel));
      for (int64_t e = 0; e < numel; ++e)
        t.values[e] = static_cast<float>(initValue(p, e));
    }
    out.push_back(std::move(t));
  }
  return out;
}

absl::Status Executor::Impl::saveFull(const std::string &path) {
  const Clock::time_point begin = Clock::now();
  MD_ASSIGN_OR_RETURN(std::vector<NamedTensor> params, gatherParameters());
  if (options_.rank != 0)
    return absl::OkStatus();
  // What dead saves left beside it goes first, as a sharded save does.
  MD_RETURN_IF_ERROR(RemoveStaleTemporaries(
      path.find('/') == std::string::npos
          ? std::string(".")
          : path.substr(0, path.find_last_of('/')),
      ""));
  std::map<std::string, std::string> meta = {
      {"format", "pt"},
      {"model", str(plan_.header()->model())},
      {"plan", str(plan_.header()->plan_name())},
      {"step", absl::StrCat(step_)},
      {"world_size", absl::StrCat(world_.worldSize)}};
  MD_RETURN_IF_ERROR(WriteFullCheckpoint(path, params, meta));
  if (options_.observer)
    options_.observer->onSave(
        step_, path,
        std::chrono::duration<double>(Clock::now() - begin).count());
  return absl::OkStatus();
}

absl::Status Executor::Impl::broadcastInts(int64_t *values, int64_t n) {
  MD_ASSIGN_OR_RETURN(Buffer b, backend_.allocate(n * 8));
  MD_RETURN_IF_ERROR(backend_.copy(b.data(), values, n * 8, kCommStream));
  MD_RETURN_IF_ERROR(
      comm_.broadcast(b.data(), b.data(), n, DType::i64, 0, group(0)));
  MD_RETURN_IF_ERROR(backend_.copy(values, b.data(), n * 8, kCommStream));
  return backend_.synchronize(kCommStream);
}

absl::Status Executor::Impl::shareRank0Outcome(const absl::Status &mine,
                                               absl::string_view what) {
  // The message travels as i64 words; a longer one is cut (it is one line).
  constexpr int64_t kMaxMessage = 4096;
  std::string text;
  if (options_.rank == 0 && !mine.ok())
    text = std::string(mine.message().substr(0, kMaxMessage));
  int64_t head[2] = {mine.ok() ? 1 : 0, static_cast<int64_t>(text.size())};
  MD_RETURN_IF_ERROR(broadcastInts(head, 2));
  if (head[0] == 1)
    return mine;
  std::vector<int64_t> words(static_cast<size_t>((head[1] + 7) / 8));
  if (options_.rank == 0)
    std::memcpy(words.data(), text.data(), text.size());
  if (!words.empty())
    MD_RETURN_IF_ERROR(
        broadcastInts(words.data(), static_cast<int64_t>(words.size())));
  if (options_.rank == 0)
    return mine;
  return absl::AbortedError(absl::StrCat(
      "rank 0 could not ", what, ": ",
      absl::string_view(reinterpret_cast<const char *>(words.data()),
                        static_cast<size_t>(head[1]))));
}

absl::Status Executor::Impl::allGatherInts(const int64_t *mine, int64_t n,
                                           std::vector<int64_t> *all) {
  const Group &world = group(0);
  all->assign(static_cast<size_t>(n * world.size()), 0);
  MD_ASSIGN_OR_RETURN(Buffer send, backend_.allocate(n * 8));
  MD_ASSIGN_OR_RETURN(Buffer recv, backend_.allocate(n * 8 * world.size()));
  MD_RETURN_IF_ERROR(backend_.copy(send.data(), mine, n * 8, kCommStream));
  MD_RETURN_IF_ERROR(
      comm_.allGather(send.data(), recv.data(), n, DType::i64, world));
  MD_RETURN_IF_ERROR(backend_.copy(all->data(), recv.data(),
                                   n * 8 * world.size(), kCommStream));
  return backend_.synchronize(kCommStream);
}

absl::Status Executor::Impl::saveSharded(const std::string &dir) {
  const Clock::time_point begin = Clock::now();
  const int rank = options_.rank;
  // One id per save, rank 0's: every rank writes into its temporary
  // directory, which no other save (of this run or a dead one) uses.
  int64_t id = 0;
  if (rank == 0) {
    uint64_t v = 0;
    if (!absl::SimpleHexAtoi(NewSaveId(), &v))
      return absl::InternalError("cannot make a save id");
    id = static_cast<int64_t>(v);
  }
  MD_RETURN_IF_ERROR(broadcastInts(&id, 1));
  const std::string tmp =
      SaveTempDir(dir, absl::StrFormat("%016x", static_cast<uint64_t>(id)));
  const size_t slash = dir.find_last_of('/');
  const std::string parent =
      slash == std::string::npos ? "." : dir.substr(0, slash);

  // Rank 0 clears what dead saves left and makes the directory; a failure
  // there stops every rank.
  absl::Status prepared = absl::OkStatus();
  std::optional<TemporaryLock> tmpLock;
  if (rank == 0) {
    prepared = MakeDirectories(parent);
    if (prepared.ok())
      prepared = RemoveStaleTemporaries(parent, tmp);
    if (prepared.ok())
      prepared = MakeDirectories(tmp);
    // Held until this save ends, so that another run's housekeeping in
    // the same directory leaves it.
    if (prepared.ok())
      tmpLock.emplace(tmp);
  }
  MD_RETURN_IF_ERROR(shareRank0Outcome(
      prepared, absl::StrCat("prepare the checkpoint ", dir)));

  // This rank's file: the ranges of the state it writes (CheckpointLayout.h);
  // every rank writes one, possibly empty, so that rank 0 can check that it
  // sees all of them.
  // Each state is copied out a chunk at a time as the file is written,
  // and the file hashed as it goes (no copy of the state, no reading back).
  // The states' last writer may be a collective still on the comm stream.
  MD_RETURN_IF_ERROR(backend_.synchronize(kCommStream));
  std::vector<SafetensorsSource> tensors;
  for (uint32_t i = 0; i < count(plan_.buffers()); ++i) {
    int32_t x = static_cast<int32_t>(i);
    if (layout_.buffers[x].placement != Placement::Persistent ||
        !IsCheckpointState(buf(x)) || !RankRange(buf(x), world_, rank).writes)
      continue;
    tensors.push_back({StateFileName(plan_, x),
                       SafetensorsDType(buf(x).dtype()),
                       {layout_.buffers[x].elements},
                       [this, x](int64_t offset, absl::Span<uint8_t> out) {
                         return toHost(out.data(), x, offset,
                                       static_cast<int64_t>(out.size()));
                       }});
  }
  const std::string file = ShardFileName(tmp, rank);
  StreamHash hash;
  absl::Status written = WriteSafetensorsFrom(
      file, tensors,
      {{"format", "md-sharded-rank"},
       {"id", absl::StrFormat("%016x", static_cast<uint64_t>(id))},
       {"rank", absl::StrCat(rank)},
       {"step", absl::StrCat(step_)}},
      [&](absl::Span<const uint8_t> bytes) {
        hash.update(bytes.data(), bytes.size());
      });
  CheckpointFile mine;
  if (written.ok()) {
    mine.name = file.substr(file.find_last_of('/') + 1);
    mine.bytes = hash.bytes();
    mine.xxh3 = hash.digest();
  }
  int64_t record[3] = {written.ok() ? 1 : 0, mine.bytes,
                       static_cast<int64_t>(mine.xxh3)};
  std::vector<int64_t> all;
  MD_RETURN_IF_ERROR(allGatherInts(record, 3, &all));
  if (!written.ok())
    return written;

  // Rank 0 publishes once every rank's file is written, synced and
  // visible to it at the size its rank wrote.
  absl::Status published = absl::OkStatus();
  if (rank == 0) {
    std::vector<std::string> failed, unseen;
    ShardedMeta meta;
    for (int r = 0; r < world_.worldSize; ++r) {
      CheckpointFile f;
      f.name = ShardFileName("", r).substr(1);
      f.bytes = all[3 * r + 1];
      f.xxh3 = static_cast<uint64_t>(all[3 * r + 2]);
      if (all[3 * r] == 0)
        failed.push_back(absl::StrCat(r));
      else if (!VerifyCheckpointFile(tmp, f, /*checksum=*/false).ok())
        unseen.push_back(absl::StrCat(r));
      meta.files.push_back(std::move(f));
    }
    if (!failed.empty()) {
      published = absl::AbortedError(absl::StrFormat(
          "%s: rank%s %s could not write %s file%s (their messages say why)",
          dir, failed.size() > 1 ? "s" : "", absl::StrJoin(failed, ", "),
          failed.size() > 1 ? "their" : "its", failed.size() > 1 ? "s" : ""));
    } else if (!unseen.empty()) {
      published = absl::FailedPreconditionError(absl::StrFormat(
          "%s: rank 0 cannot see the file%s of rank%s %s under %s (a sharded "
          "checkpoint needs a file system every node shares; save "
          "checkpoint(full) otherwise); not publishing it",
          dir, unseen.size() > 1 ? "s" : "", unseen.size() > 1 ? "s" : "",
          absl::StrJoin(unseen, ", "), tmp));
    } else {
      meta.id = absl::StrFormat("%016x", static_cast<uint64_t>(id));
      meta.model = str(plan_.header()->model());
      meta.plan = str(plan_.header()->plan_name());
      meta.worldSize = world_.worldSize;
      meta.shardGroupSize = world_.shardGroupSize;
      meta.step = step_;
      DataFeeds::Position pos = feeds_->position();
      meta.epoch = pos.epoch;
      meta.batchesInEpoch = pos.batchesInEpoch;
      meta.batchesRead = pos.batchesRead;
      meta.microBatch = plan_.recipe()->micro_batch();
      meta.seed = static_cast<int64_t>(seed_);
      meta.samplerSeed = static_cast<int64_t>(samplerSeed_);
      meta.tensors = ShardedLayout(plan_, world_);
      std::string json = ShardedMetaJson(meta);
      published = WriteFileAtomically(tmp + "/meta.json", [&](int fd) {
        return WriteAll(fd, json.data(), json.size());
      });
      if (published.ok())
        published = PublishShardedCheckpoint(tmp, dir);
    }
  }
  MD_RETURN_IF_ERROR(shareRank0Outcome(
      published, absl::StrCat("publish the checkpoint ", dir)));
  if (rank == 0 && options_.observer)
    options_.observer->onSave(
        step_, dir,
        std::chrono::duration<double>(Clock::now() - begin).count());
  return absl::OkStatus();
}

absl::Status Executor::Impl::checkPreemption() {
  if (options_.preempt == nullptr)
    return absl::OkStatus();
  // Ranks get the signal at different moments: they stop at the first step
  // end at which any of them had it, all at the same one.
  float flag = options_.preempt->load(std::memory_order_relaxed) ? 1.0f : 0.0f;
  MD_RETURN_IF_ERROR(backend_.copy(control_.data(), &flag, 4, kCommStream));
  // In the flight recorder like every collective: a rank stopped in it is
  // in a collective, not between two.
  MD_RETURN_IF_ERROR(recorded(
      flightCall(Collective::all_reduce, group(0), DType::f32, 4), [&] {
        return comm_.allReduce(control_.data(), control_.data(), 1, DType::f32,
                               ReduceOp::max, group(0));
      }));
  MD_RETURN_IF_ERROR(backend_.copy(&flag, control_.data(), 4, kCommStream));
  MD_RETURN_IF_ERROR(waitForComm());
  if (flag == 0.0f || stop_ || step_ >= steps_)
    return absl::OkStatus(); // not asked, or ending here anyway
  preempted_ = true;
  stop_ = true;
  stopReason_ = "preempted (SIGTERM)";
  // The plan's first sharded save, else its first save, at this step.
  const fb::Instruction *chosen = nullptr;
  for (const fb::Instruction *inst :
       planInstructions(plan_, fb::Opcode::Save)) {
    bool sharded = static_cast<fb::CheckpointFormat>(inst->ints()->Get(0)) ==
                   fb::CheckpointFormat::Sharded;
    if (chosen == nullptr ||
        (sharded && static_cast<fb::CheckpointFormat>(chosen->ints()->Get(0)) !=
                        fb::CheckpointFormat::Sharded))
      chosen = inst;
  }
  if (chosen == nullptr || lastSaveStep_ == step_)
    return absl::OkStatus();
  return save(*chosen);
}

absl::Status Executor::Impl::save(const fb::Instruction &inst) {
  auto format = static_cast<fb::CheckpointFormat>(inst.ints()->Get(0));
  std::string dir =
      count(inst.strings()) > 0 ? str(inst.strings()->Get(0)) : "";
  std::string path = CheckpointPath(dir, format, step_);
  lastSaveStep_ = step_;
  MD_RETURN_IF_ERROR(format == fb::CheckpointFormat::Full ? saveFull(path)
                                                          : saveSharded(path));
  // keep = K: rank 0, which alone wrote (full) or published (sharded) the
  // checkpoint, removes the older ones now that the new one is in place.
  if (count(inst.ints()) < 2 || options_.rank != 0)
    return absl::OkStatus();
  return RetainNewestCheckpoints(dir, format, inst.ints()->Get(1), step_)
      .status();
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

namespace {

/// The files of a checkpoint a rank reads from, opened once each, with
/// their headers; reads element ranges of logical tensors through the
/// pieces meta.json lists.
class PieceReader {
public:
  PieceReader(const std::string &dir, const ShardedMeta &meta)
      : dir_(dir), meta_(meta) {}
  ~PieceReader() {
    for (auto &[rank, f] : files_)
      ::close(f.fd);
  }
  PieceReader(const PieceReader &) = delete;
  PieceReader &operator=(const PieceReader &) = delete;

  /// Elements [a, b) of tensor `t`, `width` bytes each, into `out`.
  absl::Status read(const TensorLayout &t, int64_t a, int64_t b, int64_t width,
                    uint8_t *out) {
    for (const TensorPiece &p : t.pieces) {
      int64_t lo = std::max(a, p.start), hi = std::min(b, p.start + p.count);
      if (lo >= hi)
        continue;
      MD_ASSIGN_OR_RETURN(File * f, open(p.rank));
      auto e = f->header.tensors.find(p.fileTensor);
      if (e == f->header.tensors.end() || e->second.dtype != t.dtype ||
          (p.offset + p.count) * width > e->second.end - e->second.begin)
        return absl::DataLossError(absl::StrFormat(
            "%s: holds no %s tensor '%s' of %d elements or more, which "
            "meta.json places %s's elements [%d, %d) in",
            f->path, t.dtype, p.fileTensor, p.offset + p.count, t.name, p.start,
            p.start + p.count));
      int64_t at = e->second.begin + (p.offset + lo - p.start) * width;
      if (!ReadAllAt(f->fd, out + (lo - a) * width,
                     static_cast<size_t>((hi - lo) * width), at))
        return absl::DataLossError(
            absl::StrCat(f->path, ": cannot read ", t.name, ": ",
                         errno ? std::strerror(errno) : "the file ends early"));
      bytesRead_ += (hi - lo) * width;
    }
    return absl::OkStatus();
  }
  /// The tensor bytes read so far.
  int64_t bytesRead() const { return bytesRead_; }

private:
  int64_t bytesRead_ = 0;
  struct File {
    std::string path;
    int fd = -1;
    SafetensorsHeader header;
  };
  absl::StatusOr<File *> open(int64_t rank) {
    auto it = files_.find(rank);
    if (it != files_.end())
      return &it->second;
    File f;
    f.path = absl::StrCat(dir_, "/", meta_.files[rank].name);
    f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0)
      return absl::NotFoundError(
          absl::StrCat(f.path, ": cannot open: ", std::strerror(errno)));
    absl::StatusOr<SafetensorsHeader> h = ReadSafetensorsHeader(f.fd, f.path);
    if (!h.ok()) {
      ::close(f.fd);
      return h.status();
    }
    f.header = *std::move(h);
    return &files_.emplace(rank, std::move(f)).first->second;
  }

  std::string dir_;
  const ShardedMeta &meta_;
  std::map<int64_t, File> files_;
};

std::string shapeText(const std::vector<int64_t> &shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

} // namespace

absl::StatusOr<std::string>
Executor::Impl::resolveResume(std::optional<ShardedMeta> *meta) {
  const std::string &resume = options_.resume;
  if (resume.empty())
    return std::string();
  // A checkpoint's meta.json, read on every rank, and its files verified.
  // Whether every rank read it is agreed first, so that the ranks call the
  // verification's collective alike.
  auto readAndVerify = [&](const std::string &dir) -> absl::Status {
    const Clock::time_point begin = Clock::now();
    absl::StatusOr<ShardedMeta> read = ReadShardedMeta(dir);
    int64_t ok = read.ok() ? 1 : 0;
    std::vector<int64_t> oks;
    MD_RETURN_IF_ERROR(allGatherInts(&ok, 1, &oks));
    if (!read.ok())
      return read.status();
    for (int64_t r = 0; r < static_cast<int64_t>(oks.size()); ++r)
      if (oks[r] == 0)
        return absl::DataLossError(absl::StrFormat(
            "%s/meta.json: rank %d cannot read it", dir, r));
    // A checkpoint directory named for a step holds that step.
    absl::string_view base(dir);
    if (size_t slash = base.find_last_of('/'); slash != base.npos)
      base.remove_prefix(slash + 1);
    int64_t named = 0;
    if (absl::ConsumePrefix(&base, "step_") && base.size() >= 8 &&
        base.find_first_not_of("0123456789") == base.npos &&
        absl::SimpleAtoi(base, &named) && named != read->step)
      return absl::DataLossError(absl::StrFormat(
          "%s/meta.json: step %d, but the directory is step %d's", dir,
          read->step, named));
    MD_RETURN_IF_ERROR(verifySharded(dir, *read));
    if (!read->checksummed)
      info_.resumeWarnings.push_back(absl::StrFormat(
          "%s/meta.json: format version %d carries no checksum of its own "
          "(an older md saved it); its step, save id and pieces were "
          "checked against the ranks' files only",
          dir, read->version));
    *meta = std::move(*read);
    verifySeconds_ =
        std::chrono::duration<double>(Clock::now() - begin).count();
    return absl::OkStatus();
  };
  if (resume != "auto") {
    struct stat st;
    if (::stat(resume.c_str(), &st) != 0)
      return absl::NotFoundError(
          absl::StrCat(resume, ": no such checkpoint: ", std::strerror(errno)));
    // A full checkpoint holds the parameters only: resuming from it would
    // restart the optimizer's moments and the data, which is not a resume.
    if (!S_ISDIR(st.st_mode))
      return absl::InvalidArgumentError(absl::StrCat(
          resume,
          ": a full checkpoint (parameters only) cannot be resumed from: "
          "--resume takes a sharded checkpoint directory, which also holds "
          "the optimizer state and the data position (save "
          "checkpoint(sharded, ...) in the recipe)"));
    MD_RETURN_IF_ERROR(readAndVerify(resume));
    return resume;
  }
  // auto: the directory of the plan's first sharded save.
  std::optional<std::string> saveDir;
  for (const fb::Instruction *inst :
       planInstructions(plan_, fb::Opcode::Save)) {
    if (static_cast<fb::CheckpointFormat>(inst->ints()->Get(0)) ==
        fb::CheckpointFormat::Sharded) {
      saveDir = count(inst->strings()) > 0 ? str(inst->strings()->Get(0))
                                           : std::string();
      break;
    }
  }
  if (!saveDir) {
    info_.resumeNote = "--resume auto: the plan saves no sharded checkpoint; "
                       "starting fresh";
    return std::string();
  }
  // Rank 0 looks (after putting back a checkpoint that a save which died
  // mid-publication set aside, and removing what dead saves left in every
  // save directory of the plan), every rank loads what it found. A damaged
  // checkpoint (meta.json unreadable or edited, a file missing, truncated
  // or corrupt, or not the file meta.json describes) is passed over for
  // the one before it, and said so.
  absl::Status housekept = absl::OkStatus();
  if (options_.rank == 0) {
    std::set<std::string> dirs;
    for (const fb::Instruction *inst :
         planInstructions(plan_, fb::Opcode::Save)) {
      std::string d = count(inst->strings()) > 0
                          ? str(inst->strings()->Get(0))
                          : std::string();
      dirs.insert(d.empty() ? std::string("checkpoints") : d);
    }
    for (const std::string &d : dirs)
      if (housekept.ok())
        housekept = RemoveStaleTemporaries(d, "");
  }
  MD_RETURN_IF_ERROR(
      shareRank0Outcome(housekept, "look for the newest checkpoint"));
  for (int64_t before = INT64_MAX;;) {
    int64_t step = options_.rank == 0
                       ? LatestShardedCheckpointStep(*saveDir, before)
                       : -1;
    MD_RETURN_IF_ERROR(broadcastInts(&step, 1));
    if (step < 0)
      break;
    std::string dir =
        CheckpointPath(*saveDir, fb::CheckpointFormat::Sharded, step);
    absl::Status found = readAndVerify(dir);
    if (found.ok())
      return dir;
    // Only what a damaged checkpoint causes is passed over; a failing
    // comm is the run's error.
    if (!absl::IsDataLoss(found) && !absl::IsNotFound(found) &&
        !absl::IsInvalidArgument(found))
      return found;
    info_.resumeSkipped.push_back(std::string(found.message()));
    before = step;
  }
  info_.resumeNote =
      absl::StrCat("--resume auto: no ",
                   info_.resumeSkipped.empty() ? "" : "undamaged ",
                   "checkpoint under ",
                   saveDir->empty() ? std::string("checkpoints") : *saveDir,
                   "; starting fresh");
  return std::string();
}

absl::Status Executor::Impl::verifySharded(const std::string &dir,
                                           const ShardedMeta &meta) {
  const int rank = options_.rank;
  const int64_t W = world_.worldSize;
  int64_t finding[3] = {-1, 0, 0}; // file, FileProblem, what was found
  for (size_t f = 0; f < meta.files.size(); ++f) {
    FileCheck check = CheckRankFile(dir, meta, static_cast<int64_t>(f),
                                    static_cast<int64_t>(f) % W == rank);
    if (check.problem != FileProblem::None) {
      finding[0] = static_cast<int64_t>(f);
      finding[1] = static_cast<int64_t>(check.problem);
      finding[2] = check.found;
      break;
    }
  }
  std::vector<int64_t> findings;
  MD_RETURN_IF_ERROR(allGatherInts(finding, 3, &findings));
  for (int64_t r = 0; r < W; ++r) {
    int64_t f = findings[3 * r];
    if (f < 0)
      continue;
    FileCheck check{static_cast<FileProblem>(findings[3 * r + 1]),
                    findings[3 * r + 2]};
    return RankFileCheckStatus(dir, meta, f, check);
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::loadSharded(const std::string &dir,
                                         const ShardedMeta &meta) {
  const Clock::time_point begin = Clock::now();
  const int rank = options_.rank;

  // (resolveResume verified the files.)
  // 1. The same model and optimizer: every state tensor of this plan is in
  //    the checkpoint at its shape, and every saved state has a place here
  //    (the working copy of the parameters may change precision: it is
  //    then cast from the master weights).
  std::map<std::string, const TensorLayout *> saved;
  for (const TensorLayout &t : meta.tensors)
    saved[t.name] = &t;
  const std::string from =
      absl::StrFormat("%s (model %s, plan %s)", dir, meta.model, meta.plan);
  std::set<std::string> wanted;
  std::vector<bool> castFromMaster(count(plan_.buffers()), false);
  // A frozen unit saved in another param dtype: read as saved, converted.
  std::vector<std::string> frozenSavedAs(count(plan_.buffers()));
  for (uint32_t i = 0; i < count(plan_.buffers()); ++i) {
    int32_t x = static_cast<int32_t>(i);
    const fb::Buffer &b = buf(x);
    for (const StateRun &run : StateRuns(plan_, x)) {
      wanted.insert(run.tensor);
      auto it = saved.find(run.tensor);
      bool params = b.role() == fb::StateRole::Params;
      if (params && (it == saved.end() ||
                     it->second->dtype != SafetensorsDType(b.dtype()))) {
        castFromMaster[x] = true;
        std::string master = absl::StrCat(
            "master/", run.tensor.substr(run.tensor.find('/') + 1));
        wanted.insert(master);
        it = saved.find(master);
        if (it == saved.end())
          return absl::InvalidArgumentError(
              absl::StrFormat("%s holds neither %s nor %s: another model?",
                              from, run.tensor, master));
      } else if (it == saved.end()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s holds no %s, which this plan (%s) needs: another model or "
            "optimizer?",
            from, run.tensor, str(plan_.header()->plan_name())));
      }
      if (it->second->shape != run.shape)
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: %s has shape %s in the checkpoint but %s in this plan", from,
            it->second->name, shapeText(it->second->shape),
            shapeText(run.shape)));
      if (b.role() == fb::StateRole::Frozen &&
          it->second->dtype != SafetensorsDType(b.dtype())) {
        const std::string &dt = it->second->dtype;
        if (dt != "F32" && dt != "BF16" && dt != "F16")
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: %s is %s; md reads F32, BF16 or F16 frozen parameters",
              from, run.tensor, dt));
        if (!frozenSavedAs[x].empty() && frozenSavedAs[x] != dt)
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: %s is %s, but the unit's other parameters are %s", from,
              run.tensor, dt, frozenSavedAs[x]));
        frozenSavedAs[x] = dt;
      } else if (!castFromMaster[x] &&
          it->second->dtype != SafetensorsDType(b.dtype()))
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: %s is %s in the checkpoint but %s in this plan", from,
            run.tensor, it->second->dtype, SafetensorsDType(b.dtype())));
      if (castFromMaster[x] && it->second->dtype != "F32")
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: %s is %s; md reads f32 master weights", from,
                            it->second->name, it->second->dtype));
    }
  }
  for (const TensorLayout &t : meta.tensors)
    if (!wanted.count(t.name) && !absl::StartsWith(t.name, "params/"))
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s holds %s %s, which this plan (%s) has no state for: another "
          "model or optimizer?",
          from, t.name, shapeText(t.shape), str(plan_.header()->plan_name())));

  // 2. This rank's ranges of every state, read from the pieces that hold
  //    them.
  PieceReader reader(dir, meta);
  for (uint32_t i = 0; i < count(plan_.buffers()); ++i) {
    int32_t x = static_cast<int32_t>(i);
    const fb::Buffer &b = buf(x);
    if (layout_.buffers[x].placement != Placement::Persistent ||
        !IsCheckpointState(b))
      continue;
    HeldRange h = RankRange(b, world_, rank);
    const std::string &savedAs = frozenSavedAs[x];
    const int64_t width = castFromMaster[x] ? 4
                          : savedAs.empty() ? esize(x)
                          : savedAs == "F32" ? 4
                                             : 2;
    std::vector<uint8_t> host(static_cast<size_t>(h.elements * width), 0);
    for (const StateRun &run : StateRuns(plan_, x)) {
      int64_t lo = std::max(h.begin, run.flatStart);
      int64_t hi = std::min(h.begin + h.valid, run.flatStart + run.count);
      if (lo >= hi)
        continue;
      std::string name = run.tensor;
      if (castFromMaster[x])
        name = absl::StrCat("master/", name.substr(name.find('/') + 1));
      MD_RETURN_IF_ERROR(
          reader.read(*saved.at(name), run.tensorStart + lo - run.flatStart,
                      run.tensorStart + hi - run.flatStart, width,
                      host.data() + (lo - h.begin) * width));
    }
    if (castFromMaster[x]) {
      MD_RETURN_IF_ERROR(storeFloats(
          x, reinterpret_cast<const float *>(host.data()), h.elements));
    } else if (!savedAs.empty()) {
      std::vector<float> values(static_cast<size_t>(h.elements));
      for (int64_t k = 0; k < h.elements; ++k) {
        if (width == 4) {
          std::memcpy(&values[k], host.data() + 4 * k, 4);
          continue;
        }
        uint16_t v =
            static_cast<uint16_t>(host[2 * k] | (host[2 * k + 1] << 8));
        values[k] = savedAs == "BF16" ? bf16ToF32(v) : f16ToF32(v);
      }
      MD_RETURN_IF_ERROR(storeFloats(x, values.data(), h.elements));
    } else {
      MD_RETURN_IF_ERROR(fromHost(x, host.data(), 0, h.elements * width));
    }
    MD_RETURN_IF_ERROR(backend_.synchronize(kComputeStream));
    hostScalars_.forget(ptrs_[x], ptrs_[x] + bytes(x));
  }

  step_ = meta.step;
  epoch_ = meta.epoch;
  lastReportStep_ = step_;
  DataFeeds::Position pos;
  pos.epoch = meta.epoch;
  pos.batchesInEpoch = meta.batchesInEpoch;
  pos.batchesRead = meta.batchesRead;
  feeds_->resume(pos, meta.worldSize * meta.microBatch);
  info_.resumedFrom = dir;
  int64_t savedBytes = 0;
  for (const CheckpointFile &f : meta.files)
    savedBytes += f.bytes;
  info_.resumedWhat = absl::StrFormat(
      "step %d, saved at %d rank%s under plan %s; rank %d read %s of the "
      "checkpoint's %s; loaded in %.2f s",
      meta.step, meta.worldSize, meta.worldSize == 1 ? "" : "s", meta.plan,
      rank, plan::BytesText(reader.bytesRead()), plan::BytesText(savedBytes),
      verifySeconds_ +
          std::chrono::duration<double>(Clock::now() - begin).count());
  return absl::OkStatus();
}

absl::Status Executor::Impl::loadWeights(const std::string &path) {
  // A file, or a save_pretrained folder of shards.
  MD_ASSIGN_OR_RETURN(SafetensorsSet set, OpenSafetensorsSet(path));
  SafetensorsHeader &header = set.header;
  if (!options_.initMap.empty()) {
    // Another framework's names: the map gives md's, with the byte ranges
    // of the (blocks of) tensors they are.
    MD_ASSIGN_OR_RETURN(NameMap map, ReadNameMap(options_.initMap));
    MD_ASSIGN_OR_RETURN(header, ApplyNameMap(map, header, path));
  }

  // The file and the model name the same parameters, trainable and frozen,
  // at the same shapes (PyTorch's load_state_dict(strict = True)); with
  // initMissing, a parameter the file lacks keeps its declared initialiser
  // (strict = False, as when a LoRA adapter starts on a base model's
  // weights), and the run's banner names them.
  std::map<std::string, std::vector<int64_t>> wanted;
  for (uint32_t p = 0; p < count(plan_.params()); ++p) {
    const fb::Param *param = plan_.params()->Get(p);
    std::vector<int64_t> shape;
    for (uint32_t d = 0; d < count(param->shape()); ++d)
      shape.push_back(param->shape()->Get(d));
    if (param->offset() < 0) {
      if (header.tensors.count(str(param->name())))
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: %s is frozen in this model, which initialises it from the "
            "recipe",
            path, str(param->name())));
      continue;
    }
    wanted[str(param->name())] = shape;
  }
  std::vector<std::string> missing;
  for (auto entry = wanted.begin(); entry != wanted.end();) {
    const auto &[name, shape] = *entry;
    auto it = header.tensors.find(name);
    if (it == header.tensors.end() && options_.initMissing) {
      missing.push_back(name);
      entry = wanted.erase(entry);
      continue;
    }
    ++entry;
    if (it == header.tensors.end())
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s holds no %s %s, a parameter of model %s", path, name,
          shapeText(shape), str(plan_.header()->model())));
    if (it->second.shape != shape)
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s has shape %s in the file but %s in model %s",
                          path, name, shapeText(it->second.shape),
                          shapeText(shape), str(plan_.header()->model())));
    const std::string &dt = it->second.dtype;
    if (dt != "F32" && dt != "BF16" && dt != "F16")
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s is %s; md reads F32, BF16 or F16 weights", path, name, dt));
  }
  for (const auto &[name, entry] : header.tensors)
    if (!wanted.count(name))
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s holds %s %s, which model %s has no parameter for", path, name,
          shapeText(entry.shape), str(plan_.header()->model())));

  // This rank's range of every master, working copy and frozen unit, by
  // parameter; a parameter the file lacks keeps its initialiser's values.
  for (uint32_t i = 0; i < count(plan_.buffers()); ++i) {
    int32_t x = static_cast<int32_t>(i);
    const fb::Buffer &b = buf(x);
    if (layout_.buffers[x].placement != Placement::Persistent ||
        !HoldsParameters(b))
      continue;
    HeldRange h = RankRange(b, world_, options_.rank);
    std::vector<float> values =
        missing.empty() ? std::vector<float>(static_cast<size_t>(h.elements))
                        : flatInit(b.unit(), h.begin, h.elements);
    for (int64_t j = h.valid; j < h.elements; ++j)
      values[j] = 0.0f; // padding
    for (const StateRun &run : StateRuns(plan_, x)) {
      int64_t lo = std::max(h.begin, run.flatStart);
      int64_t hi = std::min(h.begin + h.valid, run.flatStart + run.count);
      if (lo >= hi)
        continue;
      auto found =
          header.tensors.find(run.tensor.substr(run.tensor.find('/') + 1));
      if (found == header.tensors.end())
        continue; // missing: initialised above
      const SafetensorsEntry &e = found->second;
      const int64_t width = e.dtype == "F32" ? 4 : 2;
      std::vector<uint8_t> raw(static_cast<size_t>((hi - lo) * width));
      int64_t first = run.tensorStart + lo - run.flatStart;
      auto readAt = [&](uint8_t *to, size_t n, int64_t at) -> absl::Status {
        if (!ReadAllAt(set.files[e.file]->fd, to, n, at))
          return absl::DataLossError(absl::StrCat(
              set.paths[e.file], ": cannot read ", run.tensor, ": ",
              errno ? std::strerror(errno) : "the file ends early"));
        return absl::OkStatus();
      };
      if (!e.transposed) {
        MD_RETURN_IF_ERROR(
            readAt(raw.data(), raw.size(), e.begin + first * width));
      } else {
        // A name map's transposed (block of a) tensor: the file's tensor
        // whole, then md's elements [first, first + hi - lo) picked from it.
        std::vector<uint8_t> whole(static_cast<size_t>(e.end - e.begin));
        MD_RETURN_IF_ERROR(readAt(whole.data(), whole.size(), e.begin));
        const int64_t rows = e.shape[1]; // md's columns, the file's rows
        for (int64_t k = 0; k < hi - lo; ++k) {
          int64_t i = (first + k) / rows, j = (first + k) % rows;
          int64_t at = j * e.transposed->fileCols + e.transposed->firstCol + i;
          std::memcpy(raw.data() + k * width, whole.data() + at * width,
                      static_cast<size_t>(width));
        }
      }
      float *out = values.data() + (lo - h.begin);
      for (int64_t k = 0; k < hi - lo; ++k) {
        if (width == 4) {
          std::memcpy(out + k, raw.data() + 4 * k, 4);
        } else {
          uint16_t v =
              static_cast<uint16_t>(raw[2 * k] | (raw[2 * k + 1] << 8));
          out[k] = e.dtype == "BF16" ? bf16ToF32(v) : f16ToF32(v);
        }
      }
    }
    MD_RETURN_IF_ERROR(storeFloats(x, values.data(), h.elements));
    MD_RETURN_IF_ERROR(backend_.synchronize(kComputeStream));
    hostScalars_.forget(ptrs_[x], ptrs_[x] + bytes(x));
  }
  info_.initFrom = path;
  info_.initWhat =
      absl::StrFormat("weights only: %d parameter%s", wanted.size(),
                      wanted.size() == 1 ? "" : "s");
  if (!missing.empty()) {
    constexpr size_t kNamed = 4;
    std::vector<std::string> named(
        missing.begin(), missing.begin() + std::min(missing.size(), kNamed));
    absl::StrAppendFormat(
        &info_.initWhat, "; %d not in the file keep their initialiser (%s%s)",
        missing.size(), absl::StrJoin(named, ", "),
        missing.size() > kNamed ? ", ..." : "");
  }
  return absl::OkStatus();
}

} // namespace md::runtime
