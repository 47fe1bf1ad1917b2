//===- TestBackends.h - the backends the kernel suites run against -*- C++ -*-===//
//
// Every backend-agnostic suite is instantiated with these. A CUDA factory
// joins the list when the CUDA backend lands; a backend that cannot run on
// this machine should make its tests skip with the reason.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TEST_UNIT_TESTBACKENDS_H
#define MD_TEST_UNIT_TESTBACKENDS_H

#include <vector>

#include "runtime/cpu/CpuBackend.h"
#include "test/unit/BackendTestUtil.h"

namespace md::test {

inline std::vector<BackendFactory> testBackends() {
  // One BLAS thread: the tests share two cores with other test processes.
  return {{"cpu", [] { return std::make_unique<cpu::CpuBackend>(1); }}};
}

} // namespace md::test

#endif // MD_TEST_UNIT_TESTBACKENDS_H
