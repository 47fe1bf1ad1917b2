//===- Worker.cpp - one rank of a training job ----------------------------===//

#include "tools/mdrun/Worker.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/exec/Executor.h"
#include "runtime/core/Json.h"
#include "runtime/core/FlightRecorder.h"
#include "runtime/exec/Safetensors.h"
#include "runtime/core/Status.h"
#include "runtime/core/TraceRecorder.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/net/Socket.h"
#include "runtime/net/TorchStore.h"
#include "runtime/plan/Loader.h"
#include "runtime/plan/MemoryFormat.h"
#include "runtime/rank/Builtin.h"
#include "runtime/rank/Rank.h"
#include "tools/cli/Format.h"
#include "tools/mdrun/FlightAnalysis.h"
#include "tools/mdrun/Outputs.h"
#include "tools/mdrun/Trace.h"

namespace md::mdrun {
namespace {

/// Set by SIGUSR1 (the launcher passing on a SIGTERM it got: a scheduler's
/// preemption), and by SIGTERM in a rank that srun or mpirun started: the
/// run ends after the current step (ExecutorOptions::preempt).
std::atomic<bool> gPreempt{false};
extern "C" void onPreempt(int) {
  gPreempt.store(true, std::memory_order_relaxed);
}

/// Installs onPreempt for `sig` while it lives, then puts back what was.
class PreemptOn {
public:
  explicit PreemptOn(int sig) : sig_(sig) {
    struct sigaction sa {};
    sa.sa_handler = onPreempt;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig_, &sa, &previous_);
  }
  ~PreemptOn() { ::sigaction(sig_, &previous_, nullptr); }
  PreemptOn(const PreemptOn &) = delete;
  PreemptOn &operator=(const PreemptOn &) = delete;

private:
  int sig_;
  struct sigaction previous_ {};
};

/// The launcher's SIGUSR1 (a preemption passed on) may come at any moment
/// of a rank's life: the launcher starts its ranks with it blocked
/// (Launcher.cpp, startRank), and the rank catches it from the start of
/// RunWorker to its exit, so that one sent just after the last step, while
/// the rank tears down, is not its death (signal 10) but a no-op: the job
/// finished.
void catchPreemptionForGood(int sig) {
  struct sigaction sa {};
  sa.sa_handler = onPreempt;
  sigemptyset(&sa.sa_mask);
  ::sigaction(sig, &sa, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

constexpr const char *kPreemptionUrl = "md/preempted";
constexpr const char *kRecipeFailureUrl = "md/recipe-failed";

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

std::string jsonNumber(double v) {
  if (!std::isfinite(v))
    return "null";
  return absl::StrFormat("%.9g", v);
}

/// Rank 0's console and metrics file, and every rank's own prints.
class Reporter final : public runtime::RunObserver {
public:
  explicit Reporter(int rank) : rank_(rank) {}

  /// Opens the metrics file; a resumed run appends to it.
  absl::Status openMetrics(const std::string &path, bool append) {
    if (path.empty())
      return absl::OkStatus();
    // The launcher made the directory and said so; a rank srun started
    // says so itself.
    MD_RETURN_IF_ERROR(MakeParentDirectories(path, "--metrics"));
    metrics_ = std::fopen(path.c_str(), append ? "a" : "w");
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
    // The line's rates are the means since the previous line, over the
    // reports between (metrics every step, a line every ten, say).
    window_.steps += p.stepsSince;
    window_.seconds += p.stepSeconds * static_cast<double>(p.stepsSince);
    window_.samples += p.samplesPerSecond * p.stepSeconds *
                       static_cast<double>(p.stepsSince);
    window_.tokens += p.tokensPerSecond * p.stepSeconds *
                      static_cast<double>(p.stepsSince);
    if (!firstReport_) {
      firstReport_ = {p.step, p.elapsedSeconds};
    }
    if (p.line)
      printLine(p);
    if (metrics_ && p.record) {
      std::string rec =
          absl::StrFormat("{\"step\": %d, \"loss\": %s, \"lr\": %s", p.step,
                          jsonNumber(p.loss), jsonNumber(p.lr));
      if (p.tokensPerSecond > 0)
        absl::StrAppend(&rec,
                        ", \"tokens_per_s\": ", jsonNumber(p.tokensPerSecond));
      else
        absl::StrAppend(
            &rec, ", \"samples_per_s\": ", jsonNumber(p.samplesPerSecond));
      if (p.stepSeconds > 0)
        absl::StrAppend(&rec, ", \"step_s\": ", jsonNumber(p.stepSeconds));
      if (p.gradNorm)
        absl::StrAppend(&rec, ", \"grad_norm\": ", jsonNumber(*p.gradNorm));
      if (!pending_.empty())
        absl::StrAppend(&rec, ", \"logs\": ", logsJson());
      absl::StrAppend(&rec, ", \"epoch\": ", p.epoch,
                      ", \"time\": ", jsonNumber(p.elapsedSeconds), "}\n");
      std::fputs(rec.c_str(), metrics_);
      std::fflush(metrics_);
    }
    // The step's logs went with its line or its record; a step with
    // neither shows them at its end (onStepEnd).
    if (p.line || (metrics_ && p.record))
      pending_.clear();
  }

  /// An evaluation (--evaluate), full precision, on stdout and as a
  /// metrics record.
  void onEvaluation(const runtime::Evaluation &e, int64_t step) {
    absl::PrintF("mdrun: evaluate%s on %s: loss %.9g\n",
                 e.where.empty() ? "" : " at " + e.where, e.dataset, e.loss);
    std::fflush(stdout);
    if (metrics_) {
      std::fputs(absl::StrCat("{\"step\": ", step, ", \"evaluate\": {",
                              "\"at\": ", runtime::JsonQuote(e.where),
                              ", \"dataset\": ", runtime::JsonQuote(e.dataset),
                              ", \"loss\": ", jsonNumber(e.loss), "}}\n")
                     .c_str(),
                 metrics_);
      std::fflush(metrics_);
    }
  }

  /// "step 100/250  loss 4.7021  lr 5.941e-04  grad_norm 0.412  73k
  /// tokens/s  224.5 ms/step  22.4 s  ETA 33 s", the rates since the
  /// previous line; the ETA from the mean step time since the first report
  /// (step 1's start-up left out).
  void printLine(const Progress &p) {
    std::string line =
        absl::StrFormat("step %*d/%d  loss %.4f  lr %.3e", width(p.steps),
                        p.step, p.steps, p.loss, p.lr);
    if (p.gradNorm)
      absl::StrAppend(&line, absl::StrFormat("  grad_norm %.3f", *p.gradNorm));
    const double seconds = window_.seconds;
    if (window_.tokens > 0 && seconds > 0)
      absl::StrAppend(&line,
                      absl::StrFormat("  %.0f tokens/s", window_.tokens / seconds));
    else
      absl::StrAppend(&line, absl::StrFormat("  %.1f samples/s",
                                             seconds > 0 ? window_.samples /
                                                               seconds
                                                         : 0.0));
    absl::StrAppend(
        &line,
        absl::StrFormat("  %.1f ms/step  %.1f s",
                        window_.steps > 0
                            ? 1e3 * seconds / static_cast<double>(window_.steps)
                            : 0.0,
                        p.elapsedSeconds));
    if (firstReport_ && p.step > firstReport_->first && p.step < p.steps) {
      double perStep = (p.elapsedSeconds - firstReport_->second) /
                       static_cast<double>(p.step - firstReport_->first);
      absl::StrAppend(&line, "  ETA ",
                      durationText(perStep *
                                   static_cast<double>(p.steps - p.step)));
    }
    // The recipe's logs of this step join its progress line and record.
    if (!pending_.empty())
      absl::StrAppend(&line, "  | ", logsText());
    absl::PrintF("%s\n", line.c_str());
    std::fflush(stdout);
    window_ = {};
  }

  /// "41 s", "3m 05s", "2h 07m".
  static std::string durationText(double seconds) {
    int64_t s = static_cast<int64_t>(std::llround(std::max(seconds, 0.0)));
    if (s < 60)
      return absl::StrFormat("%d s", s);
    if (s < 3600)
      return absl::StrFormat("%dm %02ds", s / 60, s % 60);
    return absl::StrFormat("%dh %02dm", s / 3600, (s % 3600) / 60);
  }

  // Logs wait for the step's progress line (onProgress), or for its end
  // when the step has none (onStepEnd): one line and one metrics record per
  // step either way.
  void
  onLog(int64_t step, const std::string &tag,
        const std::vector<std::pair<std::string, double>> &values) override {
    (void)step; // the step's end or progress line names it
    pending_.push_back({tag, values});
  }

  void onStepEnd(int64_t step) override {
    if (pending_.empty())
      return;
    absl::PrintF("step %d: %s\n", step, logsText());
    std::fflush(stdout);
    if (metrics_) {
      std::fputs(
          absl::StrCat("{\"step\": ", step, ", \"logs\": ", logsJson(), "}\n")
              .c_str(),
          metrics_);
      std::fflush(metrics_);
    }
    pending_.clear();
  }

  void onPrint(int64_t, const std::string &line, bool perRank) override {
    // One write per line, so that the ranks' lines do not interleave.
    std::string text = perRank ? absl::StrFormat("[rank %d] %s\n", rank_, line)
                               : absl::StrCat(line, "\n");
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }
  void onSave(int64_t step, const std::string &path, double seconds) override {
    absl::PrintF("step %d: saved %s in %.2f s\n", step, path.c_str(), seconds);
    std::fflush(stdout);
  }
  void onExit(int64_t step, const std::string &reason) override {
    absl::PrintF("step %d: stopping%s%s\n", step, reason.empty() ? "" : ": ",
                 reason.c_str());
    std::fflush(stdout);
  }

private:
  int rank_;
  struct Log {
    std::string tag;
    std::vector<std::pair<std::string, double>> values;
  };

  static int width(int64_t n) {
    return static_cast<int>(absl::StrCat(n).size());
  }
  /// "train 2.31  eval loss=1.9 acc=0.5": a value named as its log's
  /// tag shows under the tag alone.
  std::string logsText() const {
    std::vector<std::string> parts;
    for (const Log &log : pending_) {
      std::string part = log.tag;
      for (const auto &[name, v] : log.values)
        absl::StrAppend(&part, name == log.tag
                                   ? absl::StrFormat(" %.6g", v)
                                   : absl::StrFormat(" %s=%.6g", name, v));
      parts.push_back(std::move(part));
    }
    return absl::StrJoin(parts, "  ");
  }
  /// {"train": 2.31, "eval": {"loss": 1.9, "acc": 0.5}}: a log of one value
  /// named as its tag is that value.
  std::string logsJson() const {
    std::vector<std::string> entries;
    for (const Log &log : pending_) {
      std::string value;
      if (log.values.size() == 1 && log.values[0].first == log.tag) {
        value = jsonNumber(log.values[0].second);
      } else {
        std::vector<std::string> fields;
        for (const auto &[name, v] : log.values)
          fields.push_back(
              absl::StrCat(runtime::JsonQuote(name), ": ", jsonNumber(v)));
        value = absl::StrCat("{", absl::StrJoin(fields, ", "), "}");
      }
      entries.push_back(absl::StrCat(runtime::JsonQuote(log.tag), ": ", value));
    }
    return absl::StrCat("{", absl::StrJoin(entries, ", "), "}");
  }

  std::FILE *metrics_ = nullptr;
  std::vector<Log> pending_;
  /// What the reports since the previous progress line add up to.
  struct Window {
    int64_t steps = 0;
    double seconds = 0, samples = 0, tokens = 0;
  } window_;
  /// The first report's step and time: the ETA's start.
  std::optional<std::pair<int64_t, double>> firstReport_;
};

void printBanner(const runtime::RunInfo &i, const std::string &planPath,
                 const std::string &where,
                 const std::vector<std::string> &deviceLines, bool evaluate) {
  std::string plan =
      i.planName == i.preset || i.preset.empty()
          ? i.planName
          : absl::StrFormat("%s (extends %s)", i.planName, i.preset);
  absl::PrintF(
      "mdrun: model %s, plan %s (%s), %d rank%s on the %s backend (%s comm, "
      "%s)\n",
      i.model.c_str(), plan.c_str(), planPath.c_str(), i.worldSize,
      i.worldSize == 1 ? "" : "s", i.backend.c_str(), i.comm.c_str(),
      where.c_str());
  for (const std::string &line : deviceLines)
    absl::PrintF("mdrun: %s\n", line);
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
  for (const std::string &group : i.optimizerGroups)
    absl::PrintF("mdrun: optimizer group %s\n", group.c_str());
  absl::PrintF("mdrun: params %s elements (%d tensors, %s trainable)\n",
               cli::WithCommas(i.paramElements).c_str(), i.paramCount,
               cli::WithCommas(i.trainableElements).c_str());
  const plan::MemoryReport &m = i.memory;
  absl::PrintF(
      "mdrun: memory per rank: params %s, grads %s, grad_acc %s, optimizer %s, "
      "activations %s, comm buffers %s, peak %s (arenas: persistent %s, "
      "transient %s)\n",
      plan::BytesText(m.params).c_str(), plan::BytesText(m.grads).c_str(),
      plan::BytesText(m.gradAcc).c_str(), plan::BytesText(m.optimizer).c_str(),
      plan::BytesText(m.activations).c_str(),
      plan::BytesText(m.commBuffers).c_str(), plan::BytesText(m.peak).c_str(),
      plan::BytesText(i.persistentArenaBytes).c_str(),
      plan::BytesText(i.transientArenaBytes).c_str());
  absl::PrintF("mdrun: data %s; sampler %s\n", i.data.c_str(),
               i.sampler.c_str());
  for (const std::string &skipped : i.resumeSkipped)
    absl::PrintF("mdrun: warning: --resume auto passed over a damaged "
                 "checkpoint: %s\n",
                 skipped.c_str());
  for (const std::string &warning : i.resumeWarnings)
    absl::PrintF("mdrun: warning: %s\n", warning.c_str());
  if (!i.resumedFrom.empty())
    absl::PrintF("mdrun: resumed from %s (%s)\n", i.resumedFrom.c_str(),
                 i.resumedWhat.c_str());
  else if (!i.resumeNote.empty())
    absl::PrintF("mdrun: %s\n", i.resumeNote.c_str());
  if (!i.initFrom.empty())
    absl::PrintF("mdrun: initialised from %s (%s)\n", i.initFrom.c_str(),
                 i.initWhat.c_str());
  if (evaluate)
    absl::PrintF("mdrun: evaluating, no training, seed %d\n", i.seed);
  else
    absl::PrintF("mdrun: training %d steps, seed %d\n", i.steps, i.seed);
  // A run that ends before its schedule's decay does never reaches min_lr:
  // one note, with the learning rate it ends at.
  const runtime::LrSchedule &lr = i.schedule;
  if (!evaluate && lr.kind != runtime::LrSchedule::Kind::Constant &&
      i.steps < lr.steps)
    absl::PrintF("mdrun: note: the schedule decays over %d steps and this run "
                 "ends at step %d, at lr %.3e (min_lr %g is reached at step "
                 "%d)\n",
                 lr.steps, i.steps, lr.at(i.steps - 1), lr.minLr, lr.steps);
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
  if (env.localRank >= env.localWorldSize ||
      env.worldSize % env.localWorldSize != 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "LOCAL_RANK=%d, LOCAL_WORLD_SIZE=%d and WORLD_SIZE=%d do not fit "
        "together",
        env.localRank, env.localWorldSize, env.worldSize));
  if (const char *a = std::getenv("MASTER_ADDR"); a != nullptr && *a)
    env.masterAddr = a;
  MD_ASSIGN_OR_RETURN(env.masterPort, envInt("MASTER_PORT", 1));
  if (const char *job = std::getenv("MD_JOB_ID"); job != nullptr && *job)
    env.jobId = job;
  else
    env.jobId = absl::StrCat("port-", env.masterPort);
  if (const char *t = std::getenv("MD_THREADS"); t != nullptr) {
    int n = 0;
    if (absl::SimpleAtoi(t, &n) && n >= 1)
      env.threads = n;
  } else {
    env.threads = cpu::CpuBackend::threadsPerRank(env.localWorldSize);
  }
  const rank::Registry &registry = rank::BuiltinRegistry();
  if (const char *backend = std::getenv("MD_BACKEND"); backend != nullptr) {
    if (registry.backend(backend) == nullptr) {
      std::vector<std::string> names;
      for (const rank::BackendInfo *b : registry.backends())
        names.push_back(b->name);
      return absl::InvalidArgumentError(absl::StrCat(
          "MD_BACKEND=", backend, ": expected ", absl::StrJoin(names, " or ")));
    }
    env.backend = backend;
  } else if (const rank::BackendInfo *host = registry.hostBackend()) {
    env.backend = host->name;
  }
  if (const char *c = std::getenv("MD_COMM"); c != nullptr) {
    MD_ASSIGN_OR_RETURN(const rank::CommInfo *comm, registry.findComm(c));
    env.comm = comm->name;
  } else {
    // The choice's comm for this backend, a device per rank on GPUs.
    const rank::CommInfo *comm = rank::AutomaticComm(
        registry, env.backend,
        rank::JobShape{env.localWorldSize, env.worldSize / env.localWorldSize},
        env.localWorldSize);
    if (comm == nullptr)
      return absl::InvalidArgumentError(
          absl::StrCat("MD_COMM is not set, and no comm of the ", env.backend,
                       " backend runs this job"));
    env.comm = comm->name;
  }
  env.device = env.localRank;
  if (std::getenv("MD_DEVICE") != nullptr) {
    MD_ASSIGN_OR_RETURN(env.device, envInt("MD_DEVICE", 0));
  }
  if (std::getenv("MD_FLIGHT_FD") != nullptr) {
    MD_ASSIGN_OR_RETURN(env.flightFd, envInt("MD_FLIGHT_FD", 0));
  }
  return env;
}

namespace {

/// FNV-1a over the plan's bytes (as the rank loaded them): ranks that load
/// different files (or a file rewritten between their starts) refuse to run
/// together.
std::string planFingerprint(absl::Span<const uint8_t> bytes,
                            const WorkerEnv &env) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t byte : bytes)
    h = (h ^ byte) * 1099511628211ull;
  return absl::StrFormat("plan %016x, world %d, %s backend, %s comm", h,
                         env.worldSize, env.backend, env.comm);
}

std::chrono::milliseconds timeoutOf(const TrainOptions &options) {
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::llround(options.timeoutSeconds * 1000)));
}

absl::Status runWorker(const TrainOptions &options, const WorkerEnv &env,
                       runtime::FlightRecorder *recorder,
                       runtime::TraceRecorder *trace,
                       std::vector<std::string> *flightLocations) {
  // The plan file is read once: the fingerprint and the flight recorder's
  // locations come from the bytes loaded.
  plan::LoadOptions lo;
  lo.worldSize = env.worldSize;
  MD_ASSIGN_OR_RETURN(plan::LoadedPlan loaded,
                      plan::LoadPlanFile(options.planPath, lo));
  const std::string fingerprint = planFingerprint(loaded.bytes(), env);
  if (flightLocations != nullptr)
    *flightLocations = FlightLocations(loaded.plan());

  const rank::Registry &registry = rank::BuiltinRegistry();
  // --comm-thread on (the default): on the CPU backend, the comm stream on
  // a thread of its own, its collectives overlapping compute
  // (docs/runtime-cpu.md), when the plan's events order the two streams;
  // without the thread the backend runs them in program order, so any plan
  // runs. A plan that cannot be laid out fails in Executor::Create, which
  // says why.
  std::string refusal;
  const rank::BackendInfo *info = registry.backend(env.backend);
  if (options.commThread && info != nullptr && info->overlapOnRequest)
    refusal =
        runtime::Executor::UnorderedStreams(loaded, env.worldSize).value_or("");
  rank::RankSpec spec;
  spec.backend = env.backend;
  spec.comm = env.comm;
  spec.rank = env.rank;
  spec.worldSize = env.worldSize;
  spec.localRank = env.localRank;
  spec.localWorldSize = env.localWorldSize;
  spec.shardSize = static_cast<int>(loaded.world().shardGroupSize);
  spec.device = env.device;
  spec.threads = env.threads;
  spec.jobId = env.jobId;
  spec.masterAddr = env.masterAddr;
  spec.masterPort = env.masterPort;
  spec.fingerprint = fingerprint;
  spec.timeout = timeoutOf(options);
  spec.overlapComm = options.commThread && refusal.empty();
  spec.recorder = recorder;
  MD_ASSIGN_OR_RETURN(rank::Rank rd, rank::MakeRank(registry, spec));
  runtime::Backend &backend = *rd.backend;
  runtime::Comm &comm = *rd.comm;
  const std::string &where = rd.where;

  Reporter reporter(env.rank);
  runtime::ExecutorOptions eo;
  eo.rank = env.rank;
  eo.localRank = env.localRank;
  eo.steps = options.steps;
  eo.seed = options.seed;
  eo.logEvery = options.logEvery;
  // Metrics every --metrics-every steps (0: with the progress lines).
  if (!options.metricsPath.empty())
    eo.metricsEvery = options.metricsEvery > 0 ? options.metricsEvery
                                               : options.logEvery;
  eo.observer = &reporter;
  // A debugging aid for the executor's host scalars (docs/runtime.md).
  const char *verify = std::getenv("MD_VERIFY_HOST_SCALARS");
  eo.verifyHostScalars = verify != nullptr && std::string(verify) == "1";
  eo.resume = options.resumePath;
  eo.init = options.initPath;
  eo.initMap = options.initMapPath;
  eo.initMissing = options.initMissing;
  eo.recorder = recorder;
  eo.trace = trace;
  eo.preempt = &gPreempt;
  MD_ASSIGN_OR_RETURN(
      std::unique_ptr<runtime::Executor> exec,
      runtime::Executor::Create(loaded, env.worldSize, backend, comm, eo));
  if (env.rank == 0) {
    // Once the executor knows whether it resumed: a resumed run's metrics
    // continue the file.
    MD_RETURN_IF_ERROR(reporter.openMetrics(options.metricsPath,
                                            !exec->info().resumedFrom.empty()));
    printBanner(exec->info(), options.planPath, where, rd.lines,
                options.evaluate);
    // Why the comm thread was asked for and is off: a note, not a warning
    // (the run is right, only slower), after the banner.
    if (!refusal.empty())
      absl::PrintF("mdrun: no comm thread for this plan: its events do not "
                   "order its two streams (%s)\n",
                   refusal);
  }
  if (options.evaluate) {
    MD_ASSIGN_OR_RETURN(std::vector<runtime::Evaluation> evals,
                        exec->Evaluate());
    if (env.rank == 0)
      for (const runtime::Evaluation &e : evals)
        reporter.onEvaluation(e, exec->stepsDone());
    return absl::OkStatus();
  }
  if (recorder != nullptr)
    recorder->setPhase(runtime::RankPhase::Training);
  MD_RETURN_IF_ERROR(exec->Run());
  // A failed run has no final weights to save: they are what failed.
  if (std::optional<std::string> why = exec->failure())
    return RecipeFailureStatus(absl::StrFormat(
        "the recipe failed at step %d: %s", exec->stepsDone(), *why));
  if (exec->preempted())
    return PreemptionStatus(
        absl::StrFormat("rank %d stopped after step %d of %d", env.rank,
                        exec->stepsDone(), exec->stepsToRun()));
  if (!options.saveFinalPath.empty())
    MD_RETURN_IF_ERROR(exec->SaveFull(options.saveFinalPath));
  return absl::OkStatus();
}

} // namespace

absl::Status PreemptionStatus(const std::string &what) {
  absl::Status s = absl::UnavailableError(absl::StrCat("preempted: ", what));
  s.SetPayload(kPreemptionUrl, absl::Cord("1"));
  return s;
}

bool IsPreemption(const absl::Status &status) {
  return status.GetPayload(kPreemptionUrl).has_value();
}

absl::Status RecipeFailureStatus(const std::string &message) {
  absl::Status s = absl::FailedPreconditionError(message);
  s.SetPayload(kRecipeFailureUrl, absl::Cord("1"));
  return s;
}

bool IsRecipeFailure(const absl::Status &status) {
  return status.GetPayload(kRecipeFailureUrl).has_value();
}

absl::Status RunWorker(const TrainOptions &options, const WorkerEnv &env,
                       std::vector<std::string> *flightLocations) {
  // The launcher passes a SIGTERM it gets on as SIGUSR1.
  catchPreemptionForGood(SIGUSR1);
  std::unique_ptr<runtime::FlightRecorder> recorder;
  if (env.flightFd >= 0) {
    MD_ASSIGN_OR_RETURN(recorder, runtime::FlightRecorder::Open(env.flightFd));
    recorder->setPid(static_cast<int32_t>(::getpid()));
  }
  std::unique_ptr<runtime::TraceRecorder> trace;
  std::unique_ptr<TraceOnTerm> onTerm;
  if (!options.tracePath.empty()) {
    trace = std::make_unique<runtime::TraceRecorder>();
    onTerm = std::make_unique<TraceOnTerm>(
        *trace, TracePartPath(options.tracePath, env.rank), env.rank);
  }
  // Whatever a library throws outside the executor's calls (setting up a
  // backend or a comm) is this rank's error too, not a terminate.
  absl::Status s = runtime::StatusOfCall(
      [&] {
        return runWorker(options, env, recorder.get(), trace.get(),
                         flightLocations);
      },
      [&] { return absl::StrFormat("rank %d", env.rank); });
  onTerm.reset();
  // The launcher's watchdog and analysis read the phase: a rank that
  // finished is not stuck, one that failed is about to exit.
  if (recorder != nullptr)
    recorder->setPhase(s.ok() || IsRecipeFailure(s)
                           ? runtime::RankPhase::Finished
                           : runtime::RankPhase::Failed);
  // The timeline up to a failure is what one looks at then.
  if (trace != nullptr) {
    absl::Status written = trace->writeFragment(
        TracePartPath(options.tracePath, env.rank), env.rank);
    if (s.ok())
      s = written;
  }
  return s;
}

namespace {

/// Writes a failed rank's own ring as JSON to $TMPDIR/<job>-flight/
/// rank-<R>.json; returns what the error adds: "; its last collectives are
/// in PATH", or why they could not be written.
std::string writeOwnRing(const runtime::FlightRecorder &ring,
                         const std::vector<std::string> &locations,
                         const WorkerEnv &env) {
  RankRing rr;
  rr.rank = env.rank;
  rr.fate = {RankFate::Kind::Exited, 1}; // what this rank does next
  rr.ring = ring.snapshot();
  const char *tmp = std::getenv("TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/",
                                 env.jobId, "-flight");
  std::string path = absl::StrCat(dir, "/rank-", env.rank, ".json");
  absl::Status made = runtime::MakeDirectories(dir);
  std::FILE *f = made.ok() ? std::fopen(path.c_str(), "w") : nullptr;
  if (f == nullptr)
    return absl::StrCat("; its flight recorder could not be written to ", path);
  std::string json = FlightJson(rr, locations, runtime::MonotonicNs());
  bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok)
    return absl::StrCat("; its flight recorder could not be written to ", path);
  return absl::StrCat("; its last collectives are in ", path);
}

} // namespace

namespace {

/// The rendezvous port of a job torchrun started with its agent's store on
/// MASTER_PORT: rank 0 takes a free port and sets it in the store, the
/// others wait for it there.
absl::StatusOr<int> torchStoreRendezvousPort(const Placement &place,
                                             const WorkerEnv &env,
                                             const TrainOptions &options) {
  const net::Deadline deadline = net::Clock::now() + timeoutOf(options);
  if (place.rank != 0)
    return net::LookUpRendezvousPort(place.masterAddr, place.masterPort,
                                     env.jobId, deadline);
  int port = 0;
  {
    // Bound and released at once: the rendezvous listens there next
    // (SO_REUSEADDR), as --master-port 0 does.
    MD_ASSIGN_OR_RETURN(net::Listener l, net::Listener::listen(0));
    port = l.port();
  }
  MD_RETURN_IF_ERROR(net::PublishRendezvousPort(
      place.masterAddr, place.masterPort, env.jobId, port, deadline));
  return port;
}

/// torchrun's error file (TORCHELASTIC_ERROR_FILE), in the format its
/// `@record` writes, so that torchrun's failure summary shows md's message
/// rather than an exit code alone. Best effort: the error is on stderr too.
void writeTorchrunErrorFile(const std::string &path,
                            const std::string &message) {
  std::string json = absl::StrFormat(
      "{\"message\": {\"message\": %s, \"extraInfo\": {\"timestamp\": "
      "\"%d\"}}}\n",
      runtime::JsonQuote(absl::StrCat("mdrun: ", message)),
      static_cast<int64_t>(::time(nullptr)));
  if (std::FILE *f = std::fopen(path.c_str(), "w"); f != nullptr) {
    (void)std::fwrite(json.data(), 1, json.size(), f);
    (void)std::fclose(f);
  }
}

} // namespace

absl::Status RunRank(const TrainOptions &options, const Placement &place) {
  WorkerEnv env;
  env.rank = place.rank;
  env.worldSize = place.worldSize;
  env.localRank = place.localRank;
  env.localWorldSize = place.ranksPerNode;
  env.masterAddr = place.masterAddr;
  env.masterPort = place.masterPort;
  env.jobId = absl::StrCat("port-", place.masterPort);
  if (const char *job = std::getenv("SLURM_JOB_ID"); job != nullptr)
    env.jobId = absl::StrCat("slurm-", job, "-", place.masterPort);
  if (!place.jobId.empty())
    env.jobId = place.jobId;
  env.threads = options.threads > 0
                    ? static_cast<int>(options.threads)
                    : cpu::CpuBackend::threadsPerRank(place.ranksPerNode);
  rank::DeviceProbe probe;
  if (options.backend != BackendChoice::Cpu)
    probe = ProbeGpus();
  MD_ASSIGN_OR_RETURN(
      rank::RankChoice choice,
      ChooseRankFor(options, place.ranksPerNode, place.nnodes, probe));
  if (!choice.warning.empty() && place.rank == 0)
    absl::FPrintF(stderr, "mdrun: warning: %s\n", choice.warning);
  env.backend = choice.backend;
  env.comm = choice.comm;
  env.device = choice.deviceOf(place.localRank);
  if (place.agentStore && place.worldSize > 1) {
    // torchrun's agent serves its store on MASTER_PORT: the rendezvous
    // meets on a port of rank 0's, published there.
    MD_ASSIGN_OR_RETURN(env.masterPort,
                        torchStoreRendezvousPort(place, env, options));
  }
  if (place.rank == 0)
    absl::FPrintF(stderr,
                  "mdrun: rank 0 of %d (%s: %d node%s x %d), rendezvous at "
                  "%s:%d%s\n",
                  place.worldSize, place.source, place.nnodes,
                  place.nnodes == 1 ? "" : "s", place.ranksPerNode,
                  place.masterAddr, env.masterPort,
                  env.masterPort != place.masterPort
                      ? absl::StrFormat(" (published in torchrun's store at "
                                        "port %d)",
                                        place.masterPort)
                      : "");
  // Without a launcher to read it, the rank keeps its own ring and writes
  // it when it fails (docs/runtime.md, "When a job fails").
  std::unique_ptr<runtime::FlightRecorder> ring;
  if (options.flightRecorder > 0) {
    MD_ASSIGN_OR_RETURN(
        ring, runtime::FlightRecorder::Create(
                  place.rank, static_cast<uint32_t>(options.flightRecorder)));
    env.flightFd = ::dup(ring->fd());
  }
  if (!options.tracePath.empty())
    MD_RETURN_IF_ERROR(PrepareTrace(options.tracePath));
  // No launcher stands between the scheduler and this rank: srun and mpirun
  // pass a preemption's SIGTERM to the ranks themselves. (A launcher's
  // ranks keep SIGTERM's default: the launcher stops them with it.)
  PreemptOn term(SIGTERM);
  std::vector<std::string> locations; // the plan's, once it has loaded
  absl::Status s = RunWorker(options, env, &locations);
  if (!options.tracePath.empty()) {
    // No launcher joins the ranks' fragments: each rank writes its own file.
    std::vector<int> missing;
    absl::Status joined = JoinTrace(
        options.tracePath, {place.rank},
        absl::StrCat(options.tracePath, ".rank", place.rank, ".json"), missing);
    if (s.ok() && !joined.ok())
      s = joined;
  }
  if (s.ok())
    return s;
  if (IsRecipeFailure(s)) {
    // Every rank failed at the same step: rank 0 says so, the others exit
    // with the same status quietly.
    return place.rank == 0 ? s : RecipeFailureStatus("");
  }
  // A preemption is no failure either: each rank says where it stopped and
  // exits 75 (the status keeps its mark, which a rewritten one would lose).
  if (IsPreemption(s))
    return s;
  std::string message = absl::StrFormat("rank %d: %s", place.rank, s.message());
  if (ring != nullptr)
    absl::StrAppend(&message, writeOwnRing(*ring, locations, env));
  if (!place.errorFile.empty())
    writeTorchrunErrorFile(place.errorFile, message);
  return absl::Status(s.code(), message);
}

} // namespace md::mdrun
