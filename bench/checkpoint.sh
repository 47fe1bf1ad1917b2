#!/usr/bin/env bash
# bench/checkpoint.sh — how long a sharded checkpoint takes to save and to
# load, per rank, for the tiny GPT (test/mdrun/models/gpt.mdl, 137k
# parameters) and GPT-2 small (models/gpt.mdl, 124M parameters at seq 64:
# the sequence length changes only wpe, 49k of them, and keeps the step
# cheap) under fsdp-full with bf16 parameters, on the CPU backend at
# W = 1, 2 and 4.
#
#   bench/checkpoint.sh [--build DIR] [--work DIR] [--ranks "1 2 4"] [--models "tiny gpt2"]
#
# --build DIR: where mdc and mdrun were built (default build/); --work DIR:
# where the plans and checkpoints go (default $TMPDIR/md-ckpt-bench, removed
# first). Each run trains one step (global batch 4, micro batch 1) and saves
# after it (mdrun's "step 1: saved ... in S s": gathering nothing, writing
# this rank's shards, fsync, the checksum, rank 0's check and publication),
# then a second run resumes from that checkpoint and trains no step (the
# banner's "loaded in S s": verification of every file's size and, shared
# out, checksum, then each rank's byte ranges). Both are collectives, so the
# time is every rank's. Beside each save, the disk alone: W writers writing
# and fsyncing a rank file's bytes at once (dd), and the ratio of the save
# to it. Prints one line per model and W.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$repo/bench/lib.sh"
bench_options "$0" --build=build="$repo/build" \
  --work=work="${TMPDIR:-/tmp}/md-ckpt-bench" --ranks=ranks="1 2 4" \
  --models=models="tiny gpt2" -- "$@"
build=$(cd "$build" 2>/dev/null && pwd) || { echo "checkpoint.sh: no build directory $build (README.md)" >&2; exit 1; }
mdc=$build/bin/mdc
mdrun=$build/bin/mdrun
[[ -x $mdc && -x $mdrun ]] || { echo "checkpoint.sh: build mdc and mdrun first (README.md)" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
cd "$work"

bench_train='train {
  data           = synthetic(seed = 0)
  global_batch   = 4
  micro_batch    = 1
  optimizer      = adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)
  schedule       = cosine(warmup = 10, steps = 1000, min_lr = 3e-5)
  seed           = 1337
  every 1 steps {
    save checkpoint(sharded, "ckpt")
  }
}'
precision='precision = { param = bf16, reduce = f32, buffer = f32, master = f32 }'
{
  bench_rewrite_train "$repo/test/mdrun/models/gpt.mdl" "$bench_train"
  printf '\nplan bench extends fsdp-full {\n  wrap = blocks(h)\n  %s\n}\n' "$precision"
} >tiny.mdl
"$mdc" tiny.mdl --plan bench -o tiny.fb
bench_rewrite_train "$repo/models/gpt.mdl" "$bench_train" >gpt2.mdl
"$mdc" gpt2.mdl -D seq=64 --plan fsdp-full -o gpt2.fb

# disk_seconds BYTES W: how long W writers take to write BYTES each and
# fsync them, at once, in this directory (dd with conv=fsync): the disk's
# part of a save, measured beside it.
disk_seconds() {
  local bytes=$1 w=$2 start end i
  start=$(date +%s.%N)
  for ((i = 0; i < w; i++)); do
    dd if=/dev/zero of="disk.$i" bs=1M count=$(((bytes + 1048575) / 1048576)) \
      conv=fsync status=none &
  done
  wait
  end=$(date +%s.%N)
  rm -f disk.*
  awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f", e - s }'
}

printf '%-6s %3s  %14s  %8s  %8s  %8s  %9s\n' model W "MiB per rank" "save s" \
  "disk s" "save/disk" "load s"
for model in $models; do
  for w in $ranks; do
    rm -rf ckpt
    "$mdrun" --backend cpu --ranks "$w" --steps 1 --log-every 0 \
      --skip-memory-check "$model.fb" >save.out 2>save.err ||
      { echo "checkpoint.sh: $model at W = $w: $(cat save.err)" >&2; exit 1; }
    save=$(sed -nE 's/^step 1: saved ckpt\/step_00000001 in ([0-9.]+) s$/\1/p' save.out)
    bytes=$(du -b ckpt/step_00000001/rank_00000.safetensors | cut -f1)
    mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
    disk=$(disk_seconds "$bytes" "$w")
    ratio=$(awk -v s="$save" -v d="$disk" 'BEGIN { printf "%.2f", (d > 0 ? s / d : 0) }')
    "$mdrun" --backend cpu --ranks "$w" --steps 1 --log-every 0 \
      --skip-memory-check --resume ckpt/step_00000001 "$model.fb" >load.out 2>load.err ||
      { echo "checkpoint.sh: $model at W = $w: $(cat load.err)" >&2; exit 1; }
    load=$(sed -nE 's/^mdrun: resumed from .*; loaded in ([0-9.]+) s\)$/\1/p' load.out)
    printf '%-6s %3d  %14s  %8s  %8s  %8s  %9s\n' "$model" "$w" "$mib" "$save" \
      "$disk" "$ratio" "$load"
  done
done
rm -rf ckpt
