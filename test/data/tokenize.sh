#!/usr/bin/env bash
# md-tokenize (tools/data, Hugging Face tokenizers; exit 77 without them):
# trains a byte-level BPE tokenizer on text, writes training and held-out
# token files md reads, encodes more text with the saved tokenizer to the
# same ids, and the tiny GPT trains on them; bad input is exit 1 naming the
# file, a bad command line exit 2.
#
#   test/data/tokenize.sh PYTHON MDC MDRUN MODELS_DIR WORK_DIR
set -uo pipefail
usage='usage: tokenize.sh PYTHON MDC MDRUN MODELS_DIR WORK_DIR'
python=${1:?$usage}
mdc=${2:?$usage}
mdrun=${3:?$usage}
models=${4:?$usage}
work=${5:?$usage}
tool=$(cd "$(dirname "$0")/../.." && pwd)/tools/data/md-tokenize
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
mdc=$(abs "$mdc") mdrun=$(abs "$mdrun")
models=$(cd "$models" && pwd)
if ! "$python" -c 'import tokenizers' 2>/dev/null; then
  echo "skipped: $python cannot import tokenizers (scripts/test.sh installs it)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$python" - <<'PY'
import random
words = "the model trains on ranks and data shards its gradient and all reduce step loss falls".split()
for i in (1, 2, 3):
    random.seed(i)
    open(f"t{i}.txt", "w").write(" ".join(random.choice(words) for _ in range(4000)) + "\n")
PY

"$python" "$tool" --train-bpe 300 --save-tokenizer tok.json t1.txt t2.txt \
  -o data/train.bin --val data/val.bin --val-fraction 0.1 >train.out 2>&1 ||
  fail "training a tokenizer: $(cat train.out)"
grep -Eq '^md-tokenize: wrote data/train\.bin: [0-9,]+ uint16 tokens; vocabulary 300 \(mdc -D vocab=300\)$' train.out ||
  fail "the line: $(cat train.out)"
[[ -s tok.json && -s data/val.bin ]] || fail "no tokenizer or held-out file"
# The saved tokenizer gives the same ids for the same text.
"$python" "$tool" --tokenizer tok.json t1.txt t2.txt -o again.bin >again.out 2>&1 ||
  fail "the saved tokenizer: $(cat again.out)"
cat data/train.bin data/val.bin | cmp -s - again.bin ||
  fail "the saved tokenizer encodes the text to other ids"
"$python" - <<'PY' || fail "ids outside the vocabulary"
import array
t = array.array("H"); t.frombytes(open("again.bin", "rb").read())
assert len(t) > 1000 and max(t) < 300, (len(t), max(t))
PY

# The tiny GPT trains on them (and the launcher's data check accepts them).
timeout 60 "$mdc" "$models/gpt.mdl" -D layers=1 -D d=32 -D heads=2 -D seq=16 \
  -D vocab=300 --plan ddp -o gpt.fb || fail "mdc"
timeout 60 "$mdrun" --backend cpu --ranks 2 --threads 1 --steps 3 --log-every 0 gpt.fb \
  >run.out 2>&1 || fail "training on the tokens: $(cat run.out)"

# Bad input and bad command lines.
printf '\xff\xfe bad' >bad.txt
"$python" "$tool" --tokenizer tok.json bad.txt -o x.bin >bad.out 2>&1
[[ $? -eq 1 ]] && grep -q '^md-tokenize: error: bad.txt: not UTF-8 text' bad.out ||
  fail "bad UTF-8: $(cat bad.out)"
"$python" "$tool" --tokenizer tok.json missing.txt -o x.bin >missing.out 2>&1
[[ $? -eq 1 ]] && grep -q '^md-tokenize: error: missing.txt: No such file' missing.out ||
  fail "a missing file: $(cat missing.out)"
"$python" "$tool" --tokenizer t1.txt t1.txt -o x.bin >nottok.out 2>&1
[[ $? -eq 1 ]] && grep -q '^md-tokenize: error: t1.txt: not a tokenizer file' nottok.out ||
  fail "not a tokenizer: $(cat nottok.out)"
"$python" "$tool" t1.txt -o x.bin >usage.out 2>&1
[[ $? -eq 2 ]] || fail "no tokenizer given: not exit 2: $(cat usage.out)"
grep -q Traceback ./*.out && fail "a traceback: $(grep -l Traceback ./*.out)"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "tokenize.sh: all checks passed"
