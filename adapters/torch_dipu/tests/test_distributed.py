"""torch.distributed's "dicl" backend on two ranks (host vendor, two
devices): every collective through every init method, DDP against one CPU
process, and the faults (a dead peer, a wrong world size, unsupported
dtypes, a collective after abort), each an exception within its timeout.

Run: DIPU_HOST_DEVICES=2 .venv-torch/bin/python -m pytest adapters/torch_dipu/tests/test_distributed.py
(after adapters/torch_dipu/build.sh).
"""

import datetime
import os
import queue
import socket
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_dipu

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dist_workers  # noqa: E402

# A test that hangs is a failure: every wait below is bounded.
LIMIT = 120


@pytest.fixture(autouse=True)
def two_devices(monkeypatch):
    monkeypatch.setenv("DIPU_HOST_DEVICES", "2")
    if torch.dipu.device_count() < 2:
        pytest.fail("the host vendor needs DIPU_HOST_DEVICES=2 before torch_dipu is used")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(fn, init_method, world=2, *args):
    """Runs dist_workers.fn on `world` spawned ranks; returns {rank: (status, value)}."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=dist_workers.run, args=(fn, r, world, init_method, out, *args))
             for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    deadline = time.monotonic() + LIMIT
    try:
        while len(results) < world and time.monotonic() < deadline:
            if all(not p.is_alive() for p in procs) and out.empty():
                break
            try:
                rank, status, value = out.get(timeout=0.5)
                results[rank] = (status, value)
            except queue.Empty:
                pass
    finally:
        for p in procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
    return results, [p.exitcode for p in procs]


def ok(results, rank):
    status, value = results.get(rank, ("missing", "no report: the rank died or hung"))
    assert status == "ok", f"rank {rank}: {value}"
    return value


def test_the_backend_is_registered():
    assert "dicl" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map.get("dipu") == "dicl"


@pytest.mark.parametrize("method", ["env", "tcp", "file"])
def test_every_collective_through_each_init_method(method, tmp_path, monkeypatch):
    port = free_port()
    if method == "env":
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(port))
        init = "env://"
    elif method == "tcp":
        init = f"tcp://127.0.0.1:{port}"
    else:
        init = f"file://{tmp_path / 'store'}"
    results, _ = spawn(dist_workers.collectives, init)
    for rank in range(2):
        assert ok(results, rank) == ["dipu", "cpu"]


def test_hash_store_ranks_as_threads():
    """Two ranks as threads of this process over one HashStore."""
    store = dist.HashStore()
    results = {}

    def rank_main(rank):
        try:
            torch.dipu.set_device(rank)
            pg = torch_dipu._C._dicl_create(store, rank, 2, datetime.timedelta(seconds=20))
            t = torch.full((1000,), float(rank + 1), device=torch.device("dipu", rank))
            pg.allreduce([t]).wait()
            results[rank] = t.cpu()
        except Exception as e:  # noqa: BLE001  (reported below)
            results[rank] = e

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LIMIT)
    for rank in range(2):
        assert isinstance(results.get(rank), torch.Tensor), results.get(rank)
        assert torch.equal(results[rank], torch.full((1000,), 3.0))


def test_unsupported_dtypes_are_clear_errors(tmp_path):
    results, _ = spawn(dist_workers.bad_dtypes, f"file://{tmp_path / 's'}")
    messages = ok(results, 0)
    # complex MAX: torch itself refuses it before any backend runs.
    assert "MAX" in messages[0] and "complex" in messages[0], messages
    assert "allreduce" in messages[1] and "UInt16" in messages[1], messages
    assert "BXOR" in messages[2] and "Int" in messages[2], messages
    assert "Avg" in messages[3] and "bool" in messages[3], messages
    ok(results, 1)


def test_a_killed_rank_fails_the_other(tmp_path):
    results, codes = spawn(dist_workers.killed_peer, f"file://{tmp_path / 's'}")
    assert codes[1] == 17
    took, message = ok(results, 0)
    assert took < 10, f"noticed after {took:.1f} s (timeout 10 s)"
    assert "exited" in message or "timed out" in message or "aborted" in message, message


def test_abort_ends_a_blocked_wait_and_later_collectives_fail(tmp_path):
    results, _ = spawn(dist_workers.after_abort, f"file://{tmp_path / 's'}")
    errors = ok(results, 0)
    assert len(errors) == 2, errors
    assert all("abort" in e for e in errors), errors
    ok(results, 1)


def test_a_wrong_world_size_fails_both_ranks(tmp_path):
    results, _ = spawn(dist_workers.wrong_world_size, str(tmp_path / "s"))
    for rank in range(2):
        took, message = ok(results, rank)
        assert took < 30, f"rank {rank} failed after {took:.1f} s"
        assert message, rank


def test_ddp_matches_one_cpu_process(tmp_path):
    """torchrun, 2 ranks, 10 DDP steps: each rank's parameters equal those
    of one CPU process that trained on the whole batch."""
    out = tmp_path / "params"
    env = dict(os.environ, DIPU_HOST_DEVICES="2", PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", os.path.join(HERE, "ddp_train.py"), str(out)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=LIMIT)
    assert run.returncode == 0, run.stdout + run.stderr
    sys.path.insert(0, HERE)
    import ddp_train

    reference = ddp_train.train_reference()
    for rank in range(2):
        params = torch.load(f"{out}.{rank}")
        assert len(params) == len(reference)
        for got, want in zip(params, reference):
            assert torch.allclose(got, want, atol=1e-5, rtol=0), (got - want).abs().max()
