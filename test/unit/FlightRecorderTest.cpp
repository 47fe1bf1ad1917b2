//===- FlightRecorderTest.cpp - the flight recorder's shared ring ---------===//
//
// The ring in runtime/core/FlightRecorder.h: what a snapshot holds, states
// and their times, wrap-around, a second mapping of the same memfd (what
// the launcher holds), a writer killed with SIGKILL in the middle of a
// collective, a reader racing the writer, entries a comm thread claims and
// stamps (late stamps on reused slots included, and racing the writer and a
// reader), and headers it must refuse.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/FlightRecorder.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "gtest/gtest.h"

namespace md::runtime {
namespace {

FlightCall callOf(uint64_t n) {
  FlightCall c;
  c.kind = static_cast<Collective>(n % 5);
  c.group = static_cast<GroupKind>(n % 3);
  c.groupSize = static_cast<int32_t>(n % 7) + 1;
  c.dtype = static_cast<DType>(n % 5);
  c.bytes = static_cast<int64_t>(n) * 3;
  c.bucket = static_cast<int64_t>(n % 11) - 1;
  c.loc = static_cast<int32_t>(n % 1000);
  c.step = static_cast<int64_t>(n / 10) + 1;
  c.micro = static_cast<int32_t>(n % 4);
  return c;
}

/// Every field of `e` is the one callOf(e.seq) gave it.
void expectCallOf(const FlightEntry &e) {
  FlightCall c = callOf(e.seq);
  EXPECT_EQ(e.call.kind, c.kind) << e.seq;
  EXPECT_EQ(e.call.group, c.group) << e.seq;
  EXPECT_EQ(e.call.groupSize, c.groupSize) << e.seq;
  EXPECT_EQ(e.call.dtype, c.dtype) << e.seq;
  EXPECT_EQ(e.call.bytes, c.bytes) << e.seq;
  EXPECT_EQ(e.call.bucket, c.bucket) << e.seq;
  EXPECT_EQ(e.call.loc, c.loc) << e.seq;
  EXPECT_EQ(e.call.step, c.step) << e.seq;
  EXPECT_EQ(e.call.micro, c.micro) << e.seq;
}

TEST(FlightRecorder, RecordsCallsStatesAndWhere) {
  auto rec = FlightRecorder::Create(3, 8);
  ASSERT_TRUE(rec.ok()) << rec.status();
  FlightRecorder &r = **rec;
  EXPECT_EQ(r.rank(), 3);
  EXPECT_EQ(r.capacity(), 8u);
  int64_t before = MonotonicNs();
  r.setPid(1234);
  r.setPhase(RankPhase::Training);
  r.enter(5, 2);
  uint64_t a = r.begin(callOf(1), FlightState::Started);
  r.end(a, FlightState::Completed);
  uint64_t b = r.begin(callOf(2), FlightState::Started);
  r.end(b, FlightState::Failed);
  uint64_t c = r.begin(callOf(3), FlightState::Started);
  r.stepDone(4);
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 2u);
  EXPECT_EQ(c, 3u);

  FlightSnapshot s = r.snapshot();
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.pid, 1234);
  EXPECT_EQ(s.capacity, 8u);
  EXPECT_EQ(s.begun, 3u);
  EXPECT_EQ(s.step, 5);
  EXPECT_EQ(s.micro, 2);
  EXPECT_EQ(s.stepsDone, 4);
  EXPECT_EQ(s.phase, RankPhase::Training);
  EXPECT_GE(s.progressNs, before);
  ASSERT_EQ(s.entries.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(s.entries[i].seq, i + 1);
    expectCallOf(s.entries[i]);
    EXPECT_GE(s.entries[i].beganNs, before);
  }
  EXPECT_EQ(s.entries[0].state, FlightState::Completed);
  EXPECT_GE(s.entries[0].endedNs, s.entries[0].beganNs);
  EXPECT_EQ(s.entries[1].state, FlightState::Failed);
  EXPECT_GT(s.entries[1].endedNs, 0);
  EXPECT_EQ(s.entries[2].state, FlightState::Started);
  EXPECT_EQ(s.entries[2].endedNs, 0);
}

TEST(FlightRecorder, KeepsTheLastCapacityEntries) {
  auto rec = FlightRecorder::Create(0, 4);
  ASSERT_TRUE(rec.ok()) << rec.status();
  for (uint64_t n = 1; n <= 10; ++n) {
    uint64_t seq = (*rec)->begin(callOf(n), FlightState::Started);
    ASSERT_EQ(seq, n);
    (*rec)->end(seq, FlightState::Completed);
  }
  // An entry that has left the ring cannot be ended any more.
  (*rec)->end(2, FlightState::Failed);
  FlightSnapshot s = (*rec)->snapshot();
  EXPECT_EQ(s.begun, 10u);
  ASSERT_EQ(s.entries.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(s.entries[i].seq, 7 + i);
    expectCallOf(s.entries[i]);
    EXPECT_EQ(s.entries[i].state, FlightState::Completed);
  }
}

TEST(FlightRecorder, QueuedEntriesCompleteWhenTheHostWaits) {
  auto rec = FlightRecorder::Create(0, 4);
  ASSERT_TRUE(rec.ok()) << rec.status();
  FlightRecorder &r = **rec;
  for (uint64_t n = 1; n <= 6; ++n)
    r.begin(callOf(n), FlightState::Queued);
  FlightSnapshot s = r.snapshot();
  ASSERT_EQ(s.entries.size(), 4u);
  for (const FlightEntry &e : s.entries)
    EXPECT_EQ(e.state, FlightState::Queued);
  r.completeQueued();
  uint64_t last = r.begin(callOf(7), FlightState::Queued);
  s = r.snapshot();
  ASSERT_EQ(s.entries.size(), 4u);
  for (const FlightEntry &e : s.entries) {
    EXPECT_EQ(e.state,
              e.seq == last ? FlightState::Queued : FlightState::Completed)
        << e.seq;
    EXPECT_EQ(e.endedNs > 0, e.seq != last) << e.seq;
  }
}

TEST(FlightRecorder, AClaimedEntryIsStampedByItsComm) {
  auto rec = FlightRecorder::Create(0, 8);
  ASSERT_TRUE(rec.ok()) << rec.status();
  FlightRecorder &r = **rec;
  EXPECT_EQ(r.claim(), 0u); // nothing begun
  uint64_t host = r.begin(callOf(1), FlightState::Queued);
  uint64_t a = r.begin(callOf(2), FlightState::Queued);
  EXPECT_EQ(r.claim(), a);
  EXPECT_EQ(r.claim(), 0u); // taken
  EXPECT_TRUE(r.claimed(a));
  EXPECT_FALSE(r.claimed(host));
  uint64_t started = r.begin(callOf(3), FlightState::Started);
  EXPECT_EQ(r.claim(), 0u); // not queued
  EXPECT_TRUE(r.snapshot().commStamps);

  // The host's wait completes the entry no comm claimed, not the other.
  r.completeQueued();
  FlightSnapshot s = r.snapshot();
  ASSERT_EQ(s.entries.size(), 3u);
  EXPECT_EQ(s.entries[0].state, FlightState::Completed);
  EXPECT_EQ(s.entries[1].state, FlightState::Queued);
  EXPECT_EQ(s.entries[1].startedNs, 0);
  EXPECT_EQ(s.entries[2].state, FlightState::Started);
  EXPECT_EQ(s.entries[2].startedNs, s.entries[2].beganNs);

  // The comm's thread stamps it.
  std::thread([&] { r.start(a); }).join();
  s = r.snapshot();
  EXPECT_EQ(s.entries[1].state, FlightState::Started);
  EXPECT_GE(s.entries[1].startedNs, s.entries[1].beganNs);
  EXPECT_EQ(s.entries[1].endedNs, 0);
  int64_t before = s.progressNs;
  std::thread([&] { r.end(a, FlightState::Completed); }).join();
  s = r.snapshot();
  EXPECT_EQ(s.entries[1].state, FlightState::Completed);
  EXPECT_GE(s.entries[1].endedNs, s.entries[1].startedNs);
  EXPECT_GE(s.progressNs, before);
  // A state is never left again, nor one skipped backwards.
  r.start(a);
  r.end(a, FlightState::Failed);
  EXPECT_EQ(r.snapshot().entries[1].state, FlightState::Completed);
  r.end(started, FlightState::Failed);
  EXPECT_EQ(r.snapshot().entries[2].state, FlightState::Failed);
}

TEST(FlightRecorder, SettleEndsWhatNoCommClaimed) {
  auto rec = FlightRecorder::Create(0, 8);
  ASSERT_TRUE(rec.ok()) << rec.status();
  FlightRecorder &r = **rec;
  uint64_t hostRan = r.begin(callOf(1), FlightState::Started);
  r.settle(hostRan, true);
  uint64_t hostFailed = r.begin(callOf(2), FlightState::Started);
  r.settle(hostFailed, false);
  uint64_t deviceQueued = r.begin(callOf(3), FlightState::Queued);
  r.settle(deviceQueued, true);
  // Failed before it reached the comm: no later call may claim it.
  uint64_t neverReached = r.begin(callOf(4), FlightState::Queued);
  r.settle(neverReached, false);
  EXPECT_EQ(r.claim(), 0u);
  uint64_t claimed = r.begin(callOf(5), FlightState::Queued);
  ASSERT_EQ(r.claim(), claimed);
  r.settle(claimed, false); // refused: never started, stays queued
  FlightSnapshot s = r.snapshot();
  ASSERT_EQ(s.entries.size(), 5u);
  EXPECT_EQ(s.entries[0].state, FlightState::Completed);
  EXPECT_EQ(s.entries[1].state, FlightState::Failed);
  EXPECT_EQ(s.entries[2].state, FlightState::Queued);
  EXPECT_EQ(s.entries[3].state, FlightState::Failed);
  EXPECT_EQ(s.entries[4].state, FlightState::Queued);
  r.completeQueued();
  s = r.snapshot();
  EXPECT_EQ(s.entries[2].state, FlightState::Completed);
  EXPECT_EQ(s.entries[3].state, FlightState::Failed);
  EXPECT_EQ(s.entries[4].state, FlightState::Queued);
}

TEST(FlightRecorder, ALateStampLeavesANewerEntryAlone) {
  // The comm thread stamps entry 1 after the writer reused its slot for
  // entry 3: entry 3 stays Queued, with no times of states it lacks.
  auto rec = FlightRecorder::Create(0, 2);
  ASSERT_TRUE(rec.ok()) << rec.status();
  FlightRecorder &r = **rec;
  uint64_t first = r.begin(callOf(1), FlightState::Queued);
  ASSERT_EQ(r.claim(), first);
  r.begin(callOf(2), FlightState::Queued);
  r.claim();
  uint64_t third = r.begin(callOf(3), FlightState::Queued);
  r.claim();
  r.start(first);
  r.end(first, FlightState::Completed);
  FlightSnapshot s = r.snapshot();
  ASSERT_EQ(s.entries.size(), 2u);
  EXPECT_EQ(s.entries[1].seq, third);
  expectCallOf(s.entries[1]);
  EXPECT_EQ(s.entries[1].state, FlightState::Queued);
  EXPECT_EQ(s.entries[1].startedNs, 0);
  EXPECT_EQ(s.entries[1].endedNs, 0);
  r.start(third);
  r.end(third, FlightState::Failed);
  s = r.snapshot();
  EXPECT_EQ(s.entries[1].state, FlightState::Failed);
  EXPECT_GE(s.entries[1].endedNs, s.entries[1].startedNs);
  EXPECT_GE(s.entries[1].startedNs, s.entries[1].beganNs);
}

TEST(FlightRecorder, ACommThreadRacesTheWriterAndAReader) {
  // The writer begins and claims entries in a ring of 8; a comm thread
  // stamps them in order, often after their slot was reused; a reader in
  // another mapping checks every copy: whole entries, and a time for each
  // state reached, in order.
  constexpr uint64_t kCalls = 100000;
  auto writer = FlightRecorder::Create(0, 8);
  ASSERT_TRUE(writer.ok()) << writer.status();
  auto reader = FlightRecorder::Open(::dup((*writer)->fd()));
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::atomic<uint64_t> claimedUpTo{0};
  std::atomic<bool> done{false};
  std::thread w([&] {
    for (uint64_t n = 1; n <= kCalls; ++n) {
      uint64_t seq = (*writer)->begin(callOf(n), FlightState::Queued);
      if ((*writer)->claim() == seq)
        claimedUpTo.store(seq, std::memory_order_release);
    }
  });
  std::thread comm([&] {
    for (uint64_t seq = 1; seq <= kCalls;) {
      if (seq > claimedUpTo.load(std::memory_order_acquire))
        continue;
      (*writer)->start(seq);
      (*writer)->end(seq, FlightState::Completed);
      ++seq;
    }
    done = true;
  });
  bool ok = true;
  uint64_t snapshots = 0;
  while (ok && (!done || snapshots == 0)) {
    FlightSnapshot s = (*reader)->snapshot();
    ++snapshots;
    ok = ok && s.commStamps;
    for (const FlightEntry &e : s.entries) {
      bool times = e.beganNs > 0;
      switch (e.state) {
      case FlightState::Queued:
        times = times && e.startedNs == 0 && e.endedNs == 0;
        break;
      case FlightState::Started:
        times = times && e.startedNs >= e.beganNs && e.endedNs == 0;
        break;
      default:
        times = times && e.startedNs >= e.beganNs && e.endedNs >= e.startedNs;
      }
      ok = ok && e.state != FlightState::Failed && times &&
           e.call.bytes == static_cast<int64_t>(e.seq) * 3;
      EXPECT_TRUE(ok) << "entry " << e.seq << " in state "
                      << flightStateName(e.state) << ", times " << e.beganNs
                      << " " << e.startedNs << " " << e.endedNs;
    }
  }
  w.join();
  comm.join();
  FlightSnapshot last = (*reader)->snapshot();
  EXPECT_GT(snapshots, 0u);
  ASSERT_EQ(last.entries.size(), 8u);
  for (const FlightEntry &e : last.entries) {
    EXPECT_EQ(e.state, FlightState::Completed) << e.seq;
    EXPECT_GE(e.endedNs, e.startedNs) << e.seq;
  }
}

TEST(FlightRecorder, AnotherMappingSeesEveryWrite) {
  auto writer = FlightRecorder::Create(2, 16);
  ASSERT_TRUE(writer.ok()) << writer.status();
  auto reader = FlightRecorder::Open(::dup((*writer)->fd()));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->rank(), 2);
  uint64_t seq = (*writer)->begin(callOf(1), FlightState::Started);
  FlightSnapshot s = (*reader)->snapshot();
  ASSERT_EQ(s.entries.size(), 1u);
  EXPECT_EQ(s.entries[0].state, FlightState::Started);
  (*writer)->end(seq, FlightState::Completed);
  EXPECT_EQ((*reader)->snapshot().entries[0].state, FlightState::Completed);
}

// The instruction that failed: none at first, the first one recorded
// after (the blocks around it report the same error later), seen by
// another mapping.
TEST(FlightRecorder, KeepsTheFirstFailedInstruction) {
  auto writer = FlightRecorder::Create(0, 4);
  ASSERT_TRUE(writer.ok()) << writer.status();
  auto reader = FlightRecorder::Open(::dup((*writer)->fd()));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->snapshot().failedAt.opcode, -1);
  (*writer)->failedAt({7, 1, 19, 3});
  (*writer)->failedAt({9, 0, 4, -1});
  FlightFailedInstruction f = (*reader)->snapshot().failedAt;
  EXPECT_EQ(f.opcode, 7);
  EXPECT_EQ(f.block, 1);
  EXPECT_EQ(f.index, 19);
  EXPECT_EQ(f.loc, 3);
}

TEST(FlightRecorder, SurvivesAWriterKilledWithSigkill) {
  auto rec = FlightRecorder::Create(1, 8);
  ASSERT_TRUE(rec.ok()) << rec.status();
  int fd = (*rec)->fd();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The rank: maps the ring as mdrun --worker does, dies mid-collective.
    auto mine = FlightRecorder::Open(::dup(fd));
    if (!mine.ok())
      _exit(2);
    (*mine)->setPid(static_cast<int32_t>(::getpid()));
    (*mine)->enter(38, 2);
    for (uint64_t n = 1; n <= 5; ++n) {
      uint64_t seq = (*mine)->begin(callOf(n), FlightState::Started);
      if (n < 5)
        (*mine)->end(seq, FlightState::Completed);
    }
    ::raise(SIGKILL);
    _exit(3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  FlightSnapshot s = (*rec)->snapshot();
  EXPECT_EQ(s.pid, pid);
  EXPECT_EQ(s.step, 38);
  EXPECT_EQ(s.micro, 2);
  ASSERT_EQ(s.entries.size(), 5u);
  EXPECT_EQ(s.entries[3].state, FlightState::Completed);
  EXPECT_EQ(s.entries[4].state, FlightState::Started);
  expectCallOf(s.entries[4]);
}

TEST(FlightRecorder, ReaderNeverSeesATornEntry) {
  auto writer = FlightRecorder::Create(0, 64);
  ASSERT_TRUE(writer.ok()) << writer.status();
  auto reader = FlightRecorder::Open(::dup((*writer)->fd()));
  ASSERT_TRUE(reader.ok()) << reader.status();
  constexpr uint64_t kCalls = 200000;
  std::atomic<bool> done{false};
  std::thread w([&] {
    for (uint64_t n = 1; n <= kCalls; ++n) {
      uint64_t seq = (*writer)->begin(callOf(n), FlightState::Started);
      (*writer)->end(seq, FlightState::Completed);
    }
    done = true;
  });
  uint64_t snapshots = 0, seen = 0;
  bool ok = true;
  while (ok && (!done || snapshots == 0)) {
    FlightSnapshot s = (*reader)->snapshot();
    ++snapshots;
    uint64_t prev = 0;
    for (const FlightEntry &e : s.entries) {
      // Ascending, within the ring's window, each entry whole.
      ok = ok && e.seq > prev && e.seq <= s.begun && e.seq + 64 > s.begun &&
           e.call.bytes == static_cast<int64_t>(e.seq) * 3 &&
           e.call.step == static_cast<int64_t>(e.seq / 10) + 1 &&
           e.call.loc == static_cast<int32_t>(e.seq % 1000);
      EXPECT_TRUE(ok) << "entry " << e.seq << " of a snapshot at " << s.begun;
      prev = e.seq;
      ++seen;
    }
  }
  w.join();
  FlightSnapshot last = (*reader)->snapshot();
  EXPECT_EQ(last.begun, kCalls);
  EXPECT_EQ(last.entries.size(), 64u);
  EXPECT_GT(snapshots, 1u);
  EXPECT_GT(seen, 0u);
}

// What a collective pays for being recorded: a begin and an end (two clock
// reads, a dozen relaxed stores). Printed; bounded loosely so that a
// slow, shared machine does not fail it, while a lock or a system call per
// collective would.
TEST(FlightRecorder, CostsLittlePerCollective) {
  auto rec = FlightRecorder::Create(0, 4096);
  ASSERT_TRUE(rec.ok()) << rec.status();
  constexpr int kCalls = 1000000;
  FlightCall call = callOf(1);
  int64_t t0 = MonotonicNs();
  for (int n = 0; n < kCalls; ++n) {
    uint64_t seq = (*rec)->begin(call, FlightState::Started);
    (*rec)->end(seq, FlightState::Completed);
  }
  double ns = static_cast<double>(MonotonicNs() - t0) / kCalls;
  std::printf("flight recorder: %.1f ns per recorded collective\n", ns);
  EXPECT_LT(ns, 5000.0);
  EXPECT_EQ((*rec)->snapshot().begun, static_cast<uint64_t>(kCalls));
}

TEST(FlightRecorder, RefusesWhatIsNotARing) {
  int fd = ::memfd_create("not-a-ring", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  auto r = FlightRecorder::Open(fd);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is not a version 3 ring"),
            std::string::npos)
      << r.status();

  int small = ::memfd_create("too-small", MFD_CLOEXEC);
  ASSERT_GE(small, 0);
  auto s = FlightRecorder::Open(small);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("less than its header"),
            std::string::npos)
      << s.status();

  // A ring cut short: its header's capacity does not fit its size.
  auto ring = FlightRecorder::Create(0, 8);
  ASSERT_TRUE(ring.ok()) << ring.status();
  int cut = ::dup((*ring)->fd());
  ASSERT_EQ(::ftruncate(cut, 1024), 0);
  auto c = FlightRecorder::Open(cut);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("do not fill"), std::string::npos)
      << c.status();

  EXPECT_FALSE(FlightRecorder::Create(0, 0).ok());
}

} // namespace
} // namespace md::runtime
