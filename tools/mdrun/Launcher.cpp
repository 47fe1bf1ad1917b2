//===- Launcher.cpp - start, watch and stop the ranks of a job ------------===//

#include "tools/mdrun/Launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/exec/ArenaLayout.h"
#include "runtime/exec/DataFeeds.h"
#include "runtime/exec/Executor.h"
#include "runtime/core/FlightRecorder.h"
#include "runtime/exec/Safetensors.h"
#include "runtime/core/Status.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/CpuIsa.h"
#include "runtime/plan/Loader.h"
#include "runtime/rank/Builtin.h"
#include "tools/mdrun/Cluster.h"
#include "tools/mdrun/Outputs.h"
#include "tools/mdrun/ControlLink.h"
#include "tools/mdrun/FlightAnalysis.h"
#include "tools/mdrun/HostMemory.h"
#include "tools/mdrun/Trace.h"
#include "tools/mdrun/Worker.h"

#if MD_ENABLE_CUDA
#include "runtime/cuda/Device.h"
#endif

namespace md::mdrun {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t gInterrupt = 0;
volatile sig_atomic_t gTerms = 0; // SIGTERMs received
extern "C" void onInterrupt(int sig) {
  gInterrupt = sig;
  if (sig == SIGTERM)
    gTerms = gTerms + 1;
}

/// How long ranks get to exit after SIGTERM before SIGKILL.
constexpr auto kGracePeriod = std::chrono::seconds(3);
/// How long ranks get to finish their step and write their checkpoint after
/// the launcher passes a SIGTERM on (a preemption) before they are stopped:
/// schedulers give 30 s or more before their SIGKILL (Slurm's KillWait).
constexpr auto kPreemptGrace = std::chrono::seconds(120);
/// How long ranks get to report a lost peer themselves when another node's
/// launcher went away without a word.
constexpr auto kLostGrace = std::chrono::seconds(2);
/// How long node 0's launcher waits, after a failed attempt, for every
/// other node's to say its ranks have ended (they take kGracePeriod at
/// most once told) before the job stops rather than restarts.
constexpr auto kRestartWait = std::chrono::seconds(30);

/// Whether nothing listens on `port` of any interface now.
bool portFree(int port) {
  if (port <= 0 || port > 65535)
    return false;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = ::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

absl::StatusOr<int> pickOnePort();

/// A free port P whose neighbour P + 1 is free too: the launchers' control
/// connection takes it (ControlLink.h).
absl::StatusOr<int> pickFreePort() {
  int port = 0;
  for (int attempt = 0; attempt < 16; ++attempt) {
    MD_ASSIGN_OR_RETURN(port, pickOnePort());
    if (portFree(port + 1))
      break;
  }
  return port;
}

absl::StatusOr<int> pickOnePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot pick a free port: socket: ",
                                            std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  // Any interface: ranks on other nodes connect to it.
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
    int err = errno;
    ::close(fd);
    return absl::InternalError(
        absl::StrCat("cannot pick a free port: ", std::strerror(err)));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

struct Child {
  pid_t pid = -1;
  int errorFd = -1; // read end of the rank's error pipe
  bool running = false;
  int status = 0;
  std::string message;
};

void drain(Child &c) {
  if (c.errorFd < 0)
    return;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(c.errorFd, buf, sizeof buf);
    if (n > 0) {
      if (c.message.size() < 65536)
        c.message.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    break;
  }
}

std::string describeExit(int rank, const Child &c) {
  if (WIFSIGNALED(c.status)) {
    int sig = WTERMSIG(c.status);
    return absl::StrFormat("rank %d was killed by signal %d (%s)", rank, sig,
                           strsignal(sig));
  }
  std::string message = c.message;
  while (!message.empty() && (message.back() == '\n' || message.back() == ' '))
    message.pop_back();
  if (!message.empty())
    return absl::StrFormat("rank %d failed: %s", rank, message);
  return absl::StrFormat("rank %d exited with status %d", rank,
                         WEXITSTATUS(c.status));
}

/// A rank that stopped after a step because the job was preempted: every
/// rank agrees on that step, so this is no failure.
bool preempted(const Child &c) {
  return WIFEXITED(c.status) && WEXITSTATUS(c.status) == kPreemptedExitCode;
}

/// A rank whose recipe ran fail("why"): every rank ends after that step,
/// so this is how the job ends, not a rank's failure.
bool recipeFailed(const Child &c) {
  return WIFEXITED(c.status) && WEXITSTATUS(c.status) == kRecipeFailedExitCode;
}

bool failed(const Child &c) {
  return !WIFEXITED(c.status) ||
         (WEXITSTATUS(c.status) != 0 && !preempted(c) && !recipeFailed(c));
}

/// The ranks this node starts: the world size the plan runs at, and this
/// node's share of it.
struct NodeRanks {
  int64_t world = 0;
  int perNode = 0;
  int firstRank = 0;
  /// What this node's ranks need, as the plan predicts it.
  NodeMemoryNeed memory;
  /// The plan's .mdl locations, for the flight analysis.
  std::vector<std::string> locations;
};

/// Where the instruction that first writes transient buffer `b` comes from
/// in the .mdl program; null when unknown.
const fb::SourceLocation *writerLocation(const fb::Plan &plan,
                                         const fb::Buffer &b) {
  if (b.block() < 0 || b.first() < 0 || !plan.blocks() ||
      static_cast<uint32_t>(b.block()) >= plan.blocks()->size())
    return nullptr;
  const auto *insts = plan.blocks()->Get(b.block())->instructions();
  if (!insts || static_cast<uint32_t>(b.first()) >= insts->size())
    return nullptr;
  int32_t loc = insts->Get(b.first())->loc();
  if (loc < 0 || !plan.locations() ||
      static_cast<uint32_t>(loc) >= plan.locations()->size())
    return nullptr;
  return plan.locations()->Get(loc);
}

/// The `n` largest buffers of one rank at `world`, largest first, each
/// named with the .mdl location of its writer where the plan has one.
absl::StatusOr<std::vector<BufferBytes>>
largestBuffers(const plan::LoadedPlan &loaded, const plan::WorldBinding &world,
               size_t n) {
  MD_ASSIGN_OR_RETURN(runtime::ArenaLayout layout,
                      runtime::LayOutArenas(loaded, world));
  std::vector<BufferBytes> all;
  const auto *buffers = loaded.plan().buffers();
  for (size_t x = 0; x < layout.buffers.size(); ++x) {
    const runtime::BufferLayout &l = layout.buffers[x];
    if (l.placement == runtime::Placement::None ||
        l.placement == runtime::Placement::Alias || l.capacity <= 0)
      continue;
    const fb::Buffer &b = *buffers->Get(x);
    std::string name = b.name() ? b.name()->str() : absl::StrCat("buffer ", x);
    if (const fb::SourceLocation *loc = writerLocation(loaded.plan(), b))
      absl::StrAppend(&name, " (", loc->file() ? loc->file()->str() : "", ":",
                      loc->line(), ":", loc->col(), ")");
    all.push_back({std::move(name), l.capacity});
  }
  size_t keep = std::min(n, all.size());
  std::partial_sort(all.begin(), all.begin() + keep, all.end(),
                    [](const BufferBytes &a, const BufferBytes &b) {
                      return a.bytes > b.bytes;
                    });
  all.resize(keep);
  return all;
}

/// Checks the plan once here, so that a bad file or a world size it cannot
/// run at is one message rather than one per rank.
absl::StatusOr<NodeRanks> checkPlan(const TrainOptions &options,
                                    const Placement &place) {
  const int nnodes = place.nnodes;
  plan::LoadOptions lo;
  lo.worldSize = static_cast<int64_t>(place.ranksPerNode) * nnodes;
  MD_ASSIGN_OR_RETURN(plan::LoadedPlan loaded,
                      plan::LoadPlanFile(options.planPath, lo));
  int64_t world = loaded.bound() ? loaded.world().worldSize : nnodes;
  if (world % nnodes != 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s is pinned to world size %d, which %d nodes cannot split evenly",
        options.planPath, world, nnodes));
  MD_ASSIGN_OR_RETURN(plan::WorldBinding binding,
                      plan::BindWorldSize(loaded, world));
  MD_RETURN_IF_ERROR(
      runtime::StepsToRun(loaded.plan(), options.steps).status());
  NodeRanks ranks;
  ranks.world = world;
  ranks.perNode = static_cast<int>(world / nnodes);
  ranks.firstRank = place.nodeRank * ranks.perNode;
  MD_ASSIGN_OR_RETURN(plan::MemoryReport memory,
                      plan::PerRankMemory(loaded, world));
  ranks.memory.perRank = memory;
  ranks.memory.ranksOnNode = ranks.perNode;
  MD_ASSIGN_OR_RETURN(ranks.memory.largest, largestBuffers(loaded, binding, 3));
  ranks.locations = FlightLocations(loaded.plan());
  return ranks;
}

/// The data before any rank starts: a missing file, one of another token
/// width, ids outside the vocabulary (DataFeeds::checkSources).
absl::Status checkData(const TrainOptions &options, int64_t world) {
  plan::LoadOptions lo;
  lo.worldSize = world;
  MD_ASSIGN_OR_RETURN(plan::LoadedPlan loaded,
                      plan::LoadPlanFile(options.planPath, lo));
  runtime::DataFeeds feeds(
      loaded.plan(), world, 0,
      static_cast<uint64_t>(loaded.plan().recipe()->seed()));
  return feeds.checkSources(!options.evaluate);
}

/// What every rank of this node is started with: mdrun's own executable
/// with the launcher's arguments and --worker, and the environment that
/// tells it where it sits in the job.
struct RankSpawn {
  const Placement *place = nullptr;
  NodeRanks ranks;
  rank::RankChoice choice;
  int threads = 0;
  int port = 0;
  std::string jobId;
  pid_t launcher = 0;
  std::string exe;
  std::vector<std::string> args;
  /// Each local rank's flight recorder memfd; empty without recorders.
  std::vector<int> flightFds;
  /// OPENBLAS_CORETYPE for the ranks under MD_CPU_ISA ("" to leave it):
  /// OpenBLAS picks its kernels when it is loaded, before a rank could.
  std::string openblasCore;
};

/// Chooses the backend, threads and rendezvous port, and says so on
/// stderr where the user did not choose them.
absl::StatusOr<RankSpawn> prepareSpawn(const TrainOptions &options,
                                       const Placement &place,
                                       const NodeRanks &ranks, int argc,
                                       char **argv) {
  RankSpawn spawn;
  spawn.place = &place;
  spawn.ranks = ranks;
  rank::DeviceProbe probe;
  if (options.backend != BackendChoice::Cpu)
    probe = ProbeGpus();
  MD_ASSIGN_OR_RETURN(
      spawn.choice, ChooseRankFor(options, ranks.perNode, place.nnodes, probe));
  if (!spawn.choice.warning.empty())
    absl::FPrintF(stderr, "mdrun: warning: %s\n", spawn.choice.warning);

  if (const cpu::CpuIsaConfig &isa = cpu::CpuIsa();
      isa.cap && std::getenv("OPENBLAS_CORETYPE") == nullptr)
    spawn.openblasCore = cpu::OpenBlasCoreType(isa.effective);
  spawn.threads = options.threads > 0
                      ? static_cast<int>(options.threads)
                      : cpu::CpuBackend::threadsPerRank(ranks.perNode);
  spawn.port = place.masterPort;
  if (spawn.port == 0) {
    MD_ASSIGN_OR_RETURN(spawn.port, pickFreePort());
    absl::FPrintF(stderr, "mdrun: rendezvous port %d\n", spawn.port);
  }
  if (place.nnodes > 1)
    absl::FPrintF(stderr,
                  "mdrun: node %d of %d (%s): ranks %d to %d of %d, "
                  "rendezvous at %s:%d\n",
                  place.nodeRank, place.nnodes, place.source, ranks.firstRank,
                  ranks.firstRank + ranks.perNode - 1, ranks.world,
                  place.masterAddr, spawn.port);
  char exe[4096];
  ssize_t len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0)
    return absl::InternalError(absl::StrCat(
        "cannot find mdrun's own executable: ", std::strerror(errno)));
  exe[len] = '\0';
  spawn.exe = exe;
  spawn.launcher = ::getpid();
  spawn.jobId = absl::StrFormat(
      "mdrun-%d-%x", spawn.launcher,
      static_cast<unsigned>(Clock::now().time_since_epoch().count()));
  spawn.args.push_back(spawn.exe);
  for (int i = 1; i < argc; ++i)
    spawn.args.push_back(argv[i]);
  spawn.args.push_back("--worker");
  return spawn;
}

/// In the forked child of local rank `r`: sets the rank's environment and
/// runs mdrun --worker; reports a failed exec through `errorFd`. Never
/// returns.
[[noreturn]] void execRank(const RankSpawn &spawn, int r, int errorFd,
                           char *const *argv) {
  // The rank dies with the launcher, however the launcher ends.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != spawn.launcher)
    _exit(1);
  ::fcntl(errorFd, F_SETFD, 0);
  auto set = [](const char *k, const std::string &v) {
    ::setenv(k, v.c_str(), 1);
  };
  const Placement &place = *spawn.place;
  const rank::RankChoice &choice = spawn.choice;
  set("RANK", absl::StrCat(spawn.ranks.firstRank + r));
  set("LOCAL_RANK", absl::StrCat(r));
  set("WORLD_SIZE", absl::StrCat(spawn.ranks.world));
  set("LOCAL_WORLD_SIZE", absl::StrCat(spawn.ranks.perNode));
  set("GROUP_RANK", absl::StrCat(place.nodeRank));
  set("MASTER_ADDR", place.masterAddr);
  set("MASTER_PORT", absl::StrCat(spawn.port));
  set("MD_BACKEND", choice.backend);
  set("MD_COMM", choice.comm);
  set("MD_DEVICE", absl::StrCat(choice.deviceOf(r)));
  set("MD_JOB_ID", spawn.jobId);
  set("MD_ERROR_FD", absl::StrCat(errorFd));
  set("MD_THREADS", absl::StrCat(spawn.threads));
  if (static_cast<size_t>(r) < spawn.flightFds.size()) {
    // The rank maps its own ring; the others' stay close-on-exec.
    ::fcntl(spawn.flightFds[r], F_SETFD, 0);
    set("MD_FLIGHT_FD", absl::StrCat(spawn.flightFds[r]));
  }
  set("OPENBLAS_NUM_THREADS", absl::StrCat(spawn.threads));
  if (!spawn.openblasCore.empty())
    set("OPENBLAS_CORETYPE", spawn.openblasCore);
  ::execv(spawn.exe.c_str(), argv);
  std::string msg =
      absl::StrCat("cannot run ", spawn.exe, ": ", std::strerror(errno));
  (void)!::write(errorFd, msg.data(), msg.size());
  _exit(127);
}

/// Forks local rank `r`; `child` holds its pid and the read end of its
/// error pipe.
absl::Status startRank(const RankSpawn &spawn, int r, char *const *argv,
                       Child &child) {
  int rank = spawn.ranks.firstRank + r;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return absl::InternalError(absl::StrCat("cannot start rank ", rank,
                                            ": pipe: ", std::strerror(errno)));
  std::fflush(nullptr);
  // The rank starts with SIGUSR1 (a preemption passed on) blocked, until it
  // catches it (Worker.cpp): one sent while it starts stays pending rather
  // than killing it.
  sigset_t usr1, before;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ::pthread_sigmask(SIG_BLOCK, &usr1, &before);
  pid_t pid = ::fork();
  if (pid != 0)
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) {
    int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return absl::InternalError(absl::StrCat("cannot start rank ", rank,
                                            ": fork: ", std::strerror(err)));
  }
  if (pid == 0)
    execRank(spawn, r, fds[1], argv);
  ::close(fds[1]);
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  child.pid = pid;
  child.errorFd = fds[0];
  child.running = true;
  return absl::OkStatus();
}

/// How a rank's process stands: from its exit status once reaped, else
/// from /proc (state T or t: stopped by a signal or a tracer).
RankFate fateOf(const Child &c) {
  RankFate f;
  if (!c.running) {
    if (WIFSIGNALED(c.status)) {
      f.kind = RankFate::Kind::Signaled;
      f.code = WTERMSIG(c.status);
    } else {
      f.kind = RankFate::Kind::Exited;
      f.code = WEXITSTATUS(c.status);
    }
    return f;
  }
  std::ifstream stat(absl::StrCat("/proc/", c.pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  // "pid (comm) S ...": the state follows the last ')'.
  size_t paren = line.rfind(')');
  if (paren != std::string::npos && paren + 2 < line.size() &&
      (line[paren + 2] == 'T' || line[paren + 2] == 't'))
    f.kind = RankFate::Kind::Stopped;
  return f;
}

/// This node's flight recorders and what the analysis of a failed job
/// needs: the plan's locations, where the rings go as JSON, and the
/// progress timeout.
struct FlightWatch {
  std::vector<std::unique_ptr<runtime::FlightRecorder>> rings; // local ranks
  std::vector<std::string> locations;
  int firstRank = 0;
  FlightWorld world; // the job beyond this node's ranks
  std::string dir;
  int64_t timeoutNs = 0;
  bool reported = false;
  /// Who holds a stalled job up, as the analysis saw it, for the stall's
  /// message (on every node, through the control link): "rank 0 waits for
  /// rank 1 on node 1", "rank 1 was stopped (...)"; "" when it says neither.
  std::string stallWho;
};

/// Prints the analysis of the rings and writes them as JSON, once per job.
/// Called before the launcher stops any rank, so the fates are the
/// failure's own, not the launcher's signals.
/// A job that failed before any rank began a collective (a missing data
/// file, say) gets no analysis unless it stalled: the error says it all.
void reportFlight(FlightWatch &w, const std::vector<Child> &children,
                  bool stalled) {
  if (w.reported || w.rings.empty())
    return;
  w.reported = true;
  int64_t now = runtime::MonotonicNs();
  std::vector<RankRing> ranks;
  uint64_t begun = 0;
  for (size_t r = 0; r < w.rings.size(); ++r) {
    RankRing rr;
    rr.rank = w.firstRank + static_cast<int>(r);
    rr.fate = fateOf(children[r]);
    rr.ring = w.rings[r]->snapshot();
    begun = std::max(begun, rr.ring.begun);
    ranks.push_back(std::move(rr));
  }
  if (begun == 0 && !stalled)
    return;
  FlightFinding finding = AnalyzeFlight(ranks, w.locations, now, w.world);
  std::vector<int> stopped;
  for (const RankRing &rr : ranks)
    if (rr.fate.kind == RankFate::Kind::Stopped)
      stopped.push_back(rr.rank);
  if (!finding.elsewhere.empty()) {
    std::vector<int> nodes;
    for (int r : finding.elsewhere)
      if (nodes.empty() || nodes.back() != r / w.world.ranksPerNode)
        nodes.push_back(r / w.world.ranksPerNode);
    w.stallWho = absl::StrCat(RankListText(finding.waiting),
                              finding.waiting.size() == 1 ? " waits" : " wait",
                              " for ", RankListText(finding.elsewhere), " on ",
                              RankListText(nodes, "node"));
  } else if (!stopped.empty()) {
    w.stallWho = absl::StrCat(RankListText(stopped), " ",
                              stopped.size() == 1 ? "was" : "were",
                              " stopped (SIGSTOP, SIGTSTP or a debugger)");
  }
  absl::FPrintF(stderr, "mdrun: flight recorder: %s\n", finding.text);
  absl::Status made = runtime::MakeDirectories(w.dir);
  for (const RankRing &rr : ranks) {
    if (!made.ok())
      break;
    std::string path = absl::StrCat(w.dir, "/rank-", rr.rank, ".json");
    std::ofstream out(path, std::ios::trunc);
    out << FlightJson(rr, w.locations, now);
    out.close();
    if (!out)
      made = absl::InternalError(absl::StrCat(path, ": cannot write"));
  }
  if (made.ok())
    absl::FPrintF(stderr,
                  "mdrun: flight recorder: the last collectives of %s are in "
                  "%s/rank-N.json\n",
                  RankListText([&] {
                    std::vector<int> all;
                    for (const RankRing &rr : ranks)
                      all.push_back(rr.rank);
                    return all;
                  }()),
                  w.dir);
  else
    absl::FPrintF(stderr,
                  "mdrun: flight recorder: cannot write the rings: %s\n",
                  made.message());
  std::fflush(stderr);
}

/// Joins the fragments this node's ranks wrote into the trace file and
/// says where it is (and which ranks wrote none: killed, say).
void joinTrace(const std::string &file, int firstRank, int perNode) {
  std::vector<int> ranks, missing;
  for (int r = 0; r < perNode; ++r)
    ranks.push_back(firstRank + r);
  absl::Status s = JoinTrace(file, ranks, file, missing);
  if (!s.ok()) {
    absl::FPrintF(stderr, "mdrun: warning: %s\n", s.message());
    return;
  }
  std::vector<int> written;
  for (int r : ranks)
    if (std::find(missing.begin(), missing.end(), r) == missing.end())
      written.push_back(r);
  absl::FPrintF(stderr,
                "mdrun: trace of %s in %s (open it in ui.perfetto.dev or "
                "chrome://tracing)%s\n",
                written.empty() ? "no rank" : RankListText(written), file,
                missing.empty()
                    ? ""
                    : absl::StrCat("; ", RankListText(missing), " wrote none"));
}

/// How the ranks ended, as superviseRanks saw it.
struct Supervised {
  /// The local index of the first rank that failed, or -1.
  int firstFailure = -1;
  /// No rank completed a collective or a step within the timeout: the
  /// launcher stopped them.
  bool stalled = false;
  /// Why the job failed on another node, when its launcher said so first.
  std::string elsewhere;
  /// A SIGTERM was passed on to the ranks as a preemption.
  bool preempting = false;
};

/// What the watchdog reports: "no rank completed a collective or a step in
/// 2 s (--timeout)".
std::string stallText(double timeoutSeconds) {
  return absl::StrFormat(
      "no rank completed a collective or a step in %g s (--timeout)",
      timeoutSeconds);
}

/// The watchdog's report with who holds the job up, where the analysis
/// says: "...; rank 0 waits for rank 1 on node 1".
std::string stallText(double timeoutSeconds, const FlightWatch *watch) {
  std::string text = stallText(timeoutSeconds);
  if (watch != nullptr && !watch->stallWho.empty())
    absl::StrAppend(&text, "; ", watch->stallWho);
  return text;
}

/// What superviseRanks watches besides the ranks' exits: their flight
/// recorders, and the other nodes' launchers.
struct Watchers {
  FlightWatch *flight = nullptr;
  ControlLink *link = nullptr;
  int firstRank = 0;
  double timeoutSeconds = 0;
};

/// Waits for every started rank to exit, collecting what each writes to its
/// error pipe. The first rank to fail, or an interrupt, stops the others:
/// SIGTERM (and SIGCONT, for a stopped rank to receive it), then SIGKILL
/// after kGracePeriod. `stopping` starts that at once (not every rank could
/// be started). With flight recorders (`watch` not null), a failure first
/// prints their analysis, and so does a job in which no rank completed a
/// collective or a step within the timeout, which is then stopped. With a
/// control connection (`link`), a failure here is told to the other
/// nodes' launchers, and one there stops the ranks here.
Supervised superviseRanks(std::vector<Child> &children, bool stopping,
                          const Watchers &w) {
  FlightWatch *watch = w.flight;
  auto killAll = [&](int sig) {
    for (Child &c : children)
      if (c.running)
        ::kill(c.pid, sig);
  };
  Supervised result;
  std::string elsewhere; // a failure on another node, acted on at actAt
  Clock::time_point actAt;
  bool killed = false;
  Clock::time_point stopDeadline = Clock::now() + kGracePeriod;
  Clock::time_point preemptDeadline;
  auto stop = [&] {
    stopping = true;
    stopDeadline = Clock::now() + kGracePeriod;
    killAll(SIGTERM);
    killAll(SIGCONT);
  };
  if (stopping) {
    killAll(SIGTERM);
    killAll(SIGCONT);
  }
  for (;;) {
    int running = 0;
    for (size_t r = 0; r < children.size(); ++r) {
      Child &c = children[r];
      if (!c.running)
        continue;
      drain(c);
      int status = 0;
      pid_t got = ::waitpid(c.pid, &status, WNOHANG);
      if (got == c.pid || (got < 0 && errno == ECHILD)) {
        c.running = false;
        c.status = status;
        drain(c);
        if (failed(c) && !stopping) {
          result.firstFailure = static_cast<int>(r);
          if (watch != nullptr)
            reportFlight(*watch, children, false);
          if (w.link != nullptr)
            w.link->abort(describeExit(w.firstRank + static_cast<int>(r), c));
          stop();
        }
        continue;
      }
      ++running;
    }
    if (running == 0)
      break;
    if (gInterrupt == SIGTERM && gTerms == 1 && !stopping) {
      // A preemption: the ranks finish their step and write the recipe's
      // checkpoint (SIGUSR1 to them; Worker.h), then exit; a second SIGTERM
      // or the end of the grace period stops them as any interrupt does.
      if (!result.preempting) {
        result.preempting = true;
        preemptDeadline = Clock::now() + kPreemptGrace;
        absl::FPrintF(stderr,
                      "mdrun: SIGTERM: the ranks stop after this step and "
                      "write the recipe's checkpoint (a second SIGTERM stops "
                      "them at once)\n");
        killAll(SIGUSR1);
        killAll(SIGCONT);
      } else if (Clock::now() > preemptDeadline) {
        stop();
      }
    } else if (gInterrupt != 0 && !stopping) {
      if (w.link != nullptr)
        w.link->abort(gInterrupt == SIGINT ? "interrupted by SIGINT"
                                           : "interrupted by a signal");
      stop();
    }
    if (w.link != nullptr && !stopping) {
      if (std::optional<std::string> warning = w.link->takeWarning())
        absl::FPrintF(stderr, "mdrun: warning: %s\n", *warning);
      // The first failure heard of is the one acted on: a later word (the
      // link lost once that node's launcher has gone) must not push actAt
      // back.
      std::optional<ControlLink::Failure> f = w.link->poll();
      if (f && elsewhere.empty()) {
        elsewhere = f->why;
        // A launcher that went away without a word: this node's ranks
        // likely lose their peers too and say more, so they get a moment
        // to fail first; a reported failure stops them at once (the ranks'
        // own errors carry what a peer told them: a save that rank 0 could
        // not publish says why on every rank).
        actAt = f->lost ? Clock::now() + kLostGrace : Clock::now();
      }
      if (!elsewhere.empty() && Clock::now() >= actAt) {
        result.elsewhere = elsewhere;
        if (watch != nullptr)
          reportFlight(*watch, children, true);
        stop();
      }
    }
    if (watch != nullptr && !stopping) {
      // The watchdog: the latest progress of any rank still running.
      int64_t latest = 0;
      for (size_t r = 0; r < children.size(); ++r)
        if (children[r].running)
          latest = std::max(latest, watch->rings[r]->progressNs());
      if (runtime::MonotonicNs() - latest > watch->timeoutNs) {
        result.stalled = true;
        reportFlight(*watch, children, true);
        if (w.link != nullptr)
          w.link->abort(stallText(w.timeoutSeconds, watch));
        stop();
      }
    }
    if (stopping && !killed && Clock::now() > stopDeadline) {
      killAll(SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return result;
}

} // namespace

int InterruptedExitCode() {
  return 128 + (gInterrupt != 0 ? gInterrupt : SIGINT);
}

namespace {

/// The ranks' GPUs' free memory (cudaMemGetInfo) against the plan's peak
/// times the ranks that share each (CheckDeviceMemory).
absl::Status checkGpuMemory(const NodeRanks &ranks,
                            const rank::RankChoice &choice) {
#if MD_ENABLE_CUDA
  if (choice.devices <= 0)
    return absl::OkStatus();
  absl::StatusOr<std::vector<cuda::DeviceInfo>> devices = cuda::queryDevices();
  for (int d = 0; d < choice.devices; ++d) {
    NodeMemoryNeed need = ranks.memory;
    need.ranksOnNode = 0;
    for (int r = 0; r < ranks.perNode; ++r)
      need.ranksOnNode += choice.deviceOf(r) == d ? 1 : 0;
    if (need.ranksOnNode == 0)
      continue;
    absl::StatusOr<cuda::DeviceMemory> m = cuda::queryMemoryAndRelease(d);
    if (!m.ok())
      return absl::Status(
          m.status().code(),
          absl::StrCat("cannot check that the ranks fit in cuda:", d, ": ",
                       m.status().message(),
                       " (--skip-memory-check starts them without the check)"));
    std::string name = absl::StrCat("cuda:", d);
    if (devices.ok() && d < static_cast<int>(devices->size()))
      absl::StrAppend(&name, " (", (*devices)[d].name, ")");
    MD_RETURN_IF_ERROR(
        CheckDeviceMemory(need, name, m->freeBytes, m->totalBytes));
  }
#else
  (void)ranks;
  (void)choice;
#endif
  return absl::OkStatus();
}

/// Makes the ranks of the next start resume from the newest checkpoint:
/// --resume=auto instead of any --resume, and a fresh job id (the
/// shared-memory segment of the last run may still be named).
void resumeAuto(RankSpawn &spawn) {
  std::vector<std::string> args;
  for (size_t i = 0; i < spawn.args.size(); ++i) {
    const std::string &a = spawn.args[i];
    if (a == "--resume") {
      ++i; // and its value
      continue;
    }
    if (a.rfind("--resume=", 0) == 0)
      continue;
    if (a == "--worker")
      args.push_back("--resume=auto");
    args.push_back(a);
  }
  spawn.args = std::move(args);
  spawn.jobId = absl::StrFormat(
      "mdrun-%d-%x", spawn.launcher,
      static_cast<unsigned>(Clock::now().time_since_epoch().count()));
}

/// One run of the job on this node: starts its ranks (with fresh flight
/// recorders), supervises them until they end, and says how it ended;
/// `cause` is this node's own failure, if any (a rank's, or the stall),
/// as opposed to one that only followed another node's.
absl::Status runRanks(const TrainOptions &options, const NodeRanks &ranks,
                      RankSpawn &spawn, ControlLink *link, std::string &cause) {
  const int perNode = ranks.perNode;
  spawn.flightFds.clear();
  // Built before forking: the child only sets its environment and execs.
  std::vector<char *> cargs;
  for (std::string &a : spawn.args)
    cargs.push_back(a.data());
  cargs.push_back(nullptr);

  // The rings live in memfds made here, so that they outlive their ranks.
  std::unique_ptr<FlightWatch> watch;
  if (options.flightRecorder > 0) {
    watch = std::make_unique<FlightWatch>();
    for (int r = 0; r < perNode; ++r) {
      MD_ASSIGN_OR_RETURN(std::unique_ptr<runtime::FlightRecorder> ring,
                          runtime::FlightRecorder::Create(
                              ranks.firstRank + r,
                              static_cast<uint32_t>(options.flightRecorder)));
      spawn.flightFds.push_back(ring->fd());
      watch->rings.push_back(std::move(ring));
    }
    watch->locations = ranks.locations;
    watch->firstRank = ranks.firstRank;
    watch->world.worldSize = static_cast<int>(ranks.world);
    watch->world.ranksPerNode = perNode;
    const char *tmp = std::getenv("TMPDIR");
    watch->dir = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/",
                              spawn.jobId, "-flight");
    watch->timeoutNs =
        static_cast<int64_t>(std::llround(options.timeoutSeconds * 1e9));
  }
  std::vector<Child> children(static_cast<size_t>(perNode));
  absl::Status startError;
  for (int r = 0; r < perNode && startError.ok(); ++r)
    startError = startRank(spawn, r, cargs.data(), children[r]);
  Watchers watchers;
  watchers.flight = watch.get();
  watchers.link = link;
  watchers.firstRank = ranks.firstRank;
  watchers.timeoutSeconds = options.timeoutSeconds;
  Supervised ended = superviseRanks(children, !startError.ok(), watchers);
  const int firstFailure = ended.firstFailure;
  for (Child &c : children)
    if (c.errorFd >= 0)
      ::close(c.errorFd);
  if (!options.tracePath.empty() && startError.ok())
    joinTrace(options.tracePath, ranks.firstRank, perNode);
  // What the comm may leave behind when its ranks die early (shm: rank 0
  // unlinks its segment once every rank has attached; a rank 0 that died
  // earlier leaves it).
  if (const rank::CommInfo *comm =
          rank::BuiltinRegistry().comm(spawn.choice.comm);
      comm != nullptr && comm->removeLeftovers)
    (void)comm->removeLeftovers(spawn.jobId);

  if (!startError.ok())
    return startError;
  if (ended.preempting && firstFailure < 0) {
    bool all = true, any = false;
    for (const Child &c : children) {
      all = all && (preempted(c) ||
                    (WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0));
      any = any || preempted(c);
    }
    if (all && any)
      return PreemptionStatus(absl::StrFormat(
          "SIGTERM: every rank stopped after the same step and wrote the "
          "recipe's checkpoint there, if it saves any (resume with --resume "
          "auto); stopped %d rank%s",
          perNode, perNode == 1 ? "" : "s"));
    if (all) {
      // The run ended before the preemption took effect.
      if (link != nullptr)
        link->done();
      return absl::OkStatus();
    }
  }
  // The recipe's fail("why") ends every rank after one step; any rank that
  // says so (the others follow, or ended the same way) makes it the job's
  // end, never a success.
  auto failing = std::find_if(children.begin(), children.end(), recipeFailed);
  if (firstFailure < 0 && !ended.stalled && ended.elsewhere.empty() &&
      failing != children.end()) {
    if (link != nullptr)
      link->done();
    std::string why = failing->message;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' '))
      why.pop_back();
    return RecipeFailureStatus(why);
  }
  if (gInterrupt != 0)
    return absl::CancelledError(
        absl::StrFormat("interrupted by %s; stopped %d rank%s",
                        gInterrupt == SIGINT    ? "SIGINT"
                        : gInterrupt == SIGTERM ? "SIGTERM"
                                                : "a signal",
                        perNode, perNode == 1 ? "" : "s"));
  if (firstFailure >= 0) {
    cause =
        describeExit(ranks.firstRank + firstFailure, children[firstFailure]);
    return absl::AbortedError(cause);
  }
  if (ended.stalled) {
    cause = stallText(options.timeoutSeconds, watch.get());
    return absl::DeadlineExceededError(absl::StrFormat(
        "%s; stopped %d rank%s", cause, perNode, perNode == 1 ? "" : "s"));
  }
  if (!ended.elsewhere.empty())
    return absl::AbortedError(
        absl::StrFormat("the job failed on another node: %s; stopped %d rank%s",
                        ended.elsewhere, perNode, perNode == 1 ? "" : "s"));
  if (link != nullptr)
    link->done();
  return absl::OkStatus();
}

} // namespace

absl::Status Launch(const TrainOptions &options, int argc, char **argv) {
  MD_ASSIGN_OR_RETURN(Placement place,
                      ResolvePlacement(options, ProcessEnvironment()));
  MD_RETURN_IF_ERROR(CheckRendezvousHost(place));
  if (place.role == Placement::Role::Rank)
    return RunRank(options, place);
  if (options.ranksAuto) {
    // torchrun's --nproc-per-node auto: a rank per usable GPU, else per
    // core.
    rank::DeviceProbe probe;
    if (options.backend != BackendChoice::Cpu)
      probe = ProbeGpus();
    place.ranksPerNode =
        probe.count > 0 ? probe.count : cpu::CpuBackend::usableCores();
    absl::FPrintF(stderr, "mdrun: --nproc-per-node auto: %d rank%s (%s)\n",
                  place.ranksPerNode, place.ranksPerNode == 1 ? "" : "s",
                  probe.count > 0 ? "one per usable GPU"
                                  : "one per core, no usable GPU");
  }
  MD_ASSIGN_OR_RETURN(NodeRanks ranks, checkPlan(options, place));
  MD_ASSIGN_OR_RETURN(RankSpawn spawn,
                      prepareSpawn(options, place, ranks, argc, argv));
  // On the CPU backend every rank of this node shares the host's memory;
  // on GPUs each shares its device's with the ranks on the same device.
  if (!spawn.choice.onDevices()) {
    MD_RETURN_IF_ERROR(cpu::CheckCpuIsaCap());
    MD_RETURN_IF_ERROR(
        CheckCpuRankCount(ranks.perNode, cpu::CpuBackend::usableCores()));
    if (!options.skipMemoryCheck)
      MD_RETURN_IF_ERROR(CheckNodeMemory(ranks.memory));
  } else if (!options.skipMemoryCheck) {
    MD_RETURN_IF_ERROR(checkGpuMemory(ranks, spawn.choice));
  }
  // Every path the run will write, before a step is lost to one it cannot.
  MD_ASSIGN_OR_RETURN(std::vector<OutputPath> outputs,
                      RunOutputs(options, ranks.firstRank == 0));
  MD_RETURN_IF_ERROR(CheckOutputs(outputs));
  if (!options.skipDataCheck)
    MD_RETURN_IF_ERROR(checkData(options, ranks.world));
  if (!options.tracePath.empty())
    MD_RETURN_IF_ERROR(PrepareTrace(options.tracePath));
  struct sigaction sa {};
  sa.sa_handler = onInterrupt;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // Across nodes, the launchers watch each other (ControlLink.h) on the
  // rendezvous port + 1.
  std::unique_ptr<ControlLink> link;
  if (place.nnodes > 1) {
    if (place.nodeRank == 0) {
      absl::StatusOr<std::unique_ptr<ControlLink>> hub =
          ControlLink::Hub(spawn.port + 1, place.nnodes, options.maxRestarts);
      if (hub.ok())
        link = std::move(*hub);
      else
        absl::FPrintF(stderr,
                      "mdrun: warning: no control connection between the "
                      "nodes' launchers (%s); a stuck node ends by its own "
                      "--timeout\n",
                      hub.status().message());
    } else {
      link =
          ControlLink::Spoke(place.masterAddr, spawn.port + 1, place.nodeRank,
                             std::chrono::milliseconds(
                                 std::llround(options.timeoutSeconds * 1000)),
                             options.maxRestarts);
    }
  }
  // --max-restarts: a rank that dies or a job that stalls starts the job
  // again from the newest checkpoint (torchrun's elastic restarts, resuming
  // exactly). Interrupts, preemptions and errors before training do not.
  // Across nodes every launcher takes part (ControlLink::agree): node 0
  // decides once every node's ranks have ended, and the next attempt meets
  // on a fresh port, so that nothing of the failed one can join it; the
  // ranks' --resume auto then loads the checkpoint rank 0 finds, on every
  // node the same.
  for (int attempt = 0;; ++attempt) {
    std::string cause;
    absl::Status ended = runRanks(options, ranks, spawn, link.get(), cause);
    if (ended.ok())
      return ended;
    ControlLink::AttemptEnd end;
    end.cause = cause;
    if (gInterrupt != 0 || IsPreemption(ended))
      end.noRestart = std::string(ended.message());
    else if (ended.code() != absl::StatusCode::kAborted &&
             ended.code() != absl::StatusCode::kDeadlineExceeded)
      end.noRestart = absl::StrCat("failed before training: ", ended.message());
    else if (attempt >= options.maxRestarts)
      end.noRestart = absl::StrFormat("no restart left (--max-restarts %d)",
                                      options.maxRestarts);
    std::string restartCause(ended.message());
    if (place.nnodes > 1) {
      // A node without restarts just ends; node 0 also tells the others.
      if (link == nullptr || (options.maxRestarts == 0 && place.nodeRank != 0))
        return ended;
      ControlLink::Verdict verdict = link->agree(
          attempt, end, [] { return pickOnePort(); },
          std::chrono::duration_cast<std::chrono::milliseconds>(kRestartWait),
          [] { return gInterrupt != 0; });
      if (!verdict.restart) {
        if (verdict.why.empty() ||
            absl::StrContains(ended.message(), verdict.why))
          return ended;
        return absl::Status(
            ended.code(),
            absl::StrCat(ended.message(),
                         "; the job does not restart: ", verdict.why));
      }
      restartCause = verdict.cause;
      spawn.port = verdict.port;
    } else if (!end.noRestart.empty()) {
      return ended;
    }
    absl::FPrintF(stderr,
                  "mdrun: restart %d of %d after: %s; resuming from the "
                  "newest checkpoint\n",
                  attempt + 1, options.maxRestarts, restartCause);
    resumeAuto(spawn);
  }
}

} // namespace md::mdrun
