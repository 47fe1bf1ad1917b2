//===- Registry.cpp - the runtime's backends and comms, by name -----------===//

#include "runtime/rank/Registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace md::rank {

net::RendezvousOptions RendezvousOptionsFor(const RankSpec &spec) {
  net::RendezvousOptions o;
  o.masterAddr = spec.masterAddr;
  o.masterPort = spec.masterPort;
  o.rank = spec.rank;
  o.worldSize = spec.worldSize;
  o.fingerprint = spec.fingerprint;
  o.timeout = spec.timeout;
  return o;
}

bool Serves(const CommInfo &comm, std::string_view backend) {
  return std::find(comm.needs.backends.begin(), comm.needs.backends.end(),
                   backend) != comm.needs.backends.end();
}

absl::Status Registry::keep(absl::Status s) {
  if (!s.ok() && status_.ok())
    status_ = s;
  return s;
}

absl::Status Registry::addBackend(BackendInfo info) {
  if (info.name.empty() || info.title.empty() || !info.make)
    return keep(absl::InvalidArgumentError(
        absl::StrCat("backend '", info.name,
                     "': a backend needs a name, a title and a "
                     "factory")));
  if (backend(info.name) != nullptr)
    return keep(absl::AlreadyExistsError(
        absl::StrCat("backend '", info.name, "' is registered twice")));
  backends_.push_back(std::move(info));
  return absl::OkStatus();
}

absl::Status Registry::addComm(CommInfo info) {
  if (info.name.empty() || info.name == "auto" || info.needs.backends.empty() ||
      !info.make)
    return keep(absl::InvalidArgumentError(
        absl::StrCat("comm '", info.name,
                     "': a comm needs a name other than auto, the backends "
                     "it runs on and a factory")));
  if (comm(info.name) != nullptr)
    return keep(absl::AlreadyExistsError(
        absl::StrCat("comm '", info.name, "' is registered twice")));
  comms_.push_back(std::move(info));
  return absl::OkStatus();
}

const BackendInfo *Registry::backend(std::string_view name) const {
  for (const BackendInfo &b : backends_)
    if (b.name == name)
      return &b;
  return nullptr;
}

const CommInfo *Registry::comm(std::string_view name) const {
  for (const CommInfo &c : comms_)
    if (c.name == name)
      return &c;
  return nullptr;
}

absl::StatusOr<const BackendInfo *>
Registry::findBackend(std::string_view name) const {
  if (const BackendInfo *b = backend(name))
    return b;
  std::vector<std::string> names;
  for (const BackendInfo &b : backends_)
    names.push_back(b.name);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", std::string(name), "' (",
                   absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<const CommInfo *>
Registry::findComm(std::string_view name) const {
  if (const CommInfo *c = comm(name))
    return c;
  std::vector<std::string> names;
  for (const CommInfo &c : comms_)
    names.push_back(c.name);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown comm '", std::string(name), "' (",
                   absl::StrJoin(names, ", "), ")"));
}

std::vector<const BackendInfo *> Registry::backends() const {
  std::vector<const BackendInfo *> out;
  for (const BackendInfo &b : backends_)
    out.push_back(&b);
  return out;
}

std::vector<const CommInfo *> Registry::comms() const {
  std::vector<const CommInfo *> out;
  for (const CommInfo &c : comms_)
    out.push_back(&c);
  return out;
}

std::vector<std::string> Registry::nameableComms() const {
  std::vector<std::string> out;
  for (const CommInfo &c : comms_)
    if (c.nameable)
      out.push_back(c.name);
  return out;
}

std::vector<const CommInfo *>
Registry::commsOf(std::string_view backend) const {
  std::vector<const CommInfo *> out;
  for (const CommInfo &c : comms_)
    if (Serves(c, backend))
      out.push_back(&c);
  std::stable_sort(out.begin(), out.end(),
                   [](const CommInfo *a, const CommInfo *b) {
                     return a->preference < b->preference;
                   });
  return out;
}

const BackendInfo *Registry::hostBackend() const {
  for (const BackendInfo &b : backends_)
    if (!b.probe)
      return &b;
  return nullptr;
}

const BackendInfo *Registry::deviceBackend() const {
  for (const BackendInfo &b : backends_)
    if (b.probe)
      return &b;
  return nullptr;
}

} // namespace md::rank
