#!/usr/bin/env python3
"""torch.distributed.all_reduce (f32 sum) on 2 ranks through torch: the
"dicl" backend (torch_dipu, dipu tensors, host vendor) against "gloo" (CPU
tensors), in the same run, alternating.

The ranks are processes (torch.multiprocessing, spawn) of one group each
per backend, both made at start over one file:// store (gloo for CPU
tensors, dicl for dipu tensors: `backend="cpu:gloo,dipu:dicl"`). Per
size: one checked all-reduce per backend, a warm-up, then ROUNDS rounds;
each round runs `--iterations` timed all-reduces on dicl, then as many on
gloo (the order flips every round), each all-reduce waited for on the host
(dicl: `work.wait()` then `torch.dipu.synchronize()`; gloo's is
synchronous), every block starting at a barrier. A block's time is its
slowest rank's; the median block per backend is reported, and the ratio of
bus bandwidths. busbw = bytes / time x 2(n-1)/n; GB/s = 10^9 bytes/s.

Usage: DIPU_HOST_DEVICES=2 PYTHONPATH=adapters/torch_dipu \\
    .venv-torch/bin/python scripts/bench_torch_dicl.py [--sizes 1,16,64] [--iterations N]
(adapters/torch_dipu/build.sh builds torch_dipu; for figures, a release
libdipu_runtime.so beside its _C module).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

ROUNDS = 5


def iterations_for(mib, iterations):
    if iterations is not None:
        return iterations
    return min(max(512 // mib, 5), 100)


def timed(dist, torch, tensor, n, sync, group):
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(tensor, group=group)
        sync()
    took = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(took, op=dist.ReduceOp.MAX, group=group)
    return took.item()


def rank_main(rank, world, init, sizes, iterations, out):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    import torch.distributed as dist
    import torch_dipu  # noqa: F401

    torch.set_num_threads(1)
    torch.dipu.set_device(rank)
    dist.init_process_group("cpu:gloo,dipu:dicl", init_method=init, rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    dicl = dist.new_group(backend="dicl")
    dev = torch.device("dipu", rank)
    rows = []
    for mib in sizes:
        count = mib * 1024 * 1024 // 4
        t_dicl = torch.full((count,), float(rank + 1), device=dev)
        t_gloo = torch.full((count,), float(rank + 1))
        dist.all_reduce(t_dicl, group=dicl)
        dist.all_reduce(t_gloo, group=gloo)
        want = world * (world + 1) / 2
        assert t_dicl[:4].cpu().tolist() == [want] * 4, "dicl result"
        assert t_gloo[:4].tolist() == [want] * 4, "gloo result"
        n = iterations_for(mib, iterations)
        times = {"dicl": [], "gloo": []}
        runs = {
            "dicl": lambda: timed(dist, torch, t_dicl, n, torch.dipu.synchronize, dicl),
            "gloo": lambda: timed(dist, torch, t_gloo, n, lambda: None, gloo),
        }
        runs["dicl"]()
        runs["gloo"]()
        for r in range(ROUNDS):
            order = ("dicl", "gloo") if r % 2 == 0 else ("gloo", "dicl")
            for name in order:
                times[name].append(runs[name]() / n)
        rows.append((mib, n, statistics.median(times["dicl"]), statistics.median(times["gloo"])))
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1,16,64")
    p.add_argument("--iterations", type=int)
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    import torch.multiprocessing as mp

    world = 2
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        init = f"file://{tmp}/store"
        procs = [ctx.Process(target=rank_main,
                             args=(r, world, init, sizes, args.iterations, out))
                 for r in range(world)]
        for proc in procs:
            proc.start()
        rows = out.get(timeout=1800)
        for proc in procs:
            proc.join()
    bus = 2 * (world - 1) / world
    print(f"all_reduce f32 sum, {world} ranks, median of {ROUNDS} rounds (through torch)")
    print(f"{'size':>8} {'iters':>5} {'dicl ms':>9} {'dicl GB/s':>9} {'gloo ms':>9} "
          f"{'gloo GB/s':>9} {'dicl/gloo':>9}")
    for mib, n, d, g in rows:
        nbytes = mib * 1024 * 1024
        bd, bg = nbytes / d * bus / 1e9, nbytes / g * bus / 1e9
        print(f"{mib:>4} MiB {n:>5} {d * 1e3:>9.3f} {bd:>9.3f} {g * 1e3:>9.3f} {bg:>9.3f} "
              f"{bd / bg:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
