//===- CpuIsa.cpp - the CPU's vector ISA and the MD_CPU_ISA cap ----------===//
//
// Detection goes through the compiler's CPU model (__builtin_cpu_supports),
// which also checks that the OS saves the registers' state (XCR0), so a
// level is only reported when its instructions can run. The cap reaches
// oneDNN through dnnl_set_max_cpu_isa, which must come before oneDNN's
// first primitive: Gemm.cpp reads CpuIsa() before it builds one.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuIsa.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#if MD_CPU_GEMM_ONEDNN
#include "oneapi/dnnl/dnnl.h"
#endif

namespace md::cpu {
namespace {

constexpr IsaLevel kLevels[] = {IsaLevel::sse41, IsaLevel::avx2,
                                IsaLevel::avx512, IsaLevel::avx512_bf16,
                                IsaLevel::amx};

#if MD_CPU_GEMM_ONEDNN
dnnl_cpu_isa_t dnnlIsa(IsaLevel level) {
  switch (level) {
  case IsaLevel::sse41:
    return dnnl_cpu_isa_sse41;
  case IsaLevel::avx2:
    return dnnl_cpu_isa_avx2;
  case IsaLevel::avx512:
    return dnnl_cpu_isa_avx512_core;
  case IsaLevel::avx512_bf16:
    return dnnl_cpu_isa_avx512_core_bf16;
  case IsaLevel::amx:
    return dnnl_cpu_isa_avx512_core_amx;
  }
  return dnnl_cpu_isa_all;
}
#endif

CpuIsaConfig readConfig() {
  CpuIsaConfig c;
  c.cpu = DetectCpuIsa();
  c.effective = c.cpu;
  if (const char *env = std::getenv("MD_CPU_ISA"); env != nullptr && *env) {
    absl::StatusOr<std::optional<IsaLevel>> cap = ParseIsaCap(env);
    if (!cap.ok()) {
      c.error = absl::InvalidArgumentError(
          absl::StrCat("MD_CPU_ISA: ", cap.status().message()));
      return c;
    }
    c.cap = *cap;
    if (c.cap)
      c.effective = std::min(c.cpu, *c.cap);
  }
#if MD_CPU_GEMM_ONEDNN
  // Only with a cap: without one oneDNN keeps its own default, which
  // ONEDNN_MAX_CPU_ISA may have set.
  if (c.cap)
    (void)dnnl_set_max_cpu_isa(dnnlIsa(c.effective));
#endif
  return c;
}

} // namespace

const char *IsaLevelName(IsaLevel level) {
  switch (level) {
  case IsaLevel::sse41:
    return "sse41";
  case IsaLevel::avx2:
    return "avx2";
  case IsaLevel::avx512:
    return "avx512";
  case IsaLevel::avx512_bf16:
    return "avx512_bf16";
  case IsaLevel::amx:
    return "amx";
  }
  return "?";
}

absl::StatusOr<std::optional<IsaLevel>> ParseIsaCap(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower == "native" || lower == "all")
    return std::optional<IsaLevel>();
  for (IsaLevel level : kLevels)
    if (lower == IsaLevelName(level))
      return std::optional<IsaLevel>(level);
  return absl::InvalidArgumentError(
      absl::StrFormat("'%s' is not an instruction set md knows (sse41, avx2, "
                      "avx512, avx512_bf16, amx or native)",
                      name));
}

IsaLevel DetectCpuIsa() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
    return IsaLevel::sse41;
  if (!(__builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl")))
    return IsaLevel::avx2;
  if (!(__builtin_cpu_supports("avx512bf16") &&
        __builtin_cpu_supports("avx512vnni")))
    return IsaLevel::avx512;
  if (!(__builtin_cpu_supports("amx-bf16") &&
        __builtin_cpu_supports("amx-tile")))
    return IsaLevel::avx512_bf16;
  return IsaLevel::amx;
#else
  return IsaLevel::sse41;
#endif
}

std::string CpuIsaConfig::str() const {
  if (!cap)
    return IsaLevelName(effective);
  return absl::StrFormat("%s (MD_CPU_ISA=%s; the CPU has %s)",
                         IsaLevelName(effective), IsaLevelName(*cap),
                         IsaLevelName(cpu));
}

const CpuIsaConfig &CpuIsa() {
  static const CpuIsaConfig config = readConfig();
  return config;
}

absl::Status CheckCpuIsaCap() { return CpuIsa().error; }

const char *OpenBlasCoreType(IsaLevel level) {
  switch (level) {
  case IsaLevel::sse41:
    return "Penryn";
  case IsaLevel::avx2:
    return "Haswell";
  case IsaLevel::avx512:
    return "SkylakeX";
  case IsaLevel::avx512_bf16:
    return "Cooperlake";
  case IsaLevel::amx:
    return "SapphireRapids";
  }
  return "Penryn";
}

} // namespace md::cpu
