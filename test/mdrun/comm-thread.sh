#!/usr/bin/env bash
# The CPU backend's comm thread (mdrun --comm-thread on, the default;
# docs/runtime-cpu.md) on plans that mdc compiles, whose collectives are on
# the comm stream with events around them: at W = 2, 10 steps with the
# thread (the default) end with the same weights, byte for byte, as 10
# steps with --comm-thread off, and the same losses and logs (an evaluation
# every 10 steps). Plans:
# the MLP and the tiny GPT under ddp with small buckets and fsdp-full in f32,
# fsdp-full with bf16 parameters, and the GPT at seq 80 (two tiles of the
# causal attention) under ddp. mdrun's banner says whether the thread is on,
# a plan whose events do not order its streams runs without it (with a
# note, the same bits), and a trace of a run with it is written.
#
#   test/mdrun/comm-thread.sh MDC MDRUN WORK_DIR
set -uo pipefail
usage="usage: comm-thread.sh MDC MDRUN WORK_DIR"
mdc=${1:?$usage}
mdrun=${2:?$usage}
work=${3:?$usage}
models=$(cd "$(dirname "$0")" && pwd)/models
source "$(dirname "$0")/lib.sh"
md_setup "$mdc" "$mdrun" "$work"

# train NAME THREAD ARGS...: mdrun on 2 CPU ranks, one BLAS thread each,
# with --comm-thread off (THREAD 0) or mdrun's default (THREAD 1); it must
# succeed.
train() {
  local name=$1 thread=$2
  shift 2
  local off=()
  [[ $thread == 0 ]] && off=(--comm-thread off)
  if ! timeout 120 "$mdrun" --backend cpu --threads 1 --ranks 2 "${off[@]}" \
    "$@" >"$name.out" 2>"$name.err"; then
    fail "mdrun ${off[*]} $*:"$'\n'"$(tail -n 20 "$name.out" "$name.err")"
    return 1
  fi
}

# A metrics file without its timings: losses, learning rates, gradient
# norms and the hooks' logs (the evaluations' losses).
numbers() { sed -E 's/, "(samples|tokens)_per_s": [^,}]*//; s/, "step_s": [^,}]*//; s/, "time": [^,}]*//' "$1"; }

for spec in "mlp ddp-buckets-f32" "mlp full-f32" "mlp fsdp-full" \
  "gpt ddp-buckets-f32" "gpt full-f32" "gpt fsdp-full" "gpt ddp-f32 -D seq=80"; do
  read -r model plan defs <<<"$spec"
  name=$model-$plan${defs:+-seq80}
  # shellcheck disable=SC2086
  if ! timeout 60 "$mdc" "$models/$model.mdl" --plan "$plan" --world-size 2 $defs \
    -o "$name.fb" 2>"$name.mdc.err"; then
    fail "mdc $model.mdl --plan $plan $defs:"$'\n'"$(cat "$name.mdc.err")"
    continue
  fi
  for thread in 0 1; do
    train "$name.$thread" "$thread" --steps 10 --log-every 1 \
      --metrics "$name.$thread.jsonl" --save-final "$name.$thread.safetensors" \
      "$name.fb" || continue 2
  done
  grep -q "per rank, a comm thread)" "$name.1.out" ||
    fail "$name: mdrun's banner does not say the comm thread is on:"$'\n'"$(head -n 5 "$name.1.out")"
  grep -q "per rank, no comm thread)" "$name.0.out" ||
    fail "$name: mdrun's banner does not say the comm thread is off:"$'\n'"$(head -n 5 "$name.0.out")"
  cmp -s "$name.0.safetensors" "$name.1.safetensors" ||
    fail "$name: the weights differ with the comm thread"
  grep -q '"logs": {[^}]*"val"' "$name.1.jsonl" ||
    fail "$name: no evaluation logged in 10 steps: $(cat "$name.1.jsonl")"
  [[ "$(numbers "$name.0.jsonl")" == "$(numbers "$name.1.jsonl")" ]] ||
    fail "$name: the losses or logs differ with the comm thread:"$'\n'"$(diff <(numbers "$name.0.jsonl") <(numbers "$name.1.jsonl"))"
  echo "$name: the same weights, losses and logs with and without the comm thread"
done

# mdc's zero1-f32 of the GPT gathers the master weights its optimizer just
# updated in place and stored: the store copies nothing (the same bytes),
# so the plan's events order its streams and it runs with the thread, with
# the same bits. (A plan whose events leave the streams unordered runs
# without the thread, with a note: ExecutorTest.UnorderedStreams*.)
if timeout 60 "$mdc" "$models/gpt.mdl" --plan zero1-f32 --world-size 2 \
  -o gpt-zero1.fb 2>gpt-zero1.mdc.err; then
  for thread in 0 1; do
    train "gpt-zero1.$thread" "$thread" --steps 3 --log-every 0 \
      --save-final "gpt-zero1.$thread.safetensors" gpt-zero1.fb
  done
  grep -q "no comm thread for this plan" gpt-zero1.1.out &&
    fail "gpt-zero1: mdrun finds its streams unordered: $(cat gpt-zero1.1.out)"
  grep -q "per rank, a comm thread)" gpt-zero1.1.out ||
    fail "gpt-zero1: no comm thread: $(head -n 1 gpt-zero1.1.out)"
  [[ -s gpt-zero1.1.err ]] && fail "gpt-zero1: mdrun wrote to stderr: $(cat gpt-zero1.1.err)"
  grep -q "for this plan" gpt-zero1.0.out &&
    fail "gpt-zero1: a note with --comm-thread off: $(cat gpt-zero1.0.out)"
  cmp -s gpt-zero1.0.safetensors gpt-zero1.1.safetensors ||
    fail "gpt-zero1: the weights differ between --comm-thread off and on"
else
  fail "mdc gpt.mdl --plan zero1-f32: $(cat gpt-zero1.mdc.err)"
fi

# A trace with the thread on: one file, a comm track with collectives.
train traced 1 --steps 3 --trace trace.json gpt-full-f32.fb &&
  { grep -q '"cat": *"collective"' trace.json ||
    fail "the trace of a run with the comm thread has no collective"; }

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "comm-thread: all checks passed"
