#!/usr/bin/env bash
# Runs a .mdl fuzzer (mdl-parse-fuzzer, md-fuzz-compile) for SECONDS, or for
# RUNS inputs when given, over a fresh copy of the seed corpus (the CTest
# tests fuzz-mdl-parse and fuzz-md-compile). Fails on any crash, leak,
# timeout or sanitizer report; the reproducer is left in WORK_DIR.
#
#   test/fuzz/run-fuzzer.sh FUZZER SOURCE_ROOT WORK_DIR SECONDS [RUNS]
set -euo pipefail
fuzzer=${1:?usage: run-fuzzer.sh FUZZER SOURCE_ROOT WORK_DIR SECONDS}
src=${2:?}
work=${3:?}
seconds=${4:?}
runs=${5:--1}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
"$here/make-corpus.sh" "$src" "$work/corpus"
exec "$fuzzer" -max_total_time="$seconds" -runs="$runs" -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 -dict="$here/mdl.dict" \
  -artifact_prefix="$work/artifacts/" "$work/corpus"
