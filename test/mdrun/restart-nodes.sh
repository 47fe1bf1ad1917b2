#!/usr/bin/env bash
# mdrun --max-restarts across nodes (docs/runtime.md, "Restarts"): two
# launchers on this machine (--nnodes 2 over loopback, the gloo comm) train
# test/mdrun/models/mlp.mdl given a sharded save every 20 steps.
#
# 1. --max-restarts 2 on both nodes, a rank of node 1 killed (kill -9) after
#    the first checkpoint: both launchers print the same restart line naming
#    it, the ranks resume from the newest checkpoint, and the job ends with
#    the weights of an uninterrupted run, byte for byte (cmp of --save-final
#    files).
# 2. The same kill without --max-restarts fails both nodes, neither restarts;
#    a rank of node 1 stopped (SIGSTOP) stalls the job, which restarts too.
# 3. Node 1's launcher itself killed (kill -9): node 0 cannot restart without
#    it and fails within seconds, saying so; no hang.
# 4. Nodes with different --max-restarts are refused, naming both values.
# 5. A preemption (SIGTERM to both launchers, as a scheduler sends it) is no
#    failure to restart from: both stop after a step with exit 75.
# Every run has a time limit; nothing may hang or be left running.
#
#   test/mdrun/restart-nodes.sh MDC MDRUN WORK_DIR
set -uo pipefail
usage="usage: restart-nodes.sh MDC MDRUN WORK_DIR"
mdc=${1:?$usage}
mdrun=${2:?$usage}
work=${3:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
source "$(dirname "$0")/lib.sh"
md_setup "$mdc" "$mdrun" "$work"

has() { # has FILE PATTERN: FILE matches the extended regex PATTERN
  grep -Eq -- "$2" "$1" || fail "$1 does not match /$2/:"$'\n'"$(cat "$1")"
}

sed '/^train {/a\  every 20 steps { save checkpoint(sharded, "ckpt") }' \
  "$here/models/mlp.mdl" >mlp.mdl
timeout 60 "$mdc" mlp.mdl --plan fsdp-full -o mlp.fb || { echo "FAIL: mdc"; exit 1; }

steps=300
common=(--backend cpu --threads 1 --steps $steps --log-every 100 "$work/mlp.fb")

# The uninterrupted run: 2 ranks on one node (two nodes give its bits:
# multinode.sh).
mkdir -p whole
(cd whole && timeout 120 "$mdrun" --ranks 2 --timeout 20 "${common[@]}" \
  --save-final final.safetensors >run.out 2>run.err) ||
  fail "uninterrupted run: $(cat whole/run.err)"

# nodes DIR ARGS...: launchers of node 0 and node 1 in DIR (one working
# directory: the nodes share the checkpoint's file system), node 0 picking
# the port, node 0 given `first` before ARGS when set; sets n0 and n1
# (their timeout processes) or fails.
first=()
nodes() {
  local dir=$1
  shift
  mkdir -p "$dir"
  (cd "$dir" && exec timeout 120 "$mdrun" --nnodes 2 --node-rank 0 --gpus 1 \
    --master-addr 127.0.0.1 --master-port 0 "${first[@]}" "$@" \
    >node0.out 2>node0.err) &
  n0=$!
  local p=
  for _ in $(seq 200); do
    p=$(sed -nE 's/^mdrun: rendezvous port ([0-9]+)$/\1/p' "$dir/node0.err" 2>/dev/null)
    [[ -n $p ]] && break
    sleep 0.05
  done
  if [[ -z $p ]]; then
    fail "$dir: node 0 printed no port: $(cat "$dir/node0.err")"
    kill "$n0" 2>/dev/null
    return 1
  fi
  (cd "$dir" && exec timeout 120 "$mdrun" --nnodes 2 --node-rank 1 --gpus 1 \
    --master-addr 127.0.0.1 --master-port "$p" "$@" >node1.out 2>node1.err) &
  n1=$!
}
# afterCheckpoint DIR: waits until DIR holds the first checkpoint.
afterCheckpoint() {
  for _ in $(seq 600); do
    [[ -f $1/ckpt/step_00000020/meta.json ]] && return 0
    sleep 0.05
  done
  fail "$1: no checkpoint within 30 s: $(cat "$1/node0.err" "$1/node1.err")"
  return 1
}
# rankOf N1: the rank process of node 1 (timeout's launcher's child).
rankOf() {
  local launcher
  launcher=$(pgrep -P "$1" -x mdrun | head -n 1)
  pgrep -P "${launcher:-0}" | head -n 1
}

# 1. and 2. A rank of node 1 killed, with and without restarts.
for restarts in 2 0; do
  dir=kill$restarts
  nodes "$dir" --max-restarts $restarts --timeout 20 "${common[@]}" \
    --save-final final.safetensors || continue
  if afterCheckpoint "$dir"; then
    victim=$(rankOf "$n1")
    [[ -n $victim ]] && kill -9 "$victim"
  fi
  wait "$n0"
  rc0=$?
  wait "$n1"
  rc1=$?
  if [[ $restarts -eq 2 ]]; then
    [[ $rc0 -eq 0 && $rc1 -eq 0 ]] ||
      fail "--max-restarts 2: exit $rc0/$rc1"$'\n'"$(cat "$dir"/node*.err)"
    for n in 0 1; do
      has "$dir/node$n.err" '^mdrun: restart 1 of 2 after: (.*; )?node 1: rank 1 was killed by signal 9 \(Killed\)(; .*)?; resuming from the newest checkpoint$'
    done
    # The same words on both nodes: node 0 decided for both.
    # (Quoted: unquoted, the right side is a glob, and a cause's text such
    # as gloo's "[./gloo/transport/tcp/pair.cc:589]" is a bracket pattern.)
    [[ "$(grep '^mdrun: restart' "$dir/node0.err")" == "$(grep '^mdrun: restart' "$dir/node1.err")" ]] ||
      fail "the nodes' restart lines differ: $(grep -h '^mdrun: restart' "$dir"/node*.err)"
    has "$dir/node0.out" '^mdrun: resumed from ckpt/step_[0-9]+ '
    cmp -s "$dir/final.safetensors" whole/final.safetensors ||
      fail "--max-restarts 2: the weights differ from the uninterrupted run's"
  else
    [[ $rc0 -eq 1 && $rc1 -eq 1 ]] ||
      fail "no --max-restarts: exit $rc0/$rc1 after a rank was killed"$'\n'"$(cat "$dir"/node*.err)"
    grep -q 'restart' "$dir"/node*.err && fail "no --max-restarts: it restarted: $(cat "$dir"/node*.err)"
    has "$dir/node1.err" '^mdrun: error: rank 1 was killed by signal 9'
  fi
done

# 2b. A rank of node 1 stopped (SIGSTOP): the job stalls (a collective's
#     timeout on node 0, or node 1's watchdog), and restarts all the same.
#     (A second restart is allowed: a start-up slower than the short
#     timeout on a loaded machine would be one.)
dir=stall
if nodes "$dir" --max-restarts 2 --timeout 5 "${common[@]}" \
  --save-final final.safetensors && afterCheckpoint "$dir"; then
  victim=$(rankOf "$n1")
  [[ -n $victim ]] && kill -STOP "$victim"
fi
wait "$n0"
rc0=$?
wait "$n1"
rc1=$?
[[ $rc0 -eq 0 && $rc1 -eq 0 ]] ||
  fail "a stopped rank, --max-restarts 2: exit $rc0/$rc1"$'\n'"$(cat "$dir"/node*.err)"
for n in 0 1; do
  has "$dir/node$n.err" '^mdrun: restart 1 of 2 after: node [01]: .*; resuming from the newest checkpoint$'
done
cmp -s "$dir/final.safetensors" whole/final.safetensors ||
  fail "a stopped rank, --max-restarts 2: the weights differ from the uninterrupted run's"

# 3. Node 1's launcher killed: nobody can restart its ranks.
dir=lost
if nodes "$dir" --max-restarts 2 --timeout 20 "${common[@]}" && afterCheckpoint "$dir"; then
  launcher=$(pgrep -P "$n1" -x mdrun | head -n 1)
  [[ -n $launcher ]] && kill -9 "$launcher"
  start=$(date +%s%N)
  # (Bash's notice of node 1's killed job would go to wait's stderr.)
  { wait "$n0"; } 2>/dev/null
  rc0=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  { wait "$n1"; } 2>/dev/null
  [[ $rc0 -ne 0 && $rc0 -ne 124 ]] || fail "node 0 after node 1's launcher was killed: exit $rc0: $(cat "$dir/node0.err")"
  has "$dir/node0.err" "the job does not restart: node 1's launcher is gone"
  grep -q '^mdrun: restart' "$dir/node0.err" && fail "node 0 restarted without node 1: $(cat "$dir/node0.err")"
  ((ms < 20000)) || fail "node 0 took $ms ms to give up"
  echo "node 0 ended ${ms} ms after node 1's launcher was killed: $(tail -1 "$dir/node0.err")"
fi

# 4. Different --max-restarts on the nodes: refused on both.
dir=mixed
first=(--max-restarts 2)
if nodes "$dir" --timeout 20 "${common[@]}"; then
  wait "$n0"
  rc0=$?
  wait "$n1"
  rc1=$?
  [[ $rc0 -eq 1 && $rc1 -eq 1 ]] ||
    fail "different --max-restarts: exit $rc0/$rc1"$'\n'"$(cat "$dir"/node*.err)"
  for n in 0 1; do
    has "$dir/node$n.err" "node 1's launcher has --max-restarts 0, node 0's 2: every node's launcher needs the same options"
  done
  grep -q '^mdrun: restart' "$dir"/node*.err && fail "different --max-restarts: a node restarted"
fi
first=()

# 5. Preempted with restarts left: no restart.
dir=preempt
if nodes "$dir" --max-restarts 2 --timeout 20 "${common[@]}" && afterCheckpoint "$dir"; then
  kill -TERM "$(pgrep -P "$n0" -x mdrun | head -n 1)" "$(pgrep -P "$n1" -x mdrun | head -n 1)"
  wait "$n0"
  rc0=$?
  wait "$n1"
  rc1=$?
  [[ $rc0 -eq 75 && $rc1 -eq 75 ]] ||
    fail "preempted: exit $rc0/$rc1, expected 75/75"$'\n'"$(cat "$dir"/node*.err)"
  grep -q '^mdrun: restart' "$dir"/node*.err && fail "preempted: a node restarted: $(cat "$dir"/node*.err)"
fi
pgrep -f "$work/mlp" >/dev/null && fail "processes left running: $(pgrep -af "$work/mlp")"

if ((failures > 0)); then
  echo "restart-nodes.sh: $failures failure(s)"
  exit 1
fi
echo "restart-nodes.sh: all passed"
