#!/usr/bin/env bash
# Runs a test under an instruction-set cap (MD_CPU_ISA, runtime/cpu/CpuIsa.h;
# oneDNN's own cap is set by md from it), so that a machine runs the code
# paths of an older CPU: an AVX-512 machine its AVX2 and baseline paths.
# Exits 77 (CTest's skip) when the CPU has nothing above CAP: then the
# native run of the same test already is that run.
#
#   test/isa/capped.sh CAP COMMAND [ARGS...]      CAP: sse41, avx2 or avx512
set -uo pipefail
cap=${1:?usage: capped.sh CAP COMMAND [ARGS...]}
shift
[[ $# -ge 1 ]] || { echo "usage: capped.sh CAP COMMAND [ARGS...]" >&2; exit 2; }

# The CPU's level as CpuIsa.h's DetectCpuIsa names it, from the flags the
# kernel reports for the first CPU.
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() { for f; do [[ $flags == *" $f "* ]] || return 1; done; }
level=0 # sse41
if has avx2 fma; then
  level=1
  if has avx512f avx512cd avx512bw avx512dq avx512vl; then
    level=2
    has avx512_bf16 avx512_vnni && level=3
  fi
fi
case $cap in
sse41) want=0 ;;
avx2) want=1 ;;
avx512) want=2 ;;
*) echo "capped.sh: unknown cap '$cap' (sse41, avx2 or avx512)" >&2; exit 2 ;;
esac
if ((level <= want)); then
  echo "skipped: this CPU has nothing above $cap; the native run covers it"
  exit 77
fi
export MD_CPU_ISA=$cap
# OpenBLAS picks its kernels when it is loaded, before md could cap it:
# its core type for the cap, as mdrun's launcher sets it for its ranks.
case $cap in
sse41) export OPENBLAS_CORETYPE=Penryn ;;
avx2) export OPENBLAS_CORETYPE=Haswell ;;
avx512) export OPENBLAS_CORETYPE=SkylakeX ;;
esac
echo "capped.sh: MD_CPU_ISA=$cap OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE: $*"
exec "$@"
