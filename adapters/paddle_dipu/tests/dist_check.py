"""One rank of the two-process collective check (test_distributed.py runs it
under `python -m paddle.distributed.launch --devices=0,1`); with the
argument `die`, rank 1 leaves before the first collective and rank 0 must
get an error within the communication timeout."""

import os
import sys
import time

os.environ.setdefault("FLAGS_use_stride_kernel", "0")

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.distributed as dist  # noqa: E402


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "all"
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2, world
    assert paddle.device.get_device() == f"dipu:{rank}", paddle.device.get_device()
    if mode == "die":
        if rank == 1:
            print("rank 1 leaves", flush=True)
            os._exit(0)
        t0 = time.time()
        try:
            x = paddle.ones([4])
            dist.all_reduce(x)
            x.numpy()
            print("DIE-NO-ERROR", flush=True)
            sys.exit(3)
        except Exception as e:  # the error Paddle raises for the plugin's status
            print(f"DIE-ERROR after {time.time() - t0:.1f}s: {type(e).__name__}", flush=True)
            os._exit(0)

    base = np.arange(6, dtype="float32") + 1

    # all_reduce with every operator (AVG: Paddle 3.3.1's CPU wheel asks
    # core.nccl_version(), which it lacks, before any plugin is called).
    for op, expect in (
        (dist.ReduceOp.SUM, base * 1 + base * 2),
        (dist.ReduceOp.MAX, base * 2),
        (dist.ReduceOp.MIN, base * 1),
        (dist.ReduceOp.PROD, (base * 1) * (base * 2)),
    ):
        x = paddle.to_tensor(base * (rank + 1))
        dist.all_reduce(x, op=op)
        # Small integers: every sum and product is exact, so bitwise (docs/tolerance.md).
        np.testing.assert_array_equal(x.numpy(), expect, err_msg=str(op))
    xi = paddle.to_tensor(np.array([rank + 1, 10 * rank], dtype="int64"))
    dist.all_reduce(xi)
    np.testing.assert_array_equal(xi.numpy(), [3, 10])

    # broadcast from rank 1.
    b = paddle.to_tensor(base * (rank + 5))
    dist.broadcast(b, src=1)
    np.testing.assert_array_equal(b.numpy(), base * 6)

    # reduce to rank 0.
    r = paddle.to_tensor(base * (rank + 1))
    dist.reduce(r, dst=0)
    if rank == 0:
        np.testing.assert_array_equal(r.numpy(), base * 3)

    # all_gather.
    parts = []
    dist.all_gather(parts, paddle.to_tensor(base + 100 * rank))
    assert len(parts) == 2
    np.testing.assert_array_equal(parts[0].numpy(), base)
    np.testing.assert_array_equal(parts[1].numpy(), base + 100)

    # reduce_scatter: rank r gets the sum of every rank's block r.
    out = paddle.empty([3], dtype="float32")
    ins = [paddle.to_tensor(base[:3] * (rank + 1)), paddle.to_tensor(base[3:] * (rank + 1))]
    dist.reduce_scatter(out, ins)
    np.testing.assert_array_equal(out.numpy(), (base[:3] if rank == 0 else base[3:]) * 3)

    # send / recv both ways.
    if rank == 0:
        dist.send(paddle.to_tensor(base * 7), dst=1)
        got = paddle.empty([6], dtype="float32")
        dist.recv(got, src=1)
        np.testing.assert_array_equal(got.numpy(), base * 8)
    else:
        got = paddle.empty([6], dtype="float32")
        dist.recv(got, src=0)
        np.testing.assert_array_equal(got.numpy(), base * 7)
        dist.send(paddle.to_tensor(base * 8), dst=0)

    # batch_isend_irecv: xccl_group_start, a send and a recv, xccl_group_end.
    peer = 1 - rank
    mine = paddle.to_tensor(base * (rank + 20))
    theirs = paddle.empty([6], dtype="float32")
    tasks = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, peer), dist.P2POp(dist.irecv, theirs, peer)])
    for t in tasks:
        t.wait()
    np.testing.assert_array_equal(theirs.numpy(), base * (peer + 20))

    dist.barrier()

    # DataParallel: 5 steps leave identical parameters on both ranks.
    paddle.seed(11)
    model = paddle.DataParallel(
        paddle.nn.Sequential(paddle.nn.Linear(8, 16), paddle.nn.ReLU(), paddle.nn.Linear(16, 2))
    )
    opt = paddle.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
    rng = np.random.default_rng(100 + rank)
    for _ in range(5):
        loss = model(paddle.to_tensor(rng.standard_normal((4, 8)).astype("float32"))).square().mean()
        loss.backward()
        opt.step()
        opt.clear_grad()
    flat = paddle.concat([p.flatten() for p in model.parameters()])
    both = []
    dist.all_gather(both, flat)
    # Bitwise (docs/tolerance.md): both ranks apply the same all-reduced
    # gradients, which DICL reduces in rank order on every rank, to the same
    # parameters with the same kernels.
    np.testing.assert_array_equal(both[0].numpy(), both[1].numpy())
    print(f"rank {rank}: COLLECTIVES-OK", flush=True)


if __name__ == "__main__":
    main()
