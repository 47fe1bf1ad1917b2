//===- CommThreadTest.cpp - the CPU backend's comm stream on a thread -----===//
//
// cpu::CommThreadBackend and cpu::CommThreadComm (runtime/cpu/CommThread.h):
// comm-stream work runs on another thread in queue order, events and
// synchronize wait for exactly what they should, an error on the comm
// thread fails the stream, a collective queued through the comm gives
// the host comm's result, and the comm thread stamps the flight recorder's
// entries queued, started, then completed or failed as the collective
// goes, with a peer that comes late or never. ExecutorTest checks that training
// with the comm thread gives the same bits as without.
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

/// The state of entry `seq` in `rec` (Queued when absent).
runtime::FlightState stateOf(const runtime::FlightRecorder &rec, uint64_t seq) {
  for (const runtime::FlightEntry &e : rec.snapshot().entries)
    if (e.seq == seq)
      return e.state;
  return runtime::FlightState::Queued;
}

/// Polls until entry `seq` of `rec` is in `state` (false after 5 s).
bool reaches(const runtime::FlightRecorder &rec, uint64_t seq,
             runtime::FlightState state) {
  for (int i = 0; i < 5000; ++i) {
    if (stateOf(rec, seq) == state)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

TEST(CommThreadTest, TheCommThreadStampsTheFlightRecorder) {
  // Two ranks in this process. Rank 0 queues an all_reduce behind slow
  // work: its entry is queued, then started while rank 0 waits for rank 1,
  // then completed once rank 1 joins.
  using runtime::FlightState;
  const std::string job = absl::StrFormat("comm-thread-flight-%d", getpid());
  auto rankComm = [&](int rank, int timeoutMs) {
    shm::ShmCommOptions co;
    co.jobId = job;
    co.rank = rank;
    co.worldSize = 2;
    co.timeout = std::chrono::milliseconds(timeoutMs);
    return shm::ShmComm::create(co);
  };
  std::unique_ptr<shm::ShmComm> host1;
  std::thread attach([&] {
    auto c = rankComm(1, 5000);
    ASSERT_TRUE(c.ok()) << c.status();
    host1 = std::move(*c);
  });
  auto host0 = rankComm(0, 1000);
  attach.join();
  ASSERT_TRUE(host0.ok()) << host0.status();
  ASSERT_NE(host1, nullptr);

  auto rec = runtime::FlightRecorder::Create(0, 16);
  ASSERT_TRUE(rec.ok()) << rec.status();
  runtime::FlightRecorder &r = **rec;
  auto be = makeBackend();
  CommThreadComm comm(std::move(*host0), *be, &r);
  absl::StatusOr<runtime::Group> world = comm.group(runtime::GroupKind::world);
  ASSERT_TRUE(world.ok());
  runtime::FlightCall call;
  call.kind = runtime::Collective::all_reduce;

  std::atomic<bool> go{false};
  ASSERT_TRUE(be->enqueue([&] {
                  while (!go)
                    std::this_thread::yield();
                  return absl::OkStatus();
                }).ok());
  std::vector<float> x = {1.0f, 2.0f}, y(2, 0.0f);
  uint64_t a = r.begin(call, FlightState::Queued);
  ASSERT_TRUE(comm.allReduce(x.data(), y.data(), 2, DType::f32,
                             runtime::ReduceOp::sum, *world)
                  .ok());
  EXPECT_TRUE(r.claimed(a));
  EXPECT_TRUE(r.snapshot().commStamps);
  EXPECT_EQ(stateOf(r, a), FlightState::Queued);
  go = true;
  EXPECT_TRUE(reaches(r, a, FlightState::Started));
  // Rank 1 joins; the sum comes back.
  std::vector<float> x1 = {10.0f, 20.0f}, y1(2, 0.0f);
  absl::StatusOr<runtime::Group> world1 =
      host1->group(runtime::GroupKind::world);
  ASSERT_TRUE(world1.ok());
  absl::Status joined = host1->allReduce(x1.data(), y1.data(), 2, DType::f32,
                                         runtime::ReduceOp::sum, *world1);
  ASSERT_TRUE(joined.ok()) << joined;
  ASSERT_TRUE(be->synchronize(kCommStream).ok());
  EXPECT_EQ(stateOf(r, a), FlightState::Completed);
  EXPECT_EQ(y, (std::vector<float>{11.0f, 22.0f}));
  // The host's wait does not touch what the comm thread stamps.
  r.completeQueued();

  // Rank 1 never comes: the comm thread gives up after rank 0's timeout
  // and files the collective failed; the one queued behind it never
  // started, and one queued after the failure is refused and stays queued.
  uint64_t b = r.begin(call, FlightState::Queued);
  ASSERT_TRUE(comm.allReduce(x.data(), y.data(), 2, DType::f32,
                             runtime::ReduceOp::sum, *world)
                  .ok());
  uint64_t c = r.begin(call, FlightState::Queued);
  ASSERT_TRUE(comm.allReduce(x.data(), y.data(), 2, DType::f32,
                             runtime::ReduceOp::sum, *world)
                  .ok());
  EXPECT_EQ(be->synchronize(kCommStream).code(),
            absl::StatusCode::kDeadlineExceeded);
  uint64_t d = r.begin(call, FlightState::Queued);
  EXPECT_EQ(comm.allReduce(x.data(), y.data(), 2, DType::f32,
                           runtime::ReduceOp::sum, *world)
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(stateOf(r, b), FlightState::Failed);
  EXPECT_EQ(stateOf(r, c), FlightState::Queued);
  EXPECT_EQ(stateOf(r, d), FlightState::Queued);
  for (const runtime::FlightEntry &e : r.snapshot().entries)
    if (e.seq == b) {
      EXPECT_GE(e.endedNs - e.startedNs, 900'000'000) << "failed too early";
    }
}

} // namespace
} // namespace md::cpu
