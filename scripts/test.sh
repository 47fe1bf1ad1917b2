#!/usr/bin/env bash
# Sets up, builds and runs every md test: the README's test command.
#   scripts/test.sh                 # deps (if missing), configure, build, ctest
#   BUILD_DIR=out scripts/test.sh   # another build directory
# Extra arguments go to cmake's configure step (e.g. -DMD_ENABLE_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
jobs=${MD_JOBS:-2}

scripts/install-deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
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
