//===- CommThread.h - the CPU backend's comm stream on a thread -*- C++ -*-===//
//
// The CPU backend runs every call to completion on the calling thread, so a
// plan's collectives wait for the compute before them and the compute waits
// for them: DDP's all-reduce of a bucket runs after the whole backward
// instead of beside it. The plan already says what may overlap: it puts the
// collectives on the comm stream and orders the two streams with events
// (docs/runtime.md "Streams and events"), and the executor proves, on a
// backend whose streams run concurrently, that the events order every
// cross-stream conflict on the arena's bytes (runtime/exec/StreamOrder.h).
//
// CommThreadBackend is that backend on the CPU: the compute stream runs on
// the calling thread as before, the comm stream on a thread of its own that
// takes the stream's work (copies, zeroing, kernels, CommThreadComm's
// collectives) in the order it was queued. Events follow CUDA's rules: a
// record marks the work queued on its stream so far, a wait holds the
// waiting stream until that work is done. Compute runs before its call
// returns, so a compute record is complete at once and the comm stream
// never has to wait (its queue only holds work queued after the compute it
// depends on has run); the host waits when the compute stream waits for a
// comm record, and on synchronize(comm).
//
// Bits do not change: the kernels and collectives are the same calls on
// the same bytes, and the stream-order proof says no byte is written by one
// stream while the other reads or writes it without an event between them
// (and an event wait is a mutex hand-off, so the two threads never race).
//
// An error on the comm thread (a collective's, a peer gone) is kept: later
// work queued on the comm stream is dropped, and the next synchronize,
// compute-stream wait or comm-stream call returns it.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CPU_COMMTHREAD_H
#define MD_RUNTIME_CPU_COMMTHREAD_H

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/core/Backend.h"
#include "runtime/core/CollectiveComm.h"
#include "runtime/core/FlightRecorder.h"
#include "runtime/cpu/CpuBackend.h"

namespace md::cpu {

class CommThreadBackend final : public runtime::Backend {
public:
  /// Runs `cpu`'s kernels: compute-stream calls on the caller, comm-stream
  /// calls on the comm thread, which starts now.
  explicit CommThreadBackend(std::unique_ptr<CpuBackend> cpu);
  /// Runs what is still queued, then stops the comm thread.
  ~CommThreadBackend() override;
  CommThreadBackend(const CommThreadBackend &) = delete;
  CommThreadBackend &operator=(const CommThreadBackend &) = delete;

  CpuBackend &cpu() { return *cpu_; }

  const char *name() const override { return "cpu"; }
  absl::StatusOr<runtime::Buffer> allocate(int64_t bytes) override {
    return cpu_->allocate(bytes);
  }

  int numStreams() const override { return 2; }
  /// True: the executor checks that the plan's events order its streams.
  bool concurrentStreams() const override { return true; }
  // copy, zero, createEvent, recordEvent, waitEvent, synchronize.
  MD_BACKEND_STREAM_OVERRIDES

  // A kernel on the comm stream is queued with a copy of its arguments.
#define MD_BACKEND_OP(entry, Args)                                             \
  absl::Status entry(const runtime::Args &args) override {                     \
    if (args.stream.id != runtime::kCommStream.id)                             \
      return cpu_->entry(args);                                                \
    return enqueue([this, a = args] { return cpu_->entry(a); });               \
  }
#include "runtime/core/BackendOps.def"

  /// Queues `work` on the comm stream (CommThreadComm's collectives). Its
  /// error, if any, fails the stream. Returns the stream's error if it has
  /// already failed.
  absl::Status enqueue(std::function<absl::Status()> work);

private:
  void loop();
  absl::Status checkEvent(runtime::Stream stream, runtime::Event event);

  std::unique_ptr<CpuBackend> cpu_;

  std::mutex mu_;
  std::condition_variable queued_; // work for the comm thread, or stop_
  std::condition_variable ran_;    // the comm thread finished some work
  std::deque<std::function<absl::Status()>> queue_;
  bool busy_ = false; // the comm thread is running an item
  bool stop_ = false;
  absl::Status failed_;
  /// Per event: how many times the host recorded it (host thread only),
  /// and how many of those records have been reached (under mu_).
  std::vector<uint64_t> recorded_;
  std::vector<uint64_t> reached_;

  std::thread thread_; // last: starts once the members above exist
};

/// A host comm (shm, gloo) made stream-ordered: each collective is queued
/// on the backend's comm stream, behind the plan's waits, and the call
/// returns at once, as a NCCL collective does. The host comm is then used
/// by the comm thread alone.
///
/// With a flight recorder, each collective claims the entry the executor
/// began for it (Queued) and the comm thread stamps it Started when it
/// starts the collective and Completed or Failed when it returns, so the
/// ring says exactly which collective the rank is in. A collective the
/// stream refuses (it failed before) stays Queued: it never started.
class CommThreadComm final : public runtime::CollectiveComm {
public:
  /// `recorder` (may be null) is the rank's flight recorder, the one the
  /// executor files collectives in; it must outlive this comm.
  CommThreadComm(std::unique_ptr<runtime::Comm> host,
                 CommThreadBackend &backend,
                 runtime::FlightRecorder *recorder = nullptr);
  /// Waits for the collectives still queued (they use the host comm).
  ~CommThreadComm() override;

  const char *name() const override { return host_->name(); }
  int rank() const override { return host_->rank(); }
  int worldSize() const override { return host_->worldSize(); }
  absl::StatusOr<runtime::Group> group(runtime::GroupKind kind) const override {
    return host_->group(kind);
  }
  bool streamOrdered() const override { return true; }

private:
  absl::Status run(const runtime::CollectiveArgs &args,
                   const runtime::Group &group) override;

  std::unique_ptr<runtime::Comm> host_;
  CommThreadBackend &backend_;
  runtime::FlightRecorder *recorder_;
};

} // namespace md::cpu

#endif // MD_RUNTIME_CPU_COMMTHREAD_H
