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

#include "runtime/core/Executor.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "runtime/core/Safetensors.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/shm/ShmComm.h"
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
  void onPrint(int64_t step, const std::string &line) override {
    onLog(step, "print", {{line, 0}});
  }

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
    co.timeout = std::chrono::milliseconds(20000);
    absl::StatusOr<std::unique_ptr<shm::ShmComm>> comm =
        shm::ShmComm::create(co);
    if (!comm.ok())
      return fail(out, comm.status());
    cpu::CpuBackend backend(1);
    Collector collector(out);
    ExecutorOptions eo;
    eo.rank = rank;
    eo.steps = run.steps;
    eo.logEvery = run.logEvery;
    eo.observer = &collector;
    absl::StatusOr<std::unique_ptr<Executor>> exec =
        Executor::Create(*loaded, world, backend, **comm, eo);
    if (!exec.ok())
      return fail(out, exec.status());
    while ((*exec)->stepsDone() < (*exec)->stepsToRun() &&
           !(*exec)->stopped()) {
      absl::Status s = (*exec)->Step();
      if (!s.ok())
        return fail(out, s);
      if (out.numLosses < 512)
        out.losses[out.numLosses++] = (*exec)->lastLoss();
    }
    out.stepsDone = (*exec)->stepsDone();
    out.stopped = (*exec)->stopped();
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

} // namespace
} // namespace md::runtime
