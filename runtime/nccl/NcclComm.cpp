//===- NcclComm.cpp - NCCL communicators, collectives and the watchdog ----===//
//
// Locks, always taken in this order: ncclMu, pendingMu, errorMu.
//
// Every NCCL call on this comm's communicators is made under one mutex,
// ncclMu: by the executor thread (collectives, and polling their
// enqueueing) and by the watchdog (asynchronous errors, abort). The
// communicators are non-blocking, so no NCCL call holds the mutex for long,
// and ncclCommAbort (always blocking in NCCL) is made by whichever thread
// finds the failure, after it has stored the error: the other thread sees
// the error without waiting for the abort to finish.
//
// Non-blocking NCCL, as this file relies on it (NCCL 2.14 and later):
//  - ncclCommInitRankConfig sets the handle at once and returns
//    ncclInProgress or ncclSuccess; ncclCommGetAsyncError on the handle says
//    when initialisation has finished.
//  - ncclCommSplit marks the parent in progress; the child handle is written
//    by NCCL's thread when the split is done (PyTorch waits the same way:
//    parent state, then the handle, then the child's state).
//  - A collective may return ncclInProgress while NCCL connects peers in
//    the background; its kernels are on the stream only once
//    ncclCommGetAsyncError reports ncclSuccess, so the call waits for that
//    before it records the watchdog's event.
//  - ncclCommFinalize returns ncclInProgress until the communicator is
//    quiescent; ncclCommDestroy and ncclCommAbort block.
//
//===----------------------------------------------------------------------===//

#include "runtime/nccl/NcclComm.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Status.h"
#include "runtime/cuda/Device.h"
#include "runtime/nccl/NcclArgs.h"

namespace md::nccl {

using namespace md::runtime;
using Clock = std::chrono::steady_clock;

static_assert(sizeof(ncclUniqueId) == std::tuple_size<UniqueId>::value,
              "UniqueId must hold exactly an ncclUniqueId");

namespace {

std::string seconds(std::chrono::milliseconds d) {
  return absl::StrFormat("%g s", d.count() / 1000.0);
}

absl::StatusCode codeOf(ncclResult_t r) {
  switch (r) {
  case ncclInvalidArgument:
    return absl::StatusCode::kInvalidArgument;
  case ncclInvalidUsage: // e.g. the ranks called different collectives
    return absl::StatusCode::kFailedPrecondition;
  case ncclSystemError:
  case ncclRemoteError: // a peer died or the network failed
    return absl::StatusCode::kUnavailable;
  default:
    return absl::StatusCode::kInternal;
  }
}

/// "NCCL error in <what>: <ncclGetErrorString> (<ncclGetLastError>)".
absl::Status ncclError(ncclResult_t r, ncclComm_t comm,
                       const std::string &what) {
  std::string text = ncclGetErrorString(r);
  const char *last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0')
    absl::StrAppend(&text, " (", last, ")");
  return absl::Status(
      codeOf(r), absl::StrFormat("nccl: NCCL error in %s: %s", what, text));
}

/// Waiting for something that usually takes microseconds: a few yields,
/// then sleeps growing to 1 ms.
class Backoff {
public:
  void wait() {
    if (polls_++ < 16) {
      sched_yield();
      return;
    }
    std::this_thread::sleep_for(nap_);
    nap_ = std::min(nap_ * 2, std::chrono::microseconds(1000));
  }

private:
  int polls_ = 0;
  std::chrono::microseconds nap_{10};
};

} // namespace

absl::StatusOr<UniqueId> NewUniqueId() {
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
    return ncclError(r, nullptr, "ncclGetUniqueId");
  UniqueId out;
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

std::string NcclVersionString() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess)
    return "NCCL (unknown version)";
  return ncclVersionName(code);
}

//===----------------------------------------------------------------------===//
// State
//===----------------------------------------------------------------------===//

struct NcclComm::Impl {
  NcclCommOptions options;
  Mesh mesh;
  cuda::CudaBackend *backend = nullptr;
  cudaStream_t stream = nullptr;
  Group groups[3];
  bool pollInstalled = false;

  // The communicators this rank owns. NCCL writes shard and replicate from
  // its own thread when a split completes, so they are read atomically.
  ncclComm_t world = nullptr, shard = nullptr, replicate = nullptr;
  ncclConfig_t worldConfig = NCCL_CONFIG_INITIALIZER;
  ncclConfig_t splitConfig = NCCL_CONFIG_INITIALIZER;
  // Per group kind, the communicator its collectives use; null for a
  // single-rank group without one. Set once by create(); used only under
  // ncclMu and while !aborted.
  ncclComm_t commOf[3] = {nullptr, nullptr, nullptr};
  std::string commName[3];  // groupName of each kind, for messages
  float *scratch = nullptr; // barrier's one element
  uint64_t seq[3] = {0, 0, 0};

  std::mutex ncclMu;
  bool aborted = false;   // guarded by ncclMu: the communicators are gone
  bool enqueuing = false; // guarded by ncclMu: a collective awaits NCCL
  // Between beginGroup and endGroup (the executor's thread only): the
  // grouped collectives, watched once ncclGroupEnd has launched them.
  bool grouping = false;
  std::vector<std::pair<ncclComm_t, std::string>> grouped;

  std::atomic<bool> failed{false};
  mutable std::mutex errorMu;
  absl::Status error; // the first failure

  // Collectives enqueued and not yet seen complete, oldest first.
  struct Pending {
    cudaEvent_t done;
    ncclComm_t comm;
    std::string what; // "all_reduce #17 over shard [0, 1]"
    Clock::time_point enqueued;
  };
  std::mutex pendingMu;
  std::deque<Pending> pending;
  std::vector<cudaEvent_t> idleEvents, allEvents;

  std::thread watchdog;
  std::mutex stopMu;
  std::condition_variable stopCv;
  bool stopping = false;

  ~Impl();

  absl::Status status() const {
    if (!failed.load(std::memory_order_acquire))
      return absl::OkStatus();
    std::lock_guard<std::mutex> l(errorMu);
    return error;
  }
  /// Keeps the first failure; returns the one kept.
  absl::Status fail(absl::Status s) {
    std::lock_guard<std::mutex> l(errorMu);
    if (error.ok()) {
      error = std::move(s);
      failed.store(true, std::memory_order_release);
    }
    return error;
  }
  /// Aborts every communicator. ncclMu held.
  void abortAll();
  absl::Status failAndAbort(absl::Status s) {
    s = fail(std::move(s));
    std::lock_guard<std::mutex> l(ncclMu);
    abortAll();
    return s;
  }

  /// Polls `comm` until NCCL is no longer in progress with it or
  /// `deadline` passes (then ncclInProgress).
  absl::StatusOr<ncclResult_t> waitReady(ncclComm_t comm,
                                         Clock::time_point deadline);
  absl::Status initWorld(Clock::time_point deadline);
  absl::Status split(ncclComm_t *child, int color, const Group &group,
                     Clock::time_point deadline);
  absl::Status run(const CollectiveArgs &args, const Group &group);
  absl::Status watch(ncclComm_t comm, std::string what);
  void watchdogMain();
  absl::Status checkAsyncErrors();
  absl::Status checkPending(Clock::time_point &lastDone);
  void teardown();
};

void NcclComm::Impl::abortAll() {
  if (aborted)
    return;
  aborted = true;
  // The world first: aborting it also ends a split still running, after
  // which NCCL no longer writes the child handles.
  if (world)
    (void)ncclCommAbort(world);
  world = nullptr;
  for (ncclComm_t *child : {&shard, &replicate}) {
    ncclComm_t c = __atomic_load_n(child, __ATOMIC_ACQUIRE);
    if (c)
      (void)ncclCommAbort(c);
    *child = nullptr;
  }
}

absl::StatusOr<ncclResult_t>
NcclComm::Impl::waitReady(ncclComm_t comm, Clock::time_point deadline) {
  Backoff backoff;
  for (;;) {
    MD_RETURN_IF_ERROR(status());
    ncclResult_t state = ncclSuccess;
    {
      std::lock_guard<std::mutex> l(ncclMu);
      if (aborted)
        return status();
      if (ncclResult_t r = ncclCommGetAsyncError(comm, &state);
          r != ncclSuccess)
        state = r;
    }
    if (state != ncclInProgress || Clock::now() >= deadline)
      return state;
    backoff.wait();
  }
}

//===----------------------------------------------------------------------===//
// Creation and teardown
//===----------------------------------------------------------------------===//

absl::Status NcclComm::Impl::initWorld(Clock::time_point deadline) {
  ncclUniqueId id;
  std::memcpy(id.internal, options.uniqueId.data(), sizeof id.internal);
  worldConfig.blocking = 0;
  const std::string what = absl::StrFormat(
      "creating the communicator of %s (rank %d)", commName[0], options.rank);
  ncclResult_t r;
  {
    std::lock_guard<std::mutex> l(ncclMu);
    r = ncclCommInitRankConfig(&world, options.worldSize, id, options.rank,
                               &worldConfig);
  }
  if (r != ncclSuccess && r != ncclInProgress)
    return failAndAbort(ncclError(r, world, what));
  if (world == nullptr)
    return fail(absl::InternalError(absl::StrCat(
        "nccl: ", what, ": ncclCommInitRankConfig returned no communicator")));
  MD_ASSIGN_OR_RETURN(ncclResult_t state, waitReady(world, deadline));
  if (state == ncclInProgress)
    return failAndAbort(absl::DeadlineExceededError(absl::StrFormat(
        "nccl: rank %d: the communicator of %s was not ready within %s: a "
        "rank is missing, or the ranks were given different unique ids",
        options.rank, commName[0], seconds(options.timeout))));
  if (state != ncclSuccess)
    return failAndAbort(ncclError(state, world, what));
  return absl::OkStatus();
}

absl::Status NcclComm::Impl::split(ncclComm_t *child, int color,
                                   const Group &group,
                                   Clock::time_point deadline) {
  splitConfig.blocking = 0;
  const std::string what =
      absl::StrFormat("splitting the communicator of %s (rank %d)",
                      groupName(group), options.rank);
  auto timedOut = [&] {
    return failAndAbort(absl::DeadlineExceededError(absl::StrFormat(
        "nccl: rank %d: the communicator of %s was not split off within %s: "
        "a rank is missing or the ranks diverged",
        options.rank, groupName(group), seconds(options.timeout))));
  };
  ncclResult_t r;
  {
    std::lock_guard<std::mutex> l(ncclMu);
    r = ncclCommSplit(world, color, options.rank, child, &splitConfig);
  }
  if (r != ncclSuccess && r != ncclInProgress)
    return failAndAbort(ncclError(r, world, what));
  MD_ASSIGN_OR_RETURN(ncclResult_t state, waitReady(world, deadline));
  if (state == ncclInProgress)
    return timedOut();
  if (state != ncclSuccess)
    return failAndAbort(ncclError(state, world, what));
  Backoff backoff;
  while (__atomic_load_n(child, __ATOMIC_ACQUIRE) == nullptr) {
    if (Clock::now() >= deadline)
      return timedOut();
    backoff.wait();
  }
  MD_ASSIGN_OR_RETURN(
      state, waitReady(__atomic_load_n(child, __ATOMIC_ACQUIRE), deadline));
  if (state == ncclInProgress)
    return timedOut();
  if (state != ncclSuccess)
    return failAndAbort(ncclError(state, *child, what));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<NcclComm>>
NcclComm::create(const NcclCommOptions &options) {
  MD_ASSIGN_OR_RETURN(Mesh mesh,
                      commMesh("nccl", options.rank, options.worldSize,
                               options.shardSize, options.timeout));
  if (options.backend == nullptr)
    return absl::InvalidArgumentError("nccl: no CUDA backend given");

  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->mesh = mesh;
  impl->backend = options.backend;
  impl->stream =
      static_cast<cudaStream_t>(options.backend->nativeStream(kCommStream));
  for (int k = 0; k < 3; ++k) {
    MD_ASSIGN_OR_RETURN(impl->groups[k],
                        meshGroup(mesh, GroupKind(k), options.rank));
    impl->commName[k] = groupName(impl->groups[k]);
  }
  MD_RETURN_IF_ERROR(cuda::cudaStatus(cudaSetDevice(options.backend->device()),
                                      "nccl: cudaSetDevice"));

  const auto deadline = Clock::now() + options.timeout;
  MD_RETURN_IF_ERROR(impl->initWorld(deadline));
  const int w = mesh.worldSize, s = mesh.shardSize, r = options.rank;
  if (s > 1 && s < w) {
    // Same order on every rank: the splits are collective over the world.
    MD_RETURN_IF_ERROR(
        impl->split(&impl->shard, r / s, impl->groups[1], deadline));
    MD_RETURN_IF_ERROR(
        impl->split(&impl->replicate, r % s, impl->groups[2], deadline));
  }
  impl->commOf[0] = impl->world;
  impl->commOf[1] = s == w ? impl->world : s > 1 ? impl->shard : nullptr;
  impl->commOf[2] = s == 1 ? impl->world : s < w ? impl->replicate : nullptr;

  MD_RETURN_IF_ERROR(cuda::cudaStatus(
      cudaMalloc(reinterpret_cast<void **>(&impl->scratch), 256),
      "nccl: cudaMalloc of the barrier's scratch"));
  MD_RETURN_IF_ERROR(
      cuda::cudaStatus(cudaMemset(impl->scratch, 0, 256), "nccl: cudaMemset"));
  for (int i = 0; i < 16; ++i) {
    cudaEvent_t e = nullptr;
    MD_RETURN_IF_ERROR(
        cuda::cudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                         "nccl: cudaEventCreateWithFlags"));
    impl->allEvents.push_back(e);
    impl->idleEvents.push_back(e);
  }

  Impl *raw = impl.get();
  impl->watchdog = std::thread([raw] { raw->watchdogMain(); });
  options.backend->setSyncPoll([raw] { return raw->status(); });
  impl->pollInstalled = true;
  return std::unique_ptr<NcclComm>(new NcclComm(std::move(impl)));
}

NcclComm::NcclComm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NcclComm::~NcclComm() = default;

NcclComm::Impl::~Impl() {
  if (pollInstalled)
    backend->setSyncPoll(nullptr);
  {
    std::lock_guard<std::mutex> l(stopMu);
    stopping = true;
  }
  stopCv.notify_all();
  if (watchdog.joinable())
    watchdog.join();
  bool healthy;
  {
    std::lock_guard<std::mutex> l(ncclMu);
    healthy = !aborted && world != nullptr;
  }
  if (healthy)
    teardown();
  if (scratch)
    (void)cudaFree(scratch);
  for (cudaEvent_t e : allEvents)
    (void)cudaEventDestroy(e);
}

// Drain the comm stream, finalize every communicator, then destroy them;
// anything not done within the timeout aborts them all instead.
void NcclComm::Impl::teardown() {
  const auto deadline = Clock::now() + options.timeout;
  Backoff backoff;
  for (;;) {
    cudaError_t q = cudaStreamQuery(stream);
    if (q != cudaErrorNotReady)
      break;
    if (Clock::now() >= deadline) {
      (void)failAndAbort(absl::DeadlineExceededError(absl::StrFormat(
          "nccl: the comm stream did not drain within %s at teardown",
          seconds(options.timeout))));
      return;
    }
    backoff.wait();
  }
  std::vector<ncclComm_t> comms;
  for (ncclComm_t c : {shard, replicate, world})
    if (c)
      comms.push_back(c);
  for (ncclComm_t c : comms) {
    ncclResult_t r;
    {
      std::lock_guard<std::mutex> l(ncclMu);
      r = ncclCommFinalize(c);
    }
    if (r == ncclInProgress) {
      absl::StatusOr<ncclResult_t> state = waitReady(c, deadline);
      r = state.ok() ? *state : ncclInternalError;
    }
    if (r != ncclSuccess) {
      (void)failAndAbort(ncclError(r, c, "finalizing a communicator"));
      return;
    }
  }
  std::lock_guard<std::mutex> l(ncclMu);
  for (ncclComm_t c : comms)
    (void)ncclCommDestroy(c);
  world = shard = replicate = nullptr;
}

//===----------------------------------------------------------------------===//
// The watchdog
//===----------------------------------------------------------------------===//

void NcclComm::Impl::watchdogMain() {
  (void)cudaSetDevice(backend->device());
  const auto tick = std::clamp<std::chrono::milliseconds>(
      options.timeout / 20, std::chrono::milliseconds(1),
      std::chrono::milliseconds(100));
  Clock::time_point lastDone = Clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> l(stopMu);
      if (stopCv.wait_for(l, tick, [&] { return stopping; }))
        return;
    }
    if (failed.load(std::memory_order_acquire))
      continue; // aborted already: nothing left to watch
    absl::Status s = checkAsyncErrors();
    if (s.ok())
      s = checkPending(lastDone);
    if (!s.ok())
      (void)failAndAbort(std::move(s));
  }
}

// While the executor thread waits for NCCL to enqueue a collective, that
// wait polls the communicator itself.
absl::Status NcclComm::Impl::checkAsyncErrors() {
  std::lock_guard<std::mutex> l(ncclMu);
  if (aborted || enqueuing)
    return absl::OkStatus();
  for (ncclComm_t c : {world, shard, replicate}) {
    if (c == nullptr)
      continue;
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(c, &state); r != ncclSuccess)
      state = r;
    if (state == ncclSuccess || state == ncclInProgress)
      continue;
    // Name the oldest collective on this communicator still in flight.
    std::string what;
    {
      std::lock_guard<std::mutex> p(pendingMu);
      for (const Pending &op : pending)
        if (op.comm == c) {
          what = op.what;
          break;
        }
    }
    if (what.empty())
      what = absl::StrCat("the communicator of ", c == world   ? commName[0]
                                                  : c == shard ? commName[1]
                                                               : commName[2]);
    return ncclError(state, c, what);
  }
  return absl::OkStatus();
}

// Events complete in stream order, so only the oldest can be overdue. Its
// time runs from when it was enqueued or from when the one before it was
// seen complete, whichever is later: a queue of collectives behind a slow
// one does not time out with it.
absl::Status NcclComm::Impl::checkPending(Clock::time_point &lastDone) {
  std::lock_guard<std::mutex> l(pendingMu);
  while (!pending.empty()) {
    Pending &op = pending.front();
    cudaError_t q = cudaEventQuery(op.done);
    const Clock::time_point now = Clock::now();
    if (q == cudaSuccess) {
      idleEvents.push_back(op.done);
      pending.pop_front();
      lastDone = now;
      continue;
    }
    if (q != cudaErrorNotReady)
      return cuda::cudaStatus(
          q, absl::StrFormat("nccl: %s: cudaEventQuery", op.what).c_str());
    if (now - std::max(op.enqueued, lastDone) > options.timeout)
      return absl::DeadlineExceededError(absl::StrFormat(
          "nccl: %s did not complete in %s: a rank is missing or the ranks "
          "diverged",
          op.what, seconds(options.timeout)));
    break;
  }
  return absl::OkStatus();
}

absl::Status NcclComm::Impl::watch(ncclComm_t comm, std::string what) {
  cudaEvent_t e = nullptr;
  {
    std::lock_guard<std::mutex> l(pendingMu);
    if (!idleEvents.empty()) {
      e = idleEvents.back();
      idleEvents.pop_back();
    }
  }
  if (e == nullptr) {
    MD_RETURN_IF_ERROR(cuda::cudaStatus(cudaSetDevice(backend->device()),
                                        "nccl: cudaSetDevice"));
    MD_RETURN_IF_ERROR(
        cuda::cudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                         "nccl: cudaEventCreateWithFlags"));
    std::lock_guard<std::mutex> l(pendingMu);
    allEvents.push_back(e);
  }
  if (cudaError_t r = cudaEventRecord(e, stream); r != cudaSuccess) {
    {
      std::lock_guard<std::mutex> l(pendingMu);
      idleEvents.push_back(e);
    }
    return failAndAbort(cuda::cudaStatus(
        r, absl::StrFormat("nccl: %s: cudaEventRecord", what).c_str()));
  }
  std::lock_guard<std::mutex> l(pendingMu);
  pending.push_back({e, comm, std::move(what), Clock::now()});
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

absl::Status NcclComm::Impl::run(const CollectiveArgs &args,
                                 const Group &group) {
  MD_RETURN_IF_ERROR(status());
  const int k = static_cast<int>(group.kind);
  if (k < 0 || k > 2)
    return absl::InvalidArgumentError(absl::StrFormat(
        "nccl: %s: unknown group kind %d", collectiveName(args.kind), k));
  MD_RETURN_IF_ERROR(checkCollective("nccl", args, group, groups[k]));
  const uint64_t n = ++seq[k];
  std::string what = absl::StrFormat(
      "%s #%d over %s", collectiveName(args.kind), n, groupName(group));
  const bool isBarrier = args.kind == Collective::barrier;
  if (isBarrier && grouping)
    return absl::InvalidArgumentError(
        "nccl: a barrier inside a group of collectives");
  ncclComm_t comm = commOf[k];
  if (comm == nullptr) {
    // A single rank: its result is its input.
    const int64_t bytes = isBarrier ? 0 : args.count * dtypeSize(args.dtype);
    if (bytes > 0 && args.send != args.recv)
      MD_RETURN_IF_ERROR(cuda::cudaStatus(
          cudaMemcpyAsync(args.recv, args.send, size_t(bytes),
                          cudaMemcpyDefault, stream),
          absl::StrFormat("nccl: %s: cudaMemcpyAsync", what).c_str()));
    return absl::OkStatus();
  }

  const ncclDataType_t type =
      isBarrier ? ncclFloat32 : *toNcclDataType(args.dtype);
  const ncclRedOp_t op = args.kind == Collective::all_reduce ||
                                 args.kind == Collective::reduce_scatter
                             ? *toNcclRedOp(args.op)
                             : ncclSum;
  const size_t count = size_t(args.count);
  // NCCL reads send only on broadcast's root; elsewhere it may be null.
  const void *send = args.send != nullptr ? args.send : args.recv;
  const auto deadline = Clock::now() + options.timeout;
  ncclResult_t r = ncclSuccess;
  {
    std::lock_guard<std::mutex> l(ncclMu);
    if (aborted)
      return status();
    switch (args.kind) {
    case Collective::all_gather:
      r = ncclAllGather(send, args.recv, count, type, comm, stream);
      break;
    case Collective::reduce_scatter:
      r = ncclReduceScatter(send, args.recv, count, type, op, comm, stream);
      break;
    case Collective::all_reduce:
      r = ncclAllReduce(send, args.recv, count, type, op, comm, stream);
      break;
    case Collective::broadcast:
      r = ncclBroadcast(send, args.recv, count, type, args.root, comm, stream);
      break;
    case Collective::barrier:
      r = ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, comm,
                        stream);
      break;
    }
    enqueuing = r == ncclInProgress;
  }
  if (grouping && (r == ncclSuccess || r == ncclInProgress)) {
    // Launched by ncclGroupEnd; watched from then on.
    {
      std::lock_guard<std::mutex> l(ncclMu);
      enqueuing = false;
    }
    grouped.push_back({comm, std::move(what)});
    return absl::OkStatus();
  }
  if (r == ncclInProgress) {
    absl::StatusOr<ncclResult_t> state = waitReady(comm, deadline);
    {
      std::lock_guard<std::mutex> l(ncclMu);
      enqueuing = false;
    }
    MD_RETURN_IF_ERROR(state.status());
    if (*state == ncclInProgress)
      return failAndAbort(absl::DeadlineExceededError(absl::StrFormat(
          "nccl: %s was not enqueued within %s: a rank is missing or the "
          "ranks diverged",
          what, seconds(options.timeout))));
    r = *state;
  }
  if (r != ncclSuccess)
    return failAndAbort(ncclError(r, comm, what));
  return watch(comm, std::move(what));
}

//===----------------------------------------------------------------------===//
// The Comm interface
//===----------------------------------------------------------------------===//

int NcclComm::rank() const { return impl_->options.rank; }
int NcclComm::worldSize() const { return impl_->options.worldSize; }

absl::StatusOr<Group> NcclComm::group(GroupKind kind) const {
  return meshGroup(impl_->mesh, kind, impl_->options.rank);
}

absl::Status NcclComm::status() const { return impl_->status(); }

uint64_t NcclComm::sequence(GroupKind kind) const {
  int k = static_cast<int>(kind);
  return k >= 0 && k < 3 ? impl_->seq[k] : 0;
}

// The executor relies on barrier holding the host until every rank has
// arrived (a checkpoint's directory exists before anyone writes into it),
// so the all-reduce is waited for, through the backend's poll.
absl::Status NcclComm::run(const CollectiveArgs &args, const Group &group) {
  MD_RETURN_IF_ERROR(impl_->run(args, group));
  if (args.kind != Collective::barrier ||
      impl_->commOf[static_cast<int>(group.kind)] == nullptr)
    return absl::OkStatus();
  return impl_->backend->synchronize(kCommStream);
}

absl::Status NcclComm::beginGroup() {
  Impl &m = *impl_;
  MD_RETURN_IF_ERROR(m.status());
  if (m.grouping)
    return absl::InvalidArgumentError("nccl: beginGroup inside a group");
  ncclResult_t r;
  {
    std::lock_guard<std::mutex> l(m.ncclMu);
    if (m.aborted)
      return m.status();
    r = ncclGroupStart();
  }
  if (r != ncclSuccess)
    return m.failAndAbort(ncclError(r, m.world, "ncclGroupStart"));
  m.grouping = true;
  m.grouped.clear();
  return absl::OkStatus();
}

absl::Status NcclComm::endGroup() {
  Impl &m = *impl_;
  if (!m.grouping)
    return absl::InvalidArgumentError("nccl: endGroup without beginGroup");
  m.grouping = false;
  std::vector<std::pair<ncclComm_t, std::string>> grouped;
  grouped.swap(m.grouped);
  ncclResult_t r;
  {
    std::lock_guard<std::mutex> l(m.ncclMu);
    if (m.aborted)
      return m.status();
    r = ncclGroupEnd();
    m.enqueuing = r == ncclInProgress;
  }
  std::string what = grouped.empty()
                         ? std::string("an empty group")
                         : absl::StrFormat("the group of %d collectives from %s",
                                           grouped.size(), grouped[0].second);
  if (r == ncclInProgress) {
    // Non-blocking: every communicator of the group finishes launching.
    const auto deadline = Clock::now() + m.options.timeout;
    absl::Status waited;
    for (const auto &[comm, name] : grouped) {
      absl::StatusOr<ncclResult_t> state = m.waitReady(comm, deadline);
      if (!state.ok()) {
        waited = state.status();
        break;
      }
      if (*state == ncclInProgress) {
        waited = m.failAndAbort(absl::DeadlineExceededError(absl::StrFormat(
            "nccl: %s was not enqueued within %s: a rank is missing or the "
            "ranks diverged",
            what, seconds(m.options.timeout))));
        break;
      }
      if (*state != ncclSuccess) {
        waited = m.failAndAbort(ncclError(*state, comm, what));
        break;
      }
    }
    {
      std::lock_guard<std::mutex> l(m.ncclMu);
      m.enqueuing = false;
    }
    MD_RETURN_IF_ERROR(waited);
  } else if (r != ncclSuccess) {
    return m.failAndAbort(ncclError(r, m.world, what));
  }
  for (auto &[comm, name] : grouped)
    MD_RETURN_IF_ERROR(m.watch(comm, std::move(name)));
  return absl::OkStatus();
}

} // namespace md::nccl
