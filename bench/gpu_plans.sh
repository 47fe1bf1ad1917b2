#!/usr/bin/env bash
# bench/gpu_plans.sh — compile the plans that bench/gpu_gpt2.sh and
# test/mdrun/gpu-e2e.sh run, on a machine that has mdc (a GPU machine may
# build the runtime alone: docs/runtime-cuda.md).
#
#   bench/gpu_plans.sh [--build DIR] [--out DIR] [--micro-batch B]
#
# --build DIR: where mdc was built (default build/); --out DIR: where the
# plans go (default .devplans/, which git ignores); --micro-batch B: GPT-2's
# sequences per step (default 8).
#
# Writes:
#   gpt2-single.fb, gpt2-fsdp-full.fb   models/gpt.mdl at full size (124M,
#       seq 1024, vocab 50304), bf16 parameters and compute with f32 master
#       weights and reductions, global batch = micro batch (W = 1, no
#       accumulation), synthetic(seed = 0) tokens, AdamW at a constant lr,
#       no hooks; pinned to W = 1.
#   gpt-tiny.mdl and gpt-tiny-{fsdp-full,ddp}.fb   test/mdrun/models/gpt.mdl
#       (the tiny GPT the CPU tests train), bf16 parameters, W not pinned.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$repo/bench/lib.sh"
bench_options "$0" --build=build="$repo/build" --out=out="$repo/.devplans" \
  --micro-batch=micro=8 -- "$@"
[[ $micro =~ ^[0-9]+$ && $micro -ge 1 ]] || { echo "gpu_plans.sh: --micro-batch $micro: not a positive integer" >&2; exit 2; }
mdc=$build/bin/mdc
[[ -x $mdc ]] || { echo "gpu_plans.sh: $mdc not found: build the compiler first (README.md)" >&2; exit 1; }
mkdir -p "$out"

precision='precision = { param = bf16, reduce = f32, buffer = f32, master = f32 }'

bench_train="train {
  data           = synthetic(seed = 0)
  global_batch   = $micro
  micro_batch    = $micro
  optimizer      = adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)
  schedule       = cosine(warmup = 10, steps = 1000, min_lr = 3e-5)
  clip_grad_norm = 1.0
  seed           = 1337
}"
{
  bench_rewrite_train "$repo/models/gpt.mdl" "$bench_train"
  printf '\nplan bench-single extends single {\n  %s\n}\n' "$precision"
} >"$out/gpt2.mdl"
"$mdc" "$out/gpt2.mdl" --plan bench-single -o "$out/gpt2-single.fb"
"$mdc" "$out/gpt2.mdl" --plan fsdp-full --world-size 1 -o "$out/gpt2-fsdp-full.fb"

{
  cat "$repo/test/mdrun/models/gpt.mdl"
  printf '\nplan bf16-fsdp-full extends fsdp-full {\n  wrap = blocks(h)\n  %s\n}\n' "$precision"
  printf '\nplan bf16-ddp extends ddp {\n  %s\n}\n' "$precision"
} >"$out/gpt-tiny.mdl"
"$mdc" "$out/gpt-tiny.mdl" --plan bf16-fsdp-full -o "$out/gpt-tiny-fsdp-full.fb"
"$mdc" "$out/gpt-tiny.mdl" --plan bf16-ddp -o "$out/gpt-tiny-ddp.fb"
ls -l "$out"/*.fb | awk '{ printf "  %s  %s bytes\n", $NF, $5 }'
