#!/usr/bin/env python3
"""PyTorch's side of bench/vs_pytorch.sh: models/gpt.mdl's GPT, trained the way
mdrun trains it, timed per optimizer step.

The model is tools/torch/md_gpt.py: md's parameter names and layouts, its
initialisation rule, tanh GELU, causal attention, the tied output head.
The recipe is md's: AdamW(lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on
the parameters of 2 or more dims and none on the others, as models/gpt.mdl's
groups), warmup + cosine schedule, clip_grad_norm 1.0,
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

    torch.set_num_threads(a.threads)
    # A rank that fails leaves the others waiting: a bounded timeout ends them.
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}",
                            rank=a.rank, world_size=a.world_size,
                            timeout=datetime.timedelta(seconds=300))
    torch.manual_seed(a.seed)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "tools", "torch"))
    from md_gpt import GPT
    model = GPT(a.vocab, a.seq, a.d, a.heads, a.layers, a.checkpoint)
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

    # models/gpt.mdl's groups, nanoGPT's rule: no decay below 2 dims.
    params = list(model.parameters())
    opt = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=6e-4, betas=(0.9, 0.95))
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
