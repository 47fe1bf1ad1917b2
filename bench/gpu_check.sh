#!/usr/bin/env bash
# bench/gpu_check.sh — md's whole GPU check in one command, for a GPU
# machine that has only the CUDA toolkit and is lent for minutes: builds the
# runtime without MLIR for this machine's GPU alone, runs the GPU tests, the
# end-to-end test and the GPT-2 124M benchmark, and writes every log and a
# summary to OUT. Each stage has a time limit, and all of them together a
# deadline, so that the logs come back even when a stage hangs.
#
#   bench/gpu_check.sh [--out DIR] [--build DIR] [--arch SM] [--jobs N]
#                      [--deadline S] [--steps N] [--stages LIST]
#                      [--cmake-args "ARG..."]
#
# --out DIR: logs and summary.txt (default $OUT, else gpu-check/); --build
# DIR: the runtime's build directory (default build-gpu/); --arch SM: the
# CUDA architecture to compile for (default: the first GPU's, from
# nvidia-smi, e.g. 90 for an H100); --jobs N: build jobs (default: the
# cores); --deadline S: seconds for everything (default 540); --steps N:
# the benchmark's optimizer steps per plan (default 20); --stages LIST:
# comma-separated, of configure,build,tests,e2e,bench (default all);
# --cmake-args "ARG...": passed to the configure, split at spaces (e.g.
# the rehearsal's -DCMAKE_IGNORE_PREFIX_PATH=/usr, which proves .devdeps/
# complete).
#
# Prepared beforehand, where mdc is (docs/runtime-cuda.md, "On a GPU
# machine"): bench/gpu_plans.sh writes the plans to .devplans/, which the
# end-to-end test and the benchmark read. The runtime's libraries (Abseil,
# FlatBuffers, GoogleTest, OpenBLAS, oneDNN, Gloo, xxHash) must be found by
# CMake: installed, or unpacked into a prefix named by CMAKE_PREFIX_PATH; a
# .devdeps/env.sh (bench/gpu_deps.sh writes it), if present, is sourced to
# do that first.
#
# Exit status: 0 when every stage that ran passed, 1 otherwise; the
# summary says which stage failed and where its log is. Without a GPU the
# tests skip and the benchmark says so: a rehearsal of everything else.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$repo/bench/lib.sh"
bench_options "$0" --out=out="${OUT:-$repo/gpu-check}" --build=build="$repo/build-gpu" \
  --arch=arch= --jobs=jobs="$(nproc)" --deadline=deadline=540 --steps=steps=20 \
  --stages=stages=configure,build,tests,e2e,bench --cmake-args=cmake_args_text= -- "$@"
read -ra cmake_args <<<"$cmake_args_text"
for v in jobs deadline steps; do
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -ge 1 ]] || { echo "gpu_check.sh: --$v ${!v}: not a positive integer" >&2; exit 2; }
done
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
summary=$out/summary.txt
: >"$summary"
start=$(date +%s)
failed=0

say() { echo "$*" | tee -a "$summary"; }
wanted() { [[ ,$stages, == *",$1,"* ]]; }
left() { echo $((deadline - ($(date +%s) - start))); }

# stage NAME LIMIT CMD...: runs CMD with its output in OUT/NAME.log, for at
# most LIMIT seconds or what is left of the deadline; records the outcome.
# Returns CMD's status (124 on a timeout).
stage() {
  local name=$1 limit=$2 t0 rc
  shift 2
  local budget
  budget=$(left)
  ((budget < limit)) && limit=$budget
  if ((limit < 10)); then
    say "$name: not run, the deadline is reached"
    failed=1
    return 124
  fi
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  local took=$(($(date +%s) - t0))
  case $rc in
  0) say "$name: ok in ${took} s" ;;
  77) say "$name: skipped in ${took} s: $(grep -m1 -iE 'skip|no GPU|no usable' "$out/$name.log" || tail -1 "$out/$name.log")" ;;
  124 | 137) say "$name: TIMED OUT after ${took} s (limit $limit s); log $name.log"; failed=1 ;;
  *) say "$name: FAILED (exit $rc) in ${took} s; log $name.log"; failed=1 ;;
  esac
  return $rc
}

# --- The machine ---------------------------------------------------------------
if [[ -f $repo/.devdeps/env.sh ]]; then
  # shellcheck disable=SC1091
  source "$repo/.devdeps/env.sh" >"$out/devdeps.log" 2>&1 ||
    { echo "gpu_check.sh: .devdeps/env.sh failed: $(cat "$out/devdeps.log")" >&2; exit 1; }
fi
{
  echo "md $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%FT%TZ)"
  echo "CPU: $(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo) x $(nproc)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader 2>&1 |
      sed 's/^/GPU: /'
  else
    echo "GPU: none found (no nvidia-smi)"
  fi
  nvcc --version 2>&1 | tail -1 | sed 's/^/nvcc: /'
} >"$out/machine.txt"
cat "$out/machine.txt" >>"$summary"
if [[ -z $arch ]]; then
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  [[ -n $arch ]] || arch=90
fi
[[ $arch =~ ^[0-9]+[a-z]?$ ]] || { say "gpu_check.sh: --arch $arch: not a CUDA architecture like 90"; exit 2; }
say "building for sm_$arch; deadline $deadline s"

# --- Build ---------------------------------------------------------------------
if wanted configure; then
  stage configure 120 cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMD_BUILD_COMPILER=OFF -DMD_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    "${cmake_args[@]}" ||
    { say "see configure.log: CMake must find CUDA, cuBLASLt, NCCL and the runtime's libraries"; exit 1; }
fi
if wanted build; then
  stage build 300 cmake --build "$build" -j "$jobs" || exit 1
fi

# --- Tests ---------------------------------------------------------------------
# The cases that need a GPU: every kernel and gradient on the CUDA backend
# against the f64 references, the device layer, NCCL at W = 1, two ranks
# sharing the GPU through the staged comm, the watchdog.
if wanted tests; then
  stage tests 180 ctest --test-dir "$build" --output-on-failure --timeout 120 --no-tests=error \
    -R '/cuda( |$)|^CudaDevice\.|^BackendSetUp\.|^NcclComm|^StagedComm'
  {
    grep -E 'tests passed|tests failed|^[[:space:]]+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted)\)' "$out/tests.log"
    echo "$(grep -cE '^[[:space:]]+[0-9]+ - .*\(Skipped\)' "$out/tests.log") skipped"
  } | sed 's/^[[:space:]]*/  /' >>"$summary"
fi
if wanted e2e; then
  # The tiny GPT on CUDA (W = 1 and 2 ranks sharing the GPU) against the
  # CPU backend, from .devplans/ (bench/gpu_plans.sh).
  stage e2e 240 ctest --test-dir "$build" --output-on-failure -V -R '^mdrun-gpu-e2e$'
  grep -E 'vs .*largest|^[0-9]+: (FAIL|SKIP)' "$out/e2e.log" | sed 's/^[0-9]*: /  /' >>"$summary"
fi

# --- Benchmark -----------------------------------------------------------------
if wanted bench; then
  stage bench 240 "$repo/bench/gpu_gpt2.sh" --build "$build" --plans "$repo/.devplans" \
    --steps "$steps" --keep "$out/bench"
  sed -n '/^GPT-2 124M/,$p' "$out/bench.log" | sed 's/^/  /' >>"$summary"
  # llm.c's anchor: GPT-2 124M at about 470K tokens/s per H100 (8 x H100,
  # 524,288 tokens in 140 ms per step).
  tps=$(awk '$1 == "single" && $3 ~ /^[0-9]+$/ { print $3 }' "$out/bench.log")
  [[ -n $tps ]] && say "  single: $tps tokens/s = $(awk -v t="$tps" 'BEGIN { printf "%.2f", t / 470000 }') x llm.c's ~470K tokens/s per H100"
fi

say "total $(($(date +%s) - start)) s; $([[ $failed -eq 0 ]] && echo 'every stage that ran passed' || echo 'SOME STAGE FAILED')"
exit $failed
