//===- Rendezvous.cpp - an all-gather of small blobs through rank 0 -------===//
//
// Every message is a 40-byte header, then its body:
//
//   magic      8 bytes "md-rdzv\n"
//   version    u32     1
//   kind       u32     1 hello (rank -> 0), 2 welcome (0 -> rank),
//                      3 refusal (0 -> rank or stray connection)
//   rank       i32     hello: the sender's rank
//   worldSize  i32     hello: the sender's world size
//   code       i32     refusal: the absl::StatusCode of the error
//   fpBytes    u32     hello: bytes of fingerprint after the header
//   bodyBytes  u64     hello: the payload; welcome: worldSize times (u32
//                      length, bytes), rank order; refusal: the message
//
// all integers little-endian. Rank 0 serves every connection at once from
// one poll() loop, so a connection that sends nothing (a port scanner) holds
// up nobody; a connection whose first bytes are not the magic, or that
// speaks another version, is answered with a refusal and dropped, and the
// rendezvous goes on.
//
//===----------------------------------------------------------------------===//

#include "runtime/net/Rendezvous.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/net/Socket.h"
#include "runtime/net/Wire.h"

namespace md::net {

namespace {

constexpr std::string_view kMagic{"md-rdzv\n", 8};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 40;
constexpr size_t kMaxMessage = size_t(64) << 10;

enum Kind : uint32_t { kHello = 1, kWelcome = 2, kRefusal = 3 };

struct Header {
  uint32_t version = kVersion;
  uint32_t kind = 0;
  int32_t rank = 0;
  int32_t worldSize = 0;
  int32_t code = 0;
  uint32_t fpBytes = 0;
  uint64_t bodyBytes = 0;
};

std::string encode(const Header &h) {
  WireWriter w;
  w.bytes(kMagic).u32(h.version).u32(h.kind).i32(h.rank).i32(h.worldSize);
  w.i32(h.code).u32(h.fpBytes).u64(h.bodyBytes);
  return w.take();
}

/// The header after the magic, which the caller has checked.
Header decode(std::string_view bytes) {
  WireReader r(bytes.substr(kMagic.size()));
  Header h;
  h.version = r.u32();
  h.kind = r.u32();
  h.rank = r.i32();
  h.worldSize = r.i32();
  h.code = r.i32();
  h.fpBytes = r.u32();
  h.bodyBytes = r.u64();
  return h;
}

/// Whether `prefix` (any length) can start a message.
bool magicMatches(std::string_view prefix) {
  size_t n = std::min(prefix.size(), kMagic.size());
  return prefix.substr(0, n) == kMagic.substr(0, n);
}

std::string refusalMessage(absl::StatusCode code, std::string message) {
  std::string body = message.substr(0, kMaxMessage);
  Header h;
  h.kind = kRefusal;
  h.code = int32_t(code);
  h.bodyBytes = body.size();
  return encode(h) + body;
}

/// A fingerprint for a message: quoted, escaped, and cut to a readable
/// length.
std::string quote(const std::string &fp) {
  std::string s = absl::CHexEscape(fp.substr(0, 200));
  return absl::StrCat("\"", s, fp.size() > 200 ? "...\"" : "\"");
}

absl::Status withPrefix(const absl::Status &s, const std::string &prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

/// Sends `bytes` to every socket at once; returns the indices of the
/// sockets it could not reach before the deadline.
std::vector<int> sendToAll(const std::vector<Socket *> &sockets,
                           const std::string &bytes, Deadline deadline) {
  std::vector<Transfer> transfers(sockets.size());
  for (size_t i = 0; i < sockets.size(); ++i) {
    transfers[i].socket = sockets[i];
    transfers[i].send = {absl::Span<const char>(bytes.data(), bytes.size())};
  }
  std::vector<int> failed;
  for (;;) {
    int bad = -1;
    absl::Status s = exchange(transfers, deadline, &bad);
    if (s.ok())
      break;
    if (bad < 0) { // the deadline: whoever has not got it all
      for (size_t i = 0; i < transfers.size(); ++i)
        if (!transfers[i].done())
          failed.push_back(int(i));
      break;
    }
    failed.push_back(bad);
    transfers[bad].interrupted = true; // done with it; go on with the rest
  }
  std::sort(failed.begin(), failed.end());
  return failed;
}

/// Reads what is left of a refused connection's input, so that closing it
/// does not reset the connection before the refusal is read.
void drain(Socket &s) {
  char scratch[4096];
  for (int i = 0; i < 16; ++i) {
    absl::StatusOr<size_t> k = s.recvSome(scratch, sizeof scratch);
    if (!k.ok() || *k == 0)
      break;
  }
}

//===----------------------------------------------------------------------===//
// Rank 0
//===----------------------------------------------------------------------===//

class Host {
public:
  Host(const RendezvousOptions &o, std::string payload)
      : o_(o), payload0_(std::move(payload)), arrived_(o.worldSize),
        heard_(o.worldSize, false) {}

  absl::StatusOr<std::vector<std::string>> run();

private:
  struct Pending {
    Socket socket;
    std::string buf;
    bool drop = false;
  };
  struct Arrival {
    Socket socket;
    std::string fingerprint, payload;
  };

  void read(Pending &p);
  void arrive(Pending &p);
  void refuse(Pending &p, const std::string &why);
  absl::Status fingerprintMismatch() const;
  int missing() const;

  const RendezvousOptions &o_;
  std::string payload0_;
  std::vector<std::optional<Arrival>> arrived_;
  std::vector<bool> heard_;    // some connection claimed this rank
  std::vector<Socket> toTell_; // bad hellos: told the error at the end
  absl::Status invalid_;
  std::vector<std::string> refused_;
  Deadline deadline_;
};

int Host::missing() const {
  int n = 0;
  for (int r = 1; r < o_.worldSize; ++r)
    n += !heard_[r];
  return n;
}

void Host::refuse(Pending &p, const std::string &why) {
  refused_.push_back(absl::StrFormat("%s from %s", why, p.socket.peer()));
  std::string msg = refusalMessage(
      absl::StatusCode::kFailedPrecondition,
      absl::StrFormat("refused by rank 0 of an md rendezvous (wire version "
                      "%d) on port %d: %s",
                      kVersion, o_.masterPort, why));
  drain(p.socket);
  (void)p.socket.sendAll(
      msg.data(), msg.size(),
      std::min(deadline_, Clock::now() + std::chrono::milliseconds(200)));
  p.socket.shutdownWrite();
  drain(p.socket);
  p.drop = true;
}

void Host::read(Pending &p) {
  for (;;) {
    size_t need = kHeaderBytes;
    if (p.buf.size() >= kHeaderBytes) {
      Header h = decode(p.buf);
      need += h.fpBytes + h.bodyBytes;
    }
    if (p.buf.size() == need) {
      arrive(p);
      return;
    }
    size_t at = p.buf.size();
    p.buf.resize(need);
    absl::StatusOr<size_t> k = p.socket.recvSome(p.buf.data() + at, need - at);
    p.buf.resize(at + (k.ok() ? *k : 0));
    if (!k.ok()) { // gone before it said anything useful
      p.drop = true;
      return;
    }
    if (*k == 0)
      return;
    if (!magicMatches(p.buf)) {
      refuse(p, "not an md rendezvous hello (wrong magic)");
      return;
    }
    if (p.buf.size() >= kHeaderBytes && at < kHeaderBytes) {
      Header h = decode(p.buf);
      if (h.version != kVersion) {
        refuse(p, absl::StrFormat("a hello of wire version %d, not %d (are "
                                  "all ranks the same md build?)",
                                  h.version, kVersion));
        return;
      }
      if (h.kind != kHello) {
        refuse(p, absl::StrFormat("a message of kind %d, not a hello", h.kind));
        return;
      }
      if (h.fpBytes > kMaxRendezvousFingerprint ||
          h.bodyBytes > kMaxRendezvousPayload) {
        refuse(p, absl::StrFormat("a hello of %d + %d bytes, over the limits "
                                  "of %d and %d",
                                  h.fpBytes, h.bodyBytes,
                                  kMaxRendezvousFingerprint,
                                  kMaxRendezvousPayload));
        return;
      }
    }
  }
}

void Host::arrive(Pending &p) {
  Header h = decode(p.buf);
  std::string_view rest = std::string_view(p.buf).substr(kHeaderBytes);
  const std::string &peer = p.socket.peer();
  const int w = o_.worldSize;
  auto bad = [&](std::string msg) {
    if (invalid_.ok())
      invalid_ = absl::InvalidArgumentError(absl::StrCat("rendezvous: ", msg));
    toTell_.push_back(std::move(p.socket));
    p.drop = true;
  };
  if (h.rank > 0 && h.rank < w)
    heard_[h.rank] = true;
  if (h.worldSize != w)
    return bad(absl::StrFormat("rank %d (at %s) has world size %d, rank 0 "
                               "has %d",
                               h.rank, peer, h.worldSize, w));
  if (h.rank == 0)
    return bad(absl::StrFormat("rank 0 arrived twice: this process is rank "
                               "0, and %s claims rank 0 too",
                               peer));
  if (h.rank < 0 || h.rank >= w)
    return bad(absl::StrFormat("%s claims rank %d, outside world size %d", peer,
                               h.rank, w));
  if (arrived_[h.rank])
    return bad(absl::StrFormat("rank %d arrived twice, from %s and from %s",
                               h.rank, arrived_[h.rank]->socket.peer(), peer));
  Arrival a;
  a.fingerprint = std::string(rest.substr(0, h.fpBytes));
  a.payload = std::string(rest.substr(h.fpBytes));
  a.socket = std::move(p.socket);
  arrived_[h.rank] = std::move(a);
  p.drop = true; // no longer pending
}

absl::Status Host::fingerprintMismatch() const {
  std::map<std::string, std::vector<int>> byValue;
  byValue[o_.fingerprint].push_back(0);
  for (int r = 1; r < o_.worldSize; ++r)
    if (arrived_[r])
      byValue[arrived_[r]->fingerprint].push_back(r);
  if (byValue.size() <= 1)
    return absl::OkStatus();
  // The odd ranks are those outside the largest group of equal values
  // (rank 0's on a tie).
  const std::vector<int> *common = &byValue[o_.fingerprint];
  for (const auto &[value, ranks] : byValue)
    if (ranks.size() > common->size())
      common = &ranks;
  std::vector<int> odd;
  int total = 0;
  for (const auto &[value, ranks] : byValue) {
    total += int(ranks.size());
    if (&ranks != common)
      odd.insert(odd.end(), ranks.begin(), ranks.end());
  }
  std::sort(odd.begin(), odd.end());
  auto valueOf = [&](int r) -> const std::string & {
    return r == 0 ? o_.fingerprint : arrived_[r]->fingerprint;
  };
  int ref = common->front();
  std::string msg = absl::StrFormat(
      "rendezvous: fingerprint mismatch: rank %d has %s, but rank %d has %s",
      odd.front(), quote(valueOf(odd.front())), ref, quote(valueOf(ref)));
  if (odd.size() > 1)
    absl::StrAppendFormat(&msg, " (ranks %s differ from the other %d)",
                          absl::StrJoin(odd, ", "), total - int(odd.size()));
  return absl::FailedPreconditionError(msg);
}

absl::StatusOr<std::vector<std::string>> Host::run() {
  deadline_ = Clock::now() + o_.timeout;
  absl::StatusOr<Listener> listener = Listener::listen(o_.masterPort);
  if (!listener.ok())
    return withPrefix(listener.status(), "rendezvous: rank 0: ");
  const size_t maxPending = 64 + 4 * size_t(o_.worldSize);
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  while (missing() > 0) {
    fds.assign(1, pollfd{listener->fd(), POLLIN, 0});
    for (const Pending &p : pending)
      fds.push_back({p.socket.fd(), POLLIN, 0});
    if (Clock::now() >= deadline_)
      break;
    int rc = poll(fds.data(), fds.size(), pollTimeoutMs(deadline_));
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc < 0)
      return absl::InternalError(
          absl::StrCat("rendezvous: rank 0: poll: ", std::strerror(errno)));
    if (rc == 0)
      break; // the deadline
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0)
        read(pending[i - 1]);
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [](const Pending &p) { return p.drop; }),
                  pending.end());
    if (fds[0].revents != 0) {
      for (;;) {
        absl::StatusOr<Socket> s = listener->acceptNow();
        if (!s.ok())
          return withPrefix(s.status(), "rendezvous: rank 0: ");
        if (!s->valid())
          break;
        if (pending.size() >= maxPending) // the oldest, likely idle, goes
          pending.erase(pending.begin());
        pending.push_back(Pending{std::move(*s), {}, false});
      }
    }
  }
  // Done listening: the port is free for the next rendezvous at once.
  listener->close();
  pending.clear();

  absl::Status error = invalid_;
  if (error.ok())
    error = fingerprintMismatch();
  if (error.ok() && missing() > 0) {
    std::vector<int> absent;
    for (int r = 1; r < o_.worldSize; ++r)
      if (!heard_[r])
        absent.push_back(r);
    std::string msg = absl::StrFormat(
        "rendezvous: rank(s) %s did not arrive at rank 0 (port %d) within %s",
        absl::StrJoin(absent, ", "), o_.masterPort, formatSeconds(o_.timeout));
    if (!refused_.empty())
      absl::StrAppendFormat(&msg, "; refused %d connection(s): %s",
                            refused_.size(), absl::StrJoin(refused_, "; "));
    error = absl::DeadlineExceededError(msg);
  }

  std::vector<Socket *> sockets;
  std::vector<int> ranks;
  for (int r = 1; r < o_.worldSize; ++r)
    if (arrived_[r]) {
      sockets.push_back(&arrived_[r]->socket);
      ranks.push_back(r);
    }
  if (!error.ok()) {
    for (Socket &s : toTell_)
      sockets.push_back(&s);
    sendToAll(sockets,
              refusalMessage(error.code(), std::string(error.message())),
              Clock::now() + std::min<Clock::duration>(
                                 o_.timeout, std::chrono::seconds(2)));
    return error;
  }

  WireWriter body;
  std::vector<std::string> payloads(o_.worldSize);
  payloads[0] = std::move(payload0_);
  for (int r = 1; r < o_.worldSize; ++r)
    payloads[r] = std::move(arrived_[r]->payload);
  for (const std::string &p : payloads)
    body.u32(uint32_t(p.size())).bytes(p);
  Header h;
  h.kind = kWelcome;
  h.worldSize = o_.worldSize;
  h.bodyBytes = body.str().size();
  std::vector<int> failed =
      sendToAll(sockets, encode(h) + body.str(), Clock::now() + o_.timeout);
  if (!failed.empty()) {
    std::vector<int> lost;
    for (int i : failed)
      lost.push_back(ranks[i]);
    return absl::UnavailableError(absl::StrFormat(
        "rendezvous: rank 0: rank(s) %s closed the connection before they "
        "got the payloads (did they die?)",
        absl::StrJoin(lost, ", ")));
  }
  return payloads;
}

//===----------------------------------------------------------------------===//
// The other ranks
//===----------------------------------------------------------------------===//

absl::StatusOr<std::vector<std::string>>
join(const RendezvousOptions &o,
     const std::function<std::string(const std::string &)> &makePayload) {
  const Deadline deadline = Clock::now() + o.timeout;
  // Rank 0 answers a rendezvous that failed for want of a rank only at the
  // timeout; waiting a little longer for its answer gets its reason rather
  // than a timeout of our own.
  const Deadline answerBy =
      deadline + std::min<Clock::duration>(o.timeout, std::chrono::seconds(10));
  const std::string prefix = absl::StrFormat("rendezvous: rank %d: ", o.rank);
  const std::string master = formatHostPort(o.masterAddr, o.masterPort);
  // Once, before the retries: a name that does not resolve will not by the
  // timeout either.
  if (absl::Status s = resolveHost(o.masterAddr, "rank 0's host " + o.masterAddr);
      !s.ok())
    return withPrefix(s, prefix);

  absl::StatusOr<Socket> socket =
      connectTo(o.masterAddr, o.masterPort, deadline);
  if (!socket.ok())
    return withPrefix(socket.status(), prefix);
  socket->setPeer("rank 0 at " + master);
  absl::StatusOr<std::string> host = socket->localHost();
  if (!host.ok())
    return withPrefix(host.status(), prefix);
  std::string payload = makePayload(*host);
  if (payload.size() > kMaxRendezvousPayload)
    return absl::InvalidArgumentError(
        absl::StrFormat("%sthe payload of %d bytes is over the limit of %d",
                        prefix, payload.size(), kMaxRendezvousPayload));

  Header h;
  h.kind = kHello;
  h.rank = o.rank;
  h.worldSize = o.worldSize;
  h.fpBytes = uint32_t(o.fingerprint.size());
  h.bodyBytes = payload.size();
  std::string hello = encode(h) + o.fingerprint + payload;
  // If the send fails, rank 0 may still have said why before it closed.
  absl::Status sent = socket->sendAll(hello.data(), hello.size(), deadline);

  std::string header(kHeaderBytes, '\0');
  absl::Status got = socket->recvAll(header.data(), header.size(),
                                     sent.ok() ? answerBy : Clock::now());
  if (!got.ok() && !sent.ok())
    return withPrefix(sent, prefix);
  if (got.code() == absl::StatusCode::kDeadlineExceeded)
    return absl::DeadlineExceededError(absl::StrFormat(
        "%srank 0 at %s did not answer within %s", prefix, master,
        formatSeconds(std::chrono::duration_cast<std::chrono::milliseconds>(
            answerBy - deadline + o.timeout))));
  if (got.code() == absl::StatusCode::kUnavailable)
    return absl::UnavailableError(absl::StrFormat(
        "%srank 0 at %s closed the connection without an answer", prefix,
        master));
  if (!got.ok())
    return withPrefix(got, prefix);
  if (!magicMatches(header))
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s%s answered with something that is not md's rendezvous (is "
        "another program listening on port %d?)",
        prefix, master, o.masterPort));
  Header a = decode(header);
  if (a.version != kVersion)
    return absl::FailedPreconditionError(absl::StrFormat(
        "%srank 0 at %s speaks rendezvous wire version %d, this rank %d (are "
        "all ranks the same md build?)",
        prefix, master, a.version, kVersion));
  const uint64_t maxBody =
      a.kind == kWelcome ? uint64_t(o.worldSize) * (kMaxRendezvousPayload + 4)
                         : kMaxMessage;
  if ((a.kind != kWelcome && a.kind != kRefusal) || a.bodyBytes > maxBody)
    return absl::FailedPreconditionError(absl::StrFormat(
        "%srank 0 at %s sent a malformed answer (kind %d, %d bytes)", prefix,
        master, a.kind, a.bodyBytes));
  std::string body(a.bodyBytes, '\0');
  if (absl::Status s = socket->recvAll(body.data(), body.size(), answerBy);
      !s.ok())
    return withPrefix(s, prefix);
  if (a.kind == kRefusal) {
    absl::StatusCode code = a.code > 0 && a.code <= 16
                                ? absl::StatusCode(a.code)
                                : absl::StatusCode::kUnknown;
    return absl::Status(code, absl::StrCat("rank 0: ", body));
  }
  WireReader r(body);
  std::vector<std::string> payloads;
  for (int i = 0; i < o.worldSize && r.ok(); ++i) {
    uint32_t n = r.u32();
    payloads.emplace_back(r.bytes(n));
  }
  if (!r.ok() || r.left() != 0 || a.worldSize != o.worldSize)
    return absl::FailedPreconditionError(absl::StrFormat(
        "%srank 0 at %s sent a malformed welcome", prefix, master));
  return payloads;
}

absl::Status checkOptions(const RendezvousOptions &o) {
  auto bad = [&](std::string msg) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rendezvous: rank %d: %s", o.rank, msg));
  };
  if (o.worldSize < 1)
    return bad(absl::StrFormat("world size %d must be >= 1", o.worldSize));
  if (o.rank < 0 || o.rank >= o.worldSize)
    return bad(
        absl::StrFormat("rank is out of range for world size %d", o.worldSize));
  if (o.masterAddr.empty())
    return bad("no master address");
  if (o.masterPort < 1 || o.masterPort > 65535)
    return bad(
        absl::StrFormat("master port %d is not in 1..65535", o.masterPort));
  if (o.timeout.count() <= 0)
    return bad("the timeout must be positive");
  if (o.fingerprint.size() > kMaxRendezvousFingerprint)
    return bad(absl::StrFormat("the fingerprint of %d bytes is over the "
                               "limit of %d",
                               o.fingerprint.size(),
                               kMaxRendezvousFingerprint));
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<std::vector<std::string>> RendezvousWithAddress(
    const RendezvousOptions &options,
    const std::function<std::string(const std::string &host)> &makePayload) {
  if (absl::Status s = checkOptions(options); !s.ok())
    return s;
  if (options.rank != 0)
    return join(options, makePayload);
  std::string payload = makePayload(options.masterAddr);
  if (payload.size() > kMaxRendezvousPayload)
    return absl::InvalidArgumentError(absl::StrFormat(
        "rendezvous: rank 0: the payload of %d bytes is over the limit of %d",
        payload.size(), kMaxRendezvousPayload));
  if (options.worldSize == 1)
    return std::vector<std::string>{std::move(payload)};
  Host host(options, std::move(payload));
  return host.run();
}

absl::StatusOr<std::vector<std::string>>
Rendezvous(const RendezvousOptions &options, std::string_view payload) {
  return RendezvousWithAddress(
      options, [&](const std::string &) { return std::string(payload); });
}

} // namespace md::net
