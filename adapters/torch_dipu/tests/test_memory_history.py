"""torch.dipu.memory._record_memory_history, _snapshot and _dump_snapshot:
PyTorch's names over the runtime's memory history, read by PyTorch's own
torch.cuda._memory_viz."""

import pickle

import pytest
import torch
from torch.cuda import _memory_viz

MEM = torch.dipu.memory


@pytest.fixture
def history():
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
    with pytest.raises(RuntimeError, match="cannot write"):
        MEM._dump_snapshot(str(tmp_path / "no-such-dir" / "x.pickle"))
