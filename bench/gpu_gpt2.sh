#!/usr/bin/env bash
# bench/gpu_gpt2.sh — GPT-2 124M on one GPU: tokens/s, MFU and the GEMMs'
# share of the step, next to md's cuBLASLt GEMM alone, in one run
# (docs/bench.md).
#
#   bench/gpu_gpt2.sh [--build DIR] [--plans DIR] [--steps N] [--keep DIR]
#                     [--peak-tflops X]
#
# --build DIR: where mdrun and md-gemm-bench-cuda were built (default
# build/); --plans DIR: where bench/gpu_plans.sh wrote gpt2-single.fb and
# gpt2-fsdp-full.fb (default .devplans/); --steps N: optimizer steps per
# plan (default 30; the first 5 are left out of the timing); --keep DIR:
# keep metrics and logs there; --peak-tflops X: the GPU's dense bf16 peak
# when md-gemm-bench-cuda does not know the device.
#
# 1. GEMM: md-gemm-bench-cuda times CudaBackend::gemm (bf16 in and out,
#    f32 accumulation) on a square shape and on every GEMM shape of a
#    GPT-2 step at micro batch B (M = B x 1024 rows):
#      forward  M x 768 x 768:nt (q, k, v, attn proj)  M x 3072 x 768:nt (fc)
#               M x 768 x 3072:nt (mlp proj)           M x 50304 x 768:nt (logits)
#      backward the same with :nn (dx) and N x K x M:tn (dW).
# 2. Training: `mdrun --gpus 1 --backend cuda --no-fallback` on each plan
#    (W = 1: `single` and `fsdp-full`, bf16), a metrics record per step;
#    the step time is the median of the differences of `time` between
#    consecutive records, steps 1 to 5 left out.
# 3. Per plan: tokens/s = B x 1024 / step time; MFU = tokens/s x FLOPs per
#    token / peak, FLOPs per token = 6 N + 12 L d T (nanoGPT's estimate:
#    N = 123,689,472 parameters without the position embedding, L = 12,
#    d = 768, T = 1024; activation recompute is not counted, so fsdp-full's
#    MFU is lower by its recompute); GEMM share = the time the step's GEMMs
#    take at the rates of step 1 (forward, plus the block forwards again
#    under fsdp-full's recompute, and backward) / the step time.
#
# Not a test: it checks only that the tools run. Without a GPU it says why
# and exits 77.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$repo/bench/lib.sh"
bench_options "$0" --build=build="$repo/build" --plans=plans="$repo/.devplans" \
  --steps=steps=30 --keep=keep= --peak-tflops=peak= -- "$@"
[[ $steps =~ ^[0-9]+$ && $steps -ge 8 ]] || { echo "gpu_gpt2.sh: --steps must be at least 8" >&2; exit 2; }
mdrun=$build/bin/mdrun
gemm=$build/bin/md-gemm-bench-cuda
for tool in "$mdrun" "$gemm"; do
  [[ -x $tool ]] || { echo "gpu_gpt2.sh: $tool not found: build with CUDA first" >&2; exit 1; }
done
for p in gpt2-single gpt2-fsdp-full; do
  [[ -f $plans/$p.fb ]] || { echo "gpu_gpt2.sh: $plans/$p.fb not found: run bench/gpu_plans.sh" >&2; exit 1; }
done
if [[ -n $keep ]]; then
  mkdir -p "$keep"
  work=$keep
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/md-gpu-bench.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi

# The micro batch of the plans, from --inspect.
B=$("$mdrun" --inspect "$plans/gpt2-single.fb" --format=json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["recipe"]["micro_batch"])')
T=1024
M=$((B * T))
echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown); micro batch $B x seq $T = $M tokens per step"

# --- 1. GEMM alone -----------------------------------------------------------
fwd_block=("${M}x768x768:nt" "${M}x3072x768:nt" "${M}x768x3072:nt")
bwd_block=("${M}x768x768:nn" "${M}x768x3072:nn" "${M}x3072x768:nn"
  "768x768x${M}:tn" "3072x768x${M}:tn" "768x3072x${M}:tn")
head=("${M}x50304x768:nt" "${M}x768x50304:nn" "50304x768x${M}:tn")
set +e
"$gemm" ${peak:+--peak-tflops "$peak"} 8192x8192x8192:nt "${fwd_block[@]}" "${bwd_block[@]}" "${head[@]}" \
  >"$work/gemm.txt" 2>"$work/gemm.err"
rc=$?
set -e
if [[ $rc -eq 77 ]]; then
  echo "gpu_gpt2.sh: no GPU: $(cat "$work/gemm.err")"
  exit 77
fi
[[ $rc -eq 0 ]] || { cat "$work/gemm.err" >&2; exit 1; }
grep '^#' "$work/gemm.txt" | sed 's/^# /  /'
peak=$(sed -nE 's/^# peak ([0-9.]+) TFLOP.*/\1/p' "$work/gemm.txt")
echo "md's cuBLASLt GEMM alone (bf16, f32 accumulation):"
awk '/^gemm/ { printf "  %-22s %8.1f us  %7.1f TFLOP/s\n", $2 "x" $3 "x" $4 ":" $5, $8, $9 }' "$work/gemm.txt"

# us SHAPE: microseconds per call of SHAPE in step 1.
us() {
  awk -v s="$1" '/^gemm/ && ($2 "x" $3 "x" $4 ":" $5) == s { print $8; exit }' "$work/gemm.txt"
}
gemm_us() { # gemm_us RECOMPUTE: the GEMM time of one step, in us
  local total=0 per_layer=0 s
  # q, k, v and attn proj share the 768 x 768 shapes: 4 per layer.
  for s in "${fwd_block[@]}" "${bwd_block[@]}"; do
    local n=1
    [[ $s == "${M}x768x768:nt" || $s == "${M}x768x768:nn" || $s == "768x768x${M}:tn" ]] && n=4
    per_layer=$(awk -v a="$per_layer" -v b="$(us "$s")" -v n="$n" 'BEGIN { print a + n * b }')
  done
  if [[ $1 == 1 ]]; then
    for s in "${fwd_block[@]}"; do
      local n=1
      [[ $s == "${M}x768x768:nt" ]] && n=4
      per_layer=$(awk -v a="$per_layer" -v b="$(us "$s")" -v n="$n" 'BEGIN { print a + n * b }')
    done
  fi
  total=$(awk -v p="$per_layer" 'BEGIN { print 12 * p }')
  for s in "${head[@]}"; do
    total=$(awk -v a="$total" -v b="$(us "$s")" 'BEGIN { print a + b }')
  done
  echo "$total"
}

# --- 2. Training -------------------------------------------------------------
N=123689472
flops_per_token=$((6 * N + 12 * 12 * 768 * T))
echo
echo "GPT-2 124M, bf16 params/compute, f32 master and reductions, W = 1, $steps steps:"
printf "  %-10s %10s %12s %8s %12s %10s\n" plan "ms/step" "tokens/s" MFU "GEMM share" "peak mem"
for plan in single fsdp-full; do
  metrics=$work/$plan.jsonl
  set +e
  "$mdrun" --gpus 1 --backend cuda --no-fallback --steps "$steps" --log-every 1 \
    --metrics "$metrics" "$plans/gpt2-$plan.fb" >"$work/$plan.out" 2>&1
  rc=$?
  set -e
  if [[ $rc -ne 0 ]]; then
    echo "  $plan: mdrun failed (exit $rc):"
    tail -5 "$work/$plan.out" | sed 's/^/    /'
    continue
  fi
  step_ms=$(python3 - "$metrics" <<'EOF'
import json, statistics, sys
t = [json.loads(l)["time"] for l in open(sys.argv[1]) if '"loss"' in l]
d = [b - a for a, b in zip(t, t[1:])][5:]
print(f"{1e3 * statistics.median(d):.2f}")
EOF
)
  recompute=0
  [[ $plan == fsdp-full ]] && recompute=1
  g=$(gemm_us $recompute)
  mem=$(sed -nE 's/^mdrun: memory per rank: .* peak ([0-9.]+ [KMGT]?i?B).*/\1/p' "$work/$plan.out")
  awk -v plan="$plan" -v ms="$step_ms" -v M="$M" -v fpt="$flops_per_token" -v peak="${peak:-0}" \
    -v g="$g" -v mem="$mem" 'BEGIN {
      tps = M / (ms / 1e3)
      mfu = peak > 0 ? sprintf("%.1f%%", 100 * tps * fpt / (peak * 1e12)) : "n/a"
      printf "  %-10s %10.2f %12.0f %8s %11.1f%% %10s\n", plan, ms, tps, mfu, 100 * (g / 1e3) / ms, mem
    }'
  grep -E '^step +('"$steps"')/' "$work/$plan.out" | sed 's/^/    last: /' || true
done
echo
echo "FLOPs per token $flops_per_token (6N + 12 L d T); peak ${peak:-unknown} TFLOP/s dense bf16"
