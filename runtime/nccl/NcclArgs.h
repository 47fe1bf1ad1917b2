//===- NcclArgs.h - collective arguments, checked and mapped to NCCL -*- C++
//-*-===//
//
// What NcclComm and StagedComm decide before they touch a device: whether a
// collective's arguments are wrong on this rank alone (InvalidArgument,
// without calling NCCL or copying anything), how md's element types and
// reductions map to NCCL's, and how a collective and its group are named in
// error messages. Everything here is host code with no CUDA or NCCL call,
// so it is tested on machines without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_NCCL_NCCLARGS_H
#define MD_RUNTIME_NCCL_NCCLARGS_H

#include <nccl.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/core/CollectiveComm.h"

namespace md::nccl {

using runtime::Collective;
using runtime::CollectiveArgs;

/// f32, bf16, f16, i32, i64 as ncclFloat32, ncclBfloat16, ncclFloat16,
/// ncclInt32, ncclInt64; InvalidArgument for a value outside DType.
absl::StatusOr<ncclDataType_t> toNcclDataType(runtime::DType dtype);
/// sum, avg, max, min, prod as ncclSum, ncclAvg, ncclMax, ncclMin,
/// ncclProd; InvalidArgument for a value outside ReduceOp.
absl::StatusOr<ncclRedOp_t> toNcclRedOp(runtime::ReduceOp op);

/// "NCCL 2.28.9" from an NCCL version code (ncclGetVersion's, or
/// NCCL_VERSION_CODE). Codes of 2.8 and earlier are 1000 * major + 100 *
/// minor + patch, later ones 10000 * major + 100 * minor + patch.
std::string ncclVersionName(int code);

/// "shard [0, 1]", "world [0..7]": a group of more than two consecutive
/// ranks is written as a range.
std::string groupName(const runtime::Group &group);

/// The checks one rank can make alone: `group` is this rank's group of its
/// kind (`mine`, as the comm computes it), the element type and reduction
/// exist, the count is not negative and the buffers' bytes fit in int64,
/// broadcast's root indexes the group, and the buffers are not null when
/// they hold data (broadcast reads `send` only on the root). `comm` starts
/// the message ("nccl: all_reduce: ...").
absl::Status checkCollective(const char *comm, const CollectiveArgs &args,
                             const runtime::Group &group,
                             const runtime::Group &mine);

} // namespace md::nccl

#endif // MD_RUNTIME_NCCL_NCCLARGS_H
