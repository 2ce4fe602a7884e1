"""torch.dipu's memory functions, over the runtime's caching allocator
(the DeviceAllocator torch.accelerator.memory also reaches)."""

import json
from typing import Any, Dict

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
    """The pinned-host allocator's statistics."""
    return _C._host_memory_stats()


def host_empty_cache() -> None:
    """Gives the pinned-host allocator's cached blocks back."""
    _C._host_empty_cache()
