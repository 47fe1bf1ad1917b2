"""Emits every model of models/ under every plan (the presets and the
file's own plans; gpt also at a tiny -D configuration) with `mdc -o`,
inspects each plan with `mdrun --inspect`, and compares the memory section
`mdrun --inspect --world-size N` prints with the one `mdc --explain
--world-size N` prints for the same plan at N = 1, 2, 4, 8, byte for byte
as JSON and as text (emitting a plan pinned to N, so that the compiler and
the runtime look at the same program); --inspect must also find every
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


def json_member(text, key):
    """The value of the top-level member `key` as printed (an object), or
    None."""
    start = text.find('\n  "%s": {' % key)
    if start < 0:
        return None
    start = text.index("{", start)
    end = text.find("\n  }", start)
    return None if end < 0 else text[start:end + len("\n  }")]


def text_section(text):
    """The memory section of a text report, heading to blank line, or None."""
    match = re.search(r"^memory per rank at W = .*?\n\n", text, re.S | re.M)
    return match.group(0) if match else None


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
                # One formatter prints both memory sections: they must be
                # the same bytes, as JSON and as text.
                predicted = json_member(explain.stdout, "memory")
                reported = json_member(inspect.stdout, "memory_per_rank")
                program = json.loads(inspect.stdout)["program"]
                if program["buffer_categories"] != "compiler":
                    fail("%s: buffers without the compiler's categories"
                         % pinned)
                if not program["stream_order"].startswith("ok"):
                    fail("%s %s W=%d: the streams are not ordered: %s"
                         % (name, plan, w, program["stream_order"]))
                if predicted is None or predicted != reported:
                    fail("%s %s W=%d: mdc --explain %s, mdrun --inspect %s"
                         % (name, plan, w, predicted, reported))
                explain = run(["mdc", path, *defines, "--plan", plan,
                               "--world-size", str(w), "--explain"])
                inspect = run(["mdrun", "--inspect", pinned, "--world-size",
                               str(w)])
                predicted = text_section(explain.stdout)
                reported = text_section(inspect.stdout)
                if predicted is None or predicted != reported:
                    fail("%s %s W=%d: mdc --explain\n%s\nmdrun --inspect\n%s"
                         % (name, plan, w, predicted, reported))
                compared.append(str(w))
            print("%s %s: emitted, inspected, memory equal and streams "
                  "ordered at W = %s"
                  % (name, plan, ", ".join(compared) or "none"))


main()
