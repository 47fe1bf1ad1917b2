//===- Rank.cpp - a rank's backend and comm, made by name -----------------===//

#include "runtime/rank/Rank.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/core/Status.h"

namespace md::rank {

absl::StatusOr<Rank> MakeRank(const Registry &registry, const RankSpec &spec) {
  MD_RETURN_IF_ERROR(registry.status());
  const BackendInfo *backend = registry.backend(spec.backend);
  if (backend == nullptr) {
    std::vector<std::string> names;
    for (const BackendInfo *b : registry.backends())
      names.push_back(b->name);
    return absl::UnimplementedError(
        absl::StrCat("this build has no ", spec.backend, " backend; it runs ",
                     absl::StrJoin(names, ", "), " only"));
  }
  MD_ASSIGN_OR_RETURN(const CommInfo *comm, registry.findComm(spec.comm));
  if (!Serves(*comm, backend->name)) {
    std::vector<std::string> names;
    for (const CommInfo *c : registry.commsOf(backend->name))
      names.push_back(c->name);
    return absl::InvalidArgumentError(
        absl::StrCat("the ", backend->title, " backend takes the ",
                     absl::StrJoin(names, " or "), " comm, not ", comm->name));
  }
  if (comm->needs.oneNode && spec.localWorldSize != spec.worldSize)
    return absl::InvalidArgumentError(absl::StrFormat(
        "the %s comm needs every rank on one node, but LOCAL_WORLD_SIZE=%d "
        "and WORLD_SIZE=%d",
        comm->name, spec.localWorldSize, spec.worldSize));

  Rank r;
  RankBackend made;
  MD_RETURN_IF_ERROR(runtime::StatusOfCall(
      [&]() -> absl::Status {
        MD_ASSIGN_OR_RETURN(made, backend->make(spec));
        return absl::OkStatus();
      },
      [&] { return absl::StrCat("making the ", backend->name, " backend"); }));
  if (made.backend == nullptr)
    return absl::InternalError(absl::StrCat(
        "the ", backend->name, " backend's factory made no backend"));
  r.backend = std::move(made.backend);
  r.where = std::move(made.where);
  r.lines = std::move(made.lines);
  MD_RETURN_IF_ERROR(runtime::StatusOfCall(
      [&]() -> absl::Status {
        MD_ASSIGN_OR_RETURN(r.comm, comm->make(spec, *r.backend));
        if (r.comm == nullptr)
          return absl::InternalError(
              absl::StrCat("the ", comm->name, " comm's factory made no comm"));
        if (made.wrapComm)
          r.comm = made.wrapComm(std::move(r.comm));
        return absl::OkStatus();
      },
      [&] { return absl::StrCat("making the ", comm->name, " comm"); }));
  return r;
}

} // namespace md::rank
