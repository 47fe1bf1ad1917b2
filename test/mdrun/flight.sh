#!/usr/bin/env bash
# When a job fails, mdrun says why (docs/runtime.md, "When a job fails"):
# faults injected into a job of the MLP compiled by mdc (fsdp-full, 2 ranks,
# the CPU backend with its comm thread, mdrun's default), each of which must
# end the job within its timeout plus a few seconds, with exit status 1, one
# flight recorder analysis naming the culprit rank, its step and its
# collective, every rank's ring as JSON (checked: schema, ascending sequence
# numbers, states and their times, every rank present), and no process left
# in this test's process group:
#   1. a rank killed with SIGKILL;
#   2. a rank stopped with SIGSTOP (the other rank's comm times out), with
#      the comm thread and without it (--comm-thread off);
#   3. every rank stopped with SIGSTOP (the launcher's progress watchdog);
#   4. --flight-recorder 0: a killed rank, and no analysis;
#   5. two launchers over loopback: node 1's rank stopped, node 0's killed;
#      node 1 ends within seconds through the launchers' control
#      connection, not after its --timeout;
#   5b. two launchers of two ranks each, every rank of node 1 stopped:
#      both nodes name node 1 (node 0's analysis: its collective waits for
#      node 1's ranks), whichever launcher's watchdog fires first;
#   6. two ranks started as srun starts them (no launcher): rank 1 killed;
#      rank 0 fails and writes its own ring;
#   7. a kernel's library fails (oneDNN asked for a bf16 matmul it cannot
#      create: MD_CPU_GEMM_BF16=onednn under the AVX2 cap): the error names
#      the kernel, the GEMM and the ISA, the analysis names the instruction
#      instead of the collective before it, every rank ends.
#
#   test/mdrun/flight.sh MDC MDRUN PYTHON3 WORK_DIR
set -uo pipefail
usage="usage: flight.sh MDC MDRUN PYTHON3 WORK_DIR"
mdc=${1:?$usage}
mdrun=${2:?$usage}
python=${3:?$usage}
work=${4:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
mdc=$(cd "$(dirname "$mdc")" && pwd)/$(basename "$mdc")
mdrun=$(cd "$(dirname "$mdrun")" && pwd)/$(basename "$mdrun")
# Its own process group, so that what a job leaves behind can be found.
if [[ $(ps -o pgid= $$ | tr -d ' ') != "$$" ]]; then
  exec setsid "$0" "$@"
fi
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$work" || exit 1
export TMPDIR=$work

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
has() { # has FILE PATTERN: FILE matches the extended regex PATTERN
  grep -Eq -- "$2" "$1" || fail "$1 does not match /$2/:"$'\n'"$(cat "$1")"
}
children() { echo $(cat /proc/$1/task/$1/children 2>/dev/null); }

if ! timeout 60 "$mdc" "$here/models/mlp.mdl" --plan fsdp-full --world-size 2 \
  -o mlp.fb 2>mdc.err; then
  echo "FAIL: mdc mlp.mdl: $(cat mdc.err)"
  exit 1
fi
if ! timeout 60 "$mdc" "$here/models/mlp.mdl" --plan fsdp-full --world-size 4 \
  -o mlp-4.fb 2>mdc.err; then
  echo "FAIL: mdc mlp.mdl --world-size 4: $(cat mdc.err)"
  exit 1
fi

# start NAME ARGS...: a long run of mlp.fb at W = 2 in the background, its
# output in NAME.out and NAME.err; sets launcher (the timeout's pid) and
# workers (rank 0's pid, then rank 1's) once rank 0 trains.
start() {
  local name=$1
  shift
  # --foreground keeps every process in this test's group.
  timeout --foreground 60 "$mdrun" --backend cpu --threads 1 --ranks 2 \
    --steps 100000000 --log-every 0 "$@" mlp.fb >"$name.out" 2>"$name.err" &
  launcher=$!
  workers=""
  for _ in $(seq 200); do
    workers=$(children "$(children $launcher)")
    [[ $(wc -w <<<"$workers") -eq 2 ]] && grep -q '^mdrun: training ' "$name.out" && break
    sleep 0.05
  done
  sleep 0.3 # in the middle of the steps' collectives
  [[ $(wc -w <<<"$workers") -eq 2 ]] && grep -q '^mdrun: training ' "$name.out"
}

# rank_pid R: the pid of rank R among $workers.
rank_pid() {
  local w
  for w in $workers; do
    tr '\0' '\n' <"/proc/$w/environ" 2>/dev/null | grep -qx "RANK=$1" && echo "$w"
  done
}

# finish NAME LIMIT_MS: waits for the job; it must exit 1 within LIMIT_MS
# of the fault, and leave no process behind.
finish() {
  local name=$1 limit=$2 rc elapsed left
  wait "$launcher"
  rc=$?
  elapsed=$((($(date +%s%N) - fault) / 1000000))
  echo "$name: ended in $elapsed ms"
  [[ $rc -eq 1 ]] || fail "$name: exit $rc, expected 1: $(cat "$name.err")"
  [[ $elapsed -lt $limit ]] || fail "$name: took $elapsed ms (limit $limit ms)"
  sleep 0.1
  left=$(pgrep -g $$ -x mdrun)
  [[ -z $left ]] && return 0
  fail "$name: processes left behind: $(ps -o pid,stat,args -p $(echo $left))"
  kill -KILL $left 2>/dev/null
}

# check_rings NAME CULPRIT FATE: the JSON rings the launcher printed the
# place of: one per rank, the schema, ascending seqs, the culprit's fate.
check_rings() {
  local name=$1 culprit=$2 fate=$3 dir
  dir=$(sed -nE 's/^mdrun: flight recorder: the last collectives of ranks 0-1 are in (.*)\/rank-N.json$/\1/p' "$name.err")
  if [[ -z $dir ]]; then
    fail "$name: no line naming the rings' files: $(cat "$name.err")"
    return
  fi
  # Only a run without the comm thread has a ring its comm does not stamp.
  check_json "$name" "$dir" "0 1" "$culprit" "$fate" \
    "$([[ $name == *-off ]] && echo false || echo true)"
}

# check_json NAME DIR RANKS CULPRIT FATE STAMPS: DIR/rank-R.json for each
# of RANKS, as check_rings says; comm_stamps is STAMPS (true or false).
check_json() {
  "$python" - "$2" "$3" "$4" "$5" "$6" <<'EOF' || fail "$1: the rings in $2"
import json, sys
d, ranks, culprit, fate = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), sys.argv[4]
stamps = sys.argv[5] == "true"
keys = {"rank", "pid", "fate", "phase", "capacity", "begun", "step",
        "micro_step", "steps_done", "progress_ns", "written_ns", "comm_stamps",
        "failed_in", "collectives"}
ckeys = {"seq", "kind", "group", "group_size", "dtype", "bytes", "bucket",
         "location", "step", "micro_step", "state", "began_ns", "started_ns",
         "ended_ns"}
ok = True
def bad(msg):
    global ok
    print(msg)
    ok = False
for rank in map(int, ranks):
    r = json.load(open(f"{d}/rank-{rank}.json"))
    if set(r) != keys:
        bad(f"rank {rank}: keys {sorted(r)}")
        continue
    if r["rank"] != rank or r["capacity"] != 2048 or r["comm_stamps"] != stamps:
        bad(f"rank {rank}: rank {r['rank']}, capacity {r['capacity']}, "
            f"comm_stamps {r['comm_stamps']}")
    cs = r["collectives"]
    if not cs or len(cs) > 2048 or cs[-1]["seq"] != r["begun"]:
        bad(f"rank {rank}: {len(cs)} collectives, begun {r['begun']}")
    prev = 0
    for c in cs:
        if set(c) != ckeys:
            bad(f"rank {rank}: collective keys {sorted(c)}"); break
        if c["seq"] <= prev:
            bad(f"rank {rank}: seq {c['seq']} after {prev}"); break
        prev = c["seq"]
        if c["kind"] not in ("all_gather", "reduce_scatter", "all_reduce",
                             "broadcast", "barrier") or \
           c["state"] not in ("queued", "started", "completed", "failed"):
            bad(f"rank {rank}: {c}"); break
        # A time for each state reached, in order; none for the others.
        began, started, ended = c["began_ns"], c["started_ns"], c["ended_ns"]
        if not {"queued": started is None and ended is None,
                "started": ended is None and started and started >= began > 0,
                "completed": ended and started and ended >= started >= began > 0,
                "failed": ended and ended >= began > 0}[c["state"]]:
            bad(f"rank {rank}: times of {c}"); break
    if not any(c["location"] and ".mdl:" in c["location"] for c in cs):
        bad(f"rank {rank}: no collective with an .mdl location")
    if rank == culprit and fate not in r["fate"]:
        bad(f"rank {rank}: fate {r['fate']!r}, expected {fate!r}")
sys.exit(0 if ok else 1)
EOF
}

# The analysis's parts: where the culprit was and what it was doing.
where='(in step [0-9]+, micro-step [12]|in the hooks after step [0-9]+)'
call='(all_gather|reduce_scatter|all_reduce|broadcast) #[0-9]+ \((f32|bf16), [0-9.]+ (B|KiB), world group of 2(, bucket [0-9]+)?(, [^)]*mlp\.mdl:[0-9]+:[0-9]+)?\)'
# Between two collectives with no rank yet in the next (the other rank
# still computing, or on another node whose ring this launcher lacks):
# what the culprit did last, and that nobody waits.
doing="(while in $call|after $call; it never reached $call|after $call; no rank waits in a collective \\([0-9]+ completed on the furthest rank\\))"
# Where rank 0 waits: in the same collective, or in a later one the
# culprit never joined; or nowhere, between two.
waits="(; rank 0 (waits in (it|$call) since|gave up waiting in (it|$call) after) [0-9.]+ s)?"

# 1. A rank killed with SIGKILL.
if start kill; then
  fault=$(date +%s%N)
  kill -KILL "$(rank_pid 1)"
  finish kill 5000
  has kill.err "^mdrun: flight recorder: rank 1 was killed by signal 9 \(Killed\) $where, $doing$waits$"
  has kill.err '^mdrun: error: rank 1 was killed by signal 9 \(Killed\)$'
  check_rings kill 1 "killed by signal 9"
else
  fail "kill: the job did not start: $(cat kill.out kill.err)"
  kill -KILL $(pgrep -g $$ -x mdrun) 2>/dev/null
fi

# 2. A rank stopped: rank 0 waits --timeout seconds, then the job ends;
# with the comm thread (the default) and without it.
for thread in on off; do
  name=stop-one-$thread
  if start $name --timeout 3 --comm-thread $thread; then
    fault=$(date +%s%N)
    kill -STOP "$(rank_pid 1)"
    finish $name 8000
    has $name.err "^mdrun: flight recorder: rank 1 was stopped \(SIGSTOP, SIGTSTP or a debugger\) $where, $doing$waits$"
    has $name.err '^mdrun: error: (rank 0 failed: .*timed out after 3 s waiting for rank\(s\) 1|no rank completed a collective or a step in 3 s \(--timeout\); rank 1 was stopped \(SIGSTOP, SIGTSTP or a debugger\); stopped 2 ranks)'
    check_rings $name 1 "was stopped"
  else
    fail "$name: the job did not start: $(cat $name.out $name.err)"
    kill -KILL $(pgrep -g $$ -x mdrun) 2>/dev/null
  fi
done

# 3. Every rank stopped: no comm can notice; the launcher's watchdog does.
if start stop-all --timeout 2; then
  fault=$(date +%s%N)
  kill -STOP $workers
  finish stop-all 7000
  # Both stopped outside any collective (in a kernel, say): "after" the
  # last one the furthest rank completed, and no rank waits. Or one in a
  # collective the other has already left (its side of it done): the other
  # waits nowhere.
  has stop-all.err "^mdrun: flight recorder: (ranks 0-1 were stopped \(SIGSTOP, SIGTSTP or a debugger\) $where, ($doing|after $call; no rank waits in a collective \([0-9]+ completed on the furthest rank\))|rank [01] was stopped \(SIGSTOP, SIGTSTP or a debugger\) $where, $doing(; rank [01], which was stopped \(SIGSTOP, SIGTSTP or a debugger\), waits in (it|$call) since [0-9.]+ s)?)$"
  has stop-all.err '^mdrun: error: no rank completed a collective or a step in 2 s \(--timeout\); ranks 0-1 were stopped \(SIGSTOP, SIGTSTP or a debugger\); stopped 2 ranks$'
  check_rings stop-all 0 "was stopped"
  check_rings stop-all 1 "was stopped"
else
  fail "stop-all: the job did not start: $(cat stop-all.out stop-all.err)"
  kill -KILL $(pgrep -g $$ -x mdrun) 2>/dev/null
fi

# 4. Without a recorder: the failure alone.
if start off --flight-recorder 0; then
  fault=$(date +%s%N)
  kill -KILL "$(rank_pid 1)"
  finish off 5000
  has off.err '^mdrun: error: rank 1 was killed by signal 9 \(Killed\)$'
  grep -q 'flight recorder' off.err && fail "off: an analysis without a recorder: $(cat off.err)"
else
  fail "off: the job did not start: $(cat off.out off.err)"
  kill -KILL $(pgrep -g $$ -x mdrun) 2>/dev/null
fi

# 7. A library error in a kernel: a Status, not an abort. oneDNN 2.6.3
# creates no bf16 matmul below AVX-512; forcing its bf16 path under the
# AVX2 cap makes the first bf16 GEMM fail in oneDNN, on every machine.
fault=$(date +%s%N)
MD_CPU_ISA=avx2 MD_CPU_GEMM_BF16=onednn timeout --foreground 60 "$mdrun" \
  --backend cpu --threads 1 --ranks 2 --steps 3 --log-every 0 mlp.fb \
  >gemm.out 2>gemm.err &
launcher=$!
finish gemm 10000
if grep -q '^mdrun: cpu: .*GEMM f32: oneDNN' gemm.out; then
  has gemm.out '^mdrun: warning: MD_CPU_GEMM_BF16=onednn, but oneDNN [0-9.]+ creates no bf16 matmul on this CPU \(.*\): its first bf16 GEMM fails$'
  has gemm.err '^mdrun: flight recorder: (rank [01]|ranks 0-1) exited with status 1 in step 1, micro-step 1, in [a-z_]+ at blocks\[[0-9]+\]\.instructions\[[0-9]+\] \([^)]*mlp\.mdl:[0-9]+:[0-9]+\)'
  has gemm.err "^mdrun: error: rank [01] failed: step 1: [a-z_]+ at blocks\[[0-9]+\]\.instructions\[[0-9]+\] \([^)]*mlp\.mdl:[0-9]+:[0-9]+\): matmul(_grad)?: oneDNN [0-9.]+'s matmul failed for the GEMM C f32\[[0-9]+, [0-9]+\] = A(\^T)? bf16\[[0-9]+, [0-9]+\] x B(\^T)? bf16\[[0-9]+, [0-9]+\] \(lda [0-9]+, .*\) on ISA avx2 \(MD_CPU_ISA=avx2; the CPU has [a-z0-9_]+\), oneDNN avx2: could not create a primitive descriptor iterator"
  grep -q 'terminate called\|Aborted\|signal' gemm.err && fail "gemm: an abort: $(cat gemm.err)"
else
  echo "note: skipped the library failure: this build's GEMM is not oneDNN"
fi

# 5. Two launchers over loopback, one rank each: node 1's rank stopped,
# node 0's killed. Node 1's rank can notice nothing, and its launcher's
# watchdog would wait --timeout 30; the control connection ends it within
# seconds, naming the failure on node 0.
common=(--backend cpu --threads 1 --steps 100000000 --log-every 0 --timeout 30
  --nnodes 2 --gpus 1)
timeout --foreground 60 "$mdrun" "${common[@]}" --node-rank 0 --master-addr 127.0.0.1 \
  --master-port 0 mlp.fb >node0.out 2>node0.err &
node0=$!
p=
for _ in $(seq 200); do
  p=$(sed -nE 's/^mdrun: rendezvous port ([0-9]+)$/\1/p' node0.err)
  [[ -n $p ]] && break
  sleep 0.05
done
timeout --foreground 60 "$mdrun" "${common[@]}" --node-rank 1 --master-addr localhost \
  --master-port "${p:-1}" mlp.fb >node1.out 2>node1.err &
node1=$!
r0="" r1=""
for _ in $(seq 200); do
  r0=$(children "$(children $node0)") r1=$(children "$(children $node1)")
  [[ -n $r0 && -n $r1 ]] && grep -q '^mdrun: training ' node0.out && break
  sleep 0.05
done
sleep 0.3
if [[ -z $p || -z $r0 || -z $r1 ]] || ! grep -q '^mdrun: training ' node0.out; then
  fail "two nodes: the job did not start: $(cat node0.out node0.err node1.out node1.err)"
  kill -KILL $(pgrep -g $$ -x mdrun) 2>/dev/null
else
  kill -STOP $r1
  fault=$(date +%s%N)
  kill -KILL $r0
  launcher=$node0
  finish node0 5000
  launcher=$node1
  finish node1 5000
  has node0.err '^mdrun: flight recorder: rank 0 was killed by signal 9 \(Killed\) '
  has node0.err '^mdrun: error: rank 0 was killed by signal 9 \(Killed\)$'
  has node1.err "^mdrun: flight recorder: rank 1 was stopped \(SIGSTOP, SIGTSTP or a debugger\) $where, $doing$"
  has node1.err '^mdrun: error: the job failed on another node: node 0: rank 0 was killed by signal 9 \(Killed\); stopped 1 rank$'
fi

# 5b. Two launchers, two ranks each: every rank of node 1 stopped. No comm
# can tell a stopped node from a slow one, and both launchers' watchdogs
# fire at --timeout, either first; whichever does, both nodes name node 1:
# node 0's analysis says its collective waits for node 1's ranks, and each
# node's last line names them (its own stall, or the other's, relayed).
common=(--backend cpu --threads 1 --steps 100000000 --log-every 0 --timeout 3
  --nnodes 2 --gpus 2)
p=$((20000 + (RANDOM * 7 + $$) % 30000))
timeout --foreground 60 "$mdrun" "${common[@]}" --node-rank 0 --master-addr 127.0.0.1 \
  --master-port "$p" mlp-4.fb >stop-node0.out 2>stop-node0.err &
node0=$!
timeout --foreground 60 "$mdrun" "${common[@]}" --node-rank 1 --master-addr 127.0.0.1 \
  --master-port "$p" mlp-4.fb >stop-node1.out 2>stop-node1.err &
node1=$!
r1=""
for _ in $(seq 200); do
  r1=$(children "$(children $node1)")
  [[ $(wc -w <<<"$r1") -eq 2 ]] && grep -q '^mdrun: training ' stop-node0.out && break
  sleep 0.05
done
sleep 0.3
if [[ $(wc -w <<<"$r1") -ne 2 ]] || ! grep -q '^mdrun: training ' stop-node0.out; then
  fail "stop-node: the job did not start: $(cat stop-node0.out stop-node0.err stop-node1.err)"
  kill -KILL $(pgrep -g $$ -x mdrun) 2>/dev/null
else
  kill -STOP $r1
  fault=$(date +%s%N)
  launcher=$node0
  finish stop-node0 9000
  launcher=$node1
  finish stop-node1 9000
  has stop-node0.err "^mdrun: flight recorder: no rank of this node is dead, stopped or behind, but ${call/group of 2/group of 4} did not complete: it waits for ranks 2-3 on node 1, whose launcher can say why; .*rank.* (wait|waits|gave up waiting) in .*$"
  stopped='ranks 2-3 were stopped \(SIGSTOP, SIGTSTP or a debugger\)'
  waits='ranks 0-1 wait for ranks 2-3 on node 1'
  # (Or a rank of node 0 whose comm gave up first, naming node 1's ranks.)
  gaveup='rank [01] failed: .*waiting for rank\(s\) [23]'
  stall='no rank completed a collective or a step in 3 s \(--timeout\)'
  has stop-node0.err "^mdrun: error: ($gaveup.*|($stall; $waits|the job failed on another node: node 1: $stall; $stopped); stopped 2 ranks)$"
  # (Node 1's own analysis: both stopped, or one behind the other, as in 3.)
  has stop-node1.err "^mdrun: flight recorder: (ranks 2-3 were|rank [23] was) stopped \\(SIGSTOP, SIGTSTP or a debugger\\) "
  has stop-node1.err "^mdrun: error: ($stall; $stopped|the job failed on another node: node 0: ($gaveup.*|$stall; $waits)); stopped 2 ranks$"
fi

# 6. Ranks started by srun (one task each, no launcher): rank 1 killed;
# rank 0's comm notices, and rank 0 writes its own ring.
p=$((20000 + (RANDOM * 7 + $$) % 30000))
srun_task() {
  SLURM_JOB_ID=77 SLURM_PROCID=$1 SLURM_STEP_NUM_TASKS=2 SLURM_LOCALID=0 \
    SLURM_NODEID=$1 SLURM_STEP_NUM_NODES=2 SLURM_STEP_TASKS_PER_NODE='1(x2)' \
    SLURM_STEP_NODELIST=localhost MASTER_PORT=$p \
    exec timeout --foreground 60 "$mdrun" --backend cpu --threads 1 \
    --steps 100000000 --log-every 0 --timeout 10 mlp.fb
}
srun_task 0 >task0.out 2>task0.err &
task0=$!
srun_task 1 >task1.out 2>task1.err &
task1=$!
r1=""
for _ in $(seq 200); do
  r1=$(children $task1)
  [[ -n $r1 ]] && grep -q '^mdrun: training ' task0.out && break
  sleep 0.05
done
sleep 0.3
if [[ -z $r1 ]] || ! grep -q '^mdrun: training ' task0.out; then
  fail "srun tasks: the job did not start: $(cat task0.out task0.err task1.err)"
  kill -KILL $(pgrep -g $$ -x mdrun) 2>/dev/null
else
  fault=$(date +%s%N)
  kill -KILL $r1
  launcher=$task0
  finish task0 5000
  { wait $task1; } 2>/dev/null
  has task0.err '^mdrun: error: rank 0: .*; its last collectives are in .*/rank-0\.json$'
  dir=$(sed -nE 's/^mdrun: error: rank 0: .*; its last collectives are in (.*)\/rank-0\.json$/\1/p' task0.err)
  [[ -n $dir ]] && check_json task0 "$dir" 0 0 "exited with status 1" true
fi

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "flight: all checks passed"
