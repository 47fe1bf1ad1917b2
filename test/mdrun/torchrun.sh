#!/usr/bin/env bash
# mdrun under the real torchrun (PyTorch's, test-only; exit 77 without it):
# every process torchrun starts is one rank of the job, and the job trains
# to the bits of `mdrun --ranks 2` (docs/multinode.md, "torchrun"):
#   1. torchrun --nproc-per-node 2 --no-python mdrun ... (shm comm);
#   2. the same with --comm gloo: the rendezvous meets on a port rank 0
#      publishes in torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE);
#   3. two torchrun agents as two nodes (--nnodes 2 --node-rank 0|1, a
#      static rendezvous on loopback), one rank each;
#   4. a rank that fails: torchrun ends the job, and its failure summary
#      shows mdrun's message (TORCHELASTIC_ERROR_FILE); nothing is left;
#   5. a partial torchrun environment and one that contradicts the command
#      line are refused, naming the variables.
#
#   test/mdrun/torchrun.sh MDC MDRUN PYTHON WORK_DIR
set -uo pipefail
usage="usage: torchrun.sh MDC MDRUN PYTHON WORK_DIR"
mdc=${1:?$usage}
mdrun=${2:?$usage}
python=${3:?$usage}
work=${4:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
mdc=$(cd "$(dirname "$mdc")" && pwd)/$(basename "$mdc")
mdrun=$(cd "$(dirname "$mdrun")" && pwd)/$(basename "$mdrun")
if ! "$python" -c 'import torch.distributed.run' 2>/dev/null; then
  echo "skipped: $python cannot import torch.distributed.run (torchrun); scripts/test.sh installs PyTorch"
  exit 77
fi
# torchrun itself: the script next to the Python, else its module.
torchrun=("$(dirname "$python")/torchrun")
[[ -x ${torchrun[0]} ]] || torchrun=("$python" -m torch.distributed.run)
# Its own process group, so that what a job leaves behind can be found.
if [[ $(ps -o pgid= $$ | tr -d ' ') != "$$" ]]; then
  exec setsid "$0" "$@"
fi
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
export TMPDIR=$work

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
has() { grep -Eq -- "$2" "$1" || fail "$1 does not match /$2/:"$'\n'"$(cat "$1")"; }
left() {
  local l
  l=$(pgrep -g $$ -x mdrun)
  [[ -z $l ]] && return 0
  fail "$1: processes left behind: $(ps -o pid,stat,args -p $(echo $l))"
  kill -KILL $l 2>/dev/null
}

timeout 60 "$mdc" "$here/models/mlp.mdl" --plan fsdp-full --world-size 2 -o mlp.fb ||
  { echo "FAIL: mdc"; exit 1; }
run=(--backend cpu --threads 1 --steps 6 --log-every 0)

timeout 120 "$mdrun" --ranks 2 "${run[@]}" --save-final ref.st mlp.fb >ref.out 2>&1 ||
  { echo "FAIL: mdrun --ranks 2: $(cat ref.out)"; exit 1; }

# 1. One node, two ranks.
timeout 120 "${torchrun[@]}" --nproc-per-node 2 --no-python "$mdrun" "${run[@]}" \
  --save-final one.st mlp.fb >one.out 2>&1 || fail "torchrun: $(cat one.out)"
has one.out '^mdrun: rank 0 of 2 \(torchrun: 1 node x 2\), rendezvous at '
has one.out '^mdrun: model mlp, plan fsdp-full \(mlp.fb\), 2 ranks on the cpu backend \(shm comm'
cmp -s ref.st one.st || fail "torchrun's job trained other weights than mdrun --ranks 2"

# 2. The gloo comm: the rendezvous through torchrun's agent store.
timeout 120 "${torchrun[@]}" --nproc-per-node 2 --no-python "$mdrun" "${run[@]}" \
  --comm gloo --save-final gloo.st mlp.fb >gloo.out 2>&1 || fail "torchrun --comm gloo: $(cat gloo.out)"
has gloo.out "^mdrun: rank 0 of 2 \(torchrun: 1 node x 2\), rendezvous at [^ ]+:[0-9]+ \(published in torchrun's store at port [0-9]+\)$"
cmp -s ref.st gloo.st || fail "torchrun with --comm gloo trained other weights"

# 3. Two agents as two nodes of one rank each.
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for n in 0 1; do
  timeout 120 "${torchrun[@]}" --nnodes 2 --node-rank $n --master-addr 127.0.0.1 \
    --master-port "$port" --nproc-per-node 1 --no-python "$mdrun" "${run[@]}" \
    --save-final node$n.st mlp.fb >node$n.out 2>&1 &
done
wait %1 || fail "torchrun node 0: $(cat node0.out)"
wait %2 || fail "torchrun node 1: $(cat node1.out)"
has node0.out '^mdrun: rank 0 of 2 \(torchrun: 2 nodes x 1\)'
has node0.out 'on the cpu backend \(gloo comm'
cmp -s ref.st node0.st || fail "two torchrun nodes trained other weights"
left "two nodes"

# 4. A rank fails (a library error: oneDNN's bf16 matmul forced where it
# cannot be created); torchrun ends the job and names it.
MD_CPU_ISA=avx2 MD_CPU_GEMM_BF16=onednn timeout 120 "${torchrun[@]}" \
  --nproc-per-node 2 --no-python "$mdrun" "${run[@]}" mlp.fb >failed.out 2>&1
rc=$?
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "a failed rank under torchrun: exit $rc: $(cat failed.out)"
if grep -q '^mdrun: cpu: .*GEMM f32: ' failed.out && grep -q 'oneDNN' failed.out; then
  has failed.out "(traceback|error) +: mdrun: rank [01]: step 1: [a-z_]+ at blocks\[[0-9]+\]\.instructions\[[0-9]+\] \([^)]*mlp\.mdl:[0-9]+:[0-9]+\): matmul(_grad)?: oneDNN"
fi
sleep 0.2
left "a failed rank"

# 5. Partial or contradictory environments.
expect_refusal() { # NAME PATTERN ENV... -- ARGS...
  local name=$1 pattern=$2 envs=()
  shift 2
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE "${envs[@]}" \
    timeout 30 "$mdrun" "$@" mlp.fb >"$name.out" 2>&1
  local rc=$?
  [[ $rc -eq 1 ]] || fail "$name: exit $rc, expected 1: $(cat "$name.out")"
  has "$name.out" "$pattern"
  [[ $(grep -c '^mdrun: model' "$name.out") -eq 0 ]] || fail "$name: a job started"
}
expect_refusal partial '^mdrun: error: RANK, WORLD_SIZE are set \(the torchrun environment contract: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE\), but LOCAL_RANK, LOCAL_WORLD_SIZE are not' \
  RANK=0 WORLD_SIZE=2 -- "${run[@]}"
expect_refusal contradicts '^mdrun: error: --gpus 4 contradicts the torchrun environment, which started 2 ranks on this node' \
  RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 -- --gpus 4 "${run[@]}"
expect_refusal layout '^mdrun: error: RANK=1 is not node 0.s local rank 0' \
  RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 -- "${run[@]}"
left "refusals"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "torchrun.sh: all checks passed"
