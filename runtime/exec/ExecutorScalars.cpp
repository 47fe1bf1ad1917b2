//===- ExecutorScalars.cpp - the executor's host scalars ------------------===//
//
// The executor's side of the host scalars (HostScalars.h): reading a
// scalar (the host's copy when it has one), writing one (to the device,
// keeping a copy), dropping the copies an instruction overwrites, and the
// scalar instructions (constants, arithmetic, comparisons, conversions,
// whose semantics HostScalars.cpp defines, and this rank's own numbers,
// rank and local_rank, the plan's only per-rank values).
//
//===----------------------------------------------------------------------===//

#include <algorithm>

#include "absl/strings/str_format.h"
#include "runtime/exec/ExecutorImpl.h"
#include "runtime/core/Status.h"

namespace md::runtime {

using namespace plan_access;

absl::StatusOr<Scalar> Executor::Impl::readScalar(int32_t x, int64_t element) {
  const int64_t offset = element * esize(x);
  bool deviceFailed = false;
  absl::StatusOr<Scalar> v =
      hostScalars_.read(ptrs_[x] + offset, buf(x).dtype(), [&](uint8_t *out) {
        absl::Status s = toHost(out, x, offset, esize(x));
        deviceFailed = !s.ok();
        return s;
      });
  if (!v.ok() && !deviceFailed) // a stale host copy: say whose
    return absl::Status(v.status().code(),
                        absl::StrFormat("buffer %d ('%s'): %s", x,
                                        str(buf(x).name()),
                                        v.status().message()));
  return v;
}

absl::Status Executor::Impl::writeScalar(int32_t x, const Scalar &v) {
  uint8_t bytes[8] = {};
  encodeScalar(buf(x).dtype(), v, bytes);
  MD_RETURN_IF_ERROR(fromHost(x, bytes, 0, esize(x)));
  rememberScalar(x, bytes);
  return absl::OkStatus();
}

void Executor::Impl::rememberScalar(int32_t x, const uint8_t *encoded) {
  hostScalars_.remember(ptrs_[x], buf(x).dtype(), encoded);
}

void Executor::Impl::forgetScalarsWrittenBy(const fb::Instruction &inst) {
  if (hostScalars_.empty() || inst.outputs() == nullptr)
    return;
  for (int32_t x : *inst.outputs()) {
    if (ptrs_[x] == nullptr)
      continue;
    hostScalars_.forget(
        ptrs_[x],
        ptrs_[x] + std::max<int64_t>(layout_.buffers[x].capacity, bytes(x)));
  }
}

absl::StatusOr<std::vector<double>> Executor::Impl::readValues(int32_t x) {
  int64_t n = layout_.buffers[x].elements;
  std::vector<uint8_t> raw(static_cast<size_t>(n * esize(x)));
  MD_RETURN_IF_ERROR(toHost(raw.data(), x, 0, n * esize(x)));
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i)
    out.push_back(
        decodeScalar(buf(x).dtype(), raw.data() + i * esize(x)).asDouble());
  return out;
}

absl::Status Executor::Impl::executeScalar(const fb::Instruction &inst) {
  switch (inst.opcode()) {
  case fb::Opcode::Constant: {
    int32_t y = inst.outputs()->Get(0);
    int64_t n = layout_.buffers[y].elements;
    std::vector<uint8_t> raw(static_cast<size_t>(n * esize(y)));
    bool isF = isFloatPlanDType(buf(y).dtype());
    for (int64_t i = 0; i < n; ++i) {
      Scalar v =
          isF ? Scalar::Float(inst.floats()->Get(static_cast<uint32_t>(i)))
              : Scalar::Int(inst.ints()->Get(static_cast<uint32_t>(i)));
      encodeScalar(buf(y).dtype(), v, raw.data() + i * esize(y));
    }
    return fromHost(y, raw.data(), 0, n * esize(y));
  }
  case fb::Opcode::ScalarArith: {
    int32_t y = inst.outputs()->Get(0);
    MD_ASSIGN_OR_RETURN(Scalar a, readScalar(inst.inputs()->Get(0)));
    Scalar b = Scalar::Int(0);
    if (count(inst.inputs()) > 1) {
      MD_ASSIGN_OR_RETURN(b, readScalar(inst.inputs()->Get(1)));
    }
    auto kind = static_cast<fb::ArithKind>(inst.ints()->Get(0));
    MD_ASSIGN_OR_RETURN(Scalar r, ScalarArith(kind, buf(y).dtype(), a, b));
    return writeScalar(y, r);
  }
  case fb::Opcode::ScalarCompare: {
    MD_ASSIGN_OR_RETURN(Scalar a, readScalar(inst.inputs()->Get(0)));
    MD_ASSIGN_OR_RETURN(Scalar b, readScalar(inst.inputs()->Get(1)));
    auto kind = static_cast<fb::CompareKind>(inst.ints()->Get(0));
    return writeScalar(inst.outputs()->Get(0),
                       Scalar::Int(ScalarCompare(kind, a, b) ? 1 : 0));
  }
  case fb::Opcode::Rank:
    // The plan is the same on every rank; its per-rank values are this
    // executor's.
    return writeScalar(inst.outputs()->Get(0), Scalar::Int(options_.rank));
  case fb::Opcode::LocalRank:
    return writeScalar(inst.outputs()->Get(0),
                       Scalar::Int(options_.localRank >= 0 ? options_.localRank
                                                           : options_.rank));
  case fb::Opcode::ScalarConvert: {
    int32_t y = inst.outputs()->Get(0);
    MD_ASSIGN_OR_RETURN(Scalar a, readScalar(inst.inputs()->Get(0)));
    MD_ASSIGN_OR_RETURN(Scalar r, ScalarConvert(buf(y).dtype(), a));
    return writeScalar(y, r);
  }
  default:
    return absl::InternalError("not a scalar op");
  }
}

} // namespace md::runtime
