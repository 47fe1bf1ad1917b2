//===- RendezvousStore.cpp - a key-value store that rank 0 serves ---------===//
//
// Rank 0's server is one poll() loop over the listener and every client,
// like the rendezvous' host: a client that sends nothing holds up no one.
// A get of a key not yet set parks its client until a set of that key
// answers it. The loop wakes at least every 100 ms to see whether the
// store is being destroyed, and ends once every rank said it is done, at
// the timeout, or when a rank's connection closes before it was done.
//
//===----------------------------------------------------------------------===//

#include "runtime/net/RendezvousStore.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/net/Wire.h"

namespace md::net {

namespace {

constexpr uint32_t kMagic = 0x766b646d; // "mdkv", little-endian
constexpr size_t kRequestBytes = 16;
constexpr size_t kAnswerBytes = 8;

enum Op : uint32_t { kHello = 1, kSet = 2, kGet = 3, kDone = 4 };

std::string quoteKey(const std::string &key) {
  return absl::StrCat("'", absl::CHexEscape(key.substr(0, 200)), "'");
}

std::string answer(absl::StatusCode code, std::string_view body) {
  WireWriter w;
  w.u32(uint32_t(code)).u32(uint32_t(body.size())).bytes(body);
  return w.take();
}

} // namespace

//===----------------------------------------------------------------------===//
// Rank 0's server
//===----------------------------------------------------------------------===//

namespace {

/// The state of rank 0's server loop: its clients, the values set, the
/// gets parked on keys not yet set, and how far each rank got. run() is
/// the loop; it writes the store's outcome to `served` and raises
/// `failing` once the store failed.
class StoreServer {
public:
  StoreServer(const RendezvousOptions &options, absl::Status &served,
              std::atomic<bool> &failing)
      : options_(options), w_(options.worldSize),
        // Longer than a client's wait, so that a rank waiting for a key no
        // one sets learns which key before the store gives up on it.
        grace_(std::min<std::chrono::milliseconds>(options.timeout,
                                                   std::chrono::seconds(10))),
        until_(Clock::now() + options.timeout + grace_), served_(served),
        failing_(failing), done_(w_, false), told_(w_, false),
        gone_(w_, false) {}

  /// Serves until every rank is done, the store failed and every rank
  /// heard so (or the grace ran out), or `stop` is raised.
  void run(Listener &listener, const std::atomic<bool> &stop);

private:
  struct Client {
    Socket socket;
    std::string buf;
    int rank = -1;
    bool drop = false;
  };

  void reply(Client &c, absl::StatusCode code, std::string_view body);
  /// Answers `c` with the store's failure.
  void tell(Client &c);
  /// The store failed: every rank connected learns why now, those still
  /// coming when they ask, for min(timeout, 10 s) at most.
  void failWith(absl::Status status);
  /// Handles the complete requests in c.buf; false when the client speaks
  /// something else.
  bool handle(const std::shared_ptr<Client> &c);
  /// Answers one request of a healthy store.
  void apply(const std::shared_ptr<Client> &c, uint32_t op,
             const std::string &key, const std::string &value);
  /// Whether the loop is over: every rank done, or the store failed and
  /// every rank heard so or left.
  bool finished() const;
  /// The deadline passed with ranks not done: the store fails.
  void failAtDeadline();
  /// Reads what `c` sent and handles it; a client that closed is dropped.
  void receive(const std::shared_ptr<Client> &c);
  /// Takes every pending connection; past 64 + 4W clients the oldest goes.
  void acceptAll(Listener &listener);
  std::vector<int> ranksWhere(const std::function<bool(int)> &pred) const;

  const RendezvousOptions &options_;
  const int w_;
  const std::chrono::milliseconds grace_;
  Deadline until_;
  absl::Status &served_;
  std::atomic<bool> &failing_;
  std::vector<std::shared_ptr<Client>> clients_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::shared_ptr<Client>>> parked_;
  // done: said so; told: answered with the store's failure; gone: its
  // connection closed.
  std::vector<bool> done_, told_, gone_;
};

void StoreServer::reply(Client &c, absl::StatusCode code,
                        std::string_view body) {
  std::string bytes = answer(code, body);
  if (!c.socket
           .sendAll(bytes.data(), bytes.size(),
                    Clock::now() + std::chrono::seconds(10))
           .ok())
    c.drop = true;
}

void StoreServer::tell(Client &c) {
  // The client prefixes its own "rendezvous store: rank N: ".
  std::string full(served_.message());
  std::string_view why = full;
  constexpr std::string_view kPrefix = "rendezvous store: ";
  if (why.substr(0, kPrefix.size()) == kPrefix)
    why.remove_prefix(kPrefix.size());
  reply(c, served_.code(), why);
  if (c.rank >= 0)
    told_[c.rank] = true;
}

void StoreServer::failWith(absl::Status status) {
  served_ = std::move(status);
  failing_.store(true);
  until_ = Clock::now() + grace_;
  for (const auto &c : clients_)
    if (!c->drop && c->rank >= 0)
      tell(*c);
  parked_.clear();
}

bool StoreServer::handle(const std::shared_ptr<Client> &c) {
  for (;;) {
    if (c->buf.size() < kRequestBytes)
      return true;
    WireReader r(std::string_view(c->buf).substr(0, kRequestBytes));
    const uint32_t magic = r.u32(), op = r.u32(), keyLen = r.u32(),
                   valueLen = r.u32();
    if (magic != kMagic || keyLen > kMaxStoreKey || valueLen > kMaxStoreValue ||
        op < kHello || op > kDone)
      return false;
    const size_t need = kRequestBytes + keyLen + valueLen;
    if (c->buf.size() < need)
      return true;
    std::string key = c->buf.substr(kRequestBytes, keyLen);
    std::string value = c->buf.substr(kRequestBytes + keyLen, valueLen);
    c->buf.erase(0, need);
    if (op == kHello) {
      WireReader v(value);
      const int rank = v.i32();
      if (!v.ok() || rank < 0 || rank >= w_)
        return false;
      c->rank = rank;
    }
    if (!served_.ok())
      tell(*c);
    else
      apply(c, op, key, value);
  }
}

void StoreServer::apply(const std::shared_ptr<Client> &c, uint32_t op,
                        const std::string &key, const std::string &value) {
  switch (op) {
  case kHello:
    reply(*c, absl::StatusCode::kOk, "");
    break;
  case kSet: {
    values_[key] = value;
    reply(*c, absl::StatusCode::kOk, "");
    auto it = parked_.find(key);
    if (it != parked_.end()) {
      for (const auto &waiter : it->second)
        if (!waiter->drop)
          reply(*waiter, absl::StatusCode::kOk, value);
      parked_.erase(it);
    }
    break;
  }
  case kGet: {
    auto it = values_.find(key);
    if (it != values_.end())
      reply(*c, absl::StatusCode::kOk, it->second);
    else
      parked_[key].push_back(c);
    break;
  }
  case kDone:
    if (c->rank >= 0)
      done_[c->rank] = true;
    reply(*c, absl::StatusCode::kOk, "");
    break;
  }
}

std::vector<int>
StoreServer::ranksWhere(const std::function<bool(int)> &pred) const {
  std::vector<int> ranks;
  for (int r = 0; r < w_; ++r)
    if (pred(r))
      ranks.push_back(r);
  return ranks;
}

bool StoreServer::finished() const {
  if (served_.ok())
    return ranksWhere([&](int r) { return !done_[r]; }).empty();
  return ranksWhere([&](int r) { return !told_[r] && !gone_[r]; }).empty();
}

void StoreServer::failAtDeadline() {
  failWith(absl::DeadlineExceededError(absl::StrFormat(
      "rendezvous store: rank(s) %s did not finish with rank 0's store "
      "within %s",
      absl::StrJoin(ranksWhere([&](int r) { return !done_[r]; }), ", "),
      formatSeconds(options_.timeout + grace_))));
}

void StoreServer::receive(const std::shared_ptr<Client> &c) {
  char chunk[65536];
  absl::StatusOr<size_t> got = c->socket.recvSome(chunk, sizeof chunk);
  if (!got.ok()) {
    c->drop = true;
    if (c->rank >= 0) {
      gone_[c->rank] = true;
      if (served_.ok() && !done_[c->rank])
        failWith(absl::UnavailableError(absl::StrFormat(
            "rendezvous store: rank %d closed its connection to rank 0's "
            "store before it was done (did it die?)",
            c->rank)));
    }
    return;
  }
  c->buf.append(chunk, *got);
  if (!handle(c))
    c->drop = true; // not a store client
}

void StoreServer::acceptAll(Listener &listener) {
  for (;;) {
    absl::StatusOr<Socket> s = listener.acceptNow();
    if (!s.ok() || !s->valid())
      break;
    if (clients_.size() >= size_t(64 + 4 * w_)) // the oldest goes
      clients_.erase(clients_.begin());
    auto c = std::make_shared<Client>();
    c->socket = std::move(*s);
    clients_.push_back(std::move(c));
  }
}

void StoreServer::run(Listener &listener, const std::atomic<bool> &stop) {
  std::vector<pollfd> fds;
  while (!stop.load()) {
    if (finished())
      return;
    if (Clock::now() >= until_) {
      if (!served_.ok())
        return; // the failed store's grace is over
      failAtDeadline();
      continue;
    }
    fds.assign(1, pollfd{listener.fd(), POLLIN, 0});
    for (const auto &c : clients_)
      fds.push_back({c->socket.fd(), POLLIN, 0});
    int rc = poll(fds.data(), fds.size(), std::min(100, pollTimeoutMs(until_)));
    if (rc < 0 && errno != EINTR) {
      failWith(absl::InternalError(
          absl::StrCat("rendezvous store: rank 0: poll: ", strerror(errno))));
      continue;
    }
    if (rc <= 0)
      continue;
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0)
        receive(clients_[i - 1]);
    clients_.erase(std::remove_if(clients_.begin(), clients_.end(),
                                  [](const std::shared_ptr<Client> &c) {
                                    return c->drop;
                                  }),
                   clients_.end());
    if (fds[0].revents != 0)
      acceptAll(listener);
  }
}

} // namespace

void RendezvousStore::serve(Listener listener) {
  StoreServer(options_, served_, failing_).run(listener, stop_);
}

//===----------------------------------------------------------------------===//
// Every rank
//===----------------------------------------------------------------------===//

absl::StatusOr<std::unique_ptr<RendezvousStore>>
RendezvousStore::open(const RendezvousOptions &options) {
  std::unique_ptr<RendezvousStore> store(new RendezvousStore(options));
  const std::string prefix =
      absl::StrFormat("rendezvous store: rank %d: ", options.rank);
  if (options.rank == 0) {
    absl::StatusOr<Listener> listener = Listener::listen(options.masterPort);
    if (!listener.ok())
      return absl::Status(listener.status().code(),
                          absl::StrCat(prefix, listener.status().message()));
    store->server_ =
        std::thread([s = store.get(), l = std::move(*listener)]() mutable {
          s->serve(std::move(l));
        });
  }
  absl::StatusOr<Socket> socket = connectTo(
      options.masterAddr, options.masterPort, Clock::now() + options.timeout);
  if (!socket.ok())
    return absl::Status(socket.status().code(),
                        absl::StrCat(prefix, socket.status().message()));
  socket->setPeer(
      absl::StrCat("rank 0's store at ",
                   formatHostPort(options.masterAddr, options.masterPort)));
  store->socket_ = std::move(*socket);
  WireWriter rank;
  rank.i32(options.rank);
  absl::StatusOr<std::string> hello = store->call(kHello, "", rank.str());
  if (!hello.ok())
    return hello.status();
  return store;
}

RendezvousStore::~RendezvousStore() {
  // A failed store goes on telling the ranks still coming why, for
  // min(timeout, 10 s) at most; otherwise it stops now.
  if (!failing_.load())
    stop_.store(true);
  if (server_.joinable())
    server_.join();
}

absl::StatusOr<std::string> RendezvousStore::call(uint32_t op,
                                                  const std::string &key,
                                                  const std::string &value) {
  const std::string prefix =
      absl::StrFormat("rendezvous store: rank %d: ", options_.rank);
  if (key.size() > kMaxStoreKey || value.size() > kMaxStoreValue)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sa key of %d bytes or a value of %d, over the limits of %d and %d",
        prefix, key.size(), value.size(), kMaxStoreKey, kMaxStoreValue));
  WireWriter w;
  w.u32(kMagic).u32(op).u32(uint32_t(key.size())).u32(uint32_t(value.size()));
  w.bytes(key).bytes(value);
  const Deadline deadline = Clock::now() + options_.timeout;
  if (absl::Status s =
          socket_.sendAll(w.str().data(), w.str().size(), deadline);
      !s.ok())
    return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
  char header[kAnswerBytes];
  absl::Status s = socket_.recvAll(header, sizeof header, deadline);
  if (s.code() == absl::StatusCode::kDeadlineExceeded && op == kGet)
    return absl::DeadlineExceededError(
        absl::StrFormat("%swaited %s for key %s, which no rank set", prefix,
                        formatSeconds(options_.timeout), quoteKey(key)));
  if (!s.ok())
    return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
  WireReader r(std::string_view(header, sizeof header));
  const uint32_t code = r.u32(), length = r.u32();
  if (length > kMaxStoreValue)
    return absl::FailedPreconditionError(absl::StrFormat(
        "%srank 0's store answered with %d bytes (is it md's store?)", prefix,
        length));
  std::string body(length, '\0');
  if (absl::Status b = socket_.recvAll(body.data(), body.size(), deadline);
      !b.ok())
    return absl::Status(b.code(), absl::StrCat(prefix, b.message()));
  if (code != 0)
    return absl::Status(code <= 16 ? absl::StatusCode(code)
                                   : absl::StatusCode::kUnknown,
                        absl::StrCat(prefix, body));
  return body;
}

absl::Status RendezvousStore::set(const std::string &key,
                                  const std::string &value) {
  return call(kSet, key, value).status();
}

absl::StatusOr<std::string> RendezvousStore::get(const std::string &key) {
  return call(kGet, key, "");
}

absl::Status RendezvousStore::wait(const std::vector<std::string> &keys) {
  for (const std::string &key : keys)
    if (absl::StatusOr<std::string> v = get(key); !v.ok())
      return v.status();
  return absl::OkStatus();
}

absl::Status RendezvousStore::close() {
  if (closed_)
    return served_;
  closed_ = true;
  absl::Status s = call(kDone, "", "").status();
  if (server_.joinable())
    server_.join(); // every rank done, or the server's error
  socket_.close();
  if (!s.ok())
    return s;
  return served_;
}

} // namespace md::net
