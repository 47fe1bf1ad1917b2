//===- Cluster.cpp - where an mdrun process sits in a job -----------------===//

#include "tools/mdrun/Cluster.h"

#include <cstdlib>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/core/Status.h"
#include "runtime/net/Socket.h"
#include "runtime/rank/Builtin.h"

namespace md::mdrun {
namespace {

constexpr int kDefaultPort = 29500;

/// An integer variable: nullopt when unset, InvalidArgument when malformed.
absl::StatusOr<std::optional<int>> intVar(const EnvLookup &env,
                                          const char *name, int min) {
  const char *v = env(name);
  if (v == nullptr)
    return std::nullopt;
  int n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < min)
    return absl::InvalidArgumentError(
        absl::StrFormat("the environment variable %s=%s is not an integer "
                        ">= %d",
                        name, v, min));
  return n;
}

absl::StatusOr<int> requireInt(const EnvLookup &env, const char *name, int min,
                               const char *launcher) {
  MD_ASSIGN_OR_RETURN(std::optional<int> v, intVar(env, name, min));
  if (!v)
    return absl::InvalidArgumentError(
        absl::StrFormat("started by %s, but %s is not set", launcher, name));
  return *v;
}

/// One scheduler's view of the job, before it meets the command line.
struct SchedulerView {
  std::string source;
  int rank = 0, worldSize = 1, localRank = 0, localSize = 1;
  int nodeRank = 0, nnodes = 1;
  std::string defaultMasterAddr; // "" when the scheduler does not say
  /// Every process is one rank, even a single one (torchrun): never a
  /// launcher of its own ranks.
  bool processPerRank = false;
  std::string jobId;
  bool agentStore = false;
  std::string errorFile;
};

/// `id` with what a shared-memory segment's name may not hold replaced.
std::string jobIdPart(const std::string &id) {
  std::string out;
  for (char c : id)
    out += absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
                   c == '_' || c == '.'
               ? c
               : '_';
  return out.substr(0, 64);
}

/// torchrun's contract, which a Kubernetes PyTorchJob, SageMaker and
/// Accelerate follow too: RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE
/// (all of them, or the job would be smaller than the environment says),
/// GROUP_RANK (the node) where set, MASTER_ADDR and MASTER_PORT (read by
/// ResolvePlacement), and torchrun's TORCHELASTIC_* (run id, restart
/// count, the agent's store, the error file).
absl::StatusOr<std::optional<SchedulerView>> fromTorchrun(const EnvLookup &env) {
  constexpr const char *kVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK",
                                   "LOCAL_WORLD_SIZE"};
  std::vector<std::string> set, unset;
  for (const char *name : kVars)
    (env(name) != nullptr ? set : unset).push_back(name);
  if (set.empty())
    return std::nullopt;
  const char *runId = env("TORCHELASTIC_RUN_ID");
  SchedulerView v;
  v.source = runId != nullptr ? "torchrun" : "the torchrun environment";
  if (!unset.empty())
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s %s set (the torchrun environment contract: RANK, WORLD_SIZE, "
        "LOCAL_RANK, LOCAL_WORLD_SIZE), but %s %s not: mdrun runs no smaller "
        "job than the environment describes; set %s too, or unset %s",
        absl::StrJoin(set, ", "), set.size() == 1 ? "is" : "are",
        absl::StrJoin(unset, ", "), unset.size() == 1 ? "is" : "are",
        absl::StrJoin(unset, ", "), absl::StrJoin(set, ", ")));
  const char *who = "torchrun";
  MD_ASSIGN_OR_RETURN(v.worldSize, requireInt(env, "WORLD_SIZE", 1, who));
  MD_ASSIGN_OR_RETURN(v.rank, requireInt(env, "RANK", 0, who));
  MD_ASSIGN_OR_RETURN(v.localRank, requireInt(env, "LOCAL_RANK", 0, who));
  MD_ASSIGN_OR_RETURN(v.localSize, requireInt(env, "LOCAL_WORLD_SIZE", 1, who));
  if (v.rank >= v.worldSize)
    return absl::InvalidArgumentError(absl::StrFormat(
        "RANK=%d is not below WORLD_SIZE=%d", v.rank, v.worldSize));
  if (v.localRank >= v.localSize)
    return absl::InvalidArgumentError(absl::StrFormat(
        "LOCAL_RANK=%d is not below LOCAL_WORLD_SIZE=%d", v.localRank,
        v.localSize));
  if (v.worldSize % v.localSize != 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "WORLD_SIZE=%d is not a multiple of LOCAL_WORLD_SIZE=%d: md needs the "
        "same number of ranks on every node",
        v.worldSize, v.localSize));
  v.nnodes = v.worldSize / v.localSize;
  MD_ASSIGN_OR_RETURN(std::optional<int> group, intVar(env, "GROUP_RANK", 0));
  v.nodeRank = group ? *group : v.rank / v.localSize;
  if (v.nodeRank >= v.nnodes)
    return absl::InvalidArgumentError(absl::StrFormat(
        "GROUP_RANK=%d is not below WORLD_SIZE / LOCAL_WORLD_SIZE = %d nodes",
        v.nodeRank, v.nnodes));
  if (v.rank != v.nodeRank * v.localSize + v.localRank)
    return absl::InvalidArgumentError(absl::StrFormat(
        "RANK=%d is not node %d's local rank %d (GROUP_RANK x "
        "LOCAL_WORLD_SIZE + LOCAL_RANK = %d): md numbers the ranks of a node "
        "one after another, as torchrun does",
        v.rank, v.nodeRank, v.localRank,
        v.nodeRank * v.localSize + v.localRank));
  MD_ASSIGN_OR_RETURN(std::optional<int> groups,
                      intVar(env, "GROUP_WORLD_SIZE", 1));
  if (groups && *groups != v.nnodes)
    return absl::InvalidArgumentError(absl::StrFormat(
        "GROUP_WORLD_SIZE=%d contradicts WORLD_SIZE / LOCAL_WORLD_SIZE = %d "
        "nodes",
        *groups, v.nnodes));
  v.processPerRank = true;
  if (runId != nullptr && *runId != '\0') {
    const char *restart = env("TORCHELASTIC_RESTART_COUNT");
    v.jobId = absl::StrCat("torchrun-", jobIdPart(runId), "-",
                           jobIdPart(restart != nullptr ? restart : "0"));
  }
  const char *store = env("TORCHELASTIC_USE_AGENT_STORE");
  v.agentStore = store != nullptr && (absl::AsciiStrToLower(store) == "true" ||
                                      std::string(store) == "1");
  if (const char *file = env("TORCHELASTIC_ERROR_FILE"); file != nullptr)
    v.errorFile = file;
  return v;
}

absl::StatusOr<std::optional<SchedulerView>> fromSlurm(const EnvLookup &env) {
  // Only a job step that srun started: a batch script also sees SLURM_*
  // variables (for the whole allocation), but no step task count.
  if (env("SLURM_PROCID") == nullptr || env("SLURM_STEP_NUM_TASKS") == nullptr)
    return std::nullopt;
  SchedulerView v;
  v.source = "Slurm";
  MD_ASSIGN_OR_RETURN(v.worldSize,
                      requireInt(env, "SLURM_STEP_NUM_TASKS", 1, "srun"));
  MD_ASSIGN_OR_RETURN(v.rank, requireInt(env, "SLURM_PROCID", 0, "srun"));
  MD_ASSIGN_OR_RETURN(v.localRank, requireInt(env, "SLURM_LOCALID", 0, "srun"));
  MD_ASSIGN_OR_RETURN(v.nodeRank, requireInt(env, "SLURM_NODEID", 0, "srun"));
  MD_ASSIGN_OR_RETURN(v.nnodes,
                      requireInt(env, "SLURM_STEP_NUM_NODES", 1, "srun"));
  const char *perNode = env("SLURM_STEP_TASKS_PER_NODE");
  if (perNode == nullptr)
    return absl::InvalidArgumentError(
        "started by srun, but SLURM_STEP_TASKS_PER_NODE is not set");
  absl::StatusOr<std::vector<int>> counts = ExpandSlurmTasksPerNode(perNode);
  if (!counts.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("SLURM_STEP_TASKS_PER_NODE: ", counts.status().message()));
  if (static_cast<int>(counts->size()) != v.nnodes || v.nodeRank >= v.nnodes)
    return absl::InvalidArgumentError(
        absl::StrFormat("SLURM_STEP_TASKS_PER_NODE=%s lists %d nodes, but "
                        "SLURM_STEP_NUM_NODES=%d and SLURM_NODEID=%d",
                        perNode, counts->size(), v.nnodes, v.nodeRank));
  v.localSize = (*counts)[v.nodeRank];
  if (const char *list = env("SLURM_STEP_NODELIST"); list != nullptr) {
    absl::StatusOr<std::string> first = FirstSlurmHost(list);
    if (!first.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("SLURM_STEP_NODELIST: ", first.status().message()));
    v.defaultMasterAddr = *first;
  }
  return v;
}

absl::StatusOr<std::optional<SchedulerView>> fromOpenMpi(const EnvLookup &env) {
  if (env("OMPI_COMM_WORLD_SIZE") == nullptr)
    return std::nullopt;
  SchedulerView v;
  v.source = "Open MPI";
  const char *who = "mpirun";
  MD_ASSIGN_OR_RETURN(v.worldSize,
                      requireInt(env, "OMPI_COMM_WORLD_SIZE", 1, who));
  MD_ASSIGN_OR_RETURN(v.rank, requireInt(env, "OMPI_COMM_WORLD_RANK", 0, who));
  MD_ASSIGN_OR_RETURN(v.localRank,
                      requireInt(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, who));
  MD_ASSIGN_OR_RETURN(v.localSize,
                      requireInt(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, who));
  // Open MPI does not number nodes; with one task per node the rank is the
  // node's index, and with several the node count follows from the sizes.
  if (v.worldSize % v.localSize != 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "OMPI_COMM_WORLD_SIZE=%d is not a multiple of "
        "OMPI_COMM_WORLD_LOCAL_SIZE=%d: md needs the same number of ranks on "
        "every node",
        v.worldSize, v.localSize));
  v.nnodes = v.worldSize / v.localSize;
  v.nodeRank = v.rank / v.localSize;
  return v;
}

absl::Status agree(const char *option, int64_t given, int64_t scheduler,
                   const std::string &source, const char *what) {
  if (given >= 0 && given != scheduler)
    return absl::InvalidArgumentError(
        absl::StrFormat("%s %d contradicts %s, which %s %d", option, given,
                        source, what, scheduler));
  return absl::OkStatus();
}

} // namespace

EnvLookup ProcessEnvironment() {
  return [](const char *name) { return std::getenv(name); };
}

absl::StatusOr<std::string> FirstSlurmHost(absl::string_view nodelist) {
  absl::string_view list = absl::StripAsciiWhitespace(nodelist);
  if (list.empty())
    return absl::InvalidArgumentError("empty host list");
  // The first entry ends at the first comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < list.size(); ++end) {
    char c = list[end];
    if (c == '[')
      ++depth;
    else if (c == ']')
      --depth;
    else if (c == ',' && depth == 0)
      break;
    if (depth < 0 || depth > 1)
      return absl::InvalidArgumentError(
          absl::StrCat("unbalanced brackets in host list '", list, "'"));
  }
  if (depth != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("unbalanced brackets in host list '", list, "'"));
  absl::string_view entry = list.substr(0, end);
  size_t open = entry.find('[');
  if (open == absl::string_view::npos)
    return std::string(entry);
  size_t close = entry.find(']', open);
  absl::string_view range = entry.substr(open + 1, close - open - 1);
  // The first number of the first range, zero padding kept: "07-09,12".
  size_t stop = range.find_first_of(",-");
  absl::string_view first = range.substr(0, stop);
  if (first.empty() ||
      first.find_first_not_of("0123456789") != absl::string_view::npos)
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot read the host range '[", range, "]' in '", list, "'"));
  return absl::StrCat(entry.substr(0, open), first, entry.substr(close + 1));
}

absl::StatusOr<std::vector<int>>
ExpandSlurmTasksPerNode(absl::string_view list) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    part = absl::StripAsciiWhitespace(part);
    int count = 0, repeat = 1;
    size_t paren = part.find('(');
    absl::string_view head = part.substr(0, paren);
    bool ok = absl::SimpleAtoi(head, &count) && count >= 1;
    if (ok && paren != absl::string_view::npos) {
      absl::string_view tail = part.substr(paren);
      ok = tail.size() > 3 && tail.substr(0, 2) == "(x" && tail.back() == ')' &&
           absl::SimpleAtoi(tail.substr(2, tail.size() - 3), &repeat) &&
           repeat >= 1 && repeat <= 65536;
    }
    if (!ok)
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read '", part, "' in '", list,
                       "' (expected counts like 4 or 4(x2))"));
    if (out.size() + static_cast<size_t>(repeat) > 65536)
      return absl::InvalidArgumentError(
          absl::StrCat("'", list, "' lists more than 65536 nodes"));
    out.insert(out.end(), static_cast<size_t>(repeat), count);
  }
  return out;
}

absl::StatusOr<Placement> ResolvePlacement(const TrainOptions &options,
                                           const EnvLookup &env) {
  Placement p;
  MD_ASSIGN_OR_RETURN(std::optional<int> envPort,
                      intVar(env, "MASTER_PORT", 0));
  if (envPort && *envPort > 65535)
    return absl::InvalidArgumentError(absl::StrFormat(
        "the environment variable MASTER_PORT=%d is not a port", *envPort));
  const char *envAddr = env("MASTER_ADDR");
  if (envAddr != nullptr && *envAddr == '\0')
    envAddr = nullptr;

  // torchrun first: under srun or mpirun, torchrun's variables describe
  // this process, the scheduler's the torchrun that started it.
  std::optional<SchedulerView> sched;
  MD_ASSIGN_OR_RETURN(sched, fromTorchrun(env));
  if (!sched) {
    MD_ASSIGN_OR_RETURN(sched, fromSlurm(env));
  }
  if (!sched) {
    MD_ASSIGN_OR_RETURN(sched, fromOpenMpi(env));
  }
  // A single task of srun or mpirun is an ordinary launcher.
  if (sched && sched->worldSize == 1 && !sched->processPerRank)
    sched.reset();

  // The rendezvous address: the command line, else MASTER_ADDR, else the
  // scheduler's first host, else this machine when the job has one node.
  p.masterAddr = !options.masterAddr.empty() ? options.masterAddr
                 : envAddr != nullptr        ? std::string(envAddr)
                 : sched && !sched->defaultMasterAddr.empty()
                     ? sched->defaultMasterAddr
                     : std::string();
  p.masterAddrFrom =
      !options.masterAddr.empty() ? "--master-addr " + p.masterAddr
      : envAddr != nullptr        ? "MASTER_ADDR=" + p.masterAddr
      : !p.masterAddr.empty() // only Slurm names a default host
          ? "SLURM_STEP_NODELIST's first host " + p.masterAddr
          : std::string();
  p.masterPort = options.masterPort >= 0 ? static_cast<int>(options.masterPort)
                 : envPort               ? *envPort
                                         : kDefaultPort;

  if (!sched) {
    p.role = Placement::Role::Launcher;
    p.nnodes = options.nnodes > 0 ? static_cast<int>(options.nnodes) : 1;
    if (options.nodeRank >= 0 && options.nnodes <= 0 && options.nodeRank > 0)
      return absl::InvalidArgumentError(
          "--node-rank needs --nnodes (how many nodes the job has)");
    p.nodeRank = options.nodeRank >= 0 ? static_cast<int>(options.nodeRank) : 0;
    if (p.nodeRank >= p.nnodes)
      return absl::InvalidArgumentError(absl::StrFormat(
          "--node-rank %d is not below --nnodes %d", p.nodeRank, p.nnodes));
    if (p.nnodes > 1 && options.nodeRank < 0)
      return absl::InvalidArgumentError(absl::StrFormat(
          "--nnodes %d needs --node-rank (this node's index, 0 to %d)",
          p.nnodes, p.nnodes - 1));
    p.ranksPerNode = static_cast<int>(options.ranks);
  } else {
    p.source = sched->source;
    p.jobId = sched->jobId;
    p.agentStore = sched->agentStore;
    p.errorFile = sched->errorFile;
    bool perNodeLauncher = !sched->processPerRank && sched->localSize == 1 &&
                           options.ranks > 1;
    if (perNodeLauncher) {
      // One task per node, each starting --gpus N ranks.
      p.role = Placement::Role::Launcher;
      p.nnodes = sched->worldSize;
      p.nodeRank = sched->rank;
      p.ranksPerNode = static_cast<int>(options.ranks);
      MD_RETURN_IF_ERROR(agree("--nnodes",
                               options.nnodes > 0 ? options.nnodes : -1,
                               p.nnodes, p.source, "started tasks on nodes:"));
      MD_RETURN_IF_ERROR(agree("--node-rank", options.nodeRank, p.nodeRank,
                               p.source, "numbers this node"));
    } else {
      // One task per rank.
      p.role = Placement::Role::Rank;
      p.rank = sched->rank;
      p.worldSize = sched->worldSize;
      p.localRank = sched->localRank;
      p.ranksPerNode = sched->localSize;
      p.nnodes = sched->nnodes;
      p.nodeRank = sched->nodeRank;
      if (options.ranks > 0 && options.ranks != sched->localSize)
        return absl::InvalidArgumentError(absl::StrFormat(
            "--gpus %d contradicts %s, which started %d rank%s on this node "
            "(under torchrun, or srun or mpirun with one task per rank, leave "
            "--gpus out)",
            options.ranks, p.source, sched->localSize,
            sched->localSize == 1 ? "" : "s"));
      MD_RETURN_IF_ERROR(agree("--nnodes",
                               options.nnodes > 0 ? options.nnodes : -1,
                               p.nnodes, p.source, "started tasks on nodes:"));
      MD_RETURN_IF_ERROR(agree("--node-rank", options.nodeRank, p.nodeRank,
                               p.source, "numbers this node"));
      if (sched->worldSize % sched->localSize != 0 ||
          sched->worldSize / sched->localSize != sched->nnodes)
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s started %d ranks on %d nodes with %d on this one: md needs "
            "the same number of ranks on every node",
            p.source, sched->worldSize, sched->nnodes, sched->localSize));
    }
  }

  if (p.masterAddr.empty()) {
    if (p.nnodes > 1)
      return absl::InvalidArgumentError(absl::StrFormat(
          "a job on %d nodes needs the host of rank 0: give --master-addr or "
          "set MASTER_ADDR",
          p.nnodes));
    p.masterAddr = "127.0.0.1";
  }
  if (p.masterPort == 0 && (p.nodeRank > 0 || p.role == Placement::Role::Rank))
    return absl::InvalidArgumentError(
        p.role == Placement::Role::Rank
            ? "--master-port 0 (pick a free port) cannot work when every rank "
              "is started separately: give a port"
            : "--master-port 0 picks a free port on node 0 only; give the "
              "other nodes the port that node 0 prints");
  return p;
}

absl::Status CheckRendezvousHost(const Placement &place) {
  bool connects = place.nnodes > 1 || (place.role == Placement::Role::Rank &&
                                       place.worldSize > 1);
  if (!connects)
    return absl::OkStatus();
  return net::resolveHost(place.masterAddr,
                          place.masterAddrFrom.empty()
                              ? "the rendezvous host " + place.masterAddr
                              : place.masterAddrFrom);
}

rank::DeviceProbe ProbeGpus() {
  const rank::Registry &registry = rank::BuiltinRegistry();
  if (registry.deviceBackend() == nullptr)
    return rank::DeviceProbe{0, "mdrun was built without CUDA"};
  return rank::ProbeDevices(registry);
}

absl::StatusOr<rank::RankChoice> ChooseRankFor(const TrainOptions &options,
                                               int ranksPerNode, int nnodes,
                                               const rank::DeviceProbe &probe) {
  rank::RankRequest request;
  request.backend = BackendChoiceName(options.backend);
  request.comm = options.comm;
  request.noFallback = options.noFallback;
  return rank::ChooseRank(rank::BuiltinRegistry(),
                          rank::JobShape{ranksPerNode, nnodes}, request, probe);
}

} // namespace md::mdrun
