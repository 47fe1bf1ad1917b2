#!/usr/bin/env bash
# Per-rank file names in the recipe (docs/language.md, `exists`), end to end
# on the CPU backend at W = 2 with test/mdrun/models/mlp.mdl and the hook
# `if any(exists("stop.{rank}-of-{world_size}")) { stop }`:
#
# 1. no such file: the run trains its 3 steps;
# 2. stop.1-of-2 (rank 1's name) exists: every rank stops after step 1, so
#    rank 1 expanded {rank} to 1 and {world_size} to 2;
# 3. stop.0-of-2 exists instead: the same, through rank 0;
# 4. stop.{rank}-of-{world_size} (the unexpanded name) exists: not a match,
#    the run trains its 3 steps.
#
#   test/mdrun/rank-paths.sh MDC MDRUN WORK_DIR
set -uo pipefail
usage="usage: rank-paths.sh MDC MDRUN WORK_DIR"
mdc=${1:?$usage}
mdrun=${2:?$usage}
work=${3:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
source "$(dirname "$0")/lib.sh"
md_setup "$mdc" "$mdrun" "$work"
mkdir -p run || exit 1

awk -v hooks='  if any(exists("stop.{rank}-of-{world_size}")) { stop }' \
  '{ print } /^train {/ { print hooks }' "$here/models/mlp.mdl" >paths.mdl
if ! timeout 60 "$mdc" paths.mdl --plan fsdp-full --world-size 2 \
  -o paths.fb 2>mdc.err; then
  echo "FAIL: mdc paths.mdl: $(cat mdc.err)"
  exit 1
fi

# trial NAME FILE STEPS: with FILE (or none) in run/, mdrun --steps 3 must
# exit 0 after STEPS progress lines.
trial() {
  local name=$1 file=$2 want=$3
  rm -f run/stop.*
  [[ -n $file ]] && touch "run/$file"
  (cd run && timeout 120 "$mdrun" --backend cpu --threads 1 --ranks 2 \
    --log-every 1 --steps 3 ../paths.fb >"../$name.out" 2>"../$name.err")
  local status=$?
  local steps
  steps=$(grep -c '^step [0-9]*/3 ' "$name.out")
  [[ $status -eq 0 ]] || fail "$name: mdrun exited $status: $(tail -3 "$name.err")"
  [[ $steps -eq $want ]] || fail "$name: $steps steps, expected $want"
  echo "$name: ${file:-no file}: $steps step(s)"
}

trial none "" 3
trial rank1 "stop.1-of-2" 1
grep -q '^step 1: stopping$' rank1.out || fail "rank1: no 'step 1: stopping' line"
trial rank0 "stop.0-of-2" 1
trial literal 'stop.{rank}-of-{world_size}' 3

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS: per-rank file names"
