//===- Worker.cpp - one rank of a training job ----------------------------===//

#include "tools/mdrun/Worker.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Executor.h"
#include "runtime/core/Safetensors.h"
#include "runtime/core/Status.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/plan/Loader.h"
#include "runtime/shm/ShmComm.h"

namespace md::mdrun {
namespace {

using runtime::Progress;

absl::StatusOr<int> envInt(const char *name, int min) {
  const char *v = std::getenv(name);
  if (v == nullptr)
    return absl::InvalidArgumentError(
        absl::StrCat("the environment variable ", name,
                     " is not set (mdrun starts its workers itself)"));
  int n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < min)
    return absl::InvalidArgumentError(absl::StrCat(
        "the environment variable ", name, "=", v, " is not valid"));
  return n;
}

std::string humanBytes(int64_t b) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%d B", b)
                : absl::StrFormat("%.1f %s", v, units[u]);
}

std::string withCommas(int64_t n) {
  std::string s = absl::StrCat(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0)
      out += ',';
    out += s[i];
  }
  return out;
}

std::string jsonNumber(double v) {
  if (!std::isfinite(v))
    return "null";
  return absl::StrFormat("%.9g", v);
}

/// Rank 0's console and metrics file.
class Reporter final : public runtime::RunObserver {
public:
  absl::Status openMetrics(const std::string &path) {
    if (path.empty())
      return absl::OkStatus();
    size_t slash = path.find_last_of('/');
    if (slash != std::string::npos && slash > 0)
      MD_RETURN_IF_ERROR(runtime::MakeDirectories(path.substr(0, slash)));
    metrics_ = std::fopen(path.c_str(), "w");
    if (metrics_ == nullptr)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": cannot write the metrics file"));
    return absl::OkStatus();
  }
  ~Reporter() override {
    if (metrics_)
      std::fclose(metrics_);
  }

  void onProgress(const Progress &p) override {
    std::string line =
        absl::StrFormat("step %*d/%d  loss %.4f  lr %.3e", width(p.steps),
                        p.step, p.steps, p.loss, p.lr);
    if (p.gradNorm)
      absl::StrAppend(&line, absl::StrFormat("  grad_norm %.3f", *p.gradNorm));
    if (p.tokensPerSecond > 0)
      absl::StrAppend(&line,
                      absl::StrFormat("  %.0f tokens/s", p.tokensPerSecond));
    else
      absl::StrAppend(&line,
                      absl::StrFormat("  %.1f samples/s", p.samplesPerSecond));
    absl::StrAppend(&line,
                    absl::StrFormat("  %.1f ms/step  %.1f s",
                                    1e3 * p.stepSeconds, p.elapsedSeconds));
    absl::PrintF("%s\n", line.c_str());
    std::fflush(stdout);
    if (metrics_) {
      std::string rec =
          absl::StrFormat("{\"step\": %d, \"loss\": %s, \"lr\": %s", p.step,
                          jsonNumber(p.loss), jsonNumber(p.lr));
      if (p.tokensPerSecond > 0)
        absl::StrAppend(&rec,
                        ", \"tokens_per_s\": ", jsonNumber(p.tokensPerSecond));
      else
        absl::StrAppend(
            &rec, ", \"samples_per_s\": ", jsonNumber(p.samplesPerSecond));
      if (p.gradNorm)
        absl::StrAppend(&rec, ", \"grad_norm\": ", jsonNumber(*p.gradNorm));
      absl::StrAppend(&rec, ", \"epoch\": ", p.epoch,
                      ", \"time\": ", jsonNumber(p.elapsedSeconds), "}\n");
      std::fputs(rec.c_str(), metrics_);
      std::fflush(metrics_);
    }
  }

  void
  onLog(int64_t step, const std::string &tag,
        const std::vector<std::pair<std::string, double>> &values) override {
    std::string line = absl::StrFormat("step %d: %s", step, tag);
    std::string rec = absl::StrFormat("{\"step\": %d, \"log\": %s", step,
                                      runtime::JsonQuote(tag));
    for (const auto &[name, v] : values) {
      if (name == tag)
        absl::StrAppend(&line, absl::StrFormat(" %.6g", v));
      else
        absl::StrAppend(&line, absl::StrFormat(" %s=%.6g", name, v));
      absl::StrAppend(&rec, ", ", runtime::JsonQuote(name), ": ",
                      jsonNumber(v));
    }
    absl::PrintF("%s\n", line.c_str());
    std::fflush(stdout);
    if (metrics_) {
      std::fputs((rec + "}\n").c_str(), metrics_);
      std::fflush(metrics_);
    }
  }

  void onPrint(int64_t, const std::string &line) override {
    absl::PrintF("%s\n", line.c_str());
    std::fflush(stdout);
  }
  void onSave(int64_t step, const std::string &path) override {
    absl::PrintF("step %d: saved %s\n", step, path.c_str());
    std::fflush(stdout);
  }
  void onExit(int64_t step, const std::string &reason) override {
    absl::PrintF("step %d: stopping%s%s\n", step, reason.empty() ? "" : ": ",
                 reason.c_str());
    std::fflush(stdout);
  }

private:
  static int width(int64_t n) {
    return static_cast<int>(absl::StrCat(n).size());
  }
  std::FILE *metrics_ = nullptr;
};

void printBanner(const runtime::RunInfo &i, const std::string &planPath,
                 int threads) {
  std::string plan =
      i.planName == i.preset || i.preset.empty()
          ? i.planName
          : absl::StrFormat("%s (extends %s)", i.planName, i.preset);
  absl::PrintF(
      "mdrun: model %s, plan %s (%s), %d rank%s on the %s backend (%s comm, "
      "%d BLAS thread%s per rank)\n",
      i.model.c_str(), plan.c_str(), planPath.c_str(), i.worldSize,
      i.worldSize == 1 ? "" : "s", i.backend.c_str(), i.comm.c_str(), threads,
      threads == 1 ? "" : "s");
  absl::PrintF(
      "mdrun: batch: micro %d x accumulation %d x %d rank%s = global %d\n",
      i.microBatch, i.accumulationSteps, i.worldSize,
      i.worldSize == 1 ? "" : "s", i.globalBatch);
  absl::PrintF(
      "mdrun: optimizer %s, schedule %s%s\n", i.optimizer.c_str(),
      i.schedule.str().c_str(),
      i.clipGradNorm > 0
          ? absl::StrFormat(", clip_grad_norm %g", i.clipGradNorm).c_str()
          : "");
  absl::PrintF("mdrun: params %s elements (%d tensors, %s trainable)\n",
               withCommas(i.paramElements).c_str(), i.paramCount,
               withCommas(i.trainableElements).c_str());
  const plan::MemoryReport &m = i.memory;
  absl::PrintF(
      "mdrun: memory per rank: params %s, grads %s, grad_acc %s, optimizer %s, "
      "activations %s, comm buffers %s, peak %s (arenas: persistent %s, "
      "transient %s)\n",
      humanBytes(m.params).c_str(), humanBytes(m.grads).c_str(),
      humanBytes(m.gradAcc).c_str(), humanBytes(m.optimizer).c_str(), humanBytes(m.activations).c_str(),
      humanBytes(m.commBuffers).c_str(), humanBytes(m.peak).c_str(),
      humanBytes(i.persistentArenaBytes).c_str(),
      humanBytes(i.transientArenaBytes).c_str());
  absl::PrintF("mdrun: data %s; sampler %s\n", i.data.c_str(),
               i.sampler.c_str());
  absl::PrintF("mdrun: training %d steps, seed %d\n", i.steps, i.seed);
  std::fflush(stdout);
}

} // namespace

absl::StatusOr<WorkerEnv> WorkerEnvFromEnvironment() {
  WorkerEnv env;
  MD_ASSIGN_OR_RETURN(env.worldSize, envInt("WORLD_SIZE", 1));
  MD_ASSIGN_OR_RETURN(env.rank, envInt("RANK", 0));
  MD_ASSIGN_OR_RETURN(env.localRank, envInt("LOCAL_RANK", 0));
  MD_ASSIGN_OR_RETURN(env.localWorldSize, envInt("LOCAL_WORLD_SIZE", 1));
  if (env.rank >= env.worldSize)
    return absl::InvalidArgumentError(absl::StrFormat(
        "RANK=%d is not below WORLD_SIZE=%d", env.rank, env.worldSize));
  if (env.localWorldSize != env.worldSize)
    return absl::UnimplementedError(
        absl::StrFormat("LOCAL_WORLD_SIZE=%d differs from WORLD_SIZE=%d: md "
                        "runs on one machine "
                        "for now",
                        env.localWorldSize, env.worldSize));
  if (const char *job = std::getenv("MD_JOB_ID"); job != nullptr && *job) {
    env.jobId = job;
  } else {
    const char *port = std::getenv("MASTER_PORT");
    env.jobId = absl::StrCat("port-", port ? port : "29500");
  }
  if (const char *t = std::getenv("MD_THREADS"); t != nullptr) {
    int n = 0;
    if (absl::SimpleAtoi(t, &n) && n >= 1)
      env.threads = n;
  } else {
    env.threads = cpu::CpuBackend::threadsPerRank(env.localWorldSize);
  }
  return env;
}

absl::Status RunWorker(const TrainOptions &options, const WorkerEnv &env) {
  plan::LoadOptions lo;
  lo.worldSize = env.worldSize;
  MD_ASSIGN_OR_RETURN(plan::LoadedPlan loaded,
                      plan::LoadPlanFile(options.planPath, lo));
  cpu::CpuBackend backend(env.threads);

  shm::ShmCommOptions co;
  co.jobId = env.jobId;
  co.rank = env.rank;
  co.worldSize = env.worldSize;
  co.shardSize = static_cast<int>(loaded.world().shardGroupSize);
  co.timeout = std::chrono::milliseconds(
      static_cast<int64_t>(std::llround(options.timeoutSeconds * 1000)));
  MD_ASSIGN_OR_RETURN(std::unique_ptr<shm::ShmComm> comm,
                      shm::ShmComm::create(co));

  Reporter reporter;
  if (env.rank == 0)
    MD_RETURN_IF_ERROR(reporter.openMetrics(options.metricsPath));
  runtime::ExecutorOptions eo;
  eo.rank = env.rank;
  eo.steps = options.steps;
  eo.seed = options.seed;
  eo.logEvery = options.logEvery;
  eo.observer = &reporter;
  MD_ASSIGN_OR_RETURN(
      std::unique_ptr<runtime::Executor> exec,
      runtime::Executor::Create(loaded, env.worldSize, backend, *comm, eo));
  if (env.rank == 0)
    printBanner(exec->info(), options.planPath, backend.threads());
  MD_RETURN_IF_ERROR(exec->Run());
  if (!options.saveFinalPath.empty())
    MD_RETURN_IF_ERROR(exec->SaveFull(options.saveFinalPath));
  return absl::OkStatus();
}

} // namespace md::mdrun
