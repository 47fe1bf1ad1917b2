//===- NcclArgs.cpp - collective argument checks and NCCL type mapping ----===//

#include "runtime/nccl/NcclArgs.h"

#include <climits>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace md::nccl {

using namespace md::runtime;

namespace {

// NCCL's value for each md value, in the md enum's order (as EnumNames.h
// orders names); the static_asserts keep each table as long as its enum.
constexpr ncclDataType_t kNcclDataTypes[] = {ncclFloat32, ncclBfloat16,
                                             ncclFloat16, ncclInt32, ncclInt64};
static_assert(std::size(kNcclDataTypes) == size_t(DType::i64) + 1);
constexpr ncclRedOp_t kNcclRedOps[] = {ncclSum, ncclAvg, ncclMax, ncclMin,
                                       ncclProd};
static_assert(std::size(kNcclRedOps) == size_t(ReduceOp::prod) + 1);

/// table[value]; InvalidArgument "<what> <value> has no NCCL equivalent"
/// for a value past it.
template <typename To, size_t N, typename From>
absl::StatusOr<To> toNccl(const To (&table)[N], From value, const char *what) {
  auto index = static_cast<size_t>(value);
  if (index < N)
    return table[index];
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s %d has no NCCL equivalent", what, static_cast<int>(value)));
}

} // namespace

absl::StatusOr<ncclDataType_t> toNcclDataType(DType dtype) {
  return toNccl(kNcclDataTypes, dtype, "element type");
}

absl::StatusOr<ncclRedOp_t> toNcclRedOp(ReduceOp op) {
  return toNccl(kNcclRedOps, op, "reduction");
}

std::string ncclVersionName(int code) {
  int major, minor, patch;
  if (code >= 10000) {
    major = code / 10000;
    minor = code % 10000 / 100;
  } else {
    major = code / 1000;
    minor = code % 1000 / 100;
  }
  patch = code % 100;
  return absl::StrFormat("NCCL %d.%d.%d", major, minor, patch);
}

std::string groupName(const Group &group) {
  const std::vector<int> &r = group.ranks;
  bool consecutive = r.size() > 2;
  for (size_t i = 1; consecutive && i < r.size(); ++i)
    consecutive = r[i] == r[i - 1] + 1;
  if (consecutive)
    return absl::StrFormat("%s [%d..%d]", groupKindName(group.kind), r.front(),
                           r.back());
  return group.str();
}

absl::Status checkCollective(const char *comm, const CollectiveArgs &args,
                             const Group &group, const Group &mine) {
  const char *op = collectiveName(args.kind);
  auto invalid = [&](const std::string &what) {
    return absl::InvalidArgumentError(absl::StrCat(comm, ": ", op, ": ", what));
  };
  if (group.kind != mine.kind || group.ranks != mine.ranks ||
      group.index != mine.index)
    return invalid(absl::StrFormat(
        "group %s (index %d) is not this rank's %s group %s (index %d)",
        group.str(), group.index, groupKindName(mine.kind), mine.str(),
        mine.index));
  if (args.kind == Collective::barrier)
    return absl::OkStatus();
  if (absl::StatusOr<ncclDataType_t> t = toNcclDataType(args.dtype); !t.ok())
    return invalid(std::string(t.status().message()));
  if (args.kind == Collective::all_reduce ||
      args.kind == Collective::reduce_scatter)
    if (absl::StatusOr<ncclRedOp_t> r = toNcclRedOp(args.op); !r.ok())
      return invalid(std::string(r.status().message()));
  const int64_t es = dtypeSize(args.dtype);
  const int n = group.size();
  if (args.count < 0 || args.count > INT64_MAX / (es * n))
    return invalid(absl::StrFormat("bad element count %d for a group of %d",
                                   args.count, n));
  if (args.kind == Collective::broadcast && (args.root < 0 || args.root >= n))
    return invalid(absl::StrFormat("root %d is not an index of group %s",
                                   args.root, group.str()));
  const bool readsSend =
      args.kind != Collective::broadcast || group.index == args.root;
  if (args.count > 0 &&
      ((readsSend && args.send == nullptr) || args.recv == nullptr))
    return invalid(absl::StrFormat("null buffer for %d elements", args.count));
  return absl::OkStatus();
}

} // namespace md::nccl
