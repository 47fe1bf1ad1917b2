//===- Socket.h - TCP sockets with deadlines ------------------*- C++ -*-===//
//
// Small RAII wrappers over POSIX TCP sockets, enough for md's rendezvous:
// a listener on every interface (port 0 picks a free one), a
// connect that resolves host names (IPv4 and IPv6) and retries until a
// deadline because the server may start later, and sends and receives that
// never wait past a deadline. Every socket is non-blocking, close-on-exec
// and TCP_NODELAY; sends use MSG_NOSIGNAL, so a peer that dies makes an
// error, never a SIGPIPE.
//
// Errors are absl::Status naming the peer: DeadlineExceeded when the
// deadline passes, Unavailable when the peer closed or reset the connection
// (or, for a connect, nothing listens), Internal for anything else.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_NET_SOCKET_H
#define MD_RUNTIME_NET_SOCKET_H

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace md::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

/// "node01:29500"; IPv6 addresses in brackets, "[fe80::1%eth0]:29500".
std::string formatHostPort(std::string_view host, int port);
/// The inverse of formatHostPort; InvalidArgument naming the text.
absl::StatusOr<std::pair<std::string, int>>
parseHostPort(std::string_view text);
/// "0.5 s", "300 s": durations in messages.
std::string formatSeconds(std::chrono::milliseconds d);
/// Milliseconds for poll() until `deadline`, rounded up; 0 once it passed.
int pollTimeoutMs(Deadline deadline);

/// Owns a file descriptor: move-only, closed on destruction or reset().
/// Socket and Listener hold theirs in one.
class UniqueFd {
public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd &&other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd &operator=(UniqueFd &&other) noexcept;
  UniqueFd(const UniqueFd &) = delete;
  UniqueFd &operator=(const UniqueFd &) = delete;

  int get() const { return fd_; }
  /// Closes the descriptor, if any.
  void reset();

private:
  int fd_ = -1;
};

/// A connected TCP socket. Move-only; the destructor closes it.
class Socket {
public:
  Socket() = default;
  /// Takes ownership of `fd`; `peer` names the other end in messages.
  Socket(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}

  bool valid() const { return fd_.get() >= 0; }
  int fd() const { return fd_.get(); }
  const std::string &peer() const { return peer_; }
  void setPeer(std::string peer) { peer_ = std::move(peer); }
  void close() { fd_.reset(); }
  /// Ends this side's sending: the peer reads what was sent, then end of
  /// file. Receiving still works.
  void shutdownWrite();

  /// All n bytes, or an error; waits at most until the deadline.
  absl::Status sendAll(const void *data, size_t n, Deadline deadline);
  absl::Status recvAll(void *data, size_t n, Deadline deadline);
  /// What the socket takes or has now, without waiting: the byte count, 0
  /// when it would block. Unavailable once the peer has closed.
  absl::StatusOr<size_t> sendSome(const void *data, size_t n);
  absl::StatusOr<size_t> recvSome(void *data, size_t n);

  /// The numeric address of this end (getsockname): the address the peer
  /// reached this machine at. IPv4-mapped IPv6 addresses read as IPv4.
  absl::StatusOr<std::string> localHost() const;
  /// The numeric address of the other end (getpeername).
  absl::StatusOr<std::string> remoteHost() const;

private:
  UniqueFd fd_;
  std::string peer_;
};

/// A listening socket on every interface: IPv6 and IPv4 where the machine
/// has both (a dual-stack socket), else IPv4. SO_REUSEADDR, so a port just
/// released by another listener can be taken at once.
class Listener {
public:
  /// Port 0 picks a free port; port() reports it.
  static absl::StatusOr<Listener> listen(int port);

  Listener() = default;

  bool valid() const { return fd_.get() >= 0; }
  int fd() const { return fd_.get(); }
  int port() const { return port_; }
  void close() { fd_.reset(); }

  /// One pending connection, without waiting; an invalid Socket when there
  /// is none.
  absl::StatusOr<Socket> acceptNow();

private:
  UniqueFd fd_;
  int port_ = 0;
};

/// Resolves `host` (getaddrinfo, once) so that a name that will never
/// resolve fails at once rather than when a connect's retries time out.
/// OK when it resolves, and when the resolver only failed for now
/// (EAI_AGAIN: a DNS server that is not up yet; the connect retries);
/// otherwise InvalidArgument "<named>: cannot resolve it: <gai_strerror>",
/// `named` being how the caller names the host ("--master-addr node01").
absl::Status resolveHost(const std::string &host, std::string_view named);

/// Connects to host:port (a name or a numeric IPv4/IPv6 address), trying
/// each address the name resolves to, and retrying while nothing listens
/// there yet, until the deadline: DeadlineExceeded then, "connect to
/// node01:29500: Connection refused (retried for 300 s)".
absl::StatusOr<Socket> connectTo(const std::string &host, int port,
                                 Deadline deadline);

/// One socket's share of an exchange: bytes to send and buffers to fill,
/// each in order. Its progress is kept, so an exchange that failed for
/// another socket can be resumed for this one.
struct Transfer {
  Socket *socket = nullptr;
  std::vector<absl::Span<const char>> send;
  std::vector<absl::Span<char>> recv;
  /// With nothing to receive: stop sending, and set `interrupted`, as soon
  /// as the peer sends something (an error report instead of waiting for
  /// the rest of a message it no longer reads).
  bool stopOnInput = false;
  bool interrupted = false;

  size_t sendPart = 0, sendOffset = 0, recvPart = 0, recvOffset = 0;
  size_t sent = 0, received = 0;

  bool sending() const;
  bool receiving() const;
  bool done() const { return interrupted || (!sending() && !receiving()); }
  /// Some but not all of `send` has gone out: the peer holds part of a
  /// message.
  bool sentPartly() const { return sent > 0 && sending(); }
};

/// Moves every transfer's bytes, all sockets at once, until all are done.
/// On an error returns it and sets `*failed` to the index of the transfer
/// it happened on, or to -1 when the deadline passed (the transfers not
/// done are the ones still waiting).
absl::Status exchange(std::vector<Transfer> &transfers, Deadline deadline,
                      int *failed);

} // namespace md::net

#endif // MD_RUNTIME_NET_SOCKET_H
