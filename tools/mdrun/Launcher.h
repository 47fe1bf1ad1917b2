//===- Launcher.h - start, watch and stop the ranks of a job -*- C++ -*-===//
//
// `mdrun --gpus N plan.fb` is a launcher in torchrun's manner: it checks the
// plan once, decides the backend (falling back to the CPU with one warning
// line when no GPU is usable), and starts one worker process per rank by
// re-executing itself with --worker and the torchrun environment. Then it
// watches them: a rank that exits with an error or dies of a signal takes
// the job down at once (SIGTERM to the others, SIGKILL after a grace
// period) and the launcher reports which rank and why; SIGINT or SIGTERM to
// the launcher stops every rank the same way. Every wait is bounded: each
// rank's flight recorder (a ring in a memfd the launcher made) says when
// the rank last completed a collective or a step, and a job in which none
// has for --timeout seconds is stopped too. Before stopping a failed or
// stalled job the launcher prints the flight analysis (FlightAnalysis.h)
// and writes the rings as JSON. Across nodes the launchers also watch each
// other (ControlLink.h). With --max-restarts, a failed job starts again
// from its newest checkpoint; across nodes the launchers agree on each
// restart through that same connection. With --trace, it joins the ranks'
// timelines into one file at the end (Trace.h).
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_MDRUN_LAUNCHER_H
#define MD_TOOLS_MDRUN_LAUNCHER_H

#include "absl/status/status.h"
#include "tools/mdrun/Options.h"

namespace md::mdrun {

/// Runs the job `options` describes; `argv` is mdrun's own command line,
/// which the workers get too. OK when every rank succeeded; Cancelled when
/// interrupted; otherwise an error naming the first rank that failed.
absl::Status Launch(const TrainOptions &options, int argc, char **argv);

/// Exit status for a Cancelled Launch: 128 + the signal that interrupted it.
int InterruptedExitCode();

} // namespace md::mdrun

#endif // MD_TOOLS_MDRUN_LAUNCHER_H
