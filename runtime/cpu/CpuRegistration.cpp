//===- CpuRegistration.cpp - the CPU backend in the runtime's registry ----===//
//
// "cpu": the host backend, which runs anywhere and is the fallback when no
// device is usable (runtime/rank/Registry.h). With RankSpec::overlapComm it
// runs its comm stream on a thread of its own (CommThread.h) and wraps the
// rank's host comm so that its collectives queue on that stream.
//
//===----------------------------------------------------------------------===//

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Status.h"
#include "runtime/cpu/CommThread.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/CpuIsa.h"
#include "runtime/rank/Registry.h"

namespace md::rank {
namespace {

absl::StatusOr<RankBackend> makeCpu(const RankSpec &spec) {
  RankBackend made;
  auto cpuBackend = std::make_unique<cpu::CpuBackend>(spec.threads);
  MD_RETURN_IF_ERROR(cpu::CheckCpuIsaCap());
  made.lines.push_back(absl::StrCat("cpu: ", cpu::CpuBackend::isaReport()));
  for (const std::string &w : cpu::CpuBackend::isaWarnings())
    made.lines.push_back(absl::StrCat("warning: ", w));
  made.where =
      absl::StrFormat("%d BLAS thread%s per rank", cpuBackend->threads(),
                      cpuBackend->threads() == 1 ? "" : "s");
  if (!spec.overlapComm) {
    made.backend = std::move(cpuBackend);
    absl::StrAppend(&made.where, ", no comm thread");
    return made;
  }
  auto threaded =
      std::make_unique<cpu::CommThreadBackend>(std::move(cpuBackend));
  cpu::CommThreadBackend *stream = threaded.get();
  runtime::FlightRecorder *recorder = spec.recorder;
  made.backend = std::move(threaded);
  absl::StrAppend(&made.where, ", a comm thread");
  made.wrapComm = [stream, recorder](std::unique_ptr<runtime::Comm> host)
      -> std::unique_ptr<runtime::Comm> {
    return std::make_unique<cpu::CommThreadComm>(std::move(host), *stream,
                                                 recorder);
  };
  return made;
}

} // namespace

absl::Status RegisterCpuBackend(Registry &registry) {
  BackendInfo info;
  info.name = "cpu";
  info.title = "CPU";
  info.overlapOnRequest = true;
  info.make = makeCpu;
  return registry.addBackend(std::move(info));
}

} // namespace md::rank
