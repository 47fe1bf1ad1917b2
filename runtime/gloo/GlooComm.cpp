//===- GlooComm.cpp - md's collectives on Gloo's transport ----------------===//
//
// Setup, in two rendezvous through rank 0 (Rendezvous.h):
//  1. the ranks meet (the fingerprint carries the plan, the mesh and the
//     byte order) and each learns the host it reached rank 0 from, an
//     address of its machine that the others can reach; a Gloo TCP device
//     listens there;
//  2. for each group kind whose groups have more than one rank, the rank
//     makes a Gloo context with a pair per member, and sends every pair's
//     address in one payload:
//
//       listener length u32 | listener "host:port" |
//       count u32 | count x (kind u32, to rank i32, length u32, address)
//
//     then connects each pair to the address its peer made for it.
// Gloo's own connectFullMesh would take a key-value store, but waits on it
// unevenly (rank r for the lower ranks' host names only), which an
// all-gather cannot serve; the pairs it makes are the same.
//
// A collective's header is CollectiveDesc as 48 little-endian bytes
//
//   seq u64 | collective u32 | groupKind u32 | groupSize i32 | dtype u32 |
//   reduce u32 | root i32 | count i64 | magic u64 "md-gloo1"
//
// sent to every member on a slot of its own; each member waits for the
// members' headers one by one, so a missing or lost member is known by
// rank.
//
//===----------------------------------------------------------------------===//

#include "runtime/gloo/GlooComm.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gloo/allgather.h"
#include "gloo/allgatherv.h"
#include "gloo/alltoall.h"
#include "gloo/alltoallv.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/context.h"
#include "gloo/transport/context.h"
#include "gloo/transport/pair.h"
#include "gloo/transport/tcp/address.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "runtime/core/Reduce.h"
#include "runtime/core/Status.h"
#include "runtime/net/Rendezvous.h"
#include "runtime/net/Socket.h"
#include "runtime/net/Wire.h"

namespace md::gloo {

using namespace md::runtime;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kHeaderMagic = 0x316f6f6c672d646dull; // "md-gloo1"
constexpr size_t kHeaderBytes = 48;
// The headers' slot: far above the slots of Gloo's own collectives, which
// put a small prefix in the top byte.
constexpr uint64_t kHeaderSlot = uint64_t(0xfe) << 56;
// Where a failed comm probes which of its pairs are closed.
constexpr uint64_t kProbeSlot = kHeaderSlot + 1;
// An all-reduce of at most this many bytes across the group gathers the
// whole buffers: one ring pass instead of two.
constexpr int64_t kSmallAllReduceBytes = int64_t(64) << 10;

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

/// A Gloo context whose pairs md connects itself (GlooComm::connect), as
/// Gloo's rendezvous::Context does through its store.
class PairedContext final : public ::gloo::Context {
public:
  PairedContext(int rank, int size,
                std::shared_ptr<::gloo::transport::Device> device,
                std::chrono::milliseconds timeout)
      : ::gloo::Context(rank, size) {
    setTimeout(timeout);
    device_ = std::move(device);
    transportContext_ = device_->createContext(rank, size);
    transportContext_->setTimeout(timeout);
    for (int i = 0; i < size; ++i)
      if (i != rank)
        transportContext_->createPair(i);
  }
  /// The address that member `i` connects its pair with this one to.
  std::vector<char> addressFor(int i) {
    return transportContext_->getPair(i)->address().bytes();
  }
  /// Connects the pair with member `i` to the address it made for us.
  void connect(int i, const std::vector<char> &address) {
    transportContext_->getPair(i)->connect(address);
  }
};

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
struct GlooComm::Op {
  const Group *group = nullptr;
  const CollectiveArgs *args = nullptr;
  CollectiveDesc desc;
  std::shared_ptr<::gloo::Context> context;
  int64_t es = 0; // element bytes

  int n() const { return group->size(); }
  int me() const { return group->index; }
  int64_t bytes() const { return desc.count * es; }
  const char *send() const { return static_cast<const char *>(args->send); }
  char *recv() const { return static_cast<char *>(args->recv); }
  std::string str() const { return describeCall(desc, group->str()); }
};

//===----------------------------------------------------------------------===//
// Setting up
//===----------------------------------------------------------------------===//

GlooComm::GlooComm(const GlooCommOptions &options, Mesh mesh)
    : options_(options), mesh_(mesh) {}

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
  if (options.worldSize > 1)
    MD_RETURN_IF_ERROR(comm->connect());
  return comm;
}

absl::Status GlooComm::connect() {
  const std::string prefix = absl::StrFormat("gloo: rank %d: ", options_.rank);
  const int w = options_.worldSize, me = options_.rank;
  // 1. Meet, and learn this rank's host.
  MD_ASSIGN_OR_RETURN(
      std::vector<std::string> hosts,
      net::RendezvousWithAddress(options_,
                                 [](const std::string &host) { return host; }));
  std::vector<std::string> payloads;
  std::shared_ptr<PairedContext> paired[3];
  Group groups[3];
  try {
    ::gloo::transport::tcp::attr attr;
    attr.hostname = hosts[me];
    device_ = ::gloo::transport::tcp::CreateDevice(attr);
    // 2. A context per group kind, its pairs' addresses to every rank.
    net::WireWriter out;
    std::vector<std::tuple<uint32_t, int32_t, std::vector<char>>> entries;
    for (GroupKind kind :
         {GroupKind::world, GroupKind::shard, GroupKind::replicate}) {
      const int k = static_cast<int>(kind);
      MD_ASSIGN_OR_RETURN(groups[k], meshGroup(mesh_, kind, me));
      const Group &g = groups[k];
      if (g.size() == 1 || (k > 0 && g.size() == w))
        continue; // none, or the world's
      paired[k] = std::make_shared<PairedContext>(g.index, g.size(), device_,
                                                  options_.timeout);
      for (int i = 0; i < g.size(); ++i)
        if (i != g.index)
          entries.emplace_back(k, g.ranks[i], paired[k]->addressFor(i));
    }
    // Where this device listens, for messages: any pair's address says.
    std::string listener;
    for (const auto &[k, to, address] : entries) {
      ::gloo::transport::tcp::Address a(address);
      listener = formatAddress(a.getSockaddr());
      break;
    }
    out.u32(uint32_t(listener.size())).bytes(listener);
    out.u32(uint32_t(entries.size()));
    for (const auto &[k, to, address] : entries)
      out.u32(k)
          .i32(to)
          .u32(uint32_t(address.size()))
          .bytes(std::string_view(address.data(), address.size()));
    net::RendezvousOptions o = options_;
    o.fingerprint = absl::StrCat(options_.fingerprint, "; gloo pairs");
    MD_ASSIGN_OR_RETURN(payloads, net::Rendezvous(o, out.str()));

    // Every pair's peer address, by (kind, from rank).
    std::map<std::pair<uint32_t, int>, std::vector<char>> theirs;
    for (int r = 0; r < w; ++r) {
      net::WireReader in(payloads[r]);
      addresses_.emplace_back(in.bytes(in.u32()));
      const uint32_t n = in.u32();
      for (uint32_t e = 0; e < n && in.ok(); ++e) {
        const uint32_t k = in.u32();
        const int32_t to = in.i32();
        std::string_view a = in.bytes(in.u32());
        if (to == me)
          theirs[{k, r}] = std::vector<char>(a.begin(), a.end());
      }
      if (!in.ok() || in.left() != 0)
        return absl::FailedPreconditionError(absl::StrFormat(
            "%srank %d's pair addresses are malformed (is it the same md "
            "build?)",
            prefix, r));
    }
    for (int k = 0; k < 3; ++k) {
      if (!paired[k])
        continue;
      const Group &g = groups[k];
      for (int i = 0; i < g.size(); ++i) {
        if (i == g.index)
          continue;
        auto it = theirs.find({uint32_t(k), g.ranks[i]});
        if (it == theirs.end())
          return absl::FailedPreconditionError(absl::StrFormat(
              "%srank %d sent no address for its pair with rank %d in group "
              "%s",
              prefix, g.ranks[i], me, g.str()));
        paired[k]->connect(i, it->second);
      }
    }
  } catch (const ::gloo::IoException &e) {
    return absl::UnavailableError(
        absl::StrCat(prefix, "cannot connect to the other ranks: ", e.what()));
  } catch (const std::exception &e) {
    return absl::InternalError(
        absl::StrCat(prefix, "Gloo failed to connect: ", e.what()));
  }
  for (int k = 0; k < 3; ++k)
    contexts_[k] = paired[k]               ? paired[k]
                   : groups[k].size() == w ? contexts_[0]
                                           : nullptr;
  return absl::OkStatus();
}

absl::StatusOr<Group> GlooComm::group(GroupKind kind) const {
  return meshGroup(mesh_, kind, options_.rank);
}

uint64_t GlooComm::sequence(GroupKind kind) const {
  int k = static_cast<int>(kind);
  return k >= 0 && k < 3 ? seq_[k] : 0;
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
                                 const std::exception &e, bool io) const {
  const std::string what = e.what();
  if (io && absl::StrContains(what, "Timed out"))
    return absl::DeadlineExceededError(absl::StrFormat(
        "gloo: %s (rank %d): timed out after %s in the %s: %s", op.str(),
        options_.rank, seconds(options_.timeout), phase, what));
  if (!io)
    return absl::InternalError(absl::StrFormat("gloo: %s (rank %d): %s",
                                               op.str(), options_.rank, what));
  // Gloo names the peer by its address, which may be a connection's port:
  // ask the pairs which are gone.
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
  op.group = &group;
  op.args = &args;
  op.desc = args.desc();
  MD_RETURN_IF_ERROR(checkCollectiveCall("gloo", mesh_, options_.rank, group,
                                         op.desc, args.send, args.recv));
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
  try {
    moveData(op);
  } catch (const ::gloo::IoException &e) {
    return fail(glooError(op, "data exchange", e, true));
  } catch (const std::exception &e) {
    return fail(glooError(op, "data exchange", e, false));
  }
  return absl::OkStatus();
}

absl::Status GlooComm::exchangeHeaders(const Op &op) {
  const int n = op.n(), me = op.me();
  std::string mine = encodeHeader(op.desc);
  std::vector<std::string> theirs(n, std::string(kHeaderBytes, '\0'));
  std::unique_ptr<::gloo::transport::UnboundBuffer> out;
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
    out = op.context->createUnboundBuffer(mine.data(), mine.size());
    for (int j = 0; j < n; ++j)
      if (j != me) {
        waitingFor = j;
        in[j] = op.context->createUnboundBuffer(theirs[j].data(), kHeaderBytes);
        in[j]->recv(j, kHeaderSlot);
      }
    for (int j = 0; j < n; ++j)
      if (j != me) {
        waitingFor = j;
        out->send(j, kHeaderSlot);
      }
    for (int j = 0; j < n; ++j)
      if (j != me) {
        waitingFor = j;
        in[j]->waitRecv(left());
      }
    waitingFor = -1;
    for (int j = 0; j < n - 1; ++j)
      out->waitSend(left());
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
      status = glooError(op, "header exchange", e, true);
    }
  } catch (const std::exception &e) {
    status = glooError(op, "header exchange", e, false);
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
    if (!decodeHeader(theirs[j], &d))
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

void GlooComm::moveData(const Op &op) {
  const CollectiveArgs &a = *op.args;
  const int64_t bytes = op.bytes();
  const int n = op.n(), me = op.me();
  switch (a.kind) {
  case Collective::barrier:
    // Every member's header has arrived: everyone is here.
    return;
  case Collective::all_gather: {
    char *mine = op.recv() + me * bytes;
    if (mine != op.send() && bytes > 0)
      std::memmove(mine, op.send(), bytes);
    if (n == 1 || bytes == 0)
      return;
    ::gloo::AllgatherOptions o(op.context);
    o.setOutput(op.recv(), size_t(n * bytes));
    o.setTimeout(options_.timeout);
    ::gloo::allgather(o);
    return;
  }
  case Collective::broadcast: {
    if (me == a.root && op.recv() != op.send() && bytes > 0)
      std::memmove(op.recv(), op.send(), bytes);
    if (n == 1 || bytes == 0)
      return;
    ::gloo::BroadcastOptions o(op.context);
    o.setOutput(op.recv(), size_t(bytes));
    o.setRoot(a.root);
    o.setTimeout(options_.timeout);
    ::gloo::broadcast(o);
    return;
  }
  case Collective::reduce_scatter:
    runReduceScatter(op);
    return;
  case Collective::all_reduce:
    runAllReduce(op);
    return;
  }
}

void GlooComm::runReduceScatter(const Op &op) {
  const CollectiveArgs &a = *op.args;
  const int64_t bytes = op.bytes();
  const int n = op.n();
  if (bytes == 0)
    return;
  if (n == 1) {
    ReduceInOrder(a.dtype, a.op, {op.send()}, op.recv(), a.count);
    return;
  }
  // Block i of the staging buffer: member i's contribution to this
  // member's block.
  char *stage = staging(n * bytes);
  ::gloo::AlltoallOptions o(op.context);
  o.setInput(const_cast<char *>(op.send()), size_t(n * bytes));
  o.setOutput(stage, size_t(n * bytes));
  o.setTimeout(options_.timeout);
  ::gloo::alltoall(o);
  std::vector<const void *> srcs(n);
  for (int i = 0; i < n; ++i)
    srcs[i] = stage + i * bytes;
  ReduceInOrder(a.dtype, a.op, srcs, op.recv(), a.count);
}

void GlooComm::runAllReduce(const Op &op) {
  const CollectiveArgs &a = *op.args;
  const int64_t count = a.count, es = op.es, bytes = op.bytes();
  const int n = op.n(), me = op.me();
  if (count == 0)
    return;
  if (n == 1) {
    ReduceInOrder(a.dtype, a.op, {op.send()}, op.recv(), count);
    return;
  }
  // Shards of `per` elements, the last one shorter; each must hold at
  // least one element.
  const int64_t per = (count + n - 1) / n;
  if (bytes * n <= kSmallAllReduceBytes || per * (n - 1) >= count) {
    char *stage = staging(n * bytes);
    std::memcpy(stage + me * bytes, op.send(), bytes);
    ::gloo::AllgatherOptions o(op.context);
    o.setOutput(stage, size_t(n * bytes));
    o.setTimeout(options_.timeout);
    ::gloo::allgather(o);
    std::vector<const void *> srcs(n);
    for (int i = 0; i < n; ++i)
      srcs[i] = stage + i * bytes;
    ReduceInOrder(a.dtype, a.op, srcs, op.recv(), count);
    return;
  }
  std::vector<int64_t> shardBytes(n);
  for (int j = 0; j < n; ++j)
    shardBytes[j] = (std::min(count, (j + 1) * per) - j * per) * es;
  // This member's shard from every member, then their sum in group order.
  char *stage = staging(n * shardBytes[me]);
  {
    ::gloo::AlltoallvOptions o(op.context);
    o.setInput(const_cast<char *>(op.send()), shardBytes);
    o.setOutput(stage, std::vector<int64_t>(n, shardBytes[me]));
    o.setTimeout(options_.timeout);
    ::gloo::alltoallv(o);
  }
  std::vector<const void *> srcs(n);
  for (int i = 0; i < n; ++i)
    srcs[i] = stage + i * shardBytes[me];
  ReduceInOrder(a.dtype, a.op, srcs, op.recv() + me * per * es,
                shardBytes[me] / es);
  ::gloo::AllgathervOptions o(op.context);
  o.setOutput(op.recv(),
              std::vector<size_t>(shardBytes.begin(), shardBytes.end()));
  o.setTimeout(options_.timeout);
  ::gloo::allgatherv(o);
}

} // namespace md::gloo
