"""torch.distributed's "dicl" backend on two ranks (host vendor, two
devices): every collective through every init method, DDP against one CPU
process, and the faults (a dead peer, a wrong world size, unsupported
dtypes, a collective after abort), each an exception instead of a hang.

Run: DIPU_HOST_DEVICES=2 PYTHONPATH=adapters/torch_dipu .venv-torch/bin/python -m pytest \
    adapters/torch_dipu/tests/test_distributed.py
(after adapters/torch_dipu/build.sh).
"""

import datetime
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

# Two host devices, one per rank (before the runtime starts; the spawned
# ranks inherit it).
os.environ["DIPU_HOST_DEVICES"] = "2"

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import torch_dipu  # noqa: E402
from dipu_tolerance import assert_trained_close  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dist_workers  # noqa: E402

# A test that hangs is a failure: every wait below is bounded.
LIMIT = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_in_session(cmd, timeout, **kwargs):
    """`subprocess.run(cmd, capture_output=True, text=True)` in a session of
    its own: on a timeout or any other failure the process and every process
    it started (torchrun's ranks) are killed. A timeout gives a non-zero
    return code."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as e:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        if not isinstance(e, subprocess.TimeoutExpired):
            raise
        err += f"\nstill running after {timeout} s: killed"
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def spawn(scenarios, init_method, world=2):
    """Runs the dist_workers scenarios, in order, on `world` spawned ranks;
    returns ({(rank, scenario): (status, value)}, exit codes)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=dist_workers.run, args=(scenarios, r, world, init_method, out))
             for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    deadline = time.monotonic() + LIMIT
    try:
        while len(results) < world * len(scenarios) and time.monotonic() < deadline:
            try:
                rank, name, status, value = out.get(timeout=0.5)
                results[(rank, name)] = (status, value)
            except queue.Empty:
                if all(not p.is_alive() for p in procs):
                    break
    finally:
        for p in procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
    return results, [p.exitcode for p in procs]


def ok(results, rank, name):
    status, value = results.get((rank, name), ("missing", "no report: the rank died or hung"))
    assert status == "ok", f"{name} on rank {rank}: {value}"
    return value


@pytest.fixture(scope="module")
def file_run(tmp_path_factory):
    """One pair of ranks over file:// runs every collective, then the faults
    (each on a dicl group of its own); the tests below read its reports."""
    path = tmp_path_factory.mktemp("dicl") / "store"
    return spawn(["collectives", "bad_dtypes", "after_abort", "wrong_world_size", "killed_peer"],
                 f"file://{path}")


def test_the_backend_is_registered():
    assert torch.dipu.device_count() == 2
    assert "dicl" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map.get("dipu") == "dicl"


def test_every_collective_on_dipu_and_cpu_tensors(file_run):
    results, _ = file_run
    for rank in range(2):
        assert ok(results, rank, "collectives") == ["dipu", "cpu"]


def test_env_and_tcp_init_methods():
    results, _ = spawn(["init_methods"], [free_port(), free_port()])
    for rank in range(2):
        assert ok(results, rank, "init_methods") == [([3.0] * 3, [3.0] * 2)] * 2


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

    # daemon: a rank still blocked when the test fails does not hold the
    # interpreter's exit (its group's 20 s timeout ends it anyway).
    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LIMIT)
    for rank in range(2):
        assert isinstance(results.get(rank), torch.Tensor), results.get(rank)
        assert torch.equal(results[rank], torch.full((1000,), 3.0))


def test_unsupported_dtypes_are_clear_errors(file_run):
    results, _ = file_run
    messages = ok(results, 0, "bad_dtypes")
    # complex MAX: torch itself refuses it before any backend runs.
    assert "MAX" in messages[0] and "complex" in messages[0], messages
    assert "allreduce" in messages[1] and "UInt16" in messages[1], messages
    assert "BXOR" in messages[2] and "Int" in messages[2], messages
    assert "Avg" in messages[3] and "bool" in messages[3], messages
    ok(results, 1, "bad_dtypes")


def test_abort_ends_a_blocked_wait_and_later_collectives_fail(file_run):
    results, _ = file_run
    errors = ok(results, 0, "after_abort")
    assert len(errors) == 2, errors
    assert all("abort" in e for e in errors), errors
    ok(results, 1, "after_abort")


def test_a_wrong_world_size_fails_both_ranks(file_run):
    results, _ = file_run
    for rank in range(2):
        took, message = ok(results, rank, "wrong_world_size")
        assert message, f"rank {rank} failed after {took:.1f} s without a message"


def test_a_killed_rank_fails_the_other(file_run):
    results, codes = file_run
    assert codes[1] == 17, codes
    took, message = ok(results, 0, "killed_peer")
    assert "exited" in message or "timed out" in message, f"after {took:.1f} s: {message}"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """torchrun, 2 ranks: 10 steps of DDP, then 10 of FSDP2 (ddp_train.py)."""
    out = tmp_path_factory.mktemp("train") / "params"
    env = dict(os.environ, DIPU_HOST_DEVICES="2", PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", os.path.join(HERE, "ddp_train.py"), str(out)]
    run = run_in_session(cmd, 2 * LIMIT, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    import ddp_train

    return out, ddp_train.train_reference()


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_training_on_two_ranks_matches_one_cpu_process(trained, kind):
    """Each rank's parameters match, under the tolerance policy, those of
    one CPU process that trained on the whole batch."""
    import ddp_train

    out, reference = trained
    k = ddp_train.STEP_REDUCTION * ddp_train.STEPS
    for rank in range(2):
        params = torch.load(f"{out}.{kind}.{rank}")
        assert len(params) == len(reference)
        for i, (got, want, p0) in enumerate(zip(params, reference, ddp_train.initial())):
            assert_trained_close(got, want, p0, reduction_len=k, msg=f"{kind} rank {rank} parameter {i}")


def _overlap_run(out, overlap):
    """torchrun, 2 ranks: ddp_overlap.py with DIPU_DICL_OVERLAP=<overlap>."""
    env = dict(os.environ, DIPU_HOST_DEVICES="2", DIPU_DICL_OVERLAP=overlap, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", os.path.join(HERE, "ddp_overlap.py"), str(out)]
    run = run_in_session(cmd, 2 * LIMIT, env=env)
    assert run.returncode == 0, run.stdout + run.stderr


def _overlaps_ms(trace):
    """Per all-reduce (at device time, on its communication stream), the
    milliseconds it ran while a kernel of the compute stream's worker ran
    that was queued after the host's all_reduce call returned; and the
    trace's bound on the error of device times (its anchor's `error_ns`).

    Kernels queued before the call may still be running when the
    all-reduce's slice starts (its slice includes the wait for its input),
    so they say nothing about overlap; one queued after it can run inside
    the slice only if the compute stream did not wait for the all-reduce.
    Device times sit on the host clock within the anchor's error, so
    without overlap each figure is at most that error."""
    import json

    events = json.load(open(trace))["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}

    def all_reduces(on_device):
        return sorted((e for e in events if e.get("cat") == "comm" and e.get("name") == "all_reduce"
                       and e.get("ph") == "X"
                       and names.get((e["pid"], e["tid"]), "").startswith("device") == on_device),
                      key=lambda e: e["ts"])

    reduces, calls = all_reduces(True), all_reduces(False)
    assert len(reduces) == len(calls), (len(reduces), len(calls))
    comm = {(e["pid"], e["tid"]) for e in reduces}
    # The host vendor's default-stream worker runs the backward kernels.
    kernels = [e for e in events if e.get("cat") == "callback" and e.get("name") == "host_callback"
               and e.get("ph") == "X" and (e["pid"], e["tid"]) not in comm
               and "-s0 (" in names.get((e["pid"], e["tid"]), "")]
    out = []
    for r, call in zip(reduces, calls):
        a, b = r["ts"], r["ts"] + r["dur"]
        returned = call["ts"] + call["dur"]
        later = [k for k in kernels if k["ts"] - k["args"]["queued_us_ago"] > returned]
        out.append(sum(max(0.0, min(b, k["ts"] + k["dur"]) - max(a, k["ts"])) for k in later) / 1e3)
    anchors = [e["args"]["error_ns"] for e in events if e.get("name") == "device_clock_anchor"]
    assert anchors, "the trace states its device clock's error"
    # Plus the rounding of microsecond timestamps and float32 milliseconds.
    return out, max(anchors) / 1e6 + 0.01


@pytest.fixture(scope="module")
def overlap_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("overlap")
    _overlap_run(base / "on", "1")
    _overlap_run(base / "off", "0")
    return base


def test_ddp_all_reduce_overlaps_backward_and_matches_one_process(overlap_runs):
    """The DIPU_PROFILE trace of each rank shows bucket all-reduces on the
    communication stream running while backward kernels run on the compute
    stream; with DIPU_DICL_OVERLAP=0 (the current stream waits at once)
    none does. The parameters match one CPU process under the tolerance
    policy either way."""
    import ddp_overlap

    reference = ddp_overlap.train_reference()
    initial = ddp_overlap.initial()
    k = ddp_overlap.STEP_REDUCTION * ddp_overlap.STEPS
    for rank in range(2):
        on, on_error = _overlaps_ms(f"{overlap_runs / 'on'}.trace.{rank}")
        off, off_error = _overlaps_ms(f"{overlap_runs / 'off'}.trace.{rank}")
        assert len(on) >= 2 * ddp_overlap.STEPS and len(off) == len(on), (on, off)
        assert any(ms > on_error for ms in on), (on, on_error)
        assert all(ms <= off_error for ms in off), (off, off_error)
        for kind in ("on", "off"):
            params = torch.load(f"{overlap_runs / kind}.params.{rank}")
            for i, (got, want, p0) in enumerate(zip(params, reference, initial)):
                assert_trained_close(got, want, p0, reduction_len=k, msg=f"{kind} rank {rank} parameter {i}")
