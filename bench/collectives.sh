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
# bench/collective_bench.cpp), one block per comm and world size.
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

status=0
for w in $ranks; do
  for comm in shm gloo nccl; do
    "$bench" --comm "$comm" --ranks "$w" --max_bytes "$max" "${iters[@]}"
    rc=$?
    ((rc == 0 || rc == 77)) || { echo "# $comm at $w ranks failed (exit $rc)"; status=1; }
  done
  if [[ -z $python ]]; then
    echo "# torch-gloo: skipped: no Python given (--python or MD_TORCH_PYTHON)"
  elif ! "$python" -c 'import torch' 2>/dev/null; then
    echo "# torch-gloo: skipped: $python cannot import torch"
  else
    "$python" "$here/torch_gloo_allreduce.py" "$w" 8 "$max" "${iters[@]:1}"
    rc=$?
    ((rc == 0 || rc == 77)) || { echo "# torch-gloo at $w ranks failed (exit $rc)"; status=1; }
  fi
done
exit $status
