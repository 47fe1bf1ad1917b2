#!/usr/bin/env python3
"""Writes the tensors of a safetensors file whose names match, or do not.

    stselect.py IN.safetensors OUT.safetensors (--keep GLOB | --drop GLOB)...

Each tensor of IN is written to OUT, bytes unchanged, when its name matches
a --keep glob (fnmatch) or, with only --drop globs, matches none of them:
a base model's weights without its adapters, say. Exit status 2 on a bad
command line or a file that cannot be read.
"""
import fnmatch
import json
import struct
import sys


def fatal(message):
    print(f"stselect: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv):
    if len(argv) < 4 or len(argv) % 2:
        fatal(__doc__.strip().splitlines()[2].strip())
    src, dst = argv[0], argv[1]
    keep, drop = [], []
    for flag, glob in zip(argv[2::2], argv[3::2]):
        if flag == "--keep":
            keep.append(glob)
        elif flag == "--drop":
            drop.append(glob)
        else:
            fatal(f"unknown option {flag}")
    try:
        with open(src, "rb") as f:
            data = f.read()
    except OSError as e:
        fatal(f"{src}: {e.strerror}")
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    out_header, chunks, offset = {}, [], 0
    for name, entry in header.items():
        if name == "__metadata__":
            out_header[name] = entry
            continue
        matches = lambda globs: any(fnmatch.fnmatchcase(name, g) for g in globs)
        if (keep and not matches(keep)) or matches(drop):
            continue
        begin, end = entry["data_offsets"]
        chunks.append(body[begin:end])
        out_header[name] = dict(entry, data_offsets=[offset, offset + end - begin])
        offset += end - begin
    text = json.dumps(out_header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


if __name__ == "__main__":
    main(sys.argv[1:])
