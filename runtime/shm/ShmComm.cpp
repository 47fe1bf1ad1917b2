//===- ShmComm.cpp - collectives through a POSIX shared-memory segment ----===//
//
// The segment:
//
//   header      magic, layout, the failure record           (page aligned)
//   control[W]  per rank: pid, posted[3], done[3], the op it is in
//   slot[W]     per rank: slotBytes of staging                (page aligned)
//
// A collective on a group of kind k runs in chunks; for each chunk every
// member
//   1. copies its contribution into its own slot,
//   2. publishes posted[k] = phase (a release store; phase counts this
//      rank's steps on kind k, the same on every member),
//   3. waits until every member's posted[k] >= phase (acquire loads), and
//      on the first chunk checks that they are all in the same collective,
//   4. for an all-reduce chunk of 32 KiB or more, reduces its slice of the
//      chunk (1/n of it) from every member's slot in group order into its
//      own slot, and publishes and waits for the next phase, as in 2-3,
//   5. reads the members' slots (an all-reduce: their reduced slices) and
//      writes its own result,
//   6. publishes done[k] = phase and waits for everyone's done[k] >= phase,
//      after which no one reads its slot any more and it may be reused.
// With room for two staging buffers in a slot (all but tiny slots),
// chunks alternate between them and step 6 comes after the last chunk
// only: a member that posts chunk c has read all of chunk c - 2.
// The counters are per group kind so that, on a 2-D mesh, a rank can be in
// a shard collective while the ranks of another shard group run theirs;
// each rank is in one collective at a time, so one slot per rank suffices.
//
// Synchronisation is lock-free atomics on the shared counters (lock-free
// std::atomic on x86-64 and AArch64 works across processes) with a
// spin/yield/sleep backoff: a short spin for latency, then sched_yield
// (several ranks may share a core), then 50 us sleeps. No pthread objects
// live in the segment, so a rank that dies cannot leave a mutex locked.
//
//===----------------------------------------------------------------------===//

#include "runtime/shm/ShmComm.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/core/Reduce.h"
#include "runtime/core/Status.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace md::shm {

using namespace md::runtime;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kMagic = 0x31306d68732d646dull; // "md-shm01"
constexpr uint32_t kVersion = 2;                   // 2: the fingerprint
constexpr int64_t kPage = 4096;

std::string describeDesc(const CollectiveDesc &d) {
  std::string s =
      absl::StrFormat("%s #%d on group %s", d.name(), d.seq,
                      groupKindName(static_cast<GroupKind>(d.groupKind)));
  if (d.collective == uint32_t(Collective::barrier))
    return s;
  return absl::StrCat(s, " (", d.args(), ")");
}

struct Header {
  std::atomic<uint64_t> magic; // stored last by rank 0: the layout is valid
  uint32_t version;
  int32_t worldSize;
  int32_t shardSize;
  int32_t unused;
  int64_t slotBytes;
  int64_t totalBytes;
  // The first failure of any rank: 0 none, 1 being written, 2 written.
  std::atomic<uint32_t> abortState;
  int32_t abortRank;
  int32_t abortCode;
  char abortMessage[1024];
  char fingerprint[256]; // ShmCommOptions::fingerprint, NUL-terminated
};

struct alignas(128) RankControl {
  std::atomic<int64_t> pid; // non-zero once the rank has attached
  std::atomic<uint64_t> posted[3];
  std::atomic<uint64_t> done[3];
  CollectiveDesc desc; // the collective the rank is in
};

// The segment starts zero-filled (ftruncate); an all-zero lock-free atomic
// is a valid atomic holding 0, and address-free, so it works between
// processes.
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(std::is_trivially_copyable_v<CollectiveDesc>);

int64_t roundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

int64_t headerBytes() { return roundUp(sizeof(Header), kPage); }
int64_t controlBytes(int worldSize) {
  return roundUp(int64_t(worldSize) * int64_t(sizeof(RankControl)), kPage);
}

Header *headerOf(char *base) { return reinterpret_cast<Header *>(base); }
RankControl *controlOf(char *base, int rank) {
  return reinterpret_cast<RankControl *>(base + headerBytes()) + rank;
}

void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Backoff for the iteration-th poll of a wait.
void backoff(uint64_t iteration) {
  if (iteration < 128) {
    cpuRelax();
  } else if (iteration < 4096) {
    sched_yield();
  } else {
    timespec ts{0, 50'000};
    nanosleep(&ts, nullptr);
  }
}

std::string seconds(std::chrono::milliseconds d) {
  return absl::StrFormat("%.3g s", d.count() / 1000.0);
}

std::string errnoText(int err) { return std::strerror(err); }

bool validJobId(const std::string &id) {
  if (id.empty() || id.size() > 200)
    return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
          c == '-'))
      return false;
  return true;
}

/// A reduction's sources: on the stack for groups of up to 16 members.
class Sources {
public:
  explicit Sources(int n) : n_(n) {
    if (n > kInline)
      many_.resize(n);
  }
  const void **data() { return n_ > kInline ? many_.data() : inline_; }

private:
  static constexpr int kInline = 16;
  int n_;
  const void *inline_[kInline];
  std::vector<const void *> many_;
};

/// An all-reduce chunk of at least this many bytes is reduce-scattered and
/// all-gathered; a smaller one every member reduces whole.
constexpr int64_t kSplitBytes = int64_t(32) << 10;
/// At most this many bytes per all-reduce chunk. Its two buffers then take
/// 2 MiB of the default 4 MiB slot: a smaller footprint stays in the
/// caches, which the cores' exchange of lines depends on (1 MiB was the
/// best of 256 KiB to 2 MiB on the 2-core EPYC of docs/bench.md).
constexpr int64_t kAllReduceChunkBytes = int64_t(1) << 20;
/// The pieces of its slice a member reduces and copies out in one go.
constexpr int64_t kPieceBytes = int64_t(16) << 10;

} // namespace

/// One collective in flight: what it is, and how a chunk of it is written
/// to this rank's slot and read back from the group's.
struct ShmComm::Op : HostCollectiveCall {
  int64_t elemBytes = 0;
  int64_t chunkElems = 1;
  /// The slots hold one staging buffer, or two of bufferBytes each (chunk
  /// c uses buffer c % 2).
  int64_t bufferBytes = 0;
  int buffers = 1;
  /// A step of a chunk: its first element, its length, and where its
  /// buffer starts in the slots.
  using Step = std::function<void(int64_t begin, int64_t len, int64_t at)>;
  Step write, read;
  /// The all-reduce's middle step: between the members' writes and their
  /// reads, each member reduces its slice of the chunk and publishes it.
  /// Chunks of fewer than splitElems elements skip it (every member then
  /// reduces the whole chunk in `read`).
  Step reduce;
  int64_t splitElems = 0;
};

//===----------------------------------------------------------------------===//
// Creation and teardown
//===----------------------------------------------------------------------===//

std::string ShmComm::segmentName(const std::string &jobId) {
  return "/md-" + jobId;
}

absl::Status ShmComm::removeSegment(const std::string &jobId) {
  if (!validJobId(jobId))
    return absl::InvalidArgumentError(
        absl::StrFormat("shm: bad job id '%s'", jobId));
  if (shm_unlink(segmentName(jobId).c_str()) != 0 && errno != ENOENT)
    return absl::InternalError(absl::StrFormat(
        "shm: cannot remove %s: %s", segmentName(jobId), errnoText(errno)));
  return absl::OkStatus();
}

ShmComm::ShmComm(const ShmCommOptions &options, Mesh mesh)
    : HostMeshComm(options.rank, mesh), options_(options),
      name_(segmentName(options.jobId)) {
  slotStride_ = roundUp(options.slotBytes, kPage);
  totalBytes_ = headerBytes() + controlBytes(options.worldSize) +
                int64_t(options.worldSize) * slotStride_;
}

absl::StatusOr<std::unique_ptr<ShmComm>>
ShmComm::create(const ShmCommOptions &options) {
  if (!validJobId(options.jobId))
    return absl::InvalidArgumentError(absl::StrFormat(
        "shm: job id '%s' must be 1 to 200 letters, digits, '.', '_' or '-'",
        options.jobId));
  MD_ASSIGN_OR_RETURN(Mesh mesh,
                      commMesh("shm", options.rank, options.worldSize,
                               options.shardSize, options.timeout));
  if (options.fingerprint.size() >= sizeof(Header::fingerprint))
    return absl::InvalidArgumentError(absl::StrFormat(
        "shm: fingerprint of %d bytes; at most %d", options.fingerprint.size(),
        sizeof(Header::fingerprint) - 1));
  if (options.slotBytes < 8 * int64_t(options.worldSize) ||
      options.slotBytes > (int64_t(1) << 40))
    return absl::InvalidArgumentError(absl::StrFormat(
        "shm: slot size %d must be at least 8 * world size = %d bytes and "
        "at most 1 TiB",
        options.slotBytes, 8 * options.worldSize));

  std::unique_ptr<ShmComm> comm(new ShmComm(options, mesh));
  MD_RETURN_IF_ERROR(options.rank == 0 ? comm->createSegment()
                                       : comm->attachSegment());
  MD_RETURN_IF_ERROR(comm->waitForAttach());
  if (options.rank == 0) {
    // Everyone has the segment mapped: the name is no longer needed, and
    // without it nothing is left behind however the job ends.
    shm_unlink(comm->name_.c_str());
    comm->unlinked_ = true;
  }
  return comm;
}

absl::Status ShmComm::createSegment() {
  int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    if (errno == EEXIST)
      return absl::AlreadyExistsError(absl::StrFormat(
          "shm: %s already exists: another job uses id '%s', or one died "
          "before its ranks attached (remove /dev/shm%s)",
          name_, options_.jobId, name_));
    return absl::InternalError(
        absl::StrFormat("shm: cannot create %s: %s", name_, errnoText(errno)));
  }
  // From here on the name is ours; the destructor unlinks it on any error.
  ownsName_ = true;
  // Reserve the pages now: on a full tmpfs a merely ftruncate'd mapping
  // fails later with SIGBUS on first touch, not with an error.
  int err = posix_fallocate(fd, 0, totalBytes_);
  if (err == EINVAL || err == EOPNOTSUPP)
    err = ftruncate(fd, totalBytes_) != 0 ? errno : 0;
  void *p = MAP_FAILED;
  if (err == 0) {
    p = mmap(nullptr, totalBytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
      err = errno;
  }
  close(fd);
  if (err != 0) {
    shm_unlink(name_.c_str());
    unlinked_ = true;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "shm: cannot reserve or map %d bytes for %s: %s (is /dev/shm large "
        "enough? a smaller slot size needs less)",
        totalBytes_, name_, errnoText(err)));
  }
  base_ = static_cast<char *>(p);
  Header *h = headerOf(base_);
  h->version = kVersion;
  h->worldSize = options_.worldSize;
  h->shardSize = mesh_.shardSize;
  h->slotBytes = options_.slotBytes;
  h->totalBytes = totalBytes_;
  std::memcpy(h->fingerprint, options_.fingerprint.data(),
              options_.fingerprint.size());
  controlOf(base_, 0)->pid.store(getpid(), std::memory_order_relaxed);
  h->magic.store(kMagic, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status ShmComm::attachSegment() {
  const auto deadline = Clock::now() + options_.timeout;
  auto timedOut = [&](const char *what) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "shm: rank %d: %s %s within %s (is rank 0 running with job id '%s'?)",
        options_.rank, what, name_, seconds(options_.timeout), options_.jobId));
  };
  // Wait for the name, then for a complete header.
  int fd = -1;
  for (uint64_t i = 0;; ++i) {
    fd = shm_open(name_.c_str(), O_RDWR, 0);
    if (fd >= 0) {
      struct stat st;
      if (fstat(fd, &st) == 0 && st.st_size >= headerBytes())
        break;
      close(fd);
    } else if (errno != ENOENT) {
      return absl::InternalError(
          absl::StrFormat("shm: cannot open %s: %s", name_, errnoText(errno)));
    }
    if (Clock::now() >= deadline)
      return timedOut("found no");
    backoff(4096 + i); // a sleeping poll: rank 0 may take a while to start
  }
  void *hp =
      mmap(nullptr, headerBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (hp == MAP_FAILED) {
    int err = errno;
    close(fd);
    return absl::InternalError(
        absl::StrFormat("shm: cannot map %s: %s", name_, errnoText(err)));
  }
  Header *h = headerOf(static_cast<char *>(hp));
  for (uint64_t i = 0; h->magic.load(std::memory_order_acquire) != kMagic;
       ++i) {
    if (Clock::now() >= deadline) {
      munmap(hp, headerBytes());
      close(fd);
      return timedOut("found no initialised");
    }
    backoff(4096 + i);
  }
  if (h->version != kVersion || h->worldSize != options_.worldSize ||
      h->shardSize != mesh_.shardSize || h->slotBytes != options_.slotBytes ||
      h->totalBytes != totalBytes_) {
    std::string msg = absl::StrFormat(
        "shm: rank %d expects world size %d, shard size %d, slot size %d "
        "(version %d), but %s was made for world size %d, shard size %d, slot "
        "size %d (version %d)",
        options_.rank, options_.worldSize, mesh_.shardSize, options_.slotBytes,
        kVersion, name_, h->worldSize, h->shardSize, h->slotBytes, h->version);
    munmap(hp, headerBytes());
    close(fd);
    return absl::FailedPreconditionError(msg);
  }
  munmap(hp, headerBytes());
  void *p =
      mmap(nullptr, totalBytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED)
    return absl::InternalError(
        absl::StrFormat("shm: cannot map %s: %s", name_, errnoText(err)));
  base_ = static_cast<char *>(p);
  // Another plan (a plan file replaced while the ranks started, say): this
  // rank and, through the failure record, every other fails now.
  const std::string theirs(
      headerOf(base_)->fingerprint,
      strnlen(headerOf(base_)->fingerprint, sizeof(Header::fingerprint)));
  if (theirs != options_.fingerprint)
    return fail(absl::FailedPreconditionError(absl::StrFormat(
        "shm: rank %d has %s, but rank 0 has %s: every rank of a job must "
        "run the same plan",
        options_.rank,
        options_.fingerprint.empty() ? "no fingerprint" : options_.fingerprint,
        theirs.empty() ? "none" : theirs)));
  int64_t expected = 0;
  if (!controlOf(base_, options_.rank)
           ->pid.compare_exchange_strong(expected, getpid()))
    return absl::AlreadyExistsError(
        absl::StrFormat("shm: rank %d of %s is already taken by pid %d",
                        options_.rank, name_, expected));
  return absl::OkStatus();
}

absl::Status ShmComm::waitForAttach() {
  const auto deadline = Clock::now() + options_.timeout;
  for (uint64_t i = 0;; ++i) {
    std::vector<int> missing;
    for (int r = 0; r < options_.worldSize; ++r)
      if (controlOf(base_, r)->pid.load(std::memory_order_acquire) == 0)
        missing.push_back(r);
    if (missing.empty())
      return absl::OkStatus();
    Header *h = headerOf(base_);
    if (h->abortState.load(std::memory_order_acquire) == 2)
      return absl::Status(static_cast<absl::StatusCode>(h->abortCode),
                          absl::StrFormat("shm: rank %d: rank %d failed: %s",
                                          options_.rank, h->abortRank,
                                          h->abortMessage));
    if (Clock::now() >= deadline)
      return fail(absl::DeadlineExceededError(absl::StrFormat(
          "shm: rank(s) %s did not attach to %s within %s",
          absl::StrJoin(missing, ", "), name_, seconds(options_.timeout))));
    backoff(128 + i);
  }
}

ShmComm::~ShmComm() {
  if (base_ != nullptr)
    munmap(base_, totalBytes_);
  if (ownsName_ && !unlinked_)
    shm_unlink(name_.c_str());
}

//===----------------------------------------------------------------------===//
// The protocol
//===----------------------------------------------------------------------===//

char *ShmComm::slot(int rank) const {
  return base_ + headerBytes() + controlBytes(options_.worldSize) +
         int64_t(rank) * slotStride_;
}

std::string ShmComm::describe(const Op &op) const {
  return absl::StrFormat("%s [%s] (rank %d)", describeDesc(op.desc),
                         absl::StrJoin(op.group->ranks, ", "), options_.rank);
}

absl::Status ShmComm::fail(absl::Status status) {
  Header *h = headerOf(base_);
  uint32_t expected = 0;
  if (h->abortState.compare_exchange_strong(expected, 1)) {
    h->abortRank = options_.rank;
    h->abortCode = static_cast<int32_t>(status.code());
    std::string msg(status.message());
    std::snprintf(h->abortMessage, sizeof h->abortMessage, "%s", msg.c_str());
    h->abortState.store(2, std::memory_order_release);
  }
  failed_ = status;
  return status;
}

absl::Status ShmComm::abortedByPeer(const Op &op) const {
  const Header *h = headerOf(base_);
  return absl::Status(
      static_cast<absl::StatusCode>(h->abortCode),
      absl::StrFormat("shm: %s: stopped because rank %d failed: %s",
                      describe(op), h->abortRank, h->abortMessage));
}

absl::Status ShmComm::waitForGroup(const Op &op, Wait what, uint64_t phase) {
  const int k = static_cast<int>(op.group->kind);
  const bool done = what == Wait::finish;
  auto ready = [&](int r) {
    const RankControl *c = controlOf(base_, r);
    const std::atomic<uint64_t> &counter = done ? c->done[k] : c->posted[k];
    return counter.load(std::memory_order_acquire) >= phase;
  };
  const auto deadline = Clock::now() + options_.timeout;
  for (uint64_t i = 0;; ++i) {
    bool all = true;
    for (int r : op.group->ranks)
      if (r != options_.rank && !ready(r)) {
        all = false;
        break;
      }
    if (all)
      return absl::OkStatus();
    if (headerOf(base_)->abortState.load(std::memory_order_acquire) == 2) {
      failed_ = abortedByPeer(op);
      return failed_;
    }
    backoff(i);
    if (i >= 128 && Clock::now() >= deadline) {
      std::vector<int> missing;
      for (int r : op.group->ranks)
        if (r != options_.rank && !ready(r))
          missing.push_back(r);
      if (missing.empty())
        return absl::OkStatus();
      return fail(absl::DeadlineExceededError(absl::StrFormat(
          "shm: %s: timed out after %s waiting for rank(s) %s to %s",
          describe(op), seconds(options_.timeout), absl::StrJoin(missing, ", "),
          what == Wait::finish   ? "finish reading"
          : what == Wait::reduce ? "reduce their slices"
                                 : "arrive")));
    }
  }
}

absl::Status ShmComm::checkSameCollective(const Op &op) {
  for (int r : op.group->ranks) {
    if (r == options_.rank)
      continue;
    CollectiveDesc theirs = controlOf(base_, r)->desc;
    if (!(theirs == op.desc))
      return fail(absl::FailedPreconditionError(absl::StrFormat(
          "shm: collective mismatch on group %s: rank %d is in %s, rank %d is "
          "in %s",
          op.group->str(), options_.rank, describeDesc(op.desc), r,
          describeDesc(theirs))));
  }
  return absl::OkStatus();
}

absl::Status ShmComm::runChunks(Op &op) {
  if (!failed_.ok())
    return failed_;
  const int k = static_cast<int>(op.group->kind);
  op.desc.seq = ++seq_[k];
  op.desc.groupKind = uint32_t(k);
  op.desc.groupSize = op.group->size();
  RankControl *me = controlOf(base_, options_.rank);
  me->desc = op.desc; // published by the release store of posted below

  const int64_t count = op.desc.count;
  const int64_t chunks =
      count == 0 ? 1 : (count + op.chunkElems - 1) / op.chunkElems;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * op.chunkElems;
    const int64_t len = std::min(op.chunkElems, count - begin);
    // With two buffers, chunk c overwrites what chunk c - 2 staged, which
    // every member has finished reading: it posted chunk c - 1 (waited for
    // below) after its reads of chunk c - 2.
    const int64_t at = (c % op.buffers) * op.bufferBytes;
    if (op.write && len > 0)
      op.write(begin, len, at);
    uint64_t phase = ++phase_[k];
    me->posted[k].store(phase, std::memory_order_release);
    MD_RETURN_IF_ERROR(waitForGroup(op, Wait::arrive, phase));
    if (c == 0)
      MD_RETURN_IF_ERROR(checkSameCollective(op));
    if (op.reduce && len > 0 && len >= op.splitElems) {
      // Every member reduces its slice and posts again: the next phase
      // number, the same on every member, as they all split this chunk.
      op.reduce(begin, len, at);
      phase = ++phase_[k];
      me->posted[k].store(phase, std::memory_order_release);
      MD_RETURN_IF_ERROR(waitForGroup(op, Wait::reduce, phase));
    }
    if (op.read && len > 0)
      op.read(begin, len, at);
    // One buffer is free again once everyone has read it; two need that
    // only at the end, before the next collective (possibly on another
    // group) writes the slots.
    if (op.buffers == 1 || c == chunks - 1) {
      me->done[k].store(phase, std::memory_order_release);
      MD_RETURN_IF_ERROR(waitForGroup(op, Wait::finish, phase));
    }
  }
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// The collectives
//===----------------------------------------------------------------------===//

absl::Status ShmComm::run(const CollectiveArgs &args, const Group &group) {
  Op op;
  MD_RETURN_IF_ERROR(op.start("shm", mesh_, options_.rank, group, args));
  stage(op);
  return runChunks(op);
}

void ShmComm::stage(Op &op) const {
  const CollectiveArgs &a = *op.args;
  const Group &group = *op.group;
  if (a.kind == Collective::barrier) {
    op.chunkElems = 1;
    return;
  }
  const int64_t es = dtypeSize(a.dtype);
  const int n = group.size();
  const int me = group.index;
  const auto *send = static_cast<const char *>(a.send);
  char *recv = static_cast<char *>(a.recv);
  char *mine = slot(options_.rank);
  op.elemBytes = es;
  // Two buffers per slot (the halves, or for the all-reduce two of at
  // most kAllReduceChunkBytes at its start), where each holds at least an
  // element per block (reduce_scatter stages n blocks a chunk, the others
  // one); else the slot is one buffer.
  const int64_t blocks = a.kind == Collective::reduce_scatter ? n : 1;
  int64_t bufferBytes = options_.slotBytes / 2;
  if (a.kind == Collective::all_reduce)
    bufferBytes = std::min(bufferBytes, kAllReduceChunkBytes);
  bufferBytes = bufferBytes / 64 * 64;
  op.buffers = bufferBytes / (es * blocks) >= 1 ? 2 : 1;
  op.bufferBytes = op.buffers == 2 ? bufferBytes : options_.slotBytes;
  op.chunkElems = op.bufferBytes / (es * blocks);

  switch (a.kind) {
  case Collective::reduce_scatter: {
    // Each chunk stages n blocks, one per destination; this member's own
    // block it reads from its send buffer instead.
    const int64_t block = op.chunkElems * es;
    op.write = [=, &a](int64_t begin, int64_t len, int64_t at) {
      for (int j = 0; j < n; ++j)
        if (j != me)
          std::memcpy(mine + at + j * block,
                      send + (j * a.count + begin) * es, len * es);
    };
    op.read = [this, es, n, me, block, send, recv, &a,
               &group](int64_t begin, int64_t len, int64_t at) {
      Sources srcs(n);
      const void **p = srcs.data();
      for (int i = 0; i < n; ++i)
        p[i] = i == me ? send + (me * a.count + begin) * es
                       : slot(group.ranks[i]) + at + me * block;
      ReduceInOrder(a.dtype, a.op, p, n, recv + begin * es, len);
    };
    break;
  }
  case Collective::all_gather:
    // Every member stages its block; each copies the others' blocks out
    // of their slots, and its own from its send buffer.
    op.write = [=](int64_t begin, int64_t len, int64_t at) {
      std::memcpy(mine + at, send + begin * es, len * es);
    };
    op.read = [this, es, me, send, recv, &a, &group](int64_t begin,
                                                     int64_t len, int64_t at) {
      for (int i = 0; i < group.size(); ++i) {
        char *dst = recv + (i * a.count + begin) * es;
        const char *src =
            i == me ? send + begin * es : slot(group.ranks[i]) + at;
        if (dst != src)
          std::memcpy(dst, src, len * es);
      }
    };
    break;
  case Collective::all_reduce:
    stageAllReduce(op);
    break;
  case Collective::broadcast: {
    const bool isRoot = me == a.root;
    if (isRoot)
      op.write = [=](int64_t begin, int64_t len, int64_t at) {
        std::memcpy(mine + at, send + begin * es, len * es);
      };
    op.read = [this, es, send, recv, isRoot, &a,
               &group](int64_t begin, int64_t len, int64_t at) {
      char *dst = recv + begin * es;
      const char *src =
          isRoot ? send + begin * es : slot(group.ranks[a.root]) + at;
      if (dst != src)
        std::memmove(dst, src, len * es);
    };
    break;
  }
  case Collective::barrier:
    break;
  }
}

void ShmComm::stageAllReduce(Op &op) const {
  // A reduce-scatter and an all-gather per chunk (docs/runtime-cpu.md):
  // member j reduces slice j of the chunk from every member's slot, in
  // group order, into slice j of its own slot; then every member copies
  // the others' reduced slices. Each element is still reduced once, in
  // group order, by the same code, so every member gets the bits it would
  // have got by reducing the whole chunk itself, which is what a chunk of
  // fewer than kSplitBytes does (one synchronisation fewer, where latency
  // rules).
  const CollectiveArgs &a = *op.args;
  const Group &group = *op.group;
  const int64_t es = op.elemBytes;
  const int n = group.size();
  const int me = group.index;
  const auto *send = static_cast<const char *>(a.send);
  char *recv = static_cast<char *>(a.recv);
  char *mine = slot(options_.rank);
  // One member has nothing to split.
  op.splitElems = n == 1 ? op.chunkElems + 1 : kSplitBytes / es;
  const int64_t splitElems = op.splitElems;
  // Slice j of a chunk of len elements: [j * per, (j + 1) * per) clipped
  // to len, per a whole number of cache lines.
  const int64_t lineElems = std::max<int64_t>(1, 64 / es);
  auto slice = [n, lineElems](int64_t len, int j, int64_t *lo, int64_t *hi) {
    int64_t per = (len + n - 1) / n;
    per = (per + lineElems - 1) / lineElems * lineElems;
    *lo = std::min(len, j * per);
    *hi = std::min(len, (j + 1) * per);
  };

  op.write = [=](int64_t begin, int64_t len, int64_t at) {
    if (len < splitElems) {
      std::memcpy(mine + at, send + begin * es, len * es);
      return;
    }
    // The other members' slices: this member reads its own from its send
    // buffer.
    for (int j = 0; j < n; ++j) {
      int64_t lo, hi;
      slice(len, j, &lo, &hi);
      if (j != me && hi > lo)
        std::memcpy(mine + at + lo * es, send + (begin + lo) * es,
                    (hi - lo) * es);
    }
  };
  op.reduce = [=, &a, &group](int64_t begin, int64_t len, int64_t at) {
    int64_t lo, hi;
    slice(len, me, &lo, &hi);
    Sources srcs(n);
    const void **p = srcs.data();
    // In pieces that are still in the L1 cache when the copy to recv reads
    // them back.
    const int64_t piece = std::max<int64_t>(1, kPieceBytes / es);
    for (int64_t b = lo; b < hi; b += piece) {
      const int64_t m = std::min(piece, hi - b);
      for (int i = 0; i < n; ++i)
        p[i] = i == me ? send + (begin + b) * es
                       : slot(group.ranks[i]) + at + b * es;
      char *reduced = mine + at + b * es;
      ReduceInOrder(a.dtype, a.op, p, n, reduced, m);
      std::memcpy(recv + (begin + b) * es, reduced, m * es);
    }
  };
  op.read = [=, &a, &group](int64_t begin, int64_t len, int64_t at) {
    if (len < splitElems) {
      // Every member reduces the whole chunk itself, in group order: the
      // same additions on the same data, so the same bits everywhere.
      Sources srcs(n);
      const void **p = srcs.data();
      for (int i = 0; i < n; ++i)
        p[i] = i == me ? send + begin * es : slot(group.ranks[i]) + at;
      ReduceInOrder(a.dtype, a.op, p, n, recv + begin * es, len);
      return;
    }
    for (int i = 0; i < n; ++i) {
      int64_t lo, hi;
      slice(len, i, &lo, &hi);
      if (i != me && hi > lo)
        std::memcpy(recv + (begin + lo) * es,
                    slot(group.ranks[i]) + at + lo * es, (hi - lo) * es);
    }
  };
}

} // namespace md::shm
