#!/usr/bin/env bash
# Runs mdl-parse-fuzzer for SECONDS over a fresh copy of the seed corpus (the
# CTest test fuzz-mdl-parse). Fails on any crash, leak, timeout or sanitizer
# report; the reproducer is left in WORK_DIR.
#
#   test/fuzz/run-fuzzer.sh FUZZER SOURCE_ROOT WORK_DIR SECONDS
set -euo pipefail
fuzzer=${1:?usage: run-fuzzer.sh FUZZER SOURCE_ROOT WORK_DIR SECONDS}
src=${2:?}
work=${3:?}
seconds=${4:?}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
"$here/make-corpus.sh" "$src" "$work/corpus"
exec "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 -dict="$here/mdl.dict" \
  -artifact_prefix="$work/artifacts/" "$work/corpus"
