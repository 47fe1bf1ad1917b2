//===- GlooComm.cpp - md's collectives on Gloo's transport ----------------===//
//
// Setup: the ranks meet at rank 0's rendezvous (Rendezvous.h; the
// fingerprint carries the plan, the mesh and the byte order), where each
// learns the host it reached rank 0 from, an address of its machine that
// the others can reach; a Gloo TCP device listens there. Then rank 0
// serves a key-value store (RendezvousStore.h) on the same port, and for
// each group kind whose groups have more than one rank, Gloo's
// connectFullMesh connects the group's pairs through it, each group's keys
// under "<kind>/<first rank>/". Last every rank publishes where its device
// listens ("addr/<rank>", for addresses()) and closes the store.
//
// A collective's header is CollectiveDesc as 48 little-endian bytes
//
//   seq u64 | collective u32 | groupKind u32 | groupSize i32 | dtype u32 |
//   reduce u32 | root i32 | count i64 | magic u64 "md-gloo2"
//
// sent to every member on a slot of its own; each member waits for the
// members' headers one by one, so a missing or lost member is known by
// rank. A collective whose data is one exchange of at most 32 KiB to each
// member (a barrier, an all-gather, broadcast or reduce-scatter of up to
// 32 KiB per member, an all-reduce reduced whole) appends it to the
// header: one exchange, where Gloo's hand-offs between threads are most of
// a small collective's time. Every header receive has room for that.
//
//===----------------------------------------------------------------------===//

#include "runtime/gloo/GlooComm.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/address.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "runtime/core/Reduce.h"
#include "runtime/core/Status.h"
#include "runtime/net/Rendezvous.h"
#include "runtime/net/RendezvousStore.h"
#include "runtime/net/Socket.h"
#include "runtime/net/Wire.h"

namespace md::gloo {

using namespace md::runtime;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kHeaderMagic = 0x326f6f6c672d646dull; // "md-gloo2"
constexpr size_t kHeaderBytes = 48;
// The headers' slot: far above the slots of Gloo's own collectives, which
// put a small prefix in the top byte.
constexpr uint64_t kHeaderSlot = uint64_t(0xfe) << 56;
// Where a failed comm probes which of its pairs are closed.
constexpr uint64_t kProbeSlot = kHeaderSlot + 1;
// The data's slot: each collective's transfers to a peer are matched in
// the order they are posted, as every member runs the same collectives.
constexpr uint64_t kDataSlot = kHeaderSlot + 2;
// The reduced segments of an all-reduce, sent on to the other members.
constexpr uint64_t kGatherSlot = kHeaderSlot + 3;
// An all-reduce of at most this many bytes across the group is reduced
// whole by every member: one exchange instead of two.
constexpr int64_t kSmallAllReduceBytes = int64_t(64) << 10;
// A collective whose data is one exchange of at most this many bytes to
// each member sends them with its header: one exchange in all. Every
// member's header receives have room for that much.
constexpr int64_t kInlineBytes = int64_t(32) << 10;
constexpr int64_t kHeaderRoom = int64_t(kHeaderBytes) + kInlineBytes;

/// Whether an all-reduce of `count` elements of `es` bytes on n members
/// goes whole to every member: it is small, or too short to give every
/// member a shard.
bool wholeAllReduce(int64_t count, int64_t es, int n) {
  const int64_t per = (count + n - 1) / n;
  return count * es * n <= kSmallAllReduceBytes || per * (n - 1) >= count;
}
// A reduction's pieces travel in segments: about kSegmentsPerPiece of them
// per piece, of kMinSegmentBytes to kMaxSegmentBytes each.
constexpr int64_t kSegmentsPerPiece = 4;
constexpr int64_t kMinSegmentBytes = int64_t(64) << 10;
constexpr int64_t kMaxSegmentBytes = int64_t(512) << 10;

std::string encodeHeader(const CollectiveDesc &d) {
  net::WireWriter w;
  w.u64(d.seq).u32(d.collective).u32(d.groupKind).i32(d.groupSize);
  w.u32(d.dtype).u32(d.reduce).i32(d.root).i64(d.count).u64(kHeaderMagic);
  return w.take();
}

bool decodeHeader(std::string_view bytes, CollectiveDesc *d) {
  net::WireReader r(bytes);
  d->seq = r.u64();
  d->collective = r.u32();
  d->groupKind = r.u32();
  d->groupSize = r.i32();
  d->dtype = r.u32();
  d->reduce = r.u32();
  d->root = r.i32();
  d->count = r.i64();
  return r.u64() == kHeaderMagic && r.ok();
}

/// "all_reduce #3 on world [0, 1] (f32 x 8, sum)".
std::string describeCall(const CollectiveDesc &d, const std::string &group) {
  std::string s = absl::StrFormat("%s #%d on %s", d.name(), d.seq, group);
  if (d.collective == uint32_t(Collective::barrier))
    return s;
  return absl::StrCat(s, " (", d.args(), ")");
}

std::string seconds(std::chrono::milliseconds d) {
  return net::formatSeconds(d);
}

/// What the store's errors travel as through Gloo, which knows only
/// exceptions.
struct StoreError : std::exception {
  explicit StoreError(absl::Status s) : status(std::move(s)) {}
  const char *what() const noexcept override { return "rendezvous store"; }
  absl::Status status;
};

/// Gloo's key-value store on rank 0's (RendezvousStore), its keys under a
/// prefix of their own for each group.
class Store final : public ::gloo::rendezvous::Store {
public:
  Store(net::RendezvousStore &store, std::string prefix)
      : store_(store), prefix_(std::move(prefix)) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    check(store_.set(prefix_ + key, std::string(data.begin(), data.end())));
  }
  std::vector<char> get(const std::string &key) override {
    absl::StatusOr<std::string> v = store_.get(prefix_ + key);
    check(v.status());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string> &keys) override {
    std::vector<std::string> full;
    for (const std::string &k : keys)
      full.push_back(prefix_ + k);
    check(store_.wait(full));
  }
  // The store's own timeout, the comm's, bounds every wait.
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &) override {
    wait(keys);
  }

private:
  static void check(const absl::Status &s) {
    if (!s.ok())
      throw StoreError(s);
  }
  net::RendezvousStore &store_;
  std::string prefix_;
};

/// The address of this machine that its routes to `host` leave from (a
/// UDP socket's connect sends nothing, but picks the route).
absl::StatusOr<std::string> localAddressToward(const std::string &host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo *list = nullptr;
  if (int rc = getaddrinfo(host.c_str(), "9", &hints, &list); rc != 0)
    return absl::InternalError(
        absl::StrFormat("gloo: a peer's address '%s' is not numeric: %s", host,
                        gai_strerror(rc)));
  std::string out;
  int fd = socket(list->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  const bool ok =
      fd >= 0 && connect(fd, list->ai_addr, list->ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr *>(&local), &len) == 0;
  const int err = errno;
  if (fd >= 0)
    close(fd);
  freeaddrinfo(list);
  if (!ok)
    return absl::UnavailableError(absl::StrFormat(
        "gloo: no route to a peer at %s: %s", host, strerror(err)));
  char text[INET6_ADDRSTRLEN] = "";
  const void *a =
      local.ss_family == AF_INET6
          ? static_cast<const void *>(
                &reinterpret_cast<const sockaddr_in6 *>(&local)->sin6_addr)
          : static_cast<const void *>(
                &reinterpret_cast<const sockaddr_in *>(&local)->sin_addr);
  inet_ntop(local.ss_family, a, text, sizeof text);
  return std::string(text);
}

/// Whether `host`, a numeric address, is a loopback address.
bool isLoopback(const std::string &host) {
  in_addr v4;
  in6_addr v6;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1)
    return (ntohl(v4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

/// Where rank `me` listens, given each rank's host as the rendezvous saw
/// it (rank 0's is the master address, possibly a name). A rank that
/// reached rank 0 over a loopback address (a host name that /etc/hosts
/// maps to 127.0.1.1 does that on rank 0's machine) may still have peers
/// on other machines: while any rank came from a non-loopback address, a
/// rank listens on the address its route there leaves from. Otherwise all
/// ranks share this machine; rank 0 then listens where it routes to rank 1
/// from.
absl::StatusOr<std::string> listenAddress(const std::vector<std::string> &hosts,
                                          int me) {
  for (size_t r = 1; r < hosts.size(); ++r)
    if (!isLoopback(hosts[r]))
      return int(r) == me ? hosts[r] : localAddressToward(hosts[r]);
  return me == 0 ? localAddressToward(hosts[1]) : hosts[me];
}

/// "host:port" of a socket address.
std::string formatAddress(const sockaddr_storage &ss) {
  char text[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto *in = reinterpret_cast<const sockaddr_in *>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto *in6 = reinterpret_cast<const sockaddr_in6 *>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    port = ntohs(in6->sin6_port);
  }
  return net::formatHostPort(text, port);
}

} // namespace

/// One collective in flight.
struct GlooComm::Op : HostCollectiveCall {
  std::shared_ptr<::gloo::Context> context;
  int64_t es = 0; // element bytes

  int n() const { return group->size(); }
  int me() const { return group->index; }
  int64_t bytes() const { return desc.count * es; }
  const char *send() const { return static_cast<const char *>(args->send); }
  char *recv() const { return static_cast<char *>(args->recv); }
  std::string str() const { return describeCall(desc, group->str()); }

  /// Whether the data rides with the headers: a collective whose data is
  /// one exchange of at most kInlineBytes to each member, which the call
  /// alone decides, so alike on every member.
  bool inlined() const {
    if (n() < 2)
      return false;
    switch (args->kind) {
    case Collective::barrier:
      return true;
    case Collective::all_reduce:
      if (!wholeAllReduce(desc.count, es, n()))
        return false;
      [[fallthrough]];
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::broadcast:
      return bytes() <= kInlineBytes;
    }
    return false;
  }
  /// What this member sends member j with its header then (bytes()
  /// of them), or null for nothing.
  const char *payload(int j) const {
    switch (args->kind) {
    case Collective::all_gather:
    case Collective::all_reduce:
      return send();
    case Collective::reduce_scatter:
      return send() + j * bytes();
    case Collective::broadcast:
      return me() == args->root ? send() : nullptr;
    case Collective::barrier:
      break;
    }
    return nullptr;
  }
};

//===----------------------------------------------------------------------===//
// Setting up
//===----------------------------------------------------------------------===//

GlooComm::GlooComm(const GlooCommOptions &options, Mesh mesh)
    : HostMeshComm(options.rank, mesh), options_(options) {}

GlooComm::~GlooComm() = default;

absl::StatusOr<std::unique_ptr<GlooComm>>
GlooComm::create(const GlooCommOptions &options) {
  MD_ASSIGN_OR_RETURN(Mesh mesh,
                      commMesh("gloo", options.rank, options.worldSize,
                               options.shardSize, options.timeout));
  std::unique_ptr<GlooComm> comm(new GlooComm(options, mesh));
  // Ranks of another mesh or byte order would misread each other's data.
  const uint16_t one = 1;
  uint8_t little = 0;
  std::memcpy(&little, &one, 1);
  comm->options_.fingerprint =
      absl::StrFormat("%s; gloo comm, mesh %d x %d, %s-endian",
                      options.fingerprint, mesh.worldSize / mesh.shardSize,
                      mesh.shardSize, little ? "little" : "big");
  if (options.worldSize > 1) {
    // Gloo writes to its sockets without MSG_NOSIGNAL, from its own thread
    // and the caller's: a peer that died would kill this rank with SIGPIPE
    // instead of failing the collective with its name. (Python, and so
    // PyTorch, ignores SIGPIPE from the start.)
    std::signal(SIGPIPE, SIG_IGN);
    MD_RETURN_IF_ERROR(comm->connect());
  }
  return comm;
}

absl::Status GlooComm::connect() {
  const std::string prefix = absl::StrFormat("gloo: rank %d: ", options_.rank);
  const int w = options_.worldSize, me = options_.rank;
  // Meet: the fingerprint check, and the host this rank reached rank 0
  // from.
  MD_ASSIGN_OR_RETURN(
      std::vector<std::string> hosts,
      net::RendezvousWithAddress(options_,
                                 [](const std::string &host) { return host; }));
  // Then rank 0's key-value store, where Gloo's pairs find each other.
  MD_ASSIGN_OR_RETURN(std::unique_ptr<net::RendezvousStore> store,
                      net::RendezvousStore::open(options_));
  MD_ASSIGN_OR_RETURN(std::string host, listenAddress(hosts, me));
  try {
    ::gloo::transport::tcp::attr attr;
    attr.hostname = host;
    device_ = ::gloo::transport::tcp::CreateDevice(attr);
    for (GroupKind kind :
         {GroupKind::world, GroupKind::shard, GroupKind::replicate}) {
      const int k = static_cast<int>(kind);
      MD_ASSIGN_OR_RETURN(Group g, meshGroup(mesh_, kind, me));
      if (g.size() == 1)
        continue; // no peers
      if (k > 0 && g.size() == w) {
        contexts_[k] = contexts_[0];
        continue;
      }
      auto context =
          std::make_shared<::gloo::rendezvous::Context>(g.index, g.size());
      context->setTimeout(options_.timeout);
      Store kv(*store,
               absl::StrFormat("%s/%d/", groupKindName(kind), g.ranks[0]));
      context->connectFullMesh(kv, device_);
      contexts_[k] = std::move(context);
    }
    // Where each rank's device listens (addresses()).
    const auto &address = dynamic_cast<const ::gloo::transport::tcp::Address &>(
        contexts_[0]->getPair(me == 0 ? 1 : 0)->address());
    MD_RETURN_IF_ERROR(store->set(absl::StrCat("addr/", me),
                                  formatAddress(address.getSockaddr())));
    for (int r = 0; r < w; ++r) {
      MD_ASSIGN_OR_RETURN(std::string a, store->get(absl::StrCat("addr/", r)));
      addresses_.push_back(std::move(a));
    }
  } catch (const StoreError &e) {
    return e.status;
  } catch (const ::gloo::IoException &e) {
    return absl::UnavailableError(
        absl::StrCat(prefix, "cannot connect to the other ranks: ", e.what()));
  } catch (const std::exception &e) {
    return absl::InternalError(
        absl::StrCat(prefix, "Gloo failed to connect: ", e.what()));
  }
  // Rank 0 serves the store until every rank is through.
  return store->close();
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

absl::Status GlooComm::fail(absl::Status status) {
  failed_ = status;
  // Peers blocked on this rank learn at once that it is gone. Pending
  // transfers end with the connections, before their buffers go.
  for (auto &context : contexts_)
    if (context) {
      try {
        context->closeConnections();
      } catch (const std::exception &) {
        // Closing what already failed: nothing more to say.
      }
    }
  return status;
}

std::vector<int> GlooComm::closedPeers(const Op &op) const {
  // A pair whose connection is gone fails anything posted on it at once;
  // a live one just does not complete within the millisecond.
  std::vector<int> closed;
  char scratch[1];
  for (int j = 0; j < op.n(); ++j) {
    if (j == op.me())
      continue;
    try {
      auto probe = op.context->createUnboundBuffer(scratch, sizeof scratch);
      probe->recv(j, kProbeSlot);
      probe->waitRecv(std::chrono::milliseconds(1));
    } catch (const ::gloo::IoException &e) {
      if (!absl::StrContains(e.what(), "Timed out"))
        closed.push_back(op.group->ranks[j]);
    } catch (const std::exception &) {
      closed.push_back(op.group->ranks[j]);
    }
  }
  return closed;
}

absl::Status GlooComm::glooError(const Op &op, const char *phase,
                                 const std::exception &e, bool io,
                                 int waitingFor) const {
  const std::string what = e.what();
  if (io && absl::StrContains(what, "Timed out"))
    return absl::DeadlineExceededError(absl::StrFormat(
        "gloo: %s (rank %d): timed out after %s in the %s%s: %s", op.str(),
        options_.rank, seconds(options_.timeout), phase,
        waitingFor >= 0 ? absl::StrCat(" with rank ", waitingFor) : "", what));
  if (!io)
    return absl::InternalError(absl::StrFormat("gloo: %s (rank %d): %s",
                                               op.str(), options_.rank, what));
  // Gloo names the peer by the address of a connection: ask the pairs
  // which are gone.
  std::vector<int> closed = closedPeers(op);
  if (closed.size() == 1)
    return absl::UnavailableError(absl::StrFormat(
        "gloo: rank %d closed its connection during %s (did it die?): %s",
        closed[0], op.str(), what));
  if (!closed.empty())
    return absl::UnavailableError(absl::StrFormat(
        "gloo: ranks %s closed their connections during %s (did one die?): "
        "%s",
        absl::StrJoin(closed, ", "), op.str(), what));
  return absl::UnavailableError(
      absl::StrFormat("gloo: %s (rank %d): a connection failed in the %s: %s",
                      op.str(), options_.rank, phase, what));
}

//===----------------------------------------------------------------------===//
// The collectives
//===----------------------------------------------------------------------===//

char *GlooComm::staging(int64_t bytes) {
  if (int64_t(staging_.size()) < bytes)
    staging_.resize(bytes);
  return staging_.data();
}

absl::Status GlooComm::run(const CollectiveArgs &args, const Group &group) {
  Op op;
  MD_RETURN_IF_ERROR(op.start("gloo", mesh_, options_.rank, group, args));
  if (!failed_.ok())
    return failed_;
  const int k = static_cast<int>(group.kind);
  op.desc.seq = ++seq_[k];
  op.desc.groupKind = uint32_t(k);
  op.desc.groupSize = group.size();
  op.es = args.kind == Collective::barrier ? 0 : dtypeSize(args.dtype);
  op.context = contexts_[k];
  if (group.size() > 1) {
    if (op.context == nullptr)
      return absl::InternalError(
          absl::StrFormat("gloo: rank %d has no connections for group %s",
                          options_.rank, group.str()));
    if (absl::Status s = exchangeHeaders(op); !s.ok())
      return fail(s);
  }
  int waitingFor = -1;
  try {
    if (op.inlined())
      finishInline(op);
    else
      moveData(op, &waitingFor);
  } catch (const ::gloo::IoException &e) {
    return fail(glooError(op, "data exchange", e, true, waitingFor));
  } catch (const std::exception &e) {
    return fail(glooError(op, "data exchange", e, false, waitingFor));
  }
  return absl::OkStatus();
}

absl::Status GlooComm::exchangeHeaders(const Op &op) {
  const int n = op.n(), me = op.me();
  // What goes to member j: the header, then with inlined data its
  // payload. The same message goes to every member but for a
  // reduce_scatter, whose members get a block each.
  const bool inlined = op.inlined();
  const bool perMember =
      inlined && op.args->kind == Collective::reduce_scatter;
  const int64_t payload = inlined ? op.bytes() : 0;
  const int64_t msg = int64_t(kHeaderBytes) + payload;
  const std::string header = encodeHeader(op.desc);
  headerOut_.resize((perMember ? n : 1) * msg);
  auto message = [&](int j) {
    return headerOut_.data() + (perMember ? j * msg : 0);
  };
  for (int j = 0; j < (perMember ? n : 1); ++j) {
    if (perMember && j == me)
      continue;
    char *m = message(j);
    std::memcpy(m, header.data(), kHeaderBytes);
    if (const char *p = op.payload(j); inlined && p != nullptr && payload > 0)
      std::memcpy(m + kHeaderBytes, p, payload);
  }
  // A broadcast's other members send their headers alone.
  const int64_t sentBytes =
      op.args->kind == Collective::broadcast && me != op.args->root
          ? int64_t(kHeaderBytes)
          : msg;
  // Every member's header with room for any inlined data.
  headerIn_.resize(n * kHeaderRoom);
  auto theirs = [&](int j) { return headerIn_.data() + j * kHeaderRoom; };
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> out(n);
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> in(n);
  const auto deadline = Clock::now() + options_.timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - Clock::now()));
  };
  // Which member the exchange was waiting for when it failed, and why.
  int waitingFor = -1;
  absl::Status status;
  try {
    for (int j = 0; j < n; ++j)
      if (j != me) {
        waitingFor = j;
        in[j] = op.context->createUnboundBuffer(theirs(j), kHeaderRoom);
        in[j]->recv(j, kHeaderSlot);
      }
    for (int j = 0; j < n; ++j)
      if (j != me) {
        waitingFor = j;
        const int to = perMember ? j : 0;
        if (!out[to])
          out[to] = op.context->createUnboundBuffer(message(j), sentBytes);
        out[to]->send(j, kHeaderSlot);
      }
    for (int j = 0; j < n; ++j)
      if (j != me) {
        waitingFor = j;
        in[j]->waitRecv(left());
      }
    waitingFor = -1;
    for (int j = 0; j < n; ++j)
      if (j != me)
        out[perMember ? j : 0]->waitSend(left());
  } catch (const ::gloo::IoException &e) {
    const std::string what = e.what();
    if (waitingFor >= 0 && absl::StrContains(what, "Timed out")) {
      // Who else has not arrived: a brief look at the other members.
      std::vector<int> missing = {op.group->ranks[waitingFor]};
      for (int j = waitingFor + 1; j < n; ++j) {
        if (j == me)
          continue;
        try {
          in[j]->waitRecv(std::chrono::milliseconds(1));
        } catch (const std::exception &) {
          missing.push_back(op.group->ranks[j]);
        }
      }
      status = absl::DeadlineExceededError(absl::StrFormat(
          "gloo: %s (rank %d): timed out after %s waiting for rank(s) %s to "
          "arrive",
          op.str(), options_.rank, seconds(options_.timeout),
          absl::StrJoin(missing, ", ")));
    } else {
      status = glooError(op, "header exchange", e, true, -1);
    }
  } catch (const std::exception &e) {
    status = glooError(op, "header exchange", e, false, -1);
  }
  if (!status.ok()) {
    // fail() closes the connections, which ends the transfers still
    // pending into `in` and from `out` before those buffers go.
    return fail(status);
  }
  for (int j = 0; j < n; ++j) {
    if (j == me)
      continue;
    CollectiveDesc d;
    if (!decodeHeader(std::string_view(theirs(j), kHeaderBytes), &d))
      return absl::InternalError(absl::StrFormat(
          "gloo: %s (rank %d): rank %d sent a malformed header (is it the "
          "same md build?)",
          op.str(), options_.rank, op.group->ranks[j]));
    if (!(d == op.desc)) {
      // The peer's group, as its header names it.
      std::string theirs = "group kind ?";
      if (d.groupKind <= 2) {
        absl::StatusOr<Group> pg = meshGroup(
            mesh_, static_cast<GroupKind>(d.groupKind), op.group->ranks[j]);
        theirs = pg.ok() ? pg->str() : groupKindName(GroupKind(d.groupKind));
      }
      return absl::FailedPreconditionError(absl::StrFormat(
          "gloo: collective mismatch on group %s: rank %d is in %s, rank %d "
          "is in %s",
          op.group->str(), options_.rank, op.str(), op.group->ranks[j],
          describeCall(d, theirs)));
    }
  }
  return absl::OkStatus();
}

void GlooComm::finishInline(const Op &op) {
  const CollectiveArgs &a = *op.args;
  const int n = op.n(), me = op.me();
  const int64_t bytes = op.bytes();
  // Member i's payload, after its header.
  auto from = [&](int i) -> const char * {
    return headerIn_.data() + i * kHeaderRoom + kHeaderBytes;
  };
  switch (a.kind) {
  case Collective::barrier:
    return;
  case Collective::all_gather:
    for (int i = 0; i < n; ++i) {
      char *dst = op.recv() + i * bytes;
      const char *src = i == me ? op.send() : from(i);
      if (dst != src && bytes > 0)
        std::memmove(dst, src, bytes);
    }
    return;
  case Collective::broadcast: {
    const char *src = me == a.root ? op.send() : from(a.root);
    if (op.recv() != src && bytes > 0)
      std::memmove(op.recv(), src, bytes);
    return;
  }
  case Collective::reduce_scatter:
  case Collective::all_reduce: {
    if (a.count == 0)
      return;
    // In group order; this member's part from its send buffer (what it
    // sent went out of a copy, so in place is safe).
    std::vector<const void *> srcs(n);
    for (int i = 0; i < n; ++i)
      srcs[i] = i != me ? from(i)
                : a.kind == Collective::reduce_scatter ? op.send() + me * bytes
                                                        : op.send();
    ReduceInOrder(a.dtype, a.op, srcs, op.recv(), a.count);
    return;
  }
  }
}

void GlooComm::exchange(const Op &op, const std::vector<Transfer> &transfers,
                        int *waitingFor) {
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> in, out;
  std::vector<int> inFrom, outTo;
  // Receives first, so that every send finds its receive posted.
  for (const Transfer &t : transfers)
    if (t.recvBytes > 0) {
      in.push_back(op.context->createUnboundBuffer(t.recv, t.recvBytes));
      in.back()->recv(t.peer, kDataSlot);
      inFrom.push_back(t.peer);
    }
  for (const Transfer &t : transfers)
    if (t.sendBytes > 0) {
      out.push_back(op.context->createUnboundBuffer(const_cast<char *>(t.send),
                                                    t.sendBytes));
      out.back()->send(t.peer, kDataSlot);
      outTo.push_back(t.peer);
    }
  const auto deadline = Clock::now() + options_.timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - Clock::now()));
  };
  for (size_t i = 0; i < in.size(); ++i) {
    *waitingFor = op.group->ranks[inFrom[i]];
    in[i]->waitRecv(left());
  }
  for (size_t i = 0; i < out.size(); ++i) {
    *waitingFor = op.group->ranks[outTo[i]];
    out[i]->waitSend(left());
  }
  *waitingFor = -1;
}

void GlooComm::moveData(const Op &op, int *waitingFor) {
  const CollectiveArgs &a = *op.args;
  const int64_t bytes = op.bytes();
  const int n = op.n(), me = op.me();
  if (a.kind == Collective::barrier)
    return; // every member's header has arrived: everyone is here
  if (a.kind == Collective::reduce_scatter || a.kind == Collective::all_reduce)
    return reduce(op, waitingFor);
  std::vector<Transfer> t;
  if (a.kind == Collective::all_gather) {
    // This member's block goes to every other; theirs land in place.
    char *mine = op.recv() + me * bytes;
    if (mine != op.send() && bytes > 0)
      std::memmove(mine, op.send(), bytes);
    for (int j = 0; j < n; ++j)
      if (j != me)
        t.push_back(
            {j, mine, size_t(bytes), op.recv() + j * bytes, size_t(bytes)});
  } else { // broadcast: the root sends its buffer to every other member
    const bool root = me == a.root;
    if (root && op.recv() != op.send() && bytes > 0)
      std::memmove(op.recv(), op.send(), bytes);
    for (int j = 0; j < n; ++j)
      if (j != me && (root || j == a.root))
        t.push_back({j, root ? op.recv() : nullptr, root ? size_t(bytes) : 0,
                     root ? nullptr : op.recv(), root ? 0 : size_t(bytes)});
  }
  if (n > 1)
    exchange(op, t, waitingFor);
}

void GlooComm::reduce(const Op &op, int *waitingFor) {
  const CollectiveArgs &a = *op.args;
  const int64_t count = a.count, es = op.es;
  const int n = op.n(), me = op.me();
  if (count == 0)
    return;
  if (n == 1) {
    ReduceInOrder(a.dtype, a.op, {op.send()}, op.recv(), count);
    return;
  }
  // Each member's piece of the reduction: the elements [begin[j],
  // begin[j] + len[j]) of every member's contribution are summed on member
  // j. reduce_scatter's pieces are its blocks; all_reduce's are shards of
  // ceil(count / n) elements (the last one shorter), unless it is small or
  // too short to give every member one, when every member reduces it all.
  std::vector<int64_t> begin(n), len(n);
  const int64_t per = (count + n - 1) / n;
  const bool whole =
      a.kind == Collective::all_reduce && wholeAllReduce(count, es, n);
  for (int j = 0; j < n; ++j) {
    if (a.kind == Collective::reduce_scatter) {
      begin[j] = j * count;
      len[j] = count;
    } else if (whole) {
      begin[j] = 0;
      len[j] = count;
    } else {
      begin[j] = j * per;
      len[j] = std::min(count, (j + 1) * per) - j * per;
    }
  }
  const bool gather = a.kind == Collective::all_reduce && !whole;
  // The pieces go in segments of segElems elements (the same on every
  // member: it depends on the call alone), so that a member reduces one
  // segment while the next ones are on the wire, and sends each reduced
  // segment of an all_reduce on as soon as it has it.
  const int64_t widest = whole || a.kind == Collective::reduce_scatter
                             ? count
                             : per;
  const int64_t segElems = std::clamp<int64_t>(
      (widest + kSegmentsPerPiece - 1) / kSegmentsPerPiece,
      std::max<int64_t>(1, kMinSegmentBytes / es),
      std::max<int64_t>(1, kMaxSegmentBytes / es));
  auto segments = [&](int j) { return (len[j] + segElems - 1) / segElems; };
  auto segLen = [&](int j, int64_t s) {
    return std::min(segElems, len[j] - s * segElems);
  };

  // Row r of the staging buffer: what member i (r = i, less one past this
  // member) sends for this member's piece.
  const int64_t piece = len[me] * es;
  char *stage = staging((n - 1) * piece);
  auto row = [&](int i) { return stage + (i < me ? i : i - 1) * piece; };
  // Where this member's reduced piece goes: reduce_scatter's result, or its
  // shard of all_reduce's (all of it when whole).
  char *out = a.kind == Collective::reduce_scatter ? op.recv()
                                                   : op.recv() + begin[me] * es;
  const int64_t sendBytes =
      (a.kind == Collective::reduce_scatter ? n * count : count) * es;

  auto &ctx = *op.context;
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> in(n),
      gathered(n);
  // Receives first, so that every send finds its receive posted: the
  // pieces' segments from every other member, and for all_reduce the other
  // members' reduced segments, straight into recv.
  for (int i = 0; i < n; ++i) {
    if (i == me)
      continue;
    in[i] = ctx.createUnboundBuffer(row(i), piece);
    for (int64_t s = 0; s < segments(me); ++s)
      in[i]->recv(i, kDataSlot, s * segElems * es, segLen(me, s) * es);
    if (gather) {
      gathered[i] =
          ctx.createUnboundBuffer(op.recv() + begin[i] * es, len[i] * es);
      for (int64_t s = 0; s < segments(i); ++s)
        gathered[i]->recv(i, kGatherSlot, s * segElems * es,
                          segLen(i, s) * es);
    }
  }
  // This member's contributions to the others' pieces, segment by segment
  // to every member in turn, from the send buffer.
  auto sent = ctx.createUnboundBuffer(const_cast<char *>(op.send()), sendBytes);
  int64_t sends = 0;
  int64_t most = 0;
  for (int j = 0; j < n; ++j)
    most = std::max(most, segments(j));
  for (int64_t s = 0; s < most; ++s)
    for (int j = 0; j < n; ++j)
      if (j != me && s < segments(j)) {
        sent->send(j, kDataSlot, (begin[j] + s * segElems) * es,
                   segLen(j, s) * es);
        ++sends;
      }

  const auto deadline = Clock::now() + options_.timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - Clock::now()));
  };
  // An all-reduce reduced whole and in place overwrites what it sends:
  // the sends must be out of the buffer first. (Elsewhere this member's
  // piece is no part of what it sends; an all-gather segment lands where a
  // member's sends to its sender are through, as that member reduced the
  // segment only once they had arrived.)
  if (whole && op.recv() == op.send()) {
    for (; sends > 0; --sends)
      sent->waitSend(left());
  }
  // Reduce segment by segment, in group order, as the segments arrive.
  std::unique_ptr<::gloo::transport::UnboundBuffer> reduced;
  if (gather)
    reduced = ctx.createUnboundBuffer(out, piece);
  std::vector<const void *> srcs(n);
  for (int64_t s = 0; s < segments(me); ++s) {
    for (int i = 0; i < n; ++i)
      if (i != me) {
        *waitingFor = op.group->ranks[i];
        in[i]->waitRecv(left());
      }
    const int64_t off = s * segElems, m = segLen(me, s);
    for (int i = 0; i < n; ++i)
      srcs[i] = i == me ? op.send() + (begin[me] + off) * es
                        : row(i) + off * es;
    ReduceInOrder(a.dtype, a.op, srcs, out + off * es, m);
    if (gather)
      for (int j = 0; j < n; ++j)
        if (j != me)
          reduced->send(j, kGatherSlot, off * es, m * es);
  }
  // The others' reduced segments, then the sends' completions.
  for (int i = 0; gather && i < n; ++i)
    if (i != me) {
      *waitingFor = op.group->ranks[i];
      for (int64_t s = 0; s < segments(i); ++s)
        gathered[i]->waitRecv(left());
    }
  *waitingFor = -1;
  for (int64_t k = 0; k < sends; ++k)
    sent->waitSend(left());
  for (int64_t k = 0; gather && k < (n - 1) * segments(me); ++k)
    reduced->waitSend(left());
}

} // namespace md::gloo
