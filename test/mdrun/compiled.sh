#!/usr/bin/env bash
# The runtime's invariants on plans that mdc compiles (test/mdrun/models/:
# an MLP and the tiny GPT, synthetic data), run by mdrun on the CPU backend:
#
# 1. At W = 2, ddp, zero1, fsdp-grad-op and fsdp-full with every dtype f32
#    (and ddp/fsdp-full with small buckets) give bitwise identical weights
#    after 20 steps, and so do ddp with bf16 parameters and the bf16 presets
#    zero1, fsdp-grad-op and fsdp-full. The MLP accumulates 2 micro-steps
#    per rank at W = 2, the GPT none (A = 1).
# 2. A plan compiled without --world-size gives the same weights at W = 1
#    and W = 2 (same global batch) within 1e-5 relative per tensor after one
#    step; the difference after 20 steps is printed, not checked. At W = 2 it
#    is bitwise the plan compiled for W = 2.
# 3. The MLP (fsdp-full, bf16 parameters) learns its task: the held-out loss
#    falls below 0.2 (2.30 at chance) in 1000 steps.
# 4. A worker killed with SIGKILL during a long run ends the job within 5 s
#    with exit status 1 and a message naming its rank.
# 5. models/mlp_bn.mdl (SyncBatchNorm) trains, bitwise alike under its
#    bn-bf16 plan, zero1 and fsdp-full at W = 2.
#
# Every run has a time limit and one BLAS thread per rank, so that runs are
# comparable bit for bit on any machine. Prints the measured figures.
#
#   test/mdrun/compiled.sh MDC MDRUN PYTHON3 WORK_DIR
set -uo pipefail
usage="usage: compiled.sh MDC MDRUN PYTHON3 WORK_DIR"
mdc=${1:?$usage}
mdrun=${2:?$usage}
python=${3:?$usage}
work=${4:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
models=$here/models
mdc=$(cd "$(dirname "$mdc")" && pwd)/$(basename "$mdc")
mdrun=$(cd "$(dirname "$mdrun")" && pwd)/$(basename "$mdrun")
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$work" || exit 1

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
compare() { "$python" "$here/stcompare.py" "$@"; }

# compile OUT MODEL ARGS...: mdc test/mdrun/models/MODEL.mdl ARGS -o OUT.
compile() {
  local out=$1 model=$2
  shift 2
  if ! timeout 60 "$mdc" "$models/$model.mdl" "$@" -o "$out" 2>mdc-err.txt; then
    fail "mdc $model.mdl $* -o $out:"$'\n'"$(cat mdc-err.txt)"
    return 1
  fi
}

# train NAME ARGS...: mdrun on the CPU backend with one BLAS thread per rank
# and a 120 s limit, stdout in NAME.out, stderr in NAME.err; it must succeed
# and write nothing to stderr.
train() {
  local name=$1
  shift
  timeout 120 "$mdrun" --backend cpu --threads 1 "$@" >"$name.out" 2>"$name.err"
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "mdrun $*: exit $rc"$'\n'"$(tail -n 20 "$name.out" "$name.err")"
    return 1
  fi
  if [[ -s $name.err ]]; then
    fail "mdrun $* wrote to stderr:"$'\n'"$(cat "$name.err")"
  fi
}

# batch_line FILE A W: the banner states A micro-steps of accumulation at W.
batch_line() {
  grep -Eq "^mdrun: batch: micro [0-9]+ x accumulation $2 x $3 ranks? = global [0-9]+$" "$1" ||
    fail "$1: expected accumulation $2 at W = $3:"$'\n'"$(grep '^mdrun: batch' "$1")"
}

# metric FILE STEP KEY: the value of KEY in the JSON line of STEP in FILE.
metric() {
  sed -nE "s/^\\{\"step\": $2, .*\"$3\": ([-0-9.e+]+).*/\\1/p" "$1" | head -n 1
}

# The numbers of a metrics file that must not depend on the plan: the
# loss, lr, grad norm and the hooks' logs, without throughput and time.
numbers() {
  sed -E 's/, "(samples|tokens)_per_s": [^,}]*//; s/, "step_s": [^,}]*//; s/, "time": [^,}]*//' "$1"
}

# Accumulation steps per rank at W = 2 and at W = 1 (global / (micro x W)).
declare -A accum2=([mlp]=2 [gpt]=1) accum1=([mlp]=4 [gpt]=2)

# ---------------------------------------------------------------------------
# 1. Bitwise identity of the plans at W = 2 after 20 steps.
# ---------------------------------------------------------------------------
f32_plans="ddp-f32 zero1-f32 grad-op-f32 full-f32 ddp-buckets-f32 full-buckets-f32"
bf16_plans="ddp-bf16 zero1 fsdp-grad-op fsdp-full"
for model in mlp gpt; do
  for plans in "$f32_plans" "$bf16_plans"; do
    ref=""
    before=$failures
    for plan in $plans; do
      name=$model-$plan
      compile "$name.fb" "$model" --plan "$plan" --world-size 2 || continue
      train "$name" --ranks 2 --steps 20 --log-every 10 --metrics "$name.jsonl" \
        --save-final "$name.safetensors" "$name.fb" || continue
      batch_line "$name.out" "${accum2[$model]}" 2
      first=$(metric "$name.jsonl" 1 loss)
      last=$(metric "$name.jsonl" 20 loss)
      awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
        fail "$name: the loss did not fall in 20 steps: '$first' -> '$last'"
      if [[ -z $ref ]]; then
        ref=$plan
        continue
      fi
      # The files' metadata names the plan, so `cmp` of whole files cannot
      # hold; stcompare --bitwise compares every tensor's bytes.
      if ! compare --bitwise "$model-$ref.safetensors" "$name.safetensors" >cmp.txt; then
        fail "$model at W = 2: $plan and $ref give different weights after 20 steps:"$'\n'"$(cat cmp.txt)"
      fi
      if ! diff <(numbers "$model-$ref.jsonl") <(numbers "$name.jsonl") >diff.txt; then
        fail "$model at W = 2: $plan and $ref report different losses or logs:"$'\n'"$(cat diff.txt)"
      fi
    done
    [[ $failures -eq $before ]] &&
      echo "$model: $plans: bitwise identical weights after 20 steps at W = 2 (accumulation ${accum2[$model]})"
  done
done

# The comparison can fail: another seed gives other weights.
if train mlp-seed --ranks 2 --steps 20 --log-every 0 --seed 7 \
  --save-final mlp-seed.safetensors mlp-ddp-f32.fb; then
  compare --bitwise mlp-ddp-f32.safetensors mlp-seed.safetensors >cmp.txt &&
    fail "stcompare --bitwise found no difference between two seeds"
fi

# ---------------------------------------------------------------------------
# 2. W = 1 and W = 2 at the same global batch, from one unpinned plan.
# ---------------------------------------------------------------------------
# softmax(q k^T) does not change when a constant is added to every key, so
# the exact gradient of attn.k.bias is zero and its values are rounding
# noise that differs between any two summation orders: --noise holds it to
# ExecutorTest's element-wise bound, |a - b| <= 1e-5 max(1, |a|).
declare -A noise=([mlp]="" [gpt]="--noise attn.k.bias")
for model in mlp gpt; do
  for plan in ddp-f32 zero1-f32 grad-op-f32 full-f32; do
    name=$model-$plan-any
    compile "$name.fb" "$model" --plan "$plan" || continue
    ok=1
    for steps in 1 20; do
      for ranks in 1 2; do
        train "$name-w$ranks-s$steps" --ranks "$ranks" --steps "$steps" --log-every 0 \
          --save-final "$name-w$ranks-s$steps.safetensors" "$name.fb" || ok=0
      done
    done
    [[ $ok -eq 1 ]] || continue
    batch_line "$name-w1-s1.out" "${accum1[$model]}" 1
    batch_line "$name-w2-s1.out" "${accum2[$model]}" 2
    # shellcheck disable=SC2086 # noise is a list of arguments
    if ! compare --rtol 1e-5 ${noise[$model]} "$name-w1-s1.safetensors" "$name-w2-s1.safetensors" >one.txt; then
      fail "$model $plan: W = 1 and W = 2 differ by more than 1e-5 after one step:"$'\n'"$(cat one.txt)"
    fi
    # shellcheck disable=SC2086
    compare ${noise[$model]:+--rtol 1 ${noise[$model]}} "$name-w1-s20.safetensors" \
      "$name-w2-s20.safetensors" >twenty.txt
    echo "$model $plan: W = 1 vs W = 2, largest relative difference of a tensor:" \
      "after 1 step $(sed -n 's/^max_rel_diff //p' one.txt)," \
      "after 20 steps $(sed -n 's/^max_rel_diff //p' twenty.txt)"
    if [[ -n ${noise[$model]} ]]; then
      echo "    (largest |a - b| of the zero-gradient attn.k.bias: after 1 step" \
        "$(sed -n 's/^noise //p' one.txt), after 20 steps $(sed -n 's/^noise //p' twenty.txt))"
    fi
    if ! compare --bitwise "$name-w2-s20.safetensors" "$model-$plan.safetensors" >cmp.txt; then
      fail "$model $plan at W = 2: the unpinned plan and the plan compiled for W = 2 differ:"$'\n'"$(cat cmp.txt)"
    fi
  done
done

# ---------------------------------------------------------------------------
# 3. The MLP learns its task (fsdp-full, bf16 parameters and f32 masters).
# ---------------------------------------------------------------------------
# The teacher task y = argmax(W x); ln 10 = 2.30 at chance. The held-out
# loss (evaluate(synthetic(seed = 1)), 1024 samples) after 1000 steps was
# 0.135 to 0.148 over seeds 1 to 8. The loss bounds the accuracy: a sample
# the model gets wrong has p(true class) <= 1/2, so it costs at least ln 2,
# and the error rate is at most loss / ln 2. Held-out loss < 0.2 means
# held-out accuracy > 71%; 0.145 means more than 79%.
start=$(date +%s%N)
if train mlp-learn --ranks 2 --steps 1000 --log-every 100 --metrics mlp-learn.jsonl mlp-fsdp-full.fb; then
  elapsed=$((($(date +%s%N) - start) / 1000000))
  first=$(metric mlp-learn.jsonl 1 loss)
  last=$(metric mlp-learn.jsonl 1000 loss)
  val=$(sed -nE 's/^\{"step": 1000, .*"logs": \{[^}]*"val": ([-0-9.e+]+).*$/\1/p' mlp-learn.jsonl)
  echo "mlp fsdp-full: 1000 steps in $elapsed ms at W = 2: training loss $first -> $last, held-out loss $val" \
    "(held-out accuracy >= $(awk -v v="$val" 'BEGIN { printf "%.1f%%", v == "" ? 0 : 100 * (1 - v / log(2)) }'))"
  awk -v v="$val" 'BEGIN { exit !(v != "" && v < 0.2) }' ||
    fail "the MLP's held-out loss after 1000 steps is '$val', expected < 0.2"
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.3 * a) }' ||
    fail "the MLP's training loss did not fall below 0.3 x its first value: $first -> $last"
fi

# ---------------------------------------------------------------------------
# 4. A worker killed with SIGKILL ends the job within seconds, naming it.
# ---------------------------------------------------------------------------
# children PID: the child processes of PID, on one line.
children() {
  local pids=()
  [[ -n $1 ]] && read -ra pids <"/proc/$1/task/$1/children" 2>/dev/null
  echo "${pids[*]}"
}

# kill_rank NAME PLAN RANK: starts a long run of PLAN at W = 2 and kills
# worker RANK once rank 0 has printed that training starts.
kill_rank() {
  local name=$1 plan=$2 rank=$3
  timeout 60 "$mdrun" --backend cpu --threads 1 --ranks 2 --steps 100000000 --log-every 0 \
    "$plan" >"$name.out" 2>"$name.err" &
  local launcher=$! job="" workers="" victim="" w
  for _ in $(seq 200); do
    job=$(children "$launcher")
    workers=$(children "$job")
    [[ $(wc -w <<<"$workers") -eq 2 ]] && grep -q '^mdrun: training ' "$name.out" && break
    sleep 0.05
  done
  sleep 0.3 # in the middle of the steps' collectives
  for w in $workers; do
    tr '\0' '\n' <"/proc/$w/environ" 2>/dev/null | grep -qx "RANK=$rank" && victim=$w
  done
  if [[ -z $victim ]] || ! grep -q '^mdrun: training ' "$name.out"; then
    fail "$name: could not find rank $rank training under mdrun (pid $launcher): workers '$workers'"$'\n'"$(cat "$name.out" "$name.err")"
    kill $launcher
    wait $launcher
    return
  fi
  local start elapsed rc
  start=$(date +%s%N)
  kill -KILL "$victim"
  wait $launcher
  rc=$?
  elapsed=$((($(date +%s%N) - start) / 1000000))
  echo "$name: killed rank $rank (pid $victim); mdrun exited $rc after $elapsed ms: $(cat "$name.err")"
  [[ $rc -eq 1 ]] || fail "$name: a killed rank: exit $rc, expected 1"
  [[ $elapsed -lt 5000 ]] || fail "$name: a killed rank took $elapsed ms to end the job"
  grep -Eq "^mdrun: error: rank $rank was killed by signal 9 \(Killed\)$" "$name.err" ||
    fail "$name: expected 'mdrun: error: rank $rank was killed by signal 9 (Killed)', got:"$'\n'"$(cat "$name.err")"
  [[ $(grep -c '^mdrun: error: ' "$name.err") -eq 1 ]] || fail "$name: expected one error line"
  for w in $workers; do
    [[ -e /proc/$w ]] && ! grep -q zombie "/proc/$w/status" 2>/dev/null && fail "$name: worker $w outlived the job"
  done
  local left
  left=$(compgen -G "/dev/shm/md-mdrun-$job-*") &&
    fail "$name: shared-memory segment left behind: $left"
}
kill_rank kill-mlp mlp-full-f32.fb 1
kill_rank kill-gpt gpt-fsdp-full.fb 0

# ---------------------------------------------------------------------------
# 5. SyncBatchNorm (models/mlp_bn.mdl: statistics all-reduced over the
#    ranks, 1 / sqrt(var + eps) by md.rsqrt): the model's bn-bf16 plan (ddp
#    with bf16 parameters) and the zero1 and fsdp-full presets (bf16 too)
#    give bitwise identical weights after 30 steps at W = 2, and the loss
#    falls.
# ---------------------------------------------------------------------------
bn_ref=""
for plan in bn-bf16 zero1 fsdp-full; do
  name=bn-$plan
  timeout 60 "$mdc" "$here/../../models/mlp_bn.mdl" --plan "$plan" --world-size 2 \
    -o "$name.fb" 2>mdc-err.txt || { fail "mdc mlp_bn.mdl --plan $plan: $(cat mdc-err.txt)"; continue; }
  train "$name" --ranks 2 --steps 30 --log-every 1 --metrics "$name.jsonl" \
    --save-final "$name.safetensors" "$name.fb" || continue
  first=$(metric "$name.jsonl" 1 loss)
  last=$(metric "$name.jsonl" 30 loss)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.7 * a) }' ||
    fail "$name: the loss did not fall in 30 steps: '$first' -> '$last'"
  if [[ -z $bn_ref ]]; then
    bn_ref=$name
    echo "mlp_bn $plan: loss $first -> $last in 30 steps at W = 2"
  elif ! compare --bitwise "$bn_ref.safetensors" "$name.safetensors" >cmp.txt; then
    fail "mlp_bn at W = 2: $plan and ${bn_ref#bn-} give different weights:"$'\n'"$(cat cmp.txt)"
  else
    echo "mlp_bn: ${bn_ref#bn-} and $plan bitwise identical after 30 steps at W = 2"
  fi
done

if [[ $failures -ne 0 ]]; then
  echo "compiled.sh: $failures failure(s)"
  exit 1
fi
echo "compiled.sh: all checks passed"
