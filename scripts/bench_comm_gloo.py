#!/usr/bin/env python3
"""All-reduce (f32 sum) bus bandwidth of torch.distributed's gloo backend on
this machine: the counterpart of `dipu bench comm`, measured the same way and
printed in the same table.

The ranks are processes (torch.multiprocessing, spawn) meeting through a
FileStore (`file://` init method). Per size: one checked all-reduce (rank r
contributes r + 1 everywhere), a warm-up, then ROUNDS rounds of `--iterations`
timed all-reduces (each synchronous: `dist.all_reduce` returns when it is
done), every round starting at a barrier. A round's time is its slowest
rank's (an all-reduce MAX of the round times); the median round is reported.
algbw = bytes / time; busbw = algbw * 2(n-1)/n (NCCL's bus bandwidth);
GB/s = 10^9 bytes/s.

Each rank runs torch with one intra-op thread (torch.set_num_threads(1)), as
each dipu rank's collectives run on one thread; gloo's own threads are gloo's.

Usage: .venv-torch/bin/python scripts/bench_comm_gloo.py [--ranks 2]
       [--sizes 1,16,64] [--iterations N]
(scripts/torch-env.sh installs that python's torch.)
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROUNDS = 5


def iterations_for(mib, iterations):
    """Timed all-reduces per round at `mib` MiB: as `dipu bench comm`."""
    if iterations is not None:
        return iterations
    return min(max(1024 // mib, 5), 200)


def worker(rank, world, init_file, sizes, iterations, out_path):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world
    )
    try:
        results = {}
        for mib in sizes:
            count = (mib << 20) // 4
            buf = torch.full((count,), float(rank + 1), dtype=torch.float32)
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            want = float(world * (world + 1) // 2)
            if not bool((buf == want).all()):
                bad = int((buf != want).nonzero()[0])
                raise RuntimeError(
                    f"rank {rank}, {mib} MiB: the checked all-reduce gave a wrong element {bad} (want {want})"
                )
            buf.zero_()
            per_round = iterations_for(mib, iterations)
            for _ in range(max(per_round // 4, 2)):
                dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            times = []
            for _ in range(ROUNDS):
                dist.barrier()
                start = time.perf_counter()
                for _ in range(per_round):
                    dist.all_reduce(buf, op=dist.ReduceOp.SUM)
                times.append((time.perf_counter() - start) / per_round)
            slowest = torch.tensor(times, dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            results[mib] = (per_round, slowest.tolist())
            del buf
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump(results, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def memcpy_gbps():
    """One thread's memcpy bandwidth of 64 MiB, GB/s: a bytearray slice
    assignment, which is one glibc memcpy, as Rust's copy_from_slice."""
    n = 64 << 20
    src = bytearray(b"\x01") * n
    dst = bytearray(n)
    dst[:] = src
    copies = 8
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(copies):
            dst[:] = src
        rounds.append((time.perf_counter() - start) / copies)
    return n / statistics.median(rounds) / 1e9


def sizes_arg(text):
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected MiB sizes like 1,16,64")
    if not sizes or any(s < 1 or s > 1024 for s in sizes):
        raise argparse.ArgumentTypeError(f"{text!r}: every size must be 1 to 1024 MiB")
    return sizes


def positive(text):
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is not at least 1")
    return n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=positive, default=2, help="number of rank processes (at least 2)")
    p.add_argument("--sizes", type=sizes_arg, default=[1, 16, 64], help="sizes in MiB, comma-separated")
    p.add_argument("--iterations", type=positive, default=None,
                   help="timed all-reduces per round, 5 rounds (default: 1 GiB worth, 5 to 200)")
    args = p.parse_args()
    if args.ranks < 2:
        p.error("--ranks must be at least 2")

    import torch
    import torch.multiprocessing as mp

    started = time.perf_counter()
    memcpy = memcpy_gbps()
    with tempfile.TemporaryDirectory(prefix="bench-comm-gloo-") as tmp:
        init_file = os.path.join(tmp, "store")
        out_path = os.path.join(tmp, "result.json")
        mp.spawn(
            worker,
            args=(args.ranks, init_file, args.sizes, args.iterations, out_path),
            nprocs=args.ranks,
            join=True,
        )
        with open(out_path) as f:
            results = json.load(f)

    n = args.ranks
    print(
        f"all-reduce (f32 sum) with torch.distributed gloo (torch {torch.__version__}), "
        f"{n} ranks as processes; per size: 1 checked all-reduce, a warm-up, then {ROUNDS} "
        "rounds of timed all-reduces (each synchronous), every round starting at a barrier; "
        "a round's time is its slowest rank's; median round"
    )
    print(
        "algbw: bytes / time; busbw: algbw * 2(n-1)/n (NCCL's bus bandwidth); "
        "GB/s: 10^9 bytes/s; memcpy: one thread, glibc memcpy of 64 MiB (measured first in the run)"
    )
    print()
    print(f"{'size':>8} {'iterations':>10} {'time/op':>15} {'algbw GB/s':>12} {'busbw GB/s':>12} {'busbw/memcpy':>13}")
    for mib in args.sizes:
        per_round, rounds = results[str(mib)]
        seconds = statistics.median(rounds)
        algbw = (mib << 20) / seconds / 1e9
        busbw = algbw * 2 * (n - 1) / n
        print(
            f"{str(mib) + ' MiB':>8} {per_round:>10} {seconds * 1e3:>12.3f} ms "
            f"{algbw:>12.3f} {busbw:>12.3f} {busbw / memcpy:>13.2f}"
        )
    print()
    print(
        f"memcpy: {memcpy:.3f} GB/s (one thread, 64 MiB; bytes copied per second: "
        "the memory moves twice that, a read and a write)"
    )
    print(f"took {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
