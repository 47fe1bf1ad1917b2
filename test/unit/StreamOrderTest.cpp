//===- StreamOrderTest.cpp - cross-stream conflicts need events ------------===//
//
// CheckStreamOrder on small two-stream programs: ordered by events (OK), a
// missing wait before a collective reads what compute wrote, a missing wait
// before compute reads what a collective wrote, and the arena-reuse case a
// CPU can never show: a collective's result placed on bytes the compute
// stream still uses while the collective may already run. PlanBuilder
// reserves a comm-stream result from the moment its instruction can start,
// which removes that conflict; the same plan with the result's interval
// starting at the instruction itself is refused. And the executor refuses
// an unordered plan on a backend whose streams run concurrently.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/StreamOrder.h"

#include <unistd.h>

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_format.h"
#include "runtime/exec/Executor.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/plan/PlanBuilder.h"
#include "runtime/shm/ShmComm.h"
#include "test/plan/ExamplePlans.h"

namespace md::runtime {
namespace {

using ::testing::HasSubstr;
using plan::PlanBuilder;
using DT = fb::DType;
using Op = fb::Opcode;

struct Program {
  PlanBuilder builder = plan::examples::MinimalPlan();
  int32_t step = 0;
  int32_t a = 0, t = 0, u = 0, b = 0, y = 0;
  int32_t producedA = -1, reduced = -1;
};

/// step: [0] batch x; [1] a = relu x (records e0); [2] t = relu x;
/// [3] u = relu t; [4] b = all_reduce a on the comm stream (waits for e0,
/// records e1); [5] y = b + u (waits for e1). `waitBeforeReduce` and
/// `waitAfterReduce` drop a wait.
Program makeProgram(bool waitBeforeReduce = true,
                    bool waitAfterReduce = true) {
  Program p;
  PlanBuilder &b = p.builder;
  p.step = b.plan().step_block;
  int32_t x = b.plan().blocks[p.step]->instructions[0]->outputs[0];
  b.plan().buffers[x]->block = -1; // its uses grow: infer its interval again
  p.a = b.addBuffer(PlanBuilder::full("a", DT::F32, {4, 2}));
  p.t = b.addBuffer(PlanBuilder::full("t", DT::F32, {4, 2}));
  p.u = b.addBuffer(PlanBuilder::full("u", DT::F32, {4, 2}));
  p.b = b.addBuffer(PlanBuilder::full("b", DT::F32, {4, 2}));
  p.y = b.addBuffer(PlanBuilder::full("y", DT::F32, {4, 2}));
  p.producedA = b.addEvent("a_ready");
  p.reduced = b.addEvent("b_ready");
  b.add(p.step, Op::Relu, {x}, {p.a}).record = p.producedA;
  b.add(p.step, Op::Relu, {x}, {p.t});
  b.add(p.step, Op::Relu, {p.t}, {p.u});
  fb::InstructionT &reduce = b.add(p.step, Op::AllReduce, {p.a}, {p.b});
  reduce.ints = {0, 0, -1}; // world, sum, no bucket
  reduce.stream = 1;
  reduce.record = p.reduced;
  if (waitBeforeReduce)
    reduce.waits = {p.producedA};
  fb::InstructionT &add = b.add(p.step, Op::Add, {p.b, p.u}, {p.y});
  if (waitAfterReduce)
    add.waits = {p.reduced};
  return p;
}

absl::Status check(const std::vector<uint8_t> &bytes) {
  absl::StatusOr<plan::LoadedPlan> loaded = plan::LoadPlan(bytes, {});
  if (!loaded.ok())
    return loaded.status();
  absl::StatusOr<plan::WorldBinding> world = plan::BindWorldSize(*loaded, 1);
  if (!world.ok())
    return world.status();
  absl::StatusOr<ArenaLayout> layout = LayOutArenas(*loaded, *world);
  if (!layout.ok())
    return layout.status();
  return CheckStreamOrder(*loaded, *layout);
}

std::vector<uint8_t> finish(Program &p) {
  absl::Status s = p.builder.inferLiveness();
  EXPECT_TRUE(s.ok()) << s;
  return p.builder.finish();
}

TEST(StreamOrder, EventsOrderEveryConflict) {
  Program p = makeProgram();
  absl::Status s = check(finish(p));
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(StreamOrder, ACollectiveThatDoesNotWaitForItsInput) {
  Program p = makeProgram(/*waitBeforeReduce=*/false);
  absl::Status s = check(finish(p));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(),
              HasSubstr("blocks[0].instructions[4] (all_reduce on stream 1) "
                        "reads bytes that blocks[0].instructions[1] (relu on "
                        "stream 0) writes"));
  EXPECT_THAT(s.message(), HasSubstr("its events cover nothing of stream 0"));
}

TEST(StreamOrder, ComputeThatDoesNotWaitForACollective) {
  Program p = makeProgram(true, /*waitAfterReduce=*/false);
  absl::Status s = check(finish(p));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(),
              HasSubstr("blocks[0].instructions[5] (add on stream 0) reads "
                        "bytes that blocks[0].instructions[4] (all_reduce on "
                        "stream 1) writes"));
}

TEST(StreamOrder, ACollectivesResultIsReservedFromWhenItCanStart) {
  // The all-reduce may run as soon as [1] is done, concurrently with [2]
  // and [3]: its result b lives from [2] on, so it cannot take t's bytes.
  Program p = makeProgram();
  std::vector<uint8_t> bytes = finish(p);
  EXPECT_EQ(p.builder.plan().buffers[p.b]->first, 2);
  EXPECT_TRUE(check(bytes).ok());

  // With b's interval starting at the all-reduce itself, t ([2, 3]) and b
  // may share bytes, which a GPU would race on.
  p.builder.plan().buffers[p.b]->first = 4;
  absl::Status s = check(p.builder.finish());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("(all_reduce on stream 1) writes bytes "
                                     "that blocks[0].instructions[2] (relu on "
                                     "stream 0) writes"));
  EXPECT_THAT(s.message(), HasSubstr("'b'"));
  EXPECT_THAT(s.message(), HasSubstr("'t'"));
}

TEST(StreamOrder, TheCheckIsBounded) {
  Program p = makeProgram();
  std::vector<uint8_t> bytes = finish(p);
  absl::StatusOr<plan::LoadedPlan> loaded = plan::LoadPlan(bytes, {});
  ASSERT_TRUE(loaded.ok());
  absl::StatusOr<plan::WorldBinding> world = plan::BindWorldSize(*loaded, 1);
  ASSERT_TRUE(world.ok());
  absl::StatusOr<ArenaLayout> layout = LayOutArenas(*loaded, *world);
  ASSERT_TRUE(layout.ok());
  absl::Status s = CheckStreamOrder(*loaded, *layout, /*maxPairs=*/1);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "the plan has too many unordered cross-stream "
                         "accesses to check (more than 1 pairs)");
  EXPECT_TRUE(CheckStreamOrder(*loaded, *layout, 1000).ok());
}

/// An optimizer-like step that updates state in place: [1] l = state_load
/// s (the load aliases s: nothing else writes s while l lives); [2] l = relu
/// l in place (records e0); [3] state_store l -> s; [4] y = all_reduce l on
/// the comm stream (waits for e0 only, as mdc's zero1 plans gather the
/// master weights they just stored); [5] z = relu y (waits for e1). With
/// `writeInstead`, [3] is a second in-place relu of l: a real write.
std::vector<uint8_t> inPlaceStateUpdate(bool writeInstead) {
  PlanBuilder b = plan::examples::MinimalPlan();
  int32_t step = b.plan().step_block;
  int32_t unit = b.addUnit("u", 8);
  int32_t state = b.addBuffer(PlanBuilder::state(
      PlanBuilder::full("u.master", DT::F32, {8}), fb::StateRole::Master, unit));
  int32_t l = b.addBuffer(PlanBuilder::full("l", DT::F32, {8}));
  int32_t y = b.addBuffer(PlanBuilder::full("y", DT::F32, {8}));
  int32_t z = b.addBuffer(PlanBuilder::full("z", DT::F32, {8}));
  int32_t updated = b.addEvent("updated"), reduced = b.addEvent("reduced");
  b.add(step, Op::StateLoad, {state}, {l});
  b.add(step, Op::Relu, {l}, {l}).record = updated;
  if (writeInstead)
    b.add(step, Op::Relu, {l}, {l});
  else
    b.add(step, Op::StateStore, {l}, {state});
  fb::InstructionT &reduce = b.add(step, Op::AllReduce, {l}, {y});
  reduce.ints = {0, 0, -1};
  reduce.stream = 1;
  reduce.record = reduced;
  reduce.waits = {updated};
  b.add(step, Op::Relu, {y}, {z}).waits = {reduced};
  absl::Status s = b.inferLiveness();
  EXPECT_TRUE(s.ok()) << s;
  return b.finish();
}

// The store of a state updated in place copies nothing (the executor skips
// a copy onto the same bytes), so a collective reading the update need not
// wait for it; a kernel writing those bytes there instead is a race.
TEST(StreamOrder, AStoreOfStateUpdatedInPlaceTouchesNothing) {
  absl::Status s = check(inPlaceStateUpdate(/*writeInstead=*/false));
  EXPECT_TRUE(s.ok()) << s.message();
  s = check(inPlaceStateUpdate(/*writeInstead=*/true));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(),
              HasSubstr("(all_reduce on stream 1) reads bytes that "
                        "blocks[0].instructions[3] (relu on stream 0) writes"));
}

/// The CPU backend, claiming that its streams run concurrently.
class ConcurrentCpu final : public cpu::CpuBackend {
public:
  ConcurrentCpu() : cpu::CpuBackend(1) {}
  bool concurrentStreams() const override { return true; }
};

TEST(StreamOrder, TheExecutorRefusesAnUnorderedPlanOnConcurrentStreams) {
  Program p = makeProgram(/*waitBeforeReduce=*/false);
  absl::StatusOr<plan::LoadedPlan> loaded = plan::LoadPlan(finish(p), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  shm::ShmCommOptions co;
  co.jobId = absl::StrFormat("stream-order-%d", getpid());
  co.rank = 0;
  co.worldSize = 1;
  absl::StatusOr<std::unique_ptr<shm::ShmComm>> comm = shm::ShmComm::create(co);
  ASSERT_TRUE(comm.ok()) << comm.status();

  ConcurrentCpu concurrent;
  absl::StatusOr<std::unique_ptr<Executor>> refused =
      Executor::Create(*loaded, 1, concurrent, **comm, ExecutorOptions{});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("the plan cannot run on the cpu backend, whose "
                        "streams run concurrently: blocks[0].instructions[4] "
                        "(all_reduce on stream 1) reads bytes"));

  // In program order there is no race: the same plan gets past the check.
  cpu::CpuBackend inOrder(1);
  absl::StatusOr<std::unique_ptr<Executor>> accepted =
      Executor::Create(*loaded, 1, inOrder, **comm, ExecutorOptions{});
  if (!accepted.ok()) {
    EXPECT_THAT(accepted.status().message(),
                ::testing::Not(HasSubstr("concurrently")));
  }
}


//===----------------------------------------------------------------------===//
// Groups of collectives (ncclGroupStart/End)
//===----------------------------------------------------------------------===//

/// One shared log of what the backend's streams and the comm were asked.
struct CallLog {
  std::vector<std::string> calls;
};

/// The CPU backend, logging events.
class LoggingCpu final : public cpu::CpuBackend {
public:
  explicit LoggingCpu(CallLog &log) : cpu::CpuBackend(1), log_(log) {}
  absl::Status waitEvent(Stream stream, Event event) override {
    log_.calls.push_back(absl::StrFormat("wait %d on %d", event.id, stream.id));
    // The CPU backend's own bookkeeping may record; that is not a call.
    waiting_ = true;
    absl::Status s = cpu::CpuBackend::waitEvent(stream, event);
    waiting_ = false;
    return s;
  }
  absl::Status recordEvent(Stream stream, Event event) override {
    if (!waiting_)
      log_.calls.push_back(
          absl::StrFormat("record %d on %d", event.id, stream.id));
    return cpu::CpuBackend::recordEvent(stream, event);
  }

private:
  CallLog &log_;
  bool waiting_ = false;
};

/// A stream-ordered comm that groups collectives, over a host comm.
class GroupingComm final : public Comm {
public:
  GroupingComm(Comm &inner, CallLog &log) : inner_(inner), log_(log) {}
  const char *name() const override { return "grouping"; }
  int rank() const override { return inner_.rank(); }
  int worldSize() const override { return inner_.worldSize(); }
  absl::StatusOr<Group> group(GroupKind kind) const override {
    return inner_.group(kind);
  }
  absl::Status allGather(const void *s, void *r, int64_t n, DType t,
                         const Group &g) override {
    log_.calls.push_back("all_gather");
    return inner_.allGather(s, r, n, t, g);
  }
  absl::Status reduceScatter(const void *s, void *r, int64_t n, DType t,
                             ReduceOp op, const Group &g) override {
    log_.calls.push_back("reduce_scatter");
    return inner_.reduceScatter(s, r, n, t, op, g);
  }
  absl::Status allReduce(const void *s, void *r, int64_t n, DType t,
                         ReduceOp op, const Group &g) override {
    log_.calls.push_back("all_reduce");
    return inner_.allReduce(s, r, n, t, op, g);
  }
  absl::Status broadcast(const void *s, void *r, int64_t n, DType t, int root,
                         const Group &g) override {
    log_.calls.push_back("broadcast");
    return inner_.broadcast(s, r, n, t, root, g);
  }
  absl::Status barrier(const Group &g) override { return inner_.barrier(g); }
  bool streamOrdered() const override { return true; }
  bool groupsCollectives() const override { return true; }
  absl::Status beginGroup() override {
    log_.calls.push_back("begin group");
    return absl::OkStatus();
  }
  absl::Status endGroup() override {
    log_.calls.push_back("end group");
    return absl::OkStatus();
  }

private:
  Comm &inner_;
  CallLog &log_;
};

TEST(CollectiveGroups, OneBucketsNeighboursGoTogetherWithTheirEventsOutside) {
  // step: [0] batch x; [1] a = relu x (e0); [2] c = relu x (e1);
  // [3] all_reduce a -> b, bucket 0 (waits e0, records e2);
  // [4] all_reduce c -> d, bucket 0 (waits e1, records e3);
  // [5] all_reduce d -> f, bucket 0 too, but it waits for e3, which [4]
  //     records: it cannot join the group (its wait would move before the
  //     record); [6] y = b + f (waits e2, e4).
  PlanBuilder b = plan::examples::MinimalPlan();
  int32_t step = b.plan().step_block;
  int32_t x = b.plan().blocks[step]->instructions[0]->outputs[0];
  b.plan().buffers[x]->block = -1;
  auto full = [&](const char *name) {
    return b.addBuffer(PlanBuilder::full(name, DT::F32, {4, 2}));
  };
  int32_t a = full("a"), c = full("c"), bb = full("b"), d = full("d"),
          f = full("f"), y = full("y");
  int32_t e[5];
  for (int k = 0; k < 5; ++k)
    e[k] = b.addEvent(absl::StrFormat("e%d", k));
  b.add(step, Op::Relu, {x}, {a}).record = e[0];
  b.add(step, Op::Relu, {x}, {c}).record = e[1];
  auto reduce = [&](int32_t in, int32_t out, int64_t bucket,
                    std::vector<int32_t> waits, int32_t record) {
    fb::InstructionT &r = b.add(step, Op::AllReduce, {in}, {out});
    r.ints = {0, 0, bucket};
    r.stream = 1;
    r.waits = std::move(waits);
    r.record = record;
  };
  reduce(a, bb, 0, {e[0]}, e[2]);
  reduce(c, d, 0, {e[1]}, e[3]);
  reduce(d, f, 0, {e[3]}, e[4]);
  b.add(step, Op::Add, {bb, f}, {y}).waits = {e[2], e[4]};
  ASSERT_TRUE(b.inferLiveness().ok());
  absl::StatusOr<plan::LoadedPlan> loaded = plan::LoadPlan(b.finish(), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();

  shm::ShmCommOptions co;
  co.jobId = absl::StrFormat("groups-%d", getpid());
  co.worldSize = 1;
  absl::StatusOr<std::unique_ptr<shm::ShmComm>> host = shm::ShmComm::create(co);
  ASSERT_TRUE(host.ok()) << host.status();
  CallLog log;
  LoggingCpu backend(log);
  GroupingComm comm(**host, log);
  absl::StatusOr<std::unique_ptr<Executor>> exec =
      Executor::Create(*loaded, 1, backend, comm, ExecutorOptions{});
  ASSERT_TRUE(exec.ok()) << exec.status();
  log.calls.clear();
  absl::Status s = (*exec)->Step();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(log.calls,
            (std::vector<std::string>{
                "record 0 on 0", "record 1 on 0",
                // bucket 0: both waits, the group, both records
                "wait 0 on 1", "wait 1 on 1", "begin group", "all_reduce",
                "all_reduce", "end group", "record 2 on 1", "record 3 on 1",
                // waits for a member: after the group, alone
                "wait 3 on 1", "all_reduce", "record 4 on 1",
                "wait 2 on 0", "wait 4 on 0"}));
}

} // namespace
} // namespace md::runtime
