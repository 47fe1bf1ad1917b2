#!/usr/bin/env bash
# Sharded gradient accumulation (`grad_accumulation = sharded`) trained by
# mdrun on the CPU backend at W = 2, against the default local accumulation,
# on test/mdrun/models/mlp.mdl (2 micro-steps of accumulation per rank):
#
# 1. With f32 parameters the weights after 20 steps agree with local
#    accumulation within 1e-6 relative per tensor (the sums run in another
#    order), and differ (the test can fail); the losses agree to the 4
#    decimals the log prints.
# 2. mdc --explain reports the smaller accumulator and the reduce-scatters
#    added, and its memory section is mdrun --inspect's, byte for byte.
#
#   test/mdrun/grad-accumulation.sh MDC MDRUN PYTHON3 WORK_DIR
set -uo pipefail
usage="usage: grad-accumulation.sh MDC MDRUN PYTHON3 WORK_DIR"
mdc=${1:?$usage}
mdrun=${2:?$usage}
python=${3:?$usage}
work=${4:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
model=$here/models/mlp.mdl
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for mode in local sharded; do
  if ! timeout 60 "$mdc" "$model" --plan full-f32 --world-size 2 \
    --grad-accumulation "$mode" -o "$mode.fb" 2>"$mode.mdc.err"; then
    fail "mdc --grad-accumulation $mode:"$'\n'"$(cat "$mode.mdc.err")"
    continue
  fi
  timeout 120 "$mdrun" --backend cpu --threads 1 --ranks 2 --steps 20 \
    --log-every 10 --save-final "$mode.safetensors" "$mode.fb" >"$mode.out" 2>"$mode.err" ||
    fail "mdrun $mode.fb:"$'\n'"$(tail -n 20 "$mode.out" "$mode.err")"
done
[[ $failures -eq 0 ]] || exit 1

# 1. The weights: close, not equal.
if ! "$python" "$here/stcompare.py" --rtol 1e-6 local.safetensors sharded.safetensors >cmp.txt; then
  fail "sharded and local accumulation differ by more than 1e-6 relative:"$'\n'"$(cat cmp.txt)"
fi
echo "mlp full-f32 at W = 2, sharded vs local accumulation after 20 steps:" \
  "largest relative difference of a tensor $(sed -n 's/^max_rel_diff //p' cmp.txt)"
"$python" "$here/stcompare.py" --bitwise local.safetensors sharded.safetensors >/dev/null &&
  fail "sharded accumulation gave the local weights bit for bit: is it in effect?"
losses() { sed -nE 's/^step +([0-9]+)\/20 +loss ([-0-9.]+).*/\1 \2/p' "$1"; }
diff <(losses local.out) <(losses sharded.out) >losses.txt ||
  fail "the logged losses differ:"$'\n'"$(cat losses.txt)"
[[ $(losses local.out | wc -l) -eq 3 ]] ||
  fail "expected the losses of steps 1, 10 and 20 in local.out:"$'\n'"$(cat local.out)"

# 2. The report and the memory plan.
for mode in local sharded; do
  "$mdc" "$model" --plan full-f32 --world-size 2 --grad-accumulation "$mode" \
    --explain >"$mode.explain" 2>&1 || fail "mdc --explain ($mode): $(cat "$mode.explain")"
  "$mdrun" --inspect "$mode.fb" --world-size 2 >"$mode.inspect" 2>&1 ||
    fail "mdrun --inspect $mode.fb: $(cat "$mode.inspect")"
  memory() { sed -n '/^memory per rank/,/^  peak/p' "$1"; }
  diff <(memory "$mode.explain") <(memory "$mode.inspect") >mem.txt ||
    fail "$mode: mdc --explain and mdrun --inspect disagree on memory:"$'\n'"$(cat mem.txt)"
  [[ -n $(memory "$mode.explain") ]] || fail "$mode: no memory section in --explain"
done
grad_acc() { sed -nE 's/^  grad_acc +[0-9.]+ [KMG]?i?B +\(([0-9]+) bytes\)$/\1/p' "$1"; }
local_acc=$(grad_acc local.explain)
sharded_acc=$(grad_acc sharded.explain)
# The MLP's 2,762 parameters in one unit: an f32 accumulator of 11,048
# bytes, or its shard of 1,381 elements at W = 2.
[[ $local_acc == 11048 && $sharded_acc == 5524 ]] ||
  fail "grad_acc per rank: local '$local_acc', sharded '$sharded_acc'; expected 11048 and 5524"
grep -q '^gradient accumulation: sharded' sharded.explain ||
  fail "--explain names no sharded accumulation:"$'\n'"$(cat sharded.explain)"
grep -q '^gradient accumulation' local.explain &&
  fail "--explain of local accumulation has a sharded section"
sed -n '/^gradient accumulation/,$p' sharded.explain
echo "grad_acc per rank at W = 2: local $local_acc bytes, sharded $sharded_acc bytes"

[[ $failures -eq 0 ]] || exit 1
echo "PASS"
