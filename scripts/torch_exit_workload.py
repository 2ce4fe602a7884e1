"""One run of scripts/torch-exit-stress.sh: three SGD steps of a small
model on dipu (forward, backward, step), then the script ends at once, as
the scripts did that sometimes aborted at exit with "terminate called
without an active exception" (issue 39). Prints "ok" before it exits.

Options: --one-cpu (the process on one CPU, where the abort showed most:
the thread that called backward() then often runs before dipu's autograd
thread has dropped the backward's GraphTask), --ddp (the model in
DistributedDataParallel over a one-rank "dicl" group, left for the exit to
tear down), --queue-callback (a backward that queues a Python callback, as
FSDP2 and DDP's static graph do)."""

import os
import sys

if "--one-cpu" in sys.argv:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import tempfile  # noqa: E402

import torch  # noqa: E402

import torch_dipu  # noqa: E402,F401

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to("dipu")
if "--ddp" in sys.argv:
    import torch.distributed as dist

    store = os.path.join(tempfile.mkdtemp(), "store")
    dist.init_process_group("dicl", init_method=f"file://{store}", rank=0, world_size=1)
    model = torch.nn.parallel.DistributedDataParallel(model)


class QueueCallback(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        torch.autograd.Variable._execution_engine.queue_callback(lambda: None)
        return g


opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 8, device="dipu"), torch.randn(16, 4, device="dipu")
for _ in range(3):
    opt.zero_grad()
    out = model(x)
    if "--queue-callback" in sys.argv:
        out = QueueCallback.apply(out)
    torch.nn.functional.mse_loss(out, y).backward()
    opt.step()
print("ok")
