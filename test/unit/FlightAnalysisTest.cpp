//===- FlightAnalysisTest.cpp - culprits from hand-made flight rings ------===//
//
// tools/mdrun/FlightAnalysis on rings built by hand: a rank killed inside a
// collective, a rank stopped between two, every rank stopped, a rank that
// exited with an error, ranks that disagree on a collective, a job with
// nothing open; the same jobs with the CPU comm thread (collectives queued
// ahead of the one each rank is in), whose findings must be the same; and
// the JSON of a ring, field by field.
//
//===----------------------------------------------------------------------===//

#include "tools/mdrun/FlightAnalysis.h"

#include "runtime/plan/Schema.h"

#include <signal.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace md::mdrun {
namespace {

using runtime::Collective;
using runtime::FlightEntry;
using runtime::FlightState;
using runtime::GroupKind;
using ::testing::HasSubstr;

constexpr int64_t kSecond = 1'000'000'000;

/// Collective n of the test's program: all_gathers of 4 KiB over a shard
/// group of 4 in bucket n % 3, at location n % 2, in step n / 10 + 1.
FlightEntry entry(uint64_t n, FlightState state, int64_t began,
                  int64_t ended = 0) {
  FlightEntry e;
  e.seq = n;
  e.call.kind = Collective::all_gather;
  e.call.group = GroupKind::shard;
  e.call.groupSize = 4;
  e.call.dtype = runtime::DType::bf16;
  e.call.bytes = 4096;
  e.call.bucket = static_cast<int64_t>(n % 3);
  e.call.loc = static_cast<int32_t>(n % 2);
  e.call.step = static_cast<int64_t>(n / 10) + 1;
  e.call.micro = 2;
  e.state = state;
  e.beganNs = began;
  // As a host comm files it: started when begun.
  e.startedNs = state == FlightState::Queued ? 0 : began;
  e.endedNs = ended;
  return e;
}

/// Rank `rank` completed collectives 1..done and is in `open` (0: none)
/// in `state` since `since`.
RankRing rankAt(int rank, RankFate fate, uint64_t done, uint64_t open = 0,
                FlightState state = FlightState::Started, int64_t since = 0) {
  RankRing r;
  r.rank = rank;
  r.fate = fate;
  r.ring.rank = rank;
  r.ring.capacity = 64;
  for (uint64_t n = 1; n <= done; ++n)
    r.ring.entries.push_back(
        entry(n, FlightState::Completed, static_cast<int64_t>(n), n + 1));
  r.ring.begun = done;
  if (open != 0) {
    r.ring.entries.push_back(
        entry(open, state, since,
              state == FlightState::Failed ? since + 5 * kSecond : 0));
    r.ring.begun = open;
  }
  r.ring.step = 38;
  r.ring.micro = 2;
  return r;
}

const std::vector<std::string> kLocs = {"mlp.mdl:17:23", "mlp.mdl:9:5"};
const RankFate kRunning{RankFate::Kind::Running, 0};
const RankFate kStopped{RankFate::Kind::Stopped, 0};
const RankFate kKilled{RankFate::Kind::Signaled, SIGKILL};
const RankFate kFailed{RankFate::Kind::Exited, 1};

TEST(FlightAnalysis, RankKilledInsideACollective) {
  std::vector<RankRing> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.push_back(
        rankAt(r, kRunning, 387, 388, FlightState::Started, 10 * kSecond));
  ranks.push_back(
      rankAt(3, kKilled, 387, 388, FlightState::Started, 10 * kSecond));
  FlightFinding f = AnalyzeFlight(ranks, kLocs, 11 * kSecond + kSecond / 5);
  EXPECT_EQ(f.seq, 388u);
  EXPECT_EQ(f.culprits, std::vector<int>({3}));
  EXPECT_EQ(f.waiting, std::vector<int>({0, 1, 2}));
  EXPECT_FALSE(f.mismatch);
  EXPECT_EQ(f.text,
            "rank 3 was killed by signal 9 (Killed) in step 38, micro-step 2, "
            "while in all_gather #388 (bf16, 4.0 KiB, shard group of 4, "
            "bucket 1, mlp.mdl:17:23); ranks 0-2 wait in it since 1.2 s");
}

TEST(FlightAnalysis, RankStoppedBetweenCollectives) {
  // Rank 1 stopped after #52; rank 0 waited 5 s in #53 and gave up.
  std::vector<RankRing> ranks = {
      rankAt(0, kFailed, 52, 53, FlightState::Failed, 20 * kSecond),
      rankAt(1, kStopped, 52)};
  ranks[1].ring.step = 6;
  ranks[1].ring.micro = 1;
  FlightFinding f = AnalyzeFlight(ranks, kLocs, 26 * kSecond);
  EXPECT_EQ(f.seq, 53u);
  EXPECT_EQ(f.culprits, std::vector<int>({1}));
  EXPECT_EQ(f.waiting, std::vector<int>({0}));
  EXPECT_EQ(f.text,
            "rank 1 was stopped (SIGSTOP, SIGTSTP or a debugger) in step 6, "
            "micro-step 1, after all_gather #52 (bf16, 4.0 KiB, shard group "
            "of 4, bucket 1, mlp.mdl:17:23); it never reached all_gather #53 "
            "(bf16, 4.0 KiB, shard group of 4, bucket 2, mlp.mdl:9:5); rank 0 "
            "gave up waiting in it after 5.0 s");
}

TEST(FlightAnalysis, RankStoppedInsideACollectiveAnotherGaveUp) {
  // Rank 1 stopped inside #54; rank 0's comm gave up on it and rank 0
  // exited with an error: rank 1 is the culprit, rank 0 noticed.
  std::vector<RankRing> ranks = {
      rankAt(0, kFailed, 53, 54, FlightState::Failed, 20 * kSecond),
      rankAt(1, kStopped, 53, 54, FlightState::Started, 20 * kSecond)};
  FlightFinding f = AnalyzeFlight(ranks, kLocs, 26 * kSecond);
  EXPECT_EQ(f.seq, 54u);
  EXPECT_EQ(f.culprits, std::vector<int>({1}));
  EXPECT_EQ(f.waiting, std::vector<int>({0}));
  EXPECT_EQ(f.text,
            "rank 1 was stopped (SIGSTOP, SIGTSTP or a debugger) in step 38, "
            "micro-step 2, while in all_gather #54 (bf16, 4.0 KiB, shard group "
            "of 4, bucket 0, mlp.mdl:17:23); rank 0 gave up waiting in it "
            "after 5.0 s");
}

TEST(FlightAnalysis, RankStoppedInsideACollectiveThePeerLeft) {
  // Rank 1 stopped inside #1790 after rank 0 had its data: rank 0
  // completed #1790 and gave up in #1791, which rank 1 never began.
  std::vector<RankRing> ranks = {
      rankAt(0, kFailed, 1790, 1791, FlightState::Failed, 20 * kSecond),
      rankAt(1, kStopped, 1789, 1790, FlightState::Started, 19 * kSecond)};
  FlightFinding f = AnalyzeFlight(ranks, kLocs, 26 * kSecond);
  EXPECT_EQ(f.seq, 1790u);
  EXPECT_EQ(f.culprits, std::vector<int>({1}));
  EXPECT_EQ(f.waiting, std::vector<int>({0}));
  EXPECT_EQ(f.text,
            "rank 1 was stopped (SIGSTOP, SIGTSTP or a debugger) in step 38, "
            "micro-step 2, while in all_gather #1790 (bf16, 4.0 KiB, shard "
            "group of 4, bucket 2, mlp.mdl:17:23); rank 0 gave up waiting in "
            "all_gather #1791 (bf16, 4.0 KiB, shard group of 4, bucket 0, "
            "mlp.mdl:9:5) after 5.0 s");
}

TEST(FlightAnalysis, NoRankDeadOrStopped) {
  // Every rank alive and in #5: a hang inside the collective.
  std::vector<RankRing> ranks = {
      rankAt(0, kRunning, 4, 5, FlightState::Started, kSecond),
      rankAt(1, kRunning, 4, 5, FlightState::Started, 2 * kSecond)};
  FlightFinding f = AnalyzeFlight(ranks, kLocs, 4 * kSecond);
  EXPECT_EQ(f.seq, 5u);
  EXPECT_TRUE(f.culprits.empty());
  EXPECT_EQ(f.waiting, std::vector<int>({0, 1}));
  EXPECT_EQ(f.text,
            "no rank is dead, stopped or behind, but all_gather #5 (bf16, 4.0 "
            "KiB, shard group of 4, bucket 2, mlp.mdl:9:5) did not complete; "
            "ranks 0-1 wait in it since 3.0 s");
}

TEST(FlightAnalysis, ACollectiveThatWaitsForAnotherNodeNamesIt) {
  // Node 1 of 4 (2 ranks each) watches ranks 2-3, both alive in #5, a
  // shard group of 4: ranks 0-3, so it waits for node 0's ranks 0-1 (all
  // stopped, say: no comm here can tell).
  std::vector<RankRing> ranks = {
      rankAt(2, kRunning, 4, 5, FlightState::Started, kSecond),
      rankAt(3, kRunning, 4, 5, FlightState::Started, 2 * kSecond)};
  FlightWorld world{/*worldSize=*/8, /*ranksPerNode=*/2};
  FlightFinding f = AnalyzeFlight(ranks, kLocs, 4 * kSecond, world);
  EXPECT_TRUE(f.culprits.empty());
  EXPECT_EQ(f.elsewhere, std::vector<int>({0, 1}));
  EXPECT_EQ(f.waiting, std::vector<int>({2, 3}));
  EXPECT_EQ(f.text,
            "no rank of this node is dead, stopped or behind, but all_gather "
            "#5 (bf16, 4.0 KiB, shard group of 4, bucket 2, mlp.mdl:9:5) did "
            "not complete: it waits for ranks 0-1 on node 0, whose launcher "
            "can say why; ranks 2-3 wait in it since 3.0 s");

  // A replicate group of 2 (shard groups of 4): rank 2's is {2, 6}, rank
  // 3's {3, 7}: node 3.
  for (RankRing &r : ranks)
    for (FlightEntry &e : r.ring.entries) {
      e.call.group = GroupKind::replicate;
      e.call.groupSize = 2;
    }
  f = AnalyzeFlight(ranks, kLocs, 4 * kSecond, world);
  EXPECT_EQ(f.elsewhere, std::vector<int>({6, 7}));
  EXPECT_THAT(f.text, HasSubstr("it waits for ranks 6-7 on node 3, whose "
                                "launcher can say why; "));
  // The world group: every other node.
  for (RankRing &r : ranks)
    for (FlightEntry &e : r.ring.entries) {
      e.call.group = GroupKind::world;
      e.call.groupSize = 8;
    }
  f = AnalyzeFlight(ranks, kLocs, 4 * kSecond, world);
  EXPECT_EQ(f.elsewhere, std::vector<int>({0, 1, 4, 5, 6, 7}));
  EXPECT_THAT(f.text, HasSubstr("it waits for ranks 0-1, 4-7 on nodes 0, "
                                "2-3, whose launchers can say why"));

  // A group within the node: a hang of the comm, as before; and so without
  // a world.
  for (RankRing &r : ranks)
    for (FlightEntry &e : r.ring.entries) {
      e.call.group = GroupKind::shard;
      e.call.groupSize = 2;
    }
  f = AnalyzeFlight(ranks, kLocs, 4 * kSecond, world);
  EXPECT_TRUE(f.elsewhere.empty());
  EXPECT_THAT(f.text, HasSubstr("no rank is dead, stopped or behind, but "));
  f = AnalyzeFlight(ranks, kLocs, 4 * kSecond);
  EXPECT_TRUE(f.elsewhere.empty());
  EXPECT_THAT(f.text, HasSubstr("no rank is dead, stopped or behind, but "));
}

TEST(FlightAnalysis, EveryRankStopped) {
  // Ranks 0 and 2 wait in #10; ranks 1 and 3 were stopped before it.
  std::vector<RankRing> ranks = {
      rankAt(0, kStopped, 9, 10, FlightState::Started, kSecond),
      rankAt(1, kStopped, 9),
      rankAt(2, kStopped, 9, 10, FlightState::Started, 2 * kSecond),
      rankAt(3, kStopped, 9)};
  FlightFinding f = AnalyzeFlight(ranks, kLocs, 4 * kSecond);
  EXPECT_EQ(f.seq, 10u);
  EXPECT_EQ(f.culprits, std::vector<int>({1, 3}));
  EXPECT_EQ(f.waiting, std::vector<int>({0, 2}));
  EXPECT_EQ(f.text,
            "ranks 1, 3 were stopped (SIGSTOP, SIGTSTP or a debugger) in step "
            "38, micro-step 2, after all_gather #9 (bf16, 4.0 KiB, shard group "
            "of 4, bucket 0, mlp.mdl:9:5); it never reached all_gather #10 "
            "(bf16, 4.0 KiB, shard group of 4, bucket 1, mlp.mdl:17:23); ranks "
            "0, 2, which were stopped (SIGSTOP, SIGTSTP or a debugger), wait "
            "in it since 3.0 s");

  // All four in the same collective: the stopped ranks are all culprits.
  for (RankRing &r : ranks)
    r = rankAt(r.rank, kStopped, 9, 10, FlightState::Started, kSecond);
  f = AnalyzeFlight(ranks, kLocs, 4 * kSecond);
  EXPECT_EQ(f.seq, 10u);
  EXPECT_EQ(f.culprits, std::vector<int>({0, 1, 2, 3}));
  EXPECT_TRUE(f.waiting.empty());
  EXPECT_EQ(f.text,
            "ranks 0-3 were stopped (SIGSTOP, SIGTSTP or a debugger) in step "
            "38, micro-step 2, while in all_gather #10 (bf16, 4.0 KiB, shard "
            "group of 4, bucket 1, mlp.mdl:17:23)");
}

TEST(FlightAnalysis, RankThatExitedWithAnError) {
  std::vector<RankRing> ranks = {
      rankAt(0, kRunning, 40, 41, FlightState::Started, kSecond),
      rankAt(1, kFailed, 40)};
  ranks[1].ring.step = 5;
  ranks[1].ring.micro = 0;
  FlightFinding f = AnalyzeFlight(ranks, kLocs, kSecond);
  EXPECT_EQ(f.culprits, std::vector<int>({1}));
  EXPECT_NE(f.text.find("rank 1 exited with status 1 in the hooks after step "
                        "5, after all_gather #40"),
            std::string::npos)
      << f.text;
  EXPECT_NE(f.text.find("rank 0 waits in it since 0.0 s"), std::string::npos)
      << f.text;
}

// A rank whose kernel failed (a library error, as a Status) is named with
// that kernel, not with the collective before it, which completed; both
// when no one waits and when its peer waits for it in the next one.
TEST(FlightAnalysis, ARankWhoseKernelFailedIsNamedWithTheKernel) {
  const std::vector<std::string> locs = {"mlp.mdl:17:23", "mlp.mdl:9:5",
                                         "gpt.mdl:26:13"};
  std::vector<RankRing> ranks = {rankAt(0, kFailed, 3), rankAt(1, kFailed, 3)};
  ranks[0].ring.step = 1;
  ranks[0].ring.micro = 1;
  ranks[0].ring.failedAt = {static_cast<int32_t>(fb::Opcode::Matmul), 1, 19,
                            2};
  ranks[1].ring.step = 1;
  ranks[1].ring.micro = 1;
  FlightFinding f = AnalyzeFlight(ranks, locs, kSecond);
  EXPECT_NE(f.text.find("rank 0 exited with status 1 in step 1, micro-step "
                        "1, in matmul at blocks[1].instructions[19] "
                        "(gpt.mdl:26:13)"),
            std::string::npos)
      << f.text;
  EXPECT_EQ(f.text.find("rank 0 exited with status 1 in step 1, micro-step "
                        "1, after"),
            std::string::npos)
      << f.text;
  // The peer waits in collective 4, which rank 0 never reached.
  ranks[1] = rankAt(1, kRunning, 3, 4, FlightState::Started, kSecond);
  f = AnalyzeFlight(ranks, locs, 2 * kSecond);
  EXPECT_EQ(f.culprits, std::vector<int>({0}));
  EXPECT_NE(f.text.find("rank 0 exited with status 1 in step 1, micro-step "
                        "1, in matmul at blocks[1].instructions[19] "
                        "(gpt.mdl:26:13); it never reached all_gather #4"),
            std::string::npos)
      << f.text;
  EXPECT_NE(FlightJson(ranks[0], locs, 9)
                .find("\"failed_in\": \"matmul at blocks[1].instructions[19] "
                      "(gpt.mdl:26:13)\""),
            std::string::npos);
}

TEST(FlightAnalysis, RanksThatDisagree) {
  std::vector<RankRing> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.push_back(rankAt(r, kRunning, 11, 12, FlightState::Started, 0));
  ranks[2].ring.entries.back().call.kind = Collective::all_reduce;
  ranks[2].ring.entries.back().call.bytes = 8;
  FlightFinding f = AnalyzeFlight(ranks, kLocs, kSecond);
  EXPECT_TRUE(f.mismatch);
  EXPECT_EQ(f.seq, 12u);
  EXPECT_EQ(f.culprits, std::vector<int>({2}));
  EXPECT_EQ(f.text,
            "the ranks disagree on collective #12: ranks 0-1 run all_gather "
            "#12 (bf16, 4.0 KiB, shard group of 4, bucket 0, mlp.mdl:17:23) "
            "in step 2, micro-step 2; rank 2 runs all_reduce #12 (bf16, 8 B, "
            "shard group of 4, bucket 0, mlp.mdl:17:23) in step 2, "
            "micro-step 2");
}

TEST(FlightAnalysis, NothingOpen) {
  std::vector<RankRing> ranks = {rankAt(0, kRunning, 7), rankAt(1, kKilled, 7)};
  FlightFinding f = AnalyzeFlight(ranks, kLocs, kSecond);
  EXPECT_EQ(f.seq, 0u);
  EXPECT_EQ(f.culprits, std::vector<int>({1}));
  EXPECT_NE(f.text.find("rank 1 was killed by signal 9"), std::string::npos)
      << f.text;
  EXPECT_NE(f.text.find("no rank waits in a collective"), std::string::npos)
      << f.text;
}

/// `r` as a rank with the CPU comm thread would have filed it: its host
/// queued each collective `ahead` s before its comm thread started it,
/// and queued the ones up to `queuedTo` that the thread never started.
RankRing withCommThread(RankRing r, uint64_t queuedTo,
                        int64_t ahead = kSecond) {
  r.ring.commStamps = true;
  for (FlightEntry &e : r.ring.entries)
    e.beganNs -= ahead;
  for (uint64_t n = r.ring.begun + 1; n <= queuedTo; ++n)
    r.ring.entries.push_back(entry(n, FlightState::Queued, 1));
  r.ring.begun = std::max(r.ring.begun, queuedTo);
  return r;
}

/// The finding on `ranks` with every rank's comm thread queued `extra`
/// collectives past what it began without: the same as without.
void expectTheSameWithCommThreads(const std::vector<RankRing> &ranks,
                                  int64_t nowNs, uint64_t extra) {
  FlightFinding without = AnalyzeFlight(ranks, kLocs, nowNs);
  std::vector<RankRing> threaded;
  for (const RankRing &r : ranks)
    threaded.push_back(withCommThread(r, r.ring.begun + extra));
  FlightFinding with = AnalyzeFlight(threaded, kLocs, nowNs);
  EXPECT_EQ(with.seq, without.seq);
  EXPECT_EQ(with.culprits, without.culprits);
  EXPECT_EQ(with.waiting, without.waiting);
  EXPECT_EQ(with.mismatch, without.mismatch);
  EXPECT_EQ(with.text, without.text);
}

TEST(FlightAnalysis, TheCommThreadsQueuedCollectivesChangeNoFinding) {
  const int64_t now = 26 * kSecond;
  for (uint64_t extra : {1, 3}) {
    SCOPED_TRACE(extra);
    // Rank 1 stopped after #52 (its comm thread never started #53);
    // rank 0 gave up in #53.
    expectTheSameWithCommThreads(
        {rankAt(0, kFailed, 52, 53, FlightState::Failed, 20 * kSecond),
         rankAt(1, kStopped, 52)},
        now, extra);
    // Rank 1 stopped inside #54, rank 0 gave up in it.
    expectTheSameWithCommThreads(
        {rankAt(0, kFailed, 53, 54, FlightState::Failed, 20 * kSecond),
         rankAt(1, kStopped, 53, 54, FlightState::Started, 20 * kSecond)},
        now, extra);
    // Rank 3 killed inside #388, the others wait in it.
    expectTheSameWithCommThreads(
        {rankAt(0, kRunning, 387, 388, FlightState::Started, 10 * kSecond),
         rankAt(1, kRunning, 387, 388, FlightState::Started, 10 * kSecond),
         rankAt(2, kKilled, 387, 388, FlightState::Started, 10 * kSecond)},
        now, extra);
    // Ranks 1 and 3 stopped before #10, ranks 0 and 2 in it.
    expectTheSameWithCommThreads(
        {rankAt(0, kStopped, 9, 10, FlightState::Started, kSecond),
         rankAt(1, kStopped, 9),
         rankAt(2, kStopped, 9, 10, FlightState::Started, 2 * kSecond),
         rankAt(3, kStopped, 9)},
        now, extra);
    // Nobody dead: a hang inside #5.
    expectTheSameWithCommThreads(
        {rankAt(0, kRunning, 4, 5, FlightState::Started, kSecond),
         rankAt(1, kRunning, 4, 5, FlightState::Started, 2 * kSecond)},
        now, extra);
  }
}

TEST(FlightAnalysis, ACommThreadsWaitCountsFromItsStart) {
  // Rank 1 killed inside #388; rank 0's host queued #388 at 2 s, its comm
  // thread started it at 10 s, and queued #389-#390 behind it.
  RankRing r0 = withCommThread(
      rankAt(0, kRunning, 387, 388, FlightState::Started, 10 * kSecond), 390,
      8 * kSecond);
  RankRing r1 = withCommThread(
      rankAt(1, kKilled, 387, 388, FlightState::Started, 10 * kSecond), 389);
  FlightFinding f = AnalyzeFlight({r0, r1}, kLocs, 11 * kSecond + kSecond / 5);
  EXPECT_EQ(f.seq, 388u);
  EXPECT_EQ(f.culprits, std::vector<int>({1}));
  EXPECT_EQ(f.waiting, std::vector<int>({0}));
  EXPECT_EQ(f.text,
            "rank 1 was killed by signal 9 (Killed) in step 38, micro-step 2, "
            "while in all_gather #388 (bf16, 4.0 KiB, shard group of 4, "
            "bucket 1, mlp.mdl:17:23); rank 0 waits in it since 1.2 s");
}

TEST(FlightAnalysis, ACommThreadQueuedTheCallThatHangs) {
  // Rank 1's host queued #53, its comm thread never started it: it never
  // reached it, and what it did last is #52, not the queued #53-#54.
  RankRing r0 = rankAt(0, kFailed, 52, 53, FlightState::Failed, 20 * kSecond);
  RankRing r1 = withCommThread(rankAt(1, kStopped, 52), 54);
  FlightFinding f = AnalyzeFlight({r0, r1}, kLocs, 26 * kSecond);
  EXPECT_EQ(f.seq, 53u);
  EXPECT_EQ(f.culprits, std::vector<int>({1}));
  EXPECT_EQ(f.text,
            "rank 1 was stopped (SIGSTOP, SIGTSTP or a debugger) in step 38, "
            "micro-step 2, after all_gather #52 (bf16, 4.0 KiB, shard group "
            "of 4, bucket 1, mlp.mdl:17:23); it never reached all_gather #53 "
            "(bf16, 4.0 KiB, shard group of 4, bucket 2, mlp.mdl:9:5); rank 0 "
            "gave up waiting in it after 5.0 s");

  // A comm that does not stamp its entries (NCCL): a Queued #53 may be
  // running on the device, so rank 1 counts as in it.
  r1 = rankAt(1, kStopped, 52, 53, FlightState::Queued, 19 * kSecond);
  f = AnalyzeFlight({r0, r1}, kLocs, 26 * kSecond);
  EXPECT_EQ(f.culprits, std::vector<int>({1}));
  EXPECT_NE(f.text.find("rank 1 was stopped (SIGSTOP, SIGTSTP or a debugger) "
                        "in step 38, micro-step 2, while in all_gather #53"),
            std::string::npos)
      << f.text;
}

TEST(FlightAnalysis, RankLists) {
  EXPECT_EQ(RankListText({3}), "rank 3");
  EXPECT_EQ(RankListText({0, 1, 2}), "ranks 0-2");
  EXPECT_EQ(RankListText({0, 2, 3, 5}), "ranks 0, 2-3, 5");
  EXPECT_EQ(RankListText({1}, "node"), "node 1");
  EXPECT_EQ(RankListText({1, 2}, "node"), "nodes 1-2");
}

TEST(FlightAnalysis, JsonOfARing) {
  RankRing r = rankAt(1, kKilled, 1, 2, FlightState::Started, 7);
  r.ring.pid = 42;
  r.ring.phase = runtime::RankPhase::Training;
  r.ring.stepsDone = 37;
  r.ring.progressNs = 5;
  r.ring.entries[1].call.loc = -1;
  r.ring.entries[1].call.kind = Collective::barrier;
  EXPECT_EQ(
      FlightJson(r, {"a\"b.mdl:1:2"}, 99),
      "{\n"
      "  \"rank\": 1,\n"
      "  \"pid\": 42,\n"
      "  \"fate\": \"was killed by signal 9 (Killed)\",\n"
      "  \"phase\": \"training\",\n"
      "  \"capacity\": 64,\n"
      "  \"begun\": 2,\n"
      "  \"step\": 38,\n"
      "  \"micro_step\": 2,\n"
      "  \"steps_done\": 37,\n"
      "  \"progress_ns\": 5,\n"
      "  \"written_ns\": 99,\n"
      "  \"comm_stamps\": false,\n"
      "  \"failed_in\": null,\n"
      "  \"collectives\": [\n"
      "    {\"seq\": 1, \"kind\": \"all_gather\", \"group\": \"shard\", "
      "\"group_size\": 4, \"dtype\": \"bf16\", \"bytes\": 4096, \"bucket\": 1, "
      "\"location\": null, \"step\": 1, \"micro_step\": 2, \"state\": "
      "\"completed\", \"began_ns\": 1, \"started_ns\": 1, \"ended_ns\": 2},\n"
      "    {\"seq\": 2, \"kind\": \"barrier\", \"group\": \"shard\", "
      "\"group_size\": 4, \"dtype\": \"bf16\", \"bytes\": 4096, \"bucket\": 2, "
      "\"location\": null, \"step\": 1, \"micro_step\": 2, \"state\": "
      "\"started\", \"began_ns\": 7, \"started_ns\": 7, \"ended_ns\": null}\n"
      "  ]\n"
      "}\n");
  // Locations are escaped.
  r.ring.entries[1].call.loc = 0;
  EXPECT_NE(FlightJson(r, {"a\"b.mdl:1:2"}, 99)
                .find("\"location\": \"a\\\"b.mdl:1:2\""),
            std::string::npos);

  // A comm thread's ring: its stamps, and a queued entry not yet started.
  std::string json =
      FlightJson(withCommThread(rankAt(0, kRunning, 1, 2, FlightState::Started,
                                       5 * kSecond),
                                3, kSecond),
                 {}, 99);
  EXPECT_NE(json.find("\"comm_stamps\": true"), std::string::npos) << json;
  EXPECT_NE(json.find("\"state\": \"started\", \"began_ns\": 4000000000, "
                      "\"started_ns\": 5000000000, \"ended_ns\": null}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("{\"seq\": 3, \"kind\": \"all_gather\""),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"state\": \"queued\", \"began_ns\": 1, "
                      "\"started_ns\": null, \"ended_ns\": null}"),
            std::string::npos)
      << json;
}

} // namespace
} // namespace md::mdrun
