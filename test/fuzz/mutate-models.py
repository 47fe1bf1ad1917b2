#!/usr/bin/env python3
"""Runs the whole mdc pipeline (parse, sema, IR generation, verification) on
truncations and random byte mutations of every models/*.mdl, and fails if any
run ends other than with exit 0, or exit 1 with an `error:` diagnostic: no
signal, no internal error, no silent failure. Deterministic (fixed seed).

    mutate-models.py MDC MODELS_DIR [--variants N]
"""
import argparse
import pathlib
import random
import subprocess
import sys
import tempfile


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mdc")
    ap.add_argument("models")
    ap.add_argument("--variants", type=int, default=60,
                    help="truncations and mutations per model, each")
    args = ap.parse_args()

    rng = random.Random(20261121)
    models = sorted(pathlib.Path(args.models).glob("*.mdl"))
    if not models:
        print(f"no .mdl files in {args.models}", file=sys.stderr)
        return 1
    total, bad, codes = 0, 0, {}
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "variant.mdl"
        for model in models:
            src = model.read_bytes()
            step = max(1, len(src) // args.variants)
            variants = [("truncated at %d" % c, src[:c])
                        for c in range(0, len(src), step)]
            for i in range(args.variants):
                b = bytearray(src)
                for _ in range(rng.randint(1, 5)):
                    b[rng.randrange(len(b))] = rng.randrange(256)
                variants.append(("mutation %d" % i, bytes(b)))
            for what, data in variants:
                path.write_bytes(data)
                r = subprocess.run(
                    [args.mdc, str(path), "--plan", "fsdp-full", "--emit=mlir"],
                    capture_output=True, timeout=60)
                total += 1
                codes[r.returncode] = codes.get(r.returncode, 0) + 1
                ok = r.returncode == 0 or (
                    r.returncode == 1 and b"error:" in r.stderr
                    and b"internal error" not in r.stderr)
                if not ok:
                    bad += 1
                    keep = pathlib.Path(tmp).parent / f"md-mutant-{model.stem}-{total}.mdl"
                    keep.write_bytes(data)
                    print(f"FAIL {model.name} ({what}): exit {r.returncode}, "
                          f"input kept as {keep}\n{r.stderr.decode(errors='replace')[-2000:]}")
    print(f"{total} variants of {len(models)} models: exit codes {codes}")
    print(f"{total - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
