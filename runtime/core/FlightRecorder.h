//===- FlightRecorder.h - a rank's last collectives -------------*- C++ -*-===//
//
// Each rank keeps a ring of its last N collectives: sequence number, kind,
// group, dtype, bytes, bucket, the .mdl location of the instruction, the
// step and micro-step, the state (queued, started, completed, failed) and
// when each state began. The ring lives in a memfd that the launcher
// creates and maps before it starts the rank, and that the rank maps
// MAP_SHARED: every write is visible to the launcher at once and stays
// readable after the rank is killed with SIGKILL, when nothing the rank
// could do on its way out would run. The launcher reads the rings of a
// failed job and tools/mdrun/FlightAnalysis names the culprit.
//
// One writer (the thread that runs the executor) begins entries, and any
// number of readers in other processes copy them. A slot is published
// seqlock-style: its `seq` is zeroed, the fields written, then `seq` stored
// with release; a reader keeps a slot only if it reads the same non-zero
// `seq` before and after copying it. States and timestamps of a published
// slot change in place, each one atomic word, so a reader sees every state
// a collective reached in order. All shared fields are lock-free
// std::atomic words, so the layout is address-free and the same in every
// process.
//
// A comm that runs its collectives on a thread of its own (the CPU
// backend's comm thread) claims the entries the executor begins for it and
// stamps them from that thread when it starts and ends each collective
// (start(), end()), so their states are exact: queued, started, then
// completed or failed. The state word carries the entry's seq, and a stamp
// is a compare-and-swap on it, so a stamp that comes after the writer has
// reused the slot for a newer entry changes nothing. A timestamp is stored
// before the state that makes it meaningful, and readers ignore the
// timestamps of states an entry has not reached, so the stale timestamp
// such a late stamp may leave in a reused slot is never read.
//
// Timestamps are CLOCK_MONOTONIC nanoseconds, one clock for every process
// of a machine.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_FLIGHTRECORDER_H
#define MD_RUNTIME_CORE_FLIGHTRECORDER_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/core/Comm.h"
#include "runtime/core/Tensor.h"

namespace md::runtime {

/// How far a recorded collective got. A host comm (shm, tcp) runs a
/// collective inside the call: Started, then Completed. A stream-ordered
/// comm (NCCL) only queues it on the comm stream: Queued, and Completed
/// once the host has waited for that stream. The CPU comm thread queues it
/// and stamps it itself: Queued, Started when the thread starts it, then
/// Completed or Failed (FlightSnapshot::commStamps).
enum class FlightState : uint32_t {
  Queued = 0,
  Started = 1,
  Completed = 2,
  Failed = 3
};
/// "queued", "started", "completed", "failed".
const char *flightStateName(FlightState s);

/// Where the rank is in its life, as the launcher cannot tell from outside.
enum class RankPhase : uint32_t {
  Starting = 0, // mapped the ring; loading the plan, meeting the others
  Training = 1, // the executor runs
  Finished = 2, // the run returned OK
  Failed = 3    // the run returned an error (the rank exits soon)
};
/// "starting", "training", "finished", "failed".
const char *rankPhaseName(RankPhase p);

/// A collective as the executor starts it.
struct FlightCall {
  Collective kind = Collective::barrier;
  GroupKind group = GroupKind::world;
  int32_t groupSize = 0;
  DType dtype = DType::f32;
  int64_t bytes = 0;   // this rank's payload (the larger of send and recv)
  int64_t bucket = -1; // the plan's bucket; -1: none
  int32_t loc = -1;    // index into the plan's locations; -1: none
  int64_t step = 0;    // the step it belongs to, 1-based
  /// The micro-step within the step, 1-based; 0: the hooks after `step`
  /// or outside any step.
  int32_t micro = 0;
};

/// One recorded collective, copied out of a ring.
struct FlightEntry {
  uint64_t seq = 0; // 1-based, the same on every rank for the same call
  FlightCall call;
  FlightState state = FlightState::Queued;
  /// When it was queued or started (begun), when it started (the same as
  /// beganNs for a host comm), and when it completed or failed
  /// (CLOCK_MONOTONIC ns; 0: not yet, or not known: a stream-ordered
  /// comm's start).
  int64_t beganNs = 0, startedNs = 0, endedNs = 0;
};

/// The instruction whose kernel failed on a rank (the first one, the
/// innermost of nested blocks): what the launcher's analysis names instead
/// of the last collective, which had completed. opcode < 0: none.
struct FlightFailedInstruction {
  int32_t opcode = -1; // the plan's fb::Opcode
  int32_t block = -1, index = -1;
  int32_t loc = -1; // into the plan's locations; -1: none
};

/// A consistent copy of one rank's ring.
struct FlightSnapshot {
  int rank = 0;
  int32_t pid = 0;
  uint32_t capacity = 0;
  /// Collectives this rank has begun in all (the ring keeps the last
  /// `capacity` of them).
  uint64_t begun = 0;
  /// Where the rank last was: the step (1-based) and micro-step as in
  /// FlightCall, and the steps it completed.
  int64_t step = 0;
  int32_t micro = 0;
  int64_t stepsDone = 0;
  RankPhase phase = RankPhase::Starting;
  /// Whether the rank's comm stamps its queued collectives itself (the CPU
  /// comm thread): then Queued means not started yet. Otherwise a Queued
  /// entry may be running on a device stream (NCCL).
  bool commStamps = false;
  /// The last time the rank completed something (a collective, a
  /// micro-step, a step, a phase): what the launcher's watchdog reads.
  int64_t progressNs = 0;
  /// Where the rank's run failed outside a collective, if it did.
  FlightFailedInstruction failedAt;
  /// The entries still in the ring, by ascending seq.
  std::vector<FlightEntry> entries;
};

/// CLOCK_MONOTONIC in nanoseconds.
int64_t MonotonicNs();

class FlightRecorder {
public:
  /// A new ring of `capacity` entries (>= 1) for `rank` in a memfd, mapped
  /// here; fd() passes it to the rank's process.
  static absl::StatusOr<std::unique_ptr<FlightRecorder>>
  Create(int rank, uint32_t capacity);
  /// Maps the ring in `fd` (a Create()d memfd, inherited or dup'ed); checks
  /// its header and size. Takes ownership of `fd`.
  static absl::StatusOr<std::unique_ptr<FlightRecorder>> Open(int fd);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder &) = delete;
  FlightRecorder &operator=(const FlightRecorder &) = delete;

  int fd() const { return fd_; }
  uint32_t capacity() const;
  int rank() const;

  // --- the writer (one thread of the rank) --------------------------------
  /// Records `call` as Queued or Started now; returns its seq.
  uint64_t begin(const FlightCall &call, FlightState state);
  /// The comm that runs the collective just begun as Queued takes its
  /// entry over: it stamps it with start() and end() (from any thread),
  /// and completeQueued() leaves it alone. Returns its seq; 0 when the
  /// last begin() was not Queued or its entry is already claimed.
  uint64_t claim();
  /// Whether entry `seq` is the one claim() took last.
  bool claimed(uint64_t seq) const { return seq != 0 && seq == claimed_; }
  /// The call that ran collective `seq` (the entry begun last) returned,
  /// `ok` or not. Unless its comm claimed the entry: Failed if not `ok`,
  /// else Completed if Started (a host comm's), while a Queued one waits
  /// for completeQueued(). No comm can claim it after this.
  void settle(uint64_t seq, bool ok);
  /// Marks every Queued entry that no comm claimed Completed: the host has
  /// waited for the stream they were queued on.
  void completeQueued();

  // --- the writer or the comm that claimed the entry ----------------------
  /// Moves entry `seq` from Queued to Started now, if it is still in the
  /// ring and Queued.
  void start(uint64_t seq);
  /// Moves entry `seq` to Completed or Failed now, if it is still in the
  /// ring and neither yet.
  void end(uint64_t seq, FlightState state);
  /// The rank entered `step` (1-based), micro-step `micro` (as FlightCall).
  void enter(int64_t step, int32_t micro);
  /// The rank completed `stepsDone` steps.
  void stepDone(int64_t stepsDone);
  void setPhase(RankPhase phase);
  /// The instruction `block`/`index` (opcode, location) failed; only the
  /// first call counts (an error passes through the blocks around it).
  void failedAt(const FlightFailedInstruction &where);
  /// Stamps the process id of the writer (the rank's, after exec).
  void setPid(int32_t pid);

  // --- readers (any process) ----------------------------------------------
  FlightSnapshot snapshot() const;
  /// The last time the rank completed something (CLOCK_MONOTONIC ns).
  int64_t progressNs() const;

private:
  struct Header;
  struct Slot;
  static size_t ringBytes(uint32_t capacity);
  FlightRecorder(int fd, void *memory, size_t bytes);
  /// Maps `bytes` of `fd` shared and read-write; owns `fd` from here on
  /// (closed when mapping fails).
  static absl::StatusOr<std::unique_ptr<FlightRecorder>> Map(int fd,
                                                             size_t bytes);
  Header &header() const;
  Slot &slot(uint64_t seq) const;
  void progress();
  /// Moves entry `seq` from a state in `from` (a bit per FlightState) to
  /// `to`, storing the time in `stamp` first; false when the slot holds
  /// another entry or another state.
  bool move(uint64_t seq, uint32_t from, FlightState to,
            std::atomic<int64_t> Slot::*stamp);

  int fd_ = -1;
  void *memory_ = nullptr;
  size_t bytes_ = 0;
  // The writer's: the Queued entries that no comm claimed (completeQueued
  // ends them), the entry claim() may take, and the last one it took.
  std::deque<uint64_t> hostQueued_;
  uint64_t claimable_ = 0;
  uint64_t claimed_ = 0;
};

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_FLIGHTRECORDER_H
