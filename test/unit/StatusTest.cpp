//===- StatusTest.cpp - runtime/core/Status.h's StatusOfCall -------------===//
//
// An exception a library lets out becomes the Status of the call that let it
// out, naming it; a Status passes through; the name is built only on an
// exception.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Status.h"

#include <new>
#include <stdexcept>
#include <string>

#include "gtest/gtest.h"

namespace md::runtime {
namespace {

TEST(StatusOfCall, PassesAStatusThrough) {
  int named = 0;
  auto name = [&] {
    ++named;
    return std::string("matmul");
  };
  EXPECT_TRUE(StatusOfCall([] { return absl::OkStatus(); }, name).ok());
  absl::Status s = StatusOfCall(
      [] { return absl::InvalidArgumentError("matmul: bad shape"); }, name);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "matmul: bad shape");
  EXPECT_EQ(named, 0);
}

TEST(StatusOfCall, TurnsExceptionsIntoStatuses) {
  auto name = [] { return "matmul"; };
  absl::Status s = StatusOfCall(
      []() -> absl::Status {
        throw std::runtime_error("could not create a primitive");
      },
      name);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(),
            "matmul: a library threw: could not create a primitive");
  s = StatusOfCall([]() -> absl::Status { throw std::bad_alloc(); }, name);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "matmul: out of host memory");
  s = StatusOfCall([]() -> absl::Status { throw 42; }, name);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "matmul: a library threw a non-standard exception");
}

} // namespace
} // namespace md::runtime
