//===- Outputs.cpp - the paths a run will write, checked at launch --------===//
//
// Outputs.h. Writability is tested by creating (and removing) a file where
// the run will write, not by access(2), which a root user passes on any
// mode and which does not see every read-only mount.
//
//===----------------------------------------------------------------------===//

#include "tools/mdrun/Outputs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Status.h"
#include "runtime/exec/PlanAccess.h"
#include "runtime/exec/Safetensors.h"
#include "runtime/plan/Loader.h"

namespace md::mdrun {
namespace {

std::string parentOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  return path.substr(0, slash);
}

absl::Status refuse(const OutputPath &o, const std::string &why) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s %s: cannot write it: %s", o.what, o.path, why));
}

/// The nearest directory entry at or above `dir` that exists.
std::string nearestExisting(std::string dir) {
  struct stat st;
  while (::stat(dir.c_str(), &st) != 0 && dir != "." && dir != "/")
    dir = parentOf(dir);
  return dir;
}

/// Whether a file can be created in the directory `dir` (OK), else why not.
absl::Status probeDirectory(const OutputPath &o, const std::string &dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0)
    return refuse(o, absl::StrCat(dir, ": ", std::strerror(errno)));
  if (!S_ISDIR(st.st_mode))
    return refuse(o, absl::StrCat(dir, " is not a directory"));
  const std::string probe =
      absl::StrFormat("%s/.mdrun-probe-%d", dir, ::getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return refuse(o, absl::StrFormat("cannot create a file in %s: %s", dir,
                                     std::strerror(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
  return absl::OkStatus();
}

absl::Status checkFile(const OutputPath &o) {
  struct stat st;
  const bool exists = ::stat(o.path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode))
    return refuse(o, "it is a directory");
  if (exists && !S_ISREG(st.st_mode)) {
    // A device or FIFO (/dev/null) is written as it is.
    int fd = ::open(o.path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno != ENXIO) // a FIFO nobody reads yet is writable
      return refuse(o, std::strerror(errno));
    if (fd >= 0)
      ::close(fd);
    return absl::OkStatus();
  }
  const std::string parent = parentOf(o.path);
  const std::string above = nearestExisting(parent);
  struct stat pst;
  if (::stat(above.c_str(), &pst) == 0 && !S_ISDIR(pst.st_mode))
    return refuse(o, absl::StrCat(above, " is not a directory"));
  if (absl::Status made = MakeParentDirectories(o.path, o.what); !made.ok())
    return refuse(o, std::string(made.message()));
  MD_RETURN_IF_ERROR(probeDirectory(o, parent));
  if (exists && o.kind == OutputPath::Kind::File) {
    // Opened without truncating: the check changes nothing.
    int fd = ::open(o.path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0)
      return refuse(o, std::strerror(errno));
    ::close(fd);
  }
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<std::vector<OutputPath>>
RunOutputs(const TrainOptions &options, bool rank0Here) {
  std::vector<OutputPath> out;
  if (rank0Here && !options.saveFinalPath.empty() && !options.evaluate)
    out.push_back({OutputPath::Kind::ReplacedFile, options.saveFinalPath,
                   "--save-final"});
  if (rank0Here && !options.metricsPath.empty())
    out.push_back(
        {OutputPath::Kind::File, options.metricsPath, "--metrics"});
  if (!options.tracePath.empty())
    out.push_back(
        {OutputPath::Kind::ReplacedFile, options.tracePath, "--trace"});
  if (options.evaluate)
    return out;
  MD_ASSIGN_OR_RETURN(plan::LoadedPlan loaded,
                      plan::LoadPlanFile(options.planPath));
  std::set<std::string> dirs;
  for (const fb::Instruction *inst :
       runtime::plan_access::planInstructions(loaded.plan(), fb::Opcode::Save)) {
    std::string dir = inst->strings() && inst->strings()->size() > 0
                          ? inst->strings()->Get(0)->str()
                          : std::string();
    if (dir.empty())
      dir = "checkpoints";
    if (dirs.insert(dir).second)
      out.push_back({OutputPath::Kind::Directory, dir,
                     "the plan's checkpoint directory"});
  }
  return out;
}

absl::Status CheckOutputs(const std::vector<OutputPath> &outputs) {
  for (const OutputPath &o : outputs) {
    if (o.kind != OutputPath::Kind::Directory) {
      MD_RETURN_IF_ERROR(checkFile(o));
      continue;
    }
    struct stat st;
    if (::stat(o.path.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        return refuse(o, "it is not a directory");
      MD_RETURN_IF_ERROR(probeDirectory(o, o.path));
    } else {
      // The save creates it: whatever exists above must take it.
      MD_RETURN_IF_ERROR(probeDirectory(o, nearestExisting(o.path)));
    }
  }
  return absl::OkStatus();
}

absl::Status MakeParentDirectories(const std::string &path,
                                   const std::string &what) {
  const std::string parent = parentOf(path);
  struct stat st;
  if (::stat(parent.c_str(), &st) == 0)
    return absl::OkStatus();
  MD_RETURN_IF_ERROR(runtime::MakeDirectories(parent));
  absl::FPrintF(stderr, "mdrun: created directory %s for %s %s\n", parent,
                what, path);
  return absl::OkStatus();
}

} // namespace md::mdrun
