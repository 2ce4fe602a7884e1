"""torch.dipu.memory_summary: torch.cuda.memory_summary's table, with the
numbers memory_stats reports."""

import torch


def test_memory_summary_reports_the_current_allocation():
    torch.dipu.empty_cache()
    x = torch.empty(3 * 1024 * 1024, dtype=torch.uint8, device="dipu")  # 3 MiB
    text = torch.dipu.memory_summary()
    assert "PyTorch dipu memory management summary, device ID 0" in text
    stats = torch.dipu.memory_stats()
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.count("|") >= 5}
    allocated = rows["Allocated memory"]
    cur = stats["allocated_bytes.all.current"]
    assert cur >= 3 * 1024 * 1024
    assert f"{cur / 1024 / 1024:6.0f} MiB" in allocated, allocated
    assert str(stats["allocation.all.current"]) in rows["Allocations"]
    assert "from large pool" in text and "from small pool" in text
    short = torch.dipu.memory_summary(abbreviated=True)
    assert "from large pool" not in short and "Allocated memory" in short
    del x
    # Under DIPU_MOCK_CUDA torch.cuda.memory_summary is this function.
    assert "memory_summary" in torch.dipu.__all__
