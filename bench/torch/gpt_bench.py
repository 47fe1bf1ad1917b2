#!/usr/bin/env python3
"""PyTorch's side of bench/vs_pytorch.sh: models/gpt.mdl's GPT, trained the way
mdrun trains it, timed per optimizer step.

The model has md's parameter names and layouts (wte, wpe, h.N.ln_1,
h.N.attn.{q,k,v,proj}, h.N.ln_2, h.N.mlp.{fc,proj}, ln_f; Linear weights
[out, in]; the output head is wte.weight, tied), the same initialisation rule
(normal(0.02) weights, zero biases, unit norms), tanh GELU, causal attention.
The recipe is md's: AdamW(lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on
every parameter, as md's adamw), warmup + cosine schedule, clip_grad_norm 1.0,
gradient accumulation of global_batch / (micro_batch * W) micro-steps with the
gradient reduced once per step (DDP's no_sync, FSDP2's
set_requires_gradient_sync(False)), and the loss all-reduced every step as
mdrun's per-step progress line does. Batches are windows of seq + 1 tokens at
random offsets of the same uint16 token file md reads.

One process per rank, started by this script itself (rank 0 is this process)
in the caller's session, as mdrun starts its ranks, with one intra-op thread
each. Prints one JSON line: per-step seconds and the losses.
"""

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--mode", choices=["ddp", "fsdp"], default="ddp")
    p.add_argument("--precision", choices=["f32", "bf16"], default="f32")
    p.add_argument("--checkpoint", action="store_true",
                   help="activation checkpointing of every block")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data", required=True, help="uint16 token file")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    return p.parse_args()


def build_model(torch, nn, F, a):
    class Attention(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            B, T, C = x.shape
            split = lambda t: t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
            y = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)),
                                               split(self.v(x)), is_causal=True)
            return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class Mlp(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            return self.proj(F.gelu(self.fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(d), Attention(d, heads)
            self.ln_2, self.mlp = nn.LayerNorm(d), Mlp(d)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(a.vocab, a.d)
            self.wpe = nn.Embedding(a.seq, a.d)
            self.h = nn.ModuleList(Block(a.d, a.heads) for _ in range(a.layers))
            self.ln_f = nn.LayerNorm(a.d)
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                elif "ln_" in name:
                    nn.init.ones_(p)
                else:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1])
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                if a.checkpoint:
                    x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
                else:
                    x = block(x)
            x = self.ln_f(x)
            logits = x @ self.wte.weight.t()
            return F.cross_entropy(logits.float().reshape(-1, a.vocab), targets.reshape(-1))

    return GPT()


def lr_at(it, lr=6e-4, warmup=100, steps=5000, min_lr=6e-5):
    # md's cosine schedule (docs/language.md).
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it >= steps:
        return min_lr
    ratio = (it - warmup) / (steps - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def run_rank(a):
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    # A rank that fails leaves the others waiting: a bounded timeout ends them.
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}",
                            rank=a.rank, world_size=a.world_size,
                            timeout=datetime.timedelta(seconds=300))
    torch.manual_seed(a.seed)
    model = build_model(torch, nn, F, a)
    if a.mode == "ddp":
        if a.precision != "f32":
            raise SystemExit("gpt_bench.py: --mode ddp runs f32 only")
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model)
        def set_sync(on):
            model.require_backward_grad_sync = on
    else:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if a.precision == "bf16" else MixedPrecisionPolicy()
        for block in model.h:
            fully_shard(block, mp_policy=mp, reshard_after_forward=True)
        fully_shard(model, mp_policy=mp, reshard_after_forward=True)
        def set_sync(on):
            model.set_requires_gradient_sync(on)

    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95),
                            weight_decay=0.1)
    accumulation = a.global_batch // (a.micro_batch * a.world_size)
    if accumulation * a.micro_batch * a.world_size != a.global_batch:
        raise SystemExit("gpt_bench.py: global batch is not micro batch x W x A")
    tokens = np.memmap(a.data, dtype=np.uint16, mode="r")
    rng = np.random.default_rng(a.seed * 1000 + a.rank)

    def batch():
        offsets = rng.integers(0, len(tokens) - a.seq - 1, a.micro_batch)
        w = np.stack([tokens[o:o + a.seq + 1].astype(np.int64) for o in offsets])
        w = torch.from_numpy(w)
        return w[:, :-1], w[:, 1:]

    times, losses = [], []
    dist.barrier()
    for step in range(a.steps):
        start = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        total = torch.zeros(())
        for micro in range(accumulation):
            set_sync(micro == accumulation - 1)
            x, y = batch()
            loss = model(x, y) / accumulation
            loss.backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dist.all_reduce(total)  # the progress line's mean loss
        times.append(time.perf_counter() - start)
        losses.append(total.item() / a.world_size)
    if a.rank == 0:
        print(json.dumps({"step_seconds": times, "loss": losses,
                          "accumulation": accumulation,
                          "torch": torch.__version__}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    a = parse_args()
    if a.rank >= 0:
        run_rank(a)
        # Leave without the interpreter's teardown: gloo's threads under FSDP2
        # sometimes abort it ("terminate called without an active exception")
        # after the work is done and reported.
        sys.stdout.flush()
        os._exit(0)
    if a.port == 0:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            a.port = s.getsockname()[1]
    argv = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + ["--port", str(a.port)]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    children = [subprocess.Popen(argv + ["--rank", str(r)], env=env)
                for r in range(1, a.world_size)]
    a.rank = 0
    failed = False
    try:
        run_rank(a)
    except BaseException:
        failed = True
        raise
    finally:
        for c in children:
            if failed:
                c.kill()
            failed = c.wait() != 0 or failed
    sys.stdout.flush()
    os._exit(1 if failed else 0)  # as the ranks do, without the teardown


if __name__ == "__main__":
    main()
