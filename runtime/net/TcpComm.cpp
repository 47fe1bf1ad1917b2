//===- TcpComm.cpp - collectives as a star through each group's hub ------===//
//
// Setup: each rank listens on a free port and joins the rendezvous with
// the payload "<job> <host>:<port>" (host: the address its connection to
// rank 0 left from; rank 0: the master address). Rank 0's job, a random
// 64-bit number, names this job. Rank i connects to each rank j < i and
// sends a 32-byte hello
//
//   magic "md-tcp\r\n" | version u32 | worldSize i32 | from i32 | to i32 |
//   job u64
//
// which j checks and answers in kind; anything else connecting to j's port
// is closed. After that, every pair of ranks shares one connection.
//
// A collective is frames of a 64-byte header plus a body:
//
//   magic u32 "mdtc" | type u32 (1 call, 2 data, 3 error) | seq u64 |
//   collective u32 | groupKind u32 | groupSize i32 | dtype u32 |
//   reduce u32 | root i32 | rank i32 (the sender) | code i32 |
//   count i64 | bodyBytes u64
//
// A member sends its hub one call (the collective it is in, no body), then
// its contribution, chunk by chunk; after each chunk the hub answers with
// a data frame holding the member's result for that chunk. The hub reads
// every member's call before any data, so a desync is found before data
// are misread; it reads and writes all members at once (poll), so one
// slow member delays the others by no more than itself.
//
// Errors travel as error frames (the absl code and the message), sent
// only where the receiver expects a header: while a member is partway
// through its contribution the hub cannot tell it anything in-band, so a
// failing member closes the connection instead. A comm that fails sends
// an error frame to every peer that can take one and shuts its
// connections, so every rank that talks to it next learns why.
//
//===----------------------------------------------------------------------===//

#include "runtime/net/TcpComm.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/core/Reduce.h"
#include "runtime/core/Status.h"
#include "runtime/net/Rendezvous.h"
#include "runtime/net/Wire.h"

namespace md::net {

using namespace md::runtime;

namespace {

constexpr uint32_t kVersion = 1;
constexpr std::string_view kHelloMagic{"md-tcp\r\n", 8};
constexpr size_t kHelloBytes = 32;
constexpr uint32_t kFrameMagic = 0x6374646d; // "mdtc", little-endian
constexpr size_t kFrameBytes = 64;
constexpr size_t kMaxReport = size_t(64) << 10;

enum FrameType : uint32_t { kCall = 1, kData = 2, kError = 3 };

struct Frame {
  uint32_t type = 0;
  CollectiveDesc call;
  int32_t rank = 0;
  int32_t code = 0;
  uint64_t bodyBytes = 0;
};

std::string encodeFrame(const Frame &f) {
  WireWriter w;
  w.u32(kFrameMagic).u32(f.type).u64(f.call.seq).u32(f.call.collective);
  w.u32(f.call.groupKind).i32(f.call.groupSize).u32(f.call.dtype);
  w.u32(f.call.reduce).i32(f.call.root).i32(f.rank).i32(f.code);
  w.i64(f.call.count).u64(f.bodyBytes);
  return w.take();
}

bool decodeFrame(std::string_view bytes, Frame *f) {
  WireReader r(bytes);
  if (r.u32() != kFrameMagic)
    return false;
  f->type = r.u32();
  f->call.seq = r.u64();
  f->call.collective = r.u32();
  f->call.groupKind = r.u32();
  f->call.groupSize = r.i32();
  f->call.dtype = r.u32();
  f->call.reduce = r.u32();
  f->call.root = r.i32();
  f->rank = r.i32();
  f->code = r.i32();
  f->call.count = r.i64();
  f->bodyBytes = r.u64();
  return r.ok();
}

struct Hello {
  int32_t worldSize = 0, from = 0, to = 0;
  uint64_t job = 0;
};

std::string encodeHello(const Hello &h) {
  WireWriter w;
  w.bytes(kHelloMagic).u32(kVersion).i32(h.worldSize).i32(h.from).i32(h.to);
  w.u64(h.job);
  return w.take();
}

/// Empty when `bytes` is a hello of this version, else what is wrong.
std::string decodeHello(std::string_view bytes, Hello *h) {
  if (bytes.substr(0, kHelloMagic.size()) != kHelloMagic)
    return "not an md tcp comm hello (wrong magic)";
  WireReader r(bytes.substr(kHelloMagic.size()));
  uint32_t version = r.u32();
  h->worldSize = r.i32();
  h->from = r.i32();
  h->to = r.i32();
  h->job = r.u64();
  if (version != kVersion)
    return absl::StrFormat("a hello of wire version %d, not %d", version,
                           kVersion);
  return "";
}

std::string describeCall(const CollectiveDesc &d, const std::string &group) {
  std::string s = d.name();
  if (d.collective != uint32_t(Collective::barrier))
    absl::StrAppend(&s, "(", d.args(), ")");
  return absl::StrFormat("%s #%d on %s", s, d.seq, group);
}

absl::Status withPrefix(const absl::Status &s, const std::string &prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

absl::StatusCode codeFromWire(int32_t code) {
  return code > 0 && code <= 16 ? absl::StatusCode(code)
                                : absl::StatusCode::kUnknown;
}

int64_t spanBytes(const std::vector<absl::Span<char>> &spans) {
  int64_t n = 0;
  for (const auto &s : spans)
    n += int64_t(s.size());
  return n;
}

int64_t spanBytes(const std::vector<absl::Span<const char>> &spans) {
  int64_t n = 0;
  for (const auto &s : spans)
    n += int64_t(s.size());
  return n;
}

uint64_t randomJob() {
  std::random_device rd;
  uint64_t v = (uint64_t(rd()) << 32) ^ rd();
  v ^=
      uint64_t(Clock::now().time_since_epoch().count()) * 0x9e3779b97f4a7c15ull;
  v ^= uint64_t(getpid()) << 17;
  return v == 0 ? 1 : v;
}

} // namespace

/// One collective in flight, and where its bytes go chunk by chunk.
struct TcpComm::Op {
  const Group *group = nullptr;
  CollectiveDesc desc;
  const char *send = nullptr;
  char *recv = nullptr;
  int64_t es = 0; // element bytes

  Collective kind() const { return static_cast<Collective>(desc.collective); }
  int n() const { return group->size(); }
  int me() const { return group->index; }
  int64_t bytes(int64_t elems) const { return elems * es; }
  std::string str() const { return describeCall(desc, group->str()); }

  /// Elements of the count per chunk: a member sends at most chunkBytes
  /// per chunk.
  int64_t chunkElems(int64_t chunkBytes) const {
    if (es == 0)
      return 1;
    int64_t per = kind() == Collective::reduce_scatter ? es * n() : es;
    return std::max<int64_t>(1, chunkBytes / per);
  }

  /// What a member sends for elements [b, b + len).
  std::vector<absl::Span<const char>> memberOut(int64_t b, int64_t len) const {
    const int64_t N = desc.count;
    switch (kind()) {
    case Collective::all_reduce:
    case Collective::all_gather:
      return {{send + bytes(b), size_t(bytes(len))}};
    case Collective::reduce_scatter: {
      std::vector<absl::Span<const char>> out;
      for (int j = 0; j < n(); ++j)
        out.push_back({send + bytes(j * N + b), size_t(bytes(len))});
      return out;
    }
    case Collective::broadcast:
      if (me() == desc.root)
        return {{send + bytes(b), size_t(bytes(len))}};
      return {};
    case Collective::barrier:
      return {};
    }
    return {};
  }

  /// Where a member's result for elements [b, b + len) goes.
  std::vector<absl::Span<char>> memberIn(int64_t b, int64_t len) const {
    const int64_t N = desc.count;
    switch (kind()) {
    case Collective::all_reduce:
    case Collective::reduce_scatter:
      return {{recv + bytes(b), size_t(bytes(len))}};
    case Collective::all_gather: {
      std::vector<absl::Span<char>> in;
      for (int j = 0; j < n(); ++j)
        if (j != me())
          in.push_back({recv + bytes(j * N + b), size_t(bytes(len))});
      return in;
    }
    case Collective::broadcast:
      if (me() == desc.root)
        return {};
      return {{recv + bytes(b), size_t(bytes(len))}};
    case Collective::barrier:
      return {};
    }
    return {};
  }

  /// Where the hub puts member i's contribution to elements [b, b + len):
  /// its staging buffer for the reductions, else straight into recv.
  std::vector<absl::Span<char>>
  hubIn(int i, int64_t b, int64_t len,
        std::vector<std::vector<char>> &stage) const {
    const int64_t N = desc.count;
    switch (kind()) {
    case Collective::all_reduce:
      return {{stage[i].data(), size_t(bytes(len))}};
    case Collective::reduce_scatter:
      return {{stage[i].data(), size_t(bytes(n() * len))}};
    case Collective::all_gather:
      return {{recv + bytes(i * N + b), size_t(bytes(len))}};
    case Collective::broadcast:
      if (i == desc.root)
        return {{recv + bytes(b), size_t(bytes(len))}};
      return {};
    case Collective::barrier:
      return {};
    }
    return {};
  }

  /// The hub's reductions of elements [b, b + len), in group order: its
  /// own contribution first, then member 1's, 2's, ...
  void hubReduce(int64_t b, int64_t len,
                 const std::vector<std::vector<char>> &stage,
                 std::vector<std::vector<char>> &results) const {
    const int64_t N = desc.count;
    const auto dtype = static_cast<DType>(desc.dtype);
    const auto op = static_cast<ReduceOp>(desc.reduce);
    std::vector<const void *> srcs(n());
    if (kind() == Collective::all_reduce) {
      srcs[0] = send + bytes(b);
      for (int i = 1; i < n(); ++i)
        srcs[i] = stage[i].data();
      ReduceInOrder(dtype, op, srcs, recv + bytes(b), len);
    } else if (kind() == Collective::reduce_scatter) {
      for (int j = 0; j < n(); ++j) {
        srcs[0] = send + bytes(j * N + b);
        for (int i = 1; i < n(); ++i)
          srcs[i] = stage[i].data() + bytes(j * len);
        ReduceInOrder(dtype, op, srcs,
                      j == 0 ? recv + bytes(b) : results[j].data(), len);
      }
    }
  }

  /// What the hub sends member i for elements [b, b + len).
  std::vector<absl::Span<const char>>
  hubOut(int i, int64_t b, int64_t len,
         const std::vector<std::vector<char>> &results) const {
    const int64_t N = desc.count;
    switch (kind()) {
    case Collective::all_reduce:
      return {{recv + bytes(b), size_t(bytes(len))}};
    case Collective::reduce_scatter:
      return {{results[i].data(), size_t(bytes(len))}};
    case Collective::all_gather: {
      std::vector<absl::Span<const char>> out;
      for (int j = 0; j < n(); ++j)
        if (j != i)
          out.push_back({recv + bytes(j * N + b), size_t(bytes(len))});
      return out;
    }
    case Collective::broadcast:
      if (i == desc.root)
        return {};
      return {{recv + bytes(b), size_t(bytes(len))}};
    case Collective::barrier:
      return {};
    }
    return {};
  }
};

//===----------------------------------------------------------------------===//
// Setup
//===----------------------------------------------------------------------===//

TcpComm::TcpComm(const TcpCommOptions &options, Mesh mesh)
    : options_(options), mesh_(mesh), peers_(options.worldSize),
      partial_(options.worldSize, false) {}

TcpComm::~TcpComm() {
  if (failed_.ok())
    return;
  // Closing a socket with unread input resets the connection, and a reset
  // discards what the peer has not read yet, our error report included. So
  // a failed comm reads and drops what its peers still send (a member
  // partway through its contribution stops once it reads the report) until
  // each has closed or gone quiet, or for 2 s at most.
  const Deadline end =
      Clock::now() +
      std::min<Clock::duration>(options_.timeout, std::chrono::seconds(2));
  std::vector<pollfd> fds;
  for (const Socket &s : peers_)
    if (s.valid())
      fds.push_back({s.fd(), POLLIN, 0});
  char scratch[1 << 16];
  while (!fds.empty() && Clock::now() < end) {
    int rc = poll(fds.data(), fds.size(), std::min(100, pollTimeoutMs(end)));
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc <= 0)
      break; // quiet: closing now resets nothing
    for (pollfd &p : fds) {
      if (p.revents == 0)
        continue;
      ssize_t k;
      do
        k = recv(p.fd, scratch, sizeof scratch, MSG_DONTWAIT);
      while (k > 0);
      if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        p.fd = -1; // closed: done with it
    }
    fds.erase(std::remove_if(fds.begin(), fds.end(),
                             [](const pollfd &p) { return p.fd < 0; }),
              fds.end());
  }
}

absl::StatusOr<std::unique_ptr<TcpComm>>
TcpComm::create(const TcpCommOptions &options) {
  MD_ASSIGN_OR_RETURN(Mesh mesh,
                      commMesh("tcp", options.rank, options.worldSize,
                               options.shardSize, options.timeout));
  if (options.chunkBytes < 64 || options.chunkBytes > (int64_t(1) << 30))
    return absl::InvalidArgumentError(absl::StrFormat(
        "tcp: chunk size %d must be 64 bytes to 1 GiB", options.chunkBytes));
  if (options.masterPort < 1 || options.masterPort > 65535)
    return absl::InvalidArgumentError(absl::StrFormat(
        "tcp: master port %d is not in 1..65535", options.masterPort));

  std::unique_ptr<TcpComm> comm(new TcpComm(options, mesh));
  if (options.worldSize == 1)
    return comm;

  absl::StatusOr<Listener> listening = Listener::listen(0);
  if (!listening.ok())
    return withPrefix(listening.status(),
                      absl::StrFormat("tcp: rank %d: ", options.rank));
  Listener listener = std::move(*listening);
  RendezvousOptions ro = options;
  // Tensor data travel as raw bytes, so the byte order must agree too.
  const bool little = [] {
    uint16_t one = 1;
    uint8_t first;
    std::memcpy(&first, &one, 1);
    return first == 1;
  }();
  ro.fingerprint = absl::StrFormat(
      "tcp comm v%d, %s-endian, shard size %d, chunk %d bytes; %s", kVersion,
      little ? "little" : "big", mesh.shardSize, options.chunkBytes,
      options.fingerprint);
  const uint64_t job = randomJob();
  const int port = listener.port();
  MD_ASSIGN_OR_RETURN(std::vector<std::string> payloads,
                      RendezvousWithAddress(ro, [&](const std::string &host) {
                        return absl::StrFormat("%016x %s", job,
                                               formatHostPort(host, port));
                      }));

  uint64_t job0 = 0;
  for (int r = 0; r < options.worldSize; ++r) {
    std::vector<std::string> parts = absl::StrSplit(payloads[r], ' ');
    uint64_t j = 0;
    if (parts.size() != 2 || !absl::SimpleHexAtoi(parts[0], &j) ||
        !parseHostPort(parts[1]).ok())
      return absl::FailedPreconditionError(absl::StrFormat(
          "tcp: rank %d: rank %d's rendezvous payload '%s' is not '<job> "
          "<host>:<port>' (is it a tcp comm?)",
          options.rank, r, payloads[r]));
    if (r == 0)
      job0 = j;
    comm->addresses_.push_back(parts[1]);
  }
  MD_RETURN_IF_ERROR(comm->connectMesh(listener, job0));
  return comm;
}

absl::Status TcpComm::connectMesh(Listener &listener, uint64_t job) {
  const int me = options_.rank, w = options_.worldSize;
  const Deadline deadline = Clock::now() + options_.timeout;
  const std::string prefix = absl::StrFormat("tcp: rank %d: ", me);

  // Lower ranks first: their listeners exist since before the rendezvous,
  // so these connects complete without waiting for anyone.
  for (int j = 0; j < me; ++j) {
    auto hp = parseHostPort(addresses_[j]);
    absl::StatusOr<Socket> s = connectTo(hp->first, hp->second, deadline);
    if (!s.ok())
      return withPrefix(s.status(),
                        absl::StrFormat("%scannot reach rank %d: ", prefix, j));
    s->setPeer(absl::StrFormat("rank %d at %s", j, addresses_[j]));
    std::string hello = encodeHello({w, me, j, job});
    if (absl::Status st = s->sendAll(hello.data(), hello.size(), deadline);
        !st.ok())
      return withPrefix(st, prefix);
    peers_[j] = std::move(*s);
  }

  // Then every higher rank connects here. Anything else that connects is
  // closed; a connection that says nothing holds up no one.
  struct Pending {
    Socket socket;
    std::string buf;
    bool drop = false;
  };
  std::vector<Pending> pending;
  std::vector<std::string> refused;
  auto missing = [&] {
    std::vector<int> m;
    for (int i = me + 1; i < w; ++i)
      if (!peers_[i].valid())
        m.push_back(i);
    return m;
  };
  std::vector<pollfd> fds;
  while (!missing().empty()) {
    if (Clock::now() >= deadline) {
      std::string msg = absl::StrFormat(
          "%srank(s) %s did not connect within %s", prefix,
          absl::StrJoin(missing(), ", "), formatSeconds(options_.timeout));
      if (!refused.empty())
        absl::StrAppend(&msg, "; refused: ", absl::StrJoin(refused, "; "));
      return absl::DeadlineExceededError(msg);
    }
    fds.assign(1, pollfd{listener.fd(), POLLIN, 0});
    for (const Pending &p : pending)
      fds.push_back({p.socket.fd(), POLLIN, 0});
    int rc = poll(fds.data(), fds.size(), pollTimeoutMs(deadline));
    if (rc < 0 && errno != EINTR)
      return absl::InternalError(
          absl::StrCat(prefix, "poll: ", std::strerror(errno)));
    if (rc <= 0)
      continue;
    for (size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents == 0)
        continue;
      Pending &p = pending[k - 1];
      size_t at = p.buf.size();
      p.buf.resize(kHelloBytes);
      absl::StatusOr<size_t> got =
          p.socket.recvSome(p.buf.data() + at, kHelloBytes - at);
      p.buf.resize(at + (got.ok() ? *got : 0));
      if (!got.ok()) {
        p.drop = true;
        continue;
      }
      if (p.buf.size() < kHelloBytes)
        continue;
      Hello h;
      std::string why = decodeHello(p.buf, &h);
      if (why.empty() && h.job != job)
        why = "a hello from another job";
      if (why.empty() &&
          (h.worldSize != w || h.to != me || h.from <= me || h.from >= w))
        why = absl::StrFormat("a hello from rank %d of %d to rank %d", h.from,
                              h.worldSize, h.to);
      if (why.empty() && peers_[h.from].valid())
        why = absl::StrFormat("a second connection claiming rank %d", h.from);
      p.drop = true;
      if (!why.empty()) {
        refused.push_back(absl::StrCat(why, " from ", p.socket.peer()));
        continue;
      }
      std::string reply = encodeHello({w, me, h.from, job});
      if (absl::Status st =
              p.socket.sendAll(reply.data(), reply.size(), deadline);
          !st.ok())
        return withPrefix(st, prefix);
      p.socket.setPeer(
          absl::StrFormat("rank %d at %s", h.from, addresses_[h.from]));
      peers_[h.from] = std::move(p.socket);
    }
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [](const Pending &p) { return p.drop; }),
                  pending.end());
    if (fds[0].revents != 0) {
      for (;;) {
        MD_ASSIGN_OR_RETURN(Socket s, listener.acceptNow());
        if (!s.valid())
          break;
        if (pending.size() > size_t(4 * w + 64))
          pending.erase(pending.begin());
        pending.push_back(Pending{std::move(s), {}, false});
      }
    }
  }
  listener.close();

  // Each lower rank has answered in kind: this really is the job's rank j.
  for (int j = 0; j < me; ++j) {
    std::string buf(kHelloBytes, '\0');
    absl::Status st = peers_[j].recvAll(buf.data(), buf.size(), deadline);
    if (st.code() == absl::StatusCode::kUnavailable)
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s%s closed the connection instead of answering: it is not rank %d "
          "of this job (or it died)",
          prefix, addresses_[j], j));
    if (!st.ok())
      return withPrefix(st, prefix);
    Hello h;
    std::string why = decodeHello(buf, &h);
    if (why.empty() &&
        (h.job != job || h.from != j || h.to != me || h.worldSize != w))
      why = absl::StrFormat("it answered as rank %d of %d of another job",
                            h.from, h.worldSize);
    if (!why.empty())
      return absl::FailedPreconditionError(
          absl::StrFormat("%s%s is not rank %d of this job: %s", prefix,
                          addresses_[j], j, why));
  }
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// The protocol
//===----------------------------------------------------------------------===//

absl::StatusOr<Group> TcpComm::group(GroupKind kind) const {
  return meshGroup(mesh_, kind, options_.rank);
}

uint64_t TcpComm::sequence(GroupKind kind) const {
  int k = static_cast<int>(kind);
  return k >= 0 && k < 3 ? seq_[k] : 0;
}

absl::Status TcpComm::fail(absl::Status status) {
  failed_ = status;
  Frame f;
  f.type = kError;
  f.rank = options_.rank;
  f.code = int32_t(status.code());
  std::string msg(status.message().substr(0, kMaxReport));
  f.bodyBytes = msg.size();
  const std::string frame = encodeFrame(f) + msg;
  std::vector<Transfer> transfers;
  for (int r = 0; r < options_.worldSize; ++r)
    if (peers_[r].valid() && !partial_[r]) {
      Transfer t;
      t.socket = &peers_[r];
      t.send = {absl::Span<const char>(frame.data(), frame.size())};
      transfers.push_back(std::move(t));
    }
  // Best effort and brief: a peer that does not take it learns from the
  // closed connection instead.
  const Deadline deadline = Clock::now() + std::chrono::milliseconds(200);
  for (;;) {
    int bad = -1;
    if (exchange(transfers, deadline, &bad).ok() || bad < 0)
      break;
    transfers[bad].interrupted = true;
  }
  for (Socket &s : peers_)
    s.shutdownWrite();
  return status;
}

absl::Status TcpComm::peerError(const Op &op, const std::vector<int> &ranks,
                                const std::vector<Transfer> &transfers,
                                int failed, const absl::Status &status) const {
  if (failed < 0) {
    std::vector<int> waiting;
    for (size_t i = 0; i < transfers.size(); ++i)
      if (!transfers[i].done())
        waiting.push_back(ranks[i]);
    return absl::DeadlineExceededError(absl::StrFormat(
        "tcp: %s: rank %d timed out after %s waiting for rank(s) %s", op.str(),
        options_.rank, formatSeconds(options_.timeout),
        absl::StrJoin(waiting, ", ")));
  }
  if (status.code() == absl::StatusCode::kUnavailable)
    return absl::UnavailableError(absl::StrFormat(
        "tcp: rank %d closed its connection during %s (did it die?)",
        ranks[failed], op.str()));
  return absl::Status(status.code(),
                      absl::StrFormat("tcp: %s: rank %d: %s", op.str(),
                                      options_.rank, status.message()));
}

absl::Status TcpComm::readReport(const Op &op, int peer) {
  const Deadline deadline = Clock::now() + options_.timeout;
  std::string header(kFrameBytes, '\0');
  std::vector<Transfer> t(1);
  t[0].socket = &peers_[peer];
  t[0].recv = {absl::Span<char>(header.data(), header.size())};
  int bad = -1;
  if (absl::Status s = exchange(t, deadline, &bad); !s.ok())
    return peerError(op, {peer}, t, bad, s);
  Frame f;
  if (!decodeFrame(header, &f) || f.type != kError || f.bodyBytes > kMaxReport)
    return absl::InternalError(absl::StrFormat(
        "tcp: %s: rank %d sent a %s where an error report belongs (a "
        "desynchronised stream)",
        op.str(), peer,
        f.type == kData   ? "data frame"
        : f.type == kCall ? "call frame"
                          : "garbage"));
  std::string msg(f.bodyBytes, '\0');
  if (absl::Status s = peers_[peer].recvAll(msg.data(), msg.size(), deadline);
      !s.ok())
    return peerError(op, {peer}, t, 0, s);
  // A report about this very collective is the whole story; one about an
  // earlier collective of the peer's says why it is gone.
  if (f.call.groupKind == op.desc.groupKind && f.call.seq == op.desc.seq)
    return absl::Status(codeFromWire(f.code), msg);
  return absl::Status(codeFromWire(f.code),
                      absl::StrFormat("tcp: %s: stopped because rank %d "
                                      "failed: %s",
                                      op.str(), peer, msg));
}

absl::Status TcpComm::run(const CollectiveArgs &args, const Group &group) {
  const CollectiveDesc call = args.desc();
  MD_RETURN_IF_ERROR(checkCollectiveCall("tcp", mesh_, options_.rank, group,
                                         call, args.send, args.recv));
  if (!failed_.ok())
    return failed_;
  Op op;
  op.group = &group;
  op.desc = call;
  op.send = static_cast<const char *>(args.send);
  op.recv = static_cast<char *>(args.recv);
  const int k = static_cast<int>(op.group->kind);
  op.desc.seq = ++seq_[k];
  op.desc.groupKind = uint32_t(k);
  op.desc.groupSize = op.group->size();
  op.es = op.kind() == Collective::barrier
              ? 1
              : dtypeSize(static_cast<DType>(op.desc.dtype));
  // This rank's own share of the result, which no one sends it.
  const int64_t total = op.bytes(op.desc.count);
  if (op.kind() == Collective::all_gather) {
    char *mine = op.recv + op.me() * total;
    if (mine != op.send && total > 0)
      std::memmove(mine, op.send, total);
  }
  if (op.kind() == Collective::broadcast && op.me() == op.desc.root &&
      op.recv != op.send && total > 0)
    std::memmove(op.recv, op.send, total);
  absl::Status s = op.me() == 0 ? runHub(op) : runMember(op);
  if (!s.ok())
    return fail(s);
  return s;
}

absl::Status TcpComm::runHub(Op &op) {
  const int n = op.n();
  std::vector<int> ranks(op.group->ranks.begin() + 1, op.group->ranks.end());
  auto transfersFor = [&] {
    std::vector<Transfer> t(n - 1);
    for (int i = 1; i < n; ++i)
      t[i - 1].socket = &peers_[op.group->ranks[i]];
    return t;
  };
  auto deadline = [&] { return Clock::now() + options_.timeout; };

  // Every member's call, before any data.
  if (n > 1) {
    std::vector<std::string> headers(n - 1, std::string(kFrameBytes, '\0'));
    std::vector<Transfer> t = transfersFor();
    for (int i = 0; i < n - 1; ++i)
      t[i].recv = {absl::Span<char>(headers[i].data(), kFrameBytes)};
    int bad = -1;
    if (absl::Status s = exchange(t, deadline(), &bad); !s.ok())
      return peerError(op, ranks, t, bad, s);
    for (int i = 0; i < n - 1; ++i) {
      Frame f;
      if (!decodeFrame(headers[i], &f) || (f.type != kCall && f.type != kError))
        return absl::InternalError(absl::StrFormat(
            "tcp: %s: rank %d sent something other than a call (a "
            "desynchronised stream)",
            op.str(), ranks[i]));
      if (f.type == kError) {
        std::string msg(std::min<uint64_t>(f.bodyBytes, kMaxReport), '\0');
        (void)peers_[ranks[i]].recvAll(msg.data(), msg.size(), deadline());
        return absl::Status(codeFromWire(f.code),
                            absl::StrFormat("tcp: %s: stopped because rank %d "
                                            "failed: %s",
                                            op.str(), ranks[i], msg));
      }
      if (!(f.call == op.desc)) {
        std::string theirs;
        if (f.call.groupKind <= 2) {
          absl::StatusOr<Group> g =
              meshGroup(mesh_, GroupKind(f.call.groupKind), ranks[i]);
          theirs = describeCall(f.call, g.ok() ? g->str() : "?");
        } else {
          theirs = describeCall(
              f.call, absl::StrFormat("group kind %d", f.call.groupKind));
        }
        return absl::FailedPreconditionError(absl::StrFormat(
            "tcp: collective mismatch: rank %d called %s while rank %d "
            "called %s",
            ranks[i], theirs, options_.rank, op.str()));
      }
    }
  }

  const int64_t count = op.desc.count;
  const int64_t chunk = op.chunkElems(options_.chunkBytes);
  const int64_t chunks = count == 0 ? 1 : (count + chunk - 1) / chunk;
  std::vector<std::vector<char>> stage(n), results(n);
  if (n > 1 && (op.kind() == Collective::all_reduce ||
                op.kind() == Collective::reduce_scatter)) {
    int64_t per = op.kind() == Collective::reduce_scatter ? n : 1;
    for (int i = 1; i < n; ++i) {
      stage[i].resize(op.bytes(per * std::min(chunk, count)));
      if (op.kind() == Collective::reduce_scatter)
        results[i].resize(op.bytes(std::min(chunk, count)));
    }
  }
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * chunk, len = std::min(chunk, count - b);
    if (n > 1) {
      std::vector<Transfer> t = transfersFor();
      for (int i = 1; i < n; ++i)
        t[i - 1].recv = op.hubIn(i, b, len, stage);
      int bad = -1;
      if (absl::Status s = exchange(t, deadline(), &bad); !s.ok())
        return peerError(op, ranks, t, bad, s);
    }
    if (op.kind() == Collective::all_reduce ||
        op.kind() == Collective::reduce_scatter)
      op.hubReduce(b, len, stage, results);
    if (n == 1)
      continue;
    std::vector<std::string> headers(n - 1);
    std::vector<Transfer> t = transfersFor();
    for (int i = 1; i < n; ++i) {
      std::vector<absl::Span<const char>> out = op.hubOut(i, b, len, results);
      Frame f;
      f.type = kData;
      f.call = op.desc;
      f.rank = options_.rank;
      f.bodyBytes = uint64_t(spanBytes(out));
      headers[i - 1] = encodeFrame(f);
      t[i - 1].send = {
          absl::Span<const char>(headers[i - 1].data(), headers[i - 1].size())};
      t[i - 1].send.insert(t[i - 1].send.end(), out.begin(), out.end());
    }
    // A member that is gone does not stop the others getting their results.
    absl::Status first;
    const Deadline by = deadline();
    for (;;) {
      int bad = -1;
      absl::Status s = exchange(t, by, &bad);
      if (s.ok())
        break;
      absl::Status e = peerError(op, ranks, t, bad, s);
      if (first.ok())
        first = e;
      if (bad < 0)
        break;
      t[bad].interrupted = true;
    }
    for (int i = 1; i < n; ++i)
      partial_[ranks[i - 1]] = t[i - 1].sentPartly();
    if (!first.ok())
      return first;
  }
  return absl::OkStatus();
}

absl::Status TcpComm::runMember(Op &op) {
  const int hub = op.group->ranks[0];
  Socket &socket = peers_[hub];
  // A member waits on the hub a little longer than the hub waits on the
  // members, so that when another member is late the hub's report of it
  // arrives before this rank's own timeout.
  const auto wait =
      options_.timeout + std::min<std::chrono::milliseconds>(
                             options_.timeout, std::chrono::seconds(10));
  auto deadline = [&] { return Clock::now() + wait; };
  auto failure = [&](const std::vector<Transfer> &t, int bad,
                     const absl::Status &s) {
    if (bad < 0)
      return absl::DeadlineExceededError(absl::StrFormat(
          "tcp: %s: rank %d timed out after %s waiting for rank %d", op.str(),
          options_.rank,
          formatSeconds(
              std::chrono::duration_cast<std::chrono::milliseconds>(wait)),
          hub));
    return peerError(op, {hub}, t, bad, s);
  };

  Frame call;
  call.type = kCall;
  call.call = op.desc;
  call.rank = options_.rank;
  const std::string callFrame = encodeFrame(call);
  const int64_t count = op.desc.count;
  const int64_t chunk = op.chunkElems(options_.chunkBytes);
  const int64_t chunks = count == 0 ? 1 : (count + chunk - 1) / chunk;
  // From the call until the last byte of the contribution the hub reads
  // whatever comes as data: no error report may be sent in between.
  partial_[hub] = true;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * chunk, len = std::min(chunk, count - b);
    std::vector<Transfer> t(1);
    t[0].socket = &socket;
    if (c == 0)
      t[0].send.push_back({callFrame.data(), callFrame.size()});
    std::vector<absl::Span<const char>> out = op.memberOut(b, len);
    t[0].send.insert(t[0].send.end(), out.begin(), out.end());
    t[0].stopOnInput = true; // the hub reports an error mid-contribution
    int bad = -1;
    if (absl::Status s = exchange(t, deadline(), &bad); !s.ok())
      return failure(t, bad, s);
    if (t[0].interrupted)
      return readReport(op, hub);
    if (c == chunks - 1)
      partial_[hub] = false;

    std::string header(kFrameBytes, '\0');
    t.assign(1, Transfer{});
    t[0].socket = &socket;
    t[0].recv = {absl::Span<char>(header.data(), header.size())};
    if (absl::Status s = exchange(t, deadline(), &bad); !s.ok())
      return failure(t, bad, s);
    Frame f;
    std::vector<absl::Span<char>> in = op.memberIn(b, len);
    if (!decodeFrame(header, &f) || (f.type != kData && f.type != kError))
      return absl::InternalError(absl::StrFormat(
          "tcp: %s: rank %d sent something other than a result (a "
          "desynchronised stream)",
          op.str(), hub));
    if (f.type == kError) {
      std::string msg(std::min<uint64_t>(f.bodyBytes, kMaxReport), '\0');
      (void)socket.recvAll(msg.data(), msg.size(), deadline());
      if (f.call.groupKind == op.desc.groupKind && f.call.seq == op.desc.seq)
        return absl::Status(codeFromWire(f.code), msg);
      return absl::Status(codeFromWire(f.code),
                          absl::StrFormat("tcp: %s: stopped because rank %d "
                                          "failed: %s",
                                          op.str(), hub, msg));
    }
    if (!(f.call == op.desc) || int64_t(f.bodyBytes) != spanBytes(in))
      return absl::InternalError(absl::StrFormat(
          "tcp: %s: rank %d answered for %s with %d bytes, expected %d",
          op.str(), hub, describeCall(f.call, op.group->str()), f.bodyBytes,
          spanBytes(in)));
    t.assign(1, Transfer{});
    t[0].socket = &socket;
    t[0].recv = std::move(in);
    if (absl::Status s = exchange(t, deadline(), &bad); !s.ok())
      return failure(t, bad, s);
  }
  return absl::OkStatus();
}

} // namespace md::net
