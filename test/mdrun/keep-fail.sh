#!/usr/bin/env bash
# A save's keep = K and the recipe's fail("why") end to end (docs/runtime.md,
# "Retention" and "Stopping and failing"), on the CPU backend at W = 2 with
# test/mdrun/models/mlp.mdl:
#
# 1. keep = 2 on a sharded save and a full one, each every step: after 6
#    steps the save directories hold exactly the checkpoints of steps 5 and
#    6, and the files md did not write (a user's file, a directory of
#    another name, a checkpoint-named directory holding a user's file, a
#    file named as a full checkpoint that is not one) are still there. --resume auto then
#    starts from step 6, and after step 8 steps 7 and 8 are what is left.
# 2. fail("why") at step 3 (a condition every rank agrees on): mdrun exits
#    3 with the one line `mdrun: the recipe failed at step 3: why` on
#    standard error, every rank ends after step 3 (the progress and the
#    --metrics file stop there, the save after the fail in the same hooks
#    is written, no --save-final), --max-restarts does not restart it, and
#    no flight recorder analysis is printed. Ranks started as mpirun
#    starts them exit 3 each, rank 0 printing the line.
# 3. Ranks started as mpirun starts them, preempted by SIGTERM: each exits
#    75 and says where it stopped.
#
#   test/mdrun/keep-fail.sh MDC MDRUN WORK_DIR
set -uo pipefail
usage="usage: keep-fail.sh MDC MDRUN WORK_DIR"
mdc=${1:?$usage}
mdrun=${2:?$usage}
work=${3:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
source "$(dirname "$0")/lib.sh"
md_setup "$mdc" "$mdrun" "$work"

# compile NAME HOOKS: test/mdrun/models/mlp.mdl with HOOKS (lines apart by
# \n) added to its recipe, compiled for fsdp-full at W = 2 into NAME.fb.
compile() {
  awk -v hooks="  $2" '{ print } /^train {/ { print hooks }' \
    "$here/models/mlp.mdl" >"$1.mdl"
  if ! timeout 60 "$mdc" "$1.mdl" --plan fsdp-full --world-size 2 \
    -o "$1.fb" 2>"$1.mdc-err"; then
    echo "FAIL: mdc $1.mdl: $(cat "$1.mdc-err")"
    exit 1
  fi
}

# run NAME PLAN ARGS...: mdrun at W = 2 in run/, stdout in NAME.out, stderr
# in NAME.err; sets `status`.
run() {
  local name=$1 plan=$2
  shift 2
  (cd run && timeout 120 "$mdrun" --backend cpu --threads 1 --ranks 2 \
    --log-every 1 "$@" "$work/$plan" >"$work/$name.out" 2>"$work/$name.err")
  status=$?
}

# --- 1. keep = 2 -------------------------------------------------------------
compile keep 'every 1 steps { save checkpoint(sharded, "ckpt", keep = 2); save checkpoint(full, "full", keep = 2) }'
mkdir -p run/ckpt/step_00000000 run/ckpt/old-runs
echo mine >run/ckpt/notes.txt
echo mine >run/ckpt/step_00000002.safetensors
echo mine >run/ckpt/step_00000000/notes.txt
run keep keep.fb --steps 6
[ "$status" -eq 0 ] || fail "keep: mdrun exited $status: $(cat keep.err)"
listing=$(cd run/ckpt && ls | tr '\n' ' ')
want="notes.txt old-runs step_00000000 step_00000002.safetensors step_00000005 step_00000006 "
[ "$listing" = "$want" ] || fail "keep: ckpt/ holds '$listing', expected '$want'"
[ -f run/ckpt/step_00000000/notes.txt ] || fail "keep: a user's file in ckpt/step_00000000 was removed"
listing=$(cd run/full && ls | tr '\n' ' ')
want="step_00000005.safetensors step_00000006.safetensors "
[ "$listing" = "$want" ] || fail "keep: full/ holds '$listing', expected '$want'"
grep -q '^step 6: saved ckpt/step_00000006 in' keep.out ||
  fail "keep: no save of step 6 reported:"$'\n'"$(cat keep.out)"

run resumed keep.fb --steps 8 --resume auto
[ "$status" -eq 0 ] || fail "resumed: mdrun exited $status: $(cat resumed.err)"
grep -q 'resumed from ckpt/step_00000006' resumed.out ||
  fail "resumed: not from ckpt/step_00000006:"$'\n'"$(cat resumed.out)"
listing=$(cd run/ckpt && ls | grep '^step_0*[0-9]*$' | tr '\n' ' ')
want="step_00000000 step_00000007 step_00000008 "
[ "$listing" = "$want" ] || fail "resumed: ckpt/ holds '$listing', expected '$want'"

# --- 2. fail("why") ----------------------------------------------------------
compile failing 'if step == 3 and mean(loss) > 0.0 { fail("loss still above 0") }\n  save checkpoint(sharded, "fail-ckpt", keep = 1)'
run failed failing.fb --steps 10 --metrics "$work/failed.jsonl" \
  --save-final "$work/final.safetensors" --max-restarts 2
[ "$status" -eq 3 ] || fail "fail: mdrun exited $status, expected 3"
want='mdrun: the recipe failed at step 3: loss still above 0'
[ "$(cat failed.err)" = "$want" ] ||
  fail "fail: standard error is not the one line '$want':"$'\n'"$(cat failed.err)"
last=$(grep -E '^step +[0-9]+/10 ' failed.out | tail -1)
echo "$last" | grep -qE '^step +3/10 ' ||
  fail "fail: the last progress line is '$last', not step 3's"
[ "$(wc -l <failed.jsonl)" -eq 3 ] || fail "fail: --metrics holds $(wc -l <failed.jsonl) lines, expected 3"
tail -1 failed.jsonl | grep -q '"step": 3' || fail "fail: the last metrics line is not step 3's: $(tail -1 failed.jsonl)"
[ -d run/fail-ckpt/step_00000003 ] || fail "fail: the save after fail(...) in step 3's hooks was not written"
[ ! -e final.safetensors ] || fail "fail: --save-final was written for a failed run"

# The same with the ranks started as mpirun starts them (each mdrun one
# rank, no launcher): both exit 3, rank 0 alone says why.
port=$((20000 + RANDOM % 20000))
for r in 0 1; do
  (cd run && env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=$r \
    OMPI_COMM_WORLD_LOCAL_RANK=$r OMPI_COMM_WORLD_LOCAL_SIZE=2 \
    MASTER_PORT=$port timeout 120 "$mdrun" --backend cpu --threads 1 \
    --steps 10 "$work/failing.fb" >"$work/mpi$r.out" 2>"$work/mpi$r.err") &
  pids[r]=$!
done
wait "${pids[0]}"
rc0=$?
wait "${pids[1]}"
rc1=$?
[ "$rc0" -eq 3 ] && [ "$rc1" -eq 3 ] ||
  fail "mpirun-style ranks exited $rc0/$rc1, expected 3/3:"$'\n'"$(cat mpi0.err mpi1.err)"
grep -qx "$want" mpi0.err || fail "mpirun-style rank 0 did not say '$want':"$'\n'"$(cat mpi0.err)"
grep -q 'recipe failed' mpi1.err && fail "mpirun-style rank 1 said it too: $(cat mpi1.err)"

# --- 3. A preemption of mpirun-style ranks ------------------------------------
# Each rank gets the scheduler's SIGTERM itself, stops after the same step
# and exits 75 (not 1, and without a failed rank's flight recorder file).
port=$((20000 + RANDOM % 20000))
for r in 0 1; do
  (cd run && exec env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=$r \
    OMPI_COMM_WORLD_LOCAL_RANK=$r OMPI_COMM_WORLD_LOCAL_SIZE=2 \
    MASTER_PORT=$port "$mdrun" --backend cpu --threads 1 --steps 100000 \
    --log-every 1 "$work/keep.fb" >"$work/term$r.out" 2>"$work/term$r.err") &
  pids[r]=$!
done
for _ in $(seq 600); do
  grep -qE '^step +2/' term0.out 2>/dev/null && break
  sleep 0.1
done
kill -TERM "${pids[0]}" "${pids[1]}"
wait "${pids[0]}"
rc0=$?
wait "${pids[1]}"
rc1=$?
[ "$rc0" -eq 75 ] && [ "$rc1" -eq 75 ] ||
  fail "preempted mpirun-style ranks exited $rc0/$rc1, expected 75/75:"$'\n'"$(cat term0.err term1.err)"
grep -q '^mdrun: preempted: rank 0 stopped after step ' term0.err ||
  fail "preempted rank 0 did not say where it stopped:"$'\n'"$(cat term0.err)"
grep -q 'error' term0.err term1.err && fail "a preempted rank reported an error: $(cat term0.err term1.err)"

if [ "$failures" -ne 0 ]; then
  echo "keep-fail.sh: $failures failure(s)"
  exit 1
fi
echo "keep-fail.sh: all checks passed"
