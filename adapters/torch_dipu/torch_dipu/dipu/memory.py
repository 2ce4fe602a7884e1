"""torch.dipu's memory functions, over the runtime's caching allocator
(the DeviceAllocator torch.accelerator.memory also reaches)."""

import json
import os
import pickle
import sys
import tempfile
from typing import Any, Dict, Optional

import torch

from .. import _C
from ._utils import _device_index, _device_t


def memory_stats(device: _device_t = None) -> Dict[str, Any]:
    """The caching allocator's statistics, with torch.cuda.memory_stats' keys."""
    return torch.accelerator.memory_stats(_device_index(device))


def memory_allocated(device: _device_t = None) -> int:
    """Bytes of tensors now allocated on `device`."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: _device_t = None) -> int:
    """The peak of memory_allocated since start or reset_peak_memory_stats."""
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: _device_t = None) -> int:
    """Bytes the allocator holds from the device (in use or cached)."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: _device_t = None) -> int:
    """The peak of memory_reserved since start or reset_peak_memory_stats."""
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: _device_t = None) -> None:
    """Restarts the peaks at the current values."""
    torch.accelerator.reset_peak_memory_stats(_device_index(device))


def reset_accumulated_memory_stats(device: _device_t = None) -> None:
    """Restarts the accumulated totals (allocated, freed, num_*) at zero."""
    torch.accelerator.reset_accumulated_memory_stats(_device_index(device))


def empty_cache() -> None:
    """Gives every device's cached, unused memory back to the vendor."""
    torch.accelerator.empty_cache()


def mem_get_info(device: _device_t = None) -> tuple:
    """(free, total) bytes of `device`, as the vendor sees them."""
    return torch.accelerator.get_memory_info(_device_index(device))


def set_per_process_memory_fraction(fraction: float, device: _device_t = None) -> None:
    """Limits the allocator of `device` to `fraction` (in (0, 1]) of its memory."""
    _C._set_memory_fraction(float(fraction), _device_index(device))


def memory_snapshot(device: _device_t = None) -> Any:
    """The allocator's segments and blocks (torch.cuda.memory_snapshot's shape)."""
    return json.loads(_C._memory_snapshot(_device_index(device)))


def host_memory_stats() -> Dict[str, Any]:
    """The pinned-host allocator's statistics: active_requests, active_bytes,
    allocations, allocated_bytes (each current/peak/allocated/freed),
    num_host_alloc, num_host_free."""
    return _C._host_memory_stats()


def reset_peak_host_memory_stats() -> None:
    """Restarts the pinned allocator's peaks at the current values."""
    _C._host_reset_peak_stats()


def reset_accumulated_host_memory_stats() -> None:
    """Restarts the pinned allocator's accumulated totals at zero."""
    _C._host_reset_accumulated_stats()


def host_empty_cache() -> None:
    """Gives the pinned-host allocator's cached blocks back."""
    _C._host_empty_cache()


def _record_memory_history(
    enabled: Optional[str] = "all",
    context: Optional[str] = "all",
    stacks: Optional[str] = "all",
    max_entries: int = sys.maxsize,
    device: _device_t = None,
) -> None:
    """Records the last `max_entries` allocation, free and segment events of
    every device (torch.cuda.memory._record_memory_history's names).

    `enabled` None (or False) stops recording; "all" or "state" (or True)
    records. `context` None records no frames; otherwise `stacks` says
    which: "python" the Python frames of the allocating code, "all" those
    and a short native stack (the runtime's and the ops' frames, innermost
    first, before the Python ones), None no frames. Python frames are
    gathered cheaply at each event and named when a snapshot is taken.
    `device` is accepted for compatibility: the history covers every device."""
    del device
    if enabled is None or enabled is False:
        _C._record_memory_history_stacks(0, 0)
        return
    if enabled is not True and enabled not in ("all", "state"):
        raise ValueError(f"enabled must be None, 'state' or 'all', not {enabled!r}")
    if context not in (None, "all", "state", "alloc"):
        raise ValueError(f"context must be None, 'state', 'alloc' or 'all', not {context!r}")
    if stacks not in (None, "python", "all"):
        raise ValueError(f"stacks must be 'python', 'all' or None, not {stacks!r}")
    if max_entries <= 0:
        raise ValueError(f"max_entries must be positive, not {max_entries}")
    flags = 0
    if context is not None and stacks is not None:
        flags = _C._MEMORY_HISTORY_FRAMEWORK
        if stacks == "all":
            flags |= _C._MEMORY_HISTORY_NATIVE
    _C._record_memory_history_stacks(min(int(max_entries), 2**63 - 1), flags)


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Writes _snapshot() to `filename` as a pickle, for
    `python -m torch.cuda._memory_viz` or `dipu memviz`."""
    _C._dump_memory_snapshot(os.fspath(filename))


def _snapshot(device: _device_t = None) -> Dict[str, Any]:
    """Every device's segments and blocks, and the recorded events
    ("segments" and "device_traces", as torch.cuda.memory._snapshot)."""
    del device
    fd, path = tempfile.mkstemp(suffix=".pickle")
    os.close(fd)
    try:
        _C._dump_memory_snapshot(path)
        with open(path, "rb") as f:
            return pickle.load(f)
    finally:
        os.unlink(path)


def _format_size(n: int) -> str:
    for unit in ("B  ", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:6d} {unit}" if unit == "B  " else f"{n:6.0f} {unit}"
        n /= 1024
    return f"{n} TiB"


def memory_summary(device: _device_t = None, abbreviated: bool = False) -> str:
    """A table of the caching allocator's statistics of `device`, laid out
    as torch.cuda.memory_summary's: current, peak, allocated and freed
    totals of each metric, for all blocks and (unless `abbreviated`) the
    large and small pools."""
    stats = memory_stats(device)
    index = _device_index(device)
    pools = [("all", "")] if abbreviated else [("all", ""), ("large_pool", "  from large pool"),
                                                 ("small_pool", "  from small pool")]
    metrics = [
        ("allocated_bytes", "Allocated memory", _format_size),
        ("active_bytes", "Active memory", _format_size),
        ("requested_bytes", "Requested memory", _format_size),
        ("reserved_bytes", "Device reserved memory", _format_size),
        ("inactive_split_bytes", "Non-releasable memory", _format_size),
        ("allocation", "Allocations", str),
        ("active", "Active allocs", str),
        ("segment", "Device reserved segments", str),
        ("inactive_split", "Non-releasable allocs", str),
    ]
    width = 75
    rule = "|" + "=" * width + "|"
    line = "|" + "-" * width + "|"
    out = [rule, f"| {'PyTorch dipu memory management summary, device ID ' + str(index):<{width - 1}}|",
           line,
           f"| {'Metric':<24}| {'Cur Usage':>10} | {'Peak Usage':>10} | {'Tot Alloc':>10} | {'Tot Freed':>10} |",
           rule]
    for key, title, fmt in metrics:
        for pool, suffix in pools:
            base = f"{key}.{pool}"
            if f"{base}.current" not in stats:
                continue
            name = title if pool == "all" else suffix
            cells = [fmt(int(stats.get(f"{base}.{f}", 0))) for f in ("current", "peak", "allocated", "freed")]
            out.append(f"| {name:<24}| " + " | ".join(f"{c:>10}" for c in cells) + " |")
        out.append(line)
    for key, title in (("num_alloc_retries", "Allocator retries"), ("num_ooms", "Out-of-memory errors"),
                       ("num_device_alloc", "Device mallocs"), ("num_device_free", "Device frees")):
        out.append(f"| {title:<24}| {int(stats.get(key, 0)):>10} |" + " " * (width - 38) + "|")
    out.append(rule)
    return "\n".join(out) + "\n"
