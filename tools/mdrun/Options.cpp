//===- Options.cpp - mdrun's command line ---------------------------------===//

#include "tools/mdrun/Options.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace md::mdrun {

const char *const kUsage =
    "usage: mdrun [--gpus N | --ranks N] [options] PLAN\n"
    "       mdrun --inspect PLAN [--world-size N] [--format=text|json]\n"
    "\n"
    "Training (one process per rank, the torchrun environment contract):\n"
    "  --gpus N           run N ranks, one per GPU; without a usable GPU, on "
    "the\n"
    "                     CPU backend with a warning\n"
    "  --ranks N          run N ranks (same as --gpus N)\n"
    "  --backend B        auto (default: GPUs when usable, else the CPU), "
    "cpu,\n"
    "                     or cuda\n"
    "  --no-fallback      no usable GPU is an error instead of a CPU fallback\n"
    "  --steps N          train N steps (default: the schedule's steps)\n"
    "  --seed N           replace the recipe's seed (init and sampling)\n"
    "  --log-every N      a progress line every N steps (default 10; 0: none)\n"
    "  --metrics FILE     append one JSON line per progress report and log\n"
    "  --save-final FILE  write the trained weights (f32 safetensors) at the "
    "end\n"
    "  --timeout SECONDS  how long a collective waits for a peer (default "
    "300)\n"
    "  --threads N        BLAS threads per rank (default: cores / ranks)\n"
    "\n"
    "Several nodes (docs/multinode.md; srun and mpirun are recognised):\n"
    "  --nnodes M         nodes in the job (default 1); --gpus N is per node\n"
    "  --node-rank R      this node's index, 0 to M-1\n"
    "  --master-addr A    the host of rank 0 (MASTER_ADDR; default 127.0.0.1 "
    "on\n"
    "                     one node)\n"
    "  --master-port P    rank 0's rendezvous port (MASTER_PORT; default "
    "29500;\n"
    "                     0: a free one, printed)\n"
    "\n"
    "Inspection:\n"
    "  --inspect PLAN     load and verify PLAN and print what it does at a "
    "world size\n"
    "  --world-size N     the world size to inspect at (default: the plan's "
    "pinned\n"
    "                     world size, else 2)\n"
    "  --format FORMAT    text (default) or json\n"
    "\n"
    "  --help             print this message\n";

namespace {

absl::StatusOr<int64_t> positive(const std::string &name,
                                 const std::string &text, int64_t min) {
  int64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n < min)
    return absl::InvalidArgumentError(absl::StrCat(
        name, " ", text,
        min > 0 ? ": not a positive integer" : ": not a non-negative integer"));
  return n;
}

} // namespace

absl::StatusOr<CommandLine> ParseCommandLine(int argc, char **argv) {
  CommandLine cl;
  bool inspect = false, worker = false, help = false;
  std::vector<std::string> inspectOnly, trainOnly, positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string name = arg, value;
    bool hasValue = false;
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      name = arg.substr(0, arg.find('='));
      value = arg.substr(arg.find('=') + 1);
      hasValue = true;
    }
    auto take = [&]() -> absl::StatusOr<std::string> {
      if (hasValue)
        return value;
      if (i + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      return std::string(argv[++i]);
    };
#define MD_TAKE(var)                                                           \
  absl::StatusOr<std::string> var = take();                                    \
  if (!var.ok())                                                               \
    return var.status();
    if (name == "--help" || name == "-h") {
      help = true;
    } else if (name == "--inspect") {
      MD_TAKE(path);
      inspect = true;
      cl.inspect.planPath = *path;
    } else if (name == "--world-size") {
      MD_TAKE(text);
      absl::StatusOr<int64_t> n = positive(name, *text, 1);
      if (!n.ok())
        return n.status();
      cl.inspect.worldSize = *n;
      inspectOnly.push_back(arg);
    } else if (name == "--format") {
      MD_TAKE(format);
      if (*format == "text")
        cl.inspect.format = InspectFormat::Text;
      else if (*format == "json")
        cl.inspect.format = InspectFormat::Json;
      else
        return absl::InvalidArgumentError(
            absl::StrCat("--format ", *format, ": expected text or json"));
      inspectOnly.push_back(arg);
    } else if (name == "--worker") {
      worker = true;
    } else if (name == "--gpus" || name == "--ranks") {
      MD_TAKE(text);
      absl::StatusOr<int64_t> n = positive(name, *text, 1);
      if (!n.ok())
        return n.status();
      if (cl.train.ranks != 0 && cl.train.ranks != *n)
        return absl::InvalidArgumentError(
            absl::StrCat(name, " ", *n, " contradicts the ", cl.train.ranks,
                         " ranks asked for before"));
      cl.train.ranks = *n;
      trainOnly.push_back(arg);
    } else if (name == "--backend") {
      MD_TAKE(b);
      if (*b == "auto")
        cl.train.backend = BackendChoice::Auto;
      else if (*b == "cpu")
        cl.train.backend = BackendChoice::Cpu;
      else if (*b == "cuda")
        cl.train.backend = BackendChoice::Cuda;
      else
        return absl::InvalidArgumentError(
            absl::StrCat("--backend ", *b, ": expected auto, cpu or cuda"));
      trainOnly.push_back(arg);
    } else if (name == "--no-fallback") {
      cl.train.noFallback = true;
      trainOnly.push_back(arg);
    } else if (name == "--nnodes" || name == "--node-rank") {
      MD_TAKE(text);
      absl::StatusOr<int64_t> n =
          positive(name, *text, name == "--nnodes" ? 1 : 0);
      if (!n.ok())
        return n.status();
      if (*n > 65536)
        return absl::InvalidArgumentError(
            absl::StrCat(name, " ", *n, ": more than 65536 nodes"));
      (name == "--nnodes" ? cl.train.nnodes : cl.train.nodeRank) = *n;
      trainOnly.push_back(arg);
    } else if (name == "--master-addr") {
      MD_TAKE(addr);
      if (addr->empty())
        return absl::InvalidArgumentError("--master-addr needs a host");
      cl.train.masterAddr = *addr;
      trainOnly.push_back(arg);
    } else if (name == "--steps" || name == "--log-every" ||
               name == "--threads" || name == "--master-port") {
      MD_TAKE(text);
      absl::StatusOr<int64_t> n = positive(name, *text, 0);
      if (!n.ok())
        return n.status();
      if (name == "--steps")
        cl.train.steps = *n;
      else if (name == "--log-every")
        cl.train.logEvery = *n;
      else if (name == "--threads")
        cl.train.threads = *n;
      else if (*n > 65535)
        return absl::InvalidArgumentError(
            absl::StrCat("--master-port ", *n, ": not a port (0 to 65535)"));
      else
        cl.train.masterPort = *n;
      trainOnly.push_back(arg);
    } else if (name == "--seed") {
      MD_TAKE(text);
      int64_t n = 0;
      if (!absl::SimpleAtoi(*text, &n) || n < 0)
        return absl::InvalidArgumentError(
            absl::StrCat("--seed ", *text, ": not a non-negative integer"));
      cl.train.seed = n;
      trainOnly.push_back(arg);
    } else if (name == "--timeout") {
      MD_TAKE(text);
      double t = 0;
      if (!absl::SimpleAtod(*text, &t) || !(t > 0) || t > 1e6)
        return absl::InvalidArgumentError(absl::StrCat(
            "--timeout ", *text, ": not a positive number of seconds"));
      cl.train.timeoutSeconds = t;
      trainOnly.push_back(arg);
    } else if (name == "--metrics" || name == "--save-final") {
      MD_TAKE(path);
      if (path->empty())
        return absl::InvalidArgumentError(
            absl::StrCat(name, " needs a file name"));
      (name == "--metrics" ? cl.train.metricsPath : cl.train.saveFinalPath) =
          *path;
      trainOnly.push_back(arg);
    } else if (arg.rfind("-", 0) == 0 && arg != "-") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option '", arg, "'"));
    } else {
      positional.push_back(arg);
    }
#undef MD_TAKE
  }
  if (help) {
    cl.mode = CommandLine::Mode::Help;
    return cl;
  }
  if (inspect) {
    if (!trainOnly.empty() || !positional.empty() || worker)
      return absl::InvalidArgumentError(
          absl::StrCat("--inspect takes no other arguments, got '",
                       !trainOnly.empty() ? trainOnly.front()
                       : worker           ? std::string("--worker")
                                          : positional.front(),
                       "'"));
    cl.mode = CommandLine::Mode::Inspect;
    return cl;
  }
  if (!inspectOnly.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(inspectOnly.front(), " only goes with --inspect"));
  if (positional.empty())
    return absl::InvalidArgumentError("no plan file given");
  if (positional.size() > 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "one plan file, got '", positional[0], "' and '", positional[1], "'"));
  cl.train.planPath = positional[0];
  cl.mode = worker ? CommandLine::Mode::Worker : CommandLine::Mode::Launch;
  return cl;
}

} // namespace md::mdrun
