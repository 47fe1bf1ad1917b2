//===- Socket.cpp - TCP sockets with deadlines ----------------------------===//

#include "runtime/net/Socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace md::net {

namespace {

std::string errnoText(int err) { return std::strerror(err); }

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// The numeric host of a socket address; "::ffff:10.0.0.1" reads as
/// "10.0.0.1".
std::string numericHost(const sockaddr *addr, socklen_t len, int *port) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(addr, len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  if (port != nullptr)
    *port = std::atoi(serv);
  std::string h = host;
  if (h.rfind("::ffff:", 0) == 0 && h.find('.') != std::string::npos)
    h = h.substr(7);
  return h;
}

/// Waits until `fd` is ready for `events` or the deadline passes.
absl::Status waitFor(int fd, short events, Deadline deadline,
                     const std::string &what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, pollTimeoutMs(deadline));
    if (rc > 0)
      return absl::OkStatus();
    if (rc == 0)
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
    if (errno != EINTR)
      return absl::InternalError(
          absl::StrCat(what, ": poll: ", errnoText(errno)));
  }
}

/// Moves all n bytes at p through `some` (Socket::sendSome or recvSome:
/// what the socket takes or has now), waiting for `events` on fd whenever
/// it would block; a timeout is "<verb> <peer>: timed out".
template <typename Byte, typename Some>
absl::Status moveAll(Byte *p, size_t n, Some some, int fd, short events,
                     Deadline deadline, const char *verb,
                     const std::string &peer) {
  while (n > 0) {
    absl::StatusOr<size_t> k = some(p, n);
    if (!k.ok())
      return k.status();
    if (*k == 0) {
      absl::Status s =
          waitFor(fd, events, deadline, absl::StrCat(verb, " ", peer));
      if (!s.ok())
        return s;
      continue;
    }
    p += *k;
    n -= *k;
  }
  return absl::OkStatus();
}

/// The numeric host of one end of a connected socket: `name` is
/// getsockname (this end) or getpeername (the other).
absl::StatusOr<std::string>
endHost(int fd, int (*name)(int, sockaddr *, socklen_t *), const char *call) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (name(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0)
    return absl::InternalError(absl::StrCat(call, ": ", errnoText(errno)));
  return numericHost(reinterpret_cast<sockaddr *>(&addr), len, nullptr);
}

bool isClosedError(int err) {
  return err == EPIPE || err == ECONNRESET || err == ENOTCONN ||
         err == ECONNABORTED || err == ETIMEDOUT || err == EHOSTUNREACH ||
         err == ENETUNREACH;
}

/// The error of a send or recv that failed with `err` (not EINTR or
/// EAGAIN): Unavailable when the connection is gone, "<verb> <peer>: ...".
absl::Status transferError(int err, const char *verb, const std::string &peer) {
  if (isClosedError(err))
    return absl::UnavailableError(absl::StrFormat(
        "%s %s: the connection is closed (%s)", verb, peer, errnoText(err)));
  return absl::InternalError(
      absl::StrFormat("%s %s: %s", verb, peer, errnoText(err)));
}

} // namespace

int pollTimeoutMs(Deadline deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero())
    return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return int(std::min<int64_t>(ms, INT_MAX));
}

std::string formatHostPort(std::string_view host, int port) {
  if (host.find(':') != std::string_view::npos)
    return absl::StrCat("[", std::string(host), "]:", port);
  return absl::StrCat(std::string(host), ":", port);
}

absl::StatusOr<std::pair<std::string, int>>
parseHostPort(std::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'%s' is not host:port (IPv6 addresses in brackets, [::1]:29500)",
        std::string(text)));
  };
  std::string_view host, port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find("]:");
    if (close == std::string_view::npos)
      return bad();
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos)
      return bad();
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      return bad();
  }
  int p = 0;
  if (host.empty() || !absl::SimpleAtoi(std::string(port), &p) || p < 0 ||
      p > 65535)
    return bad();
  return std::make_pair(std::string(host), p);
}

std::string formatSeconds(std::chrono::milliseconds d) {
  return absl::StrFormat("%.3g s", d.count() / 1000.0);
}

//===----------------------------------------------------------------------===//
// Socket
//===----------------------------------------------------------------------===//

UniqueFd &UniqueFd::operator=(UniqueFd &&other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void UniqueFd::reset() {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
}

void Socket::shutdownWrite() {
  if (fd_.get() >= 0)
    ::shutdown(fd_.get(), SHUT_WR);
}

absl::StatusOr<size_t> Socket::sendSome(const void *data, size_t n) {
  for (;;) {
    ssize_t k = ::send(fd_.get(), data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k >= 0)
      return size_t(k);
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return size_t(0);
    return transferError(errno, "send to", peer_);
  }
}

absl::StatusOr<size_t> Socket::recvSome(void *data, size_t n) {
  if (n == 0)
    return size_t(0);
  for (;;) {
    ssize_t k = ::recv(fd_.get(), data, n, MSG_DONTWAIT);
    if (k > 0)
      return size_t(k);
    if (k == 0)
      return absl::UnavailableError(
          absl::StrFormat("receive from %s: the connection is closed", peer_));
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return size_t(0);
    return transferError(errno, "receive from", peer_);
  }
}

absl::Status Socket::sendAll(const void *data, size_t n, Deadline deadline) {
  return moveAll(
      static_cast<const char *>(data), n,
      [this](const char *p, size_t k) { return sendSome(p, k); }, fd_.get(),
      POLLOUT, deadline, "send to", peer_);
}

absl::Status Socket::recvAll(void *data, size_t n, Deadline deadline) {
  return moveAll(
      static_cast<char *>(data), n,
      [this](char *p, size_t k) { return recvSome(p, k); }, fd_.get(), POLLIN,
      deadline, "receive from", peer_);
}

absl::StatusOr<std::string> Socket::localHost() const {
  return endHost(fd_.get(), getsockname, "getsockname");
}

absl::StatusOr<std::string> Socket::remoteHost() const {
  return endHost(fd_.get(), getpeername, "getpeername");
}

//===----------------------------------------------------------------------===//
// Listener
//===----------------------------------------------------------------------===//

absl::StatusOr<Listener> Listener::listen(int port) {
  if (port < 0 || port > 65535)
    return absl::InvalidArgumentError(
        absl::StrFormat("listen on port %d: not a port number", port));
  int one = 1, zero = 0;
  // Dual stack first: one socket for IPv6 and IPv4 peers. Without IPv6
  // (a kernel or container that has it off) plain IPv4.
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd >= 0) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(uint16_t(port));
    if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
      int err = errno;
      ::close(fd);
      fd = -1;
      if (err != EADDRNOTAVAIL && err != EAFNOSUPPORT)
        return absl::UnavailableError(
            absl::StrFormat("listen on port %d: %s", port, errnoText(err)));
    }
  }
  if (fd < 0) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
      return absl::InternalError(absl::StrFormat(
          "listen on port %d: socket: %s", port, errnoText(errno)));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(uint16_t(port));
    if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
      int err = errno;
      ::close(fd);
      return absl::UnavailableError(
          absl::StrFormat("listen on port %d: %s", port, errnoText(err)));
    }
  }
  if (::listen(fd, SOMAXCONN) != 0) {
    int err = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrFormat("listen on port %d: %s", port, errnoText(err)));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  int bound = port;
  if (getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0)
    numericHost(reinterpret_cast<sockaddr *>(&addr), len, &bound);
  Listener l;
  l.fd_ = UniqueFd(fd);
  l.port_ = bound;
  return l;
}

absl::StatusOr<Socket> Listener::acceptNow() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    int fd = accept4(fd_.get(), reinterpret_cast<sockaddr *>(&addr), &len,
                     SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      setNoDelay(fd);
      int port = 0;
      std::string host =
          numericHost(reinterpret_cast<sockaddr *>(&addr), len, &port);
      return Socket(fd, formatHostPort(host, port));
    }
    if (errno == EINTR)
      continue;
    // A connection that was reset before we took it is simply gone.
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED ||
        errno == EPROTO)
      return Socket();
    return absl::InternalError(
        absl::StrFormat("accept on port %d: %s", port_, errnoText(errno)));
  }
}

//===----------------------------------------------------------------------===//
// Connecting
//===----------------------------------------------------------------------===//

absl::Status resolveHost(const std::string &host, std::string_view named) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo *list = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &list);
  if (rc == 0) {
    freeaddrinfo(list);
    return absl::OkStatus();
  }
  if (rc == EAI_AGAIN)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: cannot resolve it: %s", named,
      rc == EAI_SYSTEM ? errnoText(errno) : std::string(gai_strerror(rc))));
}

absl::StatusOr<Socket> connectTo(const std::string &host, int port,
                                 Deadline deadline) {
  const std::string peer = formatHostPort(host, port);
  const auto start = Clock::now();
  std::string lastError = "nothing tried";
  bool retryable = true;
  auto delay = std::chrono::milliseconds(10);
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo *list = nullptr;
    std::string service = std::to_string(port);
    int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
    if (rc != 0) {
      lastError = rc == EAI_SYSTEM ? errnoText(errno) : gai_strerror(rc);
      // A name may resolve only once its machine is up (a scheduler's
      // DNS); anything else about the request will not improve.
      retryable = rc == EAI_AGAIN || rc == EAI_NONAME || rc == EAI_FAIL ||
#ifdef EAI_NODATA
                  rc == EAI_NODATA ||
#endif
                  rc == EAI_SYSTEM;
      if (!retryable)
        return absl::InvalidArgumentError(
            absl::StrFormat("resolve %s: %s", peer, lastError));
    }
    for (addrinfo *ai = list; ai != nullptr; ai = ai->ai_next) {
      int fd =
          socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                 ai->ai_protocol);
      if (fd < 0) {
        lastError = errnoText(errno);
        continue;
      }
      int err = 0;
      if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        err = errno;
        if (err == EINPROGRESS || err == EINTR) {
          // Bounded per attempt so that an address that swallows SYNs does
          // not use up the time the next address could have had.
          Deadline attempt =
              std::min(deadline, Clock::now() + std::chrono::seconds(5));
          pollfd p{fd, POLLOUT, 0};
          int prc;
          do
            prc = poll(&p, 1, pollTimeoutMs(attempt));
          while (prc < 0 && errno == EINTR);
          if (prc > 0) {
            socklen_t len = sizeof err;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
              err = errno;
          } else {
            err = prc == 0 ? ETIMEDOUT : errno;
          }
        }
      }
      if (err == 0) {
        freeaddrinfo(list);
        setNoDelay(fd);
        return Socket(fd, peer);
      }
      lastError = errnoText(err);
      ::close(fd);
    }
    if (list != nullptr)
      freeaddrinfo(list);
    auto now = Clock::now();
    if (now >= deadline)
      return absl::DeadlineExceededError(absl::StrFormat(
          "connect to %s: %s (retried for %s)", peer, lastError,
          formatSeconds(std::chrono::duration_cast<std::chrono::milliseconds>(
              now - start))));
    std::this_thread::sleep_for(
        std::min<Clock::duration>(delay, deadline - now));
    delay = std::min(delay * 2, std::chrono::milliseconds(250));
  }
}

//===----------------------------------------------------------------------===//
// Exchanges
//===----------------------------------------------------------------------===//

namespace {

/// Whether `parts`, read from byte `offset` of part `part` on, hold
/// anything still to move.
template <typename Span>
bool bytesLeft(const std::vector<Span> &parts, size_t part, size_t offset) {
  for (size_t i = part; i < parts.size(); ++i)
    if (parts[i].size() > (i == part ? offset : 0))
      return true;
  return false;
}

/// Moves the bytes of `parts` from byte `offset` of part `part` on through
/// `some` (Socket::sendSome or recvSome), advancing part and offset and
/// adding to `moved`, until done or the socket would block.
template <typename Span, typename Some>
absl::Status moveParts(const std::vector<Span> &parts, size_t &part,
                       size_t &offset, size_t &moved, Some some) {
  while (part < parts.size()) {
    Span p = parts[part];
    if (offset == p.size()) {
      ++part;
      offset = 0;
      continue;
    }
    absl::StatusOr<size_t> k = some(p.data() + offset, p.size() - offset);
    if (!k.ok())
      return k.status();
    if (*k == 0)
      break;
    offset += *k;
    moved += *k;
  }
  return absl::OkStatus();
}

/// Sends and receives what the socket takes now. OK with no progress when
/// it would block.
absl::Status progress(Transfer &t) {
  Socket &socket = *t.socket;
  absl::Status s =
      moveParts(t.send, t.sendPart, t.sendOffset, t.sent,
                [&](const char *p, size_t n) { return socket.sendSome(p, n); });
  if (!s.ok())
    return s;
  return moveParts(t.recv, t.recvPart, t.recvOffset, t.received,
                   [&](char *p, size_t n) { return socket.recvSome(p, n); });
}

} // namespace

bool Transfer::sending() const { return bytesLeft(send, sendPart, sendOffset); }

bool Transfer::receiving() const {
  return bytesLeft(recv, recvPart, recvOffset);
}

absl::Status exchange(std::vector<Transfer> &transfers, Deadline deadline,
                      int *failed) {
  *failed = -1;
  std::vector<pollfd> fds;
  std::vector<int> index;
  for (;;) {
    fds.clear();
    index.clear();
    for (int i = 0; i < int(transfers.size()); ++i) {
      Transfer &t = transfers[i];
      if (t.done())
        continue;
      if (absl::Status s = progress(t); !s.ok()) {
        *failed = i;
        return s;
      }
      if (t.done())
        continue;
      short events = 0;
      if (t.sending())
        events |= POLLOUT;
      if (t.receiving() || t.stopOnInput)
        events |= POLLIN;
      fds.push_back({t.socket->fd(), events, 0});
      index.push_back(i);
    }
    if (fds.empty())
      return absl::OkStatus();
    int rc = poll(fds.data(), fds.size(), pollTimeoutMs(deadline));
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc < 0)
      return absl::InternalError(absl::StrCat("poll: ", errnoText(errno)));
    if (rc == 0)
      return absl::DeadlineExceededError("timed out");
    for (size_t k = 0; k < fds.size(); ++k) {
      Transfer &t = transfers[index[k]];
      if (t.stopOnInput && !t.receiving() && (fds[k].revents & POLLIN))
        t.interrupted = true;
    }
  }
}

} // namespace md::net
