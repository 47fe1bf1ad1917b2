#!/usr/bin/env bash
# The data checked before launch (docs/runtime.md, "Data"): the launcher
# opens every data source of the plan (the training data and each
# evaluation's) before it starts a rank, and refuses, naming the file and
# the counts, a missing file, a 32-bit token file that the model's
# vocabulary would read as uint16, and ids outside the vocabulary; no rank
# starts (no banner). `md-data convert` turns the 32-bit file into one that
# trains; --skip-data-check starts the job anyway.
#
#   test/mdrun/data-check.sh MDC MDRUN MD_DATA PYTHON3 MODELS_DIR WORK_DIR
set -uo pipefail
usage='usage: data-check.sh MDC MDRUN MD_DATA PYTHON3 MODELS_DIR WORK_DIR'
mdc=${1:?$usage}
mdrun=${2:?$usage}
mddata=${3:?$usage}
python=${4:?$usage}
models=${5:?$usage}
work=${6:?$usage}
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
mdc=$(abs "$mdc") mdrun=$(abs "$mdrun") mddata=$(abs "$mddata")
models=$(cd "$models" && pwd)
rm -rf "$work" && mkdir -p "$work/data" && cd "$work" || exit 1

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
has() { grep -Eq -- "$2" "$1" || fail "$1 does not match /$2/:"$'\n'"$(cat "$1")"; }

"$mddata" markov --vocab 512 --tokens 20000 --seed 1 -o data/train.bin >/dev/null || exit 1
"$mddata" markov --vocab 512 --tokens 4000 --seed 2 -o data/val.bin >/dev/null || exit 1
# The same ids as 32-bit integers, and a uint16 file with two bad ids.
"$python" - <<'PY' || exit 1
import array
t = array.array("H")
with open("data/train.bin", "rb") as f:
    t.frombytes(f.read())
array.array("I", t).tofile(open("data/wide.bin", "wb"))
t[1000] = 600
t[5000] = 700
t.tofile(open("data/bad.bin", "wb"))
PY

# plan NAME TRAIN VAL: the tiny GPT reading TRAIN, evaluating on VAL.
plan() {
  sed -e "s|tokens(\"data/train.bin\")|tokens(\"$2\")|" \
    -e "s|tokens(\"data/val.bin\")|tokens(\"$3\")|" "$models/gpt.mdl" >"$1.mdl"
  timeout 60 "$mdc" "$1.mdl" -D layers=1 -D d=32 -D heads=2 -D seq=16 -D vocab=512 \
    --plan ddp -o "$1.fb" || fail "mdc $1"
}
run=(--backend cpu --ranks 2 --threads 1 --steps 2 --log-every 0)

# refused NAME PATTERN ARGS...: exit 1, the pattern on stderr, no rank started.
refused() {
  local name=$1 pattern=$2
  shift 2
  timeout 60 "$mdrun" "${run[@]}" "$@" >"$name.out" 2>"$name.err"
  local rc=$?
  [[ $rc -eq 1 ]] || fail "$name: exit $rc, expected 1: $(cat "$name.err")"
  has "$name.err" "$pattern"
  grep -q '^mdrun: model' "$name.out" && fail "$name: a rank started: $(cat "$name.out")"
}

plan wide data/wide.bin data/val.bin
refused wide '^mdrun: error: data/wide\.bin looks like 32-bit tokens: read as the uint16 tokens a vocabulary of 512 takes, 20000 of its 20000 tokens at odd positions are 0 \(of 40000 scanned\); convert it: md-data convert --from uint32 data/wide\.bin -o FILE$' wide.fb

plan bad data/bad.bin data/val.bin
refused bad '^mdrun: error: data/bad\.bin: 2 of 20000 uint16 tokens scanned are outside the model.s vocabulary of 512 \(the first at position 1000 is 600, the largest 700\)$' bad.fb

plan missing data/missing.bin data/val.bin
refused missing '^mdrun: error: data/missing\.bin: cannot open' missing.fb

# An evaluation's data is checked too.
plan noval data/train.bin data/noval.bin
refused noval '^mdrun: error: data/noval\.bin: cannot open' noval.fb

# md-data convert makes the 32-bit file train, to the bits of the original.
"$mddata" convert --from uint32 data/wide.bin -o data/converted.bin >convert.out ||
  fail "md-data convert: $(cat convert.out)"
has convert.out '^md-data: wrote data/converted\.bin: 20,000 uint16 tokens \(40,000 bytes\) from data/wide\.bin \(uint32\), ids 0 to [0-9]+, for a vocabulary of [0-9]+$'
cmp -s data/converted.bin data/train.bin || fail "the converted file differs from the original"
plan converted data/converted.bin data/val.bin
timeout 60 "$mdrun" "${run[@]}" converted.fb >converted.out 2>&1 || fail "converted: $(cat converted.out)"

# --skip-data-check: the ranks start and read the file as it is.
timeout 60 "$mdrun" "${run[@]}" --skip-data-check wide.fb >skip.out 2>&1 ||
  fail "--skip-data-check: $(cat skip.out)"
has skip.out '^mdrun: model '

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "data-check.sh: all checks passed"
