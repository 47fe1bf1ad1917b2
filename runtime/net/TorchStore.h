//===- TorchStore.h - a client of PyTorch's TCPStore ----------*- C++ -*-===//
//
// torchrun's agent serves a key-value store (c10d's TCPStore) on
// MASTER_ADDR:MASTER_PORT for the workers it starts and tells them so with
// TORCHELASTIC_USE_AGENT_STORE=True: the port is taken, so md's own
// rendezvous (Rendezvous.h) cannot listen on it. Ranks that torchrun
// started meet through the agent's store instead: rank 0 listens on a free
// port of its own and sets it under a key of the run, the others wait for
// the key (PublishRendezvousPort / LookUpRendezvousPort), and the
// rendezvous goes on there.
//
// The client speaks the TCPStore's wire protocol as PyTorch's own client
// does (torch/csrc/distributed/c10d/TCPStore.cpp; stable since PyTorch
// 2.0): native byte order, a request is a one-byte query type and its
// arguments; strings and byte vectors are a u64 length and the bytes.
//   VALIDATE (0): u32 magic 0x3C85F7CE          (no answer)
//   PING (13):    u32 nonce                     -> the u32 nonce back
//   SET (1):      key, value                    (no answer)
//   CHECK (5):    u64 count, keys               -> u8 0 ready, 1 not yet
//   GET (3):      key                           -> value
// Every call has a deadline (Socket.h): a store that does not answer is
// DeadlineExceeded naming its address, never a hang.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_NET_TORCHSTORE_H
#define MD_RUNTIME_NET_TORCHSTORE_H

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/net/Socket.h"

namespace md::net {

class TorchStoreClient {
public:
  /// Connects to the store at host:port (retrying while nothing listens
  /// yet), validates the connection and checks it with a ping.
  static absl::StatusOr<TorchStoreClient> connect(const std::string &host,
                                                  int port, Deadline deadline);

  absl::Status set(const std::string &key, const std::string &value,
                   Deadline deadline);
  /// Whether every key is set.
  absl::StatusOr<bool> check(const std::vector<std::string> &keys,
                             Deadline deadline);
  /// The value of `key` once it is set (polled), or DeadlineExceeded naming
  /// the key.
  absl::StatusOr<std::string> get(const std::string &key, Deadline deadline);

  const std::string &address() const { return socket_.peer(); }

private:
  explicit TorchStoreClient(Socket socket) : socket_(std::move(socket)) {}
  absl::Status send(const std::string &bytes, Deadline deadline);
  absl::Status annotate(const absl::Status &s, const char *what) const;

  Socket socket_;
};

/// The key under which rank 0 of md job `jobId` sets its rendezvous port.
std::string RendezvousPortKey(const std::string &jobId);

/// Rank 0: sets `port` under the job's key in the store at host:port.
absl::Status PublishRendezvousPort(const std::string &storeHost, int storePort,
                                   const std::string &jobId, int port,
                                   Deadline deadline);
/// Another rank: the port rank 0 set, once it has.
absl::StatusOr<int> LookUpRendezvousPort(const std::string &storeHost,
                                         int storePort,
                                         const std::string &jobId,
                                         Deadline deadline);

} // namespace md::net

#endif // MD_RUNTIME_NET_TORCHSTORE_H
