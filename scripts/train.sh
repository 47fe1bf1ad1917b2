#!/usr/bin/env bash
# Sets up, builds and runs md's main job on 2 ranks: the README's train
# command. mdrun uses the GPUs when it can and otherwise says so once and runs
# the ranks on the CPU backend.
#   scripts/train.sh                  # deps (if missing), configure, build, train
#   BUILD_DIR=out scripts/train.sh    # another build directory
# Extra arguments go to mdrun (e.g. --steps 50, --metrics m.jsonl); they come
# after the default --steps, so a --steps of their own replaces it.
#
# The job: the tiny configuration of models/gpt.mdl (2 layers, d = 64,
# 4 heads, 64 tokens, a 512-token vocabulary), compiled by mdc under its
# fsdp-full plan, trained on data/train.bin. models/gpt.mdl reads
# tokens("data/train.bin") and evaluates on tokens("data/val.bin") relative
# to the working directory (the repository root); when they are missing,
# md-data writes them: walks on one random Markov chain over 512 tokens
# (training and held-out walks of the same chain), whose entropy rate, about
# 1.03 nats per token, is the loss a model can reach.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
jobs=${MD_JOBS:-2}

scripts/install-deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs" --target mdc mdrun md-data

# The data: 2M training tokens, 200k held-out tokens, unless already there.
vocab=512
if [[ ! -f data/train.bin ]]; then
  "$build/bin/md-data" markov --vocab "$vocab" --tokens 2000000 --seed 1 -o data/train.bin
fi
if [[ ! -f data/val.bin ]]; then
  "$build/bin/md-data" markov --vocab "$vocab" --tokens 200000 --seed 2 -o data/val.bin
fi

tiny=(-D layers=2 -D d=64 -D heads=4 -D seq=64 -D vocab=$vocab)
echo "== mdc models/gpt.mdl ${tiny[*]} --plan fsdp-full --explain --world-size 2"
# Its summary: batch, memory, model states and traffic, whole sections (the
# buckets and the rest follow in the full report).
"$build/bin/mdc" models/gpt.mdl "${tiny[@]}" --plan fsdp-full --explain --world-size 2 |
  awk '/^buckets:/ { exit } { print }'
echo "(buckets, precision and the rest: the same command prints the whole report)"

plan="$build/plans/gpt-tiny-fsdp.fb"
mkdir -p "$build/plans"
echo "== mdc models/gpt.mdl ${tiny[*]} --plan fsdp-full -o $plan"
"$build/bin/mdc" models/gpt.mdl "${tiny[@]}" --plan fsdp-full -o "$plan"

echo "== mdrun --gpus 2 $plan --steps 250 $*"
exec "$build/bin/mdrun" --gpus 2 "$plan" --steps 250 "$@"
