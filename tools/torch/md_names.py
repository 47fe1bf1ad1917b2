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
  md_names.py to-hf MAP MD.safetensors OUT_DIR --config CONFIG

Then, in PyTorch: model.load_state_dict(load_file(OUT), strict=False); the
only keys it misses are those the map ignores (tied heads, buffers).

to-hf writes a folder that Hugging Face's from_pretrained loads:
OUT_DIR/model.safetensors (the tensors under the map's names, with the
{"format": "pt"} metadata transformers reads) and OUT_DIR/config.json, the
model's configuration from CONFIG (a config.json, or the save_pretrained
folder the weights came from). The configuration is checked against the
tensors first, because a config.json whose sizes disagree with its weights
gives a model that fails to load or, worse, loads a different architecture:
vocab_size and hidden_size against the embedding, num_hidden_layers against
the layers present, intermediate_size against the MLP, num_attention_heads,
num_key_value_heads and head_dim against q_proj, k_proj and o_proj, and
tie_word_embeddings against the presence of lm_head.weight. A mismatch
names the key, its value and the tensor.
"""

import json
import os
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


def check_config(config, tensors):
    """The mismatches between a Hugging Face config and the tensors it is
    to describe (a list of messages; empty when they agree)."""
    shapes = {n: tuple(t.shape) for n, t in tensors.items()}
    problems = []

    def expect(key, value, tensor, why):
        if key in config and config[key] is not None and config[key] != value:
            problems.append(f"config {key} = {config[key]}, but {tensor} is "
                            f"{list(shapes[tensor])} ({why} {value})")

    embed = next((n for n in shapes if n.endswith("embed_tokens.weight")), None)
    if embed:
        expect("vocab_size", shapes[embed][0], embed, "rows: vocab_size")
        expect("hidden_size", shapes[embed][1], embed, "columns: hidden_size")
    layers = {int(m[1]) for n in shapes for m in [re.search(r"\.layers\.(\d+)\.", n)] if m}
    if layers:
        if layers != set(range(len(layers))):
            problems.append(f"the tensors have layers {sorted(layers)}, not 0 to {len(layers) - 1}")
        expect("num_hidden_layers", len(layers), next(n for n in shapes if ".layers." in n),
               "one of the layers present: num_hidden_layers")
    first = lambda suffix: next((n for n in sorted(shapes) if n.endswith(suffix)), None)  # noqa: E731
    up = first("mlp.up_proj.weight") or first("mlp.gate_proj.weight")
    if up:
        expect("intermediate_size", shapes[up][0], up, "rows: intermediate_size")
    q, k, o = first("self_attn.q_proj.weight"), first("self_attn.k_proj.weight"), \
        first("self_attn.o_proj.weight")
    heads, kv = config.get("num_attention_heads"), config.get("num_key_value_heads")
    head_dim = config.get("head_dim")
    if head_dim is None and heads and config.get("hidden_size"):
        head_dim = config["hidden_size"] // heads
    if q and heads and head_dim:
        expect("num_attention_heads", shapes[q][0] // head_dim, q,
               f"rows over head_dim {head_dim}: num_attention_heads")
        if shapes[q][0] % head_dim:
            problems.append(f"{q} has {shapes[q][0]} rows, not a multiple of head_dim {head_dim}")
    if k and kv and head_dim:
        expect("num_key_value_heads", shapes[k][0] // head_dim, k,
               f"rows over head_dim {head_dim}: num_key_value_heads")
    if o and heads and head_dim and shapes[o][1] != heads * head_dim:
        problems.append(f"{o} is {list(shapes[o])}, but num_attention_heads {heads} x "
                        f"head_dim {head_dim} is {heads * head_dim} columns")
    tied = config.get("tie_word_embeddings")
    if tied is not None and tied == ("lm_head.weight" in shapes):
        problems.append(f"config tie_word_embeddings = {str(tied).lower()}, but the tensors "
                        f"{'have' if tied else 'have no'} lm_head.weight")
    return problems


def to_hf(map_path, md_path, out_dir, config_path):
    from safetensors.torch import load_file, save_file
    if os.path.isdir(config_path):
        config_path = os.path.join(config_path, "config.json")
    try:
        with open(config_path) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"md_names.py: {config_path}: cannot read a config.json: {e}")
    if not isinstance(config, dict):
        sys.exit(f"md_names.py: {config_path}: not a JSON object")
    tensors = to_torch(read_map(map_path), load_file(md_path))
    problems = check_config(config, tensors)
    if problems:
        sys.exit(f"md_names.py: {config_path} does not describe {md_path}:\n  "
                 + "\n  ".join(problems))
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def main(argv):
    if len(argv) == 5 and argv[1] == "to-torch":
        from safetensors.torch import load_file, save_file
        save_file(to_torch(read_map(argv[2]), load_file(argv[3])), argv[4])
    elif len(argv) == 7 and argv[1] == "to-hf" and argv[5] == "--config":
        to_hf(argv[2], argv[3], argv[4], argv[6])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
