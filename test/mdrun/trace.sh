#!/usr/bin/env bash
# mdrun --trace FILE (docs/runtime.md, "A trace"): the MLP compiled by mdc
# (fsdp-full, 2 ranks, the CPU backend) trains 3 steps with a trace; the
# file is one Chrome trace-event JSON object with a process per rank and
# its three tracks named, slices properly nested on each track, every step
# and the hooks on the host track, data reads, kernels named by their op
# and .mdl location, collectives with their bytes and bucket, and flow
# arrows whose ends follow their starts. A rank killed mid-run writes no
# fragment: the file holds the other rank and says so.
#
#   test/mdrun/trace.sh MDC MDRUN PYTHON3 WORK_DIR
set -uo pipefail
usage="usage: trace.sh MDC MDRUN PYTHON3 WORK_DIR"
mdc=${1:?$usage}
mdrun=${2:?$usage}
python=${3:?$usage}
work=${4:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
mdc=$(cd "$(dirname "$mdc")" && pwd)/$(basename "$mdc")
mdrun=$(cd "$(dirname "$mdrun")" && pwd)/$(basename "$mdrun")
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$work" || exit 1

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

# check TRACE RANKS STEPS: the trace's structure (see the top).
check() {
  "$python" - "$@" <<'PY'
import json, sys
path, ranks, steps = sys.argv[1], [int(r) for r in sys.argv[2].split()], int(sys.argv[3])
t = json.load(open(path))
ev = t["traceEvents"]
ok = True
def bad(msg):
    global ok
    print(msg)
    ok = False
meta = {(e["pid"], e.get("tid"), e["name"]): e["args"] for e in ev if e["ph"] == "M"}
for r in ranks:
    if meta.get((r, None, "process_name")) != {"name": f"rank {r}"}:
        bad(f"rank {r}: no process name")
    for tid, name in ((0, "compute stream"), (1, "comm stream"), (2, "host")):
        if meta.get((r, tid, "thread_name")) != {"name": name}:
            bad(f"rank {r}: track {tid} is not named {name}")
if sorted({e["pid"] for e in ev}) != ranks:
    bad(f"processes {sorted({e['pid'] for e in ev})}, expected {ranks}")
xs = [e for e in ev if e["ph"] == "X"]
for r in ranks:
    mine = [e for e in xs if e["pid"] == r]
    names = {e["name"] for e in mine if e["tid"] == 2}
    for s in range(1, steps + 1):
        if f"step {s}" not in names or f"hooks after step {s}" not in names:
            bad(f"rank {r}: no slice of step {s} or its hooks")
    if not any(e["cat"] == "data" for e in mine):
        bad(f"rank {r}: no data read")
    kernels = [e for e in mine if e["cat"] == "kernel"]
    if not any(".mdl:" in e["name"] for e in kernels):
        bad(f"rank {r}: no kernel named with its .mdl location")
    colls = [e for e in mine if e["cat"] == "collective"]
    if not colls or not all(e["args"]["bytes"] > 0 and "bucket" in e["args"] for e in colls):
        bad(f"rank {r}: collectives without bytes and bucket")
    for tid in (0, 1, 2):
        stack = []
        for e in sorted((e for e in mine if e["tid"] == tid),
                        key=lambda e: (e["ts"], -e["dur"])):
            if e["dur"] < 0:
                bad(f"rank {r}: negative duration {e}")
            while stack and stack[-1] <= e["ts"] + 0.002:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1] + 0.002:
                bad(f"rank {r} track {tid}: {e['name']} overlaps its parent")
                break
            stack.append(e["ts"] + e["dur"])
starts = {(e["pid"], e["id"]): e for e in ev if e["ph"] == "s"}
ends = {(e["pid"], e["id"]): e for e in ev if e["ph"] == "f"}
if not starts or starts.keys() != ends.keys():
    bad(f"{len(starts)} flow starts, {len(ends)} ends")
for k, s in starts.items():
    f = ends.get(k)
    if f and (f["ts"] < s["ts"] or f["tid"] == s["tid"]):
        bad(f"flow {k}: {s} -> {f}")
sys.exit(0 if ok else 1)
PY
}

# A job with a trace.
if timeout 120 "$mdrun" --backend cpu --threads 1 --ranks 2 --steps 3 \
  --log-every 0 --trace run/trace.json mlp.fb >ok.out 2>ok.err; then
  has ok.err '^mdrun: trace of ranks 0-1 in run/trace.json \(open it in ui.perfetto.dev or chrome://tracing\)$'
  check run/trace.json "0 1" 3 || fail "run/trace.json"
  ls run | grep -q part && fail "fragments left behind: $(ls run)"
else
  fail "mdrun --trace: $(cat ok.out ok.err)"
fi

# A rank killed mid-run writes no fragment.
timeout --foreground 60 "$mdrun" --backend cpu --threads 1 --ranks 2 \
  --steps 100000000 --log-every 0 --trace killed.json mlp.fb >kill.out 2>kill.err &
launcher=$!
workers=""
for _ in $(seq 200); do
  workers=$(children "$(children $launcher)")
  [[ $(wc -w <<<"$workers") -eq 2 ]] && grep -q '^mdrun: training ' kill.out && break
  sleep 0.05
done
sleep 0.5
victim=$(awk '{print $2}' <<<"$workers")
if [[ -z $victim ]]; then
  fail "the long job did not start: $(cat kill.out kill.err)"
  kill $launcher
else
  kill -KILL "$victim"
  wait $launcher
  has kill.err '^mdrun: trace of rank 0 in killed.json \(open it in ui.perfetto.dev or chrome://tracing\); rank 1 wrote none$'
  check killed.json 0 1 || fail "killed.json"
fi

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "trace: all checks passed"
