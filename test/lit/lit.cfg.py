# lit configuration for md. Puts md's tools and LLVM's FileCheck/not/count
# first on PATH, and turns optional parts into lit features (REQUIRES: cuda).
import os
import sys
import lit.formats

config.name = "md"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".mdl", ".test"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.md_obj_root, "test", "lit")

path = os.pathsep.join([config.md_tools_dir, config.llvm_tools_dir,
                        config.environment.get("PATH", os.environ.get("PATH", ""))])
config.environment["PATH"] = path

config.substitutions.append(("%md_src_root", config.md_src_root))
config.substitutions.append(("%python", sys.executable))
config.substitutions.append(("%md_obj_root", config.md_obj_root))

if config.md_enable_cuda:
    config.available_features.add("cuda")

# An instruction-set cap of the CPU backend (docs/runtime-cpu.md,
# "Instruction sets") reaches the tests, so that `MD_CPU_ISA=avx2 ctest`
# runs them as an AVX2 machine would.
for var in ("MD_CPU_ISA", "OPENBLAS_CORETYPE", "ONEDNN_MAX_CPU_ISA",
            "DNNL_MAX_CPU_ISA"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

# cpu-avx512: the CPU backend runs at the avx512 level or above (the CPU's
# flags, as runtime/cpu/CpuIsa.cpp reads them, under MD_CPU_ISA), where
# oneDNN's brgemm kernels give the same bits at any thread count.
def _cpu_level():
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l.split(":", 1)[1].split() for l in f
                          if l.startswith("flags")), [])
    except OSError:
        return 0
    has = lambda *fs: all(x in flags for x in fs)
    level = 0
    if has("avx2", "fma"):
        level = 1
        if has("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"):
            level = 2
    caps = {"sse41": 0, "avx2": 1}
    cap = os.environ.get("MD_CPU_ISA", "").lower()
    return min(level, caps.get(cap, level))

if _cpu_level() >= 2:
    config.available_features.add("cpu-avx512")
