//===- FlightAnalysis.h - who stopped a failed job --------------*- C++ -*-===//
//
// When a job fails (a rank dies, exits with an error, or no rank makes
// progress), the launcher copies every rank's flight recorder ring
// (runtime/core/FlightRecorder.h), learns from the kernel how each rank
// stands (running, stopped, exited, killed), and prints one analysis:
// the lowest sequence number some rank never completed, which ranks wait
// in it and since when, and what the culprit was doing, e.g.
//
//   rank 3 was killed by signal 9 (Killed) in step 38, micro-step 2, while
//   in all_gather #388 (bf16, 4.0 KiB, shard group of 4, bucket 2,
//   mlp.mdl:17:23); ranks 0-2 wait in it since 1.2 s
//
// Every rank runs the same sequence of collectives (Executor.h), so
// sequence number n names the same call on every rank. The functions here
// are pure: they take copied rings and fates, so tests build both by hand.
// It also writes a ring as JSON (one file per rank; docs/runtime.md, "When
// a job fails", gives the schema).
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_MDRUN_FLIGHTANALYSIS_H
#define MD_TOOLS_MDRUN_FLIGHTANALYSIS_H

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/FlightRecorder.h"
#include "runtime/plan/Schema.h"

namespace md::mdrun {

/// How a rank's process stands when the launcher looks.
struct RankFate {
  enum class Kind {
    Running,  // alive and not stopped
    Stopped,  // stopped by a signal (SIGSTOP, SIGTSTP) or a debugger
    Exited,   // exited; `code` is its status
    Signaled, // killed; `code` is the signal
  };
  Kind kind = Kind::Running;
  int code = 0;

  /// A rank that is stopped, killed, or exited with an error: a suspect.
  bool abnormal() const;
  /// "is running", "was stopped", "exited with status 1", "was killed by
  /// signal 9 (Killed)".
  std::string str() const;
};

/// One rank as the analysis sees it.
struct RankRing {
  int rank = 0;
  RankFate fate;
  runtime::FlightSnapshot ring;
};

/// The job around the ranks a launcher watches: on several nodes, a
/// collective that waits for ranks of another node is named as such, not as
/// a hang of the comm. 0: unknown (the ranks given are the whole job).
struct FlightWorld {
  int worldSize = 0;
  /// Ranks per node; node n holds ranks n * ranksPerNode onwards.
  int ranksPerNode = 0;
};

/// What the analysis found.
struct FlightFinding {
  /// The lowest sequence number some rank never completed; 0 when every
  /// rank completed everything it began (no collective holds the job up).
  uint64_t seq = 0;
  /// The ranks the analysis blames, and those that wait in `seq` (or gave
  /// up waiting in it), ascending.
  std::vector<int> culprits, waiting;
  /// When no rank given is to blame: the ranks of other nodes that the
  /// collective waits for (FlightWorld), ascending.
  std::vector<int> elsewhere;
  /// Whether the ranks disagree on what collective `seq` is (a desync).
  bool mismatch = false;
  /// The analysis as one paragraph, without a trailing newline.
  std::string text;
};

/// The .mdl location of each of the plan's locations, "file:line:col";
/// what FlightCall::loc indexes.
std::vector<std::string> FlightLocations(const fb::Plan &plan);

/// Names the culprit of a failed job from every rank's ring and fate.
/// `locations` resolves FlightCall::loc (FlightLocations); `nowNs` is
/// CLOCK_MONOTONIC when the rings were copied. `world`: the job beyond
/// `ranks` (a launcher's node of a job on several).
FlightFinding AnalyzeFlight(const std::vector<RankRing> &ranks,
                            const std::vector<std::string> &locations,
                            int64_t nowNs, const FlightWorld &world = {});

/// One rank's ring as a JSON object (docs/runtime.md gives the schema):
/// the rank, its fate and where it was, then its collectives by ascending
/// seq.
std::string FlightJson(const RankRing &rank,
                       const std::vector<std::string> &locations,
                       int64_t nowNs);

/// "rank 3", "ranks 0-2", "ranks 0, 2-3" (`ranks` ascending); with `noun`
/// "node", "node 1", "nodes 1-2".
std::string RankListText(const std::vector<int> &ranks,
                         const std::string &noun = "rank");

} // namespace md::mdrun

#endif // MD_TOOLS_MDRUN_FLIGHTANALYSIS_H
