//===- Trace.h - mdrun --trace: the ranks' timelines in a file -*- C++ -*-===//
//
// Each rank records its timeline (runtime/core/TraceRecorder.h) and writes
// it, when its run ends however it ends, as a fragment next to FILE; the
// launcher joins its ranks' fragments into FILE, one Chrome trace-event
// JSON object with a process per rank, and removes them. A rank started
// without the launcher (srun, mpirun) joins its own fragment into
// FILE.rank<R>.json. docs/runtime.md ("A trace") shows how to open it.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_MDRUN_TRACE_H
#define MD_TOOLS_MDRUN_TRACE_H

#include <signal.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "runtime/core/TraceRecorder.h"

namespace md::mdrun {

/// Creates the folders above `file` and checks that a file can be written
/// there, so that a bad path fails before training rather than after it.
absl::Status PrepareTrace(const std::string &file);

/// Where rank `rank` writes its fragment of trace `file`.
std::string TracePartPath(const std::string &file, int rank);

/// Joins the fragments of trace `file` that `ranks` wrote into `out`
/// (written whole, then renamed over it) and removes them. A rank without
/// a fragment (killed before it could write one) is left out and listed in
/// `missing`.
absl::Status JoinTrace(const std::string &file, const std::vector<int> &ranks,
                       const std::string &out, std::vector<int> &missing);

/// While it lives, SIGTERM (the launcher stopping the job) first writes the
/// rank's fragment, then ends the rank as SIGTERM does: the timeline up to
/// a failure elsewhere is the one worth having. The handler only wakes a
/// thread of this object's (through a pipe); that thread writes.
class TraceOnTerm {
public:
  TraceOnTerm(const runtime::TraceRecorder &trace, std::string path, int rank);
  ~TraceOnTerm();
  TraceOnTerm(const TraceOnTerm &) = delete;
  TraceOnTerm &operator=(const TraceOnTerm &) = delete;

private:
  const runtime::TraceRecorder &trace_;
  std::string path_;
  int rank_;
  struct sigaction previous_ {};
  std::thread writer_;
};

} // namespace md::mdrun

#endif // MD_TOOLS_MDRUN_TRACE_H
