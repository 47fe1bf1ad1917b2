#!/usr/bin/env bash
# Installs every Debian package md needs to build and test, and nothing that
# is already there. Safe to run again. Needs root, or sudo.
#
#   scripts/install-deps.sh            # install what is missing
#   scripts/install-deps.sh --check    # only report what is missing (exit 1 if any)
#
# The CUDA toolkit (nvcc, cuBLASLt, NCCL) is not a Debian package md installs:
# when it is present, CMake turns the CUDA backend on; without it md builds
# and tests the rest.
set -euo pipefail

packages=(
  # MLIR/LLVM 22: the compiler half (md-opt, mdc) and lit/FileCheck for tests.
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
  # Plan files, status types and flags, unit tests, CPU GEMM.
  libflatbuffers-dev flatbuffers-compiler libabsl-dev libgtest-dev libgmock-dev
  libopenblas-dev
  # The CPU backend's GEMMs (oneDNN matmul; OpenBLAS is the fallback).
  # oneDNN's CMake config looks for OpenCL, whose -dev package libdnnl-dev
  # only recommends (and recommends are not installed here).
  libdnnl-dev ocl-icd-opencl-dev
  # Vectorised exp/tanh for the CPU backend's GELU, softmax and cross-entropy.
  libsleef-dev
  # Checkpoint checksums (XXH3) and the CPU collectives across nodes (Gloo).
  libxxhash-dev libgloo-dev
  # The .mdl parser's libFuzzer target (test/fuzz): clang++ and libFuzzer.
  clang libclang-rt-14-dev
  # Build tools.
  cmake ninja-build g++ git python3 python3-venv
)

check_only=0
[[ "${1:-}" == "--check" ]] && check_only=1

say() { printf 'install-deps: %s\n' "$*"; }

missing=()
for p in "${packages[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    continue
  fi
  missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  say "all ${#packages[@]} packages are installed"
  exit 0
fi

say "missing: ${missing[*]}"
if [[ $check_only -eq 1 ]]; then
  exit 1
fi

if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
  say "not root: using sudo"
else
  say "error: need root or sudo to install packages" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
say "apt-get update"
"${sudo[@]}" apt-get update -q
say "apt-get install ${missing[*]}"
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"

# Only one libmlir-N-dev can be installed; make sure the right one is.
if ! command -v llvm-config-22 >/dev/null 2>&1; then
  say "error: llvm-config-22 not on PATH after installing LLVM 22" >&2
  exit 1
fi
say "done: installed ${#missing[@]} package(s)"
