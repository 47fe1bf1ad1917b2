//===- mdrun.cpp - the md runtime driver ----------------------------------===//
//
//   mdrun [--gpus N | --ranks N] [options] PLAN      train (the launcher)
//   mdrun --inspect PLAN [--world-size N] [--format=text|json]
//
// The launcher re-executes mdrun with the hidden --worker flag once per
// rank (Launcher.h); a worker runs one rank (Worker.h). Exit status: 0
// success; 1 an error (a bad plan, a world size it cannot run at, a rank
// that failed, no GPU with --no-fallback), one `mdrun: error:` line on
// standard error; 2 a bad command line; 3 the recipe ran fail("why")
// (`mdrun: the recipe failed at step N: why`); 75 preempted (SIGTERM: the
// ranks stopped after a step and its checkpoint); 128 + the signal when
// interrupted.
// docs/cli.md has the details.
//
//===----------------------------------------------------------------------===//

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "tools/mdrun/Inspect.h"
#include "tools/mdrun/Launcher.h"
#include "tools/mdrun/Options.h"
#include "tools/mdrun/Worker.h"

namespace {

enum ExitCode { kSuccess = 0, kUserError = 1, kUsageError = 2 };

/// Passes a worker's message to the launcher through the pipe it was
/// given, if it was given one and the write succeeds.
bool toLauncher(const std::string &message) {
  int fd = -1;
  if (const char *v = std::getenv("MD_ERROR_FD"); v != nullptr)
    (void)absl::SimpleAtoi(v, &fd);
  return fd >= 0 && ::write(fd, message.data(), message.size()) ==
                        static_cast<ssize_t>(message.size());
}

/// A worker's error goes to the launcher (which prints it once, naming the
/// rank); a worker started some other way prints it itself.
int workerFailed(const absl::Status &status, int rank) {
  std::string message(status.message());
  if (!toLauncher(message))
    std::fprintf(stderr, "mdrun: error: rank %d: %s\n", rank, message.c_str());
  return kUserError;
}

} // namespace

int main(int argc, char **argv) {
  using md::mdrun::CommandLine;
  absl::StatusOr<CommandLine> cl = md::mdrun::ParseCommandLine(argc, argv);
  if (!cl.ok()) {
    // The error and one line of usage; --help has the rest.
    std::fprintf(stderr,
                 "mdrun: error: %s\nusage: mdrun [--gpus N | --ranks N] "
                 "[options] PLAN (mdrun --help lists the options)\n",
                 std::string(cl.status().message()).c_str());
    return kUsageError;
  }
  switch (cl->mode) {
  case CommandLine::Mode::Help:
    std::fputs(md::mdrun::Usage().c_str(), stdout);
    return kSuccess;
  case CommandLine::Mode::Inspect: {
    std::string report;
    absl::Status status = md::mdrun::Inspect(cl->inspect, report);
    if (!status.ok()) {
      std::fprintf(stderr, "mdrun: error: %s\n",
                   std::string(status.message()).c_str());
      return kUserError;
    }
    std::fputs(report.c_str(), stdout);
    return kSuccess;
  }
  case CommandLine::Mode::Worker: {
    absl::StatusOr<md::mdrun::WorkerEnv> env =
        md::mdrun::WorkerEnvFromEnvironment();
    if (!env.ok())
      return workerFailed(env.status(), -1);
    absl::Status status = md::mdrun::RunWorker(cl->train, *env);
    if (md::mdrun::IsPreemption(status))
      return md::mdrun::kPreemptedExitCode; // the launcher says it once
    if (md::mdrun::IsRecipeFailure(status)) {
      // The launcher says it once, in the ranks' words.
      (void)toLauncher(std::string(status.message()));
      return md::mdrun::kRecipeFailedExitCode;
    }
    if (!status.ok())
      return workerFailed(status, env->rank);
    return kSuccess;
  }
  case CommandLine::Mode::Launch: {
    absl::Status status = md::mdrun::Launch(cl->train, argc, argv);
    if (status.ok())
      return kSuccess;
    if (md::mdrun::IsPreemption(status)) {
      std::fprintf(stderr, "mdrun: %s\n",
                   std::string(status.message()).c_str());
      return md::mdrun::kPreemptedExitCode;
    }
    if (md::mdrun::IsRecipeFailure(status)) {
      if (!status.message().empty()) // srun's ranks other than 0 are quiet
        std::fprintf(stderr, "mdrun: %s\n",
                     std::string(status.message()).c_str());
      return md::mdrun::kRecipeFailedExitCode;
    }
    if (status.code() == absl::StatusCode::kCancelled) {
      std::fprintf(stderr, "mdrun: %s\n",
                   std::string(status.message()).c_str());
      return md::mdrun::InterruptedExitCode();
    }
    std::fprintf(stderr, "mdrun: error: %s\n",
                 std::string(status.message()).c_str());
    return kUserError;
  }
  }
  return kUserError;
}
