#!/usr/bin/env bash
# bench/cpu_step.sh — the CPU backend's step time and FLOP rate against
# OpenBLAS sgemm on this machine, in one run (docs/bench.md).
#
#   bench/cpu_step.sh [--build DIR] [--gpt-steps N] [--mlp-steps N]
#                     [--reps R] [--keep DIR] [--help]
#
# --build DIR: where mdc, mdrun and md-sgemm-bench were built (default
# build/ of the checkout); --gpt-steps, --mlp-steps: optimizer steps to
# train (default 20 and 300); --reps: sgemm repetitions (default 5);
# --keep DIR: work in DIR and keep it (plans, --inspect output, metrics,
# mdrun's output) instead of a temporary directory; DIR must be empty or
# one an earlier run kept.
#
# 1. sgemm: build/bin/md-sgemm-bench times cblas_sgemm (best of R
#    repetitions) on square shapes and on the benchmark's shapes, with
#    1 process x 1 thread, 1 process x 2 threads and 2 processes x 1 thread
#    at the same time (what 2 ranks with 1 BLAS thread each can get).
# 2. The tiny GPT (models/gpt.mdl -D layers=2 -D d=64 -D heads=4 -D seq=64
#    -D vocab=512, its token files replaced by synthetic(seed = 0) for
#    training and synthetic(seed = 1) for evaluation in a temporary copy)
#    and the MLP (models/mlp.mdl), each compiled by mdc with --plan fsdp-full
#    and trained by `mdrun --gpus 2` (2 ranks on the CPU backend when there
#    is no GPU) with a progress record per step in --metrics.
# 3. For each model: FLOPs per optimizer step over all ranks from
#    `mdrun --inspect --world-size 2 --format=json` (flops_per_step.all_ranks,
#    counted from the plan), the median step time (differences of the
#    metrics' `time` between consecutive steps, the first step left out),
#    their quotient, and its ratio to the sgemm rates of step 1.
# 4. How much CPU time other processes took during the run (/proc/stat):
#    figures from a run that shared the cores with other work are low.
#
# Not a test: nothing is checked but that the tools run.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$repo/bench/lib.sh"
build=$repo/build
gpt_steps=20
mlp_steps=300
reps=5
keep=

while [[ $# -gt 0 ]]; do
  case $1 in
  --build) build=${2:?--build needs a directory}; shift 2 ;;
  --gpt-steps) gpt_steps=${2:?}; shift 2 ;;
  --mlp-steps) mlp_steps=${2:?}; shift 2 ;;
  --reps) reps=${2:?}; shift 2 ;;
  --keep) keep=${2:?}; shift 2 ;;
  -h | --help) bench_usage "$0" ;;
  *) echo "cpu_step.sh: unknown argument '$1'" >&2; bench_usage "$0" 2 ;;
  esac
done
for n in "$gpt_steps" "$mlp_steps" "$reps"; do
  [[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || { echo "cpu_step.sh: '$n' is not a positive integer" >&2; exit 2; }
done
[[ $gpt_steps -ge 2 && $mlp_steps -ge 2 ]] ||
  { echo "cpu_step.sh: at least 2 steps per model (the first is left out)" >&2; exit 2; }

mdc=$build/bin/mdc
mdrun=$build/bin/mdrun
sgemm=$build/bin/md-sgemm-bench
for tool in "$mdc" "$mdrun" "$sgemm"; do
  [[ -x $tool ]] || { echo "cpu_step.sh: $tool not found: build first (README.md)" >&2; exit 1; }
done

bench_workdir cpu_step "$keep"

# --- the machine -------------------------------------------------------------
cpu=$(awk -F': *' '/^model name/ { name = $2 } /^cpu family/ { fam = $2 } /^model\t/ { mod = $2 }
  /^$/ { exit } END { if (name != "") printf "%s (family %s, model %s)", name, fam, mod }' /proc/cpuinfo 2>/dev/null || true)
echo "machine: ${cpu:-unknown CPU}; $(nproc) cores usable (nproc), $(getconf _NPROCESSORS_ONLN) online"
dirty=$(git -C "$repo" status --porcelain --untracked-files=no -- ':!*.md' 2>/dev/null | head -c1 || true)
echo "commit:  $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)${dirty:+ with local changes}"
echo
# Other work on the machine slows everything here. The CPU time every
# process used during the run (/proc/stat) minus this script's children's
# says how much there was; it is printed at the end.
busy_jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
busy0=$(busy_jiffies)
start_ns=$(date +%s%N)

# --- sgemm ---------------------------------------------------------------------
# Square shapes, then the shapes the two models' kernels call sgemm with
# (runtime/cpu/Matmul.cpp, Attention.cpp; M x N x K, op(A) op(B)):
#   GPT, 8 x 64 = 512 rows, C = 64, 4C = 256, V = 512, head dim 16:
#     forward  512x64x64:nt (q, k, v, proj)  512x256x64:nt (fc)
#              512x64x256:nt (mlp proj)      512x512x64:nt (logits)
#     backward 512x64x64:nn (dx)  64x64x512:tn (dW)  256x64x512:tn (fc dW)
#     attention per (batch, head) 64x64x16:nt (Q K^T)  64x16x64:nn (P V)
#   MLP, 16 rows, 784 -> 256 -> 10:
#     16x256x784:nt (fc1)  16x784x256:nn (fc1 dx)  256x784x16:tn (fc1 dW)
square=(256x256x256 512x512x512 1024x1024x1024)
gpt_shapes=(512x64x64:nt 512x256x64:nt 512x64x256:nt 512x512x64:nt
  512x64x64:nn 64x64x512:tn 256x64x512:tn 64x64x16:nt 64x16x64:nn)
mlp_shapes=(16x256x784:nt 16x784x256:nn 256x784x16:tn)
echo "sgemm (cblas_sgemm, best of $reps repetitions of >= 50 ms; GFLOP/s = 2 M N K / time per call):"
"$sgemm" --reps "$reps" --config 1x1 --config 1x2 --config 2x1 \
  "${square[@]}" "${gpt_shapes[@]}" "${mlp_shapes[@]}" >"$work/sgemm.txt"
grep '^# blas' "$work/sgemm.txt" | sed 's/^# /  /'
awk '
  /^sgemm/ {
    key = $2 "x" $3 "x" $4 ":" $5
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    rate[key, $6 "x" $7] = $10
  }
  END {
    printf "  %-18s %12s %12s %12s\n", "M x N x K", "1 thread", "2 threads", "2 x 1 thread"
    for (i = 1; i <= n; ++i)
      printf "  %-18s %12.2f %12.2f %12.2f\n", order[i], rate[order[i], "1x1"], rate[order[i], "1x2"], rate[order[i], "2x1"]
  }' "$work/sgemm.txt"

# rate CONFIG SHAPE...: the FLOP-weighted rate of SHAPEs (each called once:
# total FLOPs / total time) under CONFIG (1x1, 1x2 or 2x1).
rate() {
  local config=$1
  shift
  awk -v config="$config" -v list="$*" '
    BEGIN { n = split(list, want, " "); for (i = 1; i <= n; ++i) { sub(/:.*/, "", want[i]); w[want[i]] = 1 } }
    /^sgemm/ && ($6 "x" $7) == config && w[$2 "x" $3 "x" $4] {
      key = $2 "x" $3 "x" $4 ":" $5
      if (key in done) next
      done[key] = 1
      f = 2 * $2 * $3 * $4
      flops += f; secs += f / ($10 * 1e9)
    }
    END { printf "%.2f", flops / secs / 1e9 }' "$work/sgemm.txt"
}
peak1=$(rate 1x1 1024x1024x1024)
peak2=$(rate 1x2 1024x1024x1024)
peak21=$(rate 2x1 1024x1024x1024)
echo

# --- the models ------------------------------------------------------------------
# The tiny GPT trains on tokens("data/train.bin"): a copy with synthetic data.
sed -e 's|tokens("data/train.bin")|synthetic(seed = 0)|' \
  -e 's|tokens("data/val.bin")|synthetic(seed = 1)|' \
  "$repo/models/gpt.mdl" >"$work/gpt.mdl"
if grep -q 'tokens(' "$work/gpt.mdl"; then
  echo "cpu_step.sh: models/gpt.mdl still reads a token file after the rewrite" >&2
  exit 1
fi

# json_int KEY FILE: the integer value of the first "KEY": in FILE.
json_int() {
  awk -v key="\"$1\":" '$1 == key { v = $2; gsub(/[^0-9]/, "", v); print v; exit }' "$2"
}

# bench NAME STEPS SOURCE MDC-ARGS... : compile, inspect, train; prints the
# report lines and sets step_ms, gflops.
bench() {
  local name=$1 steps=$2 source=$3
  shift 3
  local plan=$work/$name.fb
  "$mdc" "$source" "$@" --plan fsdp-full -o "$plan"
  "$mdrun" --inspect "$plan" --world-size 2 --format=json >"$work/$name.inspect.json"
  "$mdrun" --inspect "$plan" --world-size 2 >"$work/$name.inspect.txt"
  local flops per_rank accum
  # Keys of flops_per_step (docs/plan-format.md); no other key has these names.
  flops=$(json_int all_ranks "$work/$name.inspect.json")
  per_rank=$(json_int per_rank "$work/$name.inspect.json")
  accum=$(json_int accumulation_steps "$work/$name.inspect.json")
  [[ -n $flops && -n $per_rank ]] || { echo "cpu_step.sh: no flops_per_step in mdrun --inspect" >&2; exit 1; }

  "$mdrun" --gpus 2 --steps "$steps" --log-every 1 --metrics "$work/$name.jsonl" \
    "$plan" >"$work/$name.out" 2>"$work/$name.err" ||
    { cat "$work/$name.err" >&2; exit 1; }
  # Progress records (those with a time; a step with only the recipe's
  # logs has none): step k's time is time[k] - time[k-1]; step 1
  # (start-up, warm-up) is left out. Prints the median, min and max in ms,
  # the first and the last loss. "time" is a record's last key and "loss"
  # its first after "step" (a log named loss sits in "logs", after it).
  local stats
  stats=$(awk '
    !/"time"/ { next }
    {
      t = $0; sub(/.*"time": /, "", t); sub(/}.*/, "", t)
      match($0, /"loss": [^,}]*/); l = substr($0, RSTART + 8, RLENGTH - 8)
      if (n++ == 0) first = l; else d[n - 1] = 1e3 * (t - prev)
      prev = t; last = l
    }
    END {
      m = n - 1
      for (i = 2; i <= m; ++i) { v = d[i]; for (j = i - 1; j >= 1 && d[j] > v; --j) d[j + 1] = d[j]; d[j + 1] = v }
      med = m % 2 ? d[(m + 1) / 2] : (d[m / 2] + d[m / 2 + 1]) / 2
      printf "%.3f %.3f %.3f %s %s\n", med, d[1], d[m], first, last
    }' "$work/$name.jsonl")
  local min_ms max_ms loss0 loss1 banner
  read -r step_ms min_ms max_ms loss0 loss1 <<<"$stats"
  banner=$(sed -n '/ranks on the/{s/^mdrun: //p;q}' "$work/$name.out")
  gflops=$(awk -v f="$flops" -v ms="$step_ms" 'BEGIN { printf "%.2f", f / (ms * 1e-3) / 1e9 }')
  echo "$name: $banner"
  sed -n '/^mdrun: warning/{s/^/  /p;q}' "$work/$name.err"
  echo "  $(sed -n '/batch:/{s/^mdrun: //p;q}' "$work/$name.out") (accumulation steps $accum at W = 2)"
  echo "  FLOPs per step (plan, GEMM-class ops): $per_rank per rank, $flops over 2 ranks"
  awk -v f="$flops" 'BEGIN { printf "    = %.3f GFLOP per optimizer step\n", f / 1e9 }'
  echo "  $steps steps, loss $loss0 -> $loss1; step time median $step_ms ms (min $min_ms, max $max_ms) over steps 2..$steps"
  echo "  achieved: $gflops GFLOP/s (FLOPs per step over 2 ranks / median step time)"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

report() {
  local name=$1 shapes_rate2=$2 shapes_rate21=$3
  echo "  ratio to sgemm 1024^3 with 2 threads ($peak2 GFLOP/s):          $(ratio "$gflops" "$peak2")"
  echo "  ratio to sgemm 1024^3, 2 processes x 1 thread ($peak21 GFLOP/s): $(ratio "$gflops" "$peak21")"
  echo "  ratio to sgemm on $name's shapes with 2 threads ($shapes_rate2 GFLOP/s): $(ratio "$gflops" "$shapes_rate2")"
  echo "  ratio to sgemm on $name's shapes, 2 processes x 1 thread ($shapes_rate21 GFLOP/s): $(ratio "$gflops" "$shapes_rate21")"
}

bench gpt "$gpt_steps" "$work/gpt.mdl" -D layers=2 -D d=64 -D heads=4 -D seq=64 -D vocab=512
report gpt "$(rate 1x2 "${gpt_shapes[@]}")" "$(rate 2x1 "${gpt_shapes[@]}")"
echo
bench mlp "$mlp_steps" "$repo/models/mlp.mdl"
report mlp "$(rate 1x2 "${mlp_shapes[@]}")" "$(rate 2x1 "${mlp_shapes[@]}")"
echo
echo "sgemm 1024^3: $peak1 GFLOP/s at 1 thread, $peak2 at 2 threads, $peak21 as 2 processes x 1 thread"
echo "(a model's shapes' rate: total FLOPs / total time of its listed shapes, one call each)"
# `times`' second line: this shell's children's user and system time.
times >"$work/times.txt" # in this shell: a subshell's children are not ours
children=$(awk 'NR == 2 { s = 0; for (i = 1; i <= 2; ++i) { split($i, p, "m"); s += 60 * p[1] + p[2] } print s }' "$work/times.txt")
awk -v b0="$busy0" -v b1="$(busy_jiffies)" -v hz="$(getconf CLK_TCK)" -v ours="$children" \
  -v wall="$(( ($(date +%s%N) - start_ns) / 1000000 ))" -v cores="$(nproc)" 'BEGIN {
    busy = (b1 - b0) / hz; other = busy - ours; if (other < 0) other = 0
    printf "other processes used %.1f of %.1f CPU-seconds during the run (%.0f%%; this run %.1f)\n",
      other, cores * wall / 1e3, 100 * other / (cores * wall / 1e3), ours
  }'
