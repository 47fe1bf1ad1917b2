//===- CommThreadTest.cpp - the CPU backend's comm stream on a thread -----===//
//
// cpu::CommThreadBackend and cpu::CommThreadComm (runtime/cpu/CommThread.h):
// comm-stream work runs on another thread in queue order, events and
// synchronize wait for exactly what they should, an error on the comm
// thread fails the stream, and a collective queued through the comm gives
// the host comm's result. ExecutorTest checks that training with the comm
// thread gives the same bits as without.
//
//===----------------------------------------------------------------------===//

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/cpu/CommThread.h"
#include "runtime/shm/ShmComm.h"
#include "gtest/gtest.h"

namespace md::cpu {
namespace {

using runtime::DType;
using runtime::Event;
using runtime::kCommStream;
using runtime::kComputeStream;
using runtime::TensorRef;

std::unique_ptr<CommThreadBackend> makeBackend() {
  return std::make_unique<CommThreadBackend>(std::make_unique<CpuBackend>(1));
}

/// Work that takes a while, so that the host gets ahead of the comm thread.
void slowly() { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

TEST(CommThreadTest, CommWorkRunsInOrderOnAnotherThread) {
  auto be = makeBackend();
  EXPECT_TRUE(be->concurrentStreams());
  const std::thread::id host = std::this_thread::get_id();
  std::vector<int> order;
  std::atomic<bool> elsewhere{true};
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(be->enqueue([&, i] {
                    if (i == 0)
                      slowly();
                    elsewhere = elsewhere && std::this_thread::get_id() != host;
                    order.push_back(i);
                    return absl::OkStatus();
                  }).ok());
  ASSERT_TRUE(be->synchronize(kCommStream).ok());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(elsewhere);
}

TEST(CommThreadTest, TheComputeStreamWaitsForACommRecord) {
  auto be = makeBackend();
  absl::StatusOr<Event> e = be->createEvent();
  ASSERT_TRUE(e.ok());
  std::vector<float> src(1000, 2.0f), dst(1000, 0.0f);
  ASSERT_TRUE(be->enqueue([] {
                  slowly();
                  return absl::OkStatus();
                }).ok());
  ASSERT_TRUE(be->copy(dst.data(), src.data(), 1000 * 4, kCommStream).ok());
  ASSERT_TRUE(be->recordEvent(kCommStream, *e).ok());
  // Not yet copied: the comm thread is still in the slow work.
  EXPECT_EQ(dst[999], 0.0f);
  ASSERT_TRUE(be->waitEvent(kComputeStream, *e).ok());
  EXPECT_EQ(dst[0], 2.0f);
  EXPECT_EQ(dst[999], 2.0f);
  // Recorded again behind more slow work: the wait is for the new record.
  ASSERT_TRUE(be->enqueue([] {
                  slowly();
                  return absl::OkStatus();
                }).ok());
  ASSERT_TRUE(be->zero(dst.data(), 1000 * 4, kCommStream).ok());
  ASSERT_TRUE(be->recordEvent(kCommStream, *e).ok());
  ASSERT_TRUE(be->waitEvent(kComputeStream, *e).ok());
  EXPECT_EQ(dst[999], 0.0f);
}

TEST(CommThreadTest, ComputeRecordsAreCompleteAtOnce) {
  auto be = makeBackend();
  absl::StatusOr<Event> e = be->createEvent();
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(be->recordEvent(kComputeStream, *e).ok());
  ASSERT_TRUE(be->waitEvent(kComputeStream, *e).ok());
  ASSERT_TRUE(be->waitEvent(kCommStream, *e).ok());
  // An event never recorded is complete, as on CUDA.
  absl::StatusOr<Event> never = be->createEvent();
  ASSERT_TRUE(never.ok());
  EXPECT_TRUE(be->waitEvent(kComputeStream, *never).ok());
}

TEST(CommThreadTest, KernelsOnTheCommStreamRunThere) {
  auto be = makeBackend();
  std::vector<float> x(64, 3.0f), y(64, 0.0f), z(64, 0.0f);
  ASSERT_TRUE(be->enqueue([] {
                  slowly();
                  return absl::OkStatus();
                }).ok());
  runtime::ScaleArgs a;
  a.x = TensorRef(x.data(), DType::f32, {64});
  a.out = TensorRef(y.data(), DType::f32, {64});
  a.factor = 2.0;
  a.stream = kCommStream;
  ASSERT_TRUE(be->scale(a).ok());
  EXPECT_EQ(y[0], 0.0f); // queued behind the slow work
  a.out = TensorRef(z.data(), DType::f32, {64});
  a.stream = kComputeStream;
  ASSERT_TRUE(be->scale(a).ok());
  EXPECT_EQ(z[63], 6.0f); // compute runs before the call returns
  ASSERT_TRUE(be->synchronize(kCommStream).ok());
  EXPECT_EQ(y[63], 6.0f);
}

TEST(CommThreadTest, AnErrorFailsTheStream) {
  auto be = makeBackend();
  absl::StatusOr<Event> e = be->createEvent();
  ASSERT_TRUE(e.ok());
  bool ranAfter = false;
  ASSERT_TRUE(be->enqueue([] {
                  slowly();
                  return absl::UnavailableError("shm: rank 1 is gone");
                }).ok());
  ASSERT_TRUE(be->enqueue([&] {
                  ranAfter = true;
                  return absl::OkStatus();
                }).ok());
  ASSERT_TRUE(be->recordEvent(kCommStream, *e).ok());
  // The host's wait ends with the error instead of waiting forever.
  absl::Status waited = be->waitEvent(kComputeStream, *e);
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(waited.message(), "shm: rank 1 is gone");
  EXPECT_EQ(be->synchronize(kCommStream).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(ranAfter);
  // Later comm work is refused with the same error.
  std::vector<float> d(4);
  EXPECT_EQ(be->zero(d.data(), 16, kCommStream).code(),
            absl::StatusCode::kUnavailable);
}

TEST(CommThreadTest, RefusesBadStreamsAndEvents) {
  auto be = makeBackend();
  EXPECT_EQ(be->synchronize(runtime::Stream{2}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be->recordEvent(kCommStream, Event{0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be->waitEvent(kComputeStream, Event{-1}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CommThreadTest, CollectivesAreQueuedOnTheCommStream) {
  shm::ShmCommOptions co;
  co.jobId = absl::StrFormat("comm-thread-test-%d", getpid());
  absl::StatusOr<std::unique_ptr<shm::ShmComm>> shm = shm::ShmComm::create(co);
  ASSERT_TRUE(shm.ok()) << shm.status();
  auto be = makeBackend();
  CommThreadComm comm(std::move(*shm), *be);
  EXPECT_TRUE(comm.streamOrdered());
  EXPECT_STREQ(comm.name(), "shm");
  absl::StatusOr<runtime::Group> world = comm.group(runtime::GroupKind::world);
  ASSERT_TRUE(world.ok());
  std::vector<float> x = {1.0f, 2.0f, 3.0f}, y(3, 0.0f);
  ASSERT_TRUE(be->enqueue([] {
                  slowly();
                  return absl::OkStatus();
                }).ok());
  ASSERT_TRUE(comm.allReduce(x.data(), y.data(), 3, DType::f32,
                             runtime::ReduceOp::sum, *world)
                  .ok());
  EXPECT_EQ(y[2], 0.0f); // queued, not run
  ASSERT_TRUE(be->synchronize(kCommStream).ok());
  EXPECT_EQ(y, x); // one rank: the sum is its own contribution
}

} // namespace
} // namespace md::cpu
