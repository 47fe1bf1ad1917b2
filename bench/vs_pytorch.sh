#!/usr/bin/env bash
# md against PyTorch on the same job, interleaved in one run.
#
#   bench/vs_pytorch.sh [--build DIR] [--python PY] [--reps R] [--steps N]
#                       [--rows tiny|l4|all] [--comm-thread on|off|both]
#                       [--isa sse41|avx2|avx512|native] [--keep DIR]
#
# --isa caps both sides at one instruction set, so that one machine
# measures an older CPU's case: md by MD_CPU_ISA (which caps oneDNN too,
# docs/runtime-cpu.md), PyTorch by ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA
# and MKL_ENABLE_INSTRUCTIONS (its vectorised kernels, its oneDNN and its
# MKL GEMMs). Default: native, no cap on either side.
#
# --comm-thread is passed to md's ranks (mdrun --comm-thread: the CPU
# backend's comm stream on a thread of its own, docs/runtime-cpu.md; on by
# default). `both` runs md with it and without it in each repetition, the
# rows without it marked ", thread off", so the two compare within one run.
#
# Each row trains models/gpt.mdl's GPT on 2 ranks of the CPU, 1 thread each,
# with the same model, token data, global and micro batch, optimizer, schedule
# and gradient clipping on both sides:
#   md:      mdc -o plan.fb, then mdrun --ranks 2 --backend cpu --threads 1
#   PyTorch: bench/torch/gpt_bench.py (DDP, or FSDP2 fully_shard per block),
#            gloo, torch.set_num_threads(1)
# Rows (md plan vs PyTorch):
#   ddp f32              vs DDP
#   fsdp-full-f32        vs FSDP2 f32 (the fsdp-full preset in f32)
#   fsdp-full bf16+ckpt  vs FSDP2 bf16 params (f32 reduce) + checkpointing
# for the tiny GPT (L2 d64 T64 V512, global batch 256, micro 8) and
# GPT L4 d256 T128 V4096 (global batch 32, micro 8: the same shapes per
# micro-step, fewer per step, to keep a run short).
#
# Both sides run under setsid with their ranks in that one session, so the
# scheduler's autogroups treat them alike. A side's step time is the median
# of its steps 2..N (step 1 is start-up); each repetition runs md then
# PyTorch. The ratio is md / PyTorch per repetition; the table gives its
# median and its range over --reps (default 3) repetitions, and md's CPU
# time (user + system of all its ranks over the whole run, start-up
# included; /usr/bin/time). PyTorch comes
# from --python, else $MD_TORCH_PYTHON, else ~/.cache/md/torch-venv (what
# scripts/test.sh installs); without one the benchmark says why and exits 0.
# This is a benchmark, not a test: it fails only when a run fails.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$repo/bench/lib.sh"
build=$repo/build
python=${MD_TORCH_PYTHON:-$HOME/.cache/md/torch-venv/bin/python}
reps=3
steps=8
rows=all
keep=
thread=on
isa=native

while [[ $# -gt 0 ]]; do
  case $1 in
  --build) build=${2:?--build needs a directory}; shift 2 ;;
  --python) python=${2:?--python needs a path}; shift 2 ;;
  --reps) reps=${2:?}; shift 2 ;;
  --steps) steps=${2:?}; shift 2 ;;
  --rows) rows=${2:?}; shift 2 ;;
  --keep) keep=${2:?}; shift 2 ;;
  --comm-thread) thread=${2:?--comm-thread needs on, off or both}; shift 2 ;;
  --isa) isa=${2:?--isa needs sse41, avx2, avx512 or native}; shift 2 ;;
  -h | --help) bench_usage "$0" ;;
  *) echo "vs_pytorch.sh: unknown argument '$1'" >&2; bench_usage "$0" 2 ;;
  esac
done
for n in "$reps" "$steps"; do
  [[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || { echo "vs_pytorch.sh: '$n' is not a positive integer" >&2; exit 2; }
done
[[ $steps -ge 3 ]] || { echo "vs_pytorch.sh: --steps must be at least 3 (step 1 is left out)" >&2; exit 2; }
case $rows in tiny | l4 | all) ;; *) echo "vs_pytorch.sh: --rows is tiny, l4 or all" >&2; exit 2 ;; esac
case $thread in on | off | both) ;; *) echo "vs_pytorch.sh: --comm-thread is on, off or both" >&2; exit 2 ;; esac
case $isa in
sse41) aten=default onednn=SSE41 mkl=SSE4_2 ;;
avx2) aten=avx2 onednn=AVX2 mkl=AVX2 ;;
avx512) aten=avx512 onednn=AVX512_CORE mkl=AVX512 ;;
native) ;;
*) echo "vs_pytorch.sh: --isa is sse41, avx2, avx512 or native" >&2; exit 2 ;;
esac
if [[ $isa != native ]]; then
  export MD_CPU_ISA=$isa ATEN_CPU_CAPABILITY=$aten ONEDNN_MAX_CPU_ISA=$onednn \
    DNNL_MAX_CPU_ISA=$onednn MKL_ENABLE_INSTRUCTIONS=$mkl
fi
[[ -x /usr/bin/time ]] || { echo "vs_pytorch.sh: /usr/bin/time not found (Debian: apt-get install time)" >&2; exit 1; }

mdc=$build/bin/mdc
mdrun=$build/bin/mdrun
mddata=$build/bin/md-data
for tool in "$mdc" "$mdrun" "$mddata"; do
  [[ -x $tool ]] || { echo "vs_pytorch.sh: $tool not found: build first (README.md)" >&2; exit 1; }
done
if ! torch_version=$("$python" -c 'import torch, numpy; print(torch.__version__)' 2>/dev/null); then
  echo "vs_pytorch.sh: skipped: no Python with torch and numpy at '$python'" \
    "(scripts/test.sh installs one; or give --python)"
  exit 0
fi

bench_workdir vs_pytorch "$keep"

cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
echo "machine: ${cpu:-unknown CPU}; $(nproc) cores; PyTorch $torch_version; md $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "2 ranks x 1 thread on each side; $steps steps per run (median of steps 2..$steps); $reps repetitions, md and PyTorch interleaved"
echo "md's comm thread: $thread; load average $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ $isa == native ]]; then
  echo "instruction sets: native on both sides"
else
  echo "instruction sets capped at $isa: md MD_CPU_ISA=$isa; PyTorch ATEN_CPU_CAPABILITY=$aten ONEDNN_MAX_CPU_ISA=$onednn MKL_ENABLE_INSTRUCTIONS=$mkl"
fi
echo "PyTorch's CPU capability: $("$python" -c 'import torch; print(torch.backends.cpu.get_cpu_capability())' 2>/dev/null || echo unknown)"
echo

# The model with its token file, global batch, and two plans besides the
# presets: `fsdp-full-f32` (the fsdp-full preset in f32: the preset itself
# holds bf16 parameters, which FSDP2's f32 row does not) and `bf16-ckpt`
# (models/gpt.mdl's own fsdp-full: bf16 params, f32 reduce and master,
# every block checkpointed). Its `fsdp-full` plan goes.
model() { # model VOCAB GLOBAL_BATCH OUT
  local data=$work/tokens$1.bin
  [[ -f $data ]] || "$mddata" markov --vocab "$1" --tokens 2000000 --seed 1 -o "$data" >/dev/null
  sed -e "s|tokens(\"data/train.bin\")|tokens(\"$data\")|" \
    -e "s|tokens(\"data/val.bin\")|tokens(\"$data\")|" \
    -e "s|^\( *global_batch *=\) *[0-9]*|\1 $2|" \
    -e '/^plan fsdp-full extends fsdp-full {/,/^}/d' "$repo/models/gpt.mdl" >"$3"
  cat >>"$3" <<'EOF'

plan fsdp-full-f32 extends fsdp-full {
  precision = { param = f32, reduce = f32, buffer = f32, master = f32 }
}

plan bf16-ckpt extends fsdp-full {
  precision              = { param = bf16, reduce = f32, buffer = f32, master = f32 }
  checkpoint_activations = blocks(h)
}
EOF
  grep -Eq "global_batch *= *$2( |$)" "$3" || { echo "vs_pytorch.sh: could not set global_batch in $3" >&2; exit 1; }
}

# md_run NAME PLAN THREAD: prints the median step time and the run's CPU
# time (all ranks), in seconds, with --comm-thread THREAD.
md_run() {
  local log=$work/$1.md.jsonl
  rm -f "$log"
  # mdrun waits for its ranks, so their CPU time is in its children's.
  /usr/bin/time -f '%U %S' -o "$work/$1.md.time" setsid -w "$mdrun" --ranks 2 \
    --backend cpu --threads 1 --comm-thread "$3" --steps "$steps" --log-every 1 \
    --metrics "$log" "$2" >"$work/$1.md.out" 2>"$work/$1.md.err" ||
    { echo "vs_pytorch.sh: mdrun failed on $1:" >&2; cat "$work/$1.md.err" >&2; exit 1; }
  printf '%s ' "$(awk '
    !/"time"/ { next }
    { t = $0; sub(/.*"time": /, "", t); sub(/}.*/, "", t)
      if (n++ > 0) d[n - 1] = t - prev; prev = t }
    END {
      m = 0
      for (i = 2; i < n; ++i) v[++m] = d[i]
      for (i = 2; i <= m; ++i) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; --j) v[j + 1] = v[j]; v[j + 1] = x }
      printf "%.6f\n", m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
    }' "$log")"
  awk 'END { printf "%.3f\n", $1 + $2 }' "$work/$1.md.time"
}

# torch_run NAME ARGS...: prints the median step time in seconds.
torch_run() {
  local name=$1
  shift
  setsid -w "$python" "$repo/bench/torch/gpt_bench.py" --world-size 2 --threads 1 \
    --steps "$steps" "$@" >"$work/$name.torch.json" 2>"$work/$name.torch.err" ||
    { echo "vs_pytorch.sh: PyTorch failed on $name:" >&2; tail -20 "$work/$name.torch.err" >&2; exit 1; }
  "$python" - "$work/$name.torch.json" <<'EOF'
import json, statistics, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print("%.6f" % statistics.median(r["step_seconds"][1:]))
EOF
}

results=$work/results.txt
: >"$results"
# row NAME MODEL DIMS-ARGS(mdc -D ...) TORCH-DIMS MDPLAN TORCH-ARGS
row() {
  local name=$1 source=$2 defs=$3 tdims=$4 plan=$5 targs=$6 data=$7 rep tag
  tag=$(tr -c 'a-zA-Z0-9\n' '_' <<<"$name")
  # shellcheck disable=SC2086
  "$mdc" "$source" $defs --plan "$plan" -o "$work/$tag.fb"
  local settings=("$thread")
  [[ $thread == both ]] && settings=(on off)
  for ((rep = 1; rep <= reps; ++rep)); do
    local md=() torch t label
    for t in "${settings[@]}"; do
      md+=("$(md_run "$tag" "$work/$tag.fb" "$t")")
    done
    # shellcheck disable=SC2086
    torch=$(torch_run "$tag" $tdims $targs --data "$data")
    for i in "${!settings[@]}"; do
      label=$name
      [[ $thread == both && ${settings[$i]} == off ]] && label="$name, thread off"
      read -r step cpu <<<"${md[$i]}"
      echo "$label $rep $step $torch $cpu" >>"$results"
      printf '  %-44s rep %d: md %7.1f ms (CPU %6.2f s)  PyTorch %7.1f ms\n' "$label" "$rep" \
        "$(awk -v s="$step" 'BEGIN { print 1e3 * s }')" "$cpu" "$(awk -v s="$torch" 'BEGIN { print 1e3 * s }')"
    done
  done
}

# Per model: name, vocabulary, global batch, dimensions.
models=(
  "tiny 512 256 2 64 4 64"   # the tiny GPT: L2 d64 h4 T64 V512
  "l4 4096 32 4 256 4 128"   # GPT L4 d256 h4 T128 V4096
)
for spec in "${models[@]}"; do
  read -r m vocab gb layers dm heads seq <<<"$spec"
  [[ $rows == "$m" || $rows == all ]] || continue
  model "$vocab" "$gb" "$work/$m.mdl"
  d="-D layers=$layers -D d=$dm -D heads=$heads -D seq=$seq -D vocab=$vocab"
  t="--layers $layers --d $dm --heads $heads --seq $seq --vocab $vocab --global-batch $gb --micro-batch 8"
  echo "$m: GPT L$layers d$dm T$seq V$vocab, global batch $gb, micro 8:"
  row "$m ddp f32 / DDP" "$work/$m.mdl" "$d" "$t" ddp "--mode ddp" "$work/tokens$vocab.bin"
  row "$m fsdp-full f32 / FSDP2" "$work/$m.mdl" "$d" "$t" fsdp-full-f32 "--mode fsdp" "$work/tokens$vocab.bin"
  row "$m fsdp bf16+ckpt / FSDP2 same" "$work/$m.mdl" "$d" "$t" bf16-ckpt \
    "--mode fsdp --precision bf16 --checkpoint" "$work/tokens$vocab.bin"
done

echo
grep -h '^mdrun: cpu: ' "$work"/*.md.out 2>/dev/null | sort -u
echo
echo "| job | md ms | PyTorch ms | md / PyTorch (median) | range | md CPU s |"
echo "| --- | --- | --- | --- | --- | --- |"
# Rows keep their order; names hold spaces, so the last four fields are
# rep, md, torch and md's CPU time.
awk '
  { name = $1; for (i = 2; i <= NF - 4; ++i) name = name " " $i
    if (!(name in k)) order[++n] = name
    k[name]++; md[name, k[name]] = $(NF - 2); pt[name, k[name]] = $(NF - 1)
    r[name, k[name]] = $(NF - 2) / $(NF - 1); cpu[name, k[name]] = $NF }
  function median(a, name, m,   i, j, x, v) {
    for (i = 1; i <= m; ++i) v[i] = a[name, i]
    for (i = 2; i <= m; ++i) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; --j) v[j + 1] = v[j]; v[j + 1] = x }
    return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
  }
  END {
    for (i = 1; i <= n; ++i) {
      name = order[i]; m = k[name]; lo = 1e9; hi = 0
      for (j = 1; j <= m; ++j) { if (r[name, j] < lo) lo = r[name, j]; if (r[name, j] > hi) hi = r[name, j] }
      printf "| %s | %.1f | %.1f | %.2f | %.2f-%.2f | %.2f |\n", name, 1e3 * median(md, name, m),
        1e3 * median(pt, name, m), median(r, name, m), lo, hi, median(cpu, name, m)
    }
  }' "$results"
