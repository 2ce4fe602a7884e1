"""torch.dipu.memory._record_memory_history, _snapshot and _dump_snapshot:
PyTorch's names over the runtime's memory history, read by PyTorch's own
torch.cuda._memory_viz. (torch.cuda.memory's under DIPU_MOCK_CUDA:
test_memory_pools.py's CUDA script, which runs in a process of its own.)"""

import inspect
import pickle

import pytest
import torch
from torch.cuda import _memory_viz

MEM = torch.dipu.memory


@pytest.fixture
def history():
    # From an empty cache, so the segments the tests use are recorded too.
    torch.dipu.synchronize()
    torch.dipu.empty_cache()
    MEM._record_memory_history(max_entries=10_000)
    try:
        yield
    finally:
        MEM._record_memory_history(enabled=None)


def _events(snap, action, addr):
    return [e for e in snap["device_traces"][0] if e["action"] == action and e["addr"] == addr]


def test_allocations_and_frees_are_recorded(history):
    x = torch.empty(1 << 20, dtype=torch.uint8, device="dipu")
    y = torch.empty(3 << 20, dtype=torch.uint8, device="dipu")
    x_addr = x.data_ptr()
    del x
    snap = MEM._snapshot()
    assert [e["size"] for e in _events(snap, "alloc", x_addr)][-1:] == [1 << 20]
    assert _events(snap, "free_requested", x_addr)
    live = {
        b["address"]: b["requested_size"]
        for s in snap["segments"]
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    }
    assert live.get(y.data_ptr()) == 3 << 20
    assert x_addr not in live
    for s in snap["segments"]:
        assert sum(b["size"] for b in s["blocks"]) == s["total_size"]


def test_stacks_name_the_runtime_entry(history):
    MEM._record_memory_history(context="all", max_entries=100)
    x = torch.empty(12345, dtype=torch.uint8, device="dipu")
    snap = MEM._snapshot()
    (alloc,) = _events(snap, "alloc", x.data_ptr())[-1:]
    names = [f["name"] for f in alloc["frames"]]
    assert any("dipu_malloc" in n for n in names), names
    MEM._record_memory_history(context=None, max_entries=100)
    y = torch.empty(54321, dtype=torch.uint8, device="dipu")
    (alloc,) = _events(MEM._snapshot(), "alloc", y.data_ptr())[-1:]
    assert alloc["frames"] == []


def test_dump_is_read_by_torch_memory_viz(history, tmp_path):
    keep = [torch.empty(n << 10, device="dipu") for n in (1, 50, 700)]
    path = tmp_path / "snap.pickle"
    MEM._dump_snapshot(str(path))
    with open(path, "rb") as f:
        data = pickle.load(f)
    summary = _memory_viz.segsum(data)
    assert f"segments: {len(data['segments'])}" in summary
    assert "mismatch" not in summary
    assert "alloc" in _memory_viz.trace(data)
    assert "snapshot.pickle" in _memory_viz.trace_plot(data)
    assert "snapshot.pickle" in _memory_viz.segment_plot(data)
    del keep


def test_stopped_history_records_nothing_more(history):
    MEM._record_memory_history(enabled=None)
    before = MEM._snapshot()["device_traces"][0]
    x = torch.empty(4321, dtype=torch.uint8, device="dipu")
    after = MEM._snapshot()["device_traces"][0]
    assert after == before
    assert not [e for e in after if e["action"] == "alloc" and e["size"] == 4321]
    del x


def test_bad_arguments_are_errors(tmp_path):
    with pytest.raises(ValueError):
        MEM._record_memory_history(enabled="sometimes")
    with pytest.raises(ValueError):
        MEM._record_memory_history(max_entries=0)
    with pytest.raises(ValueError):
        MEM._record_memory_history(stacks="cpp")
    with pytest.raises(RuntimeError, match="cannot write"):
        MEM._dump_snapshot(str(tmp_path / "no-such-dir" / "x.pickle"))


def _allocate_here(n):
    return torch.empty(n, dtype=torch.uint8, device="dipu")


# The line of the allocation in _allocate_here, and its file as Python knows it.
_ALLOC_LINE = inspect.getsourcelines(_allocate_here)[1] + 1
_ALLOC_FILE = _allocate_here.__code__.co_filename
_ALLOC_FRAME = {"filename": _ALLOC_FILE, "line": _ALLOC_LINE, "name": "_allocate_here"}


def _frames(entry):
    return [{k: f[k] for k in ("filename", "line", "name")} for f in entry["frames"]]


def test_python_frames_name_the_allocating_function(history):
    MEM._record_memory_history(stacks="python", max_entries=1000)
    x = _allocate_here(23456)
    addr = x.data_ptr()
    del x
    snap = MEM._snapshot()
    (alloc,) = _events(snap, "alloc", addr)[-1:]
    frames = _frames(alloc)
    assert _ALLOC_FRAME in frames, frames
    # The caller's frame follows (innermost first); no native frames.
    assert frames[frames.index(_ALLOC_FRAME) + 1]["name"] == "test_python_frames_name_the_allocating_function"
    assert not [f for f in frames if "dipu_malloc" in f["name"]], frames
    (free,) = _events(snap, "free_requested", addr)[-1:]
    assert [f for f in _frames(free) if f["name"] == "test_python_frames_name_the_allocating_function"]


def test_live_blocks_keep_their_python_frames(history):
    MEM._record_memory_history(stacks="python", max_entries=1000)
    x = _allocate_here(34567)
    snap = MEM._snapshot()
    (block,) = [b for s in snap["segments"] for b in s["blocks"] if b["address"] == x.data_ptr()]
    assert _ALLOC_FRAME in _frames(block)
    del x


def test_all_stacks_put_native_frames_before_python_ones(history):
    MEM._record_memory_history(stacks="all", max_entries=1000)
    x = _allocate_here(45678)
    (alloc,) = _events(MEM._snapshot(), "alloc", x.data_ptr())[-1:]
    names = [f["name"] for f in alloc["frames"]]
    native = [i for i, n in enumerate(names) if "dipu_malloc" in n]
    assert native and _ALLOC_FRAME in _frames(alloc), names
    assert native[-1] < _frames(alloc).index(_ALLOC_FRAME), names
    del x


def test_no_stacks_records_no_frames(history):
    MEM._record_memory_history(stacks=None, max_entries=1000)
    x = _allocate_here(56789)
    (alloc,) = _events(MEM._snapshot(), "alloc", x.data_ptr())[-1:]
    assert alloc["frames"] == []
    del x

