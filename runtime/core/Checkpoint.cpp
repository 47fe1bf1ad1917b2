//===- Checkpoint.cpp - the files of md's checkpoints ---------------------===//
//
// Names, contents and the atomic publication of full and sharded
// checkpoints (Checkpoint.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Checkpoint.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "runtime/core/Safetensors.h"
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

const char *SafetensorsDType(fb::DType t) {
  switch (t) {
  case fb::DType::F32:
    return "F32";
  case fb::DType::BF16:
    return "BF16";
  case fb::DType::F16:
    return "F16";
  case fb::DType::I32:
    return "I32";
  case fb::DType::I64:
    return "I64";
  case fb::DType::F64:
    return "F64";
  case fb::DType::Bool:
    return "BOOL";
  default:
    return "?";
  }
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

std::string ShardedCheckpointMeta(const ShardedCheckpointInfo &info) {
  return absl::StrFormat(
      "{\"format\": \"md-sharded\", \"version\": 1, \"model\": %s, \"plan\": "
      "%s, "
      "\"world_size\": %d, \"shard_group_size\": %d, \"step\": %d, "
      "\"epoch\": %d, "
      "\"seed\": %d}\n",
      JsonQuote(info.model), JsonQuote(info.plan), info.worldSize,
      info.shardGroupSize, info.step, info.epoch, info.seed);
}

absl::Status PublishShardedCheckpoint(const std::string &tmp,
                                      const std::string &dir) {
  // Replace an older checkpoint of the same step, then publish.
  if (::access(dir.c_str(), F_OK) == 0) {
    for (int r = 0;; ++r) {
      std::string f = ShardFileName(dir, r);
      if (::unlink(f.c_str()) != 0)
        break;
    }
    ::unlink((dir + "/meta.json").c_str());
    if (::rmdir(dir.c_str()) != 0)
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: exists and holds other files; not replacing it", dir));
  }
  if (::rename(tmp.c_str(), dir.c_str()) != 0)
    return absl::InternalError(absl::StrFormat("%s: cannot rename %s: %s", dir,
                                               tmp, std::strerror(errno)));
  size_t slash = dir.find_last_of('/');
  return SyncDirectory(slash == std::string::npos ? "." : dir.substr(0, slash));
}

} // namespace md::runtime
