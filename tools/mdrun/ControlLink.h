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
// The wire: one text line per message, "MDCTL1 HELLO <node>", "HB",
// "DONE", "ABORT <message>". Nothing here blocks longer than a send of one
// line; poll() is called from the launcher's 10 ms supervision loop.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_MDRUN_CONTROLLINK_H
#define MD_TOOLS_MDRUN_CONTROLLINK_H

#include <chrono>
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
  /// `nnodes` - 1 launchers.
  static absl::StatusOr<std::unique_ptr<ControlLink>> Hub(int port, int nnodes);
  /// Node `node`'s side: connects to the hub at host:port, retrying from
  /// poll() until `connectFor` has passed (then a warning: the job goes on
  /// without the connection).
  static std::unique_ptr<ControlLink>
  Spoke(std::string host, int port, int node,
        std::chrono::milliseconds connectFor);

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

private:
  using Clock = std::chrono::steady_clock;
  struct Peer {
    net::Socket socket;
    int node = -1; // -1 until its HELLO
    std::string in, out;
    Clock::time_point heard;
    bool done = false, gone = false;
  };
  ControlLink() = default;
  void send(Peer &p, const std::string &line);
  void flush(Peer &p);
  std::string name(const Peer &p) const;
  /// Handles one line from `p`; a failure to report, if any.
  std::optional<Failure> handle(Peer &p, const std::string &line);

  bool hub_ = false;
  int node_ = 0;
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
