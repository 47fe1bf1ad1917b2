#!/usr/bin/env python3
"""Compares the F32 tensors of two safetensors files (no numpy needed).

    stcompare.py A.safetensors B.safetensors [--bitwise] [--rtol R]
                 [--noise SUFFIX]... [--verbose]

For each tensor the relative difference is max |a - b| / max(max |a|, 1e-30)
over its elements. The largest one is printed as
`max_rel_diff <value> <tensor>`.

--bitwise   every tensor's bytes must be identical (the metadata, which names
            the plan and the world size, is not compared); each tensor that
            differs is named, with how many elements differ and by how much.
--rtol R    the largest relative difference must be at most R.
--noise S   tensors whose name ends with S hold values that are rounding
            noise (a parameter whose exact gradient is zero, such as the key
            bias of softmax attention), for which a difference relative to
            the tensor's own scale means nothing. They are left out of
            max_rel_diff and of --rtol's test, reported on their own line
            (`noise <max |a - b|> <tensor>`), and held to ExecutorTest's
            element-wise bound instead: |a - b| <= R * max(1, |a|).
--verbose   one line per tensor.

Exit status 1 when the files hold different tensor names, dtypes or shapes,
when a value is not finite, or when a test above fails; 2 on a bad command
line or a file that cannot be read.
"""
import json
import math
import struct
import sys


def fatal(message):
    print(f"stcompare: {message}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fatal(f"{path}: {e.strerror}")
    if len(data) < 8:
        fatal(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack_from("<Q", data, 0)
    if 8 + n > len(data):
        fatal(f"{path}: a header of {n} bytes overruns the file")
    header = json.loads(data[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = (info["dtype"], tuple(info["shape"]), data[base + begin:base + end])
    return tensors


def parse_args(argv):
    files, opts = [], {"bitwise": False, "rtol": None, "noise": [], "verbose": False}
    it = iter(argv)
    for arg in it:
        if arg == "--bitwise":
            opts["bitwise"] = True
        elif arg == "--verbose":
            opts["verbose"] = True
        elif arg in ("--rtol", "--noise"):
            value = next(it, None)
            if value is None:
                fatal(f"{arg} needs a value")
            if arg == "--rtol":
                opts["rtol"] = float(value)
            else:
                opts["noise"].append(value)
        elif arg.startswith("--"):
            fatal(f"unknown option {arg}\n{__doc__}")
        else:
            files.append(arg)
    if len(files) != 2:
        fatal(f"expected two files\n{__doc__}")
    if opts["noise"] and opts["rtol"] is None:
        fatal("--noise needs --rtol")
    return files, opts


def main(argv):
    (pa, pb), opts = parse_args(argv)
    ta, tb = load(pa), load(pb)
    if sorted(ta) != sorted(tb):
        print(f"stcompare: different tensors: {sorted(ta)} vs {sorted(tb)}")
        return 1
    if not ta:
        print("stcompare: no tensors")
        return 1
    failures = 0
    worst, worst_name = -1.0, ""
    noise_worst, noise_name = -1.0, ""
    for name in sorted(ta):
        (da, sa, ra), (db, sb, rb) = ta[name], tb[name]
        if da != "F32" or db != "F32":
            print(f"stcompare: {name} is {da} and {db}, expected F32")
            return 1
        if sa != sb:
            print(f"stcompare: {name}: shape {list(sa)} vs {list(sb)}")
            return 1
        n = math.prod(sa)
        if len(ra) != 4 * n or len(rb) != 4 * n:
            print(f"stcompare: {name}: {len(ra)} and {len(rb)} bytes for f32{list(sa)}")
            return 1
        a = struct.unpack(f"<{n}f", ra)
        b = struct.unpack(f"<{n}f", rb)
        if not all(map(math.isfinite, a)) or not all(map(math.isfinite, b)):
            print(f"stcompare: {name}: a value is not finite")
            return 1
        scale = max(map(abs, a), default=0.0)
        diff = max((abs(x - y) for x, y in zip(a, b)), default=0.0)
        rel = diff / max(scale, 1e-30)
        noise = any(name.endswith(s) for s in opts["noise"])
        if opts["verbose"]:
            print(f"  {name} {list(sa)}: max|a-b| {diff:.3e}, max|a| {scale:.3e}, "
                  f"relative {rel:.3e}{' (noise)' if noise else ''}")
        if opts["bitwise"] and ra != rb:
            failures += 1
            differing = sum(1 for i in range(0, 4 * n, 4) if ra[i:i + 4] != rb[i:i + 4])
            print(f"stcompare: {name} f32{list(sa)} is not bitwise identical: {differing} of "
                  f"{n} elements differ, max|a-b| {diff:.3e} (relative {rel:.3e})")
        if noise:
            rtol = opts["rtol"]
            bad = [i for i in range(n) if abs(a[i] - b[i]) > rtol * max(1.0, abs(a[i]))]
            if bad:
                failures += 1
                i = bad[0]
                print(f"stcompare: {name}[{i}]: {a[i]!r} vs {b[i]!r}, more than "
                      f"{rtol:g} x max(1, |a|) apart ({len(bad)} elements)")
            if diff > noise_worst:
                noise_worst, noise_name = diff, name
        elif rel > worst:
            worst, worst_name = rel, name
    if worst_name:
        print(f"max_rel_diff {worst:.3e} {worst_name}")
    if noise_name:
        print(f"noise {noise_worst:.3e} {noise_name}")
    if opts["rtol"] is not None and worst > opts["rtol"]:
        failures += 1
        print(f"stcompare: {worst_name} differs by {worst:.3e} relative to its largest "
              f"value, more than {opts['rtol']:g}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
