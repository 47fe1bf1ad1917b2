#!/usr/bin/env python3
"""md <-> PyTorch weights: the same model gives the same held-out loss.

  interop.py MDC MDRUN MODELS_DIR WORK_DIR

1. md trains the tiny GPT (models/gpt.mdl) for 3 steps on 2 ranks and saves
   its weights (--save-final, safetensors). PyTorch loads them into
   tools/torch/md_gpt.py's GPT with load_state_dict(strict=True) and its
   held-out loss equals the one `mdrun --evaluate --init` computes.
2. PyTorch initialises the model itself (its own generator), saves
   state_dict() with safetensors.torch.save_file, and md started from that
   file (`mdrun --evaluate --init`) gives PyTorch's held-out loss.
3. The same both ways with nanoGPT's names and layout (its fused c_attn, the
   transformer.* prefix, the tied lm_head) through models/gpt.nanogpt.map:
   `mdrun --init --init-map` reads nanoGPT's file, and
   tools/torch/md_names.py turns md's file into one nanoGPT loads.
4. The same both ways with Hugging Face's GPT-2 layout (Conv1D weights,
   [in, out]) through models/gpt.hf.map, whose rules transpose them.

The held-out data is a .npy pair that both read the same way: md's
evaluation takes its samples in order, in batches of the micro batch, and
averages the batches' mean losses, as this script does. Tolerance: 2e-5
relative (f32 kernels in a different order on each side).

Exits 77 (skipped) with the reason when this Python has no torch,
safetensors or numpy (scripts/test.sh installs them in a venv).
"""

import os
import re
import subprocess
import sys

try:
    import numpy as np
    import torch
    from safetensors.torch import load_file, save_file
except ImportError as e:
    print(f"interop.py: skipped: {e} (PyTorch, safetensors and numpy are test-only "
          "dependencies; scripts/test.sh installs them)")
    sys.exit(77)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "torch"))
from md_gpt import GPT  # noqa: E402
import md_names  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class NanoGPT(nn.Module):
    """nanoGPT's GPT (model.py) as it names and lays out its weights, with
    GPT-2's tanh GELU (md's Mlp) instead of nanoGPT's exact one, no dropout."""

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.ln_1 = nn.LayerNorm(d)
            self.attn = nn.Module()
            self.attn.c_attn, self.attn.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ln_2 = nn.LayerNorm(d)
            self.mlp = nn.Module()
            self.mlp.c_fc, self.mlp.c_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                       for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
            h = F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh")
            return x + self.mlp.c_proj(h)

    def __init__(self, vocab, seq, d, heads, layers):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, d), wpe=nn.Embedding(seq, d),
            h=nn.ModuleList(NanoGPT.Block(d, heads) for _ in range(layers)),
            ln_f=nn.LayerNorm(d)))
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as nanoGPT
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.normal_(m.bias, 0.0, 0.02)  # non-zero: the map must place them

    def forward(self, idx, targets):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.shape[1]))
        for block in t.h:
            x = block(x)
        logits = self.lm_head(t.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

class Conv1D(nn.Module):
    """Hugging Face's Conv1D (transformers.pytorch_utils): a Linear whose
    weight is stored [in, out]."""

    def __init__(self, nx, nf):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf).normal_(0.0, 0.02))
        self.bias = nn.Parameter(torch.empty(nf).normal_(0.0, 0.02))

    def forward(self, x):
        return x @ self.weight + self.bias


class HFGPT2(NanoGPT):
    """Hugging Face's GPT2LMHeadModel as it names and lays out its weights:
    nanoGPT's names, Conv1D projections."""

    def __init__(self, vocab, seq, d, heads, layers):
        super().__init__(vocab, seq, d, heads, layers)
        for block in self.transformer.h:
            block.attn.c_attn, block.attn.c_proj = Conv1D(d, 3 * d), Conv1D(d, d)
            block.mlp.c_fc, block.mlp.c_proj = Conv1D(d, 4 * d), Conv1D(4 * d, d)


TINY = dict(layers=2, d=64, heads=4, seq=64, vocab=512)
MICRO = 8
RTOL = 2e-5


def run(*argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"interop.py: {' '.join(argv)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


def md_loss(mdrun, plan, weights, *extra):
    out = run(mdrun, "--ranks", "1", "--backend", "cpu", "--evaluate", "--init",
              weights, *extra, plan)
    m = re.findall(r"evaluate at \S+ on \S+: loss ([-+0-9.eE]+|nan|inf)", out)
    if len(m) != 1:
        sys.exit(f"interop.py: expected one evaluation in mdrun's output:\n{out}")
    return float(m[0])


def torch_loss(model, idx, targets):
    model.eval()
    losses = []
    with torch.no_grad():
        for b in range(0, idx.shape[0], MICRO):
            losses.append(model(torch.from_numpy(idx[b:b + MICRO]).long(),
                                torch.from_numpy(targets[b:b + MICRO]).long()).item())
    return float(np.mean(losses))


def close(what, got, want):
    if not abs(got - want) <= RTOL * abs(want):
        sys.exit(f"interop.py: {what}: md {got!r} vs PyTorch {want!r} "
                 f"(relative difference {abs(got - want) / abs(want):.3g} > {RTOL})")
    print(f"{what}: md {got:.7f}, PyTorch {want:.7f}")


def main():
    mdc, mdrun, models, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)

    # Data: random tokens; the targets are the next tokens of one stream.
    rng = np.random.default_rng(3)
    for name, n in (("train", 64), ("val", 32)):
        stream = rng.integers(0, TINY["vocab"], size=(n, TINY["seq"] + 1), dtype=np.int32)
        np.save(os.path.join(work, f"{name}.0.npy"), stream[:, :-1].copy())
        np.save(os.path.join(work, f"{name}.1.npy"), stream[:, 1:].copy())
    idx = np.load(os.path.join(work, "val.0.npy"))
    targets = np.load(os.path.join(work, "val.1.npy"))

    with open(os.path.join(models, "gpt.mdl")) as f:
        source = f.read()
    source = source.replace('tokens("data/train.bin")', f'npy("{work}/train.npy")')
    source = source.replace('tokens("data/val.bin")', f'npy("{work}/val.npy")')
    source = re.sub(r"global_batch\s*=\s*\d+", "global_batch = 16", source)
    if "tokens(" in source or "global_batch = 16" not in source:
        sys.exit("interop.py: could not rewrite models/gpt.mdl's data and batch")
    model_path = os.path.join(work, "gpt.mdl")
    with open(model_path, "w") as f:
        f.write(source)
    plan = os.path.join(work, "gpt.fb")
    defines = [x for k, v in TINY.items() for x in ("-D", f"{k}={v}")]
    run(mdc, model_path, *defines, "--plan", "ddp", "-o", plan)

    # 1. md's weights in PyTorch.
    md_weights = os.path.join(work, "md.safetensors")
    run(mdrun, "--ranks", "2", "--backend", "cpu", "--steps", "3", "--save-final",
        md_weights, plan)
    model = GPT(TINY["vocab"], TINY["seq"], TINY["d"], TINY["heads"], TINY["layers"])
    model.load_state_dict(load_file(md_weights), strict=True)
    close("md's weights after 3 steps", md_loss(mdrun, plan, md_weights),
          torch_loss(model, idx, targets))

    # 2. PyTorch's weights in md.
    torch.manual_seed(11)
    theirs = GPT(TINY["vocab"], TINY["seq"], TINY["d"], TINY["heads"], TINY["layers"])
    torch_weights = os.path.join(work, "torch.safetensors")
    save_file(theirs.state_dict(), torch_weights)
    close("PyTorch's initial weights", md_loss(mdrun, plan, torch_weights),
          torch_loss(theirs, idx, targets))

    # 3. nanoGPT's names through the map, both ways; 4. the same with Hugging
    # Face's Conv1D layout through the map's transposes.
    dims = (TINY["vocab"], TINY["seq"], TINY["d"], TINY["heads"], TINY["layers"])

    def both_ways(who, cls, map_name, seed, check=None):
        name_map = os.path.join(models, map_name)
        torch.manual_seed(seed)
        theirs = cls(*dims)
        # save_file refuses tensors that share memory: the tied head goes
        # (the map ignores it either way).
        state = {k: v for k, v in theirs.state_dict().items() if k != "lm_head.weight"}
        if check:
            check(state)
        weights = os.path.join(work, f"{map_name}.safetensors")
        save_file(state, weights)
        close(f"{who}'s weights through the map",
              md_loss(mdrun, plan, weights, "--init-map", name_map),
              torch_loss(theirs, idx, targets))

        rules = md_names.read_map(name_map)
        from_md = cls(*dims)
        result = from_md.load_state_dict(
            md_names.to_torch(rules, load_file(md_weights)), strict=False)
        unexpected = list(result.unexpected_keys)
        not_ignored = [k for k in result.missing_keys if not md_names.ignored(rules, k)]
        if unexpected or not_ignored:
            sys.exit(f"interop.py: md's weights under {who}'s names: unexpected "
                     f"{unexpected}, missing {not_ignored}")
        close(f"md's weights in {who}'s layout through the map",
              md_loss(mdrun, plan, md_weights), torch_loss(from_md, idx, targets))

    def conv1d(state):
        if list(state["transformer.h.0.attn.c_attn.weight"].shape) != [TINY["d"], 3 * TINY["d"]]:
            sys.exit("interop.py: the Hugging Face layout's c_attn is not [d, 3 d]")

    both_ways("nanoGPT", NanoGPT, "gpt.nanogpt.map", 13)
    both_ways("Hugging Face", HFGPT2, "gpt.hf.map", 17, conv1d)

if __name__ == "__main__":
    main()
