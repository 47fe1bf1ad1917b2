//===- TorchStore.cpp - a client of PyTorch's TCPStore --------------------===//
//
// The requests of TorchStore.h, encoded as c10d's TCPStore client encodes
// them (host byte order: the store and its clients run on one kind of
// machine, as PyTorch assumes too).
//
//===----------------------------------------------------------------------===//

#include "runtime/net/TorchStore.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Status.h"

namespace md::net {
namespace {

constexpr uint32_t kValidationMagic = 0x3C85F7CE;

enum class Query : uint8_t {
  Validate = 0,
  Set = 1,
  Get = 3,
  Check = 5,
  Ping = 13,
};
constexpr uint8_t kReady = 0;

/// The longest value get() takes (the store's values md reads are short).
constexpr uint64_t kMaxValue = uint64_t(1) << 20;

template <typename T> void put(std::string &out, T v) {
  out.append(reinterpret_cast<const char *>(&v), sizeof v);
}
void putBytes(std::string &out, const std::string &s) {
  put<uint64_t>(out, s.size());
  out += s;
}

} // namespace

absl::Status TorchStoreClient::annotate(const absl::Status &s,
                                        const char *what) const {
  return absl::Status(s.code(),
                      absl::StrCat("torchrun's store at ", socket_.peer(),
                                   " (TORCHELASTIC_USE_AGENT_STORE), ", what,
                                   ": ", s.message()));
}

absl::StatusOr<TorchStoreClient>
TorchStoreClient::connect(const std::string &host, int port,
                          Deadline deadline) {
  absl::StatusOr<Socket> socket = connectTo(host, port, deadline);
  if (!socket.ok())
    return absl::Status(socket.status().code(),
                        absl::StrCat("torchrun's store (MASTER_ADDR, "
                                     "MASTER_PORT with "
                                     "TORCHELASTIC_USE_AGENT_STORE): ",
                                     socket.status().message()));
  TorchStoreClient c(std::move(*socket));
  std::string hello;
  put(hello, Query::Validate);
  put(hello, kValidationMagic);
  const uint32_t nonce = static_cast<uint32_t>(::getpid());
  put(hello, Query::Ping);
  put(hello, nonce);
  MD_RETURN_IF_ERROR(c.send(hello, deadline));
  uint32_t back = 0;
  if (absl::Status s = c.socket_.recvAll(&back, sizeof back, deadline);
      !s.ok())
    return c.annotate(s, "the ping's answer");
  if (back != nonce)
    return absl::UnavailableError(absl::StrFormat(
        "torchrun's store at %s answered the ping with %u, not %u: is it a "
        "PyTorch TCPStore?",
        c.socket_.peer(), back, nonce));
  return c;
}

absl::Status TorchStoreClient::send(const std::string &bytes,
                                    Deadline deadline) {
  if (absl::Status s = socket_.sendAll(bytes.data(), bytes.size(), deadline);
      !s.ok())
    return annotate(s, "a request");
  return absl::OkStatus();
}

absl::Status TorchStoreClient::set(const std::string &key,
                                   const std::string &value,
                                   Deadline deadline) {
  std::string req;
  put(req, Query::Set);
  putBytes(req, key);
  putBytes(req, value);
  return send(req, deadline);
}

absl::StatusOr<bool>
TorchStoreClient::check(const std::vector<std::string> &keys,
                        Deadline deadline) {
  std::string req;
  put(req, Query::Check);
  put<uint64_t>(req, keys.size());
  for (const std::string &k : keys)
    putBytes(req, k);
  MD_RETURN_IF_ERROR(send(req, deadline));
  uint8_t answer = 0;
  if (absl::Status s = socket_.recvAll(&answer, 1, deadline); !s.ok())
    return annotate(s, "a check's answer");
  return answer == kReady;
}

absl::StatusOr<std::string> TorchStoreClient::get(const std::string &key,
                                                  Deadline deadline) {
  // The store's GET of a missing key waits on some PyTorch versions and
  // fails on others: check first, as PyTorch's own client does.
  for (auto pause = std::chrono::milliseconds(5);;) {
    MD_ASSIGN_OR_RETURN(bool ready, check({key}, deadline));
    if (ready)
      break;
    if (Clock::now() + pause >= deadline)
      return absl::DeadlineExceededError(absl::StrFormat(
          "torchrun's store at %s: no rank set '%s' in time", socket_.peer(),
          key));
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
  std::string req;
  put(req, Query::Get);
  putBytes(req, key);
  MD_RETURN_IF_ERROR(send(req, deadline));
  uint64_t size = 0;
  if (absl::Status s = socket_.recvAll(&size, sizeof size, deadline); !s.ok())
    return annotate(s, "a value's size");
  if (size > kMaxValue)
    return absl::DataLossError(absl::StrFormat(
        "torchrun's store at %s: the value of '%s' has %d bytes (at most %d)",
        socket_.peer(), key, size, kMaxValue));
  std::string value(size, '\0');
  if (absl::Status s = socket_.recvAll(value.data(), size, deadline); !s.ok())
    return annotate(s, "a value");
  return value;
}

std::string RendezvousPortKey(const std::string &jobId) {
  return absl::StrCat("md/", jobId, "/rendezvous_port");
}

absl::Status PublishRendezvousPort(const std::string &storeHost, int storePort,
                                   const std::string &jobId, int port,
                                   Deadline deadline) {
  MD_ASSIGN_OR_RETURN(TorchStoreClient store,
                      TorchStoreClient::connect(storeHost, storePort, deadline));
  MD_RETURN_IF_ERROR(
      store.set(RendezvousPortKey(jobId), absl::StrCat(port), deadline));
  // The set has no answer: a check after it makes sure the store has it
  // before this connection closes.
  MD_ASSIGN_OR_RETURN(bool ready,
                      store.check({RendezvousPortKey(jobId)}, deadline));
  if (!ready)
    return absl::InternalError(absl::StrFormat(
        "torchrun's store at %s lost the key '%s' just set", store.address(),
        RendezvousPortKey(jobId)));
  return absl::OkStatus();
}

absl::StatusOr<int> LookUpRendezvousPort(const std::string &storeHost,
                                         int storePort,
                                         const std::string &jobId,
                                         Deadline deadline) {
  MD_ASSIGN_OR_RETURN(TorchStoreClient store,
                      TorchStoreClient::connect(storeHost, storePort, deadline));
  MD_ASSIGN_OR_RETURN(std::string value,
                      store.get(RendezvousPortKey(jobId), deadline));
  int port = 0;
  if (!absl::SimpleAtoi(value, &port) || port < 1 || port > 65535)
    return absl::DataLossError(absl::StrFormat(
        "torchrun's store at %s: '%s' is '%s', not a port", store.address(),
        RendezvousPortKey(jobId), value));
  return port;
}

} // namespace md::net
