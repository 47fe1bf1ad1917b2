//===- NcclArgs.cpp - collective argument checks and NCCL type mapping ----===//

#include "runtime/nccl/NcclArgs.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace md::nccl {

using namespace md::runtime;

absl::StatusOr<ncclDataType_t> toNcclDataType(DType dtype) {
  switch (dtype) {
  case DType::f32:
    return ncclFloat32;
  case DType::bf16:
    return ncclBfloat16;
  case DType::f16:
    return ncclFloat16;
  case DType::i32:
    return ncclInt32;
  case DType::i64:
    return ncclInt64;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "element type %d has no NCCL equivalent", static_cast<int>(dtype)));
}

absl::StatusOr<ncclRedOp_t> toNcclRedOp(ReduceOp op) {
  switch (op) {
  case ReduceOp::sum:
    return ncclSum;
  case ReduceOp::avg:
    return ncclAvg;
  case ReduceOp::max:
    return ncclMax;
  case ReduceOp::min:
    return ncclMin;
  case ReduceOp::prod:
    return ncclProd;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "reduction %d has no NCCL equivalent", static_cast<int>(op)));
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
