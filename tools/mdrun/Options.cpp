//===- Options.cpp - mdrun's command line ---------------------------------===//
//
// mdrun's options as Abseil flags (a type, a default from the option
// structs, the usage's line), their spellings and groups for tools/cli, and
// the rules across options that no single flag can check: --inspect goes
// alone, --gpus and --ranks agree, a plan file is given once.
//
//===----------------------------------------------------------------------===//

#include "tools/mdrun/Options.h"

#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/core/EnumNames.h"
#include "runtime/core/Status.h"
#include "runtime/rank/Builtin.h"
#include "runtime/rank/Choice.h"
#include "tools/cli/CommandLine.h"

namespace md::mdrun {

namespace {

// The spellings of mdrun's enum-valued options, in value order.
constexpr const char *kInspectFormatNames[] = {"text", "json"};
static_assert(runtime::namesEveryValue(kInspectFormatNames,
                                       InspectFormat::Json));
constexpr const char *kBackendChoiceNames[] = {"auto", "cpu", "cuda"};
static_assert(runtime::namesEveryValue(kBackendChoiceNames,
                                       BackendChoice::Cuda));
constexpr const char *kOnOffNames[] = {"off", "on"};
static_assert(runtime::namesEveryValue(kOnOffNames, OnOff::On));

/// "auto, cpu or cuda".
template <typename Names> std::string orList(const Names &names) {
  std::string out;
  size_t i = 0;
  for (const auto &name : names) {
    absl::StrAppend(&out,
                    i == 0                      ? ""
                    : i + 1 == std::size(names) ? " or "
                                                : ", ",
                    name);
    ++i;
  }
  return out;
}

/// An enum-valued flag: one of `names`, else "expected auto, cpu or cuda".
template <typename E, size_t N>
bool parseNamed(const char *const (&names)[N], absl::string_view text, E *out,
                std::string *error) {
  if (std::optional<E> value = runtime::enumFromName<E>(
          names, std::string_view(text.data(), text.size()))) {
    *out = *value;
    return true;
  }
  *error = absl::StrCat("expected ", orList(names));
  return false;
}

/// --comm's spellings: auto, then the comms the runtime's registry lets
/// the user name, in its order (shm, gloo).
std::vector<std::string> commNames() {
  std::vector<std::string> names = rank::BuiltinRegistry().nameableComms();
  names.insert(names.begin(), "auto");
  return names;
}

/// --comm's usage line, from the registry: "the CPU backend's comm: auto
/// (default: shm on one node, gloo across nodes), shm, or gloo".
std::string commHelp() {
  const rank::Registry &registry = rank::BuiltinRegistry();
  const rank::BackendInfo *host = registry.hostBackend();
  if (host == nullptr)
    return "the comm: auto";
  const rank::CommInfo *one =
      rank::AutomaticComm(registry, host->name, rank::JobShape{1, 1}, 0);
  const rank::CommInfo *across =
      rank::AutomaticComm(registry, host->name, rank::JobShape{1, 2}, 0);
  std::string help = absl::StrCat("the ", host->title, " backend's comm: auto");
  if (one != nullptr && across != nullptr)
    absl::StrAppend(&help, " (default: ", one->name, " on one node, ",
                    across->name, " across nodes)");
  const std::vector<std::string> names = registry.nameableComms();
  for (size_t i = 0; i < names.size(); ++i)
    absl::StrAppend(&help, i + 1 == names.size() ? ", or " : ", ", names[i]);
  return help;
}

} // namespace

const char *BackendChoiceName(BackendChoice backend) {
  return runtime::enumName(kBackendChoiceNames, backend);
}

// How the flags below parse mdrun's own types (found by argument-dependent
// lookup, so they live in the types' namespace).
bool AbslParseFlag(absl::string_view text, InspectFormat *out,
                   std::string *error) {
  return parseNamed(kInspectFormatNames, text, out, error);
}
std::string AbslUnparseFlag(InspectFormat f) {
  return runtime::enumName(kInspectFormatNames, f);
}

bool AbslParseFlag(absl::string_view text, BackendChoice *out,
                   std::string *error) {
  return parseNamed(kBackendChoiceNames, text, out, error);
}
std::string AbslUnparseFlag(BackendChoice b) {
  return runtime::enumName(kBackendChoiceNames, b);
}

/// --comm's type: auto or a nameable comm of the registry.
struct CommName {
  std::string name = "auto";
};
bool AbslParseFlag(absl::string_view text, CommName *out, std::string *error) {
  const std::vector<std::string> names = commNames();
  for (const std::string &name : names)
    if (text == name) {
      out->name = name;
      return true;
    }
  *error = absl::StrCat("expected ", orList(names));
  return false;
}
std::string AbslUnparseFlag(const CommName &c) { return c.name; }

bool AbslParseFlag(absl::string_view text, OnOff *out, std::string *error) {
  return parseNamed(kOnOffNames, text, out, error);
}
std::string AbslUnparseFlag(OnOff o) {
  return runtime::enumName(kOnOffNames, o);
}

/// --timeout's type: a positive number of seconds, at most 10^6 (the
/// comms turn it into milliseconds).
struct Seconds {
  double value = 0;
};
bool AbslParseFlag(absl::string_view text, Seconds *out, std::string *error) {
  double t = 0;
  if (!absl::SimpleAtod(text, &t) || !(t > 0) || t > 1e6) {
    *error = "not a positive number of seconds";
    return false;
  }
  out->value = t;
  return true;
}
std::string AbslUnparseFlag(Seconds s) { return absl::StrCat(s.value); }

/// --nproc-per-node's type: a positive count, or torchrun's `auto`.
struct ProcCount {
  int64_t value = 0; // 0: auto
};
bool AbslParseFlag(absl::string_view text, ProcCount *out,
                   std::string *error) {
  if (text == "auto") {
    out->value = 0;
    return true;
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n < 1) {
    *error = "not a positive integer or auto";
    return false;
  }
  out->value = n;
  return true;
}
std::string AbslUnparseFlag(ProcCount c) {
  return c.value == 0 ? "auto" : absl::StrCat(c.value);
}

} // namespace md::mdrun

// mdrun's options; the help strings are the usage's lines, the defaults the
// option structs'. absl::nullopt is "not given", where the structs have a
// sentinel (steps -1: the plan's) or a default that depends on the job.
namespace {
const md::mdrun::TrainOptions kTrainDefaults;
const md::mdrun::InspectOptions kInspectDefaults;
} // namespace

ABSL_FLAG(std::string, inspect, kInspectDefaults.planPath,
          "load and verify PLAN and print what it does at a world size");
ABSL_FLAG(absl::optional<md::cli::PositiveCount>, world_size, absl::nullopt,
          "the world size to inspect at (default: the plan's pinned world "
          "size, else 2)");
ABSL_FLAG(md::mdrun::InspectFormat, format, kInspectDefaults.format,
          "text (default) or json");
ABSL_FLAG(bool, worker, false,
          "run one rank of the job the launcher started (the launcher adds "
          "it to its own command line)");
ABSL_FLAG(absl::optional<md::cli::PositiveCount>, gpus, absl::nullopt,
          "run N ranks, one per GPU; without a usable GPU, on the CPU backend "
          "with a warning");
ABSL_FLAG(absl::optional<md::cli::PositiveCount>, ranks, absl::nullopt,
          "run N ranks (same as --gpus N)");
ABSL_FLAG(absl::optional<md::mdrun::ProcCount>, nproc_per_node, absl::nullopt,
          "torchrun's spelling of --gpus N; auto: one rank per usable GPU, "
          "else one per core");
ABSL_FLAG(md::mdrun::BackendChoice, backend, kTrainDefaults.backend,
          "auto (default: GPUs when usable, else the CPU), cpu, or cuda");
// Its usage line is the registry's (commHelp).
ABSL_FLAG(md::mdrun::CommName, comm, md::mdrun::CommName{kTrainDefaults.comm},
          "the comm");
ABSL_FLAG(bool, no_fallback, kTrainDefaults.noFallback,
          "no usable GPU is an error instead of a CPU fallback");
ABSL_FLAG(bool, skip_memory_check, kTrainDefaults.skipMemoryCheck,
          "start the ranks even when the plan's predicted peak memory times "
          "the ranks on this node exceeds the memory available (CPU backend)");
ABSL_FLAG(bool, skip_data_check, kTrainDefaults.skipDataCheck,
          "start the ranks without checking the data first (a token file's "
          "width and ids against the vocabulary)");
ABSL_FLAG(absl::optional<md::cli::Count>, steps, absl::nullopt,
          "train N steps (default: the schedule's steps)");
ABSL_FLAG(absl::optional<md::cli::Count>, seed, absl::nullopt,
          "replace the recipe's seed (init and sampling)");
ABSL_FLAG(md::cli::Count, log_every, md::cli::Count{kTrainDefaults.logEvery},
          "a progress line every N steps (default 10; 0: none)");
ABSL_FLAG(std::string, metrics, kTrainDefaults.metricsPath,
          "write one JSON line per step (--metrics-every) and evaluation");
ABSL_FLAG(md::cli::Count, metrics_every,
          md::cli::Count{kTrainDefaults.metricsEvery},
          "a metrics record every N steps (default 1; 0: with the progress "
          "lines)");
ABSL_FLAG(std::string, save_final, kTrainDefaults.saveFinalPath,
          "write the trained weights (f32 safetensors) at the end");
// Checkpoints (docs/runtime.md, "Resuming").
ABSL_FLAG(std::string, resume, kTrainDefaults.resumePath,
          "resume from sharded checkpoint DIR, or auto: the newest complete "
          "one the plan saved (none: start fresh)");
ABSL_FLAG(bool, evaluate, kTrainDefaults.evaluate,
          "run the recipe's evaluate(...)s once on the weights (--init, "
          "--resume) instead of training, and print their losses");
ABSL_FLAG(std::string, init, kTrainDefaults.initPath,
          "start from the weights in FILE (safetensors, by parameter name; "
          "a fresh optimizer)");
ABSL_FLAG(std::string, init_map, kTrainDefaults.initMapPath,
          "with --init: read FILE's tensor names through the name map MAP "
          "(e.g. models/gpt.nanogpt.map)");
ABSL_FLAG(bool, init_missing, kTrainDefaults.initMissing,
          "with --init: a parameter FILE lacks keeps its declared "
          "initialiser instead of failing the run (PyTorch's strict = False; "
          "the banner names them)");
ABSL_FLAG(md::mdrun::Seconds, timeout,
          md::mdrun::Seconds{kTrainDefaults.timeoutSeconds},
          "how long a collective waits for a peer (default 300)");
ABSL_FLAG(md::cli::Count, flight_recorder,
          md::cli::Count{kTrainDefaults.flightRecorder},
          "collectives each rank's flight recorder keeps, for the analysis "
          "of a failed or stalled job (default 2048; 0: off)");
ABSL_FLAG(md::cli::Count, max_restarts,
          md::cli::Count{kTrainDefaults.maxRestarts},
          "when a rank dies or the job stalls, start it again from the "
          "newest checkpoint (--resume auto), up to N times (one node)");
ABSL_FLAG(std::string, trace, kTrainDefaults.tracePath,
          "write every rank's timeline (instructions, collectives, steps) to "
          "FILE as Chrome trace-event JSON");
ABSL_FLAG(md::cli::Count, threads, md::cli::Count{kTrainDefaults.threads},
          "BLAS threads per rank (default: cores / ranks)");
ABSL_FLAG(md::mdrun::OnOff, comm_thread,
          kTrainDefaults.commThread ? md::mdrun::OnOff::On
                                    : md::mdrun::OnOff::Off,
          "on (default) or off: the CPU backend's collectives on a thread "
          "of their own, overlapping compute");
ABSL_FLAG(absl::optional<md::cli::PositiveCount>, nnodes, absl::nullopt,
          "nodes in the job (default 1); --gpus N is per node");
ABSL_FLAG(absl::optional<md::cli::Count>, node_rank, absl::nullopt,
          "this node's index, 0 to M-1");
ABSL_FLAG(std::string, master_addr, kTrainDefaults.masterAddr,
          "the host of rank 0 (MASTER_ADDR; default 127.0.0.1 on one node)");
ABSL_FLAG(absl::optional<md::cli::Count>, master_port, absl::nullopt,
          "rank 0's rendezvous port (MASTER_PORT; default 29500; 0: a free "
          "one, printed)");
ABSL_FLAG(bool, standalone, false,
          "torchrun's: a job of this node alone, its rendezvous on a free "
          "port (--nnodes 1 --master-port 0)");
ABSL_FLAG(std::string, rdzv_endpoint, "",
          "torchrun's HOST[:PORT]: --master-addr HOST --master-port PORT");

namespace md::mdrun {

namespace {

/// What an option goes with, for the rules across them.
enum Tag { kHelp, kInspect, kInspectOnly, kTrain, kRanks, kWorker };

/// HOST[:PORT] of --rdzv-endpoint ("[::1]:29500" for IPv6).
absl::Status readEndpoint(const std::string &text, std::string *host,
                          int64_t *port) {
  std::string h = text, p;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos ||
        (close + 1 < text.size() && text[close + 1] != ':'))
      return absl::InvalidArgumentError(absl::StrCat(
          "--rdzv-endpoint ", text, ": expected HOST[:PORT] or [IPV6][:PORT]"));
    h = text.substr(1, close - 1);
    if (close + 1 < text.size())
      p = text.substr(close + 2);
  } else if (size_t colon = text.rfind(':'); colon != std::string::npos) {
    if (text.find(':') != colon)
      return absl::InvalidArgumentError(absl::StrCat(
          "--rdzv-endpoint ", text,
          ": an IPv6 address goes in brackets, [IPV6]:PORT"));
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
  }
  if (h.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("--rdzv-endpoint ", text, ": no host"));
  *host = h;
  if (!p.empty()) {
    int64_t n = -1;
    if (!absl::SimpleAtoi(p, &n) || n < 0 || n > 65535)
      return absl::InvalidArgumentError(absl::StrCat(
          "--rdzv-endpoint ", text, ": '", p, "' is not a port (0 to 65535)"));
    *port = n;
  }
  return absl::OkStatus();
}

std::string atMostNodes(int64_t n) {
  return n > 65536 ? "more than 65536 nodes" : "";
}

/// The value of an optional count flag, or `otherwise` when not given.
template <typename Count>
int64_t valueOr(const absl::optional<Count> &flag, int64_t otherwise) {
  return flag.has_value() ? flag->value : otherwise;
}

const std::vector<cli::Section> &sections() {
  using cli::FlagOption;
  static const std::vector<cli::Section> sections = [] {
    std::vector<cli::Section> s(4);
    s[0].heading =
        "Training (one process per rank, the torchrun environment contract):";
    s[0].options = {
        FlagOption(FLAGS_gpus, {"--gpus"}, "N").withTag(kRanks),
        FlagOption(FLAGS_ranks, {"--ranks"}, "N").withTag(kRanks),
        FlagOption(FLAGS_nproc_per_node, {"--nproc-per-node"}, "N|auto")
            .withTag(kRanks),
        FlagOption(FLAGS_backend, {"--backend"}, "B").withTag(kTrain),
        FlagOption(FLAGS_comm, {"--comm"}, "C").withTag(kTrain),
        FlagOption(FLAGS_no_fallback, {"--no-fallback"}, "").withTag(kTrain),
        FlagOption(FLAGS_skip_memory_check, {"--skip-memory-check"}, "")
            .withTag(kTrain),
        FlagOption(FLAGS_skip_data_check, {"--skip-data-check"}, "")
            .withTag(kTrain),
        FlagOption(FLAGS_steps, {"--steps"}, "N").withTag(kTrain),
        FlagOption(FLAGS_seed, {"--seed"}, "N").withTag(kTrain),
        FlagOption(FLAGS_log_every, {"--log-every"}, "N").withTag(kTrain),
        FlagOption(FLAGS_metrics, {"--metrics"}, "FILE")
            .needsNonEmpty("a file name")
            .withTag(kTrain),
        FlagOption(FLAGS_metrics_every, {"--metrics-every"}, "N")
            .withTag(kTrain),
        FlagOption(FLAGS_save_final, {"--save-final"}, "FILE")
            .needsNonEmpty("a file name")
            .withTag(kTrain),
        FlagOption(FLAGS_resume, {"--resume"}, "DIR|auto")
            .needsNonEmpty("a checkpoint directory or auto")
            .withTag(kTrain),
        FlagOption(FLAGS_init, {"--init"}, "FILE")
            .needsNonEmpty("a file name")
            .withTag(kTrain),
        FlagOption(FLAGS_init_map, {"--init-map"}, "MAP")
            .needsNonEmpty("a name map file")
            .withTag(kTrain),
        FlagOption(FLAGS_init_missing, {"--init-missing"}, "")
            .withTag(kTrain),
        FlagOption(FLAGS_evaluate, {"--evaluate"}, "").withTag(kTrain),
        FlagOption(FLAGS_timeout, {"--timeout"}, "SECONDS").withTag(kTrain),
        FlagOption(FLAGS_threads, {"--threads"}, "N").withTag(kTrain),
        FlagOption(FLAGS_comm_thread, {"--comm-thread"}, "on|off")
            .withTag(kTrain),
        FlagOption(FLAGS_flight_recorder, {"--flight-recorder"}, "N",
                   [](const cli::Count &n) -> std::string {
                     return n.value > (int64_t(1) << 20)
                                ? "more than 1048576 collectives"
                                : "";
                   })
            .withTag(kTrain),
        FlagOption(FLAGS_max_restarts, {"--max-restarts"}, "N").withTag(kTrain),
        FlagOption(FLAGS_trace, {"--trace"}, "FILE")
            .needsNonEmpty("a file name")
            .withTag(kTrain),
        FlagOption(FLAGS_worker, {"--worker"}, "").withTag(kWorker).hide(),
    };
    for (cli::Option &o : s[0].options)
      if (o.names.front() == "--comm")
        o.help = commHelp();
    s[1].heading =
        "Several nodes (docs/multinode.md; srun, mpirun, torchrun recognised):";
    s[1].options = {
        FlagOption(
            FLAGS_nnodes, {"--nnodes"}, "M",
            [](const cli::PositiveCount &n) { return atMostNodes(n.value); })
            .withTag(kTrain),
        FlagOption(FLAGS_node_rank, {"--node-rank"}, "R",
                   [](const cli::Count &n) { return atMostNodes(n.value); })
            .withTag(kTrain),
        FlagOption(FLAGS_master_addr, {"--master-addr"}, "A")
            .needsNonEmpty("a host")
            .withTag(kTrain),
        FlagOption(FLAGS_master_port, {"--master-port"}, "P",
                   [](const cli::Count &n) -> std::string {
                     return n.value > 65535 ? "not a port (0 to 65535)" : "";
                   })
            .withTag(kTrain),
        FlagOption(FLAGS_standalone, {"--standalone"}, "").withTag(kTrain),
        FlagOption(FLAGS_rdzv_endpoint, {"--rdzv-endpoint"}, "HOST[:PORT]")
            .needsNonEmpty("a host")
            .withTag(kTrain),
    };
    s[2].heading = "Inspection:";
    s[2].options = {
        FlagOption(FLAGS_inspect, {"--inspect"}, "PLAN").withTag(kInspect),
        FlagOption(FLAGS_world_size, {"--world-size"}, "N")
            .withTag(kInspectOnly),
        FlagOption(FLAGS_format, {"--format"}, "FORMAT").withTag(kInspectOnly),
    };
    s[3].options = {cli::HelpOption().withTag(kHelp)};
    return s;
  }();
  return sections;
}

} // namespace

std::string Usage() {
  return cli::Usage(
      "usage: mdrun [--gpus N | --ranks N] [options] PLAN\n"
      "       mdrun --inspect PLAN [--world-size N] [--format=text|json]\n",
      sections(),
      "Examples:\n"
      "  mdrun --gpus 2 plan.fb\n"
      "  mdrun --backend cpu --ranks 2 --steps 500 --log-every 50 \\\n"
      "      --metrics run/metrics.jsonl --save-final run/final.safetensors "
      "plan.fb\n"
      "  mdrun --nnodes 2 --node-rank 0 --master-addr node0 --gpus 8 plan.fb\n"
      "  mdrun --inspect plan.fb --world-size 4 --format json\n",
      21);
}

absl::StatusOr<CommandLine> ParseCommandLine(int argc, char **argv) {
  absl::StatusOr<cli::Parsed> parsedOr = cli::Parse(sections(), argc, argv);
  if (!parsedOr.ok())
    return parsedOr.status();
  const cli::Parsed &parsed = *parsedOr;
  CommandLine cl;
  bool inspect = false, worker = false;
  std::vector<std::string> inspectOnly, trainOnly;
  for (const cli::Given &g : parsed.given) {
    switch (static_cast<Tag>(g.option->tag)) {
    case kRanks: {
      // --gpus, --ranks and --nproc-per-node are one count; two different
      // ones contradict.
      int64_t n = 0;
      const bool isAuto = g.value == "auto";
      (void)absl::SimpleAtoi(g.value, &n); // the flag's parser accepted it
      if ((cl.train.ranks != 0 && cl.train.ranks != n) ||
          (cl.train.ranksAuto && !isAuto) ||
          (isAuto && cl.train.ranks != 0))
        return absl::InvalidArgumentError(absl::StrCat(
            g.name, " ", g.value, " contradicts the ",
            cl.train.ranksAuto ? std::string("auto")
                               : absl::StrCat(cl.train.ranks),
            " ranks asked for before"));
      cl.train.ranks = n;
      cl.train.ranksAuto = isAuto;
      trainOnly.push_back(g.arg);
      break;
    }
    case kTrain:
      trainOnly.push_back(g.arg);
      break;
    case kInspect:
      inspect = true;
      break;
    case kInspectOnly:
      inspectOnly.push_back(g.arg);
      break;
    case kWorker:
      worker = absl::GetFlag(FLAGS_worker);
      break;
    case kHelp:
      break;
    }
  }
  if (parsed.help) {
    cl.mode = CommandLine::Mode::Help;
    return cl;
  }
  const std::vector<std::string> &positional = parsed.positional;
  if (inspect) {
    if (!trainOnly.empty() || !positional.empty() || worker)
      return absl::InvalidArgumentError(
          absl::StrCat("--inspect takes no other arguments, got '",
                       !trainOnly.empty() ? trainOnly.front()
                       : worker           ? std::string("--worker")
                                          : positional.front(),
                       "'"));
    cl.inspect.planPath = absl::GetFlag(FLAGS_inspect);
    cl.inspect.worldSize =
        valueOr(absl::GetFlag(FLAGS_world_size), cl.inspect.worldSize);
    cl.inspect.format = absl::GetFlag(FLAGS_format);
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
  TrainOptions &t = cl.train;
  t.planPath = positional[0];
  t.backend = absl::GetFlag(FLAGS_backend);
  t.comm = absl::GetFlag(FLAGS_comm).name;
  t.noFallback = absl::GetFlag(FLAGS_no_fallback);
  t.skipMemoryCheck = absl::GetFlag(FLAGS_skip_memory_check);
  t.skipDataCheck = absl::GetFlag(FLAGS_skip_data_check);
  t.steps = valueOr(absl::GetFlag(FLAGS_steps), t.steps);
  if (absl::optional<cli::Count> seed = absl::GetFlag(FLAGS_seed))
    t.seed = seed->value;
  t.metricsPath = absl::GetFlag(FLAGS_metrics);
  t.saveFinalPath = absl::GetFlag(FLAGS_save_final);
  t.resumePath = absl::GetFlag(FLAGS_resume);
  t.initPath = absl::GetFlag(FLAGS_init);
  t.initMapPath = absl::GetFlag(FLAGS_init_map);
  if (!t.initMapPath.empty() && t.initPath.empty())
    return absl::InvalidArgumentError(
        "--init-map names the tensors of an --init file; give --init FILE");
  t.initMissing = absl::GetFlag(FLAGS_init_missing);
  if (t.initMissing && t.initPath.empty())
    return absl::InvalidArgumentError(
        "--init-missing says what to do with the parameters an --init file "
        "lacks; give --init FILE");
  t.evaluate = absl::GetFlag(FLAGS_evaluate);
  t.logEvery = absl::GetFlag(FLAGS_log_every).value;
  t.metricsEvery = absl::GetFlag(FLAGS_metrics_every).value;
  t.timeoutSeconds = absl::GetFlag(FLAGS_timeout).value;
  t.masterPort = valueOr(absl::GetFlag(FLAGS_master_port), t.masterPort);
  t.masterAddr = absl::GetFlag(FLAGS_master_addr);
  t.nnodes = valueOr(absl::GetFlag(FLAGS_nnodes), t.nnodes);
  t.nodeRank = valueOr(absl::GetFlag(FLAGS_node_rank), t.nodeRank);
  // torchrun's spellings of the rendezvous, refused where they contradict
  // md's own.
  if (const std::string endpoint = absl::GetFlag(FLAGS_rdzv_endpoint);
      !endpoint.empty()) {
    std::string host;
    int64_t port = -1;
    MD_RETURN_IF_ERROR(readEndpoint(endpoint, &host, &port));
    if (!t.masterAddr.empty() && t.masterAddr != host)
      return absl::InvalidArgumentError(
          absl::StrCat("--rdzv-endpoint ", endpoint, " contradicts --master-addr ",
                       t.masterAddr));
    if (port >= 0 && t.masterPort >= 0 && t.masterPort != port)
      return absl::InvalidArgumentError(
          absl::StrCat("--rdzv-endpoint ", endpoint, " contradicts --master-port ",
                       t.masterPort));
    t.masterAddr = host;
    if (port >= 0)
      t.masterPort = port;
  }
  if (absl::GetFlag(FLAGS_standalone)) {
    if (t.nnodes > 1 || t.nodeRank > 0)
      return absl::InvalidArgumentError(
          "--standalone is a job of this node alone: drop --nnodes and "
          "--node-rank");
    if (t.masterPort >= 0 || !t.masterAddr.empty())
      return absl::InvalidArgumentError(
          "--standalone meets on a free port of this node: drop "
          "--master-addr, --master-port and --rdzv-endpoint");
    t.nnodes = 1;
    t.masterPort = 0;
  }
  t.threads = absl::GetFlag(FLAGS_threads).value;
  t.commThread = absl::GetFlag(FLAGS_comm_thread) == OnOff::On;
  t.flightRecorder = absl::GetFlag(FLAGS_flight_recorder).value;
  t.maxRestarts = absl::GetFlag(FLAGS_max_restarts).value;
  t.tracePath = absl::GetFlag(FLAGS_trace);
  cl.mode = worker ? CommandLine::Mode::Worker : CommandLine::Mode::Launch;
  return cl;
}

} // namespace md::mdrun
