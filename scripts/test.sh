#!/usr/bin/env bash
# Sets up, builds and runs every md test: the README's test command.
#   scripts/test.sh                 # deps (if missing), configure, build, ctest
#   BUILD_DIR=out scripts/test.sh   # another build directory
#   MD_TORCH=0 scripts/test.sh      # no PyTorch: its interop tests skip
# PyTorch (a test- and benchmark-only dependency, ~5 GB with the CUDA
# libraries its Linux wheel brings) goes into a venv outside the checkout,
# $MD_TORCH_VENV (default ~/.cache/md/torch-venv), reused when it exists.
# Extra arguments go to cmake's configure step (e.g. -DMD_ENABLE_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
jobs=${MD_JOBS:-2}

scripts/install-deps.sh

torch_args=()
if [[ ${MD_TORCH:-1} != 0 ]]; then
  venv=${MD_TORCH_VENV:-$HOME/.cache/md/torch-venv}
  if ! "$venv/bin/python" -c 'import torch, safetensors, numpy, matplotlib, tokenizers, tensorboardX, transformers' 2>/dev/null; then
    echo "test.sh: installing PyTorch, safetensors, numpy, matplotlib, tokenizers, tensorboardX and transformers into $venv (once)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet torch safetensors numpy matplotlib tokenizers tensorboardX transformers
  fi
  torch_args=(-DMD_TORCH_PYTHON="$venv/bin/python")
fi

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${torch_args[@]}" "$@"
cmake --build "$build" -j "$jobs"

status=0
ctest --test-dir "$build" --output-on-failure -j "$jobs" || status=$?

# ctest counts each GoogleTest case; lit runs as one ctest entry, so show its
# own count too.
log="$build/Testing/Temporary/LastTest.log"
if [[ -f $log ]]; then
  echo "lit summary:"
  grep -E '^(Total Discovered Tests|  (Passed|Failed|Unsupported|Expectedly Failed|Unresolved|Skipped)):' "$log" | sed 's/^/  /' || true
fi
exit $status
