#!/usr/bin/env python3
# doc-examples.py - every example of docs/language.md and docs/check.md, and
# every fix mdc --check prints for them, compiled and run.
#
# The language reference promises that every program it allows compiles
# (or gets a located, documented error) and that a fix the desync checker
# suggests gives a running job. This test holds both pages to it:
#
#   * the complete programs of the pages (fenced blocks with a model and a
#     train) compile under every preset and run 3 steps at W = 2;
#   * the model-only examples compile under every preset, and the pages'
#     custom plans compile on the GPT example they extend (tiny sizes);
#   * every hook example — the statements and values of the hooks tables,
#     the accepted programs, the "write instead" column, the fixes table of
#     check.md — is put in the train block of a tiny model, with the pages'
#     placeholders (`{ ... }`, `evaluate(...)`, `N`, `best`) made concrete;
#     it must pass `mdc --check --plan all`, compile under every preset and
#     run 3 steps at W = 2;
#   * every rejected example (and check.md's rejected program) must fail
#     `mdc --check` with an error at a line of the file, and every fix mdc
#     prints for it, as quoted code, must compile and run as above;
#   * every hook statement the pages' prose quotes (`if local_rank == 0 {
#     print(...) }`, `print("rank", rank % 2)`, ...) and every expression
#     on `rank` it quotes (`rank - rank`) either runs as above or, being
#     one of the prose's unsafe examples, fails `mdc --check` with desync
#     errors only, at a line of the file (never another error).
#
#   test/mdrun/doc-examples.py MDC MDRUN DOCS_DIR WORK_DIR
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys

PRESETS = ["single", "ddp", "zero1", "fsdp-grad-op", "fsdp-full", "fsdp-hybrid"]
# Presets a W = 2 run can use (single pins W = 1; fsdp-hybrid's shard group
# is 8), taken in turn so that every one runs some examples.
RUN_PRESETS = ["ddp", "zero1", "fsdp-grad-op", "fsdp-full"]
TINY_GPT = ["-D", "layers=2", "-D", "d=32", "-D", "heads=2", "-D", "seq=16",
            "-D", "vocab=64"]

TEMPLATE = """model tiny(inputs = 8, hidden = 8, classes = 4) {
  param fc1: Linear(inputs, hidden)
  param fc2: Linear(hidden, classes)
  forward(x: f32[B, inputs], y: i32[B]) {
    return cross_entropy(fc2(relu(fc1(x))), y)
  }
}

train {
  data         = synthetic(seed = 0)
  global_batch = 8
  micro_batch  = 2
  optimizer    = adamw(lr = 1e-3)
  best = 3.0
%s
}
"""

# The pages' placeholders, made concrete.
CALLS = {
    "evaluate(...)": "evaluate(synthetic(seed = 1), batches = 1)",
    "exists(...)": 'exists("STOP")',
    "any(exists(...))": 'any(exists("STOP"))',
    "mean(...)": "mean(loss)",
    "sum(...)": "sum(loss)",
    "max(...)": "max(loss)",
    "min(...)": "min(loss)",
    "all(...)": "all(loss < 3.0)",
    "mean/sum/max(...)": "mean(loss)",
    "checkpoint(...)": "checkpoint(sharded)",
    "print(...)": 'print("body")',
    "seconds/minutes": "minutes",
    'tokens("val.bin")': "synthetic(seed = 1)",
}
NAMES = {"N": "2", "lo": "0", "hi": "2", "c": "step > 1", "expr": "step + 1",
         "v1": "step", "v2": "loss", "source": "synthetic(seed = 1)",
         "x": "loss", "b": "loss < 3.0", "avg": "mean(loss)",
         "format": "sharded", "K": "2", "eval_every": "2"}
VALUES = {"rank", "local_rank", "world_size", "step", "epoch", "loss"}
STATEMENT = re.compile(
    r"^(if |for |every |stop$|save |log\(|print\(|evaluate\(|fail\(|"
    r"[A-Za-z_]\w* = )")


def concrete(code):
    for k, v in CALLS.items():
        code = code.replace(k, v)
    code = code.replace("{ ... }", '{ print("body") }')
    code = code.replace(", ...)", ")")
    code = re.sub(r"\b(%s)\b" % "|".join(NAMES),
                  lambda m: NAMES[m.group(1)], code)
    return code


def hook_of(span):
    """A hook statement for an inline code span, or None if it is none."""
    span = span.strip()
    if not span or "md." in span or span in ("if", "else if", "every", "for"):
        return None
    code = concrete(span)
    if re.match(r"^(every|if|for) ", code) and "{" not in code:
        code += ' { print("body") }'  # a construct named without its body
    if STATEMENT.match(code):
        return code
    if re.fullmatch(r"[A-Za-z_]\w*", code) and code not in VALUES:
        return None  # a word of prose (rank0_only), not a value
    # An expression, number or bool: compare it with itself.
    return 'if (%s) == (%s) { print("value") }' % (code, code)


def spans(text):
    return re.findall(r"`([^`]+)`", text)


def table_rows(text, start, end=None):
    """The cells of the table rows between the headings `start` and `end`."""
    i = text.index(start)
    j = text.index(end, i) if end else len(text)
    rows = []
    for line in text[i:j].splitlines():
        if line.startswith("|") and not re.match(r"^\|\s*-", line):
            rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows[1:]  # no header


def program_of(cell):
    """The hook statements of a table cell: its code spans, `then` joined."""
    out = []
    for s in spans(cell):
        h = hook_of(s)
        if h:
            out.append(h)
    return "\n".join(out)


class Runner:
    def __init__(self, mdc, mdrun, work):
        self.mdc, self.mdrun, self.work = mdc, mdrun, work
        self.failures = []
        self.count = 0
        self.runs = 0
        self.rejected = 0  # prose examples mdc --check rightly rejected
        self.queue = []

    def fail(self, what, why):
        self.failures.append("%s\n  %s" % (what, why.strip().replace("\n", "\n  ")))

    def file(self, text):
        self.count += 1
        path = os.path.join(self.work, "ex%03d.mdl" % self.count)
        with open(path, "w") as f:
            f.write(text)
        return path

    def mdc_run(self, args):
        return subprocess.run([self.mdc] + args, capture_output=True,
                              text=True, timeout=120, cwd=self.work)

    def accept(self, what, text, extra=(), plans=PRESETS, run=True,
               may_reject=False):
        """Queues an example that must check, compile and run (finish());
        with may_reject, one that mdc --check may instead reject with desync
        errors at lines of the file."""
        path = self.file(text)
        preset = None
        if run:
            preset = RUN_PRESETS[self.runs % len(RUN_PRESETS)]
            self.runs += 1
        self.queue.append((what, text, path, list(extra), plans, preset,
                           may_reject))

    def finish(self):
        # Examples are independent: two at a time (mdc and mdrun's ranks are
        # single-threaded).
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda job: self.check(*job), self.queue))

    def check(self, what, text, path, extra, plans, preset, may_reject):
        # Without a train block there is no plan to write: the module after
        # md's passes instead.
        emit = [] if "train {" in text else ["--emit=mlir"]
        if may_reject:
            r = self.mdc_run(["--check", path, "--plan", "all",
                              "--format=json"] + list(extra))
            if r.returncode == 1:
                errors = [f for f in json.loads(r.stdout)["findings"]
                          if f["level"] == "error"]
                if not all(f["rule"].startswith("desync/") and f["line"] > 0
                           for f in errors):
                    self.fail(what, "mdc --check: not only desync errors at "
                              "lines: " + r.stdout[-1500:])
                self.rejected += 1
                return
        r = self.mdc_run(["--check", path, "--plan", "all"] + list(extra))
        if r.returncode != 0:
            self.fail(what, "mdc --check: " + r.stderr[-1500:])
            return
        for p in plans:
            out = path[:-4] + "-" + p + (".fb" if not emit else ".mlir")
            r = self.mdc_run([path, "--plan", p, "-o", out] + emit +
                             list(extra))
            if r.returncode != 0:
                self.fail(what, "mdc --plan %s: %s" % (p, r.stderr[-1500:]))
                return
        if preset is None:
            return
        plan = path[:-4] + "-" + preset + ".fb"
        # Its own directory: checkpoints land there.
        rundir = path[:-4] + ".run"
        os.makedirs(rundir)
        r = subprocess.run([self.mdrun, "--backend", "cpu", "--threads", "1",
                            "--ranks", "2", "--steps", "3", "--log-every", "0",
                            plan], capture_output=True, text=True, timeout=120,
                           cwd=rundir)
        # A recipe with a fail("why") whose condition held ends with exit
        # status 3 and says so.
        failed = (r.returncode == 3 and re.search(r"\bfail\(", text) and
                  "mdrun: the recipe failed at step" in r.stderr)
        if r.returncode != 0 and not failed:
            self.fail(what, "mdrun (%s, W = 2): exit %d: %s" %
                      (preset, r.returncode, (r.stdout + r.stderr)[-1500:]))

    def reject(self, what, text):
        """mdc --check fails at a line; returns the fixes it prints."""
        path = self.file(text)
        r = self.mdc_run(["--check", path, "--plan", "all", "--format=json"])
        if r.returncode != 1:
            self.fail(what, "mdc --check accepted it (exit %d)" % r.returncode)
            return []
        report = json.loads(r.stdout)
        located = [f for f in report["findings"]
                   if f["level"] == "error" and f["line"] > 0]
        if not located:
            self.fail(what, "no error at a line: " + r.stdout[-1500:])
        return [f["fix"] for f in report["findings"] if f.get("fix")]


def fenced_blocks(text):
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: doc-examples.py MDC MDRUN DOCS_DIR WORK_DIR")
    mdc, mdrun, docs, work = (os.path.abspath(a) for a in sys.argv[1:])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    language = open(os.path.join(docs, "language.md")).read()
    check = open(os.path.join(docs, "check.md")).read()
    r = Runner(mdc, mdrun, work)
    counts = {}

    def note(kind):
        counts[kind] = counts.get(kind, 0) + 1

    # Complete programs and model-only examples.
    gpt = None
    plans = []
    for block in fenced_blocks(language) + fenced_blocks(check):
        if re.search(r"^model \w+\(", block, re.M) and "..." not in block:
            if "train {" in block:
                r.accept("complete program:\n" + block, block)
                note("complete programs")
            else:
                r.accept("model example:\n" + block, block,
                         extra=TINY_GPT if "model gpt" in block else (),
                         run=False)
                note("model examples")
                if "model gpt" in block:
                    gpt = block
        elif re.match(r"^plan [\w-]+ extends", block.strip()):
            plans.append(block)
    for block in plans:
        names = re.findall(r"^plan ([\w-]+)", block, re.M)
        r.accept("plans on the GPT example:\n" + block, gpt + "\n" + block,
                 extra=TINY_GPT, plans=names, run=False)
        note("custom plans")

    # The hooks tables of language.md: statements, values, accepted.
    hooks = []
    for row in table_rows(language, "Hooks see:", "and numbers, arithmetic"):
        hooks += [hook_of(s) for s in spans(row[0])]
    for row in table_rows(language, "Statements:", "`every` periods"):
        hooks += [hook_of(s) for s in spans(row[0])]
    for row in table_rows(language, "Accepted (safe):", "## Plans and presets"):
        hooks.append(program_of(row[0]))
    for row in table_rows(check, "| situation | fix |", "Calls are followed"):
        hooks += [hook_of(s) for s in spans(row[1])]

    # Rejected programs, their "write instead" and the fixes mdc prints.
    fixes = []
    for row in table_rows(language, "Rejected, with the fix:",
                          "Accepted (safe):"):
        program = program_of(row[0])
        fixes += r.reject("rejected example: " + program, TEMPLATE % program)
        note("rejected examples")
        hooks.append(program_of(row[2]))
    train = [b for b in fenced_blocks(check) if b.startswith("train {")][0]
    body = "\n".join(l for l in train.splitlines()[1:-1] if "..." not in l)
    fixes += r.reject("check.md's rejected program", TEMPLATE % body)
    note("rejected examples")
    for fix in sorted(set(fixes)):
        for quoted in re.findall(r"'([^']+)'", fix):
            if quoted.startswith("@"):
                continue
            hooks.append(hook_of(quoted))
            note("fixes' code")

    seen = set()
    for hook in hooks:
        if not hook or hook in seen:
            continue
        seen.add(hook)
        r.accept("hook example:\n" + hook, TEMPLATE % hook)
        note("hook examples")

    # The prose's hook statements and expressions on `rank`.
    for page in (language, check):
        prose = re.sub(r"^```.*?^```", "", page, flags=re.S | re.M)
        prose = "\n".join(l for l in prose.splitlines()
                          if not l.startswith("|"))
        for span in spans(prose):
            span = re.sub(r"\s+", " ", span).strip()
            code = concrete(span)
            if not (re.match(r"^(if |for |every |save |log\(|print\(|fail\()",
                             code) or
                    re.search(r"\brank\b.*[-+*%<>=]", code)):
                continue
            hook = hook_of(span)
            if not hook or hook in seen:
                continue
            seen.add(hook)
            r.accept("prose example:\n" + hook, TEMPLATE % hook,
                     may_reject=True)
            note("prose examples")

    r.finish()
    print("prose examples mdc --check rejects: %d" % r.rejected)
    for kind in sorted(counts):
        print("%s: %d" % (kind, counts[kind]))
    print("W = 2 runs: %d" % r.runs)
    for f in r.failures:
        print("FAIL: " + f)
    print("%d failures" % len(r.failures))
    return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())
