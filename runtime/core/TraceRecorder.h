//===- TraceRecorder.h - one rank's timeline for --trace --------*- C++ -*-===//
//
// What a rank did and when, as Chrome trace events (the JSON that
// chrome://tracing and ui.perfetto.dev open): one slice per instruction on
// the track of its stream (compute, comm) or, for what the host does
// itself (a step, a micro-step, the hooks, an evaluation, a checkpoint
// save), on the host track; flow arrows from the instruction that records
// a plan event to each instruction of another stream that waits for it.
// The executor fills it (ExecutorOptions::trace); the rank writes its
// events as a fragment, and the launcher joins the ranks' fragments into
// one file with a process per rank (tools/mdrun).
//
// Recording and writing may happen on different threads.
//
// Times are CLOCK_MONOTONIC, so the ranks of a machine share one clock. A
// slice is the host's time in the call: on the CPU backend, whose streams
// run synchronously, that is the work itself; on the CUDA backend it is
// the time to queue the work.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_TRACERECORDER_H
#define MD_RUNTIME_CORE_TRACERECORDER_H

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace md::runtime {

class TraceRecorder {
public:
  /// The tracks of a rank, by thread id in the trace.
  enum Track : int { Compute = 0, Comm = 1, Host = 2 };

  /// Keeps at most `maxEvents` events; later ones are counted, not kept.
  explicit TraceRecorder(size_t maxEvents = size_t(1) << 21);

  /// A slice [beginNs, endNs) named `name` in category `cat` on `track`;
  /// `args` is a JSON object's members ("\"bytes\": 4096") or "".
  void slice(std::string name, const char *cat, int track, int64_t beginNs,
             int64_t endNs, std::string args = "");
  /// A flow arrow from a slice on `fromTrack` that contains `fromNs` to
  /// one on `toTrack` that starts at `toNs`.
  void flow(int fromTrack, int64_t fromNs, int toTrack, int64_t toNs);

  size_t events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_.size();
  }
  size_t dropped() const {
    std::lock_guard<std::mutex> lock(mu_);
    return dropped_;
  }

  /// This rank's events as comma-separated JSON objects, with process id
  /// `rank` and the process's and tracks' names: a fragment of a
  /// "traceEvents" array. Timestamps are microseconds.
  std::string fragment(int rank) const;
  /// Writes fragment(rank) to `path`.
  absl::Status writeFragment(const std::string &path, int rank) const;

private:
  struct Event {
    char phase; // 'X' a slice, 's'/'f' the ends of a flow
    int track;
    int64_t beginNs, endNs;
    uint64_t id; // flows
    const char *cat;
    std::string name, args;
  };
  bool room();
  // Another thread may write the fragment while the executor records (a
  // rank stopped with SIGTERM, tools/mdrun/Trace.h).
  mutable std::mutex mu_;
  size_t max_;
  size_t dropped_ = 0;
  uint64_t nextFlow_ = 1;
  std::vector<Event> events_;
};

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_TRACERECORDER_H
