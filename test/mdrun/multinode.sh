#!/usr/bin/env bash
# mdrun across "nodes" on this one machine, on the CPU backend and the gloo
# comm (test/plan/TrainingPlans.cpp's plans, written by md-plan-examples):
#  - two launchers, --nnodes 2 --node-rank 0/1, node 0 picking the port
#    (--master-port 0) and printing it, give weights bitwise identical to
#    the same job on one node (2 ranks over shared memory);
#  - two ranks started the way srun starts them (SLURM_* variables, one task
#    per rank) and the way mpirun does (OMPI_COMM_WORLD_*) give them too, and
#    so do two srun tasks that each launch 2 ranks (4 ranks over gloo);
#  - --comm gloo on one node gives the shared-memory comm's bits too;
#  - a node that dies takes the other down within seconds, naming the rank
#    (or, when the rank's comm is slower to notice, the node's launcher);
#  - nodes that load different plans refuse to train together;
#  - contradictory or missing placement options are errors, and so is a
#    rendezvous host that does not resolve, at once.
# Every run has a time limit; nothing may hang.
#
#   test/mdrun/multinode.sh MDRUN MD_PLAN_EXAMPLES WORK_DIR
set -uo pipefail
mdrun=${1:?usage: multinode.sh MDRUN MD_PLAN_EXAMPLES WORK_DIR}
examples=${2:?}
work=${3:?}
mdrun=$(cd "$(dirname "$mdrun")" && pwd)/$(basename "$mdrun")
rm -rf "$work" && mkdir -p "$work" || exit 1
"$examples" "$work" >/dev/null || exit 1
cd "$work" || exit 1

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
has() { # has FILE PATTERN: FILE matches the extended regex PATTERN
  grep -Eq -- "$2" "$1" || fail "$1 does not match /$2/:"$'\n'"$(cat "$1")"
}
# A port no test of this run shares: the rendezvous of a killed job may
# linger in TIME_WAIT.
port() { echo $((20000 + (RANDOM * 7 + $$) % 30000)); }

pids=()
common=(--backend cpu --steps 6 --log-every 3 --timeout 20 --threads 1)

# The reference: 2 ranks on one node.
for plan in train-mlp-fsdp train-mlp-ddp; do
  timeout 120 "$mdrun" --ranks 2 "${common[@]}" --save-final "ref-$plan.st" \
    "$plan.fb" >"ref-$plan.out" 2>&1 || fail "reference $plan: $(cat "ref-$plan.out")"
done

# Two launchers, one rank each; node 0 picks the port.
for plan in train-mlp-fsdp train-mlp-ddp; do
  # The previous run's port must not be read before this run truncates it.
  rm -f node0.err
  timeout 120 "$mdrun" --nnodes 2 --node-rank 0 --gpus 1 --master-addr 127.0.0.1 --master-port 0 \
    "${common[@]}" --save-final "two-$plan.st" "$plan.fb" >node0.out 2>node0.err &
  n0=$!
  p=
  for _ in $(seq 200); do
    p=$(sed -nE 's/^mdrun: rendezvous port ([0-9]+)$/\1/p' node0.err 2>/dev/null)
    [[ -n $p ]] && break
    sleep 0.05
  done
  if [[ -z $p ]]; then
    fail "node 0 printed no port: $(cat node0.err)"
    kill $n0 2>/dev/null
    wait $n0
    continue
  fi
  timeout 120 "$mdrun" --nnodes 2 --node-rank 1 --gpus 1 --master-addr localhost \
    --master-port "$p" "${common[@]}" --save-final "two-$plan.st" "$plan.fb" \
    >node1.out 2>node1.err
  rc1=$?
  wait $n0
  rc0=$?
  [[ $rc0 -eq 0 && $rc1 -eq 0 ]] ||
    fail "two nodes, $plan: exit $rc0/$rc1"$'\n'"$(cat node0.out node0.err node1.out node1.err)"
  has node0.out "^mdrun: model mlp, .* 2 ranks on the cpu backend \(gloo comm"
  has node0.err "^mdrun: node 0 of 2 \(command line\): ranks 0 to 0 of 2, rendezvous at 127.0.0.1:$p$"
  has node1.err "^mdrun: node 1 of 2 \(command line\): ranks 1 to 1 of 2, rendezvous at localhost:$p$"
  has node0.out '^step 6/6  loss '
  [[ -s node1.out ]] && fail "node 1 printed progress: $(cat node1.out)"
  cmp -s "ref-$plan.st" "two-$plan.st" ||
    fail "$plan: the weights of two nodes differ from those of one node"
done

# pair NAME COMMAND...: runs COMMAND 0 and COMMAND 1 at once, each output
# in NAME<r>.out and .err; fails naming NAME unless
# both succeed.
pair() {
  local name=$1 r
  shift
  for r in 0 1; do
    "$@" "$r" >"$name$r.out" 2>"$name$r.err" &
    pids[r]=$!
  done
  wait "${pids[0]}"
  local rc0=$?
  wait "${pids[1]}"
  local rc1=$?
  [[ $rc0 -eq 0 && $rc1 -eq 0 ]] ||
    fail "$name: exit $rc0/$rc1"$'\n'"$(cat "$name"0.* "$name"1.*)"
}
# srun_task JOB ARGS... R: mdrun ARGS as task R of 2 on 2 nodes under srun.
srun_task() {
  local job=$1 r=${*: -1}
  local args=("${@:2:$#-2}")
  env SLURM_JOB_ID="$job" SLURM_PROCID="$r" SLURM_STEP_NUM_TASKS=2 SLURM_LOCALID=0 \
    SLURM_NODEID="$r" SLURM_STEP_NUM_NODES=2 SLURM_STEP_TASKS_PER_NODE='1(x2)' \
    SLURM_STEP_NODELIST=localhost MASTER_PORT="$p" \
    timeout 120 "$mdrun" "${args[@]}"
}
# mpi_task ARGS... R: mdrun ARGS as rank R of 2 on one node under mpirun.
mpi_task() {
  local r=${*: -1}
  local args=("${@:1:$#-1}")
  env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK="$r" OMPI_COMM_WORLD_LOCAL_RANK="$r" \
    OMPI_COMM_WORLD_LOCAL_SIZE=2 MASTER_PORT="$p" timeout 120 "$mdrun" "${args[@]}"
}

# srun with one task per rank: each mdrun is one rank.
p=$(port)
pair slurm srun_task 77 "${common[@]}" --save-final slurm.st train-mlp-fsdp.fb
has slurm0.err "^mdrun: rank 0 of 2 \(Slurm: 2 nodes x 1\), rendezvous at localhost:$p$"
cmp -s ref-train-mlp-fsdp.st slurm.st || fail "srun-style ranks: the weights differ"

# srun with one task per node, each the launcher of 2 ranks: 4 ranks over
# gloo give the bits of 4 ranks over shared memory.
timeout 120 "$mdrun" --ranks 4 "${common[@]}" --save-final ref4.st train-mlp-fsdp.fb \
  >ref4.out 2>&1 || fail "reference at W = 4: $(cat ref4.out)"
p=$(port)
pair slurmn srun_task 78 --gpus 2 "${common[@]}" --save-final slurm4.st train-mlp-fsdp.fb
has slurmn1.err "^mdrun: node 1 of 2 \(Slurm\): ranks 2 to 3 of 4, rendezvous at localhost:$p$"
has slurmn0.out "4 ranks on the cpu backend \(gloo comm"
cmp -s ref4.st slurm4.st || fail "srun-style node launchers: the weights differ from 4 ranks on one node"

# --comm gloo on one node: 2 and 4 ranks over gloo, the bits of shared memory.
timeout 120 "$mdrun" --ranks 2 --comm gloo --master-port "$(port)" "${common[@]}" \
  --save-final gloo1.st train-mlp-fsdp.fb >gloo1.out 2>&1 || fail "--comm gloo: $(cat gloo1.out)"
has gloo1.out "2 ranks on the cpu backend \(gloo comm"
cmp -s ref-train-mlp-fsdp.st gloo1.st || fail "--comm gloo on one node: the weights differ from shm's"
timeout 120 "$mdrun" --ranks 4 --comm gloo --master-port "$(port)" "${common[@]}" \
  --save-final gloo4.st train-mlp-fsdp.fb >gloo4.out 2>&1 || fail "--comm gloo, 4 ranks: $(cat gloo4.out)"
cmp -s ref4.st gloo4.st || fail "--comm gloo, 4 ranks: the weights differ from shm's"

# mpirun with one task per rank, both on this node: the shm comm.
p=$(port)
pair mpi mpi_task "${common[@]}" --save-final mpi.st train-mlp-fsdp.fb
has mpi0.out "2 ranks on the cpu backend \(shm comm"
cmp -s ref-train-mlp-fsdp.st mpi.st || fail "mpirun-style ranks: the weights differ"

# A node that dies: the other ends within seconds, naming the lost rank.
p=$(port)
timeout 120 "$mdrun" --nnodes 2 --node-rank 0 --gpus 1 --master-addr 127.0.0.1 --master-port "$p" \
  --backend cpu --timeout 20 --threads 1 --steps 10000000 --log-every 0 \
  train-mlp-long.fb >die0.out 2>die0.err &
n0=$!
timeout 120 "$mdrun" --nnodes 2 --node-rank 1 --gpus 1 --master-port "$p" \
  --master-addr 127.0.0.1 --backend cpu --timeout 20 --threads 1 --steps 10000000 \
  --log-every 0 train-mlp-long.fb >die1.out 2>die1.err &
n1=$!
sleep 2
# The node's launcher (timeout's child) and with it its ranks.
pkill -9 -P $n1
start=$(date +%s%N)
wait $n0
rc0=$?
ms=$((($(date +%s%N) - start) / 1000000))
wait $n1 2>/dev/null
[[ $rc0 -ne 0 ]] || fail "node 0 succeeded after node 1 was killed"
[[ $rc0 -ne 124 ]] || fail "node 0 hung after node 1 was killed"
# Rank 0's comm names rank 1 as it loses the connection; should that take
# longer than the launcher's 2 s grace (a loaded machine), the launcher's
# control link names node 1's launcher as gone instead.
has die0.err "^mdrun: error: (rank 0 failed: .*rank 1|the job failed on another node: node 1's launcher is gone)"
((ms < 10000)) || fail "node 0 took $ms ms to notice"
echo "node 0 ended ${ms} ms after node 1 was killed: $(tail -1 die0.err)"

# Nodes with different plans.
p=$(port)
timeout 60 "$mdrun" --nnodes 2 --node-rank 0 --gpus 1 --master-addr 127.0.0.1 --master-port "$p" \
  "${common[@]}" train-mlp-fsdp.fb >mix0.out 2>mix0.err &
n0=$!
timeout 60 "$mdrun" --nnodes 2 --node-rank 1 --gpus 1 --master-port "$p" \
  --master-addr 127.0.0.1 "${common[@]}" train-mlp-ddp.fb >mix1.out 2>mix1.err
rc1=$?
wait $n0
rc0=$?
[[ $rc0 -ne 0 && $rc0 -ne 124 && $rc1 -ne 0 && $rc1 -ne 124 ]] ||
  fail "different plans: exit $rc0/$rc1"$'\n'"$(cat mix0.err mix1.err)"
has mix1.err 'plan [0-9a-f]{16}'

# Placement errors: a clear message and exit 1, no rank started.
check_error() { # check_error PATTERN ARGS...
  local pattern=$1
  shift
  timeout 30 "$mdrun" "$@" >err.out 2>err.err
  local rc=$?
  [[ $rc -eq 1 ]] || fail "mdrun $*: exit $rc, expected 1: $(cat err.err)"
  has err.err "$pattern"
}
check_error '^mdrun: error: --nnodes 2 needs --node-rank' --nnodes 2 --backend cpu train-mlp-fsdp.fb
check_error '^mdrun: error: a job on 2 nodes needs the host of rank 0' \
  --nnodes 2 --node-rank 1 --backend cpu train-mlp-fsdp.fb
check_error 'free port on node 0 only' --nnodes 2 --node-rank 1 --master-addr x \
  --master-port 0 --backend cpu train-mlp-fsdp.fb
check_error '^mdrun: error: --comm shm needs every rank on one node, but the job has 2 nodes' \
  --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --comm shm --backend cpu train-mlp-fsdp.fb
check_error 'pinned to world size 2, which 4 nodes cannot split evenly' \
  --nnodes 4 --node-rank 0 --master-addr 127.0.0.1 --backend cpu tiny-mlp-pinned-2.fb

# A rendezvous host that does not resolve fails at once, named as it was
# given, not as a rendezvous timeout --timeout (here 20 s) later; the
# torchrun way (MASTER_ADDR, one process per rank) and Slurm's first host
# too. (.invalid never resolves, RFC 2606.)
check_fast() { # check_fast PATTERN COMMAND...: exit 1 within 5 s
  local pattern=$1
  shift
  local start=$SECONDS
  timeout 30 "$@" >err.out 2>err.err
  local rc=$? took=$((SECONDS - start))
  [[ $rc -eq 1 ]] || fail "$*: exit $rc, expected 1: $(cat err.err)"
  ((took < 5)) || fail "$*: took ${took} s to fail: $(cat err.err)"
  has err.err "$pattern"
}
gai='cannot resolve it: [A-Za-z]'
check_fast "^mdrun: error: --master-addr bogus.invalid: $gai" \
  "$mdrun" --nnodes 2 --node-rank 1 --gpus 1 --master-addr bogus.invalid \
  --master-port "$(port)" "${common[@]}" train-mlp-fsdp.fb
check_fast "^mdrun: error: --master-addr bogus.invalid: $gai" \
  "$mdrun" --nnodes 2 --node-rank 0 --gpus 1 --master-addr bogus.invalid \
  --master-port "$(port)" "${common[@]}" train-mlp-fsdp.fb
check_fast "^mdrun: error: MASTER_ADDR=bogus.invalid: $gai" \
  env MASTER_ADDR=bogus.invalid MASTER_PORT="$(port)" RANK=1 WORLD_SIZE=2 \
  LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 GROUP_RANK=1 \
  "$mdrun" "${common[@]}" train-mlp-fsdp.fb
# One node over gloo: rank 1 resolves it as it joins the rendezvous.
check_fast "^mdrun: error: rank 1 failed: rendezvous: rank 1: rank 0's host bogus.invalid: $gai" \
  "$mdrun" --ranks 2 --comm gloo --master-addr bogus.invalid \
  --master-port "$(port)" "${common[@]}" train-mlp-fsdp.fb
check_fast "^mdrun: error: SLURM_STEP_NODELIST's first host bogus.invalid: $gai" \
  env SLURM_JOB_ID=77 SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=2 SLURM_LOCALID=0 \
  SLURM_NODEID=1 SLURM_STEP_NUM_NODES=2 SLURM_STEP_TASKS_PER_NODE='1(x2)' \
  SLURM_STEP_NODELIST=bogus.invalid,n2 MASTER_PORT="$(port)" \
  "$mdrun" "${common[@]}" train-mlp-fsdp.fb

if ((failures > 0)); then
  echo "multinode.sh: $failures failure(s)"
  exit 1
fi
echo "multinode.sh: all passed"
