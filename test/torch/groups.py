#!/usr/bin/env python3
"""Optimizer parameter groups: md's AdamW groups train like PyTorch's.

  groups.py MDC MDRUN MODELS_DIR WORK_DIR

The tiny GPT of models/gpt.mdl, with nanoGPT's configure_optimizers rule
written as md groups (no weight decay for parameters of fewer than 2 dims:
biases and LayerNorm weights) plus a learning-rate multiplier for the
attention's matrices:

  groups = [group(ndim = 1, weight_decay = 0.0),
            group(match = "h.*.attn.*", lr_scale = 0.5)]

md trains it for 3 steps at W = 2 under fsdp-full, where a rank's shard of
a unit's flat buffer holds parameters of several groups, from weights
PyTorch initialised (`mdrun --init`). PyTorch trains tools/torch/md_gpt.py's
GPT from the same weights on the same 16 samples (one step is the whole
data set, so the sampler's order does not matter) with torch.optim.AdamW
and the same three param_groups, and clip_grad_norm_. The held-out loss and
every weight must agree: the loss to RTOL, each tensor to ATOL. The same
comparison against a PyTorch run that ignores the groups (one group, decay
everywhere) must fail by far (5 * ATOL), so the groups are what the test
sees.

Exits 77 (skipped) with the reason when this Python has no torch,
safetensors or numpy.
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
    print(f"groups.py: skipped: {e} (PyTorch, safetensors and numpy are test-only "
          "dependencies; scripts/test.sh installs them)")
    sys.exit(77)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "torch"))
from md_gpt import GPT  # noqa: E402

TINY = dict(layers=2, d=64, heads=4, seq=64, vocab=512)
SAMPLES, MICRO, STEPS = 16, 8, 3
LR, BETAS, EPS, DECAY, ATTN_SCALE, CLIP = 1e-2, (0.9, 0.95), 1e-3, 0.5, 0.5, 1.0
OPTIMIZER = (f"adamw(lr = {LR}, betas = ({BETAS[0]}, {BETAS[1]}), eps = {EPS}, "
             f"weight_decay = {DECAY}, "
             f"groups = [group(ndim = 1, weight_decay = 0.0), "
             f"group(match = \"h.*.attn.*\", lr_scale = {ATTN_SCALE})])")
# With the default eps (1e-8), Adam's first steps are lr * sign(g): an
# element whose gradient is rounding noise (the key biases' is zero in
# exact arithmetic) moves by +-lr on either side, whichever way its noise
# falls. eps = 1e-3, about the gradients' size here, makes the update a
# smooth function of the gradient. md and PyTorch then still differ by up
# to 6.5e-4 in some weights after 3 steps without groups (their kernels
# round differently, and Adam's normalised steps carry that into the
# weights), hence ATOL. Decay alone moves a LayerNorm weight (about 1) by
# lr * DECAY = 5e-3 a step, 1.5e-2 in 3, and the attention's lr_scale takes
# about 2e-3 a step off its matrices' steps: the run without groups must
# differ by more than 5 * ATOL.
ATOL = 1e-3
RTOL = 1e-4


def run(*argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"groups.py: {' '.join(argv)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


def torch_train(init, idx, targets, grouped):
    model = GPT(TINY["vocab"], TINY["seq"], TINY["d"], TINY["heads"], TINY["layers"])
    model.load_state_dict(init, strict=True)
    if grouped:
        # First match wins, as md's groups: ndim 1, then attention, then the rest.
        params = dict(model.named_parameters())
        no_decay = [n for n, p in params.items() if p.dim() < 2]
        attn = [n for n in params if n not in no_decay and re.fullmatch(r"h\..*\.attn\..*", n)]
        rest = [n for n in params if n not in no_decay and n not in attn]
        groups = [dict(params=[params[n] for n in no_decay], weight_decay=0.0, lr=LR),
                  dict(params=[params[n] for n in attn], weight_decay=DECAY, lr=LR * ATTN_SCALE),
                  dict(params=[params[n] for n in rest], weight_decay=DECAY, lr=LR)]
    else:
        groups = [dict(params=list(model.parameters()), weight_decay=DECAY, lr=LR)]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, foreach=False)
    x, y = torch.from_numpy(idx).long(), torch.from_numpy(targets).long()
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        # md averages the two ranks' micro-batch means: the same mean.
        model(x, y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
    return model


def weight_error(md, model):
    """The largest absolute difference of any weight, and its tensor."""
    worst, where = 0.0, ""
    for name, value in model.state_dict().items():
        diff = (md[name].float() - value.float()).abs().max().item()
        if diff > worst:
            worst, where = diff, name
    return worst, where


def main():
    mdc, mdrun, models, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)

    rng = np.random.default_rng(5)
    stream = rng.integers(0, TINY["vocab"], size=(SAMPLES, TINY["seq"] + 1), dtype=np.int32)
    idx, targets = stream[:, :-1].copy(), stream[:, 1:].copy()
    for name in ("train", "val"):
        np.save(os.path.join(work, f"{name}.0.npy"), idx)
        np.save(os.path.join(work, f"{name}.1.npy"), targets)

    with open(os.path.join(models, "gpt.mdl")) as f:
        source = f.read()
    source = source.replace('tokens("data/train.bin")', f'npy("{work}/train.npy")')
    source = source.replace('tokens("data/val.bin")', f'npy("{work}/val.npy")')
    source = re.sub(r"global_batch\s*=\s*\d+", f"global_batch = {SAMPLES}", source)
    source = re.sub(r"micro_batch\s*=\s*\d+", f"micro_batch = {MICRO}", source)
    # The whole optimizer setting, which may span lines (models/gpt.mdl has
    # groups of its own), up to the schedule that follows it.
    source = re.sub(r"optimizer\s*=\s*adamw\(.*?\n(\s*)schedule",
                    lambda m: f"optimizer = {OPTIMIZER}\n{m.group(1)}schedule", source,
                    count=1, flags=re.S)
    source = re.sub(r"schedule\s*=\s*cosine\([^)]*\)", "schedule = constant", source)
    source = re.sub(r"clip_grad_norm\s*=\s*[0-9.]+", f"clip_grad_norm = {CLIP}", source)
    if "tokens(" in source or OPTIMIZER not in source or "schedule = constant" not in source:
        sys.exit("groups.py: could not rewrite models/gpt.mdl's data, batch and optimizer")
    model_path = os.path.join(work, "gpt.mdl")
    with open(model_path, "w") as f:
        f.write(source)
    plan = os.path.join(work, "gpt.fb")
    defines = [x for k, v in TINY.items() for x in ("-D", f"{k}={v}")]
    run(mdc, model_path, *defines, "--plan", "fsdp-full", "--world-size", "2", "-o", plan)

    torch.manual_seed(17)
    init = GPT(TINY["vocab"], TINY["seq"], TINY["d"], TINY["heads"], TINY["layers"])
    with torch.no_grad():  # LayerNorm weights off 1 and biases off 0: decay shows
        for name, p in init.named_parameters():
            if p.dim() < 2:
                p.add_(torch.randn_like(p) * 0.1)
    init_path = os.path.join(work, "init.safetensors")
    save_file(init.state_dict(), init_path)

    md_path = os.path.join(work, "md.safetensors")
    out = run(mdrun, "--ranks", "2", "--backend", "cpu", "--steps", str(STEPS), "--init",
              init_path, "--save-final", md_path, plan)
    if "optimizer group ndim = 1" not in out:
        sys.exit(f"groups.py: mdrun's banner does not list the groups:\n{out}")
    md = load_file(md_path)

    init_state = load_file(init_path)
    model = torch_train(init_state, idx, targets, grouped=True)
    worst, where = weight_error(md, model)
    print(f"weights after {STEPS} steps: largest difference {worst:.3g} ({where}), "
          f"tolerance {ATOL}")
    if not worst <= ATOL:
        sys.exit(f"groups.py: md and PyTorch weights differ by {worst:.3g} in {where}")
    with torch.no_grad():
        want = model(torch.from_numpy(idx).long(), torch.from_numpy(targets).long()).item()
    eval_out = run(mdrun, "--ranks", "2", "--backend", "cpu", "--evaluate", "--steps", "1",
                   "--init", md_path, plan)
    got = float(re.findall(r"evaluate at \S+ on \S+: loss ([-+0-9.eE]+)", eval_out)[0])
    print(f"held-out loss after {STEPS} steps: md {got:.7f}, PyTorch {want:.7f}")
    if not abs(got - want) <= RTOL * abs(want):
        sys.exit(f"groups.py: held-out loss md {got!r} vs PyTorch {want!r}")

    ungrouped = torch_train(init_state, idx, targets, grouped=False)
    worst, where = weight_error(md, ungrouped)
    print(f"against PyTorch without groups: largest difference {worst:.3g} ({where})")
    if not worst > 5 * ATOL:
        sys.exit("groups.py: md's weights are as close to a run without groups: "
                 "the groups made no difference")


if __name__ == "__main__":
    main()
