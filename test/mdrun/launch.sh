#!/usr/bin/env bash
# mdrun as a launcher on the CPU backend (test/plan/TrainingPlans.cpp's
# plans, written by md-plan-examples): a job that trains, the fallback
# warning and --no-fallback, progress lines, the metrics file and the final
# weights, a rank killed with SIGKILL (the job ends within seconds naming
# it), a NaN loss, SIGINT, the hooks' exit and checkpoints, and the command
# line errors. Every run has a time limit; nothing may hang.
#
#   test/mdrun/launch.sh MDRUN MD_PLAN_EXAMPLES WORK_DIR
set -uo pipefail
mdrun=${1:?usage: launch.sh MDRUN MD_PLAN_EXAMPLES WORK_DIR}
examples=${2:?}
work=${3:?}
mdrun=$(cd "$(dirname "$mdrun")" && pwd)/$(basename "$mdrun")
rm -rf "$work" && mkdir -p "$work" || exit 1
"$examples" "$work" || exit 1
cd "$work" || exit 1

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run STATUS ARGS...: runs mdrun ARGS with a 60 s limit, keeping stdout in
# out.txt and stderr in err.txt, and checks the exit status.
run() {
  local status=$1
  shift
  timeout 60 "$mdrun" "$@" >out.txt 2>err.txt
  local rc=$?
  if [[ $rc -ne $status ]]; then
    fail "mdrun $*: exit $rc, expected $status"$'\n'"$(cat out.txt err.txt)"
    return 1
  fi
}
has() { # has FILE PATTERN: FILE matches the extended regex PATTERN
  grep -Eq -- "$2" "$1" || fail "$1 does not match /$2/:"$'\n'"$(cat "$1")"
}
count() { grep -Ec -- "$2" "$1"; }

# A job that trains: banner, progress, the loss falls.
if run 0 --ranks 2 --backend cpu train-mlp-fsdp.fb; then
  has out.txt '^mdrun: model mlp, plan fsdp-full \(train-mlp-fsdp.fb\), 2 ranks on the cpu backend'
  has out.txt '^mdrun: batch: micro 16 x accumulation 2 x 2 ranks = global 64$'
  has out.txt '^mdrun: memory per rank: params .* peak '
  has out.txt '^step 100/100  loss [0-9.]+  lr '
  # The recipe's log joins the step's progress line.
  has out.txt '^step  50/100  loss [0-9.]+  lr .*  \| (.*  )?val loss=[0-9.]+$'
  [[ -s err.txt ]] && fail "--backend cpu wrote to stderr: $(cat err.txt)"
  first=$(sed -nE 's/^step +1\/100  loss ([0-9.]*).*/\1/p' out.txt)
  last=$(sed -nE 's/^step 100\/100  loss ([0-9.]*).*/\1/p' out.txt)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.5 * a) }' ||
    fail "the loss did not fall: $first -> $last"
fi

# Asking for GPUs where none is usable: one warning line, the CPU backend.
# CUDA_VISIBLE_DEVICES= hides every GPU, so this holds on any machine and
# in any build: a silent fallback fails here.
if CUDA_VISIBLE_DEVICES= run 0 --gpus 2 --steps 3 train-mlp-fsdp.fb; then
  [[ $(count err.txt '^mdrun: warning: no usable GPU \(.+\); running 2 ranks on the CPU backend$') -eq 1 ]] ||
    fail "expected one fallback warning line, got: $(cat err.txt)"
  [[ $(wc -l <err.txt) -eq 1 ]] || fail "more than the warning on stderr: $(cat err.txt)"
  has out.txt '^mdrun: model mlp, plan fsdp-full \(train-mlp-fsdp.fb\), 2 ranks on the cpu backend'
  # 3 of the schedule's 100 steps: one note, from rank 0 alone.
  [[ $(count out.txt '^mdrun: note: the schedule decays over 100 steps and this run ends at step 3, at lr ') -eq 1 ]] ||
    fail "expected one note that the run ends before the schedule's decay: $(cat out.txt)"
fi
# With what this machine has: without a GPU, the same warning; with one GPU,
# one warning that the ranks share it; with two, no warning, and then the
# ranks must run on the cuda backend (no warning on the CPU backend is the
# silent fallback this refuses).
if run 0 --gpus 2 --steps 3 train-mlp-fsdp.fb; then
  if [[ -s err.txt ]]; then
    [[ $(count err.txt '^mdrun: warning: (no usable GPU \(.+\); running 2 ranks on the CPU backend|2 ranks per node but 1 usable GPU; ranks share GPUs .*)$') -eq 1 ]] ||
      fail "expected one fallback warning line, got: $(cat err.txt)"
    [[ $(wc -l <err.txt) -eq 1 ]] || fail "more than the warning on stderr: $(cat err.txt)"
  else
    has out.txt '^mdrun: model mlp, plan fsdp-full \(train-mlp-fsdp.fb\), 2 ranks on the cuda backend'
  fi
fi
if run 1 --gpus 2 --no-fallback train-mlp-fsdp.fb; then
  has err.txt '^mdrun: error: (no usable GPU \(.+\), and --no-fallback forbids running on the CPU backend|2 ranks per node but 1 usable GPU, and --no-fallback forbids ranks sharing a GPU)$'
  [[ -s out.txt ]] && fail "--no-fallback started training: $(cat out.txt)"
fi

# Metrics, the final weights, --log-every, --seed.
if run 0 --ranks 2 --backend cpu --steps 5 --log-every 2 --seed 7 \
  --metrics logs/metrics.jsonl --save-final out/final.safetensors train-mlp-ddp.fb; then
  [[ $(wc -l <logs/metrics.jsonl) -eq 5 ]] || fail "expected 5 metrics lines (every step)"
  has logs/metrics.jsonl '^\{"step": 2, "loss": [0-9.e+-]+, "lr": [0-9.e+-]+, "samples_per_s": [0-9.e+-]+, "step_s": [0-9.e+-]+, "grad_norm": [0-9.e+-]+, "epoch": 0, "time": [0-9.e+-]+\}$'
  has logs/metrics.jsonl '^\{"step": 3, '
  has logs/metrics.jsonl '^\{"step": 5, '
  # The progress lines stay every --log-every 2 steps (and the first and
  # the last), the middle ones with an ETA.
  [[ $(grep -c '^step [0-9]/5 ' out.txt) -eq 4 ]] || fail "expected 4 progress lines (steps 1, 2, 4, 5): $(cat out.txt)"
  has out.txt '^step 2/5  loss [0-9.]+  lr [0-9.e+-]+  grad_norm [0-9.]+  [0-9.]+ samples/s  [0-9.]+ ms/step  [0-9.]+ s  ETA [0-9]+ s$'
  grep -q '^step 5/5 .*ETA' out.txt && fail "the last line has an ETA: $(cat out.txt)"
  has out.txt 'training 5 steps, seed 7$'
  has out.txt '^step 5: saved out/final.safetensors in [0-9.]+ s$'
  [[ -s out/final.safetensors ]] || fail "no out/final.safetensors"
  head -c 400 out/final.safetensors | grep -q '"fc1.weight":{"dtype":"F32","shape":\[64,32\]' ||
    fail "final.safetensors lacks fc1.weight f32[64, 32]"
  ls out | grep -q tmp && fail "a temporary file was left in out/"
fi
# --metrics-every: records every N steps (and the first and the last), or
# with the progress lines (0).
for every in "0 1 2 4 5" "3 1 3 5"; do
  read -r n steps <<<"$every"
  run 0 --ranks 2 --backend cpu --steps 5 --log-every 2 --metrics-every "$n" \
    --metrics logs/every$n.jsonl train-mlp-ddp.fb &&
    [[ $(sed -E 's/^\{"step": ([0-9]+),.*/\1/' logs/every$n.jsonl | tr '\n' ' ') == "$steps " ]] ||
    fail "--metrics-every $n: records at steps $(sed -E 's/^\{"step": ([0-9]+),.*/\1/' logs/every$n.jsonl | tr '\n' ' '), expected $steps"
done

# The same run twice gives the same weights (deterministic on the CPU).
if run 0 --ranks 2 --backend cpu --steps 5 --seed 7 --save-final again.safetensors train-mlp-ddp.fb; then
  cmp -s out/final.safetensors again.safetensors || fail "two identical runs wrote different weights"
fi

# children PID: the child processes of PID.
children() { echo $(cat /proc/$1/task/$1/children 2>/dev/null); }

# A rank killed with SIGKILL: the job ends within seconds, naming it.
timeout 60 "$mdrun" --ranks 2 --backend cpu --log-every 0 train-mlp-long.fb >kill-out.txt 2>kill-err.txt &
launcher=$!
workers=""
for _ in $(seq 100); do
  workers=$(children "$(children $launcher)")
  [[ $(wc -w <<<"$workers") -eq 2 ]] && break
  sleep 0.05
done
sleep 0.3 # let them start training
victim=$(awk '{print $2}' <<<"$workers")
if [[ -z $victim ]]; then
  fail "could not find the workers of mdrun (pid $launcher)"
  kill $launcher
else
  start=$(date +%s%N)
  kill -KILL "$victim"
  wait $launcher
  rc=$?
  elapsed=$((($(date +%s%N) - start) / 1000000))
  [[ $rc -eq 1 ]] || fail "a killed rank: exit $rc, expected 1"
  [[ $elapsed -lt 5000 ]] || fail "a killed rank took ${elapsed} ms to end the job"
  has kill-err.txt '^mdrun: error: rank 1 was killed by signal 9 \(Killed\)$'
  for w in $workers; do
    [[ -e /proc/$w ]] && ! grep -q zombie /proc/$w/status 2>/dev/null && fail "worker $w outlived the job"
  done
fi

# SIGINT to the launcher stops every rank.
timeout 60 "$mdrun" --ranks 2 --backend cpu --log-every 0 train-mlp-long.fb >int-out.txt 2>int-err.txt &
launcher=$!
sleep 0.5
kill -INT $launcher
wait $launcher
rc=$?
[[ $rc -eq 130 ]] || fail "SIGINT: exit $rc, expected 130"
has int-err.txt '^mdrun: interrupted by SIGINT; stopped 2 ranks$'

# A NaN loss is an error naming the step.
if run 1 --ranks 2 --backend cpu train-mlp-nan.fb; then
  has err.txt '^mdrun: error: rank [01] failed: step [0-9]+: record_loss at blocks\[[0-9]+\]\.instructions\[[0-9]+\]: the loss is (nan|inf|-inf) on rank [01]'
  [[ $(count err.txt '^mdrun: error: ') -eq 1 ]] || fail "expected one error line"
fi

# The hooks: exit after step 5, full checkpoints every 2 steps.
if run 0 --ranks 2 --backend cpu --log-every 1 train-mlp-stop.fb; then
  has out.txt '^stopping at step 5$'
  has out.txt '^step 5: stopping: reached the step limit$'
  has out.txt '^step +5/100 '
  [[ $(count out.txt '^step +[0-9]+/100 ') -eq 5 ]] || fail "trained more than 5 steps"
  [[ -s ckpt/step_00000002.safetensors && -s ckpt/step_00000004.safetensors ]] ||
    fail "checkpoints missing: $(ls -R ckpt)"
fi

# Errors before any rank starts: one line, exit 1.
if run 1 --ranks 2 --backend cpu train-mlp-constant.fb; then
  has err.txt 'constant schedule has no end\): pass the step count \(mdrun --steps N\)$'
fi
if run 1 --ranks 3 --backend cpu train-mlp-fsdp.fb; then
  has err.txt 'global_batch 64 is not a multiple of micro_batch 16 x world size 3'
fi
if run 1 --ranks 2 --backend cpu missing.fb; then
  has err.txt '^mdrun: error: missing.fb: cannot open'
fi
if run 2 --ranks 2 --backend gpu train-mlp-fsdp.fb; then
  has err.txt "^mdrun: error: --backend gpu: expected auto, cpu or cuda"
fi
# A worker started without the launcher's environment says so.
if run 1 --worker train-mlp-fsdp.fb; then
  has err.txt 'the environment variable WORLD_SIZE is not set'
fi
ls /dev/shm 2>/dev/null | grep -q '^md-mdrun-' && fail "shared-memory segments left behind: $(ls /dev/shm | grep md-mdrun-)"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "launch.sh: all checks passed"
