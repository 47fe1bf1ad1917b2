# Shared by the bench scripts (sourced, not run).

# bench_workdir NAME KEEP: sets `work` to KEEP (reused only when empty or
# made by an earlier run: its .md-bench marker) or, without KEEP, to a
# temporary directory removed when the script exits.
bench_workdir() {
  local name=$1 keep=$2
  if [[ -n $keep ]]; then
    if [[ -d $keep && -n $(ls -A "$keep") && ! -e $keep/.md-bench ]]; then
      echo "$name: --keep $keep: not empty and not an earlier bench directory" >&2
      exit 2
    fi
    work=$keep
    mkdir -p "$work" && touch "$work/.md-bench"
  else
    work=$(mktemp -d "${TMPDIR:-/tmp}/md-$name.XXXXXX")
    # shellcheck disable=SC2064 # expand now: `work` is global
    trap "rm -rf '$work'" EXIT
  fi
}
