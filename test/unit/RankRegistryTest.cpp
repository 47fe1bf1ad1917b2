//===- RankRegistryTest.cpp - the runtime's registry of backends and comms ===//
//
// runtime/rank: what this build registered (names, needs, the names --comm
// takes), the registry's refusals, the choice of a job's backend and comm
// (ChooseRank) on made-up GPU probes with every refusal and warning as
// mdrun prints them, and ranks made through the registry with the real
// backends and comms: every registered comm of the CPU backend runs the
// conformance cases of CommTestUtil.h, so a new one is held to them without
// an edit here. Backends are made in forked children (CommTestUtil.h's
// Ranks), so this process never starts the CPU backend's threads or
// initialises CUDA.
//
//===----------------------------------------------------------------------===//

#include <cctype>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/net/Socket.h"
#include "runtime/rank/Builtin.h"
#include "runtime/rank/Choice.h"
#include "runtime/rank/Rank.h"
#include "test/unit/CommTestUtil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace md::rank {
namespace {

using namespace md::commtest;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::vector<std::string> namesOf(const std::vector<const CommInfo *> &comms) {
  std::vector<std::string> names;
  for (const CommInfo *c : comms)
    names.push_back(c->name);
  return names;
}

/// A factory for entries that are never made.
absl::StatusOr<std::unique_ptr<runtime::Comm>> noComm(const RankSpec &,
                                                      runtime::Backend &) {
  return absl::UnimplementedError("a test entry");
}

/// The registry the choice is tested on: this build's, with the CUDA
/// backend and its comms as runtime/cuda and runtime/nccl register them
/// added when the build has no CUDA (their factories unused), so that the
/// GPU rules are tested everywhere.
Registry choiceRegistry() {
  Registry r = BuiltinRegistry();
  if (r.backend("cuda") != nullptr)
    return r;
  BackendInfo cuda;
  cuda.name = "cuda";
  cuda.title = "CUDA";
  cuda.probe = [] { return DeviceProbe{0, "a test entry"}; };
  cuda.make = [](const RankSpec &) -> absl::StatusOr<RankBackend> {
    return absl::UnimplementedError("a test entry");
  };
  EXPECT_TRUE(r.addBackend(cuda).ok());
  CommInfo nccl;
  nccl.name = "nccl";
  nccl.needs.backends = {"cuda"};
  nccl.needs.devices = DeviceUse::OnePerRank;
  nccl.needs.rendezvous = true;
  nccl.preference = 10;
  nccl.make = noComm;
  EXPECT_TRUE(r.addComm(nccl).ok());
  CommInfo staged;
  staged.name = "shm-staged";
  staged.needs.backends = {"cuda"};
  staged.needs.oneNode = true;
  staged.needs.oneNodeBecause = "their collectives go through host shared "
                                "memory";
  staged.needs.devices = DeviceUse::Shared;
  staged.preference = 20;
  staged.fallbackWarning = "ranks share GPUs and their collectives are staged "
                           "through host shared memory (same math, slower "
                           "than NCCL)";
  staged.make = noComm;
  EXPECT_TRUE(r.addComm(staged).ok());
  return r;
}

absl::StatusOr<RankChoice> choose(const RankRequest &request, int ranksPerNode,
                                  int nnodes, DeviceProbe probe) {
  static const Registry registry = choiceRegistry();
  return ChooseRank(registry, JobShape{ranksPerNode, nnodes}, request, probe);
}

RankRequest ask(std::string backend, std::string comm = "auto",
                bool noFallback = false) {
  RankRequest r;
  r.backend = std::move(backend);
  r.comm = std::move(comm);
  r.noFallback = noFallback;
  return r;
}

//===----------------------------------------------------------------------===//
// What this build registered
//===----------------------------------------------------------------------===//

TEST(Builtin, TheCpuBackendAndItsCommsAlwaysTheGpusWithCuda) {
  const Registry &r = BuiltinRegistry();
  ASSERT_TRUE(r.status().ok()) << r.status();
  ASSERT_NE(r.hostBackend(), nullptr);
  EXPECT_EQ(r.hostBackend()->name, "cpu");
  EXPECT_EQ(r.hostBackend()->title, "CPU");
  EXPECT_TRUE(r.hostBackend()->overlapOnRequest);
  EXPECT_THAT(namesOf(r.commsOf("cpu")), ElementsAre("shm", "gloo"));
  EXPECT_THAT(r.nameableComms(), ElementsAre("shm", "gloo"));
  if (r.backend("cuda") != nullptr) {
    EXPECT_EQ(r.deviceBackend(), r.backend("cuda"));
    EXPECT_THAT(namesOf(r.comms()),
                ElementsAre("shm", "gloo", "nccl", "shm-staged"));
    EXPECT_THAT(namesOf(r.commsOf("cuda")), ElementsAre("nccl", "shm-staged"));
  } else {
    EXPECT_EQ(r.deviceBackend(), nullptr);
    EXPECT_THAT(namesOf(r.comms()), ElementsAre("shm", "gloo"));
  }
  // Every comm runs on registered backends, and says what it needs.
  for (const CommInfo *c : r.comms()) {
    SCOPED_TRACE(c->name);
    EXPECT_FALSE(c->summary.empty());
    for (const std::string &b : c->needs.backends)
      EXPECT_NE(r.backend(b), nullptr) << b;
    EXPECT_EQ(c->needs.oneNode, !c->needs.oneNodeBecause.empty());
    EXPECT_EQ(c->needs.devices == DeviceUse::Shared,
              !c->fallbackWarning.empty());
  }
  EXPECT_TRUE(r.comm("shm")->needs.oneNode);
  EXPECT_NE(r.comm("shm")->removeLeftovers, nullptr);
  EXPECT_TRUE(r.comm("gloo")->needs.rendezvous);
  EXPECT_FALSE(r.comm("gloo")->needs.oneNode);
}

TEST(Builtin, NamesAreLookedUpOrRefusedWithTheList) {
  const Registry &r = BuiltinRegistry();
  ASSERT_TRUE(r.findComm("gloo").ok());
  EXPECT_EQ((*r.findComm("gloo"))->name, "gloo");
  const std::string comms = absl::StrJoin(namesOf(r.comms()), ", ");
  EXPECT_EQ(r.findComm("mpi").status().message(),
            absl::StrCat("unknown comm 'mpi' (", comms, ")"));
  EXPECT_EQ(r.findComm("tcp").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.findBackend("tpu").status().message()),
              StartsWith("unknown backend 'tpu' (cpu"));
}

TEST(Registry, RefusesIncompleteAndDuplicateEntriesAndKeepsTheFirstError) {
  Registry r;
  EXPECT_TRUE(r.status().ok());
  CommInfo c;
  c.name = "tcp";
  c.needs.backends = {"cpu"};
  EXPECT_EQ(r.addComm(c).code(), absl::StatusCode::kInvalidArgument); // no make
  c.make = noComm;
  EXPECT_TRUE(r.addComm(c).ok());
  EXPECT_EQ(r.addComm(c).code(), absl::StatusCode::kAlreadyExists);
  CommInfo autoNamed = c;
  autoNamed.name = "auto";
  EXPECT_EQ(r.addComm(autoNamed).code(), absl::StatusCode::kInvalidArgument);
  BackendInfo b;
  b.name = "cpu";
  EXPECT_EQ(r.addBackend(b).code(), absl::StatusCode::kInvalidArgument);
  // The first failure is the registry's status, which the choice returns.
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("comm 'tcp'"));
  EXPECT_EQ(
      ChooseRank(r, JobShape{}, RankRequest{}, DeviceProbe{}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

//===----------------------------------------------------------------------===//
// The choice (what mdrun prints: docs/runtime.md, "Backend and comm")
//===----------------------------------------------------------------------===//

TEST(Choice, CpuAsked) {
  absl::StatusOr<RankChoice> e = choose(ask("cpu"), 2, 1, DeviceProbe{8, ""});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->backend, "cpu");
  EXPECT_EQ(e->comm, "shm");
  EXPECT_EQ(e->devices, 0);
  EXPECT_FALSE(e->onDevices());
  EXPECT_TRUE(e->warning.empty());
  e = choose(ask("cpu"), 2, 2, DeviceProbe{8, ""});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->comm, "gloo");
}

TEST(Choice, CommAsked) {
  absl::StatusOr<RankChoice> e =
      choose(ask("cpu", "gloo"), 2, 1, DeviceProbe{0, "none"});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->comm, "gloo");
  e = choose(ask("cpu", "shm"), 2, 1, DeviceProbe{0, "none"});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->comm, "shm");
  // Across nodes shared memory cannot work.
  EXPECT_EQ(choose(ask("cpu", "shm"), 2, 2, DeviceProbe{0, "none"})
                .status()
                .message(),
            "--comm shm needs every rank on one node, but the job has 2 "
            "nodes (across nodes the CPU backend runs on gloo)");
  EXPECT_EQ(
      choose(ask("auto", "shm"), 2, 3, DeviceProbe{2, ""}).status().code(),
      absl::StatusCode::kFailedPrecondition);
  // A CPU comm where GPUs would run is a contradiction, not a choice.
  EXPECT_EQ(
      choose(ask("auto", "gloo"), 2, 1, DeviceProbe{2, ""}).status().message(),
      "--comm gloo is a comm of the CPU backend, but the job would run on "
      "this node's GPUs; add --backend cpu");
  EXPECT_EQ(
      choose(ask("cuda", "gloo"), 2, 1, DeviceProbe{2, ""}).status().message(),
      "--comm gloo is a comm of the CPU backend, but the job would run on "
      "--backend cuda; add --backend cpu");
  EXPECT_EQ(
      choose(ask("cuda", "shm"), 2, 1, DeviceProbe{0, "none"}).status().code(),
      absl::StatusCode::kFailedPrecondition);
  // Without a GPU, auto falls back to the CPU and takes the comm asked.
  e = choose(ask("auto", "gloo"), 2, 1, DeviceProbe{0, "none"});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->backend, "cpu");
  EXPECT_EQ(e->comm, "gloo");
  EXPECT_THAT(e->warning, StartsWith("no usable GPU (none)"));
  // Only the comms the registry lets the user name.
  EXPECT_EQ(
      choose(ask("auto", "nccl"), 2, 1, DeviceProbe{2, ""}).status().message(),
      "--comm nccl: expected auto, shm or gloo");
  EXPECT_EQ(
      choose(ask("auto", "mpi"), 2, 1, DeviceProbe{2, ""}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(Choice, NoGpuFallsBackWithOneWarning) {
  const DeviceProbe none{
      0, "cudaErrorNoDevice: no CUDA-capable device is detected"};
  absl::StatusOr<RankChoice> e = choose(ask("auto"), 2, 1, none);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->backend, "cpu");
  EXPECT_EQ(e->comm, "shm");
  EXPECT_EQ(e->warning,
            "no usable GPU (cudaErrorNoDevice: no CUDA-capable device is "
            "detected); running 2 ranks on the CPU backend");
  e = choose(ask("auto"), 1, 2, DeviceProbe{0, "no CUDA driver installed"});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->comm, "gloo");
  EXPECT_EQ(e->warning, "no usable GPU (no CUDA driver installed); running 1 "
                        "rank per node on the CPU backend");

  EXPECT_EQ(choose(ask("auto", "auto", true), 2, 1, none).status().message(),
            "no usable GPU (cudaErrorNoDevice: no CUDA-capable device is "
            "detected), and --no-fallback forbids running on the CPU backend");
  absl::Status cuda = choose(ask("cuda"), 2, 1, none).status();
  EXPECT_EQ(cuda.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cuda.message(),
            "no usable GPU (cudaErrorNoDevice: no CUDA-capable device is "
            "detected), and --backend cuda forbids running on the CPU backend");
}

TEST(Choice, ABackendTheBuildLacksFindsNoDevice) {
  // A build without CUDA: --backend cuda is a GPU backend that finds none.
  Registry cpuOnly;
  for (const BackendInfo *b : BuiltinRegistry().backends()) {
    if (!b->probe)
      ASSERT_TRUE(cpuOnly.addBackend(*b).ok());
  }
  for (const CommInfo *c : BuiltinRegistry().commsOf("cpu"))
    ASSERT_TRUE(cpuOnly.addComm(*c).ok());
  const DeviceProbe none{0, "mdrun was built without CUDA"};
  EXPECT_EQ(
      ChooseRank(cpuOnly, JobShape{2, 1}, ask("cuda"), none).status().message(),
      "no usable GPU (mdrun was built without CUDA), and --backend cuda "
      "forbids running on the CPU backend");
  absl::StatusOr<RankChoice> e =
      ChooseRank(cpuOnly, JobShape{2, 1}, ask("auto"), none);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->comm, "shm");
  EXPECT_EQ(e->warning, "no usable GPU (mdrun was built without CUDA); "
                        "running 2 ranks on the CPU backend");
  EXPECT_EQ(ProbeDevices(cpuOnly).count, 0);
  EXPECT_EQ(ProbeDevices(cpuOnly).unusableReason,
            "no GPU backend in this build");
}

TEST(Choice, OneGpuPerRankIsNccl) {
  absl::StatusOr<RankChoice> e = choose(ask("auto"), 8, 2, DeviceProbe{8, ""});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->backend, "cuda");
  EXPECT_EQ(e->comm, "nccl");
  EXPECT_EQ(e->devices, 8);
  EXPECT_TRUE(e->onDevices());
  EXPECT_TRUE(e->warning.empty());
  EXPECT_EQ(e->deviceOf(5), 5);
  e = choose(ask("cuda", "auto", true), 2, 1, DeviceProbe{4, ""});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->comm, "nccl");
}

TEST(Choice, SharedGpusAreStagedOnOneNodeOnly) {
  absl::StatusOr<RankChoice> e = choose(ask("auto"), 4, 1, DeviceProbe{1, ""});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->backend, "cuda");
  EXPECT_EQ(e->comm, "shm-staged");
  EXPECT_EQ(e->deviceOf(3), 0);
  EXPECT_EQ(e->warning,
            "4 ranks per node but 1 usable GPU; ranks share GPUs and their "
            "collectives are staged through host shared memory (same math, "
            "slower than NCCL)");
  e = choose(ask("auto"), 4, 1, DeviceProbe{3, ""});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->deviceOf(3), 0);
  EXPECT_EQ(e->deviceOf(2), 2);
  EXPECT_THAT(e->warning, StartsWith("4 ranks per node but 3 usable GPUs;"));

  EXPECT_EQ(choose(ask("auto"), 4, 2, DeviceProbe{2, ""}).status().message(),
            "4 ranks per node but 2 usable GPUs: ranks can share GPUs on one "
            "node only (their collectives go through host shared memory); "
            "start at most 2 ranks per node");
  EXPECT_EQ(choose(ask("auto", "auto", true), 4, 1, DeviceProbe{2, ""})
                .status()
                .message(),
            "4 ranks per node but 2 usable GPUs, and --no-fallback forbids "
            "ranks sharing a GPU");
  EXPECT_EQ(choose(ask("cuda", "auto", true), 2, 1, DeviceProbe{1, ""})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

/// A comm registered by a test: the choice takes it by name and, once it
/// prefers itself, unnamed, with no edit to the choice or its callers.
TEST(Choice, ANewCommIsChosenAsItsRegistrationSays) {
  Registry r = choiceRegistry();
  CommInfo tcp;
  tcp.name = "tcp";
  tcp.needs.backends = {"cpu"};
  tcp.needs.rendezvous = true;
  tcp.nameable = true;
  tcp.automatic = false;
  tcp.make = noComm;
  ASSERT_TRUE(r.addComm(tcp).ok());
  EXPECT_THAT(r.nameableComms(), ElementsAre("shm", "gloo", "tcp"));
  absl::StatusOr<RankChoice> e =
      ChooseRank(r, JobShape{2, 3}, ask("cpu", "tcp"), DeviceProbe{});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->comm, "tcp");
  e = ChooseRank(r, JobShape{2, 3}, ask("cpu"), DeviceProbe{});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->comm, "gloo"); // not automatic: only when named
  EXPECT_EQ(
      ChooseRank(r, JobShape{2, 1}, ask("auto", "tcp"), DeviceProbe{1, ""})
          .status()
          .message(),
      "--comm tcp is a comm of the CPU backend, but the job would run "
      "on this node's GPUs; add --backend cpu");

  Registry preferred = choiceRegistry();
  tcp.automatic = true;
  tcp.preference = 15; // after shm, before gloo
  ASSERT_TRUE(preferred.addComm(tcp).ok());
  EXPECT_EQ(AutomaticComm(preferred, "cpu", JobShape{2, 1}, 0)->name, "shm");
  EXPECT_EQ(AutomaticComm(preferred, "cpu", JobShape{2, 2}, 0)->name, "tcp");
  e = ChooseRank(preferred, JobShape{2, 2}, ask("cpu", "shm"), DeviceProbe{});
  EXPECT_EQ(e.status().message(),
            "--comm shm needs every rank on one node, but the job has 2 nodes "
            "(across nodes the CPU backend runs on tcp)");
}

TEST(Choice, AutomaticCommsForListings) {
  const Registry r = choiceRegistry();
  EXPECT_EQ(AutomaticComm(r, "cpu", JobShape{4, 1}, 0)->name, "shm");
  EXPECT_EQ(AutomaticComm(r, "cpu", JobShape{4, 2}, 0)->name, "gloo");
  EXPECT_EQ(AutomaticComm(r, "cuda", JobShape{4, 2}, 4)->name, "nccl");
  // Ranks sharing devices are a fallback, never an automatic comm.
  EXPECT_EQ(AutomaticComm(r, "cuda", JobShape{4, 1}, 2), nullptr);
  EXPECT_EQ(AutomaticComm(r, "tpu", JobShape{4, 1}, 2), nullptr);
}

//===----------------------------------------------------------------------===//
// Ranks made through the registry
//===----------------------------------------------------------------------===//

/// A port nothing listens on right now.
int freePort() {
  absl::StatusOr<net::Listener> l = net::Listener::listen(0);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? l->port() : 0;
}

RankSpec specOf(const std::string &comm, int rank, int world, int port,
                const std::string &job) {
  RankSpec s;
  s.backend = "cpu";
  s.comm = comm;
  s.rank = rank;
  s.worldSize = world;
  s.localRank = rank;
  s.localWorldSize = world;
  s.threads = 1;
  s.jobId = job;
  s.masterPort = port;
  s.fingerprint = "plan 1234";
  s.timeout = std::chrono::milliseconds(20'000);
  return s;
}

/// Writes `text` into the child's record for the parent to read.
bool report(Shared::Rank &out, const std::string &text) {
  std::snprintf(out.message, sizeof out.message, "%s", text.c_str());
  return true;
}

class MakeRankTest : public ::testing::Test {
protected:
  Ranks ranks_;
};

TEST_F(MakeRankTest, TheCpuBackendWithAndWithoutItsCommThread) {
  const std::string job = uniqueJobId();
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap);
    std::string failures = ranks_.run(1, [&](int, Shared::Rank &out) {
      RankSpec spec = specOf("shm", 0, 1, 0, job + (overlap ? "-t" : ""));
      spec.overlapComm = overlap;
      absl::StatusOr<Rank> r = MakeRank(BuiltinRegistry(), spec);
      if (!r.ok())
        return record(out, r.status(), "MakeRank");
      return report(out,
                    absl::StrCat(r->backend->name(), " ", r->comm->name(), " ",
                                 r->backend->concurrentStreams() ? "1" : "0",
                                 " ", r->comm->streamOrdered() ? "1" : "0",
                                 " | ", r->where, " | ",
                                 r->lines.empty() ? "" : r->lines.front()));
    });
    ASSERT_EQ(failures, "");
    const std::string got = ranks_.rank(0).message;
    EXPECT_THAT(got, StartsWith(overlap ? "cpu shm 1 1 | 1 BLAS thread per "
                                          "rank, a comm thread | cpu: "
                                        : "cpu shm 0 0 | 1 BLAS thread per "
                                          "rank, no comm thread | cpu: "));
  }
}

TEST_F(MakeRankTest, RefusesWhatTheRegistryDoesNotAllow) {
  const Registry &r = BuiltinRegistry();
  RankSpec spec = specOf("shm", 0, 2, 0, uniqueJobId());
  spec.localWorldSize = 1;
  absl::Status s = MakeRank(r, spec).status();
  EXPECT_EQ(s.message(), "the shm comm needs every rank on one node, but "
                         "LOCAL_WORLD_SIZE=1 and WORLD_SIZE=2");
  spec = specOf("mpi", 0, 1, 0, uniqueJobId());
  EXPECT_THAT(std::string(MakeRank(r, spec).status().message()),
              StartsWith("unknown comm 'mpi' (shm, gloo"));
  spec = specOf("shm", 0, 1, 0, uniqueJobId());
  spec.backend = "tpu";
  EXPECT_EQ(MakeRank(r, spec).status().code(),
            absl::StatusCode::kUnimplemented);
  if (r.comm("nccl") != nullptr) {
    spec = specOf("nccl", 0, 1, 0, uniqueJobId());
    EXPECT_EQ(MakeRank(r, spec).status().message(),
              "the CPU backend takes the shm or gloo comm, not nccl");
  }
}

TEST_F(MakeRankTest, AFactoryThatThrowsIsAnErrorNamingIt) {
  Registry r;
  BackendInfo host;
  host.name = "host";
  host.title = "host";
  host.make = [](const RankSpec &) -> absl::StatusOr<RankBackend> {
    throw std::runtime_error("out of luck");
  };
  ASSERT_TRUE(r.addBackend(host).ok());
  CommInfo c;
  c.name = "none";
  c.needs.backends = {"host"};
  c.make = noComm;
  ASSERT_TRUE(r.addComm(c).ok());
  RankSpec spec;
  spec.backend = "host";
  spec.comm = "none";
  absl::Status s = MakeRank(r, spec).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(),
            "making the host backend: a library threw: out of luck");
}

/// Every registered comm of the CPU backend, at every world size of the
/// conformance suites.
struct CommCase {
  std::string comm;
  int world;
};
void PrintTo(const CommCase &c, std::ostream *os) {
  *os << c.comm << " at W = " << c.world;
}

std::vector<CommCase> cpuCommCases() {
  std::vector<CommCase> cases;
  for (const CommInfo *c : BuiltinRegistry().commsOf("cpu"))
    for (int world : {1, 2, 3, 4})
      cases.push_back({c->name, world});
  return cases;
}

class RegisteredComms : public MakeRankTest,
                        public ::testing::WithParamInterface<CommCase> {};

INSTANTIATE_TEST_SUITE_P(Cpu, RegisteredComms,
                         ::testing::ValuesIn(cpuCommCases()),
                         [](const ::testing::TestParamInfo<CommCase> &info) {
                           std::string name = absl::StrCat(info.param.comm, "W",
                                                           info.param.world);
                           for (char &ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch)))
                               ch = '_';
                           return name;
                         });

/// The comm as mdrun makes it (the CPU backend, its comm thread off: the
/// cases call the comm directly), every conformance case bit for bit.
TEST_P(RegisteredComms, RunTheConformanceCasesAsMdrunMakesThem) {
  const CommCase c = GetParam();
  const int port = freePort();
  const std::string job = uniqueJobId();
  std::string failures = ranks_.run(c.world, [&](int rank, Shared::Rank &out) {
    absl::StatusOr<Rank> r =
        MakeRank(BuiltinRegistry(), specOf(c.comm, rank, c.world, port, job));
    if (!r.ok())
      return record(out, r.status(), "MakeRank");
    if (r->comm->name() != c.comm)
      return record(out, absl::InternalError(r->comm->name()), "name");
    absl::Status s = runConformance(*r->comm, c.world, out.data);
    if (!s.ok())
      return record(out, s, "collective");
    return true;
  });
  ASSERT_EQ(failures, "");
  checkConformance(ranks_, c.world);
}

} // namespace
} // namespace md::rank
