//===- ExecutorCheckpoints.cpp - the executor's checkpoints ---------------===//
//
// Gathering the parameters from the ranks' shards of the master weights,
// and a plan's `save`: a full checkpoint (the gathered parameters, written
// by rank 0) or a sharded one (every rank's persistent buffers as it holds
// them). Both are collectives, so every rank calls them at the same point;
// Checkpoint.h names and writes the files.
//
//===----------------------------------------------------------------------===//

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Checkpoint.h"
#include "runtime/core/ExecutorImpl.h"
#include "runtime/core/Safetensors.h"
#include "runtime/core/Status.h"

namespace md::runtime {

using namespace plan_access;

absl::StatusOr<std::vector<std::optional<std::vector<float>>>>
Executor::Impl::gatherUnits() {
  std::vector<std::optional<std::vector<float>>> units(count(plan_.units()));
  for (uint32_t i = 0; i < count(plan_.buffers()); ++i) {
    int32_t x = static_cast<int32_t>(i);
    const fb::Buffer &b = buf(x);
    if (b.role() != fb::StateRole::Master || b.unit() < 0 ||
        layout_.buffers[x].placement != Placement::Persistent)
      continue;
    if (b.dtype() != fb::DType::F32)
      return absl::UnimplementedError(
          absl::StrFormat("master weights '%s' are %s; md saves f32 masters",
                          str(b.name()), plan::DTypeName(b.dtype())));
    int64_t n = b.numel();
    std::vector<float> &host = units[b.unit()].emplace();
    host.assign(static_cast<size_t>(n), 0.0f);
    if (b.size_kind() == fb::SizeKind::Shard) {
      const Group &g = group(static_cast<int64_t>(b.group()));
      int64_t s = layout_.buffers[x].elements;
      MD_ASSIGN_OR_RETURN(Buffer tmp, backend_.allocate(s * g.size() * 4));
      MD_RETURN_IF_ERROR(backend_.synchronize(kComputeStream));
      MD_RETURN_IF_ERROR(
          comm_.allGather(ptrs_[x], tmp.data(), s, DType::f32, g));
      MD_RETURN_IF_ERROR(
          backend_.copy(host.data(), tmp.data(), n * 4, kCommStream));
      MD_RETURN_IF_ERROR(backend_.synchronize(kCommStream));
    } else {
      MD_RETURN_IF_ERROR(toHost(host.data(), x, 0, n * 4));
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
    if (param->trainable() && param->offset() >= 0 && param->unit() >= 0 &&
        units[param->unit()]) {
      const std::vector<float> &u = *units[param->unit()];
      t.values.assign(u.begin() + param->offset(),
                      u.begin() + param->offset() + numel);
    } else {
      // Frozen parameters never change: their initial values.
      t.values.resize(static_cast<size_t>(numel));
      for (int64_t e = 0; e < numel; ++e)
        t.values[e] = static_cast<float>(initValue(p, e));
    }
    out.push_back(std::move(t));
  }
  return out;
}

absl::Status Executor::Impl::saveFull(const std::string &path) {
  MD_ASSIGN_OR_RETURN(std::vector<NamedTensor> params, gatherParameters());
  if (options_.rank != 0)
    return absl::OkStatus();
  std::map<std::string, std::string> meta = {
      {"format", "pt"},
      {"model", str(plan_.header()->model())},
      {"plan", str(plan_.header()->plan_name())},
      {"step", absl::StrCat(step_)},
      {"world_size", absl::StrCat(world_.worldSize)}};
  MD_RETURN_IF_ERROR(WriteFullCheckpoint(path, params, meta));
  if (options_.observer)
    options_.observer->onSave(step_, path);
  return absl::OkStatus();
}

absl::Status Executor::Impl::saveSharded(const std::string &dir) {
  const Group &world = group(0);
  std::string tmp = dir + ".tmp";
  if (options_.rank == 0)
    MD_RETURN_IF_ERROR(MakeDirectories(tmp));
  MD_RETURN_IF_ERROR(comm_.barrier(world));
  std::vector<SafetensorsTensor> tensors;
  for (uint32_t i = 0; i < count(plan_.buffers()); ++i) {
    int32_t x = static_cast<int32_t>(i);
    if (layout_.buffers[x].placement != Placement::Persistent)
      continue;
    SafetensorsTensor t;
    t.name = str(buf(x).name());
    if (t.name.empty())
      t.name = absl::StrCat("buffer.", x);
    t.dtype = SafetensorsDType(buf(x).dtype());
    t.shape = {layout_.buffers[x].elements};
    MD_ASSIGN_OR_RETURN(t.data, readBuffer(x));
    tensors.push_back(std::move(t));
  }
  std::map<std::string, std::string> meta = {
      {"rank", absl::StrCat(options_.rank)},
      {"world_size", absl::StrCat(world_.worldSize)},
      {"step", absl::StrCat(step_)},
      {"epoch", absl::StrCat(epoch_)}};
  MD_RETURN_IF_ERROR(
      WriteSafetensors(ShardFileName(tmp, options_.rank), tensors, meta));
  MD_RETURN_IF_ERROR(comm_.barrier(world));
  if (options_.rank == 0) {
    ShardedCheckpointInfo info;
    info.model = str(plan_.header()->model());
    info.plan = str(plan_.header()->plan_name());
    info.worldSize = world_.worldSize;
    info.shardGroupSize = world_.shardGroupSize;
    info.step = step_;
    info.epoch = epoch_;
    info.seed = static_cast<int64_t>(seed_);
    std::string json = ShardedCheckpointMeta(info);
    MD_RETURN_IF_ERROR(WriteFileAtomically(tmp + "/meta.json", [&](int fd) {
      return WriteAll(fd, json.data(), json.size());
    }));
    MD_RETURN_IF_ERROR(PublishShardedCheckpoint(tmp, dir));
    if (options_.observer)
      options_.observer->onSave(step_, dir);
  }
  return comm_.barrier(world);
}

absl::Status Executor::Impl::save(const fb::Instruction &inst) {
  auto format = static_cast<fb::CheckpointFormat>(inst.ints()->Get(0));
  std::string dir =
      count(inst.strings()) > 0 ? str(inst.strings()->Get(0)) : "";
  std::string path = CheckpointPath(dir, format, step_);
  if (format == fb::CheckpointFormat::Full)
    return saveFull(path);
  return saveSharded(path);
}

} // namespace md::runtime
