#!/usr/bin/env bash
# Sets up, builds and runs md's main job on 2 ranks: the README's train
# command. mdrun uses the GPUs when it can and otherwise says so once and runs
# the ranks on the CPU backend.
#   scripts/train.sh                  # deps (if missing), configure, build, train
#   BUILD_DIR=out scripts/train.sh    # another build directory
# Extra arguments go to mdrun (e.g. --steps 50, --metrics m.jsonl).
#
# mdc does not write plan files yet (its emitter is the next step), so the
# plan trained here is md-plan-examples' MLP under fsdp-full, built the way
# md's passes lower models/mlp.mdl's recipe. The compiled step program of the
# real model is printed first.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
jobs=${MD_JOBS:-2}

scripts/install-deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs" --target mdc mdrun md-plan-examples

echo "== mdc models/mlp.mdl --plan fsdp-full --explain --world-size 2"
"$build/bin/mdc" models/mlp.mdl --plan fsdp-full --explain --world-size 2 | sed -n '1,20p'

plans="$build/plans"
mkdir -p "$plans"
"$build/bin/md-plan-examples" "$plans" > /dev/null
echo "== mdrun --gpus 2 $plans/train-mlp-fsdp.fb"
exec "$build/bin/mdrun" --gpus 2 "$plans/train-mlp-fsdp.fb" "$@"
