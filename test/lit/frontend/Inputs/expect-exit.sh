#!/bin/sh
# expect-exit.sh CODE COMMAND [ARG...]: runs COMMAND, letting its output
# through, and succeeds exactly when it exits with status CODE. lit's `not`
# only tells zero from non-zero; mdc's exit codes (1 user error, 2 usage
# error) need this.
want=$1
shift
"$@"
got=$?
if [ "$got" -ne "$want" ]; then
  echo "expect-exit: '$*' exited with $got, expected $want" >&2
  exit 1
fi
exit 0
