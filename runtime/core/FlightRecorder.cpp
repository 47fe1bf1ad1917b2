//===- FlightRecorder.cpp - a rank's last collectives in shared memory ----===//
//
// The ring's layout in its memfd, the seqlock protocol between the one
// writer and the readers, and the seq-tagged state word that lets a comm
// thread stamp the entries it claimed (FlightRecorder.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/FlightRecorder.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/EnumNames.h"
#include "runtime/core/Status.h"

namespace md::runtime {

namespace {
// "mdflight" and a layout version: a reader refuses any other layout.
constexpr uint64_t kMagic =
    0x7468'6769'6c66'646dull; // "mdflight", little-endian
// 2: the state word carries the entry's seq, a slot has startedNs and the
// header commStamps. 3: the header's failed instruction.
constexpr uint32_t kVersion = 3;
// No ring the launcher makes is bigger (the flag's own limit is lower).
constexpr uint32_t kMaxCapacity = 1u << 24;

template <typename T> using A = std::atomic<T>;
static_assert(A<uint64_t>::is_always_lock_free &&
                  A<int64_t>::is_always_lock_free &&
                  A<uint32_t>::is_always_lock_free,
              "the ring is shared between processes: its atomics must be "
              "lock-free");
} // namespace

struct FlightRecorder::Header {
  A<uint64_t> magic;
  A<uint32_t> version;
  A<uint32_t> capacity;
  A<int32_t> rank;
  A<int32_t> pid;
  A<uint64_t> begun; // seq of the last collective begun
  A<int64_t> step;
  A<int32_t> micro;
  A<uint32_t> phase;
  A<int64_t> stepsDone;
  A<int64_t> progressNs;
  A<uint32_t> commStamps; // 1 once a comm claimed an entry
  // The instruction that failed (opcode + 1 first, 0: none), stored after
  // its place.
  A<int32_t> failedOpcode, failedBlock, failedIndex, failedLoc;
};

struct FlightRecorder::Slot {
  A<uint64_t> seq; // 0 while (re)written
  A<uint32_t> kind, group, dtype;
  A<int32_t> groupSize, loc, micro;
  A<int64_t> bytes, bucket, step;
  // seq << 2 | FlightState: a stamp compares-and-swaps the whole word, so
  // it cannot move a newer entry that reused the slot.
  A<uint64_t> state;
  A<int64_t> beganNs, startedNs, endedNs;
};

namespace {
uint64_t stateWord(uint64_t seq, FlightState state) {
  return seq << 2 | static_cast<uint64_t>(state);
}
constexpr uint32_t bit(FlightState s) { return 1u << static_cast<uint32_t>(s); }
} // namespace

size_t FlightRecorder::ringBytes(uint32_t capacity) {
  return sizeof(Header) + static_cast<size_t>(capacity) * sizeof(Slot);
}

constexpr const char *kFlightStateNames[] = {"queued", "started", "completed",
                                             "failed"};
static_assert(namesEveryValue(kFlightStateNames, FlightState::Failed));
constexpr const char *kRankPhaseNames[] = {"starting", "training", "finished",
                                           "failed"};
static_assert(namesEveryValue(kRankPhaseNames, RankPhase::Failed));

const char *flightStateName(FlightState s) {
  return enumName(kFlightStateNames, s, "state?");
}
const char *rankPhaseName(RankPhase p) {
  return enumName(kRankPhaseNames, p, "phase?");
}

int64_t MonotonicNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

FlightRecorder::FlightRecorder(int fd, void *memory, size_t bytes)
    : fd_(fd), memory_(memory), bytes_(bytes) {}

FlightRecorder::~FlightRecorder() {
  if (memory_ != nullptr)
    ::munmap(memory_, bytes_);
  if (fd_ >= 0)
    ::close(fd_);
}

absl::StatusOr<std::unique_ptr<FlightRecorder>>
FlightRecorder::Map(int fd, size_t bytes) {
  void *memory =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (memory == MAP_FAILED) {
    int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat(
        "cannot map the flight recorder: mmap: ", std::strerror(err)));
  }
  return std::unique_ptr<FlightRecorder>(new FlightRecorder(fd, memory, bytes));
}

absl::StatusOr<std::unique_ptr<FlightRecorder>>
FlightRecorder::Create(int rank, uint32_t capacity) {
  if (capacity < 1 || capacity > kMaxCapacity)
    return absl::InvalidArgumentError(absl::StrFormat(
        "a flight recorder of %d entries (1 to %d)", capacity, kMaxCapacity));
  int fd =
      ::memfd_create(absl::StrCat("md-flight-rank", rank).c_str(), MFD_CLOEXEC);
  if (fd < 0)
    return absl::InternalError(
        absl::StrCat("cannot create the flight recorder: memfd_create: ",
                     std::strerror(errno)));
  size_t bytes = ringBytes(capacity);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat(
        "cannot size the flight recorder: ftruncate: ", std::strerror(err)));
  }
  // A fresh memfd reads as zeros: every slot is empty (seq 0).
  MD_ASSIGN_OR_RETURN(std::unique_ptr<FlightRecorder> r, Map(fd, bytes));
  Header &h = r->header();
  h.capacity.store(capacity, std::memory_order_relaxed);
  h.rank.store(rank, std::memory_order_relaxed);
  h.version.store(kVersion, std::memory_order_relaxed);
  h.progressNs.store(MonotonicNs(), std::memory_order_relaxed);
  h.magic.store(kMagic, std::memory_order_release);
  return r;
}

absl::StatusOr<std::unique_ptr<FlightRecorder>> FlightRecorder::Open(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "flight recorder fd ", fd, ": fstat: ", std::strerror(err)));
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < sizeof(Header)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrFormat(
        "flight recorder fd %d holds %d bytes, less than its header", fd,
        bytes));
  }
  MD_ASSIGN_OR_RETURN(std::unique_ptr<FlightRecorder> r, Map(fd, bytes));
  const Header &h = r->header();
  if (h.magic.load(std::memory_order_acquire) != kMagic ||
      h.version.load(std::memory_order_relaxed) != kVersion)
    return absl::InvalidArgumentError(absl::StrFormat(
        "flight recorder fd %d is not a version %d ring", fd, kVersion));
  uint32_t capacity = h.capacity.load(std::memory_order_relaxed);
  if (capacity < 1 || capacity > kMaxCapacity || ringBytes(capacity) != bytes)
    return absl::InvalidArgumentError(
        absl::StrFormat("flight recorder fd %d: %d entries do not fill its "
                        "%d bytes",
                        fd, capacity, bytes));
  return r;
}

FlightRecorder::Header &FlightRecorder::header() const {
  return *static_cast<Header *>(memory_);
}

FlightRecorder::Slot &FlightRecorder::slot(uint64_t seq) const {
  auto *slots =
      reinterpret_cast<Slot *>(static_cast<char *>(memory_) + sizeof(Header));
  return slots[(seq - 1) % capacity()];
}

uint32_t FlightRecorder::capacity() const {
  return header().capacity.load(std::memory_order_relaxed);
}
int FlightRecorder::rank() const {
  return header().rank.load(std::memory_order_relaxed);
}

void FlightRecorder::progress() {
  header().progressNs.store(MonotonicNs(), std::memory_order_release);
}

uint64_t FlightRecorder::begin(const FlightCall &c, FlightState state) {
  constexpr auto rel = std::memory_order_relaxed;
  Header &h = header();
  uint64_t seq = h.begun.load(rel) + 1;
  Slot &s = slot(seq);
  // Unpublish the slot before its fields change: a reader that copies a
  // mix of old and new fields then sees seq change and drops the copy.
  s.seq.store(0, rel);
  std::atomic_thread_fence(std::memory_order_release);
  s.kind.store(static_cast<uint32_t>(c.kind), rel);
  s.group.store(static_cast<uint32_t>(c.group), rel);
  s.dtype.store(static_cast<uint32_t>(c.dtype), rel);
  s.groupSize.store(c.groupSize, rel);
  s.loc.store(c.loc, rel);
  s.micro.store(c.micro, rel);
  s.bytes.store(c.bytes, rel);
  s.bucket.store(c.bucket, rel);
  s.step.store(c.step, rel);
  s.state.store(stateWord(seq, state), rel);
  int64_t now = MonotonicNs();
  s.beganNs.store(now, rel);
  s.startedNs.store(state == FlightState::Started ? now : 0, rel);
  s.endedNs.store(0, rel);
  s.seq.store(seq, std::memory_order_release);
  h.begun.store(seq, std::memory_order_release);
  claimable_ = 0;
  if (state == FlightState::Queued) {
    claimable_ = seq;
    // Entries older than the ring are gone: the list stays bounded when
    // the host rarely waits.
    if (hostQueued_.size() >= capacity())
      hostQueued_.pop_front();
    hostQueued_.push_back(seq);
  }
  return seq;
}

uint64_t FlightRecorder::claim() {
  uint64_t seq = claimable_;
  if (seq == 0)
    return 0;
  claimable_ = 0;
  claimed_ = seq;
  hostQueued_.pop_back(); // begin() pushed it last
  header().commStamps.store(1, std::memory_order_relaxed);
  return seq;
}

bool FlightRecorder::move(uint64_t seq, uint32_t from, FlightState to,
                          std::atomic<int64_t> Slot::*stamp) {
  Slot &s = slot(seq);
  uint64_t word = s.state.load(std::memory_order_relaxed);
  auto holds = [&] { return word >> 2 == seq && (from & (1u << (word & 3))); };
  if (!holds())
    return false; // evicted, or already past `from`
  // The time before the state, so that a reader who sees the state sees
  // its time. Should the writer reuse the slot right now, the time lands
  // in a state the newer entry has not reached, where readers ignore it
  // (only this comm stamps that entry, later), and the swap below fails.
  (s.*stamp).store(MonotonicNs(), std::memory_order_relaxed);
  while (!s.state.compare_exchange_weak(word, stateWord(seq, to),
                                        std::memory_order_release,
                                        std::memory_order_relaxed))
    if (!holds())
      return false;
  return true;
}

void FlightRecorder::start(uint64_t seq) {
  move(seq, bit(FlightState::Queued), FlightState::Started, &Slot::startedNs);
}

void FlightRecorder::end(uint64_t seq, FlightState state) {
  if (move(seq, bit(FlightState::Queued) | bit(FlightState::Started), state,
           &Slot::endedNs) &&
      state == FlightState::Completed)
    progress();
}

void FlightRecorder::settle(uint64_t seq, bool ok) {
  // Not claimed now, never: a later collective run outside the recorder
  // must not take this entry.
  if (seq == claimable_)
    claimable_ = 0;
  if (claimed(seq))
    return; // the comm stamps it
  if (!ok) {
    end(seq, FlightState::Failed);
    return;
  }
  // A host comm's collective has run; a queued one completes when the
  // host waits for its stream (completeQueued).
  if (move(seq, bit(FlightState::Started), FlightState::Completed,
           &Slot::endedNs))
    progress();
}

void FlightRecorder::completeQueued() {
  if (hostQueued_.empty())
    return; // nothing queued since the last call
  for (uint64_t seq : hostQueued_)
    move(seq, bit(FlightState::Queued), FlightState::Completed, &Slot::endedNs);
  hostQueued_.clear();
  progress();
}

void FlightRecorder::enter(int64_t step, int32_t micro) {
  Header &h = header();
  h.step.store(step, std::memory_order_relaxed);
  h.micro.store(micro, std::memory_order_relaxed);
  progress();
}

void FlightRecorder::stepDone(int64_t stepsDone) {
  header().stepsDone.store(stepsDone, std::memory_order_relaxed);
  progress();
}

void FlightRecorder::setPhase(RankPhase phase) {
  header().phase.store(static_cast<uint32_t>(phase), std::memory_order_relaxed);
  progress();
}

void FlightRecorder::failedAt(const FlightFailedInstruction &where) {
  Header &h = header();
  if (where.opcode < 0 || h.failedOpcode.load(std::memory_order_relaxed) != 0)
    return;
  h.failedBlock.store(where.block, std::memory_order_relaxed);
  h.failedIndex.store(where.index, std::memory_order_relaxed);
  h.failedLoc.store(where.loc, std::memory_order_relaxed);
  h.failedOpcode.store(where.opcode + 1, std::memory_order_release);
}

void FlightRecorder::setPid(int32_t pid) {
  header().pid.store(pid, std::memory_order_relaxed);
}

int64_t FlightRecorder::progressNs() const {
  return header().progressNs.load(std::memory_order_acquire);
}

FlightSnapshot FlightRecorder::snapshot() const {
  constexpr auto rel = std::memory_order_relaxed;
  const Header &h = header();
  FlightSnapshot snap;
  snap.begun = h.begun.load(std::memory_order_acquire);
  snap.rank = h.rank.load(rel);
  snap.pid = h.pid.load(rel);
  snap.capacity = h.capacity.load(rel);
  snap.step = h.step.load(rel);
  snap.micro = h.micro.load(rel);
  snap.stepsDone = h.stepsDone.load(rel);
  snap.phase = static_cast<RankPhase>(h.phase.load(rel));
  snap.progressNs = h.progressNs.load(std::memory_order_acquire);
  snap.commStamps = h.commStamps.load(rel) != 0;
  if (int32_t op = h.failedOpcode.load(std::memory_order_acquire); op > 0) {
    snap.failedAt.opcode = op - 1;
    snap.failedAt.block = h.failedBlock.load(rel);
    snap.failedAt.index = h.failedIndex.load(rel);
    snap.failedAt.loc = h.failedLoc.load(rel);
  }
  uint64_t first =
      snap.begun >= snap.capacity ? snap.begun - snap.capacity + 1 : 1;
  for (uint64_t seq = first; seq <= snap.begun; ++seq) {
    const Slot &s = slot(seq);
    if (s.seq.load(std::memory_order_acquire) != seq)
      continue; // overwritten since, or being written
    FlightEntry e;
    e.seq = seq;
    e.call.kind = static_cast<Collective>(s.kind.load(rel));
    e.call.group = static_cast<GroupKind>(s.group.load(rel));
    e.call.dtype = static_cast<DType>(s.dtype.load(rel));
    e.call.groupSize = s.groupSize.load(rel);
    e.call.loc = s.loc.load(rel);
    e.call.micro = s.micro.load(rel);
    e.call.bytes = s.bytes.load(rel);
    e.call.bucket = s.bucket.load(rel);
    e.call.step = s.step.load(rel);
    uint64_t word = s.state.load(std::memory_order_acquire);
    e.state = static_cast<FlightState>(word & 3);
    e.beganNs = s.beganNs.load(rel);
    e.startedNs = s.startedNs.load(rel);
    e.endedNs = s.endedNs.load(rel);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.seq.load(rel) != seq || word >> 2 != seq)
      continue;
    // Only the times of the states it reached (a late stamp of an older
    // entry may have left one in this slot).
    if (e.state == FlightState::Queued)
      e.startedNs = 0;
    if (e.state == FlightState::Queued || e.state == FlightState::Started)
      e.endedNs = 0;
    snap.entries.push_back(e);
  }
  return snap;
}

} // namespace md::runtime
