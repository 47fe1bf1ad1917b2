//===- BackendTestUtil.h - tensors and references for the kernel tests -*- C++
//-*-===//
//
// The kernel tests talk to a backend only through runtime::Backend:
// DeviceTensor allocates backend memory, uploads host values (rounded to
// the tensor's element type) and downloads results widened to f32 or f64.
// So the same suites run against any backend; a backend is a
// BackendFactory in INSTANTIATE_TEST_SUITE_P.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TEST_UNIT_BACKENDTESTUTIL_H
#define MD_TEST_UNIT_BACKENDTESTUTIL_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "runtime/core/Backend.h"
#include "runtime/core/NumberFormat.h"

namespace md::test {

using runtime::Backend;
using runtime::DType;
using runtime::Shape;
using runtime::TensorRef;

/// `make` fails (with the reason) when the backend cannot be set up.
/// `absent`, where set, says why the machine has no device for the backend
/// at all (CUDA: no driver, no GPU), or nullopt when it has one.
struct BackendFactory {
  std::string name;
  std::function<absl::StatusOr<std::unique_ptr<Backend>>()> make;
  std::function<std::optional<std::string>()> absent;
};

/// What a suite does with its backend: run, skip (the machine has no
/// device for it), or fail (it has one, and setting the backend up failed:
/// a broken GPU path must not pass as a skip).
struct BackendSetUp {
  std::unique_ptr<Backend> backend;
  enum class Verdict { Run, Skip, Fail } verdict = Verdict::Run;
  std::string why;
};

inline BackendSetUp setUpBackend(const BackendFactory &factory) {
  BackendSetUp out;
  absl::StatusOr<std::unique_ptr<Backend>> made = factory.make();
  if (made.ok()) {
    out.backend = std::move(*made);
    return out;
  }
  std::optional<std::string> none =
      factory.absent ? factory.absent() : std::nullopt;
  out.verdict =
      none ? BackendSetUp::Verdict::Skip : BackendSetUp::Verdict::Fail;
  out.why = none ? absl::StrCat(factory.name, " backend: ", *none)
                 : absl::StrCat(factory.name,
                                " backend failed to set up with its device "
                                "present: ",
                                made.status().ToString());
  return out;
}

/// The backend of a suite's parameter; GTEST_SKIP() when the machine has no
/// device for it, a fatal failure when it has one and the set-up failed.
/// Call from SetUp().
#define MD_MAKE_BACKEND_OR_SKIP(factory, out)                                  \
  do {                                                                         \
    ::md::test::BackendSetUp setUp_ = ::md::test::setUpBackend(factory);       \
    if (setUp_.verdict == ::md::test::BackendSetUp::Verdict::Skip)             \
      GTEST_SKIP() << setUp_.why;                                              \
    if (setUp_.verdict == ::md::test::BackendSetUp::Verdict::Fail)             \
      FAIL() << setUp_.why;                                                    \
    (out) = std::move(setUp_.backend);                                         \
  } while (0)
inline void PrintTo(const BackendFactory &f, std::ostream *os) {
  *os << f.name;
}
inline std::string
backendName(const ::testing::TestParamInfo<BackendFactory> &info) {
  return info.param.name;
}

inline int64_t numel(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

/// Uniform values in [lo, hi), the same for a given seed on every run.
inline std::vector<double> randomValues(int64_t n, uint32_t seed,
                                        double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::vector<double> v(n);
  for (double &x : v)
    x = lo + (hi - lo) * (gen() / 4294967296.0);
  return v;
}

/// The value a float element type stores for x (f32 rounding, then bf16
/// or f16 rounding to nearest even).
inline double roundTo(DType t, double x) {
  float f = float(x);
  switch (t) {
  case DType::bf16:
    return runtime::bf16ToF32(runtime::f32ToBf16(f));
  case DType::f16:
    return runtime::f16ToF32(runtime::f32ToF16(f));
  default:
    return f;
  }
}

inline std::vector<double> roundAll(DType t, std::vector<double> v) {
  for (double &x : v)
    x = roundTo(t, x);
  return v;
}

/// A tensor in backend memory.
class DeviceTensor {
public:
  DeviceTensor(Backend &backend, DType dtype, Shape shape)
      : backend_(&backend) {
    int64_t bytes = numel(shape) * runtime::dtypeSize(dtype);
    auto buffer = backend.allocate(bytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (buffer.ok())
      buffer_ = std::move(*buffer);
    ref_ = TensorRef(buffer_.data(), dtype, std::move(shape));
  }

  /// A float tensor holding `values` rounded to `dtype`.
  static DeviceTensor floats(Backend &backend, DType dtype, Shape shape,
                             const std::vector<double> &values) {
    DeviceTensor t(backend, dtype, std::move(shape));
    EXPECT_EQ(int64_t(values.size()), t.ref_.numel());
    std::vector<uint8_t> host(t.ref_.bytes());
    for (size_t i = 0; i < values.size(); ++i) {
      float f = float(values[i]);
      if (dtype == DType::f32)
        std::memcpy(host.data() + 4 * i, &f, 4);
      else {
        uint16_t h =
            dtype == DType::bf16 ? runtime::f32ToBf16(f) : runtime::f32ToF16(f);
        std::memcpy(host.data() + 2 * i, &h, 2);
      }
    }
    t.upload(host);
    return t;
  }

  /// An i32 or i64 tensor.
  static DeviceTensor indices(Backend &backend, DType dtype, Shape shape,
                              const std::vector<int64_t> &values) {
    DeviceTensor t(backend, dtype, std::move(shape));
    EXPECT_EQ(int64_t(values.size()), t.ref_.numel());
    std::vector<uint8_t> host(t.ref_.bytes());
    for (size_t i = 0; i < values.size(); ++i) {
      if (dtype == DType::i32) {
        int32_t v = int32_t(values[i]);
        std::memcpy(host.data() + 4 * i, &v, 4);
      } else {
        std::memcpy(host.data() + 8 * i, &values[i], 8);
      }
    }
    t.upload(host);
    return t;
  }

  const TensorRef &ref() const { return ref_; }
  operator const TensorRef &() const { return ref_; }

  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> host(ref_.bytes());
    if (!host.empty()) {
      absl::Status s = backend_->copy(host.data(), ref_.data, ref_.bytes(),
                                      runtime::kComputeStream);
      EXPECT_TRUE(s.ok()) << s;
    }
    return host;
  }

  /// The float elements, widened exactly.
  std::vector<double> values() const {
    std::vector<uint8_t> host = bytes();
    std::vector<double> v(ref_.numel());
    for (size_t i = 0; i < v.size(); ++i) {
      if (ref_.dtype == DType::f32) {
        float f;
        std::memcpy(&f, host.data() + 4 * i, 4);
        v[i] = f;
      } else {
        uint16_t h;
        std::memcpy(&h, host.data() + 2 * i, 2);
        v[i] = ref_.dtype == DType::bf16 ? runtime::bf16ToF32(h)
                                         : runtime::f16ToF32(h);
      }
    }
    return v;
  }

  std::vector<int64_t> indexValues() const {
    std::vector<uint8_t> host = bytes();
    std::vector<int64_t> v(ref_.numel());
    for (size_t i = 0; i < v.size(); ++i) {
      if (ref_.dtype == DType::i32) {
        int32_t x;
        std::memcpy(&x, host.data() + 4 * i, 4);
        v[i] = x;
      } else {
        std::memcpy(&v[i], host.data() + 8 * i, 8);
      }
    }
    return v;
  }

  double scalar() const { return values().at(0); }

private:
  void upload(const std::vector<uint8_t> &host) {
    if (host.empty())
      return;
    absl::Status s = backend_->copy(ref_.data, host.data(), ref_.bytes(),
                                    runtime::kComputeStream);
    EXPECT_TRUE(s.ok()) << s;
  }

  Backend *backend_;
  runtime::Buffer buffer_;
  TensorRef ref_;
};

/// Checks |got - want| <= atol + rtol * |want| elementwise and reports the
/// worst element.
inline ::testing::AssertionResult allClose(const std::vector<double> &got,
                                           const std::vector<double> &want,
                                           double rtol, double atol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "size " << got.size() << " vs expected " << want.size();
  double worst = -1;
  size_t worstAt = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bool nanOk = std::isnan(got[i]) && std::isnan(want[i]);
    double err = std::fabs(got[i] - want[i]);
    double excess = err - (atol + rtol * std::fabs(want[i]));
    if (nanOk)
      continue;
    if (std::isnan(excess) || excess > 0) {
      if (std::isnan(excess) || excess > worst) {
        worst = std::isnan(excess) ? INFINITY : excess;
        worstAt = i;
      }
    }
  }
  if (worst < 0)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << worstAt << ": got " << got[worstAt] << ", want "
         << want[worstAt] << " (rtol " << rtol << ", atol " << atol << ")";
}

/// Exact equality of two value lists, reported in hex floats.
inline ::testing::AssertionResult sameValues(const std::vector<double> &got,
                                             const std::vector<double> &want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "size " << got.size() << " vs expected " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && !(std::isnan(got[i]) && std::isnan(want[i]))) {
      std::ostringstream os;
      os << "element " << i << ": got " << std::hexfloat << got[i] << ", want "
         << want[i];
      return ::testing::AssertionFailure() << os.str();
    }
  return ::testing::AssertionSuccess();
}

/// Bit-for-bit equality of two downloads.
inline ::testing::AssertionResult sameBits(const std::vector<uint8_t> &a,
                                           const std::vector<uint8_t> &b) {
  if (a == b)
    return ::testing::AssertionSuccess();
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i])
      return ::testing::AssertionFailure() << "first difference at byte " << i;
  return ::testing::AssertionFailure() << "sizes differ";
}

/// The central-difference vector-Jacobian product: for each element i of
/// input `which`, (L(x + h e_i) - L(x - h e_i)) / 2h with
/// L(x) = sum(dy * f(x)). f is an f64 reference forward.
using RefForward = std::function<std::vector<double>(
    const std::vector<std::vector<double>> &)>;
inline std::vector<double>
numericGrad(const RefForward &f, std::vector<std::vector<double>> inputs,
            size_t which, const std::vector<double> &dy, double h = 1e-6) {
  auto loss = [&](const std::vector<std::vector<double>> &in) {
    std::vector<double> y = f(in);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i)
      l += dy[i] * y[i];
    return l;
  };
  std::vector<double> g(inputs[which].size());
  for (size_t i = 0; i < g.size(); ++i) {
    double x = inputs[which][i];
    double step = h * std::max(1.0, std::fabs(x));
    inputs[which][i] = x + step;
    double up = loss(inputs);
    inputs[which][i] = x - step;
    double down = loss(inputs);
    inputs[which][i] = x;
    g[i] = (up - down) / (2 * step);
  }
  return g;
}

} // namespace md::test

#endif // MD_TEST_UNIT_BACKENDTESTUTIL_H
