//===- ControlLink.cpp - the launchers of a job watch each other ----------===//
//
// The hub and spoke sides of the launchers' control connection
// (ControlLink.h): accepting and connecting without blocking the
// supervision loop, line framing, heartbeats, ABORT passed on, and the
// launchers' agreement on a restart.
//
//===----------------------------------------------------------------------===//

#include "tools/mdrun/ControlLink.h"

#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace md::mdrun {

namespace {
constexpr const char *kHello = "MDCTL1 HELLO ";
// A line longer than this is not ours: the peer is dropped.
constexpr size_t kMaxLine = 4096;

/// `text` as one line of the wire (and at most kMaxLine / 2 bytes of it).
std::string oneLine(std::string text) {
  if (text.size() > kMaxLine / 2)
    text.resize(kMaxLine / 2);
  for (char &c : text)
    if (c == '\n' || c == '\r')
      c = ' ';
  return text;
}
} // namespace

absl::StatusOr<std::unique_ptr<ControlLink>>
ControlLink::Hub(int port, int nnodes, int64_t maxRestarts) {
  absl::StatusOr<net::Listener> l = net::Listener::listen(port);
  if (!l.ok())
    return l.status();
  std::unique_ptr<ControlLink> link(new ControlLink());
  link->hub_ = true;
  link->node_ = 0;
  link->nnodes_ = nnodes;
  link->maxRestarts_ = maxRestarts;
  link->listener_ = std::move(*l);
  link->peers_.reserve(static_cast<size_t>(nnodes));
  link->nextBeat_ = Clock::now();
  return link;
}

std::unique_ptr<ControlLink>
ControlLink::Spoke(std::string host, int port, int node,
                   std::chrono::milliseconds connectFor, int64_t maxRestarts) {
  std::unique_ptr<ControlLink> link(new ControlLink());
  link->node_ = node;
  link->maxRestarts_ = maxRestarts;
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
    std::vector<std::string> words =
        absl::StrSplit(line.substr(std::strlen(kHello)), ' ');
    int node = -1;
    int64_t restarts = 0;
    if (!words.empty() && absl::SimpleAtoi(words[0], &node))
      p.node = node;
    if (words.size() > 1 && absl::SimpleAtoi(words[1], &restarts) && hub_ &&
        restarts != maxRestarts_ && mismatch_.empty()) {
      // Launchers that would not restart alike: the job is refused on
      // every node, and never restarts.
      mismatch_ = absl::StrFormat(
          "node %d's launcher has --max-restarts %d, node 0's %d: every "
          "node's launcher needs the same options",
          node, restarts, maxRestarts_);
      for (Peer &other : peers_)
        send(other, absl::StrCat("ABORT node 0: ", mismatch_));
      return Failure{mismatch_, false};
    }
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
  if (hub_ && line.rfind("ENDED ", 0) == 0) {
    std::vector<std::string> words =
        absl::StrSplit(line.substr(6), absl::MaxSplits(' ', 2));
    int attempt = -1;
    if (words.size() >= 2 && absl::SimpleAtoi(words[0], &attempt)) {
      p.ended = attempt;
      p.canRestart = words[1] == "1";
      p.endText = words.size() > 2 ? words[2] : "";
    }
    return std::nullopt;
  }
  if (!hub_ && line.rfind("RESTART ", 0) == 0) {
    std::vector<std::string> words =
        absl::StrSplit(line.substr(8), absl::MaxSplits(' ', 2));
    Word w;
    w.restart = true;
    if (words.size() >= 2 && absl::SimpleAtoi(words[0], &w.attempt) &&
        absl::SimpleAtoi(words[1], &w.port)) {
      w.text = words.size() > 2 ? words[2] : "";
      word_ = w;
    }
    return std::nullopt;
  }
  if (!hub_ && line.rfind("STOP ", 0) == 0) {
    Word w;
    w.text = line.substr(5);
    word_ = w;
    return std::nullopt;
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
      send(peers_.back(), absl::StrCat(kHello, node_, " ", maxRestarts_));
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
    // Lines after a RESTART belong to the next attempt: they wait for it.
    while (!(word_ && word_->restart) &&
           (eol = p.in.find('\n')) != std::string::npos) {
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
  tellAll(oneLine(absl::StrCat("ABORT ", hub_ ? "node 0: " : "", message)));
  reported_ = true; // this node's own failure is the one it reports
}

void ControlLink::done() { tellAll("DONE"); }

void ControlLink::tellAll(const std::string &line) {
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
}

ControlLink::Verdict
ControlLink::agree(int attempt, const AttemptEnd &mine,
                   const std::function<absl::StatusOr<int>()> &pickPort,
                   std::chrono::milliseconds wait,
                   const std::function<bool()> &interrupted) {
  return hub_ ? agreeAsHub(attempt, mine, pickPort, wait, interrupted)
              : agreeAsSpoke(attempt, mine, wait, interrupted);
}

ControlLink::Verdict
ControlLink::agreeAsHub(int attempt, const AttemptEnd &mine,
                        const std::function<absl::StatusOr<int>()> &pickPort,
                        std::chrono::milliseconds wait,
                        const std::function<bool()> &interrupted) {
  Verdict v;
  auto stop = [&](const std::string &why) {
    tellAll(oneLine(absl::StrCat("STOP ", why)));
    v.why = why;
    return v;
  };
  if (!mine.noRestart.empty()) {
    stop(absl::StrCat("node 0 cannot restart: ", mine.noRestart));
    v.why.clear(); // this node's own reason is its error already
    return v;
  }
  if (!mismatch_.empty())
    return stop(mismatch_);
  // Every other node's word on how its attempt ended, or its loss.
  const Clock::time_point deadline = Clock::now() + wait;
  std::vector<const Peer *> ended;
  for (;;) {
    (void)poll(); // what failed is known; who is there is what counts
    if (interrupted())
      return stop("node 0's launcher was interrupted");
    ended.assign(static_cast<size_t>(std::max(nnodes_, 1)), nullptr);
    int heard = 0;
    for (const Peer &p : peers_) {
      if (p.node <= 0 || p.node >= nnodes_)
        continue;
      if (p.ended == attempt && !p.canRestart)
        return stop(
            absl::StrFormat("node %d cannot restart: %s", p.node, p.endText));
      if (p.done)
        return stop(absl::StrFormat(
            "node %d's ranks finished: a job restarts only on every node",
            p.node));
      if (p.gone || Clock::now() - p.heard > kLostAfter)
        return stop(absl::StrFormat(
            "%s is gone: a job across nodes restarts only with every node's "
            "launcher",
            name(p)));
      if (p.ended == attempt && ended[p.node] == nullptr) {
        ended[p.node] = &p;
        ++heard;
      }
    }
    if (heard == nnodes_ - 1)
      break;
    if (Clock::now() >= deadline) {
      std::vector<int> silent;
      for (int n = 1; n < nnodes_; ++n)
        if (ended[n] == nullptr)
          silent.push_back(n);
      return stop(absl::StrFormat(
          "node%s %s did not report the end of %s ranks within %d s",
          silent.size() == 1 ? "" : "s", absl::StrJoin(silent, ", "),
          silent.size() == 1 ? "its" : "their",
          static_cast<int>(
              std::chrono::duration_cast<std::chrono::seconds>(wait).count())));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Every node can: the causes, node by node, and a fresh port.
  std::vector<std::string> causes;
  if (!mine.cause.empty())
    causes.push_back(absl::StrCat("node 0: ", mine.cause));
  for (int n = 1; n < nnodes_; ++n)
    if (!ended[n]->endText.empty())
      causes.push_back(absl::StrFormat("node %d: %s", n, ended[n]->endText));
  if (causes.empty())
    causes.push_back("a failure no node's ranks reported");
  absl::StatusOr<int> port = pickPort();
  if (!port.ok())
    return stop(absl::StrCat("node 0 found no port for the restart: ",
                             port.status().message()));
  v.restart = true;
  v.port = *port;
  v.cause = oneLine(absl::StrJoin(causes, "; "));
  tellAll(absl::StrFormat("RESTART %d %d %s", attempt + 1, v.port, v.cause));
  for (Peer &p : peers_)
    p.ended = -1;
  reported_ = false; // the next attempt's failure is news again
  return v;
}

ControlLink::Verdict
ControlLink::agreeAsSpoke(int attempt, const AttemptEnd &mine,
                          std::chrono::milliseconds wait,
                          const std::function<bool()> &interrupted) {
  Verdict v;
  const bool can = mine.noRestart.empty();
  tellAll(oneLine(absl::StrFormat("ENDED %d %d %s", attempt, can ? 1 : 0,
                                  can ? mine.cause : mine.noRestart)));
  if (!can)
    return v;
  if (peers_.empty()) {
    v.why = "no control connection to node 0's launcher, through which a "
            "job across nodes restarts";
    return v;
  }
  // The hub decides once every node's ranks have ended: within its grace
  // period and `wait`, or it is lost.
  const Clock::time_point deadline = Clock::now() + wait + kLostAfter;
  for (;;) {
    (void)poll();
    if (word_) {
      Word w = std::move(*word_);
      word_.reset();
      if (!w.restart) {
        v.why = w.text;
        return v;
      }
      if (w.attempt != attempt + 1) {
        v.why = absl::StrFormat("node 0 restarts as attempt %d, this node "
                                "ended attempt %d",
                                w.attempt, attempt);
        return v;
      }
      v.restart = true;
      v.port = w.port;
      v.cause = w.text;
      reported_ = false;
      return v;
    }
    const Peer &hub = peers_.front();
    if (hub.done) {
      v.why = "node 0's ranks finished: a job restarts only on every node";
      return v;
    }
    if (hub.gone || Clock::now() - hub.heard > kLostAfter) {
      v.why = "node 0's launcher is gone: a job across nodes restarts only "
              "with every node's launcher";
      return v;
    }
    if (interrupted()) {
      v.why = "interrupted while waiting for node 0's word on a restart";
      return v;
    }
    if (Clock::now() >= deadline) {
      v.why = "no word from node 0's launcher on a restart";
      return v;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

} // namespace md::mdrun
