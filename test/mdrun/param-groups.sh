#!/usr/bin/env bash
# Optimizer parameter groups end to end, without PyTorch: the tiny GPT of
# test/mdrun/models/gpt.mdl (synthetic data, its all-f32 plans) with AdamW
# and two groups (nanoGPT's no-decay rule and an lr multiplier for the
# attention's matrices), trained 5 steps at W = 2.
#
# 1. ddp (each rank updates whole flat buffers), zero1 and fsdp-full (each
#    rank updates its shard, which holds parameters of several groups) give
#    bitwise identical weights, as the presets do without groups.
# 2. The groups change the weights: the same run without them differs.
# 3. mdc --explain, mdrun's banner and mdrun --inspect list the groups.
#
#   test/mdrun/param-groups.sh MDC MDRUN PYTHON3 WORK_DIR
set -uo pipefail
usage="usage: param-groups.sh MDC MDRUN PYTHON3 WORK_DIR"
mdc=${1:?$usage}
mdrun=${2:?$usage}
python=${3:?$usage}
work=${4:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
md_setup "$mdc" "$mdrun" "$work"
groups='groups = [group(ndim = 1, weight_decay = 0.0), group(match = "h.*.attn.*", lr_scale = 0.5)]'

# test/mdrun/models/gpt.mdl with its optimizer replaced by OPTIMIZER.
model() {
  sed "s/^  optimizer .*/  optimizer = $1/" "$here/models/gpt.mdl"
}
model "adamw(lr = 1e-2, weight_decay = 0.5, $groups)" >grouped.mdl
model "adamw(lr = 1e-2, weight_decay = 0.5)" >plain.mdl
grep -q 'lr_scale = 0.5' grouped.mdl || fail "could not rewrite models/gpt.mdl's optimizer"

train() {
  local name=$1 model=$2 plan=$3
  if ! timeout 60 "$mdc" "$model" --plan "$plan" --world-size 2 \
    -o "$name.fb" 2>"$name.err"; then
    fail "mdc $model --plan $plan: $(cat "$name.err")"
    return 1
  fi
  if ! timeout 120 "$mdrun" --backend cpu --threads 1 --ranks 2 --steps 5 \
    --log-every 0 --save-final "$name.safetensors" "$name.fb" >"$name.out" 2>&1; then
    fail "mdrun $name.fb: $(tail -n 5 "$name.out")"
    return 1
  fi
}

for plan in ddp zero1 full; do
  train "grouped-$plan" grouped.mdl "$plan-f32"
done
train plain-full plain.mdl full-f32

for plan in zero1 full; do
  if ! "$python" "$here/stcompare.py" --bitwise grouped-ddp.safetensors \
    "grouped-$plan.safetensors" >cmp.txt; then
    fail "groups under $plan differ from ddp:"$'\n'"$(cat cmp.txt)"
  fi
done
"$python" "$here/stcompare.py" grouped-full.safetensors \
  plain-full.safetensors --verbose >plain.txt
if "$python" "$here/stcompare.py" --bitwise grouped-full.safetensors \
  plain-full.safetensors >/dev/null; then
  fail "the groups made no difference to the weights"
fi
echo "with groups vs without, largest relative difference of a tensor:" \
  "$(sed -n 's/^max_rel_diff //p' plain.txt)"

grep -q 'optimizer group ndim = 1: 22 params, 1,792 elements, weight_decay 0, lr_scale 1' \
  grouped-full.out || fail "the banner does not list the groups: $(grep 'optimizer' grouped-full.out)"
"$mdrun" --inspect grouped-full.fb >inspect.txt 2>&1
grep -q 'optimizer group match = "h.\*.attn.\*": 8 params, 32,768 elements, weight_decay 0.5, lr_scale 0.5' \
  inspect.txt || fail "mdrun --inspect does not list the groups: $(grep 'optimizer' inspect.txt)"
"$mdc" grouped.mdl --plan full-f32 --world-size 2 --explain >explain.txt
grep -q '^  default  *6  *102400  *0.5  *1$' explain.txt ||
  fail "mdc --explain does not list the default group: $(tail -n 5 explain.txt)"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS: groups give bitwise identical weights under ddp, zero1 and fsdp-full (f32) at W = 2"
