#!/usr/bin/env python3
# PyTorch's gloo all-reduce timed as md-collective-bench times md's comms,
# the reference in bench/collectives.sh: RANKS processes on this machine
# (torch.multiprocessing), f32 sum at every power-of-two size from MIN to
# MAX bytes; per size, 3 warm-up calls, a barrier, ITERS timed calls
# (default: as many as take about 64 MiB of traffic, 5 to 200), the slowest
# rank's mean. Every result is checked on inputs whose sums are exact; a
# wrong one exits 1. Prints md-collective-bench's line format:
#
#   torch-gloo all_reduce RANKS BYTES COUNT ITERS TIME_US ALGBW BUSBW CHECK
#
#   torch_gloo_allreduce.py RANKS MIN_BYTES MAX_BYTES [ITERS]
import socket
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, world, port, sizes, iters, out):
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    torch.set_num_threads(1)
    for nbytes in sizes:
        count = max(1, nbytes // 4)
        n = iters or min(200, max(5, (64 << 20) // nbytes))
        base = (torch.arange(count, dtype=torch.int64) % 13).float()
        x = base + (rank + 1)
        for _ in range(3):
            dist.all_reduce(x)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(x)
        mean = torch.tensor([(time.perf_counter() - start) / n], dtype=torch.float64)
        # The check: fresh inputs, one more call, every element.
        x = base + (rank + 1)
        dist.all_reduce(x)
        want = base * world + world * (world + 1) // 2
        wrong = torch.tensor([int((x != want).sum())], dtype=torch.int64)
        dist.all_reduce(mean, op=dist.ReduceOp.MAX)
        dist.all_reduce(wrong)
        if rank == 0:
            out.put((count * 4, count, n, mean.item(), wrong.item()))
    dist.destroy_process_group()


def main():
    if len(sys.argv) not in (4, 5):
        sys.stderr.write("usage: torch_gloo_allreduce.py RANKS MIN_BYTES MAX_BYTES [ITERS]\n")
        return 2
    world, lo, hi = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    iters = int(sys.argv[4]) if len(sys.argv) == 5 else 0
    try:
        import torch  # noqa: F401
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"# torch-gloo: skipped: {e}")
        return 77
    sizes = []
    s = lo
    while s <= hi:
        sizes.append(s)
        s *= 2
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=rank_main, args=(r, world, port, sizes, iters, out))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    bad = 0
    print(f"# torch-gloo: torch {torch.__version__}, {world} ranks on this machine, f32, sum")
    for _ in sizes:
        nbytes, count, n, t, wrong = out.get()
        algbw = nbytes / t / 1e9
        busbw = algbw * 2 * (world - 1) / world
        check = f"wrong({wrong})" if wrong else "ok"
        bad += wrong > 0
        print(
            f"torch-gloo all_reduce {world} {nbytes} {count} {n} {t * 1e6:.2f} "
            f"{algbw:.3f} {busbw:.3f} {check}",
            flush=True,
        )
    for p in procs:
        p.join()
        if p.exitcode != 0:
            print(f"# torch-gloo: a rank exited {p.exitcode}", file=sys.stderr)
            return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
