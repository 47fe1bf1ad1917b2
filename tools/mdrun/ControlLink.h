//===- ControlLink.h - the launchers of a job watch each other --*- C++ -*-===//
//
// A launcher sees only its own node's ranks. When a job fails on one node,
// the ranks of another learn it from their comm (a closed connection, a
// timeout) - unless they cannot: ranks that are all stopped, or stuck
// where no comm looks. So the launchers keep a control connection of their
// own: node 0's launcher (the hub) listens on the rendezvous port + 1 on
// every interface, and every other node's launcher connects to it at
// MASTER_ADDR, retrying while it starts its ranks. Both sides send a
// heartbeat every second. A launcher whose job fails sends ABORT with its
// error; the hub passes it on to the others; every launcher that hears it
// stops its own ranks at once. A launcher that finishes says DONE before
// it closes; one that goes silent for kLostAfter, or closes without DONE,
// counts as a failure of its node.
//
// With --max-restarts the connection also carries the restart of a job
// across nodes (agree()): once a failed attempt's ranks have all ended on
// a node, its launcher tells the hub (ENDED, with its own failure, or why
// it cannot restart), and the hub, having heard every node, decides for
// all: RESTART (with the next attempt's rendezvous port, a fresh one, so
// that nothing left of the failed attempt can meet the new one, and the
// failures that caused it) or STOP. A node whose launcher is gone, whose
// ranks finished, or that cannot restart (interrupted, preempted, out of
// restarts) makes it STOP. The hub checks at HELLO that every node has
// the same --max-restarts.
//
// The wire: one text line per message, "MDCTL1 HELLO <node> <max
// restarts>", "HB", "DONE", "ABORT <message>", "ENDED <attempt> <1 (can
// restart) or 0> <cause or why not>", "RESTART <attempt> <port> <cause>",
// "STOP <why>". Nothing here blocks longer than a send of one line;
// poll() is called from the launcher's 10 ms supervision loop.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_MDRUN_CONTROLLINK_H
#define MD_TOOLS_MDRUN_CONTROLLINK_H

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/net/Socket.h"

namespace md::mdrun {

class ControlLink {
public:
  /// A launcher silent this long has failed.
  static constexpr std::chrono::seconds kLostAfter{10};
  static constexpr std::chrono::seconds kHeartbeat{1};

  /// Node 0's side: listens on `port` (all interfaces) for the other
  /// `nnodes` - 1 launchers, whose --max-restarts must be `maxRestarts`.
  static absl::StatusOr<std::unique_ptr<ControlLink>>
  Hub(int port, int nnodes, int64_t maxRestarts = 0);
  /// Node `node`'s side: connects to the hub at host:port, retrying from
  /// poll() until `connectFor` has passed (then a warning: the job goes on
  /// without the connection).
  static std::unique_ptr<ControlLink>
  Spoke(std::string host, int port, int node,
        std::chrono::milliseconds connectFor, int64_t maxRestarts = 0);

  /// Why the job failed elsewhere.
  struct Failure {
    std::string why;
    /// A launcher went away or silent without saying why (it was killed,
    /// or its machine or network failed), rather than reporting a failure.
    /// The ranks here will likely see it too, and say more.
    bool lost = false;
  };
  /// Accepts, connects, reads, sends heartbeats, without waiting. Returns
  /// why when the job failed on another node ("node 1: rank 3 was killed
  /// by signal 9 (Killed)", "node 0's launcher is gone (...)"), once.
  std::optional<Failure> poll();
  /// The hub's port (its listener's, when it was asked for port 0).
  int port() const { return hub_ ? listener_.port() : port_; }
  /// A line for the user that poll() left (the hub could not be reached),
  /// once.
  std::optional<std::string> takeWarning();
  /// This node's job failed: tells every other launcher (the hub tells
  /// all; a node tells the hub, which passes it on). Waits at most a
  /// second per peer for the line to leave.
  void abort(const std::string &message);
  /// This node's ranks all finished: says DONE, so that closing is no
  /// failure.
  void done();

  /// How an attempt at the job ended on one node, once all its ranks have.
  struct AttemptEnd {
    /// This node's own failure ("rank 1 was killed by signal 9 (Killed)");
    /// "" when its ranks only followed another node's failure.
    std::string cause;
    /// Why this node cannot restart (interrupted, out of restarts, ...);
    /// "" when it can.
    std::string noRestart;
  };
  /// What the launchers agreed.
  struct Verdict {
    bool restart = false;
    /// restart: the rendezvous port of the next attempt.
    int port = 0;
    /// restart: every node's own failure, "node 1: rank 1 was killed by
    /// signal 9 (Killed)", joined by "; ".
    std::string cause;
    /// No restart, when this node could have: why not.
    std::string why;
  };
  /// After attempt `attempt` (0: the first) of the job failed here as
  /// `mine`: agrees with the other launchers whether the job restarts.
  /// The hub waits at most `wait` for every other node to report the end
  /// of its attempt, then restarts when every node can, on a port from
  /// `pickPort`, telling all, or tells all to stop. A node tells the hub
  /// how it ended and, when it can restart, waits for the hub's word (or
  /// its loss). `interrupted` is asked meanwhile; true ends the wait with
  /// no restart. Nothing waits on a peer that went silent longer than
  /// kLostAfter.
  Verdict agree(int attempt, const AttemptEnd &mine,
                const std::function<absl::StatusOr<int>()> &pickPort,
                std::chrono::milliseconds wait,
                const std::function<bool()> &interrupted);

private:
  using Clock = std::chrono::steady_clock;
  struct Peer {
    net::Socket socket;
    int node = -1; // -1 until its HELLO
    std::string in, out;
    Clock::time_point heard;
    bool done = false, gone = false;
    /// The hub's view of the node's last ENDED: its attempt (-1: none
    /// since the last restart), whether it can restart, and its text.
    int ended = -1;
    bool canRestart = false;
    std::string endText;
  };
  /// A spoke's word from the hub after a failed attempt.
  struct Word {
    bool restart = false;
    int attempt = 0, port = 0;
    std::string text; // the cause, or why the job stops
  };
  ControlLink() = default;
  void send(Peer &p, const std::string &line);
  void flush(Peer &p);
  std::string name(const Peer &p) const;
  /// Handles one line from `p`; a failure to report, if any.
  std::optional<Failure> handle(Peer &p, const std::string &line);
  /// Sends `line` to every peer still there, waiting at most a second for
  /// each.
  void tellAll(const std::string &line);
  Verdict agreeAsHub(int attempt, const AttemptEnd &mine,
                     const std::function<absl::StatusOr<int>()> &pickPort,
                     std::chrono::milliseconds wait,
                     const std::function<bool()> &interrupted);
  Verdict agreeAsSpoke(int attempt, const AttemptEnd &mine,
                       std::chrono::milliseconds wait,
                       const std::function<bool()> &interrupted);

  bool hub_ = false;
  int node_ = 0;
  int nnodes_ = 0; // the hub's
  int64_t maxRestarts_ = 0;
  /// The hub's: a node whose options differ ("node 1 has --max-restarts
  /// 0, node 0 has 2"); such a job never restarts.
  std::string mismatch_;
  /// A spoke's: the hub's RESTART or STOP, until agree() takes it. Lines
  /// after a RESTART wait for the next attempt's poll().
  std::optional<Word> word_;
  net::Listener listener_;
  // A spoke's hub, until connected.
  std::string host_;
  int port_ = 0;
  Clock::time_point connectUntil_, nextConnect_;
  std::vector<Peer> peers_;
  Clock::time_point nextBeat_;
  bool reported_ = false;
  std::string warning_;
};

} // namespace md::mdrun

#endif // MD_TOOLS_MDRUN_CONTROLLINK_H
