#!/usr/bin/env python3
"""md's Llama (models/llama.mdl) against an independent PyTorch Llama.

  llama.py MDC MDRUN MODELS_DIR WORK_DIR

The PyTorch model below is written here from Hugging Face transformers'
LlamaForCausalLM math (LlamaRMSNorm computing in f32, LlamaRotaryEmbedding's
inv_freq = 1 / theta^(2i / hd) and cat(freqs, freqs), rotate_half,
apply_rotary_pos_emb, repeat_kv, F.scaled_dot_product_attention with
is_causal=True, the SwiGLU LlamaMLP, an untied lm_head, no biases), under
md's parameter names, in f32. Tiny configurations (CONFIGS):
grouped-query (kv_heads = 2), multi-query (1) and multi-head (4) attention.

PyTorch initialises the weights with its own generator: embeddings N(0, 1),
matrices N(0, 1 / in) (so attention scores are of order 1 and RoPE and the
causal mask matter, which they hardly do at Hugging Face's 0.02), RMSNorm
weights 1 + N(0, 0.1^2) (off 1, so their gradients and scaling show).

1. Loss: md started from PyTorch's weights (`mdrun --evaluate --init`) gives
   PyTorch's held-out loss (md's evaluation takes the samples in order in
   batches of the micro batch and averages the batches' mean losses, as
   torch_loss does), to RTOL relative, at W = 1 (ddp) and W = 2 (f32
   fsdp-full).
2. Gradients: the recipe's optimizer is sgd(lr = 1.0) (no momentum, decay or
   clipping, constant schedule) and global_batch is the number of training
   samples, so one step sees the whole set (the sampler only permutes it)
   and md's gradient is init - after for every parameter. PyTorch's autograd
   gradient of the same mean loss must agree per tensor to the tolerance
   gtol gives (GREL: f32 arithmetic, plus the read-out's resolution, an ulp
   of the weights). Runs at W = 1 (ddp, one micro-step and two), W = 2
   (ddp) and W = 2 under fsdp-full in f32 (sharded parameters and
   gradients, reduce-scatter), with and without activation recomputation.
3. Sensitivity: PyTorch's gradients with interleaved (GPT-J) RoPE pairs,
   without RoPE, without the causal mask, or with k/v heads tiled instead of
   repeat_interleave'd, must be far (> SENSITIVITY tolerances) from md's, so
   the comparisons above see those choices.

The llama3.1 configuration turns on llama.mdl's Llama 3.1 RoPE frequency
scaling (rope_factor 8, an original context of 400) against this file's
Llama with transformers' _compute_llama3_parameters, and the Hugging Face
part below checks it against LlamaForCausalLM with rope_type llama3 too.

The lora configuration is models/llama_lora.mdl against the same PyTorch
Llama with peft-style LoRA on q and v (q(h) = base(h) + (alpha / r) (h aᵀ)
bᵀ, every other weight with requires_grad = False): the held-out loss as in
1, the adapters' gradients as in 2, and every frozen weight bitwise
unchanged by md's step.

5. Hugging Face: transformers' own LlamaForCausalLM at the gqa size, its
   weights saved by save_pretrained (safetensors) and read by md through
   models/llama.hf.map (`--init FILE --init-map`): md's held-out loss is
   the cross-entropy of Hugging Face's logits, to RTOL, and the same from a
   save_pretrained folder of several shards and its index (`--init
   FOLDER`); md's weights after a
   step, written back to Hugging Face's names by tools/torch/md_names.py,
   load into LlamaForCausalLM with strict = True and give the logits md's
   weights give. Skipped, with the reason printed, when transformers is
   absent.

An f64 copy of the PyTorch model measures how far each side is from the
exact result: the lines print md - f64 next to torch f32 - f64.

Exits 77 (skipped) with the reason when this Python has no torch,
safetensors or numpy (scripts/test.sh installs them in a venv).
"""

import math
import os
import re
import subprocess
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from safetensors.torch import load_file, save_file
except ImportError as e:
    print(f"llama.py: skipped: {e} (PyTorch, safetensors and numpy are test-only "
          "dependencies; scripts/test.sh installs them)")
    sys.exit(77)

BASE = dict(layers=2, d=32, heads=4, kv_heads=2, hidden=64, vocab=128, seq=16)
# (name, overrides, gradient runs (label, plan, W, micro_batch)). gqa keeps
# llama.mdl's theta = 500000, under which only RoPE's first frequencies turn
# far in 16 positions; the others take smaller thetas so that every one does.
CONFIGS = [
    ("gqa", dict(), [("ddp", "ddp", 1, 8), ("ddp, 2 micro-steps", "ddp", 1, 4),
                     ("ddp", "ddp", 2, 4), ("full-f32", "full-f32", 2, 4),
                     ("full-f32, activations recomputed", "full-f32-recompute", 2, 4)]),
    ("mqa", dict(kv_heads=1, theta=10000.0), [("ddp", "ddp", 2, 4),
                                              ("full-f32", "full-f32", 2, 4)]),
    ("mha", dict(kv_heads=4, theta=100.0), [("full-f32", "full-f32", 2, 4)]),
    # Llama 3.1's RoPE frequency scaling (rope_type llama3): with hd = 8 and
    # an original context of 400, one frequency keeps, one is interpolated
    # and two are divided by the factor.
    ("llama3.1", dict(rope_factor=8.0, rope_original=400.0),
     [("full-f32", "full-f32", 2, 4)]),
    # models/llama_lora.mdl: the base frozen, rank-r adapters on q and v.
    ("lora", dict(theta=10000.0, r=4, alpha=8.0), [("ddp", "ddp", 2, 4),
                                                   ("full-f32", "full-f32", 2, 4)]),
]
THETA, EPS = 500000.0, 1e-5  # llama.mdl's defaults
TRAIN, VAL, VAL_MICRO = 8, 32, 4
RTOL = 2e-5   # held-out loss, relative
# Gradients, per tensor: max |g_md - g_torch| <= ulp(max |w| + max |g|) +
# GREL * max |g|. The first term is the read-out's resolution: `after` is
# rounded to f32, so init - after carries up to half an ulp of the weight
# (1.2e-7 for the N(0, 1) embeddings, 6e-8 for RMSNorm weights near 1),
# which is most of what is measured. The second is f32 arithmetic on either
# side: PyTorch f32 is within about 1e-6 * max |g| of f64 here.
GREL = 1e-5
SENSITIVITY = 10  # a wrong convention's gradients: > 10 tolerances away
FULL_F32 = """
plan full-f32 extends fsdp-full {
  precision = { param = f32, reduce = f32, buffer = f32, master = f32 }
}
plan full-f32-recompute extends fsdp-full {
  precision = { param = f32, reduce = f32, buffer = f32, master = f32 }
  checkpoint_activations = blocks(layers_)
}
"""


def run(*argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"llama.py: {' '.join(argv)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


# ---------------------------------------------------------------- PyTorch


class RMSNorm(nn.Module):
    """LlamaRMSNorm: the statistics in (at least) f32, weight * normalised."""

    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32) if dtype in (torch.float16, torch.bfloat16) else x
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_pairs(x):
    """GPT-J's interleaved form (for the sensitivity check only)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1, rotate=rotate_half):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin


def repeat_kv(x, n_rep):
    """[B, kv_heads, T, hd] -> [B, kv_heads * n_rep, T, hd], each kv head n_rep
    times in a row (torch.repeat_interleave(x, n_rep, dim=1))."""
    b, kvh, t, hd = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, kvh, n_rep, t, hd).reshape(b, kvh * n_rep, t, hd)


class Lora(nn.Module):
    """peft's LoRA Linear without dropout: base(x) + (alpha / r) (x aᵀ) bᵀ,
    under md's names (base.weight, a, b)."""

    def __init__(self, din, dout, r, alpha):
        super().__init__()
        self.base = nn.Linear(din, dout, bias=False)
        self.a = nn.Parameter(torch.zeros(r, din))
        self.b = nn.Parameter(torch.zeros(dout, r))
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + (x @ self.a.t()) @ self.b.t() * self.scale


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, hd = c["d"], c["d"] // c["heads"]
        self.heads, self.kv_heads, self.hd = c["heads"], c["kv_heads"], hd
        self.attn_norm = RMSNorm(d, c["eps"])
        if "r" in c:
            self.q = Lora(d, c["heads"] * hd, c["r"], c["alpha"])
            self.v = Lora(d, c["kv_heads"] * hd, c["r"], c["alpha"])
        else:
            self.q = nn.Linear(d, c["heads"] * hd, bias=False)
            self.v = nn.Linear(d, c["kv_heads"] * hd, bias=False)
        self.k = nn.Linear(d, c["kv_heads"] * hd, bias=False)
        self.o = nn.Linear(c["heads"] * hd, d, bias=False)
        self.mlp_norm = RMSNorm(d, c["eps"])
        self.gate = nn.Linear(d, c["hidden"], bias=False)
        self.up = nn.Linear(d, c["hidden"], bias=False)
        self.down = nn.Linear(c["hidden"], d, bias=False)

    def forward(self, x, cos, sin, variant):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(b, t, -1, self.hd).transpose(1, 2)
        k = self.k(h).view(b, t, -1, self.hd).transpose(1, 2)
        v = self.v(h).view(b, t, -1, self.hd).transpose(1, 2)
        if variant != "without-rope":
            rotate = rotate_pairs if variant == "interleaved-rope" else rotate_half
            q, k = apply_rotary_pos_emb(q, k, cos, sin, rotate=rotate)
        n_rep = self.heads // self.kv_heads
        if variant == "tiled-kv":
            k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)
        else:
            k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=variant != "not-causal")
        x = x + self.o(y.transpose(1, 2).reshape(b, t, -1))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c["vocab"], c["d"])
        self.layers_ = nn.ModuleList(Decoder(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["d"], c["eps"])
        self.lm_head = nn.Linear(c["d"], c["vocab"], bias=False)
        if "r" in c:  # LoRA: only the adapters train
            for name, p in self.named_parameters():
                p.requires_grad_(name.endswith((".a", ".b")))

    def rope(self, t, dtype, variant="llama"):
        """LlamaRotaryEmbedding: cos, sin [1, T, hd]; the default rope_type,
        or with rope_factor transformers' _compute_llama3_parameters (low and
        high frequency factors 1 and 4)."""
        hd = self.c["d"] // self.c["heads"]
        inv_freq = 1.0 / (self.c["theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64)
                                              .to(dtype) / hd))
        factor = self.c.get("rope_factor", 1.0)
        if factor != 1.0 and variant != "unscaled-rope":
            low, high, old = 1.0, 4.0, self.c["rope_original"]
            wavelen = 2 * math.pi / inv_freq
            scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
            smooth = (old / wavelen - low) / (high - low)
            smoothed = (1 - smooth) * scaled / factor + smooth * scaled
            medium = ~(wavelen < old / high) * ~(wavelen > old / low)
            inv_freq = torch.where(medium, smoothed, scaled)
        pos = torch.arange(t, dtype=dtype)[None, :]
        freqs = (inv_freq[None, :, None] @ pos[:, None, :]).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def forward(self, idx, targets, variant="llama"):
        x = self.embed(idx)
        cos, sin = self.rope(idx.shape[1], x.dtype, variant)
        for layer in self.layers_:
            x = layer(x, cos, sin, variant)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name == "embed.weight":
                p.copy_(torch.randn(p.shape, generator=g))
            else:  # a Linear's [out, in], an adapter's [r, in] or [out, r]
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))


def gtol(w, g):
    """The gradient tolerance of one tensor (see GREL)."""
    top = (w.abs().max() + g.abs().max()).item()
    ulp = float(np.spacing(np.float32(top)))
    return ulp + GREL * g.abs().max().item()


def torch_loss(model, idx, targets, micro, variant="llama"):
    """md's evaluation: batches of `micro` in order, the mean of their means."""
    losses = []
    with torch.no_grad():
        for b in range(0, idx.shape[0], micro):
            losses.append(model(torch.from_numpy(idx[b:b + micro]).long(),
                                torch.from_numpy(targets[b:b + micro]).long(),
                                variant).item())
    return float(np.mean(losses))


def torch_grads(model, idx, targets, variant="llama"):
    model.zero_grad(set_to_none=True)
    model(torch.from_numpy(idx).long(), torch.from_numpy(targets).long(), variant).backward()
    return {n: p.grad.detach().double() for n, p in model.named_parameters()
            if p.requires_grad}


# ---------------------------------------------------------------- md


def write_model(models, work, name, micro, file="llama.mdl"):
    with open(os.path.join(models, file)) as f:
        source = f.read()
    source = re.sub(r"data\s*=\s*synthetic\([^)]*\)", f'data = npy("{work}/train.npy")', source)
    source = re.sub(r"global_batch\s*=\s*\d+", f"global_batch = {TRAIN}", source)
    source = re.sub(r"micro_batch\s*=\s*\d+", f"micro_batch = {micro}", source)
    # The whole optimizer setting (it spans lines) up to the schedule.
    source = re.sub(r"optimizer\s*=\s*adamw\(.*?\n(\s*)schedule",
                    lambda m: f"optimizer = sgd(lr = 1.0)\n{m.group(1)}schedule", source,
                    count=1, flags=re.S)
    source = re.sub(r"schedule\s*=\s*cosine\([^)]*\)", "schedule = constant", source)
    source = re.sub(r"\n\s*clip_grad_norm\s*=\s*[0-9.]+", "", source)
    hook = (f"\n  every 1000000 steps {{\n    val = evaluate(npy(\"{work}/val.npy\"))\n"
            f"    log(\"val\", val)\n  }}\n}}")
    source = re.sub(r"\n}\s*$", hook, source.rstrip() + "\n")
    source += FULL_F32
    if ("synthetic(" in source or "sgd(lr = 1.0)" not in source or "adamw" in source
            or "schedule = constant" not in source or "clip_grad_norm" in source
            or "evaluate(npy(" not in source):
        sys.exit(f"llama.py: could not rewrite models/{file}'s recipe")
    path = os.path.join(work, f"{name}.mdl")
    with open(path, "w") as f:
        f.write(source)
    return path


def md_loss(mdrun, plan, weights, ranks, *options):
    """The held-out loss mdrun --evaluate prints for `plan` from `weights`
    (a file or a save_pretrained folder; `options` such as --init-map)."""
    out = run(mdrun, "--ranks", str(ranks), "--backend", "cpu", "--evaluate", "--steps", "1",
              "--init", weights, *options, plan)
    m = re.findall(r"evaluate at \S+ on \S+: loss ([-+0-9.eE]+|nan|inf)", out)
    if len(m) != 1:
        sys.exit(f"llama.py: expected one evaluation in mdrun's output:\n{out}")
    return float(m[0])


def hugging_face(mdc, mdrun, models, work, failures):
    """5: transformers' LlamaForCausalLM through models/llama.hf.map."""
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        print(f"llama.py: Hugging Face part skipped: {e} (transformers is a test-only "
              "dependency; scripts/test.sh installs it)")
        return
    c = dict(BASE, theta=10000.0, eps=EPS)
    hwork = os.path.join(work, "hf")
    os.makedirs(hwork, exist_ok=True)
    print("== Hugging Face LlamaForCausalLM: " + ", ".join(f"{k}={v}" for k, v in c.items()))
    config = LlamaConfig(vocab_size=c["vocab"], hidden_size=c["d"],
                         intermediate_size=c["hidden"], num_hidden_layers=c["layers"],
                         num_attention_heads=c["heads"], num_key_value_heads=c["kv_heads"],
                         max_position_embeddings=c["seq"], rope_theta=c["theta"],
                         rms_norm_eps=c["eps"], tie_word_embeddings=False,
                         attention_bias=False, mlp_bias=False)
    config._attn_implementation = "eager"
    torch.manual_seed(7)
    hf = LlamaForCausalLM(config).float().eval()
    init_weights(hf, seed=2024)  # scores of order 1, as above
    folder = os.path.join(hwork, "pretrained")
    hf.save_pretrained(folder, safe_serialization=True)
    weights = os.path.join(folder, "model.safetensors")
    hf_map = os.path.join(models, "llama.hf.map")

    rng = np.random.default_rng(300)
    for name, n in (("train", TRAIN), ("val", VAL)):
        stream = rng.integers(0, c["vocab"], size=(n, c["seq"] + 1), dtype=np.int32)
        np.save(os.path.join(hwork, f"{name}.0.npy"), stream[:, :-1].copy())
        np.save(os.path.join(hwork, f"{name}.1.npy"), stream[:, 1:].copy())
    val_idx = np.load(os.path.join(hwork, "val.0.npy"))
    val_tgt = np.load(os.path.join(hwork, "val.1.npy"))

    def hf_loss(model):
        losses = []
        with torch.no_grad():
            for b in range(0, val_idx.shape[0], VAL_MICRO):
                logits = model(torch.from_numpy(val_idx[b:b + VAL_MICRO]).long()).logits
                tgt = torch.from_numpy(val_tgt[b:b + VAL_MICRO]).long()
                losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                              tgt.reshape(-1)).item())
        return float(np.mean(losses))

    defines = [x for k, v in c.items() if k != "eps" for x in ("-D", f"{k}={v}")]
    src = write_model(models, hwork, "llama", VAL_MICRO)
    plan = os.path.join(hwork, "ddp.fb")
    run(mdc, src, *defines, "--plan", "ddp", "-o", plan)
    unscaled = md_loss(mdrun, plan, weights, 2, "--init-map", hf_map)
    got, want = unscaled, hf_loss(hf)
    rel = abs(got - want) / abs(want)
    print(f"Hugging Face held-out loss: md {got:.7f} (its weights through llama.hf.map), "
          f"LlamaForCausalLM {want:.7f} (relative {rel:.2e})")
    if not rel <= RTOL:
        failures.append(f"Hugging Face: md's loss {got} is not LlamaForCausalLM's {want}")

    # The same weights as save_pretrained's shards and index: --init FOLDER.
    sharded = os.path.join(hwork, "sharded")
    hf.save_pretrained(sharded, safe_serialization=True, max_shard_size="40KB")
    shards = sorted(f for f in os.listdir(sharded) if f.endswith(".safetensors"))
    from_shards = md_loss(mdrun, plan, sharded, 2, "--init-map", hf_map)
    print(f"Hugging Face: from the folder of {len(shards)} shards and its index: loss "
          f"{from_shards!r} (from one file: {unscaled!r})")
    if len(shards) < 2 or from_shards != unscaled:
        failures.append(f"Hugging Face: {len(shards)} shards give loss {from_shards!r}, "
                        f"one file {unscaled!r}")

    # md's weights after a step, back under Hugging Face's names.
    after = os.path.join(hwork, "after.safetensors")
    run(mdrun, "--ranks", "2", "--backend", "cpu", "--steps", "1", "--init", weights,
        "--init-map", hf_map, "--save-final", after, plan)
    back = os.path.join(hwork, "after.hf.safetensors")
    run(sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                     "tools", "torch", "md_names.py"),
        "to-torch", hf_map, after, back)
    trained = LlamaForCausalLM(config).float().eval()
    missing = trained.load_state_dict(load_file(back), strict=True)
    print(f"Hugging Face: md's trained weights load into LlamaForCausalLM (strict): {missing}")
    ours = Llama(c)
    ours.load_state_dict(load_file(after))
    with torch.no_grad():
        idx = torch.from_numpy(val_idx[:VAL_MICRO]).long()
        diff = (trained(idx).logits - torch_logits(ours, idx)).abs().max().item()
    print(f"Hugging Face: logits of md's trained weights in LlamaForCausalLM vs this "
          f"file's Llama: max |difference| {diff:.2e}")
    if not diff <= 1e-4:
        failures.append(f"Hugging Face: md's trained weights give other logits ({diff:.3g})")


    # Llama 3.1's scaled RoPE: Hugging Face's rope_type llama3 against
    # llama.mdl's rope_factor and rope_original (with theta 10000 and hd 8,
    # a context of 100 interpolates one frequency and divides two).
    rope = {"rope_type": "llama3", "rope_theta": c["theta"], "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 100}
    scaled_config = LlamaConfig(**dict(config.to_dict(), rope_parameters=rope))
    scaled_config._attn_implementation = "eager"
    scaled = LlamaForCausalLM(scaled_config).float().eval()
    scaled.load_state_dict(hf.state_dict())
    scaled_folder = os.path.join(hwork, "scaled")
    scaled.save_pretrained(scaled_folder, safe_serialization=True)
    scaled_plan = os.path.join(hwork, "scaled.fb")
    run(mdc, src, *defines, "-D", "rope_factor=8.0", "-D", "rope_original=100.0",
        "--plan", "ddp", "-o", scaled_plan)
    got = md_loss(mdrun, scaled_plan, scaled_folder, 2, "--init-map", hf_map)
    want = hf_loss(scaled)
    rel = abs(got - want) / abs(want)
    print(f"Hugging Face rope_type llama3 (factor 8, original context 100): md "
          f"{got:.7f}, LlamaForCausalLM {want:.7f} (relative {rel:.2e}; unscaled "
          f"{unscaled:.7f})")
    if not rel <= RTOL:
        failures.append(f"Hugging Face llama3 RoPE: md's loss {got} is not {want}")
    if not abs(unscaled - want) / abs(want) > 10 * RTOL:
        failures.append("Hugging Face llama3 RoPE: the scaling does not change the loss")


def torch_logits(model, idx):
    x = model.embed(idx)
    cos, sin = model.rope(idx.shape[1], x.dtype)
    for layer in model.layers_:
        x = layer(x, cos, sin, "llama")
    return model.lm_head(model.norm(x))


def main():
    mdc, mdrun, models, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    failures = []

    def check_loss(what, got, want, exact):
        rel = abs(got - want) / abs(want)
        print(f"{what}: md {got:.7f}, PyTorch f32 {want:.7f} (relative {rel:.2e}; "
              f"md - f64 {got - exact:+.2e}, torch - f64 {want - exact:+.2e})")
        if not rel <= RTOL:
            failures.append(f"{what}: relative difference {rel:.3g} > {RTOL}")

    for ci, (cname, overrides, grad_runs) in enumerate(CONFIGS):
        c = dict(BASE, theta=THETA, eps=EPS)
        c.update(overrides)
        cwork = os.path.join(work, cname)
        os.makedirs(cwork, exist_ok=True)
        print(f"== {cname}: " + ", ".join(f"{k}={v}" for k, v in c.items()))

        rng = np.random.default_rng(100 + ci)
        for name, n in (("train", TRAIN), ("val", VAL)):
            stream = rng.integers(0, c["vocab"], size=(n, c["seq"] + 1), dtype=np.int32)
            np.save(os.path.join(cwork, f"{name}.0.npy"), stream[:, :-1].copy())
            np.save(os.path.join(cwork, f"{name}.1.npy"), stream[:, 1:].copy())
        load = lambda n, k: np.load(os.path.join(cwork, f"{n}.{k}.npy"))  # noqa: E731
        val_idx, val_tgt = load("val", 0), load("val", 1)
        tr_idx, tr_tgt = load("train", 0), load("train", 1)

        # eps stays llama.mdl's default (EPS).
        defines = [x for k, v in c.items() if k != "eps" for x in ("-D", f"{k}={v}")]
        # Each plan at the micro batch it runs with (W = 2 full-f32 pinned).
        plans = {}
        needed = {(plan, micro) for _, plan, _, micro in grad_runs}
        needed |= {("ddp", VAL_MICRO), ("full-f32", VAL_MICRO)}
        for plan, micro in sorted(needed):
            src = write_model(models, cwork, f"llama-mb{micro}", micro,
                              "llama_lora.mdl" if "r" in c else "llama.mdl")
            extra = ["--world-size", "2"] if plan.startswith("full-f32") else []
            plans[(plan, micro)] = os.path.join(cwork, f"{plan}-mb{micro}.fb")
            run(mdc, src, *defines, "--plan", plan, *extra, "-o", plans[(plan, micro)])

        model = Llama(c)
        init_weights(model, seed=1000 + ci)
        exact = Llama(c).double()
        exact.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
        frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
        init_path = os.path.join(cwork, "torch_init.safetensors")
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, init_path)

        # 1. The held-out loss.
        want = torch_loss(model, val_idx, val_tgt, VAL_MICRO)
        exact_loss = torch_loss(exact, val_idx, val_tgt, VAL_MICRO)
        got = md_loss(mdrun, plans[("ddp", VAL_MICRO)], init_path, 1)
        check_loss(f"{cname} held-out loss, W = 1 ddp", got, want, exact_loss)
        got2 = md_loss(mdrun, plans[("full-f32", VAL_MICRO)], init_path, 2)
        check_loss(f"{cname} held-out loss, W = 2 full-f32", got2, want, exact_loss)

        # 2. Gradients of the training set's mean loss.
        want_g = torch_grads(model, tr_idx, tr_tgt)
        exact_g = torch_grads(exact, tr_idx, tr_tgt)
        init = {k: v.double() for k, v in load_file(init_path).items()}
        first_md = None
        for label, plan, ranks, micro in grad_runs:
            after_path = os.path.join(cwork, f"after-{plan}-w{ranks}-mb{micro}.safetensors")
            run(mdrun, "--ranks", str(ranks), "--backend", "cpu", "--steps", "1",
                "--init", init_path, "--save-final", after_path, plans[(plan, micro)])
            after = {k: v.double() for k, v in load_file(after_path).items()}
            if sorted(after) != sorted(list(want_g) + frozen):
                sys.exit(f"llama.py: md's parameters {sorted(after)} are not PyTorch's "
                         f"{sorted(list(want_g) + frozen)}")
            moved = [n for n in frozen if not torch.equal(after[n], init[n])]
            if moved:
                failures.append(f"{cname} W = {ranks} {label}: frozen parameters changed: "
                                + ", ".join(moved))
            elif frozen:
                print(f"{cname} W = {ranks} {label}: the {len(frozen)} frozen parameters "
                      "are bitwise unchanged")
            g_md = {n: init[n] - after[n] for n in want_g}
            first_md = first_md or g_md
            what = f"{cname} gradients, W = {ranks} {label} (micro_batch {micro})"
            print(f"{what}, per tensor: max|g|, max|md - torch|, tolerance, worst "
                  f"relative |md - torch| / |g| (over |g| >= 1e-3 max|g|), max|md - f64|, "
                  f"max|torch - f64|")
            worst_ratio, worst_name = 0.0, ""
            for name in want_g:
                g_t, g_x = want_g[name], exact_g[name]
                scale = g_t.abs().max().item()
                tol = gtol(init[name], g_t)
                diff = (g_md[name] - g_t).abs()
                maxdiff = diff.max().item()
                big = g_t.abs() >= 1e-3 * scale
                relw = (diff[big] / g_t[big].abs()).max().item() if big.any() else 0.0
                md_x = (g_md[name] - g_x).abs().max().item()
                t_x = (g_t - g_x).abs().max().item()
                print(f"  {name:28s} {scale:9.3e} {maxdiff:9.2e} {tol:9.2e} "
                      f"{relw:9.2e} {md_x:9.2e} {t_x:9.2e}")
                if maxdiff / tol >= worst_ratio:
                    worst_ratio, worst_name = maxdiff / tol, name
                if not maxdiff <= tol:
                    failures.append(f"{what}: the gradient of {name} differs by "
                                    f"{maxdiff:.3g} > {tol:.3g} (max |g| {scale:.3g})")
            print(f"{what}: worst {worst_ratio:.2f} of its tolerance ({worst_name})")

        # 3. Sensitivity: the conventions md must have to match.
        variants = ["interleaved-rope", "without-rope", "not-causal"]
        if 1 < c["kv_heads"] < c["heads"]:
            variants.append("tiled-kv")
        if c.get("rope_factor", 1.0) != 1.0:
            variants.append("unscaled-rope")
        for variant in variants:
            other = torch_grads(model, tr_idx, tr_tgt, variant)
            ratio, name = max((((first_md[n] - other[n]).abs().max().item()
                                / gtol(init[n], want_g[n])), n) for n in other)
            loss = torch_loss(model, val_idx, val_tgt, VAL_MICRO, variant)
            print(f"{cname} sensitivity: PyTorch's variant {variant}: gradients "
                  f"{ratio:.3g} tolerances from md's ({name}), held-out loss {loss:.7f}")
            if not ratio > SENSITIVITY:
                failures.append(f"{cname}: md's gradients do not tell {variant} apart "
                                f"({ratio:.3g} <= {SENSITIVITY} tolerances)")

    hugging_face(mdc, mdrun, models, work, failures)

    if failures:
        sys.exit("llama.py: mismatches:\n  " + "\n  ".join(failures))
    print("llama.py: md's Llama matches PyTorch's (losses and gradients)")


if __name__ == "__main__":
    main()
