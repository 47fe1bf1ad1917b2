//===- ExecutorTest.cpp - the executor on plans that train ----------------===//
//
// Plans from test/plan/TrainingPlans.h run on the CPU backend with the shm
// comm, W ranks as forked processes. Each child runs the executor and writes
// its loss curve, its parameters (gathered, f32) and the first error into
// memory shared with the test process, which checks them: training lowers
// the loss, the presets agree bit for bit, W = 1 and W = 2 agree within
// float tolerance, the hooks run, errors name the step. Children never
// touch gtest; a child that hangs is killed and reported.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Executor.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "runtime/exec/Safetensors.h"
#include "runtime/cpu/CommThread.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/shm/ShmComm.h"
#include "test/plan/ExamplePlans.h"
#include "test/plan/TrainingPlans.h"

namespace md::runtime {
namespace {

using plan::examples::Model;
using plan::examples::Preset;
using plan::examples::TrainingPlan;
using plan::examples::TrainingPlanOptions;
using Clock = std::chrono::steady_clock;

//===----------------------------------------------------------------------===//
// Forked ranks
//===----------------------------------------------------------------------===//

struct RankRecord {
  int failed;
  char message[4096];
  int numLosses; // this rank's loss per step
  double losses[512];
  int numReports; // rank 0: progress reports (mean over ranks)
  double reportLoss[512];
  double reportLr[512];
  double reportNorm[512];
  int numLogs;
  char logs[4096]; // "tag name=value;" records of the plan's logs
  int64_t stepsDone;
  int stopped;
  int preempted;
  int exitReports;   // rank 0: onExit calls
  char failure[256]; // Executor::failure(), "" when none
  int64_t weightBytes;
  uint8_t weights[1 << 17]; // gathered parameters, f32, in param order
};

struct Shared {
  static constexpr int kMaxRanks = 4;
  RankRecord ranks[kMaxRanks];
};

class Collector final : public RunObserver {
public:
  explicit Collector(RankRecord &r) : r_(r) {}
  void onProgress(const Progress &p) override {
    if (r_.numReports < 512) {
      r_.reportLoss[r_.numReports] = p.loss;
      r_.reportLr[r_.numReports] = p.lr;
      r_.reportNorm[r_.numReports] = p.gradNorm.value_or(-1.0);
      ++r_.numReports;
    }
  }
  void
  onLog(int64_t step, const std::string &tag,
        const std::vector<std::pair<std::string, double>> &values) override {
    std::string s = absl::StrFormat("%d %s", step, tag);
    for (const auto &[k, v] : values)
      s += absl::StrFormat(" %s=%.6g", k, v);
    s += ";";
    size_t used = std::strlen(r_.logs);
    std::snprintf(r_.logs + used, sizeof r_.logs - used, "%s", s.c_str());
    ++r_.numLogs;
  }
  void onPrint(int64_t step, const std::string &line, bool perRank) override {
    onLog(step, perRank ? "print/rank" : "print", {{line, 0}});
  }
  void onExit(int64_t, const std::string &) override { ++r_.exitReports; }

private:
  RankRecord &r_;
};

std::string uniqueJobId() {
  static std::atomic<int> counter{0};
  return absl::StrFormat("exec-test-%d-%d", getpid(), counter++);
}

struct RunOptions {
  int64_t steps = 20;
  int64_t logEvery = 1;
  bool gather = true;
  std::function<void(Executor &)> after; // runs in the child after training
  std::string resume;                    // ExecutorOptions::resume
  // ExecutorOptions::preempt: rank `preemptRank` sets it once it has done
  // `preemptAfter` steps (-1: never).
  int preemptRank = 0;
  int64_t preemptAfter = -1;
  // The comm stream on a thread of its own (cpu::CommThreadBackend).
  bool commThread = false;
};

RunOptions forSteps(int64_t steps) {
  RunOptions run;
  run.steps = steps;
  return run;
}

class Ranks {
public:
  Ranks() {
    void *p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    shared_ = static_cast<Shared *>(p);
  }
  ~Ranks() { munmap(shared_, sizeof(Shared)); }

  /// Trains `plan` on `world` forked ranks; returns "" or what failed.
  std::string train(const plan::PlanBuilder &builder, int world,
                    const RunOptions &run = {},
                    std::chrono::seconds limit = std::chrono::seconds(60)) {
    std::memset(shared_, 0, sizeof(Shared));
    std::vector<uint8_t> bytes = builder.finish();
    std::string job = uniqueJobId();
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) {
      pid_t pid = fork();
      if (pid == 0)
        _exit(child(bytes, job, r, world, run, shared_->ranks[r]) ? 0 : 1);
      pids.push_back(pid);
    }
    std::string failures;
    const auto deadline = Clock::now() + limit;
    std::vector<bool> done(world, false);
    for (int left = world; left > 0;) {
      for (int r = 0; r < world; ++r) {
        int status = 0;
        if (!done[r] && waitpid(pids[r], &status, WNOHANG) == pids[r]) {
          done[r] = true;
          --left;
          if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failures += absl::StrFormat("rank %d failed (status %d): %s\n", r,
                                        status, shared_->ranks[r].message);
        }
      }
      if (left > 0 && Clock::now() > deadline) {
        for (int r = 0; r < world; ++r)
          if (!done[r]) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], nullptr, 0);
            failures += absl::StrFormat("rank %d hung\n", r);
          }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return failures;
  }

  RankRecord &rank(int r) { return shared_->ranks[r]; }

  std::vector<float> weights(int r) {
    std::vector<float> w(rank(r).weightBytes / 4);
    std::memcpy(w.data(), rank(r).weights, w.size() * 4);
    return w;
  }
  std::vector<double> losses(int r) {
    return std::vector<double>(rank(r).losses,
                               rank(r).losses + rank(r).numLosses);
  }

private:
  static bool fail(RankRecord &out, const absl::Status &s) {
    out.failed = 1;
    std::snprintf(out.message, sizeof out.message, "%s",
                  std::string(s.message()).c_str());
    return false;
  }

  static bool child(const std::vector<uint8_t> &bytes, const std::string &job,
                    int rank, int world, const RunOptions &run,
                    RankRecord &out) {
    absl::StatusOr<plan::LoadedPlan> loaded = plan::LoadPlan(bytes);
    if (!loaded.ok())
      return fail(out, loaded.status());
    shm::ShmCommOptions co;
    co.jobId = job;
    co.rank = rank;
    co.worldSize = world;
    absl::StatusOr<plan::WorldBinding> binding =
        plan::BindWorldSize(*loaded, world);
    if (binding.ok())
      co.shardSize = static_cast<int>(binding->shardGroupSize);
    co.timeout = std::chrono::milliseconds(20000);
    absl::StatusOr<std::unique_ptr<shm::ShmComm>> shmComm =
        shm::ShmComm::create(co);
    if (!shmComm.ok())
      return fail(out, shmComm.status());
    // The backend outlives the comm, which may queue work on it.
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Comm> comm = std::move(*shmComm);
    // MD_CPU_COMM_THREAD=1 runs every test's comm stream on a thread, as
    // mdrun does by default (--comm-thread on).
    const char *thread = std::getenv("MD_CPU_COMM_THREAD");
    if (run.commThread || (thread != nullptr && std::string(thread) == "1")) {
      auto threaded = std::make_unique<cpu::CommThreadBackend>(
          std::make_unique<cpu::CpuBackend>(1));
      comm = std::make_unique<cpu::CommThreadComm>(std::move(comm), *threaded);
      backend = std::move(threaded);
    } else {
      backend = std::make_unique<cpu::CpuBackend>(1);
    }
    Collector collector(out);
    ExecutorOptions eo;
    eo.rank = rank;
    eo.steps = run.steps;
    eo.logEvery = run.logEvery;
    eo.observer = &collector;
    eo.resume = run.resume;
    std::atomic<bool> preempt{false};
    eo.preempt = &preempt;
    // As mdrun does: MD_VERIFY_HOST_SCALARS=1 checks every host copy.
    const char *verify = std::getenv("MD_VERIFY_HOST_SCALARS");
    eo.verifyHostScalars = verify != nullptr && std::string(verify) == "1";
    absl::StatusOr<std::unique_ptr<Executor>> exec =
        Executor::Create(*loaded, world, *backend, *comm, eo);
    if (!exec.ok())
      return fail(out, exec.status());
    while ((*exec)->stepsDone() < (*exec)->stepsToRun() &&
           !(*exec)->stopped()) {
      absl::Status s = (*exec)->Step();
      if (!s.ok())
        return fail(out, s);
      if (out.numLosses < 512)
        out.losses[out.numLosses++] = (*exec)->lastLoss();
      if (rank == run.preemptRank && (*exec)->stepsDone() == run.preemptAfter)
        preempt = true;
    }
    out.stepsDone = (*exec)->stepsDone();
    out.stopped = (*exec)->stopped();
    out.preempted = (*exec)->preempted();
    if (std::optional<std::string> why = (*exec)->failure())
      std::snprintf(out.failure, sizeof out.failure, "%s", why->c_str());
    if (run.gather) {
      absl::StatusOr<std::vector<NamedTensor>> params =
          (*exec)->GatherParameters();
      if (!params.ok())
        return fail(out, params.status());
      int64_t at = 0;
      for (const NamedTensor &t : *params) {
        int64_t n = static_cast<int64_t>(t.values.size()) * 4;
        if (at + n > static_cast<int64_t>(sizeof out.weights))
          return fail(out, absl::ResourceExhaustedError("weights too large"));
        std::memcpy(out.weights + at, t.values.data(), n);
        at += n;
      }
      out.weightBytes = at;
    }
    if (run.after)
      run.after(**exec);
    return true;
  }

  Shared *shared_ = nullptr;
};

double mean(const std::vector<double> &v, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i)
    s += v[i];
  return s / static_cast<double>(to - from);
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

TEST(ExecutorTest, MlpTrainsOnOneRank) {
  Ranks ranks;
  TrainingPlanOptions o;
  o.preset = Preset::Single;
  ASSERT_EQ(ranks.train(TrainingPlan(o), 1, forSteps(40)), "");
  std::vector<double> loss = ranks.losses(0);
  ASSERT_EQ(loss.size(), 40u);
  EXPECT_LT(mean(loss, 35, 40), 0.6 * mean(loss, 0, 5))
      << "first " << loss.front() << " last " << loss.back();
}

TEST(ExecutorTest, FsdpFullTrainsOnTwoRanks) {
  Ranks ranks;
  TrainingPlanOptions o;
  o.preset = Preset::FsdpFull;
  ASSERT_EQ(ranks.train(TrainingPlan(o), 2, forSteps(40)), "");
  std::vector<double> loss = ranks.losses(0);
  ASSERT_EQ(loss.size(), 40u);
  EXPECT_LT(mean(loss, 35, 40), 0.6 * mean(loss, 0, 5));
  // The progress reports are the ranks' mean loss, every step.
  RankRecord &r0 = ranks.rank(0);
  ASSERT_EQ(r0.numReports, 40);
  for (int s = 0; s < 40; ++s)
    EXPECT_NEAR(r0.reportLoss[s],
                0.5 * (ranks.rank(0).losses[s] + ranks.rank(1).losses[s]),
                1e-6);
  // Every rank ends with the same parameters.
  EXPECT_EQ(ranks.weights(0), ranks.weights(1));
}

TEST(ExecutorTest, PresetsGiveBitwiseIdenticalWeights) {
  // The invariant of DESIGN.md: gradients accumulate locally in f32 and are
  // reduced once per step in rank order, and the norm sums the same shards,
  // so every preset computes the same bits.
  std::vector<float> initial;
  {
    Ranks ranks;
    TrainingPlanOptions o;
    o.in = 9;
    ASSERT_EQ(ranks.train(TrainingPlan(o), 2, forSteps(0)), "");
    initial = ranks.weights(0);
  }
  std::vector<float> reference;
  for (Preset preset :
       {Preset::Ddp, Preset::Zero1, Preset::FsdpGradOp, Preset::FsdpFull}) {
    Ranks ranks;
    TrainingPlanOptions o;
    o.preset = preset;
    o.in = 9; // N = 16 * 9 + 16 + 4 * 16 + 4 = 228: shards of 114 at W = 2
    ASSERT_EQ(ranks.train(TrainingPlan(o), 2, forSteps(20)), "")
        << plan::examples::PresetName(preset);
    std::vector<float> w = ranks.weights(0);
    ASSERT_FALSE(w.empty());
    EXPECT_EQ(w, ranks.weights(1)) << plan::examples::PresetName(preset);
    EXPECT_NE(w, initial) << "no training happened";
    if (reference.empty())
      reference = w;
    else
      EXPECT_EQ(std::memcmp(w.data(), reference.data(), w.size() * 4), 0)
          << plan::examples::PresetName(preset) << " differs from ddp";
  }
}

TEST(ExecutorTest, OneAndTwoRanksAgreeAfterOneStep) {
  // The same global batch of 16: W = 1 accumulates 4 micro-batches of 4,
  // W = 2 two on each rank; both see the same 16 samples.
  std::vector<float> w[2];
  for (int world : {1, 2}) {
    Ranks ranks;
    TrainingPlanOptions o;
    o.preset = world == 1 ? Preset::Single : Preset::FsdpFull;
    o.clip = 0; // single has no reduction to take the norm over
    ASSERT_EQ(ranks.train(TrainingPlan(o), world, forSteps(1)), "");
    w[world - 1] = ranks.weights(0);
  }
  ASSERT_EQ(w[0].size(), w[1].size());
  for (size_t i = 0; i < w[0].size(); ++i)
    EXPECT_NEAR(w[0][i], w[1][i], 1e-5 * std::max(1.0f, std::fabs(w[0][i])))
        << "element " << i;
}

TEST(ExecutorTest, HybridShardingTrainsOnFourRanks) {
  // Shard groups {0, 1} and {2, 3}: parameters gathered inside a group,
  // gradients reduce-scattered in it and averaged across the groups.
  std::vector<float> w[2];
  for (int k = 0; k < 2; ++k) {
    Ranks ranks;
    TrainingPlanOptions o;
    o.preset = k == 0 ? Preset::Hybrid : Preset::FsdpFull;
    o.globalBatch = 32;
    ASSERT_EQ(ranks.train(TrainingPlan(o), 4, forSteps(30)), "");
    std::vector<double> loss = ranks.losses(0);
    EXPECT_LT(mean(loss, 25, 30), 0.6 * mean(loss, 0, 5));
    w[k] = ranks.weights(0);
    for (int r = 1; r < 4; ++r)
      EXPECT_EQ(ranks.weights(r), w[k]) << "rank " << r;
  }
  // Averaging in two stages rounds differently from one: close, not equal.
  ASSERT_EQ(w[0].size(), w[1].size());
  for (size_t i = 0; i < w[0].size(); ++i)
    EXPECT_NEAR(w[0][i], w[1][i], 1e-3) << "element " << i;
}

TEST(ExecutorTest, AccumulationMatchesOneLargeBatch) {
  // One rank: a global batch of 16 read as 4 micro-batches of 4 (A = 4)
  // or as one of 16 (A = 1) is the same 16 samples and the same mean.
  std::vector<float> w[2];
  for (int k = 0; k < 2; ++k) {
    Ranks ranks;
    TrainingPlanOptions o;
    o.preset = Preset::Single;
    o.clip = 0;
    o.microBatch = k == 0 ? 4 : 16;
    ASSERT_EQ(ranks.train(TrainingPlan(o), 1, forSteps(3)), "");
    w[k] = ranks.weights(0);
  }
  ASSERT_EQ(w[0].size(), w[1].size());
  for (size_t i = 0; i < w[0].size(); ++i)
    EXPECT_NEAR(w[0][i], w[1][i], 1e-5 * std::max(1.0f, std::fabs(w[0][i])))
        << "element " << i;
}

TEST(ExecutorTest, RunsAreDeterministic) {
  std::vector<float> w[2];
  std::vector<double> loss[2];
  for (int k = 0; k < 2; ++k) {
    Ranks ranks;
    TrainingPlanOptions o;
    o.preset = Preset::FsdpFull;
    ASSERT_EQ(ranks.train(TrainingPlan(o), 2, forSteps(10)), "");
    w[k] = ranks.weights(0);
    loss[k] = ranks.losses(1);
  }
  EXPECT_EQ(w[0], w[1]);
  EXPECT_EQ(loss[0], loss[1]);
}

TEST(ExecutorTest, TheCommThreadChangesNoBits) {
  // The comm stream on its own thread overlaps the collectives with the
  // compute the plan's events allow; the weights and losses stay the same
  // bits, for every preset, f32 and bf16, with accumulation.
  for (Preset preset :
       {Preset::Ddp, Preset::Zero1, Preset::FsdpGradOp, Preset::FsdpFull}) {
    for (fb::DType dtype : {fb::DType::F32, fb::DType::BF16}) {
      std::vector<float> w[2];
      std::vector<double> loss[2];
      for (int k = 0; k < 2; ++k) {
        Ranks ranks;
        TrainingPlanOptions o;
        o.preset = preset;
        o.paramDtype = dtype;
        o.in = 9; // shards of 114 at W = 2
        RunOptions run = forSteps(6);
        run.commThread = k == 1;
        ASSERT_EQ(ranks.train(TrainingPlan(o), 2, run), "")
            << plan::examples::PresetName(preset);
        w[k] = ranks.weights(0);
        loss[k] = ranks.losses(1);
        EXPECT_EQ(w[k], ranks.weights(1));
      }
      ASSERT_FALSE(w[0].empty());
      EXPECT_EQ(std::memcmp(w[0].data(), w[1].data(), w[0].size() * 4), 0)
          << plan::examples::PresetName(preset);
      EXPECT_EQ(loss[0], loss[1]) << plan::examples::PresetName(preset);
    }
  }
  // The tiny MLP gathers its parameters and reduce-scatters its gradients
  // on the comm stream, ordered by events: there the two threads overlap.
  std::vector<float> w[2];
  for (int k = 0; k < 2; ++k) {
    Ranks ranks;
    RunOptions run = forSteps(6);
    run.commThread = k == 1;
    ASSERT_EQ(ranks.train(plan::examples::TinyMlpPlan(), 2, run), "");
    w[k] = ranks.weights(0);
    EXPECT_EQ(w[k], ranks.weights(1));
  }
  ASSERT_FALSE(w[0].empty());
  EXPECT_EQ(std::memcmp(w[0].data(), w[1].data(), w[0].size() * 4), 0);
}

TEST(ExecutorTest, UnorderedStreamsNamesWhatTheCommThreadCannotRun) {
  // The tiny MLP's events order its gathers and reduce-scatters.
  plan::PlanBuilder ordered = plan::examples::TinyMlpPlan();
  absl::StatusOr<plan::LoadedPlan> loaded = plan::LoadPlan(ordered.finish());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<std::string> why = Executor::UnorderedStreams(*loaded, 2);
  ASSERT_TRUE(why.ok()) << why.status();
  EXPECT_EQ(*why, "");
  // A world size the plan cannot take is an error, not an answer.
  EXPECT_FALSE(Executor::UnorderedStreams(*loaded, 0).ok());

  // An all-reduce on the comm stream that does not wait for the relu on
  // the compute stream that writes its input.
  plan::PlanBuilder b = plan::examples::MinimalPlan();
  int32_t step = b.plan().step_block;
  int32_t x = b.plan().blocks[step]->instructions[0]->outputs[0];
  b.plan().buffers[x]->block = -1; // its uses grow: infer its interval again
  int32_t a = b.addBuffer(plan::PlanBuilder::full("a", fb::DType::F32, {4, 2}));
  int32_t y = b.addBuffer(plan::PlanBuilder::full("y", fb::DType::F32, {4, 2}));
  b.add(step, fb::Opcode::Relu, {x}, {a});
  fb::InstructionT &reduce = b.add(step, fb::Opcode::AllReduce, {a}, {y});
  reduce.ints = {0, 0, -1}; // world, sum, no bucket
  reduce.stream = 1;
  ASSERT_TRUE(b.inferLiveness().ok());
  loaded = plan::LoadPlan(b.finish());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  why = Executor::UnorderedStreams(*loaded, 1);
  ASSERT_TRUE(why.ok()) << why.status();
  EXPECT_NE(why->find("blocks[0].instructions[2] (all_reduce on stream 1) "
                      "reads bytes that blocks[0].instructions[1] (relu on "
                      "stream 0) writes"),
            std::string::npos)
      << *why;
}

TEST(ExecutorTest, MixedPrecisionTrainsAndPresetsAgree) {
  // bf16 parameters and activations, f32 masters and reductions: ddp keeps
  // a full bf16 copy, fsdp-full all-gathers bf16 shards; the bits agree.
  std::vector<float> w[2];
  for (int k = 0; k < 2; ++k) {
    Ranks ranks;
    TrainingPlanOptions o;
    o.preset = k == 0 ? Preset::Ddp : Preset::FsdpFull;
    o.paramDtype = fb::DType::BF16;
    ASSERT_EQ(ranks.train(TrainingPlan(o), 2, forSteps(30)), "");
    std::vector<double> loss = ranks.losses(0);
    EXPECT_LT(mean(loss, 25, 30), 0.6 * mean(loss, 0, 5));
    w[k] = ranks.weights(0);
  }
  EXPECT_EQ(w[0], w[1]);
}

TEST(ExecutorTest, SgdTrains) {
  Ranks ranks;
  TrainingPlanOptions o;
  o.preset = Preset::Ddp;
  o.adamw = false;
  o.lr = 0.1;
  o.schedule = fb::ScheduleKind::Linear;
  ASSERT_EQ(ranks.train(TrainingPlan(o), 2, forSteps(40)), "");
  std::vector<double> loss = ranks.losses(0);
  EXPECT_LT(mean(loss, 35, 40), 0.6 * mean(loss, 0, 5));
}

TEST(ExecutorTest, BigramLearnsTheSyntheticMarkovChain) {
  // Each token has at most 4 successors with probabilities 0.6, 0.25, 0.1,
  // 0.05: the best possible loss is their entropy, 1.06 nats, far below
  // ln(64) = 4.16 of a uniform guess.
  Ranks ranks;
  TrainingPlanOptions o;
  o.model = Model::Bigram;
  o.preset = Preset::FsdpFull;
  o.classes = 64;
  o.seq = 16;
  o.lr = 0.1;
  o.clip = 0;
  ASSERT_EQ(ranks.train(TrainingPlan(o), 2, forSteps(60)), "");
  std::vector<double> loss = ranks.losses(0);
  EXPECT_GT(loss.front(), 4.0);
  EXPECT_LT(mean(loss, 55, 60), 2.0);
}

TEST(ExecutorTest, ReadsTokenFiles) {
  // A token file whose every token is followed by (token * 7 + 3) % 50:
  // a bigram model learns it to a loss near zero.
  std::string dir =
      absl::StrFormat("%s/md-exec-tokens-%d", ::testing::TempDir(), getpid());
  ASSERT_TRUE(MakeDirectories(dir).ok());
  std::string path = dir + "/train.bin";
  std::vector<uint16_t> tokens(5000);
  tokens[0] = 1;
  for (size_t i = 1; i < tokens.size(); ++i)
    tokens[i] = static_cast<uint16_t>((tokens[i - 1] * 7 + 3) % 50);
  FILE *f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(tokens.data(), 2, tokens.size(), f);
  std::fclose(f);
  Ranks ranks;
  TrainingPlanOptions o;
  o.model = Model::Bigram;
  o.preset = Preset::Ddp;
  o.classes = 64;
  o.seq = 16;
  o.lr = 0.1;
  o.data = fb::DataKind::Tokens;
  o.dataPath = path;
  ASSERT_EQ(ranks.train(TrainingPlan(o), 2, forSteps(40)), "");
  std::vector<double> loss = ranks.losses(0);
  EXPECT_LT(mean(loss, 35, 40), 0.5);
  std::remove(path.c_str());
}

void writeNpy(const std::string &path, const char *descr,
              const std::string &shape, const void *data, size_t bytes) {
  std::string header = absl::StrFormat(
      "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
  while ((10 + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  FILE *f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  uint16_t len = static_cast<uint16_t>(header.size());
  std::fwrite(&len, 2, 1, f);
  std::fwrite(header.data(), 1, header.size(), f);
  std::fwrite(data, 1, bytes, f);
  std::fclose(f);
}

TEST(ExecutorTest, ReadsNpyArraysOverEpochs) {
  // 40 samples, y = (x0 > 0) + 2 (x1 > 0): 40 / (2 ranks x 4) = 5 batches
  // per epoch, so 10 steps of 2 micro-batches per rank run 4 epochs.
  std::string dir =
      absl::StrFormat("%s/md-exec-npy-%d", ::testing::TempDir(), getpid());
  ASSERT_TRUE(MakeDirectories(dir).ok());
  std::vector<float> x(40 * 8);
  std::vector<int32_t> y(40);
  for (int i = 0; i < 40; ++i) {
    for (int j = 0; j < 8; ++j)
      x[i * 8 + j] = std::sin(1.7f * i + 0.3f * j + 0.1f * i * j);
    y[i] = (x[i * 8] > 0 ? 1 : 0) + (x[i * 8 + 1] > 0 ? 2 : 0);
  }
  writeNpy(dir + "/train.0.npy", "<f4", "(40, 8)", x.data(), x.size() * 4);
  writeNpy(dir + "/train.1.npy", "<i4", "(40,)", y.data(), y.size() * 4);
  Ranks ranks;
  TrainingPlanOptions o;
  o.preset = Preset::FsdpFull;
  o.data = fb::DataKind::Npy;
  o.dataPath = dir + "/train.npy";
  ASSERT_EQ(ranks.train(TrainingPlan(o), 2, forSteps(40)), "");
  std::vector<double> loss = ranks.losses(0);
  EXPECT_LT(mean(loss, 35, 40), 0.6 * mean(loss, 0, 5));
  o.dataPath = dir + "/missing.npy";
  std::string failure = ranks.train(TrainingPlan(o), 1, forSteps(1));
  EXPECT_NE(failure.find("missing.0.npy: cannot open"), std::string::npos)
      << failure;
}

TEST(ExecutorTest, ResumesFromShardedCheckpointsOverEpochs) {
  // 40 npy samples, 5 batches per rank per epoch at W = 2 (2 per step), so
  // the step-3 checkpoint stands mid-epoch: resuming it gives the weights
  // and losses of the uninterrupted run, bit for bit, with AdamW (fsdp-full,
  // ddp with bf16 parameters), SGD with momentum (zero1) and at W = 4 in
  // hybrid shard groups. A W = 2 checkpoint loads at W = 4 and W = 1 with
  // the weights it saved.
  std::string dir =
      absl::StrFormat("%s/md-exec-resume-%d", ::testing::TempDir(), getpid());
  ASSERT_TRUE(MakeDirectories(dir).ok());
  std::vector<float> x(40 * 8);
  std::vector<int32_t> y(40);
  for (int i = 0; i < 40; ++i) {
    for (int j = 0; j < 8; ++j)
      x[i * 8 + j] = std::cos(1.3f * i + 0.7f * j);
    y[i] = (x[i * 8] > 0 ? 1 : 0) + (x[i * 8 + 1] > 0 ? 2 : 0);
  }
  writeNpy(dir + "/train.0.npy", "<f4", "(40, 8)", x.data(), x.size() * 4);
  writeNpy(dir + "/train.1.npy", "<i4", "(40,)", y.data(), y.size() * 4);
  struct Case {
    Preset preset;
    fb::DType param;
    bool adamw;
    int world;
  };
  for (const Case &c : {Case{Preset::FsdpFull, fb::DType::F32, true, 2},
                        Case{Preset::Ddp, fb::DType::BF16, true, 2},
                        Case{Preset::Zero1, fb::DType::F32, false, 2},
                        Case{Preset::Hybrid, fb::DType::F32, true, 4}}) {
    SCOPED_TRACE(
        absl::StrFormat("%s at W = %d", PresetName(c.preset), c.world));
    TrainingPlanOptions o;
    o.preset = c.preset;
    o.paramDtype = c.param;
    o.adamw = c.adamw;
    o.data = fb::DataKind::Npy;
    o.dataPath = dir + "/train.npy";
    o.saveEvery = 3;
    o.saveSharded = true;
    o.saveDir = absl::StrFormat("%s/%s-%d", dir, PresetName(c.preset), c.world);
    Ranks whole;
    ASSERT_EQ(whole.train(TrainingPlan(o), c.world, forSteps(7)), "");
    RunOptions run = forSteps(7);
    run.resume = o.saveDir + "/step_00000003";
    Ranks resumed;
    ASSERT_EQ(resumed.train(TrainingPlan(o), c.world, run), "");
    EXPECT_EQ(resumed.rank(0).numLosses, 4); // steps 4 to 7
    EXPECT_EQ(resumed.weights(0), whole.weights(0));
    std::vector<double> all = whole.losses(0);
    ASSERT_EQ(all.size(), 7u);
    std::vector<double> tail(all.begin() + 3, all.end());
    EXPECT_EQ(resumed.losses(0), tail);
  }
  // Across W: the fsdp-full checkpoint of W = 2 at step 6 holds the
  // weights of that run's step 6.
  TrainingPlanOptions o;
  o.preset = Preset::FsdpFull;
  o.data = fb::DataKind::Npy;
  o.dataPath = dir + "/train.npy";
  Ranks at6;
  ASSERT_EQ(at6.train(TrainingPlan(o), 2, forSteps(6)), "");
  for (int world : {1, 4}) {
    SCOPED_TRACE(absl::StrFormat("loaded at W = %d", world));
    RunOptions run = forSteps(6);
    run.resume = dir + "/fsdp-full-2/step_00000006";
    Ranks loaded;
    ASSERT_EQ(loaded.train(TrainingPlan(o), world, run), "");
    EXPECT_EQ(loaded.rank(0).numLosses, 0);
    EXPECT_EQ(loaded.weights(0), at6.weights(0));
  }
  std::filesystem::remove_all(dir);
}

TEST(ExecutorTest, HooksLogEvaluateAndExit) {
  Ranks ranks;
  TrainingPlanOptions o;
  o.preset = Preset::FsdpFull;
  o.logEvery = 5;
  o.evalEvery = 10;
  o.evalBatches = 3;
  o.exitAtStep = 12;
  RunOptions run = forSteps(100);
  run.logEvery = 0;
  ASSERT_EQ(ranks.train(TrainingPlan(o), 2, run), "");
  RankRecord &r0 = ranks.rank(0);
  EXPECT_EQ(r0.stepsDone, 12);
  EXPECT_EQ(r0.stopped, 1);
  EXPECT_EQ(ranks.rank(1).stepsDone, 12);
  std::string logs = r0.logs;
  // "train" every 5 steps, "val" every 10, the rank-0 print before exit.
  EXPECT_NE(logs.find("5 train train="), std::string::npos) << logs;
  EXPECT_NE(logs.find("10 train train="), std::string::npos) << logs;
  EXPECT_NE(logs.find("10 val loss="), std::string::npos) << logs;
  EXPECT_NE(logs.find("12 print stopping at step 12="), std::string::npos)
      << logs;
  EXPECT_EQ(logs.find("15 train"), std::string::npos) << logs;
  EXPECT_EQ(ranks.rank(1).numLogs, 0) << "logs come from rank 0 only";
  // The logged train loss is the ranks' mean of the step's loss.
  double logged = 0;
  ASSERT_EQ(std::sscanf(logs.c_str() + logs.find("5 train train=") + 14, "%lf",
                        &logged),
            1);
  EXPECT_NEAR(logged, 0.5 * (ranks.rank(0).losses[4] + ranks.rank(1).losses[4]),
              1e-4);
}

TEST(ExecutorTest, AFailingExitEndsEveryRankAfterItsStepAsFailed) {
  TrainingPlanOptions o;
  o.preset = Preset::FsdpFull;
  o.exitAtStep = 4;
  o.exitFails = true;
  Ranks ranks;
  ASSERT_EQ(ranks.train(TrainingPlan(o), 2, forSteps(100)), "");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks.rank(r).stepsDone, 4) << "rank " << r;
    EXPECT_TRUE(ranks.rank(r).stopped) << "rank " << r;
    EXPECT_STREQ(ranks.rank(r).failure, "reached the step limit")
        << "rank " << r;
  }
  // A failure is not reported as a stop; the step's print still ran.
  EXPECT_EQ(ranks.rank(0).exitReports, 0);
  EXPECT_NE(std::string(ranks.rank(0).logs).find("4 print stopping at step"),
            std::string::npos);
  // The same exit without the failure is a stop.
  o.exitFails = false;
  Ranks stopped;
  ASSERT_EQ(stopped.train(TrainingPlan(o), 2, forSteps(100)), "");
  EXPECT_EQ(stopped.rank(0).stepsDone, 4);
  EXPECT_STREQ(stopped.rank(0).failure, "");
  EXPECT_EQ(stopped.rank(0).exitReports, 1);
}

TEST(ExecutorTest, ASaveWithKeepLeavesTheNewestCheckpoints) {
  std::string dir =
      absl::StrFormat("%s/md-exec-keep-%d", ::testing::TempDir(), getpid());
  for (bool sharded : {false, true}) {
    TrainingPlanOptions o;
    o.preset = Preset::FsdpFull;
    o.saveEvery = 1;
    o.saveSharded = sharded;
    o.saveKeep = 2;
    o.saveDir = dir + (sharded ? "/sharded" : "/full");
    Ranks ranks;
    ASSERT_EQ(ranks.train(TrainingPlan(o), 2, forSteps(5)), "");
    std::vector<std::string> names;
    for (const auto &e : std::filesystem::directory_iterator(o.saveDir))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    std::vector<std::string> want =
        sharded ? std::vector<std::string>{"step_00000004", "step_00000005"}
                : std::vector<std::string>{"step_00000004.safetensors",
                                           "step_00000005.safetensors"};
    EXPECT_EQ(names, want);
  }
  std::filesystem::remove_all(dir);
}

TEST(ExecutorTest, SavesFullAndShardedCheckpoints) {
  std::string dir =
      absl::StrFormat("%s/md-exec-ckpt-%d", ::testing::TempDir(), getpid());
  for (bool sharded : {false, true}) {
    Ranks ranks;
    TrainingPlanOptions o;
    o.preset = Preset::FsdpFull;
    o.in = 9; // shards with padding
    o.saveEvery = 3;
    o.saveSharded = sharded;
    o.saveDir = dir + (sharded ? "/sharded" : "/full");
    RunOptions run = forSteps(6);
    std::string final = dir + "/final.safetensors";
    run.after = [final](Executor &exec) { (void)exec.SaveFull(final); };
    ASSERT_EQ(ranks.train(TrainingPlan(o), 2, run), "");
    if (!sharded) {
      std::map<std::string, std::string> meta;
      absl::StatusOr<std::vector<SafetensorsTensor>> t =
          ReadSafetensors(o.saveDir + "/step_00000006.safetensors", &meta);
      ASSERT_TRUE(t.ok()) << t.status();
      ASSERT_EQ(t->size(), 4u);
      EXPECT_EQ(meta["step"], "6");
      // Tensors by name with their global shapes, the trained values.
      std::vector<float> all;
      for (const char *name :
           {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) {
        auto it =
            std::find_if(t->begin(), t->end(), [&](const SafetensorsTensor &x) {
              return x.name == name;
            });
        ASSERT_NE(it, t->end()) << name;
        EXPECT_EQ(it->dtype, "F32");
        size_t n = it->data.size() / 4;
        all.resize(all.size() + n);
        std::memcpy(all.data() + all.size() - n, it->data.data(), n * 4);
      }
      EXPECT_EQ(all, ranks.weights(0));
      EXPECT_TRUE(
          ReadSafetensors(o.saveDir + "/step_00000003.safetensors").ok());
      EXPECT_TRUE(ReadSafetensors(final).ok());
    } else {
      std::string step = o.saveDir + "/step_00000006";
      EXPECT_EQ(access((step + "/meta.json").c_str(), F_OK), 0);
      for (int r = 0; r < 2; ++r) {
        absl::StatusOr<std::vector<SafetensorsTensor>> t = ReadSafetensors(
            absl::StrFormat("%s/rank_%05d.safetensors", step, r));
        ASSERT_TRUE(t.ok()) << t.status();
        auto it =
            std::find_if(t->begin(), t->end(), [](const SafetensorsTensor &x) {
              return x.name == "u0.master";
            });
        ASSERT_NE(it, t->end());
        EXPECT_EQ(it->shape, std::vector<int64_t>{114}); // ceil(228 / 2)
      }
      EXPECT_NE(access((step + ".tmp").c_str(), F_OK), 0);
    }
  }
}

TEST(ExecutorTest, APreemptedRunStopsEveryRankAtOneStepAndSavesThere) {
  // Rank 1 alone is asked to stop after step 2 (as SIGTERM would): at the
  // end of step 3 every rank stops, and the plan's sharded save (every 5
  // steps) is written at step 3; resuming it gives the uninterrupted run's
  // weights bit for bit.
  std::string dir =
      absl::StrFormat("%s/md-exec-preempt-%d", ::testing::TempDir(), getpid());
  TrainingPlanOptions o;
  o.preset = Preset::FsdpFull;
  o.saveEvery = 5;
  o.saveSharded = true;
  o.saveDir = dir;
  RunOptions run = forSteps(8);
  run.preemptRank = 1;
  run.preemptAfter = 2;
  Ranks preempted;
  ASSERT_EQ(preempted.train(TrainingPlan(o), 2, run), "");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(preempted.rank(r).stepsDone, 3) << "rank " << r;
    EXPECT_TRUE(preempted.rank(r).preempted) << "rank " << r;
  }
  EXPECT_EQ(access((dir + "/step_00000003/meta.json").c_str(), F_OK), 0);
  Ranks whole;
  ASSERT_EQ(whole.train(TrainingPlan(o), 2, forSteps(8)), "");
  EXPECT_FALSE(whole.rank(0).preempted);
  RunOptions rest = forSteps(8);
  rest.resume = dir + "/step_00000003";
  Ranks resumed;
  ASSERT_EQ(resumed.train(TrainingPlan(o), 2, rest), "");
  EXPECT_EQ(resumed.weights(0), whole.weights(0));
  std::filesystem::remove_all(dir);
}

TEST(ExecutorTest, ANanLossIsAnErrorNamingTheStep) {
  Ranks ranks;
  TrainingPlanOptions o;
  o.preset = Preset::Ddp;
  o.adamw = false;
  o.lr = 1e30;
  o.warmup = 0;
  o.clip = 0;
  std::string failure = ranks.train(TrainingPlan(o), 2, forSteps(10));
  EXPECT_NE(failure.find("step 2: record_loss at blocks["), std::string::npos)
      << failure;
  EXPECT_NE(failure.find("the loss is "), std::string::npos) << failure;
}

TEST(ExecutorTest, RefusesACommOfTheWrongSize) {
  Ranks ranks;
  TrainingPlanOptions o;
  o.pinnedWorldSize = 2;
  std::string failure = ranks.train(TrainingPlan(o), 1, forSteps(1));
  EXPECT_NE(failure.find("pinned to world size 2"), std::string::npos)
      << failure;
}

/// A plan whose step block runs every kernel opcode once on small shapes
/// (forward ops, their gradients, the optimizer updates, the buffer ops),
/// for the executor's argument mapping: a swapped operand or attribute
/// fails a kernel's shape check or turns the loss non-finite.
plan::PlanBuilder EveryKernelPlan() {
  using fb::DType;
  using fb::Opcode;
  plan::PlanBuilder b;
  b.header().model = "every_kernel";
  b.header().plan_name = b.header().preset = "single";
  b.header().world_size = 1;
  fb::PlanOptionsT &opt = *b.header().options;
  opt.param_dtype = opt.reduce_dtype = opt.buffer_dtype = opt.master_dtype =
      DType::F32;
  opt.bucket_cap = 1 << 20;
  b.recipe().global_batch = 2;
  b.recipe().micro_batch = 2;
  b.recipe().optimizer->lr = 0.1;
  b.recipe().optimizer->beta1 = 0.9;
  b.recipe().optimizer->beta2 = 0.99;
  b.recipe().optimizer->eps = 1e-8;
  b.recipe().schedule->steps = 10;
  b.recipe().train_data = b.addDataset(fb::DataKind::Synthetic, "", 3);
  int32_t step = b.addBlock(fb::BlockKind::Step);
  b.setStepBlock(step);
  auto buf = [&](const char *name, std::vector<int64_t> shape,
                 DType t = DType::F32) {
    return b.addBuffer(plan::PlanBuilder::full(name, t, std::move(shape)));
  };
  auto add = [&](Opcode op, std::vector<int32_t> in,
                 std::vector<int32_t> out) -> fb::InstructionT & {
    return b.add(step, op, in, out);
  };
  auto constant = [&](const char *name, std::vector<int64_t> shape) {
    int32_t x = buf(name, shape);
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    std::vector<double> v;
    for (int64_t i = 0; i < n; ++i)
      v.push_back(0.05 * static_cast<double>((i * 7) % 11) - 0.2);
    add(Opcode::Constant, {}, {x}).floats = v;
    return x;
  };
  const int64_t B = 2, T = 4, C = 8, V = 16;
  int32_t x = buf("x", {B, T, C}), ids = buf("ids", {B, T}, DType::I32);
  add(Opcode::Batch, {}, {x, ids}).ints = {0};
  int32_t gamma = constant("gamma", {C}), beta = constant("beta", {C});
  int32_t w = constant("w", {C, C}), bias = constant("bias", {C});
  int32_t table = constant("table", {V, C}), wout = constant("wout", {V, C});

  int32_t ln = buf("ln", {B, T, C});
  add(Opcode::LayerNorm, {x, gamma, beta}, {ln}).floats = {1e-5};
  int32_t q = buf("q", {B, T, C});
  add(Opcode::Matmul, {ln, w, bias}, {q}).ints = {0, 1};
  int32_t att = buf("att", {B, T, C});
  add(Opcode::CausalAttention, {q, q, q}, {att}).ints = {2};
  int32_t ge = buf("gelu", {B, T, C});
  add(Opcode::Gelu, {att}, {ge}).ints = {1};
  int32_t re = buf("relu", {B, T, C});
  add(Opcode::Relu, {ge}, {re});
  int32_t rms = buf("rms", {B, T, C});
  add(Opcode::RmsNorm, {re, gamma}, {rms}).floats = {1e-6};
  int32_t bn = buf("bn", {B, T, C}), mean = buf("bn.mean", {C}),
          invstd = buf("bn.invstd", {C});
  add(Opcode::BatchNorm, {rms, gamma, beta}, {bn, mean, invstd}).floats = {
      1e-5};
  int32_t emb = buf("emb", {B, T, C});
  add(Opcode::Embedding, {table, ids}, {emb});
  int32_t s1 = buf("s1", {B, T, C}), s2 = buf("s2", {B, T, C}),
          s3 = buf("s3", {B, T, C}), s4 = buf("s4", {B, T, C});
  add(Opcode::Add, {bn, emb}, {s1});
  add(Opcode::Sub, {s1, beta}, {s2});
  add(Opcode::Mul, {s2, x}, {s3});
  add(Opcode::Scale, {s3}, {s4}).floats = {0.5};
  int32_t logits = buf("logits", {B, T, V});
  add(Opcode::Matmul, {s4, wout}, {logits}).ints = {0, 1};
  int32_t loss = buf("loss", {});
  add(Opcode::CrossEntropy, {logits, ids}, {loss}).ints = {3};
  add(Opcode::RecordLoss, {loss}, {});
  int32_t sm = buf("softmax", {B, T, V});
  add(Opcode::Softmax, {logits}, {sm}).ints = {-1};
  int32_t tr = buf("transpose", {B, V, T});
  add(Opcode::Transpose, {sm}, {tr}).ints = {0, 2, 1};
  int32_t rs = buf("reshape", {B, V * T});
  add(Opcode::Reshape, {tr}, {rs});
  int32_t mn = buf("mean", {B});
  add(Opcode::Mean, {rs}, {mn}).ints = {0, 1};
  int32_t total = buf("sum", {1});
  add(Opcode::Sum, {mn}, {total}).ints = {1, 0};

  // Gradients.
  int32_t one = buf("one", {});
  add(Opcode::Constant, {}, {one}).floats = {1.0};
  int32_t dl = buf("dlogits", {B, T, V});
  add(Opcode::CrossEntropyGrad, {one, logits, ids}, {dl}).ints = {3};
  int32_t ds4 = buf("ds4", {B, T, C}), dwout = buf("dwout", {V, C});
  add(Opcode::MatmulGrad, {dl, s4, wout}, {ds4, dwout}).ints = {0, 1};
  int32_t dtable = buf("dtable", {V, C});
  add(Opcode::EmbeddingGrad, {ds4, ids}, {dtable}).ints = {V};
  int32_t dbn = buf("dbn", {B, T, C}), dg1 = buf("dg1", {C}),
          db1 = buf("db1", {C});
  add(Opcode::BatchNormGrad, {ds4, rms, gamma, mean, invstd}, {dbn, dg1, db1});
  int32_t drms = buf("drms", {B, T, C}), dg2 = buf("dg2", {C});
  add(Opcode::RmsNormGrad, {dbn, re, gamma}, {drms, dg2}).floats = {1e-6};
  int32_t dre = buf("dre", {B, T, C});
  add(Opcode::ReluGrad, {drms, ge}, {dre});
  int32_t dge = buf("dge", {B, T, C});
  add(Opcode::GeluGrad, {dre, att}, {dge}).ints = {1};
  int32_t dq = buf("dq", {B, T, C}), dk = buf("dk", {B, T, C}),
          dv = buf("dv", {B, T, C});
  add(Opcode::CausalAttentionGrad, {dge, q, q, q}, {dq, dk, dv}).ints = {2};
  int32_t acc = buf("acc", {B, T, C}), acc2 = buf("acc2", {B, T, C});
  add(Opcode::Accumulate, {dq, dk}, {acc});
  add(Opcode::Accumulate, {acc, dv}, {acc2});
  int32_t dln = buf("dln", {B, T, C}), dw = buf("dw", {C, C}),
          dbias = buf("dbias", {C});
  add(Opcode::MatmulGrad, {acc2, ln, w}, {dln, dw, dbias}).ints = {0, 1};
  int32_t dx = buf("dx", {B, T, C}), dg3 = buf("dg3", {C}),
          db3 = buf("db3", {C});
  add(Opcode::LayerNormGrad, {dln, x, gamma}, {dx, dg3, db3}).floats = {1e-5};
  int32_t dsm = buf("dsm", {B, T, V});
  add(Opcode::SoftmaxGrad, {dl, sm}, {dsm}).ints = {-1};
  int32_t drs = buf("drs", {B, V * T});
  add(Opcode::MeanGrad, {mn}, {drs}).ints = {0, 1};
  int32_t dmn = buf("dmn", {B});
  add(Opcode::SumGrad, {total}, {dmn}).ints = {1, 0};
  int32_t summed = buf("sum_to", {V});
  add(Opcode::SumTo, {dl}, {summed});
  int32_t range = buf("arange", {T}, DType::I64);
  add(Opcode::Arange, {}, {range}).ints = {0, T};
  int32_t half = buf("x.bf16", {B, T, C}, DType::BF16),
          back = buf("x.back", {B, T, C});
  add(Opcode::Cast, {x}, {half});
  add(Opcode::Cast, {half}, {back});

  // Buffers and the optimizer on a flat gradient.
  const int64_t N = C * C + C;
  int32_t flat = buf("flat", {N + 4});
  add(Opcode::Flatten, {dw, dbias}, {flat});
  int32_t tail = buf("view", {C});
  add(Opcode::View, {flat}, {tail}).ints = {C * C};
  int32_t shard = b.addBuffer(
      plan::PlanBuilder::shard("slice", DType::F32, N + 4, fb::Group::World));
  add(Opcode::ShardSlice, {flat}, {shard}).ints = {0};
  int32_t sq = buf("norm.sq", {}), norm = buf("norm", {});
  add(Opcode::GlobalNorm, {shard, tail}, {sq}).ints = {1};
  add(Opcode::Sqrt, {sq}, {norm});
  int32_t clipped = buf("clipped", {N + 4}),
          tailClipped = buf("tail.clipped", {C});
  add(Opcode::Clip, {flat, tail, norm}, {clipped, tailClipped}).floats = {0.5};
  int32_t param = constant("param", {N + 4});
  int32_t lr = buf("lr", {}), st = buf("step", {}, DType::I64),
          st1 = buf("step1", {}, DType::I64), c1 = buf("c1", {}, DType::I64);
  add(Opcode::Step, {}, {st});
  add(Opcode::Constant, {}, {c1}).ints = {1};
  add(Opcode::ScalarArith, {st, c1}, {st1}).ints = {
      static_cast<int64_t>(fb::ArithKind::Add)};
  add(Opcode::Lr, {st}, {lr});
  int32_t zeros = buf("zeros", {N + 4});
  add(Opcode::Scale, {param}, {zeros}).floats = {0.0};
  int32_t p1 = buf("p1", {N + 4}), m1 = buf("m1", {N + 4}),
          v1 = buf("v1", {N + 4});
  add(Opcode::AdamWUpdate, {param, clipped, zeros, zeros, lr, st1},
      {p1, m1, v1})
      .floats = {0.9, 0.99, 1e-8, 0.01};
  int32_t p2 = buf("p2", {N + 4}), mom = buf("mom", {N + 4});
  fb::InstructionT &sgd =
      add(Opcode::SgdUpdate, {p1, clipped, zeros, lr, st1}, {p2, mom});
  sgd.floats = {0.9, 0.0, 0.0};
  sgd.ints = {1};
  int32_t check = buf("check", {});
  add(Opcode::GlobalNorm,
      {p2, mom, m1, v1, dg1, db1, dg2, dg3, db3, dtable, dwout, dsm, drs, dmn,
       summed, back, dx},
      {check})
      .ints = {0};
  add(Opcode::RecordLoss, {check}, {});
  if (!b.inferLiveness().ok())
    std::abort();
  return b;
}

TEST(ExecutorTest, EveryKernelOpcodeRuns) {
  Ranks ranks;
  ASSERT_EQ(ranks.train(EveryKernelPlan(), 1, forSteps(2)), "");
  std::vector<double> loss = ranks.losses(0);
  ASSERT_EQ(loss.size(), 2u);
  for (double l : loss)
    EXPECT_TRUE(std::isfinite(l) && l > 0) << l;
}

/// The start of a plan for testing hooks: ddp in f32 on synthetic data;
/// the step reads a batch and records the mean of x as the loss, so every
/// rank's loss differs. Returns the (empty) hooks block.
int32_t HookTestPlan(plan::PlanBuilder &b, const char *model) {
  using fb::DType;
  using fb::Opcode;
  b.header().model = model;
  b.header().plan_name = b.header().preset = "ddp";
  fb::PlanOptionsT &opt = *b.header().options;
  opt.param_dtype = opt.reduce_dtype = opt.buffer_dtype = opt.master_dtype =
      DType::F32;
  opt.bucket_cap = 1 << 20;
  b.recipe().global_batch = 4;
  b.recipe().micro_batch = 2;
  b.recipe().optimizer->lr = 0.1;
  b.recipe().optimizer->beta1 = 0.9;
  b.recipe().optimizer->beta2 = 0.99;
  b.recipe().optimizer->eps = 1e-8;
  b.recipe().schedule->steps = 10;
  b.recipe().train_data = b.addDataset(fb::DataKind::Synthetic, "", 3);
  int32_t step = b.addBlock(fb::BlockKind::Step);
  b.setStepBlock(step);
  int32_t x = b.addBuffer(plan::PlanBuilder::full("x", DType::F32, {2, 3}));
  b.add(step, Opcode::Batch, {}, {x}).ints = {0};
  int32_t mx = b.addBuffer(plan::PlanBuilder::full("mean", DType::F32, {}));
  b.add(step, Opcode::Mean, {x}, {mx}).ints = {0, 0, 1};
  b.add(step, Opcode::RecordLoss, {mx});
  int32_t hooks = b.addBlock(fb::BlockKind::Hooks);
  b.setHooksBlock(hooks);
  return hooks;
}

/// A plan whose hooks exercise control flow and the collectives the
/// training plans do not: for, if/else with results, broadcast, barrier, and
/// all-gather / reduce-scatter along an inner axis. The step reads a batch
/// and records the mean of x as the loss, so every rank's loss differs.
plan::PlanBuilder ControlPlan() {
  using fb::DType;
  using fb::Opcode;
  plan::PlanBuilder b;
  int32_t hooks = HookTestPlan(b, "control");
  auto buf = [&](const char *name, std::vector<int64_t> shape,
                 DType t = DType::F32) {
    return b.addBuffer(plan::PlanBuilder::full(name, t, std::move(shape)));
  };
  auto group = [](fb::Group g) { return static_cast<int64_t>(g); };
  // for i in 0..3 { print("iteration", i) }: the same on every rank, so
  // rank0_only (mdc marks such prints).
  int32_t lb = buf("lb", {}, DType::I64), ub = buf("ub", {}, DType::I64),
          iv = buf("iv", {}, DType::I64);
  b.add(hooks, Opcode::Constant, {}, {lb}).ints = {0};
  b.add(hooks, Opcode::Constant, {}, {ub}).ints = {3};
  int32_t body = b.addBlock(fb::BlockKind::ForBody);
  b.add(hooks, Opcode::For, {lb, ub}, {iv}).blocks = {body};
  fb::InstructionT &iteration = b.add(body, Opcode::Print, {iv});
  iteration.strings = {"iteration"};
  iteration.rank0_only = true;
  // branch = step >= 2 ? 1.5 : 2.5
  int32_t st = buf("step", {}, DType::I64), two = buf("two", {}, DType::I64),
          cond = buf("cond", {}, DType::Bool), branch = buf("branch", {});
  b.add(hooks, Opcode::Step, {}, {st});
  b.add(hooks, Opcode::Constant, {}, {two}).ints = {2};
  b.add(hooks, Opcode::ScalarCompare, {st, two}, {cond}).ints = {
      static_cast<int64_t>(fb::CompareKind::Ge)};
  int32_t thenB = b.addBlock(fb::BlockKind::Then);
  int32_t elseB = b.addBlock(fb::BlockKind::Else);
  int32_t a = buf("a", {}), c = buf("c", {});
  b.add(thenB, Opcode::Constant, {}, {a}).floats = {1.5};
  b.add(thenB, Opcode::Yield, {a});
  b.add(elseB, Opcode::Constant, {}, {c}).floats = {2.5};
  b.add(elseB, Opcode::Yield, {c});
  b.add(hooks, Opcode::If, {cond}, {branch}).blocks = {thenB, elseB};
  b.add(hooks, Opcode::Log, {branch}).strings = {"branch"};
  // Rank 1's loss, broadcast.
  int32_t loss = buf("loss", {}), bcast = buf("bcast", {});
  b.add(hooks, Opcode::Loss, {}, {loss});
  b.add(hooks, Opcode::Broadcast, {loss}, {bcast}).ints = {
      group(fb::Group::World), -1, 1};
  b.add(hooks, Opcode::Log, {bcast}).strings = {"bcast"};
  b.add(hooks, Opcode::Barrier).ints = {group(fb::Group::World), -1};
  // [2, 3] = loss * k, gathered along axis 1 into [2, 6], reduce-scattered
  // back (sum) along axis 1.
  int32_t k = buf("k", {2, 3}), part = buf("part", {2, 3}),
          whole = buf("whole", {2, 6}), back = buf("back", {2, 3});
  b.add(hooks, Opcode::Constant, {}, {k}).floats = {1, 2, 3, 4, 5, 6};
  b.add(hooks, Opcode::Mul, {k, loss}, {part});
  b.add(hooks, Opcode::AllGather, {part}, {whole}).ints = {
      group(fb::Group::World), -1, 1};
  b.add(hooks, Opcode::ReduceScatter, {whole}, {back}).ints = {
      group(fb::Group::World), static_cast<int64_t>(fb::Reduction::Sum), -1, 1};
  b.add(hooks, Opcode::Log, {whole, back}).strings = {"axis", "whole", "back"};
  // every minute: rank 0's clock decides, broadcast to all (not due here).
  int32_t hourly = b.addBlock(fb::BlockKind::Every);
  fb::InstructionT &every = b.add(hooks, Opcode::Every);
  every.ints = {1, static_cast<int64_t>(fb::PeriodUnit::Minutes)};
  every.blocks = {hourly};
  b.add(hourly, Opcode::Print).strings = {"a minute passed"};
  if (!b.inferLiveness().ok())
    std::abort();
  return b;
}

TEST(ExecutorTest, ControlFlowAndInnerAxisCollectives) {
  Ranks ranks;
  ASSERT_EQ(ranks.train(ControlPlan(), 2, forSteps(2)), "");
  std::string logs = ranks.rank(0).logs;
  double l0 = ranks.rank(0).losses[1], l1 = ranks.rank(1).losses[1];
  EXPECT_NE(logs.find("1 print iteration 0=0;1 print iteration 1=0;1 print "
                      "iteration 2=0;"),
            std::string::npos)
      << logs;
  EXPECT_EQ(std::string(ranks.rank(1).logs).find("iteration"),
            std::string::npos)
      << ranks.rank(1).logs;
  EXPECT_NE(logs.find("1 branch branch=2.5;"), std::string::npos) << logs;
  EXPECT_NE(logs.find("2 branch branch=1.5;"), std::string::npos) << logs;
  EXPECT_EQ(logs.find("a minute passed"), std::string::npos) << logs;
  EXPECT_NE(logs.find(absl::StrFormat("2 bcast bcast=%.6g;", l1)),
            std::string::npos)
      << logs;
  // whole = [l0 k | l1 k] row by row; back = rank 0's block of 2 * whole.
  std::string want = "2 axis";
  const float kk[6] = {1, 2, 3, 4, 5, 6};
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 6; ++j)
      want +=
          absl::StrFormat(" whole[%d]=%.6g", r * 6 + j,
                          (j < 3 ? float(l0) : float(l1)) * kk[r * 3 + j % 3]);
  for (int i = 0; i < 6; ++i)
    want += absl::StrFormat(" back[%d]=%.6g", i, 2 * (float(l0) * kk[i]));
  EXPECT_NE(logs.find(want), std::string::npos) << logs << "\nwant " << want;
}

/// A plan whose hooks read this rank's own numbers, the plan's only
/// per-rank values: sum over ranks of 10 * rank + local_rank, and a branch
/// on `rank == 1` whose arms both all-reduce (sum) over the world, 5 on
/// rank 1 and 7 elsewhere; the else arm's reduction is `elseReduction`.
plan::PlanBuilder RankPlan(fb::Reduction elseReduction = fb::Reduction::Sum) {
  using fb::DType;
  using fb::Opcode;
  plan::PlanBuilder b;
  int32_t hooks = HookTestPlan(b, "ranks");
  auto buf = [&](const char *name, std::vector<int64_t> shape,
                 DType t = DType::F32) {
    return b.addBuffer(plan::PlanBuilder::full(name, t, std::move(shape)));
  };
  auto arith = [](fb::ArithKind k) { return static_cast<int64_t>(k); };
  int32_t rank = buf("rank", {}, DType::I64),
          local = buf("local_rank", {}, DType::I64),
          ten = buf("ten", {}, DType::I64), tens = buf("tens", {}, DType::I64),
          code = buf("code", {}, DType::I64), codef = buf("codef", {}),
          total = buf("total", {});
  b.add(hooks, Opcode::Rank, {}, {rank});
  b.add(hooks, Opcode::LocalRank, {}, {local});
  b.add(hooks, Opcode::Constant, {}, {ten}).ints = {10};
  b.add(hooks, Opcode::ScalarArith, {rank, ten}, {tens}).ints = {
      arith(fb::ArithKind::Mul)};
  b.add(hooks, Opcode::ScalarArith, {tens, local}, {code}).ints = {
      arith(fb::ArithKind::Add)};
  b.add(hooks, Opcode::ScalarConvert, {code}, {codef});
  b.add(hooks, Opcode::AllReduce, {codef}, {total}).ints = {
      static_cast<int64_t>(fb::Group::World),
      static_cast<int64_t>(fb::Reduction::Sum), -1};
  b.add(hooks, Opcode::Log, {total}).strings = {"ranks"};
  // if rank == 1 { sum(5.0) } else { sum(7.0) }: every rank reaches one
  // all-reduce, whichever arm it takes.
  int32_t one = buf("one", {}, DType::I64), cond = buf("cond", {}, DType::Bool),
          picked = buf("picked", {});
  b.add(hooks, Opcode::Constant, {}, {one}).ints = {1};
  b.add(hooks, Opcode::ScalarCompare, {rank, one}, {cond}).ints = {
      static_cast<int64_t>(fb::CompareKind::Eq)};
  int32_t thenB = b.addBlock(fb::BlockKind::Then);
  int32_t elseB = b.addBlock(fb::BlockKind::Else);
  int32_t five = buf("five", {}), seven = buf("seven", {}),
          fives = buf("fives", {}), sevens = buf("sevens", {});
  b.add(thenB, Opcode::Constant, {}, {five}).floats = {5};
  b.add(thenB, Opcode::AllReduce, {five}, {fives}).ints = {
      static_cast<int64_t>(fb::Group::World),
      static_cast<int64_t>(fb::Reduction::Sum), -1};
  b.add(thenB, Opcode::Yield, {fives});
  b.add(elseB, Opcode::Constant, {}, {seven}).floats = {7};
  b.add(elseB, Opcode::AllReduce, {seven}, {sevens}).ints = {
      static_cast<int64_t>(fb::Group::World),
      static_cast<int64_t>(elseReduction), -1};
  b.add(elseB, Opcode::Yield, {sevens});
  b.add(hooks, Opcode::If, {cond}, {picked}).blocks = {thenB, elseB};
  b.add(hooks, Opcode::Log, {picked}).strings = {"branch"};
  if (!b.inferLiveness().ok())
    std::abort();
  return b;
}

TEST(ExecutorTest, EachRankResolvesItsOwnRankAndLocalRank) {
  Ranks ranks;
  ASSERT_EQ(ranks.train(RankPlan(), 2, forSteps(1)), "");
  std::string logs = ranks.rank(0).logs;
  // 10 * 0 + 0 on rank 0 and 10 * 1 + 1 on rank 1 (one node: local = rank).
  EXPECT_NE(logs.find("1 ranks ranks=11;"), std::string::npos) << logs;
  // 7 from rank 0's arm, 5 from rank 1's, in one all-reduce.
  EXPECT_NE(logs.find("1 branch branch=12;"), std::string::npos) << logs;
}

TEST(ExecutorTest, RefusesArmsOfARankBranchThatCommunicateDifferently) {
  // The arms alike load (the test above); a max in one arm and a sum in the
  // other would mix two collectives: the loader refuses it.
  EXPECT_TRUE(plan::LoadPlan(RankPlan().finish()).ok());
  absl::StatusOr<plan::LoadedPlan> loaded =
      plan::LoadPlan(RankPlan(fb::Reduction::Max).finish());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(std::string(loaded.status().message())
                .find("all_reduce runs only on the ranks where the condition "
                      "of blocks[1].instructions[10] holds"),
            std::string::npos)
      << loaded.status();
}

TEST(ExecutorTest, EveryNestsInTheHooksButNotInTheStep) {
  // every 1 steps { every 1 steps { print("inner") } }, as `every` may nest.
  auto nested = [](bool inStep) {
    plan::PlanBuilder b = RankPlan();
    int32_t inner = b.addBlock(fb::BlockKind::Every);
    b.add(inner, fb::Opcode::Print).strings = {"inner"};
    int32_t outer = b.addBlock(fb::BlockKind::Every);
    fb::InstructionT &e = b.add(outer, fb::Opcode::Every);
    e.ints = {1, static_cast<int64_t>(fb::PeriodUnit::Steps)};
    e.blocks = {inner};
    fb::InstructionT &o = b.add(
        inStep ? b.plan().step_block : b.plan().hooks_block, fb::Opcode::Every);
    o.ints = {1, static_cast<int64_t>(fb::PeriodUnit::Steps)};
    o.blocks = {outer};
    if (!b.inferLiveness().ok())
      std::abort();
    return b;
  };
  Ranks ranks;
  ASSERT_EQ(ranks.train(nested(false), 2, forSteps(1)), "");
  // A print that is not rank0_only is every rank's own.
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(std::string(ranks.rank(r).logs).find("1 print/rank inner"),
              std::string::npos)
        << r << ": " << ranks.rank(r).logs;
  absl::StatusOr<plan::LoadedPlan> loaded =
      plan::LoadPlan(nested(true).finish());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(std::string(loaded.status().message())
                .find("every runs only in the hooks; it is in a 'step' block"),
            std::string::npos)
      << loaded.status();
}

TEST(ExecutorTest, RefusesRankInAPlanOfTheFirstSchemaVersion) {
  plan::PlanBuilder b = RankPlan();
  b.plan().schema_version = 1;
  absl::StatusOr<plan::LoadedPlan> loaded = plan::LoadPlan(b.finish());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(std::string(loaded.status().message())
                .find("rank needs schema_version 2, the plan says 1"),
            std::string::npos)
      << loaded.status();
}

//===----------------------------------------------------------------------===//
// Pieces
//===----------------------------------------------------------------------===//

TEST(ArenaLayoutTest, TransientBuffersShareMemory) {
  TrainingPlanOptions o;
  o.preset = Preset::FsdpFull;
  o.in = 9;
  std::vector<uint8_t> bytes = TrainingPlan(o).finish();
  absl::StatusOr<plan::LoadedPlan> loaded = plan::LoadPlan(bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<plan::WorldBinding> world = plan::BindWorldSize(*loaded, 2);
  ASSERT_TRUE(world.ok());
  absl::StatusOr<ArenaLayout> layout = LayOutArenas(*loaded, *world);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_LT(layout->transientBytes, layout->transientUnshared);
  const fb::Plan &plan = loaded->plan();
  int views = 0, gathers = 0;
  for (uint32_t x = 0; x < plan.buffers()->size(); ++x) {
    const BufferLayout &a = layout->buffers[x];
    std::string name = plan.buffers()->Get(x)->name()->str();
    if (name == "view") {
      EXPECT_EQ(a.placement, Placement::Alias);
      ++views;
    }
    if (name == "params.gathered") {
      // Padded for the all-gather: 2 * ceil(228 / 2) f32 elements.
      EXPECT_EQ(a.placement, Placement::Transient);
      EXPECT_GE(a.capacity, 228 * 4);
      ++gathers;
    }
    if (a.placement != Placement::Transient)
      continue;
    // No two transient buffers that are live together overlap.
    for (uint32_t y = 0; y < x; ++y) {
      const BufferLayout &b = layout->buffers[y];
      if (b.placement != Placement::Transient || a.capacity == 0 ||
          b.capacity == 0)
        continue;
      bool together = a.start <= b.end && b.start <= a.end;
      bool overlap =
          a.offset < b.offset + b.capacity && b.offset < a.offset + a.capacity;
      EXPECT_FALSE(together && overlap) << "buffers " << x << " and " << y;
    }
  }
  EXPECT_GT(views, 0);
  EXPECT_GT(gathers, 0);
  // A state load that nothing overwrites while it lives aliases the state.
  for (uint32_t x = 0; x < plan.buffers()->size(); ++x) {
    if (plan.buffers()->Get(x)->name()->str() == "params.shard") {
      EXPECT_EQ(layout->buffers[x].placement, Placement::Alias);
    }
  }
}

TEST(LrScheduleTest, NanoGptFormulas) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::Cosine;
  s.lr = 6e-4;
  s.minLr = 6e-5;
  s.warmup = 10;
  s.steps = 110;
  EXPECT_DOUBLE_EQ(s.at(0), 6e-4 * 1 / 11);
  EXPECT_DOUBLE_EQ(s.at(9), 6e-4 * 10 / 11);
  EXPECT_DOUBLE_EQ(s.at(10), 6e-4);
  EXPECT_NEAR(s.at(60), 6e-5 + 0.5 * (6e-4 - 6e-5), 1e-15);
  EXPECT_DOUBLE_EQ(s.at(110), 6e-5);
  EXPECT_DOUBLE_EQ(s.at(1000), 6e-5);
  s.kind = LrSchedule::Kind::Linear;
  EXPECT_NEAR(s.at(35), 6e-5 + 0.75 * (6e-4 - 6e-5), 1e-15);
  s.kind = LrSchedule::Kind::Constant;
  EXPECT_DOUBLE_EQ(s.at(5), 6e-4 * 6 / 11);
  EXPECT_DOUBLE_EQ(s.at(1000), 6e-4);
}

TEST(SafetensorsTest, RoundTripsAndWritesAtomically) {
  std::string path = absl::StrFormat("%s/md-st-%d/w.safetensors",
                                     ::testing::TempDir(), getpid());
  SafetensorsTensor a{"b\"quoted", "F32", {2, 3}, std::vector<uint8_t>(24, 7)};
  SafetensorsTensor b{"a", "BF16", {5}, std::vector<uint8_t>(10, 9)};
  ASSERT_TRUE(WriteSafetensors(path, {a, b}, {{"format", "pt"}}).ok());
  std::map<std::string, std::string> meta;
  absl::StatusOr<std::vector<SafetensorsTensor>> t =
      ReadSafetensors(path, &meta);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].name, "a"); // name order
  EXPECT_EQ((*t)[1].name, "b\"quoted");
  EXPECT_EQ((*t)[1].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ((*t)[1].data, a.data);
  EXPECT_EQ(meta["format"], "pt");
  SafetensorsTensor bad{"x", "F32", {3}, std::vector<uint8_t>(5)};
  EXPECT_FALSE(WriteSafetensors(path, {bad}).ok());
  EXPECT_TRUE(ReadSafetensors(path).ok()) << "a failed write replaced the file";
}

TEST(SafetensorsTest, WritesIntoDevicesAndFifosInPlace) {
  // /dev/null stays a device node (a rename over it would replace it, or
  // fail for lack of permission on /dev).
  SafetensorsTensor a{"a", "F32", {2}, std::vector<uint8_t>(8, 1)};
  ASSERT_TRUE(WriteSafetensors("/dev/null", {a}).ok());
  struct stat st;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  // A FIFO gets the file's bytes through the pipe.
  std::string dir =
      absl::StrFormat("%s/md-fifo-%d", ::testing::TempDir(), getpid());
  ASSERT_TRUE(MakeDirectories(dir).ok());
  std::string fifo = dir + "/w.safetensors";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] {
    std::ifstream in(fifo, std::ios::binary);
    got.assign(std::istreambuf_iterator<char>(in), {});
  });
  absl::Status s = WriteSafetensors(fifo, {a});
  reader.join();
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_GT(got.size(), 8u + 8u);
  EXPECT_EQ(got.substr(got.size() - 8), std::string(8, '\1'));
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  // A directory is refused, naming it.
  absl::Status d = WriteSafetensors(dir, {a});
  EXPECT_EQ(d.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(d.message().find(dir), std::string::npos) << d;
}

//===----------------------------------------------------------------------===//
// Scalars the host wrote are read back without waiting for the device
//===----------------------------------------------------------------------===//

/// The CPU backend, counting the host's waits for the compute stream.
class CountingCpu final : public cpu::CpuBackend {
public:
  CountingCpu() : cpu::CpuBackend(1) {}
  absl::Status synchronize(Stream stream) override {
    if (stream.id == kComputeStream.id)
      ++computeWaits;
    return cpu::CpuBackend::synchronize(stream);
  }
  int64_t computeWaits = 0;
};

/// A comm that says its collectives are queued on the comm stream (as NCCL
/// does), delegating to a host comm: the executor must then not wait for
/// the compute stream before each collective.
class StreamOrderedComm final : public Comm {
public:
  explicit StreamOrderedComm(Comm &inner) : inner_(inner) {}
  const char *name() const override { return "stream-ordered"; }
  int rank() const override { return inner_.rank(); }
  int worldSize() const override { return inner_.worldSize(); }
  absl::StatusOr<Group> group(GroupKind kind) const override {
    return inner_.group(kind);
  }
  absl::Status allGather(const void *send, void *recv, int64_t n, DType t,
                         const Group &g) override {
    return inner_.allGather(send, recv, n, t, g);
  }
  absl::Status reduceScatter(const void *send, void *recv, int64_t n, DType t,
                             ReduceOp op, const Group &g) override {
    return inner_.reduceScatter(send, recv, n, t, op, g);
  }
  absl::Status allReduce(const void *send, void *recv, int64_t n, DType t,
                         ReduceOp op, const Group &g) override {
    return inner_.allReduce(send, recv, n, t, op, g);
  }
  absl::Status broadcast(const void *send, void *recv, int64_t n, DType t,
                         int root, const Group &g) override {
    return inner_.broadcast(send, recv, n, t, root, g);
  }
  absl::Status barrier(const Group &g) override { return inner_.barrier(g); }
  bool streamOrdered() const override { return true; }

private:
  Comm &inner_;
};

/// Host waits for the compute stream during `steps` steps of a single-rank
/// AdamW plan, and the final weights.
struct WaitCount {
  int64_t waits = 0;
  std::vector<uint8_t> master;
};
WaitCount countWaits(bool verify, int steps, Preset preset = Preset::Single,
                     bool streamOrdered = false) {
  TrainingPlanOptions o;
  o.preset = preset;
  o.pinnedWorldSize = 1;
  std::vector<uint8_t> bytes = TrainingPlan(o).finish();
  absl::StatusOr<plan::LoadedPlan> loaded = plan::LoadPlan(bytes);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  shm::ShmCommOptions co;
  static int calls = 0;
  co.jobId = absl::StrFormat("host-scalars-%d-%d", getpid(), calls++);
  co.worldSize = 1;
  absl::StatusOr<std::unique_ptr<shm::ShmComm>> comm = shm::ShmComm::create(co);
  EXPECT_TRUE(comm.ok()) << comm.status();
  CountingCpu backend;
  ExecutorOptions eo;
  eo.verifyHostScalars = verify;
  StreamOrderedComm ordered(**comm);
  Comm &used = streamOrdered ? static_cast<Comm &>(ordered) : **comm;
  absl::StatusOr<std::unique_ptr<Executor>> exec =
      Executor::Create(*loaded, 1, backend, used, eo);
  EXPECT_TRUE(exec.ok()) << exec.status();
  WaitCount c;
  if (!exec.ok())
    return c;
  int64_t before = backend.computeWaits;
  for (int i = 0; i < steps; ++i) {
    absl::Status s = (*exec)->Step();
    EXPECT_TRUE(s.ok()) << s;
  }
  c.waits = backend.computeWaits - before;
  for (uint32_t x = 0; x < loaded->plan().buffers()->size(); ++x)
    if (loaded->plan().buffers()->Get(x)->role() == fb::StateRole::Master) {
      absl::StatusOr<std::vector<uint8_t>> m = (*exec)->ReadBuffer(x);
      EXPECT_TRUE(m.ok());
      if (m.ok())
        c.master = *m;
    }
  return c;
}

TEST(HostScalarsTest, ReadBackWithoutWaitingAndVerifiedAgainstTheDevice) {
  WaitCount plain = countWaits(/*verify=*/false, 5);
  WaitCount checked = countWaits(/*verify=*/true, 5);
  // Verification reads every host copy back from the device (and fails on
  // a stale one): the waits it adds are the reads the copies saved — the
  // optimizer's learning rate and step at least, every step.
  EXPECT_GE(checked.waits - plain.waits, 2 * 5);
  EXPECT_FALSE(plain.master.empty());
  EXPECT_EQ(plain.master, checked.master) << "the copies changed the result";
}

TEST(HostScalarsTest, StreamOrderedCollectivesDoNotWaitForComputeOnTheHost) {
  // fsdp-full at W = 1 still runs its gathers and reduce-scatters.
  WaitCount host = countWaits(false, 3, Preset::FsdpFull, false);
  WaitCount ordered = countWaits(false, 3, Preset::FsdpFull, true);
  EXPECT_GT(host.waits, ordered.waits);
  EXPECT_FALSE(host.master.empty());
  EXPECT_EQ(host.master, ordered.master);
}

} // namespace
} // namespace md::runtime
