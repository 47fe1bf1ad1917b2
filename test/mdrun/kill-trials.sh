#!/usr/bin/env bash
# 20 trials of kill -9 of a random rank at a random moment of a run that
# saves a sharded checkpoint every step or every 2 steps, each followed by
# --resume auto to the same last step: every trial must end with the
# weights of an uninterrupted run, byte for byte (cmp of --save-final
# files), and leave no temporary save directory once resumed. Saves take
# most of such a run's time, so many kills land inside one (a half-written
# temporary directory, or ranks between writing and publishing): a torn or
# wrongly published checkpoint would show as a refused load or other bits.
#
# The test model is test/mdrun/models/mlp.mdl under fsdp-full at W = 2 on
# the CPU backend. Each trial picks the rank, the checkpoint after whose
# publication it is killed (none: from the start, so that some resume from
# nothing; else one of the first 24 of the run's 64 steps) and a delay of 0
# to 20 ms after that (a step and its save take 1 to 20 ms, idle to
# loaded), from bash's RANDOM seeded with the seed printed first:
# `MD_KILL_SEED=S kill-trials.sh ...` repeats a run (up to the timing of the
# machine).
#
#   test/mdrun/kill-trials.sh MDC MDRUN WORK_DIR [TRIALS]
set -uo pipefail
usage="usage: kill-trials.sh MDC MDRUN WORK_DIR [TRIALS]"
mdc=${1:?$usage}
mdrun=${2:?$usage}
work=${3:?$usage}
trials=${4:-20}
here=$(cd "$(dirname "$0")" && pwd)
source "$(dirname "$0")/lib.sh"
md_setup "$mdc" "$mdrun" "$work"

seed=${MD_KILL_SEED:-$(((RANDOM << 15) | RANDOM))}
echo "kill-trials: seed $seed (MD_KILL_SEED=$seed repeats these trials)"
RANDOM=$seed

# Long enough after the last checkpoint a kill may follow (`after` below)
# that the run is still going when the kill comes, even on a quick idle
# machine, where a step with its save takes about a millisecond.
steps=64
for every in 1 2; do
  sed "/^train {/a\\  every $every steps { save checkpoint(sharded, \"ckpt\") }" \
    "$here/models/mlp.mdl" >"mlp-every$every.mdl"
  timeout 60 "$mdc" "mlp-every$every.mdl" --plan fsdp-full -o "mlp-every$every.fb" ||
    { echo "FAIL: mdc mlp-every$every.mdl"; exit 1; }
done
run=(--backend cpu --threads 1 --ranks 2 --steps $steps --timeout 30)

# The uninterrupted run (saves change no weights: the trials of either plan
# end with these).
mkdir -p whole
(cd whole && timeout 60 "$mdrun" "${run[@]}" --log-every 0 \
  --save-final final.safetensors "$work/mlp-every2.fb" >run.out 2>run.err) ||
  { echo "FAIL: the uninterrupted run: $(cat whole/run.err)"; exit 1; }

inside=0 killed=0
for trial in $(seq 1 "$trials"); do
  every=$((trial % 2 + 1))
  victim=$((RANDOM % 2))
  # A checkpoint the plan writes (0: none), in the first 24 steps, so that
  # 40 or more steps are left to kill a rank in.
  after=$((RANDOM % 24 / every * every))
  delay=$(printf '0.%03d' $((RANDOM % 20)))
  dir=trial$trial
  mkdir -p "$dir"
  (cd "$dir" && exec timeout 60 "$mdrun" "${run[@]}" --log-every 1 \
    --save-final final.safetensors "$work/mlp-every$every.fb" >run.out 2>run.err) &
  job=$!
  # The victim's process id first (the ranks are quick, a
  # lookup is not), then the file system, not the (buffered) progress
  # lines, says how far the run is.
  rank=
  for _ in $(seq 2000); do
    launcher=$(pgrep -P "$job" -x mdrun | head -n 1)
    rank=$(pgrep -P "${launcher:-0}" 2>/dev/null | sed -n "$((victim + 1))p")
    [[ -n $rank ]] && break
    sleep 0.005
  done
  mark=$(printf '%s/ckpt/step_%08d/meta.json' "$dir" "$after")
  for _ in $(seq 3000); do
    ((after == 0)) || [[ -f $mark ]] && break
    sleep 0.002
  done
  sleep "$delay"
  [[ -n $rank ]] && kill -9 "$rank" 2>/dev/null
  wait "$job"
  rc=$?
  ((rc != 0)) && killed=$((killed + 1))
  # Where the kill landed: a save's temporary directory left behind means
  # inside that save.
  torn=$(ls "$dir/ckpt" 2>/dev/null | grep -E '^step_[0-9]+\.tmp' | head -n 1)
  latest=$(ls "$dir/ckpt" 2>/dev/null | grep -E '^step_[0-9]+$' | tail -n 1)
  [[ -n $torn ]] && inside=$((inside + 1))
  echo "trial $trial: save every $every, rank $victim killed ${delay} s after checkpoint $after (exit $rc):" \
    "newest checkpoint ${latest:-none}${torn:+, inside the save of ${torn%%.tmp*}}"
  (cd "$dir" && timeout 60 "$mdrun" "${run[@]}" --log-every 0 --resume auto \
    --save-final final.safetensors "$work/mlp-every$every.fb" >resumed.out 2>resumed.err)
  rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "trial $trial: --resume auto failed (exit $rc): $(cat "$dir/resumed.err")"
    continue
  fi
  if [[ -n $latest ]]; then
    grep -q "^mdrun: resumed from ckpt/$latest " "$dir/resumed.out" ||
      fail "trial $trial: not resumed from ckpt/$latest: $(grep -h 'resume' "$dir/resumed.out" "$dir/resumed.err")"
  fi
  cmp -s whole/final.safetensors "$dir/final.safetensors" ||
    fail "trial $trial: the resumed run's weights differ from the uninterrupted run's"
  left=$(ls "$dir/ckpt" | grep -E '\.tmp')
  [[ -z $left ]] || fail "trial $trial: temporary save directories left: $left"
done
echo "kill-trials: $killed of $trials kills landed, $inside inside a save"
# A trial whose run ended before its kill tests nothing: most must land.
((killed * 4 >= trials * 3)) || fail "only $killed of $trials kills landed in a running job"
pgrep -f "$work/mlp" >/dev/null && fail "processes left running: $(pgrep -af "$work/mlp")"

if ((failures > 0)); then
  echo "kill-trials.sh: $failures failure(s) (seed $seed)"
  exit 1
fi
echo "kill-trials.sh: all $trials trials passed"
