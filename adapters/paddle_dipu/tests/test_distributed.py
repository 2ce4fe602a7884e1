"""Test 5 of issue 32: two processes under `python -m paddle.distributed.launch`
run Paddle's collectives over dipu-rs's DICL process group (dist_check.py),
and a rank whose peer has died gets an error instead of hanging."""

import os
import signal
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "dist_check.py")


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def env(**extra):
    e = dict(os.environ)
    e.update({"FLAGS_use_stride_kernel": "0", "GLOG_minloglevel": "2"})
    e.update(extra)
    return e


def run_in_session(cmd, timeout, **kwargs):
    """`subprocess.run(cmd)` in a session of its own: on a timeout or any
    other failure the process and every process it started are killed (the
    launcher's ranks with it). A timeout gives a non-zero return code."""
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


def test_collectives_under_paddle_launch(tmp_path):
    log = tmp_path / "log"
    # The limit only tells a hang from a slow machine.
    proc = run_in_session(
        [sys.executable, "-m", "paddle.distributed.launch", "--devices=0,1", f"--log_dir={log}",
         f"--master=127.0.0.1:{free_ports(1)[0]}", CHECK],
        timeout=300, env=env(),
    )
    logs = {r: (log / f"workerlog.{r}").read_text() if (log / f"workerlog.{r}").exists() else "" for r in (0, 1)}
    detail = f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}\n" + "\n".join(v[-3000:] for v in logs.values())
    assert proc.returncode == 0, detail
    for r in (0, 1):
        assert f"rank {r}: COLLECTIVES-OK" in logs[r], detail


def test_dead_peer_gives_an_error_instead_of_hanging():
    ports = free_ports(2)
    endpoints = ",".join(f"127.0.0.1:{p}" for p in ports)
    procs = []
    for r in (0, 1):
        procs.append(subprocess.Popen(
            [sys.executable, CHECK, "die"],
            env=env(PADDLE_DISTRI_BACKEND="xccl", FLAGS_selected_dipus=str(r), PADDLE_TRAINER_ID=str(r),
                    PADDLE_TRAINERS_NUM="2", PADDLE_TRAINER_ENDPOINTS=endpoints,
                    PADDLE_CURRENT_ENDPOINT=f"127.0.0.1:{ports[r]}", PADDLE_MASTER=f"127.0.0.1:{ports[0]}",
                    PADDLE_DIPU_COMM_TIMEOUT_MS="5000"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    try:
        # The limit only tells a hang (far beyond the 5 s timeout).
        for p in procs:
            outs.append(p.communicate(timeout=150))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert "rank 1 leaves" in outs[1][0], outs[1]
    assert "DIE-ERROR" in outs[0][0], (outs[0][0], outs[0][1][-3000:])
    assert procs[0].returncode == 0, outs[0][1][-3000:]
