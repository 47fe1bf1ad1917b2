#!/usr/bin/env bash
# The README's train job end to end, shortened: md-data writes token files,
# mdc compiles models/gpt.mdl's tiny configuration under fsdp-full, and
# mdrun trains it on 2 ranks (the CPU backend where no GPU is usable). The
# model reads tokens("data/train.bin") relative to the working directory,
# so everything runs in WORK_DIR. The loss must fall well below where it
# started (at the README's 250 steps it goes from 6.25 to about 1.9; after
# the 100 steps here it is about 4.7, 0.75 of the first). Before training,
# GPT-2 124M on 32 ranks is refused for want of host memory.
#
#   test/mdrun/gpt-tiny.sh MDC MDRUN MD_DATA MODELS_DIR WORK_DIR
set -uo pipefail
usage='usage: gpt-tiny.sh MDC MDRUN MD_DATA MODELS_DIR WORK_DIR'
mdc=${1:?$usage}
mdrun=${2:?$usage}
mddata=${3:?$usage}
models=${4:?$usage}
work=${5:?$usage}
steps=100
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
mdc=$(abs "$mdc") mdrun=$(abs "$mdrun") mddata=$(abs "$mddata")
models=$(cd "$models" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The data: training and held-out walks of the same chain.
"$mddata" markov --vocab 512 --tokens 200000 --seed 1 -o data/train.bin >out.txt 2>&1 ||
  { cat out.txt; exit 1; }
grep -Eq '^md-data: wrote data/train.bin: 200,000 uint16 tokens \(400,000 bytes\), .*; entropy rate 1\.0[0-9]+ nats/token' out.txt ||
  fail "md-data's line: $(cat out.txt)"
"$mddata" markov --vocab 512 --tokens 20000 --seed 2 -o data/val.bin >/dev/null || exit 1
[[ $(stat -c %s data/train.bin) -eq 400000 ]] || fail "data/train.bin is not 400,000 bytes"

# The plan.
tiny=(-D layers=2 -D d=64 -D heads=4 -D seq=64 -D vocab=512)
timeout 60 "$mdc" "$models/gpt.mdl" "${tiny[@]}" --plan fsdp-full -o gpt-tiny-fsdp.fb ||
  { echo "FAIL: mdc"; exit 1; }

# A job that cannot fit in this node's memory is refused before any rank
# starts, with the numbers: GPT-2 124M under ddp needs about 9 GiB per rank
# at its peak, so 32 ranks need about 290 GiB (skipped on a node that has
# that much available).
available_kib=$(sed -nE 's/^MemAvailable: +([0-9]+) kB$/\1/p' /proc/meminfo)
if [[ -n $available_kib && $available_kib -lt $((250 * 1024 * 1024)) ]]; then
  timeout 60 "$mdc" "$models/gpt.mdl" --plan ddp -o gpt2-124m-ddp.fb ||
    { echo "FAIL: mdc (GPT-2 124M)"; exit 1; }
  timeout 30 "$mdrun" --ranks 32 --backend cpu gpt2-124m-ddp.fb >mem.out 2>mem.err
  rc=$?
  [[ $rc -eq 1 ]] || fail "an oversized job: exit $rc, expected 1"
  grep -Eq '^mdrun: error: the plan needs 32 ranks x [0-9.]+ GiB = [0-9.]+ GiB of host memory at its peak, but this node has [0-9.]+ [KMG]iB available \(MemAvailable\); per rank: params .*activations .*; the largest buffers: .*\(.*gpt\.mdl:[0-9]+:[0-9]+\)' mem.err ||
    fail "the memory refusal: $(cat mem.err)"
  [[ -s mem.out ]] && fail "an oversized job printed a banner: $(cat mem.out)"
else
  echo "note: skipped the memory refusal (MemAvailable ${available_kib:-unknown} kB)"
fi

# Training.
timeout 240 "$mdrun" --gpus 2 gpt-tiny-fsdp.fb --steps $steps \
  --metrics m.jsonl >out.txt 2>err.txt
rc=$?
if [[ $rc -ne 0 ]]; then
  echo "FAIL: mdrun exited $rc"
  cat out.txt err.txt
  exit 1
fi
grep -q '^mdrun: model gpt, plan fsdp-full (gpt-tiny-fsdp.fb), 2 ranks' out.txt ||
  fail "no banner: $(cat out.txt)"
grep -q '^mdrun: data tokens data/train.bin (200000 uint16 tokens, windows of 64 + 1)' out.txt ||
  fail "not trained on data/train.bin: $(cat out.txt)"

# The progress reports of the metrics file: the loss at the first and the
# last step.
loss() {
  sed -nE "s/^\\{\"step\": $1, \"loss\": ([0-9.eE+-]+),.*/\\1/p" m.jsonl
}
first=$(loss 1)
last=$(loss $steps)
if [[ -z $first || -z $last ]]; then
  fail "no loss at step 1 or $steps in m.jsonl: $(cat m.jsonl)"
else
  echo "loss: step 1 $first, step $steps $last"
  # ln 512 = 6.24 at the start.
  awk -v a="$first" 'BEGIN { exit !(a > 6.0 && a < 6.5) }' ||
    fail "the first loss $first is not about ln 512 = 6.24"
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.9 * a) }' ||
    fail "the loss did not fall below 0.9 x the first: $first -> $last"
fi

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "gpt-tiny: ok"
