//===- mdrun.cpp - the md runtime driver ----------------------------------===//
//
// For now mdrun only inspects plans:
//
//   mdrun --inspect PLAN [--world-size N] [--format=text|json]
//
// Training (mdrun --gpus N PLAN, ...) lands with the CPU runtime; any other
// use says so. Options take their value after `=` or a space. Exit status:
// 0 success, 1 a bad plan file or a world size it cannot run at (one error
// line on stderr), 2 a bad command line or something not implemented yet.
//
//===----------------------------------------------------------------------===//

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tools/mdrun/Inspect.h"

namespace {

enum ExitCode { kSuccess = 0, kUserError = 1, kUsageError = 2 };

constexpr const char *kUsage =
    "usage: mdrun --inspect PLAN [--world-size N] [--format=text|json]\n"
    "\n"
    "  --inspect PLAN    load and verify PLAN and print what it does at a "
    "world size\n"
    "  --world-size N    the world size to inspect at (default: the plan's "
    "pinned\n"
    "                    world size, else 2)\n"
    "  --format FORMAT   text (default) or json\n"
    "  --help            print this message\n"
    "\n"
    "Training (mdrun --gpus N PLAN) is not implemented yet.\n";

struct Args {
  bool help = false;
  bool inspect = false;
  md::mdrun::InspectOptions options;
  std::vector<std::string> rest; // everything that belongs to training
};

absl::StatusOr<Args> parseArgs(int argc, char **argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string name = arg, value;
    bool hasValue = false;
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      name = arg.substr(0, arg.find('='));
      value = arg.substr(arg.find('=') + 1);
      hasValue = true;
    }
    auto takeValue = [&]() -> absl::StatusOr<std::string> {
      if (hasValue)
        return value;
      if (i + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      return std::string(argv[++i]);
    };
    if (name == "--help" || name == "-h") {
      args.help = true;
    } else if (name == "--inspect") {
      absl::StatusOr<std::string> path = takeValue();
      if (!path.ok())
        return path.status();
      args.inspect = true;
      args.options.planPath = *path;
    } else if (name == "--world-size") {
      absl::StatusOr<std::string> text = takeValue();
      if (!text.ok())
        return text.status();
      int64_t n = 0;
      if (!absl::SimpleAtoi(*text, &n) || n < 1)
        return absl::InvalidArgumentError(
            absl::StrCat("--world-size ", *text, ": not a positive integer"));
      args.options.worldSize = n;
    } else if (name == "--format") {
      absl::StatusOr<std::string> format = takeValue();
      if (!format.ok())
        return format.status();
      if (*format == "text")
        args.options.format = md::mdrun::InspectFormat::Text;
      else if (*format == "json")
        args.options.format = md::mdrun::InspectFormat::Json;
      else
        return absl::InvalidArgumentError(
            absl::StrCat("--format ", *format, ": expected text or json"));
    } else {
      args.rest.push_back(arg);
    }
  }
  return args;
}

} // namespace

int main(int argc, char **argv) {
  absl::StatusOr<Args> args = parseArgs(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "mdrun: error: %s\n%s",
                 std::string(args.status().message()).c_str(), kUsage);
    return kUsageError;
  }
  if (args->help) {
    std::fputs(kUsage, stdout);
    return kSuccess;
  }
  if (!args->inspect) {
    std::fprintf(
        stderr,
        "mdrun: error: not implemented yet: training lands with the CPU "
        "runtime; only 'mdrun --inspect PLAN' works so far\n");
    return kUsageError;
  }
  if (!args->rest.empty()) {
    std::fprintf(
        stderr,
        "mdrun: error: --inspect takes no other arguments, got '%s'\n%s",
        args->rest.front().c_str(), kUsage);
    return kUsageError;
  }
  std::string report;
  absl::Status status = md::mdrun::Inspect(args->options, report);
  if (!status.ok()) {
    std::fprintf(stderr, "mdrun: error: %s\n",
                 std::string(status.message()).c_str());
    return kUserError;
  }
  std::fputs(report.c_str(), stdout);
  return kSuccess;
}
