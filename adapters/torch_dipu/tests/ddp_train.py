"""10 steps of DDP, then 10 of FSDP2 (fully_shard), on dipu under torchrun
(the "dicl" backend), each rank training on its half of a fixed batch;
saves each rank's parameters to <argv[1]>.ddp.<rank> and
<argv[1]>.fsdp.<rank> (FSDP2's gathered in full). train_reference() trains
the same model on the whole batch in one CPU process: each must agree with
it (test_distributed.py).
"""

import sys

import torch
import torch.distributed as dist

STEPS = 10
BATCH = 16
# One step's chain of reductions (docs/tolerance.md): fan-ins 8 and 16, the
# loss over BATCH x 4, the input gradient of the last layer over 4, the
# weight gradients over the batch (twice).
STEP_REDUCTION = 8 + 16 + BATCH * 4 + 4 + 2 * BATCH


def initial():
    """The parameters every run starts from."""
    return [p.detach().clone() for p in model().parameters()]


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(STEPS, BATCH, 8, generator=g), torch.randn(STEPS, BATCH, 4, generator=g)


def train_reference():
    """One process, CPU, the whole batch: the parameters after STEPS steps."""
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    xs, ys = data()
    for x, y in zip(xs, ys):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in m.parameters()]


def train(m, rank, world, dev):
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    xs, ys = data()
    half = BATCH // world
    for x, y in zip(xs, ys):
        x, y = x[rank * half:(rank + 1) * half].to(dev), y[rank * half:(rank + 1) * half].to(dev)
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()


def main(out):
    import torch_dipu  # noqa: F401  (registers "dipu" and "dicl")
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("dicl")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("dipu", rank)
    torch.dipu.set_device(dev)

    ddp = torch.nn.parallel.DistributedDataParallel(model().to(dev))
    train(ddp, rank, world, dev)
    torch.save([p.detach().cpu() for p in ddp.module.parameters()], f"{out}.ddp.{rank}")

    fsdp = model().to(dev)
    for layer in fsdp:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(fsdp)
    train(fsdp, rank, world, dev)
    full = [p.full_tensor().detach().cpu() for p in fsdp.parameters()]
    torch.save(full, f"{out}.fsdp.{rank}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
