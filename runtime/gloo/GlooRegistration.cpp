//===- GlooRegistration.cpp - the gloo comm in the runtime's registry -----===//
//
// "gloo": the CPU backend's comm across nodes (runtime/rank/Registry.h),
// and on one node when --comm gloo names it. The ranks meet through the
// rendezvous at rank 0's address, with the fingerprint check; Gloo then
// connects its pairs through the store rank 0 serves there.
//
//===----------------------------------------------------------------------===//

#include <memory>

#include "runtime/gloo/GlooComm.h"
#include "runtime/rank/Registry.h"

namespace md::rank {

absl::Status RegisterGlooComm(Registry &registry) {
  CommInfo info;
  info.name = "gloo";
  info.summary = "Gloo over TCP, the rank processes of one node or several";
  info.needs.backends = {"cpu"};
  info.needs.rendezvous = true;
  info.nameable = true;
  info.preference = 20;
  info.make =
      [](const RankSpec &spec,
         runtime::Backend &) -> absl::StatusOr<std::unique_ptr<runtime::Comm>> {
    gloo::GlooCommOptions o;
    static_cast<net::RendezvousOptions &>(o) = RendezvousOptionsFor(spec);
    o.shardSize = spec.shardSize;
    return gloo::GlooComm::create(o);
  };
  return registry.addComm(std::move(info));
}

} // namespace md::rank
