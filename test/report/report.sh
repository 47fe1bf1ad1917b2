#!/usr/bin/env bash
# md-report (tools/report/, docs/report.md) on a real run: the tiny GPT of
# the README's train job (models/gpt.mdl, fsdp-full, 2 ranks of the CPU
# backend; its train log and held-out evaluation every 4 steps instead of
# every 10 and 250) trains 8 steps with --metrics and --trace, and md-report
# turns them into a PNG, an HTML page and TensorBoard scalars:
#   - the PNG is a PNG (signature, IHDR) of a plausible size;
#   - the page's data holds the metrics' series (loss, the logged val loss,
#     lr, grad norm, tokens/s) and a time split of every step whose parts
#     add up to the step's wall time read from the trace here, with the
#     evaluations where the trace has them, compute, comm and data reads;
#   - TensorBoard's event file holds the losses (or, without a writer,
#     the option is skipped with a note);
#   - a metrics file without a trace, with samples/s and a null loss, draws;
#   - bad input (a missing file, a line that is not JSON, no steps, a broken
#     trace line, a rank not in the trace) exits 1 naming the file and line,
#     never with a traceback.
# Skips (77) when PYTHON cannot import matplotlib.
#
#   test/report/report.sh MDC MDRUN MD_DATA PYTHON SOURCE_DIR WORK_DIR
set -uo pipefail
usage="usage: report.sh MDC MDRUN MD_DATA PYTHON SOURCE_DIR WORK_DIR"
mdc=${1:?$usage}
mdrun=${2:?$usage}
mddata=${3:?$usage}
python=${4:?$usage}
src=${5:?$usage}
work=${6:?$usage}
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
mdc=$(abs "$mdc") mdrun=$(abs "$mdrun") mddata=$(abs "$mddata")
src=$(cd "$src" && pwd)
report="$src/tools/report/md-report"

if ! "$python" -c 'import matplotlib' 2>/dev/null; then
  echo "SKIP: $python cannot import matplotlib (scripts/test.sh installs it" \
    "into the venv it passes as MD_TORCH_PYTHON)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The run.
"$mddata" markov --vocab 512 --tokens 50000 --seed 1 -o data/train.bin >/dev/null &&
  "$mddata" markov --vocab 512 --tokens 5000 --seed 2 -o data/val.bin >/dev/null ||
  { echo "FAIL: md-data"; exit 1; }
sed -E 's/^  every (10|250) steps \{$/  every 4 steps {/' "$src/models/gpt.mdl" >gpt.mdl
[[ $(grep -c '^  every 4 steps {$' gpt.mdl) -eq 2 ]] ||
  { echo "FAIL: models/gpt.mdl has no 'every 10 steps {' and 'every 250 steps {' to shorten"; exit 1; }
timeout 60 "$mdc" gpt.mdl -D layers=2 -D d=64 -D heads=4 -D seq=64 -D vocab=512 \
  --plan fsdp-full -o gpt.fb || { echo "FAIL: mdc"; exit 1; }
if ! timeout 120 "$mdrun" --ranks 2 --backend cpu --steps 8 --log-every 2 \
  --metrics m.jsonl --trace t.json gpt.fb >run.out 2>run.err; then
  echo "FAIL: mdrun: $(cat run.out run.err)"
  exit 1
fi

# The report.
if ! "$python" "$report" m.jsonl --trace t.json -o r.png --html r.html \
  --tensorboard tb >rep.out 2>rep.err; then
  echo "FAIL: md-report exited $?: $(cat rep.out rep.err)"
  exit 1
fi
grep -q Traceback rep.err && fail "a traceback: $(cat rep.err)"
grep -Eq '^md-report: m\.jsonl: 8 lines, steps 1-8; loss 6\.[0-9]+ at step 1, [0-9.]+ at step 8; val [0-9.]+ at step 8; mean [0-9,]+ tokens/s$' rep.out ||
  fail "the metrics summary: $(cat rep.out)"
grep -Eq '^md-report: t\.json, rank 0: 8 steps, [0-9.]+ ms/step: compute [0-9.]+ ms \([0-9]+%\), exposed comm [0-9.]+ ms .*, data reads .*, host .*, evaluation [0-9.]+ ms .*; comm overlapped by compute [0-9.]+ ms/step$' rep.out ||
  fail "the time split summary: $(cat rep.out)"
grep -Eq '^md-report: wrote r\.png \([0-9]+x[0-9]+, [0-9]+ KiB\)$' rep.out ||
  fail "no 'wrote r.png': $(cat rep.out)"
grep -q '^md-report: the log "train" repeats the progress loss' rep.err ||
  fail "no note on the train log: $(cat rep.err)"

"$python" - "$python" <<'PY' || fail "the outputs (above)"
import json, re, struct, sys
ok = True
def bad(msg):
    global ok
    print(msg)
    ok = False

# The PNG: its signature, the IHDR chunk first, a plausible size.
png = open("r.png", "rb").read()
if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
    bad(f"r.png is not a PNG: {png[:16]!r}")
else:
    w, h = struct.unpack(">II", png[16:24])
    if not (1000 <= w <= 1600 and 700 <= h <= 1600):
        bad(f"r.png is {w}x{h}, expected about 1200x1000")
    if not (20_000 < len(png) < 1_000_000):
        bad(f"r.png has {len(png)} bytes")
    if png[-12:-4] != b"\x00\x00\x00\x00IEND":
        bad(f"r.png does not end with an IEND chunk: {png[-12:]!r}")

# The metrics as mdrun wrote them.
rows = [json.loads(l) for l in open("m.jsonl")]
steps = [r["step"] for r in rows]
if steps != [1, 2, 3, 4, 5, 6, 7, 8]:
    bad(f"metrics steps {steps}")
val = [[r["step"], r["logs"]["val"]] for r in rows if "val" in r.get("logs", {})]
if [s for s, _ in val] != [4, 8]:
    bad(f"val logged at {val}")

# The HTML page: the picture inline, the series the picture draws.
page = open("r.html", encoding="utf-8").read()
if "data:image/png;base64," not in page:
    bad("r.html has no inline picture")
m = re.search(r'<script type="application/json" id="md-report-data">(.*?)</script>',
              page, re.S)
if not m:
    bad("r.html has no md-report-data")
    sys.exit(1)
d = json.loads(m.group(1))
for key in ("loss", "lr", "grad_norm", "tokens_per_s"):
    want = [[r["step"], r[key]] for r in rows]
    if d.get(key) != want:
        bad(f"r.html {key}: {d.get(key)}, expected {want}")
if d["logs"].get("val") != val:
    bad(f"r.html val: {d['logs'].get('val')}, expected {val}")
for s, v in val:
    if f"<td>{v:.6g}</td>" not in page:
        bad(f"r.html's table has no val {v:.6g}")

# The time split against the trace read here: the step slices of rank 0's
# host track give each step's wall time (to the next step's start, the
# last to the end of its hooks), the evaluate slices the evaluation time.
ev = json.load(open("t.json"))["traceEvents"]
xs = [e for e in ev if e["ph"] == "X" and e["pid"] == 0]
begin = {int(e["name"][5:]): e["ts"] for e in xs
         if e["tid"] == 2 and re.fullmatch(r"step \d+", e["name"])}
hooks = {int(e["name"][17:]): e["ts"] + e["dur"] for e in xs
         if e["tid"] == 2 and re.fullmatch(r"hooks after step \d+", e["name"])}
evals = [e for e in xs if e["cat"] == "evaluation"]
t = d.get("time_split", {})
if t.get("steps") != list(range(1, 9)):
    bad(f"time_split steps {t.get('steps')}")
    sys.exit(1)
parts = ["compute", "comm", "data", "host", "evaluation", "checkpoint"]
for i, s in enumerate(t["steps"]):
    wall = ((begin[s + 1] if s + 1 in begin else hooks[s]) - begin[s]) / 1000
    if abs(t["total"][i] - wall) > 0.01:
        bad(f"step {s}: total {t['total'][i]} ms, the trace's {wall:.4f}")
    got = sum(t[p][i] for p in parts)
    if abs(got - t["total"][i]) > 0.01:
        bad(f"step {s}: the parts add to {got}, not {t['total'][i]}")
    if min(t[p][i] for p in parts) < -1e-9:
        bad(f"step {s}: a negative part: {[t[p][i] for p in parts]}")
    if t["compute"][i] <= 0 or t["comm"][i] <= 0 or t["data"][i] <= 0:
        bad(f"step {s}: no compute, comm or data: "
            f"{[(p, t[p][i]) for p in parts]}")
    e_ms = sum(e["dur"] for e in evals
               if begin[s] <= e["ts"] < begin[s] + t["total"][i] * 1000) / 1000
    if abs(t["evaluation"][i] - e_ms) > 0.01 or (e_ms > 0) != (s in (4, 8)):
        bad(f"step {s}: evaluation {t['evaluation'][i]} ms, the trace's {e_ms}")
    if t["checkpoint"][i] != 0:
        bad(f"step {s}: a checkpoint save of {t['checkpoint'][i]} ms")

# TensorBoard: the event file's records (length, crc, Event, crc), read
# with the protobufs of the writer md-report found (tensorboardX, else
# TensorBoard's own under torch.utils.tensorboard), or its note of none.
try:
    from tensorboardX.proto import event_pb2
except ImportError:
    try:
        from tensorboard.compat.proto import event_pb2
    except ImportError:
        event_pb2 = None
if event_pb2 is None:
    note = open("rep.err").read()
    if "--tensorboard tb skipped: no TensorBoard writer is installed" not in note:
        bad(f"no TensorBoard writer and no note saying so: {note}")
else:
    import glob
    files = glob.glob("tb/events.out.tfevents.*")
    tags = {}
    for f in files:
        b, i = open(f, "rb").read(), 0
        while i < len(b):
            n = struct.unpack("<Q", b[i:i + 8])[0]
            e = event_pb2.Event()
            e.ParseFromString(b[i + 12:i + 12 + n])
            i += 12 + n + 4
            for v in e.summary.value:
                tags.setdefault(v.tag, []).append((e.step, v.simple_value))
    for tag, want in (("train/loss", [(r["step"], r["loss"]) for r in rows]),
                      ("logs/val", val)):
        got = tags.get(tag, [])
        if [s for s, _ in got] != [s for s, _ in want] or any(
                abs(a - b) > 1e-5 * abs(b) for (_, a), (_, b) in zip(got, want)):
            bad(f"tb {tag}: {got}, expected {want}")
    if len(tags.get("time_ms/compute", [])) != 8:
        bad(f"tb time_ms/compute: {tags.get('time_ms/compute')}")
sys.exit(0 if ok else 1)
PY

# Metrics alone, as another plan writes them: samples/s, no grad norm, a
# non-finite loss (null), logs only at a step without progress, a resumed
# run's repeated step (the later line wins).
cat >other.jsonl <<'EOF'
{"step": 1, "loss": 2.3, "lr": 0.001, "samples_per_s": 1500.5, "epoch": 0, "time": 0.1}
{"step": 10, "loss": null, "lr": 0.002, "samples_per_s": 1600, "epoch": 0, "time": 0.5}
{"step": 15, "logs": {"val": {"loss": 1.9, "acc": 0.4}}}
{"step": 20, "loss": 1.5, "lr": 0.003, "samples_per_s": 1700, "epoch": 0, "time": 1.0}
{"step": 20, "loss": 1.4, "lr": 0.003, "samples_per_s": 1650, "epoch": 0, "time": 1.0}
EOF
if "$python" "$report" other.jsonl --html other.html -o other.png >other.out 2>&1; then
  grep -q '"loss":\[\[1,2.3\],\[10,null\],\[20,1.4\]\]' other.html ||
    fail "other.html's loss: $(grep -o '"loss":[^]]*]]' other.html)"
  grep -q '"val acc":\[\[15,0.4\]\]' other.html || fail "other.html has no val acc"
  grep -q '"samples_per_s":\[\[1,1500.5\],' other.html || fail "other.html: no samples/s"
  [[ $(head -c 4 other.png | od -An -c | tr -d ' ') == '211PNG' ]] ||
    fail "other.png is not a PNG"
else
  fail "md-report other.jsonl: $(cat other.out)"
fi

# Bad input: exit 1, the file (and line) named, no traceback.
printf '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.9}\n{"step": 3, "loss"\n' >bad.jsonl
: >empty.jsonl
{ head -n 20 t.json; echo '{"ph": "X", "pid": 0, "tid": 0, "ts": 1.0, "dur'; } >broken.json
check_bad() { # check_bad 'MESSAGE' ARGS...: md-report ARGS exits 1 with MESSAGE
  local want=$1
  shift
  "$python" "$report" "$@" -o bad.png >bad.out 2>&1
  local rc=$?
  [[ $rc -eq 1 ]] || fail "md-report $*: exit $rc, expected 1: $(cat bad.out)"
  grep -qF -- "$want" bad.out || fail "md-report $*: not '$want': $(cat bad.out)"
  grep -q Traceback bad.out && fail "md-report $*: a traceback: $(cat bad.out)"
  [[ -e bad.png ]] && fail "md-report $*: wrote bad.png"
  rm -f bad.png
}
check_bad 'md-report: error: missing.jsonl: no such file' missing.jsonl
check_bad 'md-report: error: bad.jsonl:3:19: not JSON (' bad.jsonl
check_bad 'md-report: error: empty.jsonl: no steps' empty.jsonl
check_bad 'md-report: error: missing.json: no such file' m.jsonl --trace missing.json
check_bad 'md-report: error: broken.json:21:' m.jsonl --trace broken.json
check_bad 'md-report: error: t.json: no rank 7 in the trace (ranks: 0, 1)' m.jsonl --trace t.json --rank 7
check_bad 'md-report: error: m.jsonl:2: not a Chrome trace-event file' m.jsonl --trace m.jsonl

"$python" "$report" --help >help.out 2>&1 && grep -q -- '--trace TRACE' help.out ||
  fail "--help: $(cat help.out)"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "report: all checks passed"
