//===- ControlLink.cpp - the launchers of a job watch each other ----------===//
//
// The hub and spoke sides of the launchers' control connection
// (ControlLink.h): accepting and connecting without blocking the
// supervision loop, line framing, heartbeats, and ABORT passed on.
//
//===----------------------------------------------------------------------===//

#include "tools/mdrun/ControlLink.h"

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace md::mdrun {

namespace {
constexpr const char *kHello = "MDCTL1 HELLO ";
// A line longer than this is not ours: the peer is dropped.
constexpr size_t kMaxLine = 4096;
} // namespace

absl::StatusOr<std::unique_ptr<ControlLink>> ControlLink::Hub(int port,
                                                              int nnodes) {
  absl::StatusOr<net::Listener> l = net::Listener::listen(port);
  if (!l.ok())
    return l.status();
  std::unique_ptr<ControlLink> link(new ControlLink());
  link->hub_ = true;
  link->node_ = 0;
  link->listener_ = std::move(*l);
  link->peers_.reserve(static_cast<size_t>(nnodes));
  link->nextBeat_ = Clock::now();
  return link;
}

std::unique_ptr<ControlLink>
ControlLink::Spoke(std::string host, int port, int node,
                   std::chrono::milliseconds connectFor) {
  std::unique_ptr<ControlLink> link(new ControlLink());
  link->node_ = node;
  link->host_ = std::move(host);
  link->port_ = port;
  link->connectUntil_ = Clock::now() + connectFor;
  link->nextConnect_ = Clock::now();
  link->nextBeat_ = Clock::now();
  return link;
}

std::string ControlLink::name(const Peer &p) const {
  if (!hub_)
    return "node 0's launcher";
  return p.node >= 0 ? absl::StrFormat("node %d's launcher", p.node)
                     : absl::StrCat("a launcher at ", p.socket.peer());
}

void ControlLink::send(Peer &p, const std::string &line) {
  if (p.gone)
    return;
  p.out += line;
  p.out += '\n';
  flush(p);
}

void ControlLink::flush(Peer &p) {
  while (!p.out.empty() && !p.gone) {
    absl::StatusOr<size_t> n = p.socket.sendSome(p.out.data(), p.out.size());
    if (!n.ok()) {
      p.gone = true; // the read side says why
      return;
    }
    if (*n == 0)
      return;
    p.out.erase(0, *n);
  }
}

std::optional<ControlLink::Failure>
ControlLink::handle(Peer &p, const std::string &line) {
  p.heard = Clock::now();
  if (line.rfind(kHello, 0) == 0) {
    int node = -1;
    if (absl::SimpleAtoi(line.substr(std::strlen(kHello)), &node))
      p.node = node;
    return std::nullopt;
  }
  if (line == "HB")
    return std::nullopt;
  if (line == "DONE") {
    p.done = true;
    return std::nullopt;
  }
  if (line.rfind("ABORT ", 0) == 0) {
    std::string why = line.substr(6);
    // The hub passes a node's failure on to every other node; what it
    // passes on already names the node.
    if (hub_) {
      why = absl::StrFormat("node %d: %s", p.node, why);
      for (Peer &other : peers_)
        if (&other != &p)
          send(other, absl::StrCat("ABORT ", why));
    }
    return Failure{why, false};
  }
  return std::nullopt; // a later version's message: ignored
}

std::optional<ControlLink::Failure> ControlLink::poll() {
  Clock::time_point now = Clock::now();
  std::optional<Failure> failure;
  if (hub_) {
    for (;;) {
      absl::StatusOr<net::Socket> s = listener_.acceptNow();
      if (!s.ok() || !s->valid())
        break;
      Peer p;
      p.socket = std::move(*s);
      p.heard = now;
      peers_.push_back(std::move(p));
    }
  } else if (peers_.empty() && now >= nextConnect_) {
    // Short attempts, so that the supervision loop goes on meanwhile.
    absl::StatusOr<net::Socket> s =
        net::connectTo(host_, port_, now + std::chrono::milliseconds(100));
    if (s.ok()) {
      Peer p;
      p.socket = std::move(*s);
      p.heard = Clock::now();
      p.node = 0;
      peers_.push_back(std::move(p));
      send(peers_.back(), absl::StrCat(kHello, node_));
    } else if (Clock::now() >= connectUntil_) {
      // Not a failure of the job: its ranks met or will fail on their own.
      warning_ = absl::StrFormat(
          "no control connection to node 0's launcher (%s); a stuck node "
          "ends by its own --timeout",
          s.status().message());
      connectUntil_ = Clock::time_point::max();
      nextConnect_ = Clock::time_point::max();
      return std::nullopt;
    }
    if (peers_.empty())
      nextConnect_ = Clock::now() + std::chrono::milliseconds(500);
  }
  now = Clock::now();
  bool beat = now >= nextBeat_;
  if (beat)
    nextBeat_ = now + kHeartbeat;
  for (Peer &p : peers_) {
    if (p.gone && p.done)
      continue;
    char buf[1024];
    absl::Status closed;
    while (!p.gone) {
      absl::StatusOr<size_t> n = p.socket.recvSome(buf, sizeof buf);
      if (!n.ok()) {
        p.gone = true;
        closed = n.status();
        break;
      }
      if (*n == 0)
        break;
      p.in.append(buf, *n);
    }
    // What it said before it closed first: an ABORT says why.
    size_t eol;
    while ((eol = p.in.find('\n')) != std::string::npos) {
      std::string line = p.in.substr(0, eol);
      p.in.erase(0, eol + 1);
      if (std::optional<Failure> f = handle(p, line); f && !failure)
        failure = f;
    }
    if (!closed.ok() && !p.done && !failure)
      failure = Failure{
          absl::StrCat(name(p), " is gone (", closed.message(), ")"), true};
    if (p.in.size() > kMaxLine)
      p.gone = p.done = true; // not a launcher of ours
    if (!p.gone && !p.done && now - p.heard > kLostAfter && !failure)
      failure = Failure{absl::StrFormat("no heartbeat from %s in %d s", name(p),
                                        static_cast<int>(kLostAfter.count())),
                        true};
    if (beat)
      send(p, "HB");
    else
      flush(p);
  }
  if (!failure || reported_)
    return std::nullopt;
  reported_ = true;
  return failure;
}

std::optional<std::string> ControlLink::takeWarning() {
  if (warning_.empty())
    return std::nullopt;
  std::string w = std::move(warning_);
  warning_.clear();
  return w;
}

void ControlLink::abort(const std::string &message) {
  // The hub names itself; a node's failure the hub names when it passes
  // it on.
  std::string line = absl::StrCat("ABORT ", hub_ ? "node 0: " : "", message);
  for (char &c : line)
    if (c == '\n')
      c = ' ';
  for (Peer &p : peers_) {
    if (p.gone)
      continue;
    p.out += line;
    p.out += '\n';
    absl::Status s = p.socket.sendAll(p.out.data(), p.out.size(),
                                      Clock::now() + std::chrono::seconds(1));
    p.out.clear();
    if (!s.ok())
      p.gone = true;
  }
  reported_ = true; // this node's own failure is the one it reports
}

void ControlLink::done() {
  for (Peer &p : peers_) {
    if (p.gone)
      continue;
    p.out += "DONE\n";
    (void)p.socket.sendAll(p.out.data(), p.out.size(),
                           Clock::now() + std::chrono::seconds(1));
    p.out.clear();
  }
}

} // namespace md::mdrun
