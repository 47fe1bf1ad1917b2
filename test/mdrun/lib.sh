# lib.sh - what the end-to-end scripts of test/mdrun share; they source it.
#
# md_setup MDC MDRUN WORK_DIR: sets `mdc` and `mdrun` to absolute paths (the
# scripts run their jobs from other directories), empties WORK_DIR and
# enters it, and starts the count of failed checks that `fail` adds to.
md_setup() {
  mdc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") || exit 1
  mdrun=$(cd "$(dirname "$2")" && pwd)/$(basename "$2") || exit 1
  rm -rf "$3" && mkdir -p "$3" && cd "$3" || exit 1
  failures=0
}

# fail TEXT...: one failed check, said at once; the script goes on to the
# next and exits non-zero at its end.
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
