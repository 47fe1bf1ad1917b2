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

TINY = dict(layers=2, d=64, heads=4, seq=64, vocab=512)
MICRO = 8
RTOL = 2e-5


def run(*argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"interop.py: {' '.join(argv)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


def md_loss(mdrun, plan, weights):
    out = run(mdrun, "--ranks", "1", "--backend", "cpu", "--evaluate", "--init",
              weights, plan)
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


if __name__ == "__main__":
    main()
