#!/usr/bin/env bash
# md's comms timed like nccl-tests, with PyTorch's gloo all-reduce as the
# reference, in one run: for every world size, md-collective-bench with the
# shm and the gloo comm (and nccl, which says why it skips without a GPU per
# rank), then bench/torch_gloo_allreduce.py at the same sizes when a Python
# with torch is found. Every result is checked; the script exits 1 if any
# is wrong or a run fails.
#
#   bench/collectives.sh [--bench MD_COLLECTIVE_BENCH] [--ranks "2 4"]
#                        [--max-bytes B] [--python PY] [--iters N]
#
# MD_COLLECTIVE_BENCH defaults to build/bin/md-collective-bench; --max-bytes
# to 256 MiB (each world size then takes minutes on a small machine); the
# Python to $MD_TORCH_PYTHON. Output: md-collective-bench's lines (see
# bench/collective_bench.cpp), one block per comm and world size; the shm
# block has memcpy rows too, the machine's copy bandwidth as the ranks see
# it (every rank copying a buffer of the size at once), measured in the same
# run. Then, per world size, two summaries by size:
#
#   # shm-vs-memcpy RANKS BYTES ALL_REDUCE_BUSBW ALL_GATHER_BUSBW REDUCE_SCATTER_BUSBW MEMCPY_GBS AR/MEMCPY
#   # gloo-vs-torch RANKS BYTES GLOO_US TORCH_US GLOO/TORCH
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$here/../build/bin/md-collective-bench
ranks="2 4"
max=$((256 << 20))
python=${MD_TORCH_PYTHON:-}
iters=()
while (($#)); do
  case $1 in
  --bench) bench=$2; shift 2 ;;
  --ranks) ranks=$2; shift 2 ;;
  --max-bytes) max=$2; shift 2 ;;
  --python) python=$2; shift 2 ;;
  --iters) iters=(--iters "$2"); shift 2 ;;
  *) echo "collectives.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -x $bench ]] || { echo "collectives.sh: no md-collective-bench at $bench (build it, or give --bench)" >&2; exit 2; }

rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
status=0
for w in $ranks; do
  : >"$rows"
  for comm in shm gloo nccl; do
    kinds=()
    [[ $comm == shm ]] && kinds=(--collectives all_reduce,all_gather,reduce_scatter,broadcast,memcpy)
    "$bench" --comm "$comm" --ranks "$w" --max_bytes "$max" "${kinds[@]}" "${iters[@]}" | tee -a "$rows"
    rc=${PIPESTATUS[0]}
    ((rc == 0 || rc == 77)) || { echo "# $comm at $w ranks failed (exit $rc)"; status=1; }
  done
  if [[ -z $python ]]; then
    echo "# torch-gloo: skipped: no Python given (--python or MD_TORCH_PYTHON)"
  elif ! "$python" -c 'import torch' 2>/dev/null; then
    echo "# torch-gloo: skipped: $python cannot import torch"
  else
    "$python" "$here/torch_gloo_allreduce.py" "$w" 8 "$max" "${iters[@]:1}" | tee -a "$rows"
    rc=${PIPESTATUS[0]}
    ((rc == 0 || rc == 77)) || { echo "# torch-gloo at $w ranks failed (exit $rc)"; status=1; }
  fi
  # The summaries, from the rows above (fields: comm collective ranks bytes
  # count iters time_us algbw busbw check).
  awk -v w="$w" '
    function get(k, s) { return ((k, s) in bw) ? bw[k, s] : "-" }
    $1 !~ /^#/ && NF == 10 {
      key = $1 " " $2
      t[key, $4] = $7; bw[key, $4] = $9
      if (!($4 in size)) { size[$4] = 1; order[++n] = $4 }
    }
    END {
      if (("shm memcpy", order[1]) in bw) {
        print "# shm-vs-memcpy ranks bytes all_reduce_busbw all_gather_busbw reduce_scatter_busbw memcpy_GB/s all_reduce/memcpy"
        for (i = 1; i <= n; i++) {
          s = order[i]
          if (!(("shm memcpy", s) in bw) || !(("shm all_reduce", s) in bw)) continue
          m = bw["shm memcpy", s]
          printf "# shm-vs-memcpy %d %d %s %s %s %s %s\n", w, s,
                 bw["shm all_reduce", s], get("shm all_gather", s),
                 get("shm reduce_scatter", s), m,
                 (m > 0 ? sprintf("%.2f", bw["shm all_reduce", s] / m) : "-")
        }
      }
      if (("torch-gloo all_reduce", order[1]) in t && ("gloo all_reduce", order[1]) in t) {
        print "# gloo-vs-torch ranks bytes gloo_us torch_us gloo/torch"
        for (i = 1; i <= n; i++) {
          s = order[i]
          if (!(("gloo all_reduce", s) in t) || !(("torch-gloo all_reduce", s) in t)) continue
          g = t["gloo all_reduce", s]; p = t["torch-gloo all_reduce", s]
          printf "# gloo-vs-torch %d %d %s %s %s\n", w, s, g, p,
                 (p > 0 ? sprintf("%.2f", g / p) : "-")
        }
      }
    }' "$rows"
done
exit $status
