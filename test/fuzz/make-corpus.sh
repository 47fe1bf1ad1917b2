#!/usr/bin/env bash
# Fills a seed corpus for mdl-parse-fuzzer: every .mdl under models/ and
# test/lit/frontend/ of the source tree.
#
#   test/fuzz/make-corpus.sh SOURCE_ROOT OUT_DIR
set -euo pipefail
src=${1:?usage: make-corpus.sh SOURCE_ROOT OUT_DIR}
out=${2:?usage: make-corpus.sh SOURCE_ROOT OUT_DIR}
mkdir -p "$out"
n=0
for f in "$src"/models/*.mdl "$src"/test/lit/frontend/*.mdl; do
  [[ -f "$f" ]] || continue
  cp "$f" "$out/$(basename "$(dirname "$f")")-$(basename "$f")"
  n=$((n + 1))
done
echo "make-corpus: $n seed(s) in $out"
