//===- CommThread.cpp - the CPU backend's comm stream on a thread ---------===//
//
// The queue, the events and the stream-ordered comm of CommThread.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CommThread.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "runtime/core/BackendChecks.h"
#include "runtime/core/Status.h"

namespace md::cpu {

using namespace md::runtime;

CommThreadBackend::CommThreadBackend(std::unique_ptr<CpuBackend> cpu)
    : cpu_(std::move(cpu)), thread_([this] { loop(); }) {}

CommThreadBackend::~CommThreadBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  queued_.notify_one();
  thread_.join();
}

void CommThreadBackend::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    queued_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty())
      return; // stopping, and everything queued has run
    std::function<absl::Status()> work = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    // An exception would end the process from this thread: a Status.
    absl::Status s =
        StatusOfCall(work, [] { return "the comm thread's work"; });
    lock.lock();
    busy_ = false;
    if (!s.ok() && failed_.ok()) {
      failed_ = std::move(s);
      queue_.clear(); // what follows may depend on what failed
    }
    ran_.notify_all();
  }
}

absl::Status CommThreadBackend::enqueue(std::function<absl::Status()> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok())
      return failed_;
    queue_.push_back(std::move(work));
  }
  queued_.notify_one();
  return absl::OkStatus();
}

absl::Status CommThreadBackend::copy(void *dst, const void *src, int64_t bytes,
                                     Stream stream) {
  if (stream.id != kCommStream.id)
    return cpu_->copy(dst, src, bytes, stream);
  MD_RETURN_IF_ERROR(checkCopy("cpu backend", dst, src, bytes));
  return enqueue([this, dst, src, bytes] {
    return cpu_->copy(dst, src, bytes, kComputeStream);
  });
}

absl::Status CommThreadBackend::zero(void *dst, int64_t bytes, Stream stream) {
  if (stream.id != kCommStream.id)
    return cpu_->zero(dst, bytes, stream);
  MD_RETURN_IF_ERROR(checkZero("cpu backend", dst, bytes));
  return enqueue(
      [this, dst, bytes] { return cpu_->zero(dst, bytes, kComputeStream); });
}

absl::StatusOr<Event> CommThreadBackend::createEvent() {
  MD_ASSIGN_OR_RETURN(Event e, cpu_->createEvent());
  std::lock_guard<std::mutex> lock(mu_);
  recorded_.resize(e.id + 1, 0);
  reached_.resize(e.id + 1, 0);
  return e;
}

absl::Status CommThreadBackend::checkEvent(Stream stream, Event event) {
  MD_RETURN_IF_ERROR(checkStreamId("cpu backend", stream, numStreams()));
  return checkEventId("cpu backend", event, static_cast<int>(recorded_.size()));
}

absl::Status CommThreadBackend::recordEvent(Stream stream, Event event) {
  MD_RETURN_IF_ERROR(checkEvent(stream, event));
  const uint64_t n = ++recorded_[event.id];
  auto reach = [this, id = event.id, n] {
    reached_[id] = std::max(reached_[id], n);
  };
  if (stream.id == kCommStream.id)
    return enqueue([this, reach] {
      std::lock_guard<std::mutex> lock(mu_);
      reach();
      return absl::OkStatus();
    });
  // The compute stream's work so far has run: the record is reached now.
  std::lock_guard<std::mutex> lock(mu_);
  reach();
  return absl::OkStatus();
}

absl::Status CommThreadBackend::waitEvent(Stream stream, Event event) {
  MD_RETURN_IF_ERROR(checkEvent(stream, event));
  // The comm stream only holds work queued after the compute it depends on
  // ran, and its own records come before it in the queue: nothing to wait
  // for. The compute stream is the host, which waits here.
  if (stream.id == kCommStream.id)
    return absl::OkStatus();
  const uint64_t n = recorded_[event.id];
  std::unique_lock<std::mutex> lock(mu_);
  ran_.wait(lock, [&] { return reached_[event.id] >= n || !failed_.ok(); });
  return failed_;
}

absl::Status CommThreadBackend::synchronize(Stream stream) {
  MD_RETURN_IF_ERROR(checkStreamId("cpu backend", stream, numStreams()));
  std::unique_lock<std::mutex> lock(mu_);
  if (stream.id == kCommStream.id)
    ran_.wait(lock, [&] { return queue_.empty() && !busy_; });
  return failed_;
}

CommThreadComm::CommThreadComm(std::unique_ptr<Comm> host,
                               CommThreadBackend &backend,
                               FlightRecorder *recorder)
    : host_(std::move(host)), backend_(backend), recorder_(recorder) {}

CommThreadComm::~CommThreadComm() { (void)backend_.synchronize(kCommStream); }

absl::Status CommThreadComm::run(const CollectiveArgs &args,
                                 const Group &group) {
  // The entry the executor just began for this collective, if any (a
  // collective it runs outside the recorder has none).
  uint64_t seq = recorder_ != nullptr ? recorder_->claim() : 0;
  return backend_.enqueue([this, args, g = group, seq] {
    if (seq != 0)
      recorder_->start(seq);
    absl::Status s = runCollective(*host_, args, g);
    if (seq != 0)
      recorder_->end(seq,
                     s.ok() ? FlightState::Completed : FlightState::Failed);
    return s;
  });
}

} // namespace md::cpu
