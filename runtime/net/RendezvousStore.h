//===- RendezvousStore.h - a key-value store that rank 0 serves -*- C++ -*-===//
//
// Libraries that connect ranks themselves (Gloo) meet through a key-value
// store: each rank sets a few keys (its addresses) and waits for others'.
// md needs no Redis or shared file system for that: after the rendezvous
// (Rendezvous.h), whose port is free again, rank 0 serves a small store on
// MASTER_PORT from a thread of its own, and every rank, rank 0 included,
// talks to it over TCP. set() stores a value; get() and wait() block until
// some rank has set the key, up to the timeout; close() says this rank is
// done with the store, and on rank 0 waits until every rank is, then stops
// serving, so that the port is free for the next rendezvous.
//
// Every request is answered: a get when its key arrives. No wait is
// unbounded: a get of a key no rank sets is DeadlineExceeded naming the
// key after the timeout; rank 0 serves for the timeout plus min(timeout,
// 10 s), then its close names the ranks that never closed, and a rank whose
// connection closes before it closed the store fails it at once, naming
// that rank, on every rank waiting and, for min(timeout, 10 s) more, on
// every rank that comes or asks later. Connections
// that do not start with the store's magic (a port scanner) are dropped.
//
// Wire format, little-endian (Wire.h): a request is
//
//   magic u32 "mdkv" | op u32 (1 hello, 2 set, 3 get, 4 done) |
//   key length u32 | value length u32 | key | value
//
// (hello's value: the rank, i32) and an answer is
//
//   status u32 (0 ok, else an absl::StatusCode) | length u32 | value or
//   message
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_NET_RENDEZVOUSSTORE_H
#define MD_RUNTIME_NET_RENDEZVOUSSTORE_H

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/net/Rendezvous.h"
#include "runtime/net/Socket.h"

namespace md::net {

/// The longest key and value the store takes.
inline constexpr size_t kMaxStoreKey = size_t(4) << 10;
inline constexpr size_t kMaxStoreValue = size_t(1) << 20;

class RendezvousStore {
public:
  /// Rank 0 starts serving on options.masterPort; every rank connects to
  /// options.masterAddr there (retrying until the timeout, as rank 0 may
  /// start serving later). Errors: the socket's, naming rank 0's address.
  static absl::StatusOr<std::unique_ptr<RendezvousStore>>
  open(const RendezvousOptions &options);

  /// On rank 0, stops serving; a store that failed first tells the ranks
  /// still coming why, for min(timeout, 10 s) at most.
  ~RendezvousStore();
  RendezvousStore(const RendezvousStore &) = delete;
  RendezvousStore &operator=(const RendezvousStore &) = delete;

  /// Sets `key` (at most kMaxStoreKey bytes) to `value` (kMaxStoreValue).
  absl::Status set(const std::string &key, const std::string &value);
  /// The value of `key`, once some rank has set it.
  absl::StatusOr<std::string> get(const std::string &key);
  /// Returns once every key is set.
  absl::Status wait(const std::vector<std::string> &keys);
  /// This rank is done with the store. On rank 0, then waits until every
  /// rank is (DeadlineExceeded naming those that are not) and stops
  /// serving.
  absl::Status close();

private:
  explicit RendezvousStore(const RendezvousOptions &options)
      : options_(options) {}
  /// One request and its answer.
  absl::StatusOr<std::string> call(uint32_t op, const std::string &key,
                                   const std::string &value);
  /// Rank 0's server loop, run on server_.
  void serve(Listener listener);

  RendezvousOptions options_;
  Socket socket_; // to rank 0's server
  std::thread server_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> failing_{false}; // the server tells late ranks why
  absl::Status served_; // the server's outcome, read after joining it
  bool closed_ = false;
};

} // namespace md::net

#endif // MD_RUNTIME_NET_RENDEZVOUSSTORE_H
