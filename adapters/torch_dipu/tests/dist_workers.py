"""Rank functions for test_distributed.py, run in spawned processes.

Each takes (rank, world_size, init_method, out) and puts a short report in
the queue `out`: "ok" or the failure. Every rank uses dipu device `rank`
(DIPU_HOST_DEVICES=2 on the host vendor).
"""

import datetime
import os
import time
import traceback

import torch
import torch.distributed as dist

import torch_dipu  # noqa: F401  (registers "dipu" and "dicl")

TIMEOUT = datetime.timedelta(seconds=20)


def run(scenarios, rank, world, init_method, out):
    """Runs each named scenario in turn, putting (rank, name, "ok", value)
    or (rank, name, "error", traceback) in `out` after each."""
    try:
        torch.dipu.set_device(rank)
        for name in scenarios:
            try:
                value = globals()[name](rank, world, init_method, out)
                out.put((rank, name, "ok", value))
            except BaseException:  # noqa: B902  (the parent reports it)
                out.put((rank, name, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001  (a failed group may not shut down cleanly)
                pass


def raw_backend(rank, size, prefix, seconds):
    """A dicl backend of its own over the default group's store."""
    store = dist.PrefixStore(prefix, dist.distributed_c10d._get_default_store())
    return torch_dipu._C._dicl_create(store, rank, size, datetime.timedelta(seconds=seconds))


def init(rank, world, init_method, timeout=TIMEOUT):
    dist.init_process_group("dicl", init_method=init_method, rank=rank, world_size=world,
                            timeout=timeout)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def collectives(rank, world, init_method, out):
    """Every collective on dipu tensors and on CPU tensors (staged)."""
    init(rank, world, init_method)
    dev = torch.device("dipu", rank)
    expect(dist.get_backend() == "dicl", dist.get_backend())
    checked = []

    for device in (dev, torch.device("cpu")):
        # allreduce: every op, a few dtypes.
        base = torch.arange(6, dtype=torch.float32, device=device) + rank
        t = base.clone()
        dist.all_reduce(t)
        expect(torch.equal(t.cpu(), (torch.arange(6.0) * 2 + 1)), f"sum {t}")
        t = base.clone()
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        expect(torch.allclose(t.cpu(), torch.arange(6.0) + 0.5), f"avg {t}")
        for op, want in ((dist.ReduceOp.PRODUCT, torch.arange(6.0) * (torch.arange(6.0) + 1)),
                         (dist.ReduceOp.MIN, torch.arange(6.0)),
                         (dist.ReduceOp.MAX, torch.arange(6.0) + 1)):
            t = base.clone()
            dist.all_reduce(t, op=op)
            expect(torch.equal(t.cpu(), want), f"{op} {t}")
        t = base.clone()
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        expect(torch.allclose(t.cpu(), torch.arange(6.0) + 0.5), f"premul_sum {t}")
        for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8,
                      torch.int16, torch.int32, torch.int64):
            t = torch.full((5,), rank + 1, dtype=dtype, device=device)
            dist.all_reduce(t)
            expect(torch.equal(t.cpu(), torch.full((5,), 3, dtype=dtype)), f"{dtype} {t}")
        b = torch.tensor([rank == 0, False, True], device=device)
        dist.all_reduce(b)  # SUM on bool: logical or
        expect(b.cpu().tolist() == [True, False, True], f"bool {b}")
        b = torch.tensor([rank == 0, True], device=device)
        dist.all_reduce(b, op=dist.ReduceOp.BAND)
        expect(b.cpu().tolist() == [False, True], f"bool band {b}")
        z = torch.tensor([1 + 2j, rank * 1j], dtype=torch.complex64, device=device)
        dist.all_reduce(z)
        expect(torch.equal(z.cpu(), torch.tensor([2 + 4j, 1j], dtype=torch.complex64)), f"{z}")

        # broadcast, reduce
        t = torch.full((4,), float(rank + 7), device=device)
        dist.broadcast(t, src=1)
        expect(torch.equal(t.cpu(), torch.full((4,), 8.0)), f"broadcast {t}")
        t = torch.full((4,), float(rank + 1), device=device)
        dist.reduce(t, dst=0)
        if rank == 0:
            expect(torch.equal(t.cpu(), torch.full((4,), 3.0)), f"reduce {t}")

        # all_gather (list and into tensor), uneven list too
        mine = torch.full((3,), float(rank), device=device)
        outs = [torch.empty(3, device=device) for _ in range(world)]
        dist.all_gather(outs, mine)
        expect([o.cpu().tolist() for o in outs] == [[0.0] * 3, [1.0] * 3], f"all_gather {outs}")
        flat = torch.empty(3 * world, device=device)
        dist.all_gather_into_tensor(flat, mine)
        expect(flat.cpu().tolist() == [0.0] * 3 + [1.0] * 3, f"all_gather_into {flat}")

        # reduce_scatter (list and tensor)
        ins = [torch.full((2,), float(r + rank), device=device) for r in range(world)]
        o = torch.empty(2, device=device)
        dist.reduce_scatter(o, ins)
        expect(o.cpu().tolist() == [2.0 * rank + 1] * 2, f"reduce_scatter {o}")
        big = torch.arange(4, dtype=torch.float32, device=device)
        o = torch.empty(2, device=device)
        dist.reduce_scatter_tensor(o, big)
        expect(o.cpu().tolist() == [4.0 * rank, 4.0 * rank + 2], f"reduce_scatter_tensor {o}")

        # gather, scatter
        got = [torch.empty(2, device=device) for _ in range(world)] if rank == 0 else None
        dist.gather(torch.full((2,), float(rank), device=device), got, dst=0)
        if rank == 0:
            expect([g.cpu().tolist() for g in got] == [[0.0] * 2, [1.0] * 2], f"gather {got}")
        o = torch.empty(2, device=device)
        src = [torch.full((2,), float(r * 10), device=device) for r in range(world)]
        dist.scatter(o, src if rank == 1 else None, src=1)
        expect(o.cpu().tolist() == [10.0 * rank] * 2, f"scatter {o}")

        # all_to_all_single (equal and uneven splits), all_to_all (lists)
        i = torch.arange(4, dtype=torch.float32, device=device) + 10 * rank
        o = torch.empty(4, device=device)
        dist.all_to_all_single(o, i)
        want = [0.0, 1.0, 10.0, 11.0] if rank == 0 else [2.0, 3.0, 12.0, 13.0]
        expect(o.cpu().tolist() == want, f"all_to_all_single {o}")
        in_splits = [1, 3] if rank == 0 else [2, 2]
        out_splits = [1, 2] if rank == 0 else [3, 2]
        o = torch.empty(sum(out_splits), device=device)
        dist.all_to_all_single(o, i, out_splits, in_splits)
        want = [0.0, 10.0, 11.0] if rank == 0 else [1.0, 2.0, 3.0, 12.0, 13.0]
        expect(o.cpu().tolist() == want, f"all_to_all_single uneven {o}")
        outs = [torch.empty(2, device=device) for _ in range(world)]
        ins = [torch.full((2,), float(10 * rank + r), device=device) for r in range(world)]
        dist.all_to_all(outs, ins)
        expect([x.cpu().tolist() for x in outs] == [[float(10 * r + rank)] * 2 for r in range(world)],
               f"all_to_all {outs}")

        # send / recv
        if rank == 0:
            dist.send(torch.arange(3, dtype=torch.float32, device=device) + 5, dst=1)
        else:
            r = torch.empty(3, device=device)
            dist.recv(r, src=0)
            expect(r.cpu().tolist() == [5.0, 6.0, 7.0], f"recv {r}")

        # async work: wait, is_completed, future, duration
        t = torch.ones(8, device=device)
        work = dist.all_reduce(t, async_op=True)
        fut = work.get_future()
        work.wait()
        expect(work.is_completed() or device.type == "dipu", "cpu work is done after wait")
        expect(torch.equal(fut.wait()[0].cpu(), torch.full((8,), 2.0)), f"future {fut.value()}")
        expect(work.wait(datetime.timedelta(seconds=10)), "wait(timeout)")
        expect(work.is_completed() and work.is_success() and work.exception() is None, "done")
        checked.append(device.type)

    # coalesced all_reduce (dipu tensors): one batch.
    ts = [torch.full((3,), float(rank + k), device=dev) for k in range(3)]
    with dist._coalescing_manager(device=dev, async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for k, t in enumerate(ts):
        expect(t.cpu().tolist() == [2.0 * k + 1] * 3, f"coalesced {k}: {t}")
    dist.barrier()
    return checked


def bad_dtypes(rank, world, init_method, out):
    """Unsupported reduce op / dtype pairs: clear exceptions naming both."""
    dev = torch.device("dipu", rank)
    messages = []
    for t, op in ((torch.ones(2, dtype=torch.complex64, device=dev), dist.ReduceOp.MAX),
                  (torch.ones(2, dtype=torch.uint16, device=dev), dist.ReduceOp.SUM),
                  (torch.ones(2, dtype=torch.int32, device=dev), dist.ReduceOp.BXOR),
                  (torch.ones(2, dtype=torch.bool, device=dev), dist.ReduceOp.AVG)):
        try:
            dist.all_reduce(t, op=op)
        except Exception as e:  # noqa: BLE001  (the message is what is checked)
            messages.append(str(e).splitlines()[0])
        else:
            raise AssertionError(f"all_reduce {op} on {t.dtype} did not fail")
    # The group still works after rejected calls.
    t = torch.ones(2, device=dev)
    dist.all_reduce(t)
    expect(t.cpu().tolist() == [2.0, 2.0], f"after errors {t}")
    return messages


def init_methods(rank, world, ports, out):
    """env:// and tcp:// (file:// is the other scenarios'): a group each."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(ports[0]))
    sums = []
    for method in ("env://", f"tcp://127.0.0.1:{ports[1]}"):
        init(rank, world, method)
        t = torch.full((3,), float(rank + 1), device=torch.device("dipu", rank))
        dist.all_reduce(t)
        c = torch.full((2,), float(rank + 1))
        dist.all_reduce(c)
        sums.append((t.cpu().tolist(), c.tolist()))
        dist.destroy_process_group()
    return sums


def after_abort(rank, world, init_method, out):
    """abort ends a blocked wait with an error; later collectives fail."""
    backend = raw_backend(rank, world, "abort", 20)
    dev = torch.device("dipu", rank)
    t = torch.ones(16, device=dev)
    backend.allreduce([t]).wait()
    store = dist.distributed_c10d._get_default_store()
    if rank == 1:
        store.wait(["aborted"], datetime.timedelta(seconds=30))
        return None
    work = backend.allreduce([t])  # rank 1 never joins
    expect(not work.is_completed(), "blocked")
    backend.abort()
    errors = []
    try:
        work.wait(datetime.timedelta(seconds=10))
    except Exception as e:  # noqa: BLE001
        errors.append(str(e).splitlines()[0])
    try:
        backend.allreduce([t]).wait(datetime.timedelta(seconds=10))
    except Exception as e:  # noqa: BLE001
        errors.append(str(e).splitlines()[0])
    store.set("aborted", "1")
    return errors


def wrong_world_size(rank, world, init_method, out):
    """Rank 1 believes the world has 3 ranks: both fail, neither hangs."""
    backend = raw_backend(rank, 2 if rank == 0 else 3, "wrong", 5)
    t = torch.ones(4, device=torch.device("dipu", rank))
    start = time.monotonic()
    try:
        # The host waits: an error that reached only the group's watchdog
        # is reported here.
        backend.allreduce([t]).wait(datetime.timedelta(seconds=20))
    except Exception as e:  # noqa: BLE001
        return (time.monotonic() - start, str(e).splitlines()[0])
    raise AssertionError("a group of mismatched world sizes did an all_reduce")


def killed_peer(rank, world, init_method, out):
    """Rank 1 dies before joining an all_reduce: rank 0 gets an error."""
    backend = raw_backend(rank, world, "killed", 10)
    dev = torch.device("dipu", rank)
    t = torch.ones(1024, device=dev)
    backend.allreduce([t]).wait(datetime.timedelta(seconds=20))
    if rank == 1:
        out.put((rank, "killed_peer", "ok", "exiting"))
        out.close()
        out.join_thread()
        os._exit(17)
    start = time.monotonic()
    try:
        backend.allreduce([t]).wait(datetime.timedelta(seconds=20))
    except Exception as e:  # noqa: BLE001  (returned to the parent)
        return (time.monotonic() - start, str(e).splitlines()[0])
    raise AssertionError("an all_reduce with a dead peer succeeded")
