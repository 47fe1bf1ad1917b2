#!/usr/bin/env python3
"""md's weights under another framework's names, through an md name map.

A name map (runtime/exec/NameMap.h; models/gpt.nanogpt.map is nanoGPT's) is
what `mdrun --init FILE --init-map MAP` reads to start from another
framework's weights. This reads the same map the other way: md's
--save-final or full checkpoint file to the other framework's names,
joining the row blocks the map splits (nanoGPT's fused c_attn) and
transposing what the map transposes (Hugging Face's Conv1D weights;
models/gpt.hf.map).

  md_names.py to-torch MAP MD.safetensors OUT.safetensors

Then, in PyTorch: model.load_state_dict(load_file(OUT), strict=False); the
only keys it misses are those the map ignores (tied heads, buffers).
"""

import re
import sys


def read_map(path):
    """The map's rules: ('map', md, file, part, parts, transpose) or
    ('ignore', file)."""
    rules = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if words[0] == "ignore" and len(words) == 2:
                rules.append(("ignore", words[1]))
            elif words[0] == "map" and len(words) in (3, 4, 5, 6):
                transpose = len(words) > 3 and words[3] == "transpose"
                if transpose:
                    del words[3]
                if len(words) not in (3, 5):
                    sys.exit(f"{path}:{n}: expected 'map MD FILE [transpose] [rows K/N]'")
                part, parts = 0, 1
                if len(words) == 5:
                    m = re.fullmatch(r"(\d+)/(\d+)", words[4])
                    if words[3] != "rows" or not m or int(m[1]) >= int(m[2]):
                        sys.exit(f"{path}:{n}: expected 'rows K/N' with K < N")
                    part, parts = int(m[1]), int(m[2])
                rules.append(("map", words[1], words[2], part, parts, transpose))
            else:
                sys.exit(f"{path}:{n}: expected 'map MD FILE [transpose] [rows K/N]' "
                         "or 'ignore FILE'")
    return rules


def _pattern(p):
    return re.compile(re.escape(p).replace(r"\*", r"(\d+)") + r"\Z")


def to_torch(rules, md):
    """md's tensors (name -> tensor) under the map's file names."""
    import torch
    blocks = {}  # file name -> {part: tensor}, parts
    for name, tensor in md.items():
        placed = False
        for rule in rules:
            if rule[0] != "map":
                continue
            _, md_pat, file_pat, part, parts, transpose = rule
            m = _pattern(md_pat).match(name)
            if not m:
                continue
            target = file_pat.replace("*", m[1]) if m.groups() else file_pat
            blocks.setdefault(target, ({}, parts, transpose))[0][part] = tensor
            placed = True
        if not placed:
            sys.exit(f"md_names.py: the map places no md tensor '{name}'")
    out = {}
    for target, (parts_seen, parts, transpose) in blocks.items():
        missing = [k for k in range(parts) if k not in parts_seen]
        if missing:
            sys.exit(f"md_names.py: {target}: row blocks {missing} of {parts} missing")
        joined = torch.cat([parts_seen[k] for k in range(parts)], 0)
        out[target] = (joined.t() if transpose else joined).contiguous()
    return out


def ignored(rules, name):
    """Whether the map ignores the file tensor `name`."""
    return any(r[0] == "ignore" and _pattern(r[1]).match(name) for r in rules)


def main(argv):
    if len(argv) != 5 or argv[1] != "to-torch":
        sys.exit(__doc__)
    from safetensors.torch import load_file, save_file
    save_file(to_torch(read_map(argv[2]), load_file(argv[3])), argv[4])


if __name__ == "__main__":
    main(sys.argv)
