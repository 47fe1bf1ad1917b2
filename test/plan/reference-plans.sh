#!/usr/bin/env bash
# The plans mdc writes for every model of the repository under every preset
# (and a few with W pinned) against their SHA-256 in reference-plans.sha256:
# a change to the compiler that changes a plan's bytes fails here, so a
# refactoring proves it changed none, and a change meant to change plans
# says so by updating the list:
#   test/plan/reference-plans.sh build/bin/mdc . --update
# Plans are compiled from paths relative to the source tree, so the
# locations they carry are the same in every checkout.
#   reference-plans.sh MDC SOURCE_DIR [--update]
set -euo pipefail
mdc=$(realpath "$1")
src=$2
update=${3:-}
list=test/plan/reference-plans.sha256
cd "$src"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

presets=(single ddp zero1 fsdp-grad-op fsdp-full fsdp-hybrid)
cases=()
for model in models/*.mdl test/mdrun/models/*.mdl; do
  for preset in "${presets[@]}"; do
    cases+=("$model --plan $preset")
  done
done
# W pinned: the bindings the compiler checks and the sizes it then fixes.
cases+=("models/mlp.mdl --plan fsdp-full --world-size 2"
        "models/gpt.mdl --plan ddp --world-size 4"
        "test/mdrun/models/gpt.mdl --plan zero1 --world-size 2")

: >"$work/now"
for c in "${cases[@]}"; do
  # shellcheck disable=SC2086
  if ! "$mdc" $c -o "$work/plan.fb" 2>"$work/err"; then
    echo "reference-plans: mdc $c failed:" >&2
    cat "$work/err" >&2
    exit 1
  fi
  echo "$(sha256sum <"$work/plan.fb" | cut -d' ' -f1)  $c" >>"$work/now"
done

if [[ $update == --update ]]; then
  cp "$work/now" "$list"
  echo "reference-plans: wrote $list (${#cases[@]} plans)"
  exit 0
fi
if ! diff -u "$list" "$work/now" >"$work/diff"; then
  echo "reference-plans: plans differ from $list (- the reference, + now):" >&2
  cat "$work/diff" >&2
  echo "reference-plans: if the change is meant, run" \
       "test/plan/reference-plans.sh MDC . --update and say why in the commit" >&2
  exit 1
fi
echo "reference-plans: ${#cases[@]} plans byte-identical to $list"
