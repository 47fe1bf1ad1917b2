#!/usr/bin/env bash
# mdrun --inspect on example plans (written by md-plan-examples) and on
# corrupted copies: a report and exit 0 for good plans, one error line and
# exit 1 for bad files and impossible world sizes, exit 2 for bad command
# lines. Never a signal. (Training: test/mdrun/launch.sh.)
#
#   test/mdrun/inspect.sh MDRUN MD_PLAN_EXAMPLES WORK_DIR
set -uo pipefail
mdrun=${1:?usage: inspect.sh MDRUN MD_PLAN_EXAMPLES WORK_DIR}
examples=${2:?}
mdrun=$(cd "$(dirname "$mdrun")" && pwd)/$(basename "$mdrun")
work=${3:?}
rm -rf "$work" && mkdir -p "$work" || exit 1
"$examples" "$work" || exit 1

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect STATUS PATTERN ARGS...: runs mdrun ARGS, checks the exit status and
# that stdout+stderr match the extended regex PATTERN.
expect() {
  local status=$1 pattern=$2
  shift 2
  local out rc
  out=$("$mdrun" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $status ]]; then
    fail "mdrun $*: exit $rc, expected $status"$'\n'"$out"
  elif ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "mdrun $*: output does not match /$pattern/"$'\n'"$out"
  fi
  if [[ $status -ne 0 ]]; then
    local lines
    lines=$("$mdrun" "$@" 2>&1 >/dev/null | grep -c '^mdrun: error: ')
    [[ $lines -eq 1 ]] || fail "mdrun $*: expected one 'mdrun: error:' line, got $lines"
  fi
}

good=$work/tiny-mlp.fb
expect 0 'model +tiny_mlp' --inspect "$good"
# The plan's own checksum, which the loader checked.
expect 0 'checksum +XXH3-64 [0-9a-f]{16}, verified' --inspect "$good"
expect 0 '"checksum": "[0-9a-f]{16}"' --inspect "$good" --format=json
expect 0 'accumulation steps 2 at W = 2' --inspect "$good"
expect 0 'reduce_scatter +1 +848 B +424 B' --inspect "$good"
expect 0 'every 50 steps: evaluate "data/val.npy"' --inspect "$good"
expect 0 'accumulation steps 1 at W = 4' --inspect "$good" --world-size 4
# The memory section (the same bytes as mdc --explain's: MemoryFormat.h),
# and where transient memory peaks, with the program.
expect 0 'memory per rank at W = 2, at the peak' --inspect "$good"
expect 0 'peak +[0-9.]+ K?i?B +\([0-9]+ bytes\)' --inspect "$good"
expect 0 'transient peak at blocks\[[0-9]+\]\.instructions\[[0-9]+\]' --inspect "$good"
expect 0 '"memory_per_rank": \{' --inspect "$good" --format=json
expect 0 '"transient_peak_at": \{' --inspect "$good" --format=json
expect 0 '"accumulation_steps": 4' --inspect "$good" --format json --world-size 1
expect 0 'world size +2 \(pinned by the plan\)' --inspect "$work/tiny-mlp-pinned-2.fb"
expect 0 'model +minimal' --inspect "$work/minimal.fb"

# Bad files: truncated, a byte changed, another identifier, empty,
# missing, a directory.
python3 - "$good" "$work/changed.fb" <<'PY'
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
b[len(b) // 2] ^= 0x20
open(sys.argv[2], 'wb').write(b)
PY
expect 1 'changed.fb: checksum: the plan says XXH3-64 [0-9a-f]{16}, its [0-9]+ bytes hash to [0-9a-f]{16}: they changed after mdc wrote them \(a damaged or edited file\); compile it again' --inspect "$work/changed.fb"
head -c 1000 "$good" >"$work/truncated.fb"
expect 1 'truncated.fb: checksum: the plan says XXH3-64 [0-9a-f]{16}, its 1000 bytes hash to [0-9a-f]{16}: they changed after mdc wrote them' --inspect "$work/truncated.fb"
cp "$good" "$work/identifier.fb"
printf 'JUNK' | dd of="$work/identifier.fb" bs=1 seek=4 conv=notrunc status=none
expect 1 "not a plan file: file identifier 'JUNK', expected 'MDP1'" --inspect "$work/identifier.fb"
: >"$work/empty.fb"
expect 1 'empty.fb: not a plan file: 0 bytes' --inspect "$work/empty.fb"
expect 1 'missing.fb: cannot open' --inspect "$work/missing.fb"
expect 1 'cannot read: Is a directory' --inspect "$work"

# World sizes the plan cannot run at.
expect 1 'global_batch 16 is not a multiple of micro_batch 4 x world size 3' \
  --inspect "$good" --world-size 3
expect 1 'pinned to world size 2 and cannot run at 4' \
  --inspect "$work/tiny-mlp-pinned-2.fb" --world-size 4

# Command lines.
expect 2 'no plan file given' --gpus 2
expect 2 "unknown option '--frobnicate'" --frobnicate "$good"
expect 2 '--world-size only goes with --inspect' "$good" --world-size 2
expect 2 '--inspect needs a value' --inspect
expect 2 '--world-size zero: not a positive integer' --inspect "$good" --world-size zero
expect 2 '--format xml: expected text or json' --inspect "$good" --format=xml
expect 2 "--inspect takes no other arguments, got '--gpus'" --inspect "$good" --gpus 2
out=$("$mdrun" --help) && grep -q '^       mdrun --inspect PLAN' <<<"$out" || fail "mdrun --help"

# The example in docs/plan-format.md is this report, word for word, up to
# its last section, which says how this machine's CPU backend would run
# the plan (it differs between machines; its form is checked here).
doc=$(cd "$(dirname "$0")/../.." && pwd)/docs/plan-format.md
(cd "$work" && "$mdrun" --inspect tiny-mlp.fb) >"$work/inspect-all.txt"
sed '/^cpu backend /,$d' "$work/inspect-all.txt" | sed '$d' >"$work/inspect.txt"
grep -Eq '^cpu backend   on this machine: isa (sse41|avx2|avx512|avx512_bf16|amx)( \(MD_CPU_ISA=[a-z0-9_]+; the CPU has [a-z0-9_]+\))?(, oneDNN [a-z0-9_]+)?; vector math [a-z0-9+]+$' "$work/inspect-all.txt" ||
  fail "--inspect's cpu backend line: $(grep -A4 '^cpu backend' "$work/inspect-all.txt")"
for t in f32 bf16 f16; do
  grep -Eq "^  gemm $t +[^ ]" "$work/inspect-all.txt" || fail "--inspect has no gemm $t line"
done
"$mdrun" --inspect "$good" --format=json >"$work/inspect.json" 2>&1 &&
  grep -q '"cpu_backend": {' "$work/inspect.json" || fail "--inspect --format=json has no cpu_backend"
sed -n '/^    plan file     tiny-mlp.fb/,/^      every 100 steps/p' "$doc" | sed 's/^    //' \
  >"$work/doc-example.txt"
diff -u "$work/doc-example.txt" "$work/inspect.txt" ||
  fail "docs/plan-format.md's mdrun --inspect example is out of date (diff above)"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "inspect.sh: all checks passed"
