//===- HostScalars.cpp - scalars the executor computes on the host --------===//
//
// The encoding of host scalars, the semantics of the scalar instructions and
// the host's copies of the scalars it wrote (HostScalars.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/HostScalars.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "runtime/core/NumberFormat.h"
#include "runtime/core/Status.h"

namespace md::runtime {

bool isFloatPlanDType(fb::DType t) {
  return t == fb::DType::F32 || t == fb::DType::BF16 || t == fb::DType::F16 ||
         t == fb::DType::F64;
}

namespace {

// A host scalar's bytes are unaligned in its buffer: copied, never cast.
template <typename T> void store(uint8_t *out, T x) {
  std::memcpy(out, &x, sizeof x);
}
template <typename T> T load(const uint8_t *in) {
  T x;
  std::memcpy(&x, in, sizeof x);
  return x;
}

} // namespace

void encodeScalar(fb::DType t, const Scalar &v, uint8_t *out) {
  // Only for the integer types: a float value out of int64's range would
  // not convert.
  auto asInt = [&] { return v.isFloat ? static_cast<int64_t>(v.f) : v.i; };
  switch (t) {
  case fb::DType::F32:
    return store(out, static_cast<float>(v.asDouble()));
  case fb::DType::F64:
    return store(out, v.asDouble());
  case fb::DType::BF16:
    return store(out, f32ToBf16(static_cast<float>(v.asDouble())));
  case fb::DType::F16:
    return store(out, f32ToF16(static_cast<float>(v.asDouble())));
  case fb::DType::I32:
    return store(out, static_cast<int32_t>(asInt()));
  case fb::DType::I64:
    return store(out, asInt());
  case fb::DType::Bool:
    out[0] = (v.isFloat ? v.f != 0 : v.i != 0) ? 1 : 0;
    return;
  default:
    return;
  }
}

Scalar decodeScalar(fb::DType t, const uint8_t *in) {
  switch (t) {
  case fb::DType::F32:
    return Scalar::Float(load<float>(in));
  case fb::DType::F64:
    return Scalar::Float(load<double>(in));
  case fb::DType::BF16:
    return Scalar::Float(bf16ToF32(load<uint16_t>(in)));
  case fb::DType::F16:
    return Scalar::Float(f16ToF32(load<uint16_t>(in)));
  case fb::DType::I32:
    return Scalar::Int(load<int32_t>(in));
  case fb::DType::I64:
    return Scalar::Int(load<int64_t>(in));
  case fb::DType::Bool:
    return Scalar::Int(in[0] != 0 ? 1 : 0);
  default:
    return Scalar::Int(0);
  }
}

std::string formatValue(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15)
    return absl::StrFormat("%d", static_cast<int64_t>(v));
  return absl::StrFormat("%.6g", v);
}

//===----------------------------------------------------------------------===//
// The scalar instructions
//===----------------------------------------------------------------------===//

namespace {

absl::StatusOr<Scalar> floatArith(fb::ArithKind kind, fb::DType t, double x,
                                  double z) {
  double r = 0;
  switch (kind) {
  case fb::ArithKind::Add:
    r = x + z;
    break;
  case fb::ArithKind::Sub:
    r = x - z;
    break;
  case fb::ArithKind::Mul:
    r = x * z;
    break;
  case fb::ArithKind::Div:
    r = x / z;
    break;
  case fb::ArithKind::Rem:
    r = std::fmod(x, z);
    break;
  case fb::ArithKind::Neg:
    r = -x;
    break;
  case fb::ArithKind::Min:
    r = std::isnan(x) || std::isnan(z) ? NAN : std::min(x, z);
    break;
  case fb::ArithKind::Max:
    r = std::isnan(x) || std::isnan(z) ? NAN : std::max(x, z);
    break;
  default:
    return absl::InvalidArgumentError("a logical operation on floats");
  }
  if (t == fb::DType::F32)
    r = static_cast<float>(r);
  return Scalar::Float(r);
}

absl::StatusOr<Scalar> intArith(fb::ArithKind kind, fb::DType t, int64_t x,
                                int64_t z) {
  int64_t r = 0;
  bool overflow = false;
  switch (kind) {
  case fb::ArithKind::Add:
    overflow = __builtin_add_overflow(x, z, &r);
    break;
  case fb::ArithKind::Sub:
    overflow = __builtin_sub_overflow(x, z, &r);
    break;
  case fb::ArithKind::Mul:
    overflow = __builtin_mul_overflow(x, z, &r);
    break;
  case fb::ArithKind::Div:
  case fb::ArithKind::Rem:
    if (z == 0)
      return absl::InvalidArgumentError(absl::StrFormat(
          "integer %s by zero",
          kind == fb::ArithKind::Div ? "division" : "remainder"));
    if (x == INT64_MIN && z == -1)
      r = kind == fb::ArithKind::Div ? INT64_MIN : 0;
    else
      r = kind == fb::ArithKind::Div ? x / z : x % z;
    break;
  case fb::ArithKind::Neg:
    r = x == INT64_MIN ? x : -x;
    break;
  case fb::ArithKind::And:
    r = x & z;
    break;
  case fb::ArithKind::Or:
    r = x | z;
    break;
  case fb::ArithKind::Xor:
    r = x ^ z;
    break;
  case fb::ArithKind::Not:
    r = t == fb::DType::Bool ? !x : ~x;
    break;
  case fb::ArithKind::Min:
    r = std::min(x, z);
    break;
  case fb::ArithKind::Max:
    r = std::max(x, z);
    break;
  }
  (void)overflow; // integers wrap around, as arith's do
  if (t == fb::DType::I32)
    r = static_cast<int32_t>(static_cast<uint32_t>(r));
  if (t == fb::DType::Bool)
    r &= 1;
  return Scalar::Int(r);
}

template <typename T> bool compare(fb::CompareKind kind, T x, T z) {
  switch (kind) {
  case fb::CompareKind::Eq:
    return x == z;
  case fb::CompareKind::Ne:
    return !(x == z);
  case fb::CompareKind::Lt:
    return x < z;
  case fb::CompareKind::Le:
    return x <= z;
  case fb::CompareKind::Gt:
    return x > z;
  case fb::CompareKind::Ge:
    return x >= z;
  }
  return false;
}

} // namespace

absl::StatusOr<Scalar> ScalarArith(fb::ArithKind kind, fb::DType t,
                                   const Scalar &a, const Scalar &b) {
  if (isFloatPlanDType(t))
    return floatArith(kind, t, a.asDouble(), b.asDouble());
  return intArith(kind, t, a.i, b.i);
}

bool ScalarCompare(fb::CompareKind kind, const Scalar &a, const Scalar &b) {
  if (a.isFloat || b.isFloat)
    return compare(kind, a.asDouble(), b.asDouble());
  return compare(kind, a.i, b.i);
}

absl::StatusOr<Scalar> ScalarConvert(fb::DType t, const Scalar &a) {
  if (isFloatPlanDType(t))
    return Scalar::Float(a.asDouble());
  if (t == fb::DType::Bool)
    return Scalar::Int(a.asDouble() != 0 ? 1 : 0);
  if (a.isFloat) {
    double v = std::trunc(a.f);
    double lo = t == fb::DType::I32 ? -2147483648.0 : -9223372036854775808.0;
    double hi = t == fb::DType::I32 ? 2147483648.0 : 9223372036854775808.0;
    if (!(v >= lo && v < hi))
      return absl::OutOfRangeError(absl::StrFormat("%g does not convert to %s",
                                                   a.f, plan::DTypeName(t)));
    return Scalar::Int(static_cast<int64_t>(v));
  }
  int64_t v = a.i;
  if (t == fb::DType::I32)
    v = static_cast<int32_t>(static_cast<uint32_t>(v));
  return Scalar::Int(v);
}

//===----------------------------------------------------------------------===//
// HostScalars
//===----------------------------------------------------------------------===//

void HostScalars::remember(const char *at, fb::DType t,
                           const uint8_t *encoded) {
  const char *hi = at + plan::DTypeSize(t);
  forget(at, hi);
  copies_.push_back({at, hi, t, decodeScalar(t, encoded)});
}

absl::StatusOr<Scalar> HostScalars::read(const char *at, fb::DType t,
                                         DeviceRead device) {
  const int64_t size = plan::DTypeSize(t);
  for (const Copy &c : copies_) {
    if (c.lo != at || c.hi - c.lo != size || c.dtype != t)
      continue;
    if (verify_) {
      uint8_t onDevice[8] = {}, onHost[8] = {};
      MD_RETURN_IF_ERROR(device(onDevice));
      encodeScalar(t, c.value, onHost);
      if (std::memcmp(onDevice, onHost, static_cast<size_t>(size)) != 0)
        return absl::InternalError(absl::StrFormat(
            "the host's copy of the scalar (%g) is stale: the device holds %g",
            c.value.asDouble(), decodeScalar(t, onDevice).asDouble()));
    }
    return c.value;
  }
  uint8_t bytes[8] = {};
  MD_RETURN_IF_ERROR(device(bytes));
  return decodeScalar(t, bytes);
}

void HostScalars::forget(const char *lo, const char *hi) {
  copies_.erase(
      std::remove_if(copies_.begin(), copies_.end(),
                     [&](const Copy &c) { return c.lo < hi && lo < c.hi; }),
      copies_.end());
}

} // namespace md::runtime
