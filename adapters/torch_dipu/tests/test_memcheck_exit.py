"""The memory checker's report at interpreter exit (issue 33): a child
python with torch_dipu and DIPU_MEM_CHECK=1 DIPU_MEM_CHECK_GUARD_BYTES=64
writes 4 bytes past the end of a 1000-byte dipu tensor, deletes it and
exits without any check; the report at exit names the overrun.

On the host vendor device memory is host memory, so ctypes.memset plays
the buggy kernel."""

import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)

CHILD = textwrap.dedent(
    """
    import ctypes
    import torch
    import torch_dipu  # noqa: F401

    t = torch.empty(1000, dtype=torch.uint8, device="dipu")
    torch.dipu.synchronize()  # the guards are filled on the stream first
    ctypes.memset(t.data_ptr() + 1000, 0xAB, 4)
    print("overran", hex(t.data_ptr()), flush=True)
    del t
    """
)


def _run_child(tmp_path, guard_bytes="64"):
    log = tmp_path / "memcheck.log"
    env = dict(os.environ)
    for var in list(env):
        if var.startswith("DIPU_MEM_CHECK") or var == "DIPU_VENDOR":
            del env[var]
    env.update(
        DIPU_MEM_CHECK="1",
        DIPU_MEM_CHECK_GUARD_BYTES=guard_bytes,
        DIPU_MEM_CHECK_LOG_FILE=str(log),
        PYTHONPATH=PACKAGE + os.pathsep + env.get("PYTHONPATH", ""),
    )
    out = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "overran" in out.stdout, out.stdout
    return log.read_text() if log.exists() else ""


def test_an_overrun_of_a_deleted_tensor_is_reported_at_exit(tmp_path):
    log = _run_child(tmp_path)
    line = "dipu memcheck: out-of-bounds write: the guard after the end of"
    assert log.count(line) == 1, log
    assert "offset +1000 (0 bytes past the end)" in log, log
    assert "bytes found from there: ab ab ab ab fd" in log, log
    assert "1000 bytes on device 0" in log, log
    assert "found at its free" in log, log
    report = log[log.index("==== dipu memcheck report") :]
    assert "1 invalid frees/accesses" in report, report


def test_without_guards_nothing_is_reported(tmp_path):
    # The same program with the guards off: the write goes unseen, so the
    # test above fails when the check is switched off.
    log = _run_child(tmp_path, guard_bytes="0")
    assert "out-of-bounds write" not in log, log
