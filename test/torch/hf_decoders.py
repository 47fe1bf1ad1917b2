#!/usr/bin/env python3
"""models/mistral.mdl and models/qwen3.mdl against Hugging Face transformers.

  hf_decoders.py MDC MDRUN MODELS_DIR WORK_DIR

For each model, transformers' own class at a tiny size (MistralForCausalLM
with a sliding window of 5 of 16 positions; Qwen3ForCausalLM with a head
dim of 16 where d / heads is 8, and its q_norm and k_norm), in f32 with
eager attention, its weights drawn so that attention scores are of order 1
(as test/torch/llama.py does, so the window, RoPE and the norms matter) and
written by save_pretrained:

1. Loss: md started from that folder through the model's name map (`mdrun
   --evaluate --init FOLDER --init-map models/X.hf.map`) gives the
   cross-entropy of Hugging Face's logits on held-out samples (batches of
   the micro batch in order, the mean of their means) to RTOL, at W = 2
   under ddp and under fsdp-full in f32.
2. Gradients: one step of sgd(lr = 1.0) over the whole training set at
   W = 2 (fsdp-full in f32: sharded parameters, reduce-scatter), so md's
   gradient is init - after; written back to Hugging Face's names by
   tools/torch/md_names.py, which must load into the class with strict =
   True, it must equal autograd's gradient of the same mean loss per tensor
   to llama.py's tolerance (an ulp of the weights plus GREL relative). The
   same weights exported as a folder (`md_names.py to-hf --config`, the
   config.json of the folder they came from) load by from_pretrained and
   give the same logits bit for bit; a config.json whose layer and
   key/value head counts disagree with the weights is refused naming both.
3. Sensitivity: Hugging Face's gradients without the model's distinctive
   part (Mistral without its sliding window; Qwen3 with q_norm and k_norm
   replaced by the identity) must be far from md's, so 1 and 2 see it.

Exits 77 (skipped) with the reason when torch, safetensors, numpy or
transformers is missing (scripts/test.sh installs them in a venv).
"""

import json
import math
import os
import re
import subprocess
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file
    import transformers
except ImportError as e:
    print(f"hf_decoders.py: skipped: {e} (PyTorch, safetensors, numpy and transformers "
          "are test-only dependencies; scripts/test.sh installs them)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama import gtol, run, write_model, RTOL, SENSITIVITY  # noqa: E402

TRAIN, VAL, MICRO = 8, 32, 4
BASE = dict(layers=2, d=32, heads=4, kv_heads=2, hidden=64, vocab=128, seq=16,
            theta=10000.0)
MODELS = [
    # (file, name map, transformers config class and model class, md
    # defines beyond BASE, config arguments beyond the shared ones)
    ("mistral.mdl", "mistral.hf.map", "MistralConfig", "MistralForCausalLM",
     dict(window=5), dict(sliding_window=5, rms_norm_eps=1e-5)),
    ("qwen3.mdl", "qwen3.hf.map", "Qwen3Config", "Qwen3ForCausalLM",
     dict(head_dim=16), dict(head_dim=16, rms_norm_eps=1e-6, attention_bias=False,
                             use_sliding_window=False)),
]


def init_weights(model, seed):
    """Scores of order 1: embeddings N(0, 1), matrices N(0, 1 / in), norm
    weights 1 + N(0, 0.1^2) (off 1, so that their gradients show)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))


def mean_loss(model, idx, tgt, micro):
    losses = []
    with torch.no_grad():
        for b in range(0, idx.shape[0], micro):
            logits = model(torch.from_numpy(idx[b:b + micro]).long()).logits
            losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                          torch.from_numpy(tgt[b:b + micro]).long()
                                          .reshape(-1)).item())
    return float(np.mean(losses))


def grads(model, idx, tgt):
    model.zero_grad(set_to_none=True)
    logits = model(torch.from_numpy(idx).long()).logits
    F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                    torch.from_numpy(tgt).long().reshape(-1)).backward()
    return {n: p.grad.detach().double() for n, p in model.named_parameters()}


def evaluate(mdrun, plan, folder, hf_map):
    out = run(mdrun, "--ranks", "2", "--backend", "cpu", "--evaluate", "--steps", "1",
              "--init", folder, "--init-map", hf_map, plan)
    m = re.findall(r"evaluate at \S+ on \S+: loss ([-+0-9.eE]+|nan|inf)", out)
    if len(m) != 1:
        sys.exit(f"hf_decoders.py: expected one evaluation in mdrun's output:\n{out}")
    return float(m[0])


def check(mdc, mdrun, models, work, spec, seed, failures):
    file, map_name, config_cls, model_cls, defines_extra, config_extra = spec
    name = file.split(".")[0]
    c = dict(BASE, **defines_extra)
    mwork = os.path.join(work, name)
    os.makedirs(mwork, exist_ok=True)
    print(f"== {model_cls}: " + ", ".join(f"{k}={v}" for k, v in c.items()))
    config = getattr(transformers, config_cls)(
        vocab_size=c["vocab"], hidden_size=c["d"], intermediate_size=c["hidden"],
        num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
        num_key_value_heads=c["kv_heads"], max_position_embeddings=c["seq"],
        rope_theta=c["theta"], tie_word_embeddings=False, **config_extra)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    hf = getattr(transformers, model_cls)(config).float().eval()
    init_weights(hf, seed)
    folder = os.path.join(mwork, "pretrained")
    hf.save_pretrained(folder, safe_serialization=True)
    hf_map = os.path.join(models, map_name)

    rng = np.random.default_rng(seed)
    for split, n in (("train", TRAIN), ("val", VAL)):
        stream = rng.integers(0, c["vocab"], size=(n, c["seq"] + 1), dtype=np.int32)
        np.save(os.path.join(mwork, f"{split}.0.npy"), stream[:, :-1].copy())
        np.save(os.path.join(mwork, f"{split}.1.npy"), stream[:, 1:].copy())
    load = lambda s, k: np.load(os.path.join(mwork, f"{s}.{k}.npy"))  # noqa: E731
    val_idx, val_tgt, tr_idx, tr_tgt = load("val", 0), load("val", 1), load("train", 0), \
        load("train", 1)

    defines = [x for k, v in c.items() for x in ("-D", f"{k}={v}")]
    src = write_model(models, mwork, name, MICRO, file)
    plans = {}
    for plan in ("ddp", "full-f32"):
        plans[plan] = os.path.join(mwork, f"{plan}.fb")
        run(mdc, src, *defines, "--plan", plan, "--world-size", "2", "-o", plans[plan])

    # 1. The held-out loss.
    want = mean_loss(hf, val_idx, val_tgt, MICRO)
    for plan in ("ddp", "full-f32"):
        got = evaluate(mdrun, plans[plan], folder, hf_map)
        rel = abs(got - want) / abs(want)
        print(f"{model_cls} held-out loss, W = 2 {plan}: md {got:.7f}, Hugging Face "
              f"{want:.7f} (relative {rel:.2e})")
        if not rel <= RTOL:
            failures.append(f"{model_cls} W = 2 {plan}: md's loss {got} is not {want}")

    # 2. Gradients of the training set's mean loss, md's in Hugging Face's names.
    after = os.path.join(mwork, "after.safetensors")
    run(mdrun, "--ranks", "2", "--backend", "cpu", "--steps", "1", "--init", folder,
        "--init-map", hf_map, "--save-final", after, plans["full-f32"])
    back = os.path.join(mwork, "after.hf.safetensors")
    run(sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                     "tools", "torch", "md_names.py"),
        "to-torch", hf_map, after, back)
    trained = getattr(transformers, model_cls)(config).float()
    result = trained.load_state_dict(load_file(back), strict=True)
    print(f"{model_cls}: md's trained weights load with strict = True: {result}")
    # The same weights as a folder from_pretrained loads (config.json from
    # the folder they started from, checked against their shapes).
    names = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                         "torch", "md_names.py")
    exported = os.path.join(mwork, "exported")
    run(sys.executable, names, "to-hf", hf_map, after, exported, "--config", folder)
    loaded = getattr(transformers, model_cls).from_pretrained(
        exported, attn_implementation="eager").float().eval()
    same = [n for n, t in trained.state_dict().items()
            if not torch.equal(loaded.state_dict()[n], t)]
    if same:
        failures.append(f"{model_cls}: from_pretrained of the exported folder has other "
                        f"weights: {', '.join(same)}")
    with torch.no_grad():
        ids = torch.from_numpy(val_idx[:MICRO]).long()
        diff = (loaded(ids).logits - trained.eval()(ids).logits).abs().max().item()
    print(f"{model_cls}: from_pretrained of md's exported folder gives the logits of its "
          f"weights: max |difference| {diff:.2e}")
    if diff != 0.0:
        failures.append(f"{model_cls}: the exported folder gives other logits ({diff:.3g})")
    with open(os.path.join(folder, "config.json")) as f:
        wrong = json.load(f)
    wrong["num_hidden_layers"] += 1
    wrong["num_key_value_heads"] = c["heads"]
    wrong_path = os.path.join(mwork, "wrong-config.json")
    with open(wrong_path, "w") as f:
        json.dump(wrong, f)
    r = subprocess.run([sys.executable, names, "to-hf", hf_map, after,
                        os.path.join(mwork, "wrong"), "--config", wrong_path],
                       capture_output=True, text=True)
    want_msgs = [f"config num_hidden_layers = {c['layers'] + 1}, but",
                 f"config num_key_value_heads = {c['heads']}, but"]
    if r.returncode == 0 or not all(m in r.stderr for m in want_msgs) or \
            os.path.exists(os.path.join(mwork, "wrong")):
        failures.append(f"{model_cls}: a config.json that disagrees with the weights was "
                        f"not refused naming its keys ({r.returncode}): {r.stderr}")
    else:
        print(f"{model_cls}: a config.json with other layer and key/value head counts is "
              "refused: " + r.stderr.strip().replace("\n", " / "))

    init = {k: v.double() for k, v in load_file(os.path.join(folder, "model.safetensors"))
            .items()}
    stepped = {k: v.double() for k, v in load_file(back).items()}
    want_g = grads(hf, tr_idx, tr_tgt)
    if sorted(stepped) != sorted(want_g):
        sys.exit(f"hf_decoders.py: md's tensors {sorted(stepped)} are not "
                 f"{model_cls}'s {sorted(want_g)}")
    g_md = {n: init[n] - stepped[n] for n in want_g}
    worst, worst_name = 0.0, ""
    for n, g in want_g.items():
        tol = gtol(init[n], g)
        diff = (g_md[n] - g).abs().max().item()
        if diff / tol >= worst:
            worst, worst_name = diff / tol, n
        if not diff <= tol:
            failures.append(f"{model_cls}: the gradient of {n} differs by {diff:.3g} > "
                            f"{tol:.3g} (max |g| {g.abs().max().item():.3g})")
    print(f"{model_cls} gradients, W = 2 full-f32, {len(want_g)} tensors: worst "
          f"{worst:.2f} of its tolerance ({worst_name})")

    # 3. Sensitivity.
    if model_cls == "MistralForCausalLM":
        what = "without its sliding window"
        config_other = getattr(transformers, config_cls)(**dict(config.to_dict(),
                                                                sliding_window=None))
        config_other._attn_implementation = "eager"
        other = getattr(transformers, model_cls)(config_other).float()
        other.load_state_dict(hf.state_dict())
    else:
        what = "with q_norm and k_norm the identity"
        other = getattr(transformers, model_cls)(config).float()
        other.load_state_dict(hf.state_dict())
        for layer in other.model.layers:
            layer.self_attn.q_norm = torch.nn.Identity()
            layer.self_attn.k_norm = torch.nn.Identity()
    other_g = grads(other, tr_idx, tr_tgt)
    ratio, rname = max(((g_md[n] - other_g[n]).abs().max().item() / gtol(init[n], want_g[n]),
                        n) for n in other_g)
    print(f"{model_cls} sensitivity: Hugging Face {what}: gradients {ratio:.3g} "
          f"tolerances from md's ({rname})")
    if not ratio > SENSITIVITY:
        failures.append(f"{model_cls}: md's gradients do not tell apart the model {what}")


def main():
    mdc, mdrun, models, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    failures = []
    for i, spec in enumerate(MODELS):
        check(mdc, mdrun, models, work, spec, 500 + i, failures)
    if failures:
        sys.exit("hf_decoders.py: mismatches:\n  " + "\n  ".join(failures))
    print("hf_decoders.py: md's Mistral and Qwen3 match Hugging Face's (losses and gradients)")


if __name__ == "__main__":
    main()
