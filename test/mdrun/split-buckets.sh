#!/usr/bin/env bash
# Buckets that split a wrap unit: models/mlp.mdl's ddp-small-buckets reduces
# its one unit (814 KB) in ranges under a 256 KiB bucket_cap (fc2, fc1.bias,
# fc1.weight), which md-bucketing packs into two all-reduces (fc2 with
# fc1.bias, then fc1.weight alone), where ddp reduces it in one. Trained 20 steps at W = 2 on the CPU backend, the
# two give bitwise identical weights (an all-reduce adds each element alone),
# and mdc --explain's memory is mdrun --inspect's, byte for byte.
#
#   test/mdrun/split-buckets.sh MDC MDRUN PYTHON3 MODELS_DIR WORK_DIR
set -uo pipefail
usage="usage: split-buckets.sh MDC MDRUN PYTHON3 MODELS_DIR WORK_DIR"
mdc=${1:?$usage}
mdrun=${2:?$usage}
python=${3:?$usage}
models=${4:?$usage}
work=${5:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for plan in ddp ddp-small-buckets; do
  if ! timeout 60 "$mdc" "$models/mlp.mdl" --plan "$plan" --world-size 2 -o "$plan.fb" 2>"$plan.mdc.err"; then
    fail "mdc --plan $plan:"$'\n'"$(cat "$plan.mdc.err")"
    continue
  fi
  timeout 120 "$mdrun" --backend cpu --threads 1 --ranks 2 --steps 20 --log-every 0 \
    --save-final "$plan.safetensors" "$plan.fb" >"$plan.out" 2>"$plan.err" ||
    fail "mdrun $plan.fb:"$'\n'"$(tail -n 20 "$plan.out" "$plan.err")"
  "$mdc" "$models/mlp.mdl" --plan "$plan" --world-size 2 --explain >"$plan.explain" 2>&1 ||
    fail "mdc --explain --plan $plan: $(cat "$plan.explain")"
  "$mdrun" --inspect "$plan.fb" --world-size 2 >"$plan.inspect" 2>&1 ||
    fail "mdrun --inspect $plan.fb: $(cat "$plan.inspect")"
  memory() { sed -n '/^memory per rank/,/^  peak/p' "$1"; }
  [[ -n $(memory "$plan.explain") ]] || fail "$plan: no memory section in --explain"
  diff <(memory "$plan.explain") <(memory "$plan.inspect") >mem.txt ||
    fail "$plan: mdc --explain and mdrun --inspect disagree on memory:"$'\n'"$(cat mem.txt)"
done
[[ $failures -eq 0 ]] || exit 1

# The gradient all-reduces: one of the unit under ddp, two under
# ddp-small-buckets.
reductions() { grep -cE '^    all_reduce world f32 bucket [0-9]+: (814120|11304|802816) bytes' "$1"; }
[[ $(reductions ddp.explain) -eq 1 && $(reductions ddp-small-buckets.explain) -eq 2 ]] ||
  fail "expected 1 and 2 gradient all-reduces:"$'\n'"$(grep all_reduce ./*.explain)"
if ! "$python" "$here/stcompare.py" --bitwise ddp.safetensors ddp-small-buckets.safetensors >cmp.txt; then
  fail "ddp and ddp-small-buckets give different weights after 20 steps:"$'\n'"$(cat cmp.txt)"
fi
[[ $failures -eq 0 ]] || exit 1
echo "mlp at W = 2: ddp (1 gradient all-reduce) and ddp-small-buckets (2) give bitwise identical weights after 20 steps"
