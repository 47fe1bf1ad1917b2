//===- HostScalars.h - scalars the executor computes on the host -*- C++
//-*-===//
//
// Some of a plan's values live on the host as much as on the device: the
// step, the learning rate, constants, scalar arithmetic and comparisons,
// loop counters. The executor computes them here, writes their one-element
// buffers to the device, and keeps a host copy (HostScalars), so that
// reading one back (an optimizer's learning rate, a branch condition) needs
// no wait for the device. This file holds
//   - Scalar and its little-endian encoding in each plan dtype;
//   - the semantics of the scalar instructions (ScalarArith, ScalarCompare,
//     ScalarConvert), which are pure functions of their operands;
//   - HostScalars, the host copies, keyed by device address.
// docs/runtime.md ("Scalars on the host") describes the contract.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_HOSTSCALARS_H
#define MD_RUNTIME_EXEC_HOSTSCALARS_H

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/plan/Schema.h"

namespace md::runtime {

/// A host scalar: a float or an integer (bools are integers 0 and 1).
struct Scalar {
  bool isFloat = false;
  double f = 0;
  int64_t i = 0;
  static Scalar Float(double v) { return {true, v, 0}; }
  static Scalar Int(int64_t v) { return {false, 0, v}; }
  double asDouble() const { return isFloat ? f : static_cast<double>(i); }
};

/// Whether a plan dtype holds floats (F64 included, a host-only type).
bool isFloatPlanDType(fb::DType t);

/// Little-endian bytes of `v` as one element of `t` (at most 8 bytes):
/// floats rounded to nearest even, integers truncated toward zero, bools
/// 0 or 1.
void encodeScalar(fb::DType t, const Scalar &v, uint8_t *out);
/// The element of type `t` at `in`.
Scalar decodeScalar(fb::DType t, const uint8_t *in);

/// A value as `print` shows it: integers without a fraction, else %.6g.
std::string formatValue(double v);

/// `a kind b` (or `kind a` for Neg and Not) computed as the result type
/// `t` computes it: floats in double, then rounded for F32; integers wrap
/// around at 64 bits, then at I32's width, bools keep their low bit (as
/// MLIR's arith does). Division or remainder of integers by zero is an
/// error, and so is a logical operation on floats.
absl::StatusOr<Scalar> ScalarArith(fb::ArithKind kind, fb::DType t,
                                   const Scalar &a, const Scalar &b);
/// `a kind b`, in double when either is a float (NaN compares unequal).
bool ScalarCompare(fb::CompareKind kind, const Scalar &a, const Scalar &b);
/// `a` converted to `t`: floats truncate toward zero into integers (an
/// OutOfRange error when the result does not fit), anything nonzero is a
/// true bool, integers narrow to I32 by wrapping around.
absl::StatusOr<Scalar> ScalarConvert(fb::DType t, const Scalar &a);

/// The host's copies of one-element buffers the host wrote, by device
/// address. A copy holds the value as the device holds it (rounded to the
/// buffer's type). Whoever writes device bytes must forget the copies they
/// overlap first: views and reused arena bytes share addresses.
class HostScalars {
public:
  /// Copies bytes from the device into `out` and waits for them.
  using DeviceRead = absl::FunctionRef<absl::Status(uint8_t *out)>;

  /// With `verify`, every read that finds a copy also reads the device and
  /// returns an Internal error when the two differ (MD_VERIFY_HOST_SCALARS).
  explicit HostScalars(bool verify = false) : verify_(verify) {}

  /// Remembers the element of type `t` at device address `at`, whose bytes
  /// the host has just written as `encoded`.
  void remember(const char *at, fb::DType t, const uint8_t *encoded);
  /// The element of type `t` at `at`: the host's copy when there is one,
  /// else what `device` reads.
  absl::StatusOr<Scalar> read(const char *at, fb::DType t, DeviceRead device);
  /// Drops every copy with a byte in [lo, hi).
  void forget(const char *lo, const char *hi);
  bool empty() const { return copies_.empty(); }
  size_t size() const { return copies_.size(); }
  bool verifying() const { return verify_; }

private:
  struct Copy {
    const char *lo = nullptr, *hi = nullptr;
    fb::DType dtype = fb::DType::F32;
    Scalar value;
  };
  std::vector<Copy> copies_;
  bool verify_ = false;
};

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_HOSTSCALARS_H
