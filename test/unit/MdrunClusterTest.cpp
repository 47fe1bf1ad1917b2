//===- MdrunClusterTest.cpp - mdrun's place in a job, backend and comm ----===//
//
// mdrun's command line (Options.h), ResolvePlacement on hand-made
// environments (as srun, mpirun or a user would set them), the Slurm list
// parsers, the options passed on to the runtime's choice of backend and comm
// (runtime/rank/Choice.h, whose rules RankRegistryTest holds), and the
// host-memory check (HostMemory.h): the decisions mdrun takes before it
// starts a rank.
//
//===----------------------------------------------------------------------===//

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include "runtime/rank/Builtin.h"
#include "tools/mdrun/Cluster.h"
#include "tools/mdrun/HostMemory.h"
#include "tools/mdrun/Options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace md::mdrun {
namespace {

using ::testing::HasSubstr;

struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [this](const char *name) -> const char * {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

TrainOptions opts() { return TrainOptions{}; }

/// What srun sets for task `procid` of `ntasks` tasks spread evenly over
/// `nnodes` nodes.
FakeEnv slurmTask(int procid, int ntasks, int nnodes) {
  int perNode = ntasks / nnodes;
  FakeEnv e;
  e.vars["SLURM_JOB_ID"] = "4242";
  e.vars["SLURM_PROCID"] = std::to_string(procid);
  e.vars["SLURM_STEP_NUM_TASKS"] = std::to_string(ntasks);
  e.vars["SLURM_LOCALID"] = std::to_string(procid % perNode);
  e.vars["SLURM_NODEID"] = std::to_string(procid / perNode);
  e.vars["SLURM_STEP_NUM_NODES"] = std::to_string(nnodes);
  e.vars["SLURM_STEP_TASKS_PER_NODE"] =
      std::to_string(perNode) + "(x" + std::to_string(nnodes) + ")";
  e.vars["SLURM_STEP_NODELIST"] = "gpu[007-009,012],login1";
  return e;
}

absl::StatusOr<CommandLine> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "mdrun");
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data());
}

TEST(MdrunCommandLine, Training) {
  absl::StatusOr<CommandLine> cl = parse({"--gpus",
                                          "2",
                                          "--ranks=2",
                                          "--backend=cpu",
                                          "--comm",
                                          "gloo",
                                          "--no-fallback",
                                          "--skip-memory-check",
                                          "--steps",
                                          "0",
                                          "--seed",
                                          "7",
                                          "--log-every",
                                          "5",
                                          "--metrics",
                                          "m.jsonl",
                                          "--save-final=w.st",
                                          "--timeout",
                                          "2.5",
                                          "--threads",
                                          "3",
                                          "--nnodes",
                                          "2",
                                          "--node-rank",
                                          "1",
                                          "--master-addr",
                                          "node0",
                                          "--master-port",
                                          "0",
                                          "--flight-recorder",
                                          "16",
                                          "--trace=run/t.json",
                                          "--comm-thread",
                                          "off",
                                          "plan.fb"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->mode, CommandLine::Mode::Launch);
  const TrainOptions &t = cl->train;
  EXPECT_EQ(t.planPath, "plan.fb");
  EXPECT_EQ(t.ranks, 2);
  EXPECT_EQ(t.backend, BackendChoice::Cpu);
  EXPECT_EQ(t.comm, "gloo");
  EXPECT_TRUE(t.noFallback);
  EXPECT_TRUE(t.skipMemoryCheck);
  EXPECT_EQ(t.steps, 0);
  EXPECT_EQ(t.seed, 7);
  EXPECT_EQ(t.logEvery, 5);
  EXPECT_EQ(t.metricsPath, "m.jsonl");
  EXPECT_EQ(t.saveFinalPath, "w.st");
  EXPECT_EQ(t.timeoutSeconds, 2.5);
  EXPECT_EQ(t.threads, 3);
  EXPECT_EQ(t.nnodes, 2);
  EXPECT_EQ(t.nodeRank, 1);
  EXPECT_EQ(t.masterAddr, "node0");
  EXPECT_EQ(t.masterPort, 0);
  EXPECT_EQ(t.flightRecorder, 16);
  EXPECT_EQ(t.tracePath, "run/t.json");
  EXPECT_FALSE(t.commThread);

  // Every parse starts from the defaults: nothing above carries over.
  cl = parse({"plan.fb", "--worker"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->mode, CommandLine::Mode::Worker);
  const TrainOptions d;
  EXPECT_EQ(cl->train.ranks, d.ranks);
  EXPECT_EQ(cl->train.backend, d.backend);
  EXPECT_EQ(cl->train.noFallback, d.noFallback);
  EXPECT_FALSE(cl->train.skipMemoryCheck);
  EXPECT_EQ(cl->train.steps, d.steps);
  EXPECT_FALSE(cl->train.seed.has_value());
  EXPECT_EQ(cl->train.logEvery, d.logEvery);
  EXPECT_EQ(cl->train.metricsPath, d.metricsPath);
  EXPECT_EQ(cl->train.saveFinalPath, d.saveFinalPath);
  EXPECT_EQ(cl->train.timeoutSeconds, d.timeoutSeconds);
  EXPECT_EQ(cl->train.threads, d.threads);
  EXPECT_EQ(cl->train.nnodes, d.nnodes);
  EXPECT_EQ(cl->train.nodeRank, d.nodeRank);
  EXPECT_EQ(cl->train.masterAddr, d.masterAddr);
  EXPECT_EQ(cl->train.masterPort, d.masterPort);
  EXPECT_TRUE(cl->train.commThread); // on unless asked
}

// torchrun's spellings: --nproc-per-node (auto too) is --gpus, any long
// option may use underscores, --standalone is one node on a free port,
// --rdzv-endpoint is --master-addr and --master-port; contradictions are
// refused, and an unknown option gets the nearest spelling.
TEST(MdrunCommandLine, TorchrunSpellings) {
  absl::StatusOr<CommandLine> cl =
      parse({"--nproc_per_node", "2", "--log_every=5", "plan.fb"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->train.ranks, 2);
  EXPECT_EQ(cl->train.logEvery, 5);
  cl = parse({"--nproc-per-node=auto", "plan.fb"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_TRUE(cl->train.ranksAuto);
  EXPECT_EQ(cl->train.ranks, 0);
  EXPECT_EQ(parse({"--nproc-per-node", "auto", "--gpus", "2", "plan.fb"})
                .status()
                .message(),
            "--gpus 2 contradicts the auto ranks asked for before");
  EXPECT_EQ(parse({"--nproc-per-node", "0", "plan.fb"}).status().message(),
            "--nproc-per-node 0: not a positive integer or auto");

  cl = parse({"--standalone", "--nproc-per-node", "2", "plan.fb"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->train.nnodes, 1);
  EXPECT_EQ(cl->train.masterPort, 0);
  EXPECT_THAT(parse({"--standalone", "--nnodes", "2", "plan.fb"})
                  .status()
                  .message(),
              HasSubstr("--standalone is a job of this node alone"));
  EXPECT_THAT(parse({"--standalone", "--master-port", "29500", "plan.fb"})
                  .status()
                  .message(),
              HasSubstr("--standalone meets on a free port"));

  cl = parse({"--rdzv-endpoint", "node0:29400", "plan.fb"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->train.masterAddr, "node0");
  EXPECT_EQ(cl->train.masterPort, 29400);
  cl = parse({"--rdzv_endpoint=[fe80::1]:29401", "plan.fb"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->train.masterAddr, "fe80::1");
  EXPECT_EQ(cl->train.masterPort, 29401);
  cl = parse({"--rdzv-endpoint", "node0", "plan.fb"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->train.masterPort, -1);
  EXPECT_EQ(parse({"--rdzv-endpoint", "node0:29400", "--master-port", "1",
                   "plan.fb"})
                .status()
                .message(),
            "--rdzv-endpoint node0:29400 contradicts --master-port 1");
  EXPECT_EQ(parse({"--rdzv-endpoint", "node0:x", "plan.fb"}).status().message(),
            "--rdzv-endpoint node0:x: 'x' is not a port (0 to 65535)");

  EXPECT_EQ(parse({"--nproc-per-nodes", "2", "plan.fb"}).status().message(),
            "unknown option '--nproc-per-nodes' (did you mean "
            "--nproc-per-node?)");
  EXPECT_EQ(parse({"--max_restart", "2", "plan.fb"}).status().message(),
            "unknown option '--max_restart' (did you mean --max-restarts?)");
}

TEST(MdrunCommandLine, InspectAndHelp) {
  absl::StatusOr<CommandLine> cl =
      parse({"--world-size=4", "--inspect", "p.fb", "--format", "json"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->mode, CommandLine::Mode::Inspect);
  EXPECT_EQ(cl->inspect.planPath, "p.fb");
  EXPECT_EQ(cl->inspect.worldSize, 4);
  EXPECT_EQ(cl->inspect.format, InspectFormat::Json);
  cl = parse({"--inspect=q.fb"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->inspect.planPath, "q.fb");
  EXPECT_EQ(cl->inspect.worldSize, 0);
  EXPECT_EQ(cl->inspect.format, InspectFormat::Text);
  EXPECT_EQ(parse({"--help"})->mode, CommandLine::Mode::Help);
  EXPECT_EQ(parse({"plan.fb", "-h", "--gpus", "2"})->mode,
            CommandLine::Mode::Help);
}

TEST(MdrunCommandLine, ABadCommandLineNamesTheArgument) {
  struct Bad {
    std::vector<std::string> args;
    const char *message;
  } bad[] = {
      {{"--frobnicate", "p"}, "unknown option '--frobnicate'"},
      {{"p", "--world-size", "2"}, "--world-size only goes with --inspect"},
      {{"p", "--format=json"}, "--format=json only goes with --inspect"},
      {{"--inspect", "p", "--gpus", "2"},
       "--inspect takes no other arguments, got '--gpus'"},
      {{"--inspect", "p", "--worker"},
       "--inspect takes no other arguments, got '--worker'"},
      {{"--inspect", "p", "q"}, "--inspect takes no other arguments, got 'q'"},
      {{"--gpus", "2", "--ranks", "4", "p"},
       "--ranks 4 contradicts the 2 ranks asked for before"},
      {{"--gpus", "0", "p"}, "--gpus 0: not a positive integer"},
      {{"--backend", "gpu", "p"}, "--backend gpu: expected auto, cpu or cuda"},
      {{"--comm", "tcp", "p"}, "--comm tcp: expected auto, shm or gloo"},
      {{"--comm-thread=yes", "p"}, "--comm-thread yes: expected off or on"},
      {{"--inspect", "p", "--format", "xml"},
       "--format xml: expected text or json"},
      {{"--inspect", "p", "--world-size", "0"},
       "--world-size 0: not a positive integer"},
      {{"--nnodes", "70000", "p"}, "--nnodes 70000: more than 65536 nodes"},
      {{"--nnodes", "0", "p"}, "--nnodes 0: not a positive integer"},
      {{"--node-rank", "-1", "p"},
       "--node-rank -1: not a non-negative integer"},
      {{"--master-port", "65536", "p"},
       "--master-port 65536: not a port (0 to 65535)"},
      {{"--master-addr=", "p"}, "--master-addr needs a host"},
      {{"--timeout", "0", "p"},
       "--timeout 0: not a positive number of seconds"},
      {{"--timeout", "1e7", "p"},
       "--timeout 1e7: not a positive number of seconds"},
      {{"--flight-recorder", "1048577", "p"},
       "--flight-recorder 1048577: more than 1048576 collectives"},
      {{"--flight-recorder", "-1", "p"},
       "--flight-recorder -1: not a non-negative integer"},
      {{"--trace=", "p"}, "--trace needs a file name"},
      {{"--metrics=", "p"}, "--metrics needs a file name"},
      {{"--save-final", "", "p"}, "--save-final needs a file name"},
      {{"--seed", "-3", "p"}, "--seed -3: not a non-negative integer"},
      {{"--steps", "x", "p"}, "--steps x: not a non-negative integer"},
      {{"p", "--steps"}, "--steps needs a value"},
      {{"--no-fallback=maybe", "p"}, "--no-fallback maybe: not a valid value"},
      {{}, "no plan file given"},
      {{"a", "b"}, "one plan file, got 'a' and 'b'"},
  };
  for (const Bad &b : bad) {
    absl::StatusOr<CommandLine> r = parse(b.args);
    ASSERT_FALSE(r.ok()) << b.message;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), b.message);
  }
}

TEST(MdrunCommandLine, Usage) {
  const std::string usage = Usage();
  EXPECT_THAT(usage, HasSubstr("usage: mdrun [--gpus N | --ranks N] [options] "
                               "PLAN\n       mdrun --inspect PLAN"));
  for (const char *line :
       {"\nTraining (", "\n  --gpus N           run N ranks, one per GPU",
        "\n  --no-fallback      ", "\nSeveral nodes (",
        "\n  --master-port P    ", "\nInspection:\n  --inspect PLAN     ",
        "\n  --format FORMAT    text (default) or json\n",
        "\n  --help             print this message\n", "\nExamples:\n"})
    EXPECT_THAT(usage, HasSubstr(line));
  EXPECT_THAT(usage, ::testing::Not(HasSubstr("--worker")));
  for (absl::string_view line : absl::StrSplit(usage, '\n'))
    EXPECT_LE(line.size(), 79u) << line;
  // --comm's line comes from the runtime's registry of comms.
  std::string words;
  for (absl::string_view w :
       absl::StrSplit(usage, absl::ByAnyChar(" \n"), absl::SkipEmpty()))
    absl::StrAppend(&words, words.empty() ? "" : " ", w);
  EXPECT_THAT(words, HasSubstr("--comm C the CPU backend's comm: auto "
                               "(default: shm on one node, gloo across "
                               "nodes), shm, or gloo --no-fallback"));
}

TEST(SlurmLists, FirstHost) {
  EXPECT_EQ(*FirstSlurmHost("gpu[007-009,012],login1"), "gpu007");
  EXPECT_EQ(*FirstSlurmHost("node5"), "node5");
  EXPECT_EQ(*FirstSlurmHost("a1,b2"), "a1");
  EXPECT_EQ(*FirstSlurmHost("rack[3]-ib"), "rack3-ib");
  EXPECT_EQ(*FirstSlurmHost(" n[10-11] "), "n10");
  EXPECT_THAT(FirstSlurmHost("gpu[01-02").status().message(),
              HasSubstr("unbalanced brackets"));
  EXPECT_THAT(FirstSlurmHost("gpu[x-y]").status().message(),
              HasSubstr("cannot read the host range"));
  EXPECT_FALSE(FirstSlurmHost("").ok());
}

TEST(SlurmLists, TasksPerNode) {
  EXPECT_EQ(*ExpandSlurmTasksPerNode("4"), (std::vector<int>{4}));
  EXPECT_EQ(*ExpandSlurmTasksPerNode("2(x3),1"),
            (std::vector<int>{2, 2, 2, 1}));
  EXPECT_THAT(ExpandSlurmTasksPerNode("2(x").status().message(),
              HasSubstr("cannot read '2(x'"));
  EXPECT_FALSE(ExpandSlurmTasksPerNode("0").ok());
  EXPECT_FALSE(ExpandSlurmTasksPerNode("").ok());
  EXPECT_FALSE(ExpandSlurmTasksPerNode("1(x100000)").ok());
}

TEST(Placement, ByHandOnOneNode) {
  FakeEnv env;
  TrainOptions o = opts();
  o.ranks = 2;
  absl::StatusOr<Placement> p = ResolvePlacement(o, env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->role, Placement::Role::Launcher);
  EXPECT_EQ(p->nnodes, 1);
  EXPECT_EQ(p->ranksPerNode, 2);
  EXPECT_EQ(p->masterAddr, "127.0.0.1");
  EXPECT_EQ(p->masterPort, 29500);
}

TEST(Placement, EnvironmentAndCommandLine) {
  FakeEnv env;
  env.vars["MASTER_ADDR"] = "head";
  env.vars["MASTER_PORT"] = "31000";
  TrainOptions o = opts();
  absl::StatusOr<Placement> p = ResolvePlacement(o, env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->masterAddr, "head");
  EXPECT_EQ(p->masterPort, 31000);
  // The command line wins over the environment.
  o.masterAddr = "other";
  o.masterPort = 32000;
  p = ResolvePlacement(o, env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->masterAddr, "other");
  EXPECT_EQ(p->masterPort, 32000);
  env.vars["MASTER_PORT"] = "70000";
  EXPECT_THAT(ResolvePlacement(opts(), env.lookup()).status().message(),
              HasSubstr("MASTER_PORT=70000"));
}

TEST(Placement, ByHandOnSeveralNodes) {
  FakeEnv env;
  TrainOptions o = opts();
  o.ranks = 8;
  o.nnodes = 2;
  o.nodeRank = 1;
  o.masterAddr = "node0";
  absl::StatusOr<Placement> p = ResolvePlacement(o, env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->role, Placement::Role::Launcher);
  EXPECT_EQ(p->nnodes, 2);
  EXPECT_EQ(p->nodeRank, 1);
  EXPECT_EQ(p->ranksPerNode, 8);

  TrainOptions noAddr = o;
  noAddr.masterAddr.clear();
  EXPECT_THAT(ResolvePlacement(noAddr, env.lookup()).status().message(),
              HasSubstr("needs the host of rank 0: give --master-addr"));
  TrainOptions noRank = o;
  noRank.nodeRank = -1;
  EXPECT_THAT(ResolvePlacement(noRank, env.lookup()).status().message(),
              HasSubstr("--nnodes 2 needs --node-rank"));
  TrainOptions badRank = o;
  badRank.nodeRank = 2;
  EXPECT_THAT(ResolvePlacement(badRank, env.lookup()).status().message(),
              HasSubstr("--node-rank 2 is not below --nnodes 2"));
  TrainOptions port0 = o;
  port0.masterPort = 0;
  EXPECT_THAT(ResolvePlacement(port0, env.lookup()).status().message(),
              HasSubstr("free port on node 0 only"));
  port0.nodeRank = 0;
  EXPECT_TRUE(ResolvePlacement(port0, env.lookup()).ok());
}

TEST(Placement, ARendezvousHostThatDoesNotResolveIsNamedAsItWasGiven) {
  // .invalid never resolves (RFC 2606); the check asks the resolver once.
  FakeEnv env;
  TrainOptions o = opts();
  o.ranks = 1;
  o.nnodes = 2;
  o.nodeRank = 1;
  o.masterAddr = "bogus.invalid";
  absl::StatusOr<Placement> p = ResolvePlacement(o, env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->masterAddrFrom, "--master-addr bogus.invalid");
  absl::Status s = CheckRendezvousHost(*p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("--master-addr bogus.invalid: cannot resolve it: "));
  EXPECT_GT(s.message().size(),
            std::string("--master-addr bogus.invalid: cannot resolve it: ")
                .size());

  // Node 0 checks too: its other ranks connect to the name.
  o.nodeRank = 0;
  p = ResolvePlacement(o, env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(CheckRendezvousHost(*p).ok());

  // From the environment, one process per rank (torchrun's variables).
  env.vars["MASTER_ADDR"] = "bogus.invalid";
  env.vars["RANK"] = "1";
  env.vars["WORLD_SIZE"] = "2";
  env.vars["LOCAL_RANK"] = "0";
  env.vars["LOCAL_WORLD_SIZE"] = "1";
  p = ResolvePlacement(opts(), env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->masterAddrFrom, "MASTER_ADDR=bogus.invalid");
  EXPECT_THAT(CheckRendezvousHost(*p).message(),
              HasSubstr("MASTER_ADDR=bogus.invalid: cannot resolve it: "));

  // Slurm's first host.
  FakeEnv slurm = slurmTask(/*procid=*/1, /*ntasks=*/2, /*nnodes=*/2);
  slurm.vars["SLURM_STEP_NODELIST"] = "bogus.invalid,n2";
  p = ResolvePlacement(opts(), slurm.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(
      CheckRendezvousHost(*p).message(),
      HasSubstr("SLURM_STEP_NODELIST's first host bogus.invalid: cannot "
                "resolve it: "));

  // A name and an address that resolve pass; so does any name on one node,
  // where no process connects to it.
  for (const char *good : {"localhost", "127.0.0.1", "::1"}) {
    TrainOptions g = opts();
    g.nnodes = 2;
    g.nodeRank = 1;
    g.masterAddr = good;
    p = ResolvePlacement(g, FakeEnv().lookup());
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(CheckRendezvousHost(*p).ok()) << good;
  }
  TrainOptions one = opts();
  one.masterAddr = "bogus.invalid";
  p = ResolvePlacement(one, FakeEnv().lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(CheckRendezvousHost(*p).ok());
}

TEST(Placement, SrunOneTaskPerRank) {
  FakeEnv env = slurmTask(/*procid=*/5, /*ntasks=*/8, /*nnodes=*/2);
  absl::StatusOr<Placement> p = ResolvePlacement(opts(), env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->role, Placement::Role::Rank);
  EXPECT_EQ(p->source, "Slurm");
  EXPECT_EQ(p->rank, 5);
  EXPECT_EQ(p->worldSize, 8);
  EXPECT_EQ(p->localRank, 1);
  EXPECT_EQ(p->ranksPerNode, 4);
  EXPECT_EQ(p->nnodes, 2);
  EXPECT_EQ(p->nodeRank, 1);
  EXPECT_EQ(p->masterAddr, "gpu007");
  EXPECT_EQ(p->masterPort, 29500);

  env.vars["MASTER_ADDR"] = "10.0.0.1";
  p = ResolvePlacement(opts(), env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->masterAddr, "10.0.0.1");

  TrainOptions o = opts();
  o.ranks = 8;
  EXPECT_THAT(ResolvePlacement(o, env.lookup()).status().message(),
              HasSubstr("--gpus 8 contradicts Slurm, which started 4 ranks"));
  o = opts();
  o.nnodes = 3;
  EXPECT_THAT(ResolvePlacement(o, env.lookup()).status().message(),
              HasSubstr("--nnodes 3 contradicts Slurm"));
}

/// What torchrun sets for local rank `local` of `perNode` on node `node` of
/// `nnodes`, with its agent's store.
FakeEnv torchrunWorker(int node, int local, int perNode, int nnodes) {
  FakeEnv e;
  e.vars["RANK"] = std::to_string(node * perNode + local);
  e.vars["WORLD_SIZE"] = std::to_string(perNode * nnodes);
  e.vars["LOCAL_RANK"] = std::to_string(local);
  e.vars["LOCAL_WORLD_SIZE"] = std::to_string(perNode);
  e.vars["GROUP_RANK"] = std::to_string(node);
  e.vars["GROUP_WORLD_SIZE"] = std::to_string(nnodes);
  e.vars["MASTER_ADDR"] = "node0";
  e.vars["MASTER_PORT"] = "41234";
  e.vars["TORCHELASTIC_RUN_ID"] = "c7473307-4dad";
  e.vars["TORCHELASTIC_RESTART_COUNT"] = "2";
  e.vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  e.vars["TORCHELASTIC_ERROR_FILE"] = "/tmp/err.json";
  return e;
}

TEST(Placement, TorchrunWorkerIsOneRank) {
  FakeEnv env = torchrunWorker(/*node=*/1, /*local=*/1, /*perNode=*/2, 2);
  absl::StatusOr<Placement> p = ResolvePlacement(opts(), env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->role, Placement::Role::Rank);
  EXPECT_EQ(p->source, "torchrun");
  EXPECT_EQ(p->rank, 3);
  EXPECT_EQ(p->worldSize, 4);
  EXPECT_EQ(p->localRank, 1);
  EXPECT_EQ(p->ranksPerNode, 2);
  EXPECT_EQ(p->nnodes, 2);
  EXPECT_EQ(p->nodeRank, 1);
  EXPECT_EQ(p->masterAddr, "node0");
  EXPECT_EQ(p->masterPort, 41234);
  EXPECT_TRUE(p->agentStore);
  EXPECT_EQ(p->jobId, "torchrun-c7473307-4dad-2");
  EXPECT_EQ(p->errorFile, "/tmp/err.json");

  // One process of one: still that rank, not a launcher of its own.
  env = torchrunWorker(0, 0, 1, 1);
  p = ResolvePlacement(opts(), env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->role, Placement::Role::Rank);
  EXPECT_EQ(p->worldSize, 1);

  // Without torchrun's agent (a Kubernetes PyTorchJob, say): the same
  // contract, md's own rendezvous on MASTER_PORT.
  env = torchrunWorker(0, 1, 2, 1);
  env.vars.erase("TORCHELASTIC_RUN_ID");
  env.vars.erase("TORCHELASTIC_USE_AGENT_STORE");
  p = ResolvePlacement(opts(), env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->source, "the torchrun environment");
  EXPECT_FALSE(p->agentStore);
  EXPECT_EQ(p->jobId, "");

  // torchrun's variables win over those of the srun that started it.
  FakeEnv both = slurmTask(0, 2, 2);
  for (const auto &[k, v] : torchrunWorker(0, 1, 4, 1).vars)
    both.vars[k] = v;
  p = ResolvePlacement(opts(), both.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->source, "torchrun");
  EXPECT_EQ(p->worldSize, 4);
}

TEST(Placement, TorchrunPartialOrContradictoryIsRefused) {
  // Partial: never a smaller job than the environment describes.
  FakeEnv env;
  env.vars["RANK"] = "0";
  env.vars["WORLD_SIZE"] = "2";
  EXPECT_EQ(ResolvePlacement(opts(), env.lookup()).status().message(),
            "RANK, WORLD_SIZE are set (the torchrun environment contract: "
            "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), but LOCAL_RANK, "
            "LOCAL_WORLD_SIZE are not: mdrun runs no smaller job than the "
            "environment describes; set LOCAL_RANK, LOCAL_WORLD_SIZE too, or "
            "unset RANK, WORLD_SIZE");
  env.vars.clear();
  env.vars["LOCAL_RANK"] = "0";
  EXPECT_THAT(ResolvePlacement(opts(), env.lookup()).status().message(),
              HasSubstr("LOCAL_RANK is set (the torchrun environment "
                        "contract"));

  auto refused = [](FakeEnv e, const TrainOptions &o) {
    return std::string(ResolvePlacement(o, e.lookup()).status().message());
  };
  FakeEnv w = torchrunWorker(0, 1, 2, 2);
  w.vars["RANK"] = "5";
  EXPECT_THAT(refused(w, opts()), HasSubstr("RANK=5 is not below WORLD_SIZE=4"));
  w = torchrunWorker(0, 1, 2, 2);
  w.vars["LOCAL_RANK"] = "2";
  EXPECT_THAT(refused(w, opts()),
              HasSubstr("LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"));
  w = torchrunWorker(0, 1, 2, 2);
  w.vars["WORLD_SIZE"] = "3";
  EXPECT_THAT(refused(w, opts()),
              HasSubstr("WORLD_SIZE=3 is not a multiple of LOCAL_WORLD_SIZE=2"));
  w = torchrunWorker(1, 0, 2, 2);
  w.vars["RANK"] = "0";
  EXPECT_THAT(refused(w, opts()), HasSubstr("RANK=0 is not node 1's local "
                                            "rank 0"));
  w = torchrunWorker(0, 0, 2, 2);
  w.vars["GROUP_WORLD_SIZE"] = "3";
  EXPECT_THAT(refused(w, opts()), HasSubstr("GROUP_WORLD_SIZE=3 contradicts"));
  w = torchrunWorker(0, 0, 2, 2);
  w.vars["WORLD_SIZE"] = "two";
  EXPECT_THAT(refused(w, opts()), HasSubstr("WORLD_SIZE=two is not an integer"));

  // Against the command line.
  w = torchrunWorker(0, 0, 2, 1);
  TrainOptions o = opts();
  o.ranks = 4;
  EXPECT_THAT(refused(w, o),
              HasSubstr("--gpus 4 contradicts torchrun, which started 2 "
                        "ranks on this node"));
  o = opts();
  o.nnodes = 2;
  EXPECT_THAT(refused(w, o), HasSubstr("--nnodes 2 contradicts torchrun"));
  // Several nodes need rank 0's host.
  w = torchrunWorker(1, 0, 1, 2);
  w.vars.erase("MASTER_ADDR");
  EXPECT_THAT(refused(w, opts()), HasSubstr("needs the host of rank 0"));
}

TEST(Placement, SrunOneTaskPerNodeIsALauncher) {
  FakeEnv env = slurmTask(/*procid=*/1, /*ntasks=*/2, /*nnodes=*/2);
  TrainOptions o = opts();
  o.ranks = 4;
  absl::StatusOr<Placement> p = ResolvePlacement(o, env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->role, Placement::Role::Launcher);
  EXPECT_EQ(p->nnodes, 2);
  EXPECT_EQ(p->nodeRank, 1);
  EXPECT_EQ(p->ranksPerNode, 4);
  EXPECT_EQ(p->masterAddr, "gpu007");
}

TEST(Placement, BatchScriptWithoutSrunIsByHand) {
  // sbatch sets SLURM_PROCID and allocation-wide counts, but no step.
  FakeEnv env;
  env.vars["SLURM_PROCID"] = "0";
  env.vars["SLURM_NTASKS"] = "8";
  TrainOptions o = opts();
  o.ranks = 2;
  absl::StatusOr<Placement> p = ResolvePlacement(o, env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->role, Placement::Role::Launcher);
  EXPECT_EQ(p->nnodes, 1);
  EXPECT_EQ(p->source, "command line");
}

TEST(Placement, SrunMalformed) {
  FakeEnv env = slurmTask(0, 4, 2);
  env.vars["SLURM_STEP_TASKS_PER_NODE"] = "2(x3)";
  EXPECT_THAT(ResolvePlacement(opts(), env.lookup()).status().message(),
              HasSubstr("lists 3 nodes"));
  env = slurmTask(0, 4, 2);
  env.vars["SLURM_LOCALID"] = "x";
  EXPECT_THAT(ResolvePlacement(opts(), env.lookup()).status().message(),
              HasSubstr("SLURM_LOCALID=x"));
  env = slurmTask(0, 4, 2);
  env.vars.erase("SLURM_NODEID");
  EXPECT_THAT(ResolvePlacement(opts(), env.lookup()).status().message(),
              HasSubstr("started by srun, but SLURM_NODEID is not set"));
  env = slurmTask(0, 4, 2);
  env.vars["SLURM_STEP_TASKS_PER_NODE"] = "3,1";
  EXPECT_THAT(ResolvePlacement(opts(), env.lookup()).status().message(),
              HasSubstr("the same number of ranks on every node"));
}

TEST(Placement, OpenMpi) {
  FakeEnv env;
  env.vars["OMPI_COMM_WORLD_SIZE"] = "4";
  env.vars["OMPI_COMM_WORLD_RANK"] = "3";
  env.vars["OMPI_COMM_WORLD_LOCAL_RANK"] = "1";
  env.vars["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  // Two nodes need MASTER_ADDR: Open MPI names no host.
  EXPECT_THAT(ResolvePlacement(opts(), env.lookup()).status().message(),
              HasSubstr("set MASTER_ADDR"));
  env.vars["MASTER_ADDR"] = "head";
  absl::StatusOr<Placement> p = ResolvePlacement(opts(), env.lookup());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->role, Placement::Role::Rank);
  EXPECT_EQ(p->source, "Open MPI");
  EXPECT_EQ(p->rank, 3);
  EXPECT_EQ(p->localRank, 1);
  EXPECT_EQ(p->nnodes, 2);
  EXPECT_EQ(p->nodeRank, 1);
  TrainOptions o = opts();
  o.masterPort = 0;
  EXPECT_THAT(ResolvePlacement(o, env.lookup()).status().message(),
              HasSubstr("every rank is started separately"));
  env.vars["OMPI_COMM_WORLD_LOCAL_SIZE"] = "3";
  EXPECT_THAT(ResolvePlacement(opts(), env.lookup()).status().message(),
              HasSubstr("not a multiple"));
}

// The choice itself, with every refusal, is the runtime's
// (test/unit/RankRegistryTest.cpp); mdrun passes its options on.
TEST(Execution, TheOptionsAreTheRuntimesRequest) {
  TrainOptions o = opts();
  o.backend = BackendChoice::Cpu;
  absl::StatusOr<rank::RankChoice> e =
      ChooseRankFor(o, 2, 1, rank::DeviceProbe{8, ""});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->backend, "cpu");
  EXPECT_EQ(e->comm, "shm");
  EXPECT_TRUE(e->warning.empty());
  e = ChooseRankFor(o, 2, 2, rank::DeviceProbe{8, ""});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->comm, "gloo");
  o.comm = "gloo";
  e = ChooseRankFor(o, 2, 1, rank::DeviceProbe{0, "none"});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->comm, "gloo");
  o.comm = "shm";
  EXPECT_THAT(
      ChooseRankFor(o, 2, 2, rank::DeviceProbe{0, "none"}).status().message(),
      HasSubstr("--comm shm needs every rank on one node, but the job "
                "has 2 nodes"));

  TrainOptions strict = opts();
  strict.noFallback = true;
  EXPECT_THAT(ChooseRankFor(strict, 2, 1, rank::DeviceProbe{0, "none"})
                  .status()
                  .message(),
              HasSubstr("--no-fallback forbids"));
  e = ChooseRankFor(opts(), 2, 1, rank::DeviceProbe{0, "none"});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->warning,
            "no usable GPU (none); running 2 ranks on the CPU backend");
}

TEST(Execution, WithoutAGpuBackendTheProbeSaysWhy) {
  // What the fallback warning says in a build without CUDA; with CUDA the
  // probe is the CUDA backend's (not run here: it would initialise CUDA).
  if (rank::BuiltinRegistry().deviceBackend() != nullptr)
    GTEST_SKIP() << "this build has the CUDA backend";
  rank::DeviceProbe p = ProbeGpus();
  EXPECT_EQ(p.count, 0);
  EXPECT_EQ(p.unusableReason, "mdrun was built without CUDA");
}

//===----------------------------------------------------------------------===//
// The host-memory check before launch.
//===----------------------------------------------------------------------===//

std::string writeFile(const std::string &name, const std::string &text) {
  std::string path = ::testing::TempDir() + "/" + name;
  FILE *f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}

TEST(HostMemory, ReadsMemAvailable) {
  std::string path = writeFile("meminfo-ok", "MemTotal:       24576000 kB\n"
                                             "MemFree:        20000000 kB\n"
                                             "MemAvailable:   23000000 kB\n"
                                             "Buffers:          100000 kB\n");
  absl::StatusOr<int64_t> bytes = ReadMemAvailable(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, int64_t{23000000} * 1024);
}

TEST(HostMemory, MemAvailableMissingOrMalformedIsAnError) {
  absl::StatusOr<int64_t> none =
      ReadMemAvailable(writeFile("meminfo-none", "MemTotal: 1 kB\n"));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("has no MemAvailable line"));
  absl::StatusOr<int64_t> bad =
      ReadMemAvailable(writeFile("meminfo-bad", "MemAvailable: lots\n"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(bad.status().message()),
      HasSubstr("cannot read the MemAvailable line 'MemAvailable: lots'"));
  absl::StatusOr<int64_t> huge = ReadMemAvailable(
      writeFile("meminfo-huge", "MemAvailable: 9223372036854775807 kB\n"));
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<int64_t> absent = ReadMemAvailable("/nonexistent/meminfo");
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kNotFound);
}

NodeMemoryNeed needOf(int64_t activations, int64_t ranks) {
  NodeMemoryNeed need;
  need.perRank.params = 1024;
  need.perRank.optimizer = 2048;
  need.perRank.activations = activations;
  need.perRank.peak = 1024 + 2048 + activations;
  need.ranksOnNode = ranks;
  need.largest = {{"matmul (gpt.mdl:40:16)", activations / 2},
                  {"gelu (gpt.mdl:30:9)", activations / 4}};
  return need;
}

TEST(HostMemory, AJobThatFitsPasses) {
  NodeMemoryNeed need = needOf(int64_t{1} << 30, 2);
  EXPECT_TRUE(CheckHostMemory(need, 2 * need.perRank.peak).ok());
  EXPECT_FALSE(CheckHostMemory(need, 2 * need.perRank.peak - 1).ok());
}

TEST(HostMemory, AJobThatCannotFitIsRefusedWithTheNumbers) {
  NodeMemoryNeed need = needOf(int64_t{3} << 30, 4); // 4 x 3.0 GiB
  absl::Status s = CheckHostMemory(need, int64_t{8} << 30);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  std::string m(s.message());
  EXPECT_THAT(m, HasSubstr("the plan needs 4 ranks x 3.0 GiB = 12.0 GiB of "
                           "host memory at its peak, but this node has "
                           "8.0 GiB available (MemAvailable)"));
  EXPECT_THAT(m, HasSubstr("per rank: params 1.0 KiB, grads 0 B, grad_acc 0 B, "
                           "optimizer 2.0 KiB, activations 3.0 GiB, "
                           "comm_buffers 0 B;"));
  EXPECT_THAT(m, HasSubstr("the largest buffers: 'matmul (gpt.mdl:40:16)' "
                           "1.5 GiB, 'gelu (gpt.mdl:30:9)' 768.0 MiB."));
  EXPECT_THAT(m, HasSubstr("--skip-memory-check starts it anyway"));
}

TEST(HostMemory, RanksSharingAGpuAreCheckedAgainstItsFreeMemory) {
  NodeMemoryNeed need = needOf(int64_t{30} << 30, 2); // 2 x 30 GiB on one GPU
  const std::string gpu = "cuda:0 (NVIDIA H100 80GB HBM3)";
  EXPECT_TRUE(
      CheckDeviceMemory(need, gpu, 2 * need.perRank.peak, int64_t{80} << 30)
          .ok());
  absl::Status s =
      CheckDeviceMemory(need, gpu, int64_t{40} << 30, int64_t{80} << 30);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  std::string m(s.message());
  EXPECT_THAT(m, HasSubstr("the plan needs 2 ranks x 30.0 GiB = 60.0 GiB of "
                           "GPU memory on cuda:0 (NVIDIA H100 80GB HBM3) at "
                           "its peak, but it has 40.0 GiB free of 80.0 GiB "
                           "(cudaMemGetInfo)"));
  EXPECT_THAT(m, HasSubstr("Start fewer ranks per GPU"));
  EXPECT_THAT(m, HasSubstr("--skip-memory-check starts it anyway"));
}

TEST(HostMemory, AbsurdRankCountsOnTheCpuAreRefused) {
  EXPECT_TRUE(CheckCpuRankCount(8, 2).ok());
  EXPECT_TRUE(CheckCpuRankCount(32, 2).ok());
  absl::Status s = CheckCpuRankCount(1000, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("1000 ranks on this node's 2 cores is more than 16 per "
                        "core"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("start at most 32 ranks on this node"));
  EXPECT_FALSE(CheckCpuRankCount(17, 0).ok()) << "no cores counts as one";
}

TEST(HostMemory, ANeedThatOverflowsIsRefused) {
  NodeMemoryNeed need = needOf(int64_t{1} << 62, 4);
  absl::Status s = CheckHostMemory(need, INT64_MAX);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("= more than 8 EiB of host"));
}

TEST(HostMemory, CheckNodeMemoryReadsTheFileAndSaysHowToSkip) {
  NodeMemoryNeed need = needOf(int64_t{1} << 30, 2); // about 2 GiB
  EXPECT_TRUE(CheckNodeMemory(
                  need, writeFile("meminfo-big", "MemAvailable: 4194304 kB\n"))
                  .ok());
  absl::Status small = CheckNodeMemory(
      need, writeFile("meminfo-small", "MemAvailable: 1048576 kB\n"));
  EXPECT_EQ(small.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(small.message()),
              HasSubstr("but this node has 1.0 GiB available"));
  absl::Status unreadable = CheckNodeMemory(need, "/nonexistent/meminfo");
  EXPECT_EQ(unreadable.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unreadable.message(),
            "cannot check that the ranks fit in memory: cannot read "
            "/nonexistent/meminfo for MemAvailable (--skip-memory-check "
            "starts them without the check)");
}

} // namespace
} // namespace md::mdrun
