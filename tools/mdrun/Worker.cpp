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
#include "runtime/core/Executor.h"
#include "runtime/core/Json.h"
#include "runtime/core/FlightRecorder.h"
#include "runtime/core/Safetensors.h"
#include "runtime/core/Status.h"
#include "runtime/core/TraceRecorder.h"
#include "runtime/cpu/CommThread.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/CpuIsa.h"
#include "runtime/gloo/GlooComm.h"
#include "runtime/net/Rendezvous.h"
#include "runtime/net/Socket.h"
#include "runtime/net/TorchStore.h"
#include "runtime/plan/Loader.h"
#include "runtime/plan/MemoryFormat.h"
#include "runtime/shm/ShmComm.h"
#include "tools/cli/Format.h"
#include "tools/mdrun/FlightAnalysis.h"
#include "tools/mdrun/Trace.h"
#if MD_ENABLE_CUDA
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Device.h"
#include "runtime/nccl/NcclComm.h"
#include "runtime/nccl/StagedComm.h"
#endif

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
    size_t slash = path.find_last_of('/');
    if (slash != std::string::npos && slash > 0)
      MD_RETURN_IF_ERROR(runtime::MakeDirectories(path.substr(0, slash)));
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
  const char *backend = std::getenv("MD_BACKEND");
  if (backend == nullptr || std::string(backend) == "cpu")
    env.backend = BackendChoice::Cpu;
  else if (std::string(backend) == "cuda")
    env.backend = BackendChoice::Cuda;
  else
    return absl::InvalidArgumentError(
        absl::StrCat("MD_BACKEND=", backend, ": expected cpu or cuda"));
  if (const char *c = std::getenv("MD_COMM"); c != nullptr) {
    MD_ASSIGN_OR_RETURN(env.comm, parseCommKind(c));
  } else {
    env.comm =
        env.localWorldSize == env.worldSize ? CommKind::Shm : CommKind::Gloo;
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

/// FNV-1a over the plan file: ranks that load different files (or a file
/// rewritten between their starts) refuse to run together.
absl::StatusOr<std::string> planFingerprint(const std::string &path,
                                            const WorkerEnv &env) {
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    return absl::NotFoundError(absl::StrCat(path, ": cannot open the plan"));
  uint64_t h = 1469598103934665603ull;
  unsigned char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n; ++i)
      h = (h ^ buf[i]) * 1099511628211ull;
  std::fclose(f);
  return absl::StrFormat("plan %016x, world %d, %s backend, %s comm", h,
                         env.worldSize,
                         env.backend == BackendChoice::Cuda ? "cuda" : "cpu",
                         commKindName(env.comm));
}

std::chrono::milliseconds timeoutOf(const TrainOptions &options) {
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::llround(options.timeoutSeconds * 1000)));
}

/// Where this rank meets the others (rank 0's MASTER_ADDR:MASTER_PORT) and
/// who it is, for the rendezvous that hands out the NCCL id and for the
/// gloo comm, whose options extend the rendezvous'.
void setMeeting(net::RendezvousOptions &o, const TrainOptions &options,
                const WorkerEnv &env, const std::string &fingerprint) {
  o.masterAddr = env.masterAddr;
  o.masterPort = env.masterPort;
  o.rank = env.rank;
  o.worldSize = env.worldSize;
  o.fingerprint = fingerprint;
  o.timeout = timeoutOf(options);
}

absl::StatusOr<std::unique_ptr<shm::ShmComm>>
makeShmComm(const TrainOptions &options, const WorkerEnv &env,
            const plan::LoadedPlan &loaded, const std::string &fingerprint) {
  if (env.localWorldSize != env.worldSize)
    return absl::InvalidArgumentError(absl::StrFormat(
        "the shared-memory comm needs every rank on one node, but "
        "LOCAL_WORLD_SIZE=%d and WORLD_SIZE=%d",
        env.localWorldSize, env.worldSize));
  shm::ShmCommOptions co;
  co.jobId = env.jobId;
  co.rank = env.rank;
  co.worldSize = env.worldSize;
  co.shardSize = static_cast<int>(loaded.world().shardGroupSize);
  co.timeout = timeoutOf(options);
  // The ranks of one node check their plans as the rendezvous does across
  // nodes: the same file content, W, backend and comm.
  co.fingerprint = fingerprint;
  return shm::ShmComm::create(co);
}

} // namespace

namespace {

/// A rank's backend and comm, and how the banner describes them. The comm
/// holds on to the backend's streams: it is declared after the backend, so
/// it goes first.
struct RankDevice {
  std::unique_ptr<runtime::Backend> backend;
  std::unique_ptr<runtime::Comm> comm;
  std::string where;
  /// What the banner says of the device after its first line: the CPU's
  /// instruction set and GEMM paths, and their warnings.
  std::vector<std::string> lines;
  std::string refusal; // why the CPU comm thread is off although asked for
};

/// The CUDA backend on env.device and the NCCL or staged comm.
absl::StatusOr<RankDevice> makeCudaRank(const TrainOptions &options,
                                        const WorkerEnv &env,
                                        const plan::LoadedPlan &loaded,
                                        const std::string &fingerprint,
                                        int shardSize) {
  RankDevice r;
#if MD_ENABLE_CUDA
  MD_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaBackend> cb,
                      cuda::CudaBackend::create(env.device));
  cuda::CudaBackend &device = *cb;
  r.backend = std::move(cb);
  r.where = absl::StrFormat("rank 0 on cuda:%d", env.device);
  if (absl::StatusOr<std::vector<cuda::DeviceInfo>> devices =
          cuda::queryDevices();
      devices.ok() && env.device < static_cast<int>(devices->size()))
    absl::StrAppend(&r.where, " (", (*devices)[env.device].name, ")");
  if (env.comm == CommKind::Nccl) {
    // Rank 0 makes the NCCL id; the TCP rendezvous hands it to all.
    nccl::UniqueId id{};
    if (env.rank == 0) {
      MD_ASSIGN_OR_RETURN(id, nccl::NewUniqueId());
    }
    net::RendezvousOptions ro;
    setMeeting(ro, options, env, fingerprint);
    MD_ASSIGN_OR_RETURN(
        std::vector<std::string> payloads,
        net::Rendezvous(ro, env.rank == 0
                                ? std::string_view(id.data(), id.size())
                                : std::string_view()));
    if (payloads.empty() || payloads[0].size() != id.size())
      return absl::InternalError(
          "the rendezvous did not deliver rank 0's NCCL id");
    std::copy(payloads[0].begin(), payloads[0].end(), id.begin());
    nccl::NcclCommOptions no;
    no.rank = env.rank;
    no.worldSize = env.worldSize;
    no.shardSize = shardSize;
    no.uniqueId = id;
    no.backend = &device;
    no.timeout = timeoutOf(options);
    MD_ASSIGN_OR_RETURN(r.comm, nccl::NcclComm::create(no));
  } else if (env.comm == CommKind::ShmStaged) {
    MD_ASSIGN_OR_RETURN(std::unique_ptr<shm::ShmComm> host,
                        makeShmComm(options, env, loaded, fingerprint));
    r.comm = std::make_unique<nccl::StagedComm>(std::move(host), device);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("the CUDA backend takes the nccl or shm-staged comm, not ",
                     commKindName(env.comm)));
  }
#else
  return absl::UnimplementedError(
      "this mdrun was built without CUDA; it runs the CPU backend only");
#endif
  return r;
}

/// The CPU backend (with the comm thread unless it is off or the plan's
/// streams are unordered) and the shm or gloo comm.
absl::StatusOr<RankDevice>
makeCpuRank(const TrainOptions &options, const WorkerEnv &env,
            const plan::LoadedPlan &loaded, const std::string &fingerprint,
            int shardSize, runtime::FlightRecorder *recorder) {
  RankDevice r;
  auto cpuBackend = std::make_unique<cpu::CpuBackend>(env.threads);
  MD_RETURN_IF_ERROR(cpu::CheckCpuIsaCap());
  r.lines.push_back(absl::StrCat("cpu: ", cpu::CpuBackend::isaReport()));
  for (const std::string &w : cpu::CpuBackend::isaWarnings())
    r.lines.push_back(absl::StrCat("warning: ", w));
  r.where = absl::StrFormat("%d BLAS thread%s per rank", cpuBackend->threads(),
                            cpuBackend->threads() == 1 ? "" : "s");
  // --comm-thread on (the default): the comm stream on a thread of its
  // own, its collectives overlapping compute (docs/runtime-cpu.md), when
  // the plan's events order the two streams; without the thread the
  // backend runs them in program order, so any plan runs.
  cpu::CommThreadBackend *threaded = nullptr;
  // A plan that cannot be laid out fails in Executor::Create, which says
  // why.
  if (options.commThread)
    r.refusal =
        runtime::Executor::UnorderedStreams(loaded, env.worldSize).value_or("");
  if (options.commThread && r.refusal.empty()) {
    auto t = std::make_unique<cpu::CommThreadBackend>(std::move(cpuBackend));
    threaded = t.get();
    r.backend = std::move(t);
    absl::StrAppend(&r.where, ", a comm thread");
  } else {
    r.backend = std::move(cpuBackend);
    absl::StrAppend(&r.where, ", no comm thread");
  }
  if (env.comm == CommKind::Shm) {
    MD_ASSIGN_OR_RETURN(r.comm, makeShmComm(options, env, loaded, fingerprint));
  } else if (env.comm == CommKind::Gloo) {
    gloo::GlooCommOptions go;
    setMeeting(go, options, env, fingerprint);
    go.shardSize = shardSize;
    MD_ASSIGN_OR_RETURN(r.comm, gloo::GlooComm::create(go));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("the CPU backend takes the shm or gloo comm, not ",
                     commKindName(env.comm)));
  }
  if (threaded != nullptr)
    r.comm = std::make_unique<cpu::CommThreadComm>(std::move(r.comm), *threaded,
                                                   recorder);
  return r;
}

absl::Status runWorker(const TrainOptions &options, const WorkerEnv &env,
                       runtime::FlightRecorder *recorder,
                       runtime::TraceRecorder *trace) {
  plan::LoadOptions lo;
  lo.worldSize = env.worldSize;
  MD_ASSIGN_OR_RETURN(plan::LoadedPlan loaded,
                      plan::LoadPlanFile(options.planPath, lo));
  MD_ASSIGN_OR_RETURN(std::string fingerprint,
                      planFingerprint(options.planPath, env));
  const int shardSize = static_cast<int>(loaded.world().shardGroupSize);

  MD_ASSIGN_OR_RETURN(
      RankDevice rd,
      env.backend == BackendChoice::Cuda
          ? makeCudaRank(options, env, loaded, fingerprint, shardSize)
          : makeCpuRank(options, env, loaded, fingerprint, shardSize,
                        recorder));
  runtime::Backend &backend = *rd.backend;
  runtime::Comm &comm = *rd.comm;
  const std::string &where = rd.where, &refusal = rd.refusal;

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

absl::Status RunWorker(const TrainOptions &options, const WorkerEnv &env) {
  // The launcher passes a SIGTERM it gets on as SIGUSR1.
  PreemptOn usr1(SIGUSR1);
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
      [&] { return runWorker(options, env, recorder.get(), trace.get()); },
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
                         const TrainOptions &options, const WorkerEnv &env) {
  RankRing rr;
  rr.rank = env.rank;
  rr.fate = {RankFate::Kind::Exited, 1}; // what this rank does next
  rr.ring = ring.snapshot();
  std::vector<std::string> locations;
  plan::LoadOptions lo;
  lo.worldSize = env.worldSize;
  if (absl::StatusOr<plan::LoadedPlan> loaded =
          plan::LoadPlanFile(options.planPath, lo);
      loaded.ok())
    locations = FlightLocations(loaded->plan());
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
  GpuProbe probe;
  if (options.backend != BackendChoice::Cpu)
    probe = ProbeGpus();
  MD_ASSIGN_OR_RETURN(Execution ex, ChooseExecution(options, place.ranksPerNode,
                                                    place.nnodes, probe));
  if (!ex.warning.empty() && place.rank == 0)
    absl::FPrintF(stderr, "mdrun: warning: %s\n", ex.warning);
  env.backend = ex.backend;
  env.comm = ex.comm;
  env.device = ex.deviceOf(place.localRank);
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
  absl::Status s = RunWorker(options, env);
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
    absl::StrAppend(&message, writeOwnRing(*ring, options, env));
  if (!place.errorFile.empty())
    writeTorchrunErrorFile(place.errorFile, message);
  return absl::Status(s.code(), message);
}

} // namespace md::mdrun
