//===- Choice.cpp - which backend and comm a job's ranks run --------------===//

#include "runtime/rank/Choice.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Status.h"

namespace md::rank {
namespace {

/// Whether a job of `job`'s shape with `devices` usable devices meets the
/// comm's needs without ranks sharing a device.
bool meets(const CommInfo &comm, const JobShape &job, int devices) {
  if (comm.needs.oneNode && job.nnodes > 1)
    return false;
  switch (comm.needs.devices) {
  case DeviceUse::None:
    return true;
  case DeviceUse::OnePerRank:
  case DeviceUse::Shared:
    return devices > 0 && job.ranksPerNode <= devices;
  }
  return false;
}

/// "the CPU backend"'s CPU: the backend's title, else its name.
std::string titleOf(const Registry &registry, std::string_view name) {
  const BackendInfo *b = registry.backend(name);
  return b != nullptr ? b->title : std::string(name);
}

/// "auto, shm or gloo".
std::string orList(const std::vector<std::string> &names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    absl::StrAppend(&out,
                    i == 0                  ? ""
                    : i + 1 == names.size() ? " or "
                                            : ", ",
                    names[i]);
  return out;
}

} // namespace

const CommInfo *AutomaticComm(const Registry &registry,
                              std::string_view backend, const JobShape &job,
                              int devices) {
  for (const CommInfo *comm : registry.commsOf(backend))
    if (comm->automatic && meets(*comm, job, devices))
      return comm;
  return nullptr;
}

DeviceProbe ProbeDevices(const Registry &registry) {
  if (const BackendInfo *device = registry.deviceBackend())
    return device->probe();
  return DeviceProbe{0, "no GPU backend in this build"};
}

absl::StatusOr<RankChoice> ChooseRank(const Registry &registry,
                                      const JobShape &job,
                                      const RankRequest &request,
                                      const DeviceProbe &probe) {
  MD_RETURN_IF_ERROR(registry.status());
  const BackendInfo *host = registry.hostBackend();
  if (host == nullptr)
    return absl::FailedPreconditionError(
        "no host backend is registered: nothing to run a rank on");
  const CommInfo *named = nullptr;
  if (request.comm != "auto") {
    named = registry.comm(request.comm);
    if (named == nullptr || !named->nameable) {
      std::vector<std::string> names = registry.nameableComms();
      names.insert(names.begin(), "auto");
      return absl::InvalidArgumentError(
          absl::StrCat("--comm ", request.comm, ": expected ", orList(names)));
    }
  }
  const bool automaticBackend = request.backend == "auto";
  const BackendInfo *device = automaticBackend
                                  ? registry.deviceBackend()
                                  : registry.backend(request.backend);
  if (device == host)
    device = nullptr;
  const bool usable = device != nullptr && probe.count > 0;
  // The backend the job would run on, before any fallback: the one asked
  // for, else the device backend when it found devices.
  const std::string wouldRun = !automaticBackend ? request.backend
                               : usable          ? device->name
                                                 : host->name;

  // A comm named that the job cannot have: say so rather than pick.
  if (named != nullptr && named->needs.oneNode && job.nnodes > 1) {
    const std::string &backend = named->needs.backends.front();
    const CommInfo *across = AutomaticComm(
        registry, backend, job, backend == host->name ? 0 : probe.count);
    return absl::FailedPreconditionError(absl::StrFormat(
        "--comm %s needs every rank on one node, but the job has %d nodes "
        "(%s)",
        named->name, job.nnodes,
        across != nullptr
            ? absl::StrFormat("across nodes the %s backend runs on %s",
                              titleOf(registry, backend), across->name)
            : absl::StrFormat("no comm of the %s backend runs across nodes",
                              titleOf(registry, backend))));
  }
  if (named != nullptr && !Serves(*named, wouldRun)) {
    const std::string &backend = named->needs.backends.front();
    const std::string on = !automaticBackend ? "--backend " + request.backend
                           : wouldRun == host->name
                               ? absl::StrCat("the ", host->title, " backend")
                               : std::string("this node's GPUs");
    return absl::FailedPreconditionError(absl::StrFormat(
        "--comm %s is a comm of the %s backend, but the job would run on "
        "%s; add --backend %s",
        named->name, titleOf(registry, backend), on, backend));
  }

  RankChoice choice;
  auto onHost = [&]() -> absl::StatusOr<RankChoice> {
    choice.backend = host->name;
    choice.devices = 0;
    const CommInfo *comm =
        named != nullptr ? named : AutomaticComm(registry, host->name, job, 0);
    if (comm == nullptr)
      return absl::FailedPreconditionError(absl::StrFormat(
          "no comm of the %s backend runs %d ranks per node on %d node%s",
          host->title, job.ranksPerNode, job.nnodes,
          job.nnodes == 1 ? "" : "s"));
    choice.comm = comm->name;
    return choice;
  };
  if (request.backend == host->name)
    return onHost();
  if (!usable) {
    if (request.noFallback || !automaticBackend)
      return absl::FailedPreconditionError(absl::StrFormat(
          "no usable GPU (%s), and %s forbids running on the %s backend",
          probe.unusableReason,
          request.noFallback ? std::string("--no-fallback")
                             : "--backend " + request.backend,
          host->title));
    MD_ASSIGN_OR_RETURN(choice, onHost());
    choice.warning = absl::StrFormat(
        "no usable GPU (%s); running %d rank%s%s on the %s backend",
        probe.unusableReason, job.ranksPerNode,
        job.ranksPerNode == 1 ? "" : "s", job.nnodes > 1 ? " per node" : "",
        host->title);
    return choice;
  }

  // On the devices.
  choice.backend = device->name;
  choice.devices = probe.count;
  const std::string shortage =
      absl::StrFormat("%d ranks per node but %d usable GPU%s", job.ranksPerNode,
                      probe.count, probe.count == 1 ? "" : "s");
  if (named != nullptr) {
    if (!meets(*named, job, probe.count))
      return absl::FailedPreconditionError(
          absl::StrFormat("--comm %s cannot run %s", named->name, shortage));
    choice.comm = named->name;
    return choice;
  }
  if (const CommInfo *comm =
          AutomaticComm(registry, device->name, job, probe.count)) {
    choice.comm = comm->name;
    return choice;
  }
  if (job.ranksPerNode <= probe.count)
    return absl::FailedPreconditionError(absl::StrFormat(
        "no comm of the %s backend runs %d ranks per node on %d nodes",
        device->title, job.ranksPerNode, job.nnodes));
  // More ranks than devices: ranks share them, a fallback.
  if (request.noFallback)
    return absl::FailedPreconditionError(absl::StrCat(
        shortage, ", and --no-fallback forbids ranks sharing a GPU"));
  const CommInfo *sharing = nullptr, *oneNodeOnly = nullptr;
  for (const CommInfo *comm : registry.commsOf(device->name)) {
    if (!comm->automatic || comm->needs.devices != DeviceUse::Shared)
      continue;
    if (comm->needs.oneNode && job.nnodes > 1) {
      if (oneNodeOnly == nullptr)
        oneNodeOnly = comm;
      continue;
    }
    sharing = comm;
    break;
  }
  if (sharing == nullptr) {
    if (oneNodeOnly != nullptr)
      return absl::FailedPreconditionError(
          absl::StrCat(shortage, ": ranks can share GPUs on one node only (",
                       oneNodeOnly->needs.oneNodeBecause, "); start at most ",
                       probe.count, " ranks per node"));
    return absl::FailedPreconditionError(
        absl::StrCat(shortage, ": no comm of the ", device->title,
                     " backend lets ranks share a GPU; start at most ",
                     probe.count, " ranks per node"));
  }
  choice.comm = sharing->name;
  choice.warning = absl::StrCat(shortage, "; ", sharing->fallbackWarning);
  return choice;
}

} // namespace md::rank
