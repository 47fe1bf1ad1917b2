//===- Outputs.h - the paths a run will write, checked at launch -*- C++ -*-===//
//
// A run writes --save-final after its last step, --metrics and --trace as
// it goes, and the plan's checkpoints at its saves: a path it cannot write
// found then loses the run. The launcher checks every one before a rank
// starts (like the memory and data checks), creating a missing parent
// directory of a file and saying so in one line, so that nothing is
// created silently either.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_MDRUN_OUTPUTS_H
#define MD_TOOLS_MDRUN_OUTPUTS_H

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/mdrun/Options.h"

namespace md::mdrun {

/// A path the run will write, and what names it in messages ("--metrics",
/// "the plan's checkpoint directory").
struct OutputPath {
  enum class Kind {
    File,        // written in place (appended to, or truncated)
    ReplacedFile, // written to a temporary beside it, renamed over it
    Directory,   // created by the run when missing, files written inside
  } kind = Kind::File;
  std::string path;
  std::string what;
};

/// The paths the run of `options` will write: on the node of rank 0
/// (`rank0Here`) --save-final and --metrics; on every node --trace and,
/// unless it only evaluates, the directories of the plan's saves.
absl::StatusOr<std::vector<OutputPath>>
RunOutputs(const TrainOptions &options, bool rank0Here);

/// Checks that every output can be written: a file's path is not a
/// directory, its parent is one (a missing parent is created, said on
/// stderr once: "mdrun: created directory D for --metrics FILE"), a file
/// can be created there and an existing file written in place is
/// writable; a directory, or its nearest existing ancestor when it is
/// missing (the save creates it), is a directory a file can be created in.
/// The first that cannot is an InvalidArgument naming it and why.
absl::Status CheckOutputs(const std::vector<OutputPath> &outputs);

/// Creates the missing parent directories of the file `path`, saying so on
/// stderr in one line naming `what`; nothing when they exist.
absl::Status MakeParentDirectories(const std::string &path,
                                   const std::string &what);

} // namespace md::mdrun

#endif // MD_TOOLS_MDRUN_OUTPUTS_H
