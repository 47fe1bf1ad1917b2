#!/usr/bin/env bash
# Runs plan-load-fuzzer for SECONDS over a fresh seed corpus of example plans
# written by md-plan-examples and, in compiler builds, of the plans mdc
# emits for models/ under every preset (the CTest test fuzz-plan-load).
# Fails on any crash, leak, timeout or sanitizer report; the reproducer is
# left in WORK_DIR/artifacts.
#
#   test/fuzz/run-plan-fuzzer.sh FUZZER MD_PLAN_EXAMPLES WORK_DIR SECONDS [MDC MODELS_DIR]
set -euo pipefail
fuzzer=${1:?usage: run-plan-fuzzer.sh FUZZER MD_PLAN_EXAMPLES WORK_DIR SECONDS}
examples=${2:?}
work=${3:?}
seconds=${4:?}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
"$examples" "$work/corpus"
if [[ $# -ge 6 ]]; then
  mdc=$5 models=$6
  tiny=(-D layers=2 -D d=64 -D heads=4 -D seq=64 -D vocab=512)
  for plan in single ddp zero1 fsdp-grad-op fsdp-full fsdp-hybrid; do
    "$mdc" "$models/mlp.mdl" --plan "$plan" -o "$work/corpus/mlp-$plan.fb" 2>/dev/null
    "$mdc" "$models/mlp_bn.mdl" --plan "$plan" -o "$work/corpus/mlp_bn-$plan.fb" 2>/dev/null
    "$mdc" "$models/gpt.mdl" "${tiny[@]}" --plan "$plan" -o "$work/corpus/gpt-tiny-$plan.fb"
  done
fi
echo "run-plan-fuzzer: $(ls "$work/corpus" | wc -l) seed(s) in $work/corpus"
exec "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 -dict="$here/plan.dict" \
  -artifact_prefix="$work/artifacts/" "$work/corpus"
