"""DDP on dipu with several gradient buckets, for the overlap test and
benchmark (test_ddp_overlap.py): each rank runs STEPS steps of a deep MLP
with 1-layer buckets, under DIPU_PROFILE=<argv[1]>.<rank> (set here before
the runtime starts), then saves its parameters to <argv[1]>.params.<rank>
and its mean step time (ms, after a warm-up step) to <argv[1]>.time.<rank>.
"""

import os
import sys
import time

STEPS = 4
WIDTH = 256
DEPTH = 6
BATCH = 32
# One step's chain of reductions (docs/tolerance.md): DEPTH fan-ins and
# input gradients of WIDTH terms, DEPTH weight gradients over the batch.
STEP_REDUCTION = DEPTH * (2 * WIDTH + BATCH)


def initial():
    """The parameters every run starts from."""
    return [p.detach().clone() for p in model().parameters()]


def model():
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers)


def data(steps):
    import torch

    g = torch.Generator().manual_seed(1)
    return torch.randn(steps, BATCH, WIDTH, generator=g), torch.randn(steps, BATCH, WIDTH, generator=g)


def train_reference(steps=STEPS):
    """One CPU process on the whole batch: the parameters after `steps`."""
    import torch

    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    for x, y in zip(*data(steps)):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in m.parameters()]


def main(out, steps):
    rank = int(os.environ["LOCAL_RANK"])
    if os.environ.get("DDP_OVERLAP_PROFILE", "1") == "1":
        os.environ["DIPU_PROFILE"] = f"{out}.trace.{rank}"
    import torch
    import torch.distributed as dist

    import torch_dipu  # noqa: F401

    dist.init_process_group("dicl")
    world = dist.get_world_size()
    dev = torch.device("dipu", rank)
    torch.dipu.set_device(dev)
    # A bucket per layer or so: each all-reduce can overlap the backward of
    # the layers before it.
    ddp = torch.nn.parallel.DistributedDataParallel(model().to(dev), bucket_cap_mb=0.25)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    half = BATCH // world
    times = []
    for x, y in zip(*data(steps)):
        x, y = x[rank * half:(rank + 1) * half].to(dev), y[rank * half:(rank + 1) * half].to(dev)
        torch.dipu.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        torch.dipu.synchronize()
        times.append(time.perf_counter() - t0)
    torch.save([p.detach().cpu() for p in ddp.module.parameters()], f"{out}.params.{rank}")
    with open(f"{out}.time.{rank}", "w") as f:
        f.write(str(1e3 * sum(times[1:]) / max(1, len(times) - 1)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else STEPS)
