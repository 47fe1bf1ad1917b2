//===- Comm.cpp - groups of the mesh and shard arithmetic -----------------===//

#include "runtime/core/Comm.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/core/EnumNames.h"

namespace md::runtime {

Comm::~Comm() = default;

constexpr const char *kReduceOpNames[] = {"sum", "avg", "max", "min", "prod"};
static_assert(namesEveryValue(kReduceOpNames, ReduceOp::prod));
constexpr const char *kCollectiveNames[] = {
    "all_gather", "reduce_scatter", "all_reduce", "broadcast", "barrier"};
static_assert(namesEveryValue(kCollectiveNames, Collective::barrier));
constexpr const char *kGroupKindNames[] = {"world", "shard", "replicate"};
static_assert(namesEveryValue(kGroupKindNames, GroupKind::replicate));

const char *reduceOpName(ReduceOp op) { return enumName(kReduceOpNames, op); }
const char *collectiveName(Collective c) {
  return enumName(kCollectiveNames, c);
}
const char *groupKindName(GroupKind kind) {
  return enumName(kGroupKindNames, kind);
}

std::string Group::str() const {
  return absl::StrCat(groupKindName(kind), " [", absl::StrJoin(ranks, ", "),
                      "]");
}

absl::Status checkMesh(const Mesh &mesh) {
  if (mesh.worldSize < 1)
    return absl::InvalidArgumentError(
        absl::StrFormat("world size must be >= 1, got %d", mesh.worldSize));
  // A shard group of 0 ranks would be Mesh.h's "no hybrid group".
  if (mesh.shardSize < 1 ||
      !md::mesh::groupSizes(mesh.worldSize, mesh.shardSize))
    return absl::InvalidArgumentError(
        absl::StrFormat("shard group size %d does not divide world size %d",
                        mesh.shardSize, mesh.worldSize));
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
  // checkMesh accepted the mesh, so it has group sizes.
  const int replicas =
      static_cast<int>(md::mesh::groupSizes(mesh.worldSize, s)->replicate);
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
    for (int j = 0; j < replicas; ++j)
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

namespace {

CollectiveDesc makeDesc(Collective c, DType dtype, int64_t count) {
  CollectiveDesc d;
  d.collective = uint32_t(c);
  d.dtype = uint32_t(dtype);
  d.count = count;
  return d;
}

} // namespace

CollectiveDesc CollectiveDesc::allGather(DType dtype, int64_t sendCount) {
  return makeDesc(Collective::all_gather, dtype, sendCount);
}

CollectiveDesc CollectiveDesc::reduceScatter(DType dtype, int64_t recvCount,
                                             ReduceOp op) {
  CollectiveDesc d = makeDesc(Collective::reduce_scatter, dtype, recvCount);
  d.reduce = uint32_t(op);
  return d;
}

CollectiveDesc CollectiveDesc::allReduce(DType dtype, int64_t count,
                                         ReduceOp op) {
  CollectiveDesc d = makeDesc(Collective::all_reduce, dtype, count);
  d.reduce = uint32_t(op);
  return d;
}

CollectiveDesc CollectiveDesc::broadcast(DType dtype, int64_t count, int root) {
  CollectiveDesc d = makeDesc(Collective::broadcast, dtype, count);
  d.root = root;
  return d;
}

CollectiveDesc CollectiveDesc::barrier() {
  CollectiveDesc d;
  d.collective = uint32_t(Collective::barrier);
  return d;
}

bool CollectiveDesc::operator==(const CollectiveDesc &o) const {
  return seq == o.seq && collective == o.collective &&
         groupKind == o.groupKind && groupSize == o.groupSize &&
         dtype == o.dtype && reduce == o.reduce && root == o.root &&
         count == o.count;
}

const char *CollectiveDesc::name() const {
  return collective <= uint32_t(Collective::barrier)
             ? collectiveName(Collective(collective))
             : "collective?";
}

std::string CollectiveDesc::args() const {
  const uint32_t c = collective;
  if (c == uint32_t(Collective::barrier))
    return "";
  const char *type =
      dtype <= uint32_t(DType::i64) ? dtypeName(DType(dtype)) : "dtype?";
  std::string s = absl::StrFormat("%s x %d", type, count);
  if (c == uint32_t(Collective::all_reduce) ||
      c == uint32_t(Collective::reduce_scatter))
    absl::StrAppend(&s, ", ", reduceOpName(static_cast<ReduceOp>(reduce)));
  if (c == uint32_t(Collective::broadcast))
    absl::StrAppendFormat(&s, ", root %d", root);
  return s;
}

absl::Status checkCollectiveCall(const char *comm, const Mesh &mesh, int rank,
                                 const Group &group, const CollectiveDesc &call,
                                 const void *send, const void *recv) {
  auto prefixed = [&](const absl::Status &s) {
    return s.ok()
               ? s
               : absl::Status(s.code(), absl::StrCat(comm, ": ", s.message()));
  };
  const char *op = call.name();
  if (absl::Status s = checkOwnGroup(mesh, rank, group, op); !s.ok())
    return prefixed(s);
  const auto c = static_cast<Collective>(call.collective);
  if (c == Collective::barrier)
    return absl::OkStatus();
  if (c == Collective::broadcast &&
      (call.root < 0 || call.root >= group.size()))
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: broadcast: root %d is not an index of group %s",
                        comm, call.root, group.str()));
  const bool readsSend = c != Collective::broadcast || group.index == call.root;
  return prefixed(checkCollectiveBuffers(op, static_cast<DType>(call.dtype),
                                         call.count, group.size(),
                                         readsSend ? send : recv, recv));
}

} // namespace md::runtime
