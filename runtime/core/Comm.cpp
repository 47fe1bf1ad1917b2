//===- Comm.cpp - groups of the mesh and shard arithmetic -----------------===//

#include "runtime/core/Comm.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace md::runtime {

Comm::~Comm() = default;

const char *reduceOpName(ReduceOp op) {
  switch (op) {
  case ReduceOp::sum:
    return "sum";
  case ReduceOp::avg:
    return "avg";
  case ReduceOp::max:
    return "max";
  case ReduceOp::min:
    return "min";
  case ReduceOp::prod:
    return "prod";
  }
  return "?";
}

const char *collectiveName(Collective c) {
  switch (c) {
  case Collective::all_gather:
    return "all_gather";
  case Collective::reduce_scatter:
    return "reduce_scatter";
  case Collective::all_reduce:
    return "all_reduce";
  case Collective::broadcast:
    return "broadcast";
  case Collective::barrier:
    return "barrier";
  }
  return "?";
}

const char *groupKindName(GroupKind kind) {
  switch (kind) {
  case GroupKind::world:
    return "world";
  case GroupKind::shard:
    return "shard";
  case GroupKind::replicate:
    return "replicate";
  }
  return "?";
}

std::string Group::str() const {
  return absl::StrCat(groupKindName(kind), " [", absl::StrJoin(ranks, ", "),
                      "]");
}

absl::Status checkMesh(const Mesh &mesh) {
  if (mesh.worldSize < 1)
    return absl::InvalidArgumentError(
        absl::StrFormat("world size must be >= 1, got %d", mesh.worldSize));
  if (mesh.shardSize < 1 || mesh.worldSize % mesh.shardSize != 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "shard group size %d does not divide world size %d", mesh.shardSize,
        mesh.worldSize));
  return absl::OkStatus();
}

absl::StatusOr<Group> meshGroup(const Mesh &mesh, GroupKind kind, int rank) {
  if (absl::Status s = checkMesh(mesh); !s.ok())
    return s;
  if (rank < 0 || rank >= mesh.worldSize)
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank %d is out of range for world size %d", rank, mesh.worldSize));
  Group g;
  g.kind = kind;
  const int s = mesh.shardSize;
  switch (kind) {
  case GroupKind::world:
    for (int r = 0; r < mesh.worldSize; ++r)
      g.ranks.push_back(r);
    g.index = rank;
    break;
  case GroupKind::shard:
    for (int i = 0; i < s; ++i)
      g.ranks.push_back(rank / s * s + i);
    g.index = rank % s;
    break;
  case GroupKind::replicate:
    for (int j = 0; j < mesh.worldSize / s; ++j)
      g.ranks.push_back(rank % s + j * s);
    g.index = rank / s;
    break;
  default:
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown group kind %d", static_cast<int>(kind)));
  }
  return g;
}

absl::Status checkOwnGroup(const Mesh &mesh, int rank, const Group &group,
                           const char *op) {
  int kind = static_cast<int>(group.kind);
  if (kind < 0 || kind > 2)
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: unknown group kind %d", op, kind));
  absl::StatusOr<Group> mine = meshGroup(mesh, group.kind, rank);
  if (!mine.ok())
    return mine.status();
  if (group.ranks != mine->ranks || group.index != mine->index)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: group %s (index %d) is not rank %d's %s group %s (index %d)", op,
        group.str(), group.index, rank, groupKindName(group.kind), mine->str(),
        mine->index));
  return absl::OkStatus();
}

absl::Status checkCollectiveBuffers(const char *op, DType dtype, int64_t count,
                                    int groupSize, const void *send,
                                    const void *recv) {
  int64_t es = dtypeSize(dtype);
  if (es == 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: unknown element type %d", op, static_cast<int>(dtype)));
  if (count < 0 || count > INT64_MAX / (es * std::max(groupSize, 1)))
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: bad element count %d", op, count));
  if (count > 0 && (send == nullptr || recv == nullptr))
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: null buffer for %d elements", op, count));
  return absl::OkStatus();
}

int64_t ShardLayout::validNumel(int index) const {
  int64_t begin = shardOffset(index);
  return std::clamp<int64_t>(numel - begin, 0, shardNumel());
}

} // namespace md::runtime
