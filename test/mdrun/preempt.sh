#!/usr/bin/env bash
# SIGTERM to mdrun, as a scheduler preempts a job (docs/runtime.md,
# "Preemption"), on the CPU backend with test/mdrun/models/mlp.mdl given a
# sharded save every 1000 steps (so that only the preemption saves):
#
# 1. The launcher passes the SIGTERM on; every rank stops after the same
#    step, rank 0 says so, the checkpoint of that step is published, and
#    mdrun exits 75 (EX_TEMPFAIL) with one line saying what happened.
# 2. --resume auto from it to 5 steps further gives byte-identical weights
#    to an uninterrupted run of as many steps (cmp of --save-final files).
# 3. Two SIGTERMs stop the ranks at once: exit 143, no checkpoint. One
#    SIGTERM just after the last step: exit 0 (the job finished) or 75
#    with that step's checkpoint, never a rank killed by it (8 tries).
# 4. --max-restarts 2 with a rank killed (kill -9) once: mdrun says why it
#    restarts, resumes from the newest checkpoint (a save every 100 steps)
#    and ends with the uninterrupted run's weights, byte for byte; without
#    --max-restarts the same kill fails the job. A stopped rank (SIGSTOP)
#    whose peer times out in a collective (--timeout 3) is restarted alike.
#
#   test/mdrun/preempt.sh MDC MDRUN WORK_DIR
set -uo pipefail
usage="usage: preempt.sh MDC MDRUN WORK_DIR"
mdc=${1:?$usage}
mdrun=${2:?$usage}
work=${3:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
source "$(dirname "$0")/lib.sh"
md_setup "$mdc" "$mdrun" "$work"

sed '/^train {/a\  every 1000 steps { save checkpoint(sharded, "ckpt") }' \
  "$here/models/mlp.mdl" >mlp.mdl
timeout 60 "$mdc" mlp.mdl --plan fsdp-full -o mlp.fb || { echo "FAIL: mdc"; exit 1; }

# start DIR: mdrun in the background in DIR (a long run, a progress line
# per step); sets `pid`. waitStep DIR N: until rank 0 reported step N.
start() {
  mkdir -p "$1"
  cd "$1" || exit 1
  "$mdrun" --backend cpu --threads 1 --ranks 2 --steps 1000000 --log-every 1 \
    "$work/mlp.fb" >run.out 2>run.err &
  pid=$!
  cd "$work" || exit 1
}
waitStep() {
  for _ in $(seq 300); do
    grep -qE "^step +$2/" "$1/run.out" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "$1: no step $2 within 30 s: $(tail -3 "$1/run.out" "$1/run.err")"
  return 1
}

# 1. One SIGTERM: the ranks stop after a step, with its checkpoint.
start one
if waitStep one 20; then
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  [[ $rc -eq 75 ]] || fail "one SIGTERM: exit $rc, expected 75: $(cat one/run.err)"
  grep -q '^mdrun: SIGTERM: the ranks stop after this step' one/run.err ||
    fail "one SIGTERM: the launcher did not say it passed it on: $(cat one/run.err)"
  grep -q '^mdrun: preempted: SIGTERM: every rank stopped after the same step' one/run.err ||
    fail "one SIGTERM: no preemption line: $(cat one/run.err)"
  step=$(sed -nE 's/^step ([0-9]+): stopping: preempted \(SIGTERM\)$/\1/p' one/run.out)
  if [[ -z $step ]]; then
    fail "one SIGTERM: rank 0 did not say where it stopped: $(tail -5 one/run.out)"
  else
    ckpt=$(printf 'one/ckpt/step_%08d' "$step")
    [[ -f $ckpt/meta.json ]] || fail "one SIGTERM: no checkpoint $ckpt"
    grep -qE "^step $step: saved ckpt/step_0*$step in " one/run.out ||
      fail "one SIGTERM: rank 0 did not report the save of step $step"

    # 2. Resumed, the run ends where an uninterrupted one does, bit for bit.
    end=$((step + 5))
    (cd one && timeout 120 "$mdrun" --backend cpu --threads 1 --ranks 2 \
      --resume auto --steps "$end" --save-final resumed.safetensors \
      "$work/mlp.fb" >resumed.out 2>resumed.err) ||
      fail "resume: $(cat one/resumed.err)"
    grep -q "^mdrun: resumed from ckpt/step_0*$step " one/resumed.out ||
      fail "resume: not from step $step: $(grep resumed one/resumed.out)"
    mkdir -p whole
    (cd whole && timeout 120 "$mdrun" --backend cpu --threads 1 --ranks 2 \
      --steps "$end" --save-final whole.safetensors "$work/mlp.fb" \
      >whole.out 2>whole.err) || fail "uninterrupted run: $(cat whole/whole.err)"
    cmp -s one/resumed.safetensors whole/whole.safetensors ||
      fail "the resumed run's weights differ from the uninterrupted run's"
  fi
fi

# 3. Two SIGTERMs: the ranks stop at once, nothing is saved.
start two
if waitStep two 20; then
  kill -TERM "$pid"
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  [[ $rc -eq 143 || $rc -eq 75 ]] || fail "two SIGTERMs: exit $rc: $(cat two/run.err)"
  # Two signals sent back to back may arrive as one (they are not queued):
  # only when the launcher saw both must nothing have been saved.
  if [[ $rc -eq 143 ]]; then
    grep -q '^mdrun: interrupted by SIGTERM' two/run.err ||
      fail "two SIGTERMs: $(cat two/run.err)"
  fi
fi
# 3b. One SIGTERM just after the last step (while the ranks tear down):
# the job finished, exit 0; or it stopped at that step with its checkpoint,
# exit 75; never a rank killed by the SIGUSR1 the launcher passes it on as.
# Eight tries of that timing (it failed 13 of 20 before).
for try in 1 2 3 4 5 6 7 8; do
  dir=last$try
  mkdir -p "$dir"
  cd "$dir" || exit 1
  "$mdrun" --backend cpu --threads 1 --ranks 2 --steps 10 --log-every 1 \
    "$work/mlp.fb" >run.out 2>run.err &
  pid=$!
  cd "$work" || exit 1
  for _ in $(seq 5000); do
    grep -qE '^step +10/' "$dir/run.out" 2>/dev/null && break
    sleep 0.002
  done
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"
  rc=$?
  if [[ $rc -eq 75 ]]; then
    [[ -f $dir/ckpt/step_00000010/meta.json ]] ||
      fail "SIGTERM after the last step ($try): exit 75 without step 10's checkpoint: $(cat "$dir/run.err")"
  elif [[ $rc -ne 0 ]]; then
    fail "SIGTERM after the last step ($try): exit $rc, expected 0 or 75: $(cat "$dir/run.err")"
  fi
  grep -q 'killed by signal' "$dir/run.err" &&
    fail "SIGTERM after the last step ($try): a rank was killed: $(cat "$dir/run.err")"
done

# 4. Restarts.
sed '/^train {/a\  every 100 steps { save checkpoint(sharded, "ckpt") }' \
  "$here/models/mlp.mdl" >mlp100.mdl
timeout 60 "$mdc" mlp100.mdl --plan fsdp-full -o mlp100.fb || fail "mdc mlp100.mdl"
mkdir -p restart whole100
(cd whole100 && timeout 120 "$mdrun" --backend cpu --threads 1 --ranks 2 \
  --steps 3000 --log-every 100 --save-final whole.safetensors "$work/mlp100.fb" \
  >run.out 2>run.err) || fail "uninterrupted 3000 steps: $(cat whole100/run.err)"
for restarts in 2 0; do
  dir=restart$restarts
  mkdir -p "$dir"
  cd "$dir" || exit 1
  "$mdrun" --backend cpu --threads 1 --ranks 2 --steps 3000 --log-every 100 \
    --max-restarts "$restarts" --save-final final.safetensors \
    "$work/mlp100.fb" >run.out 2>run.err &
  pid=$!
  cd "$work" || exit 1
  if waitStep "$dir" 500; then
    victim=$(pgrep -P "$pid" | head -n 1)
    [[ -n $victim ]] && kill -9 "$victim"
    wait "$pid"
    rc=$?
    if [[ $restarts -eq 2 ]]; then
      [[ $rc -eq 0 ]] || fail "--max-restarts 2: exit $rc: $(cat "$dir/run.err")"
      grep -qE '^mdrun: restart 1 of 2 after: rank [01] was killed by signal 9 \(Killed\); resuming from the newest checkpoint$' "$dir/run.err" ||
        fail "--max-restarts 2: no restart line: $(cat "$dir/run.err")"
      grep -q '^mdrun: resumed from ckpt/step_' "$dir/run.out" ||
        fail "--max-restarts 2: the restart did not resume: $(grep mdrun: "$dir/run.out")"
      cmp -s "$dir/final.safetensors" whole100/whole.safetensors ||
        fail "--max-restarts 2: the weights differ from the uninterrupted run's"
    else
      [[ $rc -eq 1 ]] || fail "no --max-restarts: exit $rc after a rank was killed"
      grep -q 'restart' "$dir/run.err" && fail "no --max-restarts: it restarted"
    fi
  else
    kill -9 "$pid" 2>/dev/null
  fi
done
# A stopped rank (SIGSTOP) stalls a collective: the other rank times out
# after --timeout, and --max-restarts restarts the job to the uninterrupted
# run's weights (2 restarts, so that a loaded machine's slow step after
# the restart cannot end the test).
mkdir -p stall
cd stall || exit 1
"$mdrun" --backend cpu --threads 1 --ranks 2 --steps 3000 --log-every 100 \
  --timeout 3 --max-restarts 2 --save-final final.safetensors \
  "$work/mlp100.fb" >run.out 2>run.err &
pid=$!
cd "$work" || exit 1
if waitStep stall 500; then
  victim=$(pgrep -P "$pid" | head -n 1)
  [[ -n $victim ]] && kill -STOP "$victim"
  wait "$pid"
  rc=$?
  [[ $rc -eq 0 ]] || fail "a stopped rank with --max-restarts 2: exit $rc: $(cat stall/run.err)"
  # The peer's comm timeout or the progress watchdog, whichever ends the
  # job first.
  grep -qE '^mdrun: restart 1 of 2 after: (rank [01] failed: .*timed out after 3 s waiting for rank\(s\) [01] to [a-z ]+|.*no rank completed a collective or a step in 3 s \(--timeout\).*); resuming from the newest checkpoint$' stall/run.err ||
    fail "a stopped rank: no restart line for the timeout: $(cat stall/run.err)"
  cmp -s stall/final.safetensors whole100/whole.safetensors ||
    fail "a stopped rank, restarted: the weights differ from the uninterrupted run's"
else
  kill -9 "$pid" 2>/dev/null
fi
pgrep -f "$work/mlp" >/dev/null && fail "ranks left running: $(pgrep -af "$work/mlp")"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "preempt: all checks passed"
