#!/usr/bin/env bash
# The tiny GPT's step time over two launchers on this machine: the CPU
# backend across two "nodes", one rank each (--nnodes 2, loopback), so
# every collective takes the multi-node comm. The same plan on one node
# over shared memory is the reference. Give another mdrun (an older build)
# to compare comms across versions.
#
#   bench/two_launchers.sh [--mdc MDC] [--mdrun MDRUN]... [--steps N] [--reps R]
#
# The model is bench/cpu_step.sh's: models/gpt.mdl with -D layers=2 -D d=64
# -D heads=4 -D seq=64 -D vocab=512 on synthetic data, under fsdp-full.
# Each run trains N steps (default 30) with --metrics; its step time is the
# median over steps 2..N of the difference between consecutive records'
# `time`; the script reports the median of R runs (default 3) per mdrun
# and layout. MDC and MDRUN default to build/bin's; --mdrun may be given
# several times.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
mdc=$repo/build/bin/mdc
mdruns=()
steps=30
reps=3
while (($#)); do
  case $1 in
  --mdc) mdc=${2:?}; shift 2 ;;
  --mdrun) mdruns+=("${2:?}"); shift 2 ;;
  --steps) steps=${2:?}; shift 2 ;;
  --reps) reps=${2:?}; shift 2 ;;
  *) echo "two_launchers.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
((${#mdruns[@]})) || mdruns=("$repo/build/bin/mdrun")
[[ $steps =~ ^[0-9]+$ && $steps -ge 3 && $reps =~ ^[0-9]+$ && $reps -ge 1 ]] ||
  { echo "two_launchers.sh: --steps >= 3 and --reps >= 1" >&2; exit 2; }
for tool in "$mdc" "${mdruns[@]}"; do
  [[ -x $tool ]] || { echo "two_launchers.sh: $tool not found" >&2; exit 2; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/md-two-launchers.XXXXXX")
trap 'rm -rf "$work"' EXIT

sed -e 's|tokens("data/train.bin")|synthetic(seed = 0)|' \
  -e 's|tokens("data/val.bin")|synthetic(seed = 1)|' \
  "$repo/models/gpt.mdl" >"$work/gpt.mdl"
"$mdc" "$work/gpt.mdl" -D layers=2 -D d=64 -D heads=4 -D seq=64 -D vocab=512 \
  --plan fsdp-full -o "$work/gpt.fb" || exit 1

# median_step FILE: the median step time in ms of a metrics file.
median_step() {
  awk -F'"time": ' 'NF > 1 { split($2, a, /[,}]/); if (n++) print 1e3 * (a[1] - prev); prev = a[1] }' "$1" | median
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[++n] = $1 } END { printf "%.2f", n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'; }
port() { echo $((20000 + (RANDOM * 7 + $$) % 30000)); }
common=(--backend cpu --steps "$steps" --log-every 1 --threads 1 --timeout 60)

echo "# tiny GPT (fsdp-full), $steps steps, median step time over steps 2..$steps, median of $reps runs"
status=0
for mdrun in "${mdruns[@]}"; do
  one=() two=()
  for ((r = 0; r < reps; ++r)); do
    "$mdrun" --ranks 2 "${common[@]}" --metrics "$work/one.jsonl" "$work/gpt.fb" \
      >"$work/one.out" 2>&1 || { cat "$work/one.out"; status=1; continue; }
    one+=("$(median_step "$work/one.jsonl")")
    p=$(port)
    "$mdrun" --nnodes 2 --node-rank 0 --gpus 1 --master-addr 127.0.0.1 --master-port "$p" \
      "${common[@]}" --metrics "$work/two.jsonl" "$work/gpt.fb" >"$work/n0.out" 2>&1 &
    n0=$!
    "$mdrun" --nnodes 2 --node-rank 1 --gpus 1 --master-addr 127.0.0.1 --master-port "$p" \
      "${common[@]}" "$work/gpt.fb" >"$work/n1.out" 2>&1
    rc1=$?
    wait $n0
    rc0=$?
    if ((rc0 || rc1)); then
      cat "$work/n0.out" "$work/n1.out"
      status=1
      continue
    fi
    two+=("$(median_step "$work/two.jsonl")")
    comm=$(sed -nE 's/.*on the cpu backend \(([a-z-]+) comm.*/\1/p' "$work/n0.out")
  done
  ((${#one[@]} && ${#two[@]})) || continue
  printf '%s: one node (shm) %s ms/step; two launchers (%s) %s ms/step\n' "$mdrun" \
    "$(echo "${one[*]}" | median)" "${comm:-?}" "$(echo "${two[*]}" | median)"
done
exit $status
