"""Emits every model of models/ under every plan (the presets and the
file's own plans; gpt also at a tiny -D configuration) with `mdc -o`,
inspects each plan with `mdrun --inspect`, and compares the per-rank memory `mdrun --inspect --world-size N` reports
with what `mdc --explain --world-size N` predicts for the same plan at
N = 1, 2, 4, 8 (emitting a plan pinned to N, so that the compiler and the
runtime look at the same program); --inspect must also find every
cross-stream conflict ordered by the plan's events (the runtime's
StreamOrder check, what makes a GPU compute what the CPU does). Prints one
line per model and plan;
exits 1 on the first disagreement.

  emit-all.py MODELS_DIR WORK_DIR
"""
import json
import os
import re
import subprocess
import sys

PRESETS = ["single", "ddp", "zero1", "fsdp-grad-op", "fsdp-full", "fsdp-hybrid"]
TINY_GPT = ["-D", "layers=2", "-D", "d=64", "-D", "heads=4", "-D", "seq=64",
            "-D", "vocab=512"]


def run(args):
    return subprocess.run(args, capture_output=True, text=True)


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def main():
    models, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    # Every model of the directory, so that a new one is covered without
    # editing this list; gpt also at a tiny configuration.
    cases = []
    for file in sorted(os.listdir(models)):
        if file.endswith(".mdl"):
            cases.append((file[:-len(".mdl")], []))
            if file == "gpt.mdl":
                cases.append(("gpt", TINY_GPT))
    for model, defines in cases:
        path = os.path.join(models, model + ".mdl")
        with open(path) as f:
            own = re.findall(r"^plan ([A-Za-z0-9_-]+)", f.read(), re.M)
        name = model + ("-tiny" if defines else "")
        for plan in PRESETS + [p for p in own if p not in PRESETS]:
            out = os.path.join(work, "%s-%s.fb" % (name, plan))
            r = run(["mdc", path, *defines, "--plan", plan, "-o", out])
            if r.returncode != 0:
                fail("mdc %s --plan %s -o: %s" % (name, plan, r.stderr))
            # Unpinned: --inspect picks the first world size the plan fits.
            r = run(["mdrun", "--inspect", out])
            if r.returncode != 0 and "no world size from 1 to" in r.stderr:
                print("%s %s: emitted; no world size can run it" % (name, plan))
                continue
            if r.returncode != 0 or not r.stdout.startswith("plan file"):
                fail("mdrun --inspect %s: %s" % (out, r.stderr))
            compared = []
            for w in (1, 2, 4, 8):
                pinned = os.path.join(work, "%s-%s-w%d.fb" % (name, plan, w))
                emit = run(["mdc", path, *defines, "--plan", plan,
                            "--world-size", str(w), "-o", pinned])
                explain = run(["mdc", path, *defines, "--plan", plan,
                               "--world-size", str(w), "--explain",
                               "--format=json"])
                if (emit.returncode == 0) != (explain.returncode == 0):
                    fail("%s %s W=%d: mdc -o and --explain disagree on "
                         "whether it compiles" % (name, plan, w))
                if emit.returncode != 0:
                    continue  # W does not fit the plan or the batch
                inspect = run(["mdrun", "--inspect", pinned, "--world-size",
                               str(w), "--format=json"])
                if inspect.returncode != 0:
                    fail("mdrun --inspect %s: %s" % (pinned, inspect.stderr))
                # Objects as (key, value) pairs in their order, so that equal
                # means the same rows in the same order, as both reports
                # print them, not merely the same numbers.
                pairs = lambda text: json.loads(text, object_pairs_hook=list)
                predicted = dict(pairs(explain.stdout))["memory"]
                reported = dict(pairs(inspect.stdout))["memory_per_rank"]
                extra = dict(reported)
                if extra["categories"] != "compiler":
                    fail("%s: buffers without the compiler's categories"
                         % pinned)
                reported = [(key, value) for key, value in reported
                            if key not in ("categories", "peak_at")]
                order = json.loads(inspect.stdout)["program"]["stream_order"]
                if not order.startswith("ok"):
                    fail("%s %s W=%d: the streams are not ordered: %s"
                         % (name, plan, w, order))
                if predicted != reported:
                    fail("%s %s W=%d: mdc --explain %s, mdrun --inspect %s"
                         % (name, plan, w, predicted, reported))
                compared.append(str(w))
            print("%s %s: emitted, inspected, memory equal and streams "
                  "ordered at W = %s"
                  % (name, plan, ", ".join(compared) or "none"))


main()
