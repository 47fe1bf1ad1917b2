# Shared by the bench scripts (sourced, not run).

# bench_usage SCRIPT [CODE]: prints SCRIPT's header comment (its --help)
# and exits with CODE (default 0).
bench_usage() {
  sed -n '2,/^[^#]/{/^#/{s/^# \{0,1\}//;p}}' "$1"
  exit "${2:-0}"
}

# bench_options SCRIPT --OPTION=VAR=DEFAULT... -- ARGS...: sets each
# variable VAR to DEFAULT, then to the value after --OPTION where ARGS give
# one; -h/--help prints SCRIPT's usage; an unknown argument or an option
# without its value is an error (exit 2). The benches whose options all take
# a value declare them this way, one place per option.
bench_options() {
  local script=$1 name spec
  shift
  local -A vars=()
  while [[ $# -gt 0 && $1 != -- ]]; do
    spec=${1#*=}
    vars[${1%%=*}]=${spec%%=*}
    printf -v "${spec%%=*}" '%s' "${spec#*=}"
    shift
  done
  shift
  name=$(basename "$script")
  while [[ $# -gt 0 ]]; do
    case $1 in
    -h | --help) bench_usage "$script" ;;
    esac
    if [[ -z ${vars[$1]:-} ]]; then
      echo "$name: unknown argument '$1'" >&2
      exit 2
    fi
    if [[ $# -lt 2 || -z $2 ]]; then
      echo "$name: $1 needs a value" >&2
      exit 2
    fi
    printf -v "${vars[$1]}" '%s' "$2"
    shift 2
  done
}

# bench_rewrite_train FILE TRAIN_BLOCK: prints FILE with its top-level
# train { ... } block replaced by TRAIN_BLOCK, so a bench runs a model's
# network under its own batch and data settings.
bench_rewrite_train() {
  awk -v train="$2" '
    /^train \{/ { skipping = 1; depth = 0 }
    skipping {
      n = gsub(/\{/, "{"); m = gsub(/\}/, "}"); depth += n - m
      if (depth == 0) { skipping = 0; print train }
      next
    }
    { print }' "$1"
}

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
