#!/usr/bin/env bash
# Sharded checkpoints loaded by mdrun --resume (docs/runtime.md, "Resuming"),
# on the CPU backend with plans mdc compiles from test/mdrun/models/ (each
# given a `save checkpoint(sharded, "ckpt")` every 4 steps):
#
# 1. Bitwise resume at W = 2: 12 steps in one go, versus 8 steps then
#    --resume auto to step 12, give byte-identical --save-final files (cmp)
#    for the MLP (AdamW) under ddp and fsdp-full and the tiny GPT (SGD with
#    momentum) under ddp and fsdp-full; the resumed run's banner names the
#    checkpoint and its --metrics continue the first run's, together the
#    uninterrupted run's numbers.
# 2. Resharding: the MLP's fsdp-full checkpoint of W = 2 loads at W = 1 and
#    W = 4 (fsdp-full), under ddp at W = 2 and under fsdp-hybrid (shard
#    groups of 2) at W = 4, with weights right after loading equal bit for
#    bit to those saved; training then continues. Resumed under zero1 (at
#    one precision the presets train alike), it ends with fsdp-full's
#    weights. The ddp checkpoint (f32 parameters) loads under fsdp-full at
#    W = 4 and fsdp-grad-op at W = 2, their bf16 working copies cast from
#    the f32 masters.
# 3. Refusals naming the file or tensor: a corrupt, a truncated and a
#    missing rank file, a foreign or edited meta.json, another model (a tensor of
#    another shape), another optimizer (a state the plan has none of, a
#    state the checkpoint lacks), a full checkpoint given to --resume; a dead save's
#    temporary directory is never resumed from and is removed by the next
#    save; --resume auto without a checkpoint starts fresh in one line,
#    and passes over a damaged newest checkpoint for the one before (with
#    every one damaged, it starts fresh), also one whose meta.json has any
#    field edited (step, id, dtype, shape, offset); dead saves' temporaries,
#    a full checkpoint's file too, are removed by the next save and by
#    --resume auto.
# 4. --init: the weights saved at step 8 (W = 2, fsdp-full) start a ddp run
#    at W = 1 bit for bit, which trains on, also from a file whose 2-D
#    weights are stored transposed, through a map's `transpose` rules; a file with a tensor the model
#    lacks or of another shape is refused naming it, and so is --init with
#    --resume. --evaluate on one rank gives the held-out loss the W = 2 run
#    logged (within 1e-5), and is refused for a plan without evaluate.
# 5. kill -9 of a random rank at a random time in a run that saves every 4
#    steps, then --resume auto: the final weights are byte-identical to an
#    uninterrupted run's (a few trials).
# 6. Two launchers ("nodes") whose save directories differ: the save fails
#    before publishing, naming the rank whose file rank 0 cannot see; a
#    resume whose meta.json node 1 cannot read fails, rank 0 naming rank 1.
#
#   test/mdrun/resume.sh MDC MDRUN PYTHON3 WORK_DIR
set -uo pipefail
usage="usage: resume.sh MDC MDRUN PYTHON3 WORK_DIR"
mdc=${1:?$usage}
mdrun=${2:?$usage}
python=${3:?$usage}
work=${4:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
mdc=$(cd "$(dirname "$mdc")" && pwd)/$(basename "$mdc")
mdrun=$(cd "$(dirname "$mdrun")" && pwd)/$(basename "$mdrun")
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$work" || exit 1

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
compare() { "$python" "$here/stcompare.py" "$@"; }

# The test models: test/mdrun/models/MODEL.mdl saving a sharded checkpoint
# to ckpt/ every 4 steps; mlp-hybrid.mdl adds a hybrid plan with shard
# groups of 2 (which only W = 2, 4, ... can pin).
for model in mlp gpt; do
  sed '/^train {/a\  every 4 steps { save checkpoint(sharded, "ckpt") }' \
    "$here/models/$model.mdl" >"$model.mdl"
done
cp mlp.mdl mlp-hybrid.mdl
printf '\nplan hybrid2 extends fsdp-hybrid {\n  shard = hybrid(shard_group = 2)\n}\n' >>mlp-hybrid.mdl

# compile OUT MODEL W PLAN [ARGS...]
compile() {
  local out=$1 model=$2 w=$3 plan=$4
  shift 4
  if ! timeout 60 "$mdc" "$model.mdl" --plan "$plan" --world-size "$w" "$@" \
    -o "$out" 2>mdc-err.txt; then
    fail "mdc $model.mdl --plan $plan --world-size $w $*:"$'\n'"$(cat mdc-err.txt)"
    return 1
  fi
}

# run DIR NAME W PLAN ARGS...: mdrun in DIR (its ckpt/ is DIR/ckpt), one
# BLAS thread per rank, a 120 s limit; stdout in NAME.out, stderr in
# NAME.err. Returns mdrun's status.
run() {
  local dir=$1 name=$2 w=$3 plan=$4
  shift 4
  mkdir -p "$dir"
  (cd "$dir" && timeout 120 "$mdrun" --backend cpu --threads 1 --ranks "$w" \
    "$@" "$work/$plan" >"$name.out" 2>"$name.err")
}

# train DIR NAME W PLAN ARGS...: run, which must succeed quietly.
train() {
  local dir=$1 name=$2
  if ! run "$@"; then
    fail "$name: mdrun ${*:3} failed:"$'\n'"$(tail -n 20 "$dir/$name.out" "$dir/$name.err")"
    return 1
  fi
  [[ -s $dir/$name.err ]] && fail "$name: mdrun wrote to stderr:"$'\n'"$(cat "$dir/$name.err")"
  return 0
}

# The numbers of a metrics file, without throughput and time.
numbers() {
  sed -E 's/, "(samples|tokens)_per_s": [^,}]*//; s/, "step_s": [^,}]*//; s/, "time": [^,}]*//' "$1"
}

# ---------------------------------------------------------------------------
# 1. Bitwise resume at W = 2.
# ---------------------------------------------------------------------------
for model in mlp gpt; do
  for plan in ddp fsdp-full; do
    name=$model-$plan
    compile "$name.fb" "$model" 2 "$plan" || continue
    train "$name/whole" whole 2 "$name.fb" --steps 12 --log-every 4 \
      --metrics m.jsonl --save-final final.safetensors || continue
    train "$name/split" first 2 "$name.fb" --steps 8 --log-every 4 \
      --metrics m.jsonl || continue
    train "$name/split" second 2 "$name.fb" --steps 12 --log-every 4 \
      --metrics m.jsonl --resume auto --save-final final.safetensors || continue
    grep -Eqx 'mdrun: resumed from ckpt/step_00000008 \(step 8, saved at 2 ranks under plan '"$plan"'; rank 0 read [0-9.]+ (B|KiB|MiB) of the checkpoint'"'"'s [0-9.]+ (B|KiB|MiB); loaded in [0-9.]+ s\)' \
      "$name/split/second.out" ||
      fail "$name: the banner does not name the checkpoint:"$'\n'"$(grep '^mdrun:' "$name/split/second.out")"
    cmp -s "$name/whole/final.safetensors" "$name/split/final.safetensors" ||
      fail "$name: 8 steps + resume to 12 differ from 12 steps:"$'\n'"$(compare --bitwise "$name/whole/final.safetensors" "$name/split/final.safetensors")"
    diff <(numbers "$name/whole/m.jsonl") <(numbers "$name/split/m.jsonl") >diff.txt ||
      fail "$name: the resumed run's metrics do not continue the first's:"$'\n'"$(cat diff.txt)"
  done
done

# ---------------------------------------------------------------------------
# 2. Resharding the MLP's fsdp-full checkpoint of W = 2.
# ---------------------------------------------------------------------------
saved=$work/mlp-fsdp-full/split/ckpt/step_00000008
if [[ -d $saved ]]; then
  compile mlp-fsdp-full-8.fb mlp 2 fsdp-full
  train at8 at8 2 mlp-fsdp-full-8.fb --steps 8 --log-every 0 \
    --save-final at8.safetensors
  for target in "fsdp-full 1" "fsdp-full 4" "ddp 2" "hybrid2 4"; do
    read -r plan w <<<"$target"
    name=reshard-$plan-$w
    model=mlp
    [[ $plan == hybrid2 ]] && model=mlp-hybrid
    compile "$name.fb" "$model" "$w" "$plan" || continue
    # Loaded and saved without a step: the weights saved at W = 2.
    train "$name" loaded "$w" "$name.fb" --steps 8 --log-every 0 \
      --resume "$saved" --save-final loaded.safetensors || continue
    compare --bitwise at8/at8.safetensors "$name/loaded.safetensors" >cmp.txt ||
      fail "$plan at W = $w: the weights after loading differ from those saved at W = 2:"$'\n'"$(cat cmp.txt)"
    train "$name" continued "$w" "$name.fb" --steps 12 --log-every 4 \
      --resume "$saved" || continue
    grep -Eq '^step 12/12  loss [0-9.]+ ' "$name/continued.out" ||
      fail "$plan at W = $w: training did not continue:"$'\n'"$(tail -n 5 "$name/continued.out")"
  done
  # Each rank reads only the ranges it holds: rank 0 of fsdp-full at W = 4
  # reads at most a third of what W = 1's one rank reads (a quarter, and
  # what its working copy casts from the masters).
  bytesRead() {
    sed -nE 's/^mdrun: resumed from .*; rank 0 read ([0-9.]+) (B|KiB|MiB) of .*/\1 \2/p' "$1" |
      awk '{ print $1 * ($2 == "MiB" ? 1048576 : $2 == "KiB" ? 1024 : 1) }'
  }
  one=$(bytesRead reshard-fsdp-full-1/loaded.out)
  four=$(bytesRead reshard-fsdp-full-4/loaded.out)
  if [[ -z $one || -z $four ]] || ! awk -v a="$four" -v b="$one" 'BEGIN { exit !(a * 3 <= b) }'; then
    fail "rank 0 at W = 4 read ${four:-?} bytes, at W = 1 ${one:-?}: not at most a third"
  fi
  # Across presets at one precision (bf16 parameters, f32 masters), which
  # train bit for bit alike: fsdp-full's step 8 resumed under zero1 ends
  # where fsdp-full's 12 steps do.
  compile mlp-zero1.fb mlp 2 zero1 &&
    train across across 2 mlp-zero1.fb --steps 12 --log-every 0 \
      --resume "$saved" --save-final final.safetensors &&
    { compare --bitwise mlp-fsdp-full/whole/final.safetensors across/final.safetensors >cmp.txt ||
      fail "fsdp-full resumed under zero1 differs from fsdp-full:"$'\n'"$(cat cmp.txt)"; }
else
  fail "no checkpoint $saved to reshard"
fi
# The ddp checkpoint (f32 parameters, no bf16 working copy saved) under
# fsdp-full at W = 4 and fsdp-grad-op at W = 2, whose bf16 working copies
# are cast from the saved f32 master weights: the weights right after
# loading are ddp's bit for bit, and training continues.
ddpsaved=$work/mlp-ddp/split/ckpt/step_00000008
if [[ -d $ddpsaved ]]; then
  train ddp8 loaded 2 mlp-ddp.fb --steps 8 --log-every 0 --resume "$ddpsaved" \
    --save-final loaded.safetensors
  for target in "fsdp-full 4" "fsdp-grad-op 2"; do
    read -r plan w <<<"$target"
    name=from-ddp-$plan-$w
    compile "$name.fb" mlp "$w" "$plan" || continue
    train "$name" loaded "$w" "$name.fb" --steps 8 --log-every 0 \
      --resume "$ddpsaved" --save-final loaded.safetensors || continue
    compare --bitwise ddp8/loaded.safetensors "$name/loaded.safetensors" >cmp.txt ||
      fail "ddp's checkpoint under $plan at W = $w: the weights after loading differ:"$'\n'"$(cat cmp.txt)"
    train "$name" continued "$w" "$name.fb" --steps 12 --log-every 4 \
      --resume "$ddpsaved" &&
      { grep -Eq '^step 12/12  loss [0-9.]+ ' "$name/continued.out" ||
        fail "ddp's checkpoint under $plan at W = $w: training did not continue:"$'\n'"$(tail -n 5 "$name/continued.out")"; }
  done
else
  fail "no checkpoint $ddpsaved to reshard"
fi

# ---------------------------------------------------------------------------
# 3. Refusals.
# ---------------------------------------------------------------------------
# refused NAME PATTERN W PLAN ARGS...: mdrun fails, its stderr matches PATTERN.
refused() {
  local name=$1 pattern=$2
  shift 2
  if run refusals "$name" "$@"; then
    fail "$name: mdrun $* succeeded"
  elif ! grep -Eq -- "$pattern" "refusals/$name.err"; then
    fail "$name: expected /$pattern/ in:"$'\n'"$(cat "refusals/$name.err")"
  fi
}
if [[ -d $saved ]]; then
  plan=mlp-fsdp-full.fb
  damaged() { rm -rf "$work/d" && cp -r "$saved" "$work/d"; }
  damaged
  "$python" -c "import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[-1] ^= 1; open(p, 'wb').write(b)" d/rank_00001.safetensors
  refused corrupt "d/rank_00001.safetensors: XXH3-64 checksum [0-9a-f]{16}, but meta.json lists [0-9a-f]{16} \(corrupt\)" \
    2 "$plan" --resume "$work/d" --steps 12
  damaged
  truncate -s 100 d/rank_00000.safetensors
  refused truncated "d/rank_00000.safetensors: 100 bytes, but meta.json lists [0-9]+ \(truncated\)" \
    2 "$plan" --resume "$work/d" --steps 12
  damaged
  rm d/rank_00001.safetensors
  refused missing "d/rank_00001.safetensors: missing \(meta.json lists it\)" \
    2 "$plan" --resume "$work/d" --steps 12
  damaged
  sed -i 's/"md-sharded"/"pt"/' d/meta.json
  refused foreign 'd/meta.json: format: "pt", not an md sharded checkpoint' \
    2 "$plan" --resume "$work/d" --steps 12
  # An edited meta.json is not believed: its own checksum fails.
  damaged
  sed -i 's/"step": 8,/"step": 7,/' d/meta.json
  refused edited-step 'd/meta.json: XXH3-64 checksum [0-9a-f]{16} of its text, but its meta_xxh3 is [0-9a-f]{16} \(edited or corrupt\)' \
    2 "$plan" --resume "$work/d" --steps 12
  compile mlp-hidden32.fb mlp 2 fsdp-full -D hidden=32
  refused other-model "master/fc1.weight has shape \[64, 32\] in the checkpoint but \[32, 32\] in this plan" \
    2 mlp-hidden32.fb --resume "$saved" --steps 12
  # Another optimizer: AdamW's moments are state SGD has none of, and SGD
  # with momentum needs a state AdamW's checkpoint lacks.
  sed 's/adamw(lr = 1e-2, weight_decay = 0.01)/sgd(lr = 1e-2)/' mlp.mdl >mlp-sgd.mdl
  sed 's/adamw(lr = 1e-2, weight_decay = 0.01)/sgd(lr = 1e-2, momentum = 0.9)/' mlp.mdl >mlp-momentum.mdl
  compile mlp-sgd.fb mlp-sgd 2 fsdp-full &&
    refused other-optimizer "step_00000008 \(model mlp, plan fsdp-full\) holds exp_avg/fc1.bias \[64\], which this plan \(fsdp-full\) has no state for: another model or optimizer\?" \
      2 mlp-sgd.fb --resume "$saved" --steps 12
  compile mlp-momentum.fb mlp-momentum 2 fsdp-full &&
    refused missing-state "step_00000008 \(model mlp, plan fsdp-full\) holds no momentum/fc1.weight, which this plan \(fsdp-full\) needs: another model or optimizer\?" \
      2 mlp-momentum.fb --resume "$saved" --steps 12
  refused full-checkpoint "at8.safetensors: a full checkpoint \(parameters only\) cannot be resumed from" \
    2 "$plan" --resume "$work/at8/at8.safetensors" --steps 12

  # A dead run's save of step 96, complete but never published, is not
  # resumed from; the next save removes it.
  # A full checkpoint's temporary that a killed save left goes too.
  mkdir -p stale/ckpt
  cp -r "$saved" stale/ckpt/step_00000008
  cp -r "$saved" stale/ckpt/step_00000096.tmp-00000000deadbeef
  head -c 4096 /dev/zero >stale/ckpt/step_00000096.safetensors.tmp.999999
  train stale stale 2 "$plan" --steps 12 --log-every 0 --resume auto &&
    grep -q '^mdrun: resumed from ckpt/step_00000008 ' stale/stale.out ||
    fail "a stale temporary directory was resumed from:"$'\n'"$(grep '^mdrun:' stale/stale.out)"
  [[ -e stale/ckpt/step_00000096.tmp-00000000deadbeef ]] &&
    fail "the next save left the stale temporary directory"
  [[ -e stale/ckpt/step_00000096.safetensors.tmp.999999 ]] &&
    fail "the next save left a full checkpoint's stale temporary"
  ls -d stale/ckpt/*.tmp* >/dev/null 2>&1 && fail "a save left a temporary directory: $(ls stale/ckpt)"

  # --resume auto passes over a damaged newest checkpoint (a corrupt rank
  # file, then also an unreadable meta.json) for the one before, saying so;
  # with none undamaged it starts fresh.
  mkdir -p damaged/ckpt
  cp -r "$work/mlp-fsdp-full/split/ckpt/step_00000004" "$saved" damaged/ckpt/
  "$python" -c "import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[-1] ^= 1; open(p, 'wb').write(b)" damaged/ckpt/step_00000008/rank_00000.safetensors
  run damaged past8 2 "$plan" --steps 4 --log-every 0 --resume auto
  grep -Eqx 'mdrun: warning: --resume auto passed over a damaged checkpoint: ckpt/step_00000008/rank_00000.safetensors: XXH3-64 checksum [0-9a-f]{16}, but meta.json lists [0-9a-f]{16} \(corrupt\)' damaged/past8.out &&
    grep -q '^mdrun: resumed from ckpt/step_00000004 (step 4,' damaged/past8.out ||
    fail "--resume auto did not pass over the corrupt step 8 for step 4:"$'\n'"$(grep '^mdrun:' damaged/past8.out damaged/past8.err)"
  # Every field of meta.json edited (step, id, dtype, shape, a piece's
  # offset): the newest checkpoint is passed over, naming its meta.json,
  # for the one before; --resume auto also removes a dead save's full
  # temporary before it looks, with no save of its own.
  for edit in 's/"step": 8,/"step": 7,/' 's/"id": "[0-9a-f]\{16\}"/"id": "00000000deadbeef"/' \
    's/"dtype": "F32"/"dtype": "BF16"/' 's/"shape": \[64, 32\]/"shape": [32, 64]/' \
    's/"offset": 0,/"offset": 1,/'; do
    rm -rf edited && mkdir -p edited/ckpt &&
      cp -r "$work/mlp-fsdp-full/split/ckpt/step_00000004" "$saved" edited/ckpt/
    sed -i "$edit" edited/ckpt/step_00000008/meta.json
    cmp -s edited/ckpt/step_00000008/meta.json "$saved/meta.json" && fail "sed '$edit' changed nothing"
    : >edited/ckpt/step_00000004.safetensors.tmp.999999
    run edited past-edit 2 "$plan" --steps 4 --log-every 0 --resume auto
    grep -Eqx 'mdrun: warning: --resume auto passed over a damaged checkpoint: ckpt/step_00000008/meta.json: XXH3-64 checksum [0-9a-f]{16} of its text, but its meta_xxh3 is [0-9a-f]{16} \(edited or corrupt\)' edited/past-edit.out &&
      grep -q '^mdrun: resumed from ckpt/step_00000004 (step 4,' edited/past-edit.out ||
      fail "--resume auto did not pass over step 8 with meta.json edited by '$edit':"$'\n'"$(grep '^mdrun:' edited/past-edit.out edited/past-edit.err)"
    [[ -e edited/ckpt/step_00000004.safetensors.tmp.999999 ]] &&
      fail "--resume auto left a dead save's temporary"
  done
  # A checkpoint under another step's name (copied by hand) is not that
  # step's either.
  rm -rf renamed && mkdir -p renamed/ckpt &&
    cp -r "$work/mlp-fsdp-full/split/ckpt/step_00000004" renamed/ckpt/ &&
    cp -r "$saved" renamed/ckpt/step_00000012
  run renamed past12 2 "$plan" --steps 4 --log-every 0 --resume auto
  grep -qx 'mdrun: warning: --resume auto passed over a damaged checkpoint: ckpt/step_00000012/meta.json: step 8, but the directory is step 12.s' renamed/past12.out &&
    grep -q '^mdrun: resumed from ckpt/step_00000004 (step 4,' renamed/past12.out ||
    fail "--resume auto did not pass over step 8 saved as step_00000012:"$'\n'"$(grep '^mdrun:' renamed/past12.out renamed/past12.err)"
  echo '{' >damaged/ckpt/step_00000004/meta.json
  run damaged none 2 "$plan" --steps 2 --log-every 0 --resume auto
  [[ $(grep -c '^mdrun: warning: --resume auto passed over a damaged checkpoint: ckpt/step_0000000[48]' damaged/none.out) == 2 ]] &&
    grep -qx 'mdrun: --resume auto: no undamaged checkpoint under ckpt; starting fresh' damaged/none.out ||
    fail "--resume auto with every checkpoint damaged:"$'\n'"$(grep '^mdrun:' damaged/none.out damaged/none.err)"
fi
train fresh fresh 2 mlp-fsdp-full.fb --steps 2 --log-every 0 --resume auto &&
  { grep -qx 'mdrun: --resume auto: no checkpoint under ckpt; starting fresh' fresh/fresh.out ||
    fail "--resume auto without a checkpoint:"$'\n'"$(grep '^mdrun:' fresh/fresh.out)"; }

# ---------------------------------------------------------------------------
# 4. --init: weights by name from a safetensors file, a fresh optimizer.
# ---------------------------------------------------------------------------
weights=$work/at8/at8.safetensors
if [[ -s $weights ]]; then
  compile mlp-ddp-1.fb mlp 1 ddp
  train init init 1 mlp-ddp-1.fb --steps 0 --log-every 0 --init "$weights" \
    --save-final init.safetensors &&
    { grep -qx "mdrun: initialised from $weights (weights only: 4 parameters)" init/init.out ||
      fail "--init: the banner does not say so:"$'\n'"$(grep '^mdrun:' init/init.out)"; }
  compare --bitwise "$weights" init/init.safetensors >cmp.txt ||
    fail "--init: the weights differ from the file's:"$'\n'"$(cat cmp.txt)"
  train init trained 1 mlp-ddp-1.fb --steps 4 --log-every 4 --init "$weights" &&
    { grep -Eq '^step 4/4  loss [0-9.]+ ' init/trained.out ||
      fail "--init: training did not run:"$'\n'"$(tail -n 3 init/trained.out)"; }
  # A file with a tensor the model lacks (PyTorch's strict loading).
  # rewrite SRC DST: the Python on stdin, given the safetensors file SRC's
  # `header` and `body`, calls write(header, body) to write DST.
  rewrite() {
    {
      cat <<'PY'
import array, json, struct, sys
src, dst = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
body = data[8 + n:]
def write(header, body):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(dst, "wb").write(struct.pack("<Q", len(text)) + text + body)
PY
      cat
    } | "$python" - "$1" "$2"
  }
  rewrite "$weights" extra.safetensors <<'PY'
end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
header["extra.weight"] = {"dtype": "F32", "shape": [2], "data_offsets": [end, end + 8]}
write(header, body + bytes(8))
PY
  # A file whose 2-D weights are stored transposed (Hugging Face's Conv1D
  # layout), read through a map's `transpose` rules: the same weights.
  rewrite "$weights" conv1d.safetensors <<'PY'
out, parts, at = {}, [], 0
for name in sorted(k for k in header if k != "__metadata__"):
    e = header[name]
    assert e["dtype"] == "F32"
    values = array.array("f", body[e["data_offsets"][0]:e["data_offsets"][1]])
    shape = e["shape"]
    if len(shape) == 2:
        r, c = shape
        values = array.array("f", [values[i * c + j] for j in range(c) for i in range(r)])
        shape = [c, r]
    raw = values.tobytes()
    out[name] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + len(raw)]}
    parts.append(raw)
    at += len(raw)
write(out, b"".join(parts))
PY
  printf 'map fc1.weight fc1.weight transpose\nmap fc1.bias fc1.bias\nmap fc2.weight fc2.weight transpose\nmap fc2.bias fc2.bias\n' >conv1d.map
  train init conv1d 1 mlp-ddp-1.fb --steps 0 --log-every 0 \
    --init "$work/conv1d.safetensors" --init-map "$work/conv1d.map" \
    --save-final conv1d.safetensors &&
    { compare --bitwise "$weights" init/conv1d.safetensors >cmp.txt ||
      fail "--init-map with transpose: the weights differ from the file's:"$'\n'"$(cat cmp.txt)"; }
  refused init-extra "extra.safetensors holds extra.weight \[2\], which model mlp has no parameter for" \
    1 mlp-ddp-1.fb --init "$work/extra.safetensors" --steps 0
  refused init-shape "at8.safetensors: fc1.bias has shape \[64\] in the file but \[32\] in model mlp" \
    2 mlp-hidden32.fb --init "$weights" --steps 0
  refused init-and-resume "--init .* and --resume .*: a resumed run takes its weights from the checkpoint" \
    2 mlp-fsdp-full.fb --init "$weights" --resume "$saved" --steps 12

  # --evaluate on one rank: the held-out loss the training run logged.
  train init val 2 mlp-fsdp-full.fb --steps 10 --log-every 0 \
    --save-final w10.safetensors &&
    train init eval 1 mlp-ddp-1.fb --evaluate --init "$work/init/w10.safetensors" && {
    logged=$(sed -nE 's/^step 10: (.*  )?val ([0-9.e+-]+)( .*)?$/\2/p' init/val.out)
    got=$(sed -nE 's/^mdrun: evaluate at .*mlp.mdl:[0-9]+:[0-9]+ on synthetic\(seed = 1\): loss ([0-9.e+-]+)$/\1/p' init/eval.out)
    awk -v a="$logged" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5 * a) }' ||
      fail "--evaluate: loss '$got', but the run logged val '$logged' at step 10:"$'\n'"$(cat init/eval.out)"
    grep -q '^step ' init/eval.out && fail "--evaluate trained:"$'\n'"$(cat init/eval.out)"
  }
  # --evaluate of a checkpoint that 2 ranks saved, on one rank of another
  # plan: the loss of the same weights given by --init, to the digit, and a
  # metrics record of it at the checkpoint's step.
  train init val8 2 mlp-fsdp-full.fb --steps 8 --log-every 0 \
    --save-final w8.safetensors &&
    train init eval8 1 mlp-ddp-1.fb --evaluate --init "$work/init/w8.safetensors" &&
    train init evalckpt 1 mlp-ddp-1.fb --evaluate --resume ckpt/step_00000008 \
      --metrics evalckpt.jsonl && {
    a=$(sed -nE 's/^mdrun: evaluate at .* loss ([0-9.e+-]+)$/\1/p' init/eval8.out)
    b=$(sed -nE 's/^mdrun: evaluate at .* loss ([0-9.e+-]+)$/\1/p' init/evalckpt.out)
    [[ -n $a && $a == "$b" ]] ||
      fail "--evaluate --resume of the W = 2 checkpoint: loss '$b', --init of its weights: '$a'"
    grep -Eq '^\{"step": 8, "evaluate": \{"at": "[^"]*mlp\.mdl:[0-9]+:[0-9]+", "dataset": "synthetic\(seed = 1\)", "loss": '"$b"'\}\}$' init/evalckpt.jsonl ||
      fail "--evaluate's metrics record: $(cat init/evalckpt.jsonl)"
  }
  grep -v 'evaluate\|log("val"' mlp.mdl >mlp-noeval.mdl
  compile mlp-noeval.fb mlp-noeval 1 ddp &&
    refused eval-none "the plan's recipe has no evaluate\(\.\.\.\) to run" \
      1 mlp-noeval.fb --evaluate --init "$weights"
fi

# ---------------------------------------------------------------------------
# 5. kill -9 of a random rank, then --resume auto.
# ---------------------------------------------------------------------------
steps=400
train killref ref 2 mlp-ddp.fb --steps $steps --log-every 0 --save-final final.safetensors
trials=3
for trial in $(seq 1 $trials); do
  dir=kill$trial
  mkdir -p "$dir"
  (cd "$dir" && exec timeout 120 "$mdrun" --backend cpu --threads 1 --ranks 2 \
    --steps $steps --log-every 0 "$work/mlp-ddp.fb" >run.out 2>run.err) &
  job=$!
  # A random moment after the first checkpoint.
  for _ in $(seq 1 200); do
    [[ -d $dir/ckpt/step_00000004 ]] && break
    sleep 0.02
  done
  sleep "$(printf '0.%03d' $((RANDOM % 300)))"
  launcher=$(pgrep -P "$job" -x mdrun | head -n 1)
  ranks=($(pgrep -P "${launcher:-0}" 2>/dev/null))
  if [[ ${#ranks[@]} -gt 0 ]]; then
    victim=${ranks[$((RANDOM % ${#ranks[@]}))]}
    kill -9 "$victim" 2>/dev/null
  fi
  wait "$job"
  latest=$(ls "$dir/ckpt" 2>/dev/null | grep -E '^step_[0-9]+$' | tail -n 1)
  echo "trial $trial: killed at ${latest:-no checkpoint}"
  train "$dir" resumed 2 mlp-ddp.fb --steps $steps --log-every 0 \
    --resume auto --save-final final.safetensors || continue
  cmp -s killref/final.safetensors "$dir/final.safetensors" ||
    fail "trial $trial: the resumed run's weights differ from the uninterrupted run's:"$'\n'"$(compare --bitwise killref/final.safetensors "$dir/final.safetensors")"
done

# ---------------------------------------------------------------------------
# 6. Two "nodes" that do not share the save directory (two launchers in
#    different working directories): the save fails before publishing,
#    naming the rank whose file rank 0 cannot see; a resume whose meta.json
#    node 1 cannot read fails, rank 0 naming rank 1.
# ---------------------------------------------------------------------------
# two_nodes ARGS...: a job of two launchers, node 0 in nodeA and node 1 in
# nodeB, each with ARGS; their output in nodeX/node.out and node.err; sets
# rc0, node 0's exit status.
two_nodes() {
  (cd nodeA && exec timeout 120 "$mdrun" --backend cpu --threads 1 --nnodes 2 \
    --node-rank 0 --gpus 1 --master-addr 127.0.0.1 --master-port 0 \
    "$@" >node.out 2>node.err) &
  local n0=$! port=
  for _ in $(seq 200); do
    port=$(sed -nE 's/^mdrun: rendezvous port ([0-9]+)$/\1/p' nodeA/node.err 2>/dev/null)
    [[ -n $port ]] && break
    sleep 0.05
  done
  if [[ -z $port ]]; then
    fail "node 0 printed no port: $(cat nodeA/node.err)"
    kill "$n0" 2>/dev/null
  else
    (cd nodeB && timeout 120 "$mdrun" --backend cpu --threads 1 --nnodes 2 \
      --node-rank 1 --gpus 1 --master-addr 127.0.0.1 --master-port "$port" \
      "$@" >node.out 2>node.err)
  fi
  wait "$n0"
  rc0=$?
}
mkdir -p nodeA nodeB
two_nodes --steps 8 --log-every 0 "$work/mlp-fsdp-full.fb"
if [[ $rc0 -eq 0 ]]; then
  fail "a sharded save across disks that are not shared succeeded"
else
  grep -Eq 'ckpt/step_00000004: rank 0 cannot see the file of rank 1 under ckpt/step_00000004\.tmp-[0-9a-f]{16} \(a sharded checkpoint needs a file system every node shares' nodeA/node.err ||
    fail "unshared disks: expected rank 0 to name rank 1's file:"$'\n'"$(cat nodeA/node.err)"
fi
# Rank 1 says why too (rank 0 tells every rank its message), so the cause
# is named whichever node's failure is reported first.
if grep -q 'rank 0 could not publish' nodeB/node.err; then
  grep -Eq 'rank 0 could not publish the checkpoint ckpt/step_00000004: ckpt/step_00000004: rank 0 cannot see the file of rank 1 under' nodeB/node.err ||
    fail "unshared disks: rank 1 does not say why:"$'\n'"$(cat nodeB/node.err)"
fi
[[ -e nodeA/ckpt/step_00000004 ]] && fail "unshared disks: a checkpoint was published"

# Resuming where node 1's copy of the checkpoint has a meta.json it cannot
# read: every rank agrees on that before verifying, and rank 0 names rank 1.
# Rank 1 fails with its own reading error at the same moment, so node 0
# reports whichever failure reaches it first: rank 0's (rank 1 cannot read
# it) or node 1's (rank 1's own error, naming the file and why). Both name
# rank 1 and the file; neither may be a hang or a wrong resume.
rm -rf nodeA/ckpt nodeB/ckpt
mkdir -p nodeA/ckpt nodeB/ckpt
cp -r "$saved" nodeA/ckpt/ && cp -r "$saved" nodeB/ckpt/
echo '{' >nodeB/ckpt/step_00000008/meta.json
two_nodes --steps 12 --log-every 0 --resume ckpt/step_00000008 "$work/mlp-fsdp-full.fb"
[[ $rc0 -ne 0 ]] || fail "a resume from a meta.json that node 1 cannot read succeeded"
grep -Eq "ckpt/step_00000008/meta.json: rank 1 cannot read it|node 1: rank 1 failed: ckpt/step_00000008/meta.json: not an md checkpoint's meta.json" nodeA/node.err ||
  fail "unreadable meta.json on node 1: node 0 does not name rank 1 and the file:"$'\n'"$(cat nodeA/node.err)"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "resume: all checks passed"
