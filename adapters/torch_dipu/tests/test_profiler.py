"""The runtime trace from torch: torch.dipu.profiler, DIPU_PROFILE at exit,
and torch.profiler with ProfilerActivity.PrivateUse1."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)


def _events(path):
    with open(path) as f:
        return json.load(f)["traceEvents"]


def test_dump_has_vendor_allocator_and_device_events(tmp_path):
    path = tmp_path / "trace.json"
    s = torch.dipu.Stream()
    with torch.dipu.profiler.profile(path):
        x = torch.ones(1 << 16, device="dipu")
        # x is filled on the current stream (a DIOPI kernel, asynchronous):
        # s waits for it, and x's block waits for s before it is reused.
        s.wait_stream(torch.dipu.current_stream())
        with torch.dipu.stream(s):
            y = x.to("cpu", non_blocking=True)
        x.record_stream(s)
        s.synchronize()
        del x
        torch.dipu.empty_cache()
    assert torch.dipu.profiler.events() > 0
    evs = _events(path)
    names = {(e.get("cat"), e["name"]) for e in evs}
    assert ("allocator", "allocate") in names
    assert ("allocator", "free") in names
    assert ("allocator", "empty_cache") in names
    host_pid = os.getpid()
    # The copy to the host at device time, on a stream's track.
    copies = [e for e in evs if e["name"] == "memcpy_async" and e["pid"] != host_pid]
    assert copies, names
    assert float(y.sum()) == 1 << 16
    torch.dipu.profiler.clear()
    assert torch.dipu.profiler.events() == 0


def test_bad_input_is_an_error(tmp_path):
    with pytest.raises(ValueError):
        torch.dipu.profiler.set_capacity(0)
    with pytest.raises(RuntimeError, match="nonexistent"):
        torch.dipu.profiler.dump(tmp_path / "nonexistent" / "t.json")


def test_dipu_profile_writes_at_exit(tmp_path):
    path = tmp_path / "exit.json"
    code = textwrap.dedent(
        """
        import torch, torch_dipu
        x = torch.ones(1000, device="dipu")
        print(float((x * 2).sum()))
        """
    )
    env = dict(os.environ, DIPU_PROFILE=str(path), PYTHONPATH=PKG_ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "2000.0" in out.stdout
    names = {e["name"] for e in _events(path)}
    assert "allocate" in names, names


def test_torch_profiler_shows_the_runtime_with_privateuse1(tmp_path):
    torch.dipu.profiler.clear()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        x = torch.ones(1 << 12, device="dipu")
        (x + 1).cpu()
        torch.dipu.synchronize()
    path = tmp_path / "torch.json"
    prof.export_chrome_trace(str(path))
    evs = _events(path)
    ours = [e for e in evs if e.get("args", {}).get("dipu_category")]
    names = {e["name"] for e in ours}
    assert "allocate" in names, sorted({e["name"] for e in evs})[:50]
    # torch's own CPU ops are in the same file.
    assert any(e["name"] == "aten::ones" for e in evs)
    # Recording stopped with torch's profiler.
    before = torch.dipu.profiler.events()
    torch.ones(4, device="dipu")
    assert torch.dipu.profiler.events() == before
