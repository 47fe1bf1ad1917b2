//===- StagedComm.cpp - device collectives staged through pinned host memory
//-===//

#include "runtime/nccl/StagedComm.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "absl/strings/str_format.h"
#include "runtime/core/Status.h"
#include "runtime/cuda/Device.h"
#include "runtime/nccl/NcclArgs.h"

namespace md::nccl {

using namespace md::runtime;

namespace {
int64_t roundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }
} // namespace

StagedComm::StagedComm(std::unique_ptr<Comm> host, cuda::CudaBackend &backend)
    : host_(std::move(host)), backend_(backend) {}

StagedComm::~StagedComm() {
  if (staging_ == nullptr)
    return;
  // A copy out of the staging memory may still be queued.
  (void)backend_.synchronize(kCommStream);
  (void)cudaFreeHost(staging_);
}

absl::Status StagedComm::reserve(int64_t bytes) {
  if (bytes <= stagingBytes_)
    return absl::OkStatus();
  const int64_t grown = std::max({bytes, 2 * stagingBytes_, int64_t(1) << 16});
  if (staging_ != nullptr) {
    MD_RETURN_IF_ERROR(backend_.synchronize(kCommStream));
    (void)cudaFreeHost(staging_);
    staging_ = nullptr;
    stagingBytes_ = 0;
  }
  void *p = nullptr;
  MD_RETURN_IF_ERROR(cuda::cudaStatus(
      cudaHostAlloc(&p, size_t(grown), cudaHostAllocDefault),
      absl::StrFormat("shm-staged: cudaHostAlloc of %d bytes", grown).c_str()));
  staging_ = static_cast<char *>(p);
  stagingBytes_ = grown;
  return absl::OkStatus();
}

absl::Status StagedComm::run(const CollectiveArgs &args, const Group &group) {
  MD_ASSIGN_OR_RETURN(Group mine, host_->group(group.kind));
  MD_RETURN_IF_ERROR(checkCollective(name(), args, group, mine));
  const int n = group.size();
  const int64_t es = dtypeSize(args.dtype);
  const int64_t sendBytes = sendElements(args, n) * es;
  const int64_t recvBytes = recvElements(args, n) * es;
  const char *op = collectiveName(args.kind);
  if (sendBytes > INT64_MAX / 4 || recvBytes > INT64_MAX / 4)
    return absl::ResourceExhaustedError(
        absl::StrFormat("shm-staged: %s: %d + %d bytes cannot be staged", op,
                        sendBytes, recvBytes));
  const int64_t recvOffset = roundUp(sendBytes, kAllocAlignment);
  const bool readsSend =
      args.kind != Collective::broadcast || group.index == args.root;
  MD_RETURN_IF_ERROR(reserve(recvOffset + recvBytes));
  char *hostSend = staging_, *hostRecv = staging_ + recvOffset;
  auto stream = static_cast<cudaStream_t>(backend_.nativeStream(kCommStream));

  if (readsSend && sendBytes > 0)
    MD_RETURN_IF_ERROR(cuda::cudaStatus(
        cudaMemcpyAsync(hostSend, args.send, size_t(sendBytes),
                        cudaMemcpyDefault, stream),
        absl::StrFormat("shm-staged: %s: cudaMemcpyAsync to the host", op)
            .c_str()));
  // Also waits for the previous collective's copy out of hostRecv.
  MD_RETURN_IF_ERROR(backend_.synchronize(kCommStream));

  if (args.kind == Collective::barrier)
    return host_->barrier(group);
  CollectiveArgs onHost = args;
  onHost.send = readsSend ? hostSend : nullptr;
  onHost.recv = hostRecv;
  MD_RETURN_IF_ERROR(runCollective(*host_, onHost, group));

  if (recvBytes > 0)
    MD_RETURN_IF_ERROR(cuda::cudaStatus(
        cudaMemcpyAsync(args.recv, hostRecv, size_t(recvBytes),
                        cudaMemcpyDefault, stream),
        absl::StrFormat("shm-staged: %s: cudaMemcpyAsync to the device", op)
            .c_str()));
  return absl::OkStatus();
}

} // namespace md::nccl
