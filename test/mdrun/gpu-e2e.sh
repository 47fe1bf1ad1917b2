#!/usr/bin/env bash
# The tiny GPT (test/mdrun/models/gpt.mdl, bf16 parameters) trained on the
# CUDA backend under fsdp-full and ddp, against the CPU backend: the loss
# curves agree within bf16 tolerance step by step, and the loss falls.
#   - CUDA at W = 1 (NCCL on one GPU) and at W = 2 (two ranks sharing
#     GPU 0, collectives staged through host shared memory);
#   - the CPU backend at W = 2, the reference.
# Without a GPU it exits 77, which CTest reports as a skip with the reason
# on the output; with one that md cannot use, it fails.
#
#   test/mdrun/gpu-e2e.sh MDRUN MD_PLAN_EXAMPLES WORK_DIR [MDC]
#
# The GPU probe trains one step of a hand-built plan (md-plan-examples).
# With MDC the tiny GPT's plans are compiled here; without it they are read
# from the checkout's .devplans/ (bench/gpu_plans.sh writes them), for a
# runtime-only build on a GPU machine.
set -uo pipefail
mdrun=${1:?usage: gpu-e2e.sh MDRUN MD_PLAN_EXAMPLES WORK_DIR [MDC]}
examples=${2:?}
work=${3:?}
mdc=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mdrun=$(cd "$(dirname "$mdrun")" && pwd)/$(basename "$mdrun")
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

# Is there a GPU? mdrun's own answer, with its reason. Only a machine
# without one (no driver, no device, or mdrun built without CUDA) skips: a
# GPU that is there but fails (an old driver, no kernel image for it, a
# failed cuBLASLt handle or allocation) fails the test, naming the cause.
"$examples" "$work" >/dev/null || exit 1
timeout 300 "$mdrun" --gpus 1 --backend cuda --no-fallback --steps 1 --log-every 0 \
  "$work/train-mlp-ddp.fb" >probe.out 2>probe.err
rc=$?
absent='no usable GPU \((no CUDA driver installed|no CUDA device|mdrun was built without CUDA)'
if [[ $rc -ne 0 ]] && grep -Eq "$absent" probe.err; then
  echo "SKIP: $(sed 's/^mdrun: error: //' probe.err)"
  exit 77
fi
[[ $rc -eq 0 ]] || { echo "FAIL: the CUDA probe run failed: $(cat probe.out probe.err)"; exit 1; }

if [[ -n $mdc ]]; then
  {
    cat "$here/models/gpt.mdl"
    printf '\nplan bf16-fsdp-full extends fsdp-full {\n  wrap = blocks(h)\n'
    printf '  precision = { param = bf16, reduce = f32, buffer = f32, master = f32 }\n}\n'
    printf '\nplan bf16-ddp extends ddp {\n'
    printf '  precision = { param = bf16, reduce = f32, buffer = f32, master = f32 }\n}\n'
  } >gpt-tiny.mdl
  "$mdc" gpt-tiny.mdl --plan bf16-fsdp-full -o gpt-tiny-fsdp-full.fb || exit 1
  "$mdc" gpt-tiny.mdl --plan bf16-ddp -o gpt-tiny-ddp.fb || exit 1
  plans=$work
else
  plans=$repo/.devplans
fi
for p in fsdp-full ddp; do
  [[ -f $plans/gpt-tiny-$p.fb ]] || { echo "gpu-e2e.sh: $plans/gpt-tiny-$p.fb not found (bench/gpu_plans.sh)"; exit 1; }
done

steps=30
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
train() { # train NAME PLAN ARGS...: metrics in NAME.jsonl
  local name=$1 plan=$2
  shift 2
  timeout 600 "$mdrun" "$@" --steps "$steps" --log-every 1 --metrics "$name.jsonl" \
    "$plans/gpt-tiny-$plan.fb" >"$name.out" 2>"$name.err" ||
    { fail "$name: $(tail -3 "$name.out" "$name.err")"; return 1; }
  echo "$name: $(grep -m1 '^mdrun: model' "$name.out")"
  [[ -s $name.err ]] && echo "  stderr: $(cat "$name.err")"
  return 0
}
# compare REF RUN: loss per step within bf16 tolerance; the loss falls.
compare() {
  python3 - "$1.jsonl" "$2.jsonl" <<'EOF' || fail "$2 against $1"
import json, sys
def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if '"loss"' in l]
ref, run = losses(sys.argv[1]), losses(sys.argv[2])
if len(ref) != len(run) or not ref:
    sys.exit(f"{len(ref)} vs {len(run)} loss records")
worst = max(abs(a - b) / (0.05 + abs(a)) for a, b in zip(ref, run))
print(f"  {sys.argv[2]} vs {sys.argv[1]}: loss {run[0]:.4f} -> {run[-1]:.4f} "
      f"(reference {ref[0]:.4f} -> {ref[-1]:.4f}); largest |difference| / (0.05 + |loss|) = {worst:.4f}")
if worst > 0.03:
    sys.exit("the curves differ by more than bf16 tolerance (3%)")
if not run[-1] < 0.8 * run[0]:
    sys.exit("the loss did not fall")
EOF
}

for plan in fsdp-full ddp; do
  train "cpu-$plan" "$plan" --ranks 2 --backend cpu || continue
  if train "cuda1-$plan" "$plan" --gpus 1 --backend cuda --no-fallback; then
    grep -q 'on the cuda backend (nccl comm' "cuda1-$plan.out" || fail "cuda1-$plan did not use NCCL"
    compare "cpu-$plan" "cuda1-$plan"
  fi
  if train "cuda2-$plan" "$plan" --gpus 2 --backend cuda; then
    compare "cpu-$plan" "cuda2-$plan"
  fi
done

if ((failures > 0)); then
  echo "gpu-e2e.sh: $failures failure(s)"
  exit 1
fi
echo "gpu-e2e.sh: all passed"
