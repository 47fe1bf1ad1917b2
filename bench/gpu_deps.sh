#!/usr/bin/env bash
# bench/gpu_deps.sh — the Debian packages md's runtime builds against,
# downloaded into .devdeps/ (which git ignores) with .devdeps/env.sh, for a
# GPU machine that has the CUDA toolkit, CMake and Ninja but none of these
# libraries and no network (bench/gpu_check.sh sources env.sh).
#
#   bench/gpu_deps.sh [--out DIR]
#
# Run on a Debian 12 machine with apt (no root needed: apt-get download).
# Copy the tree with .devdeps/ and .devplans/ (bench/gpu_plans.sh) to the
# GPU machine; there, `source .devdeps/env.sh` unpacks the packages into a
# prefix (no root) and points CMake and the loader at it and at the
# machine's NCCL. The runtime without MLIR needs nothing else; a configure
# with -DCMAKE_IGNORE_PREFIX_PATH=/usr here proves that CMake finds every
# library in the prefix alone (docs/runtime-cuda.md, "On a GPU machine").
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$repo/bench/lib.sh"
bench_options "$0" --out=out="$repo/.devdeps" -- "$@"

# What runtime/, tools/mdrun and test/unit find with CMake (and the shared
# libraries those pull in): plan files, status types, tests, the CPU
# backend's GEMMs (oneDNN, whose CMake config wants OpenCL, and its
# OpenMP) and vector math, checksums, Gloo.
packages=(
  libabsl-dev libabsl20220623
  libflatbuffers-dev libflatbuffers2 flatbuffers-compiler flatbuffers-compiler-dev
  libgtest-dev libgmock-dev
  libopenblas-dev libopenblas0 libopenblas0-pthread libopenblas-pthread-dev libgfortran5
  libdnnl-dev libdnnl2 ocl-icd-opencl-dev ocl-icd-libopencl1 opencl-c-headers libgomp1
  libsleef-dev libsleef3
  libxxhash-dev libxxhash0
  libgloo-dev libgloo0 libhiredis-dev libhiredis0.14 libibverbs-dev libibverbs1
  libnl-3-200 libnl-route-3-200
)
mkdir -p "$out"
cd "$out"
rm -f ./*.deb
if ! apt-get download -q "${packages[@]}" >download.log 2>&1; then
  apt-get update -qq >/dev/null 2>&1 || true
  apt-get download -q "${packages[@]}" >download.log 2>&1 ||
    { echo "gpu_deps.sh: apt-get download failed:" >&2; cat download.log >&2; exit 1; }
fi

cat >env.sh <<'EOF'
# Sourced on the GPU machine from the project's root (bench/gpu_deps.sh
# wrote it): unpacks .devdeps/*.deb into a prefix and points CMake and the
# loader at it, and at the machine's NCCL if CMake would not find it.
md_devdeps=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
md_prefix=${MD_DEVPREFIX:-${TMPDIR:-/tmp}/md-devprefix}
if [ ! -e "$md_prefix/.unpacked" ]; then
  mkdir -p "$md_prefix"
  for d in "$md_devdeps"/*.deb; do dpkg-deb -x "$d" "$md_prefix" || return 1; done
  touch "$md_prefix/.unpacked"
fi
md_lib=$md_prefix/usr/lib/x86_64-linux-gnu
export CMAKE_PREFIX_PATH=$md_prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export CMAKE_INCLUDE_PATH=$md_prefix/usr/include${CMAKE_INCLUDE_PATH:+:$CMAKE_INCLUDE_PATH}
export CMAKE_LIBRARY_PATH=$md_lib:$md_lib/openblas-pthread${CMAKE_LIBRARY_PATH:+:$CMAKE_LIBRARY_PATH}
export LD_LIBRARY_PATH=$md_lib:$md_lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# NCCL as the machine has it: the toolkit's, a system package's, or a
# Python wheel's (nvidia/nccl); cmake/MdCuda.cmake reads NCCL_ROOT.
if [ -z "${NCCL_ROOT:-}" ]; then
  md_site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  # shellcheck disable=SC2086 # md_site is a list of directories
  for h in /usr/include/nccl.h /usr/local/cuda/include/nccl.h \
    $(find $md_site /usr/local /opt -name nccl.h -path '*nccl*' 2>/dev/null | head -3); do
    [ -f "$h" ] && { export NCCL_ROOT=$(dirname "$(dirname "$h")"); break; }
  done
fi
if [ -n "${NCCL_ROOT:-}" ] && [ ! -e "$NCCL_ROOT/lib/libnccl.so" ]; then
  # A wheel ships libnccl.so.2 alone: link it where find_library looks.
  for l in "$NCCL_ROOT"/lib/libnccl.so.*; do
    [ -f "$l" ] && { mkdir -p "$md_prefix/nccl/lib"; ln -sf "$l" "$md_prefix/nccl/lib/libnccl.so"
      export CMAKE_LIBRARY_PATH=$md_prefix/nccl/lib:$CMAKE_LIBRARY_PATH
      export LD_LIBRARY_PATH=$NCCL_ROOT/lib:$LD_LIBRARY_PATH; break; }
  done
fi
echo "md devdeps: prefix $md_prefix; NCCL_ROOT=${NCCL_ROOT:-none found outside the CUDA toolkit}; nvcc: $(command -v nvcc || echo none)"
EOF
echo "gpu_deps.sh: $(ls -1 ./*.deb | wc -l) packages in $out ($(du -sh . | cut -f1)); on the GPU machine: source $(basename "$out")/env.sh"
