"""torch.dipu: devices, random numbers, memory and streams of dipu-rs,
with the names of torch.cuda (and of DeepLink's torch_dipu)."""

from typing import Any

import torch

from .. import _C
from . import amp  # noqa: F401  (torch.dipu.amp)
from . import profiler  # noqa: F401  (torch.dipu.profiler)
from .memory import (  # noqa: F401
    empty_cache,
    host_empty_cache,
    host_memory_stats,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_summary,
    reset_accumulated_host_memory_stats,
    reset_accumulated_memory_stats,
    reset_peak_host_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)
from .random import (  # noqa: F401
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import Event, ExternalStream, Stream, StreamContext, current_stream, default_stream, set_stream, stream  # noqa: F401

from ._utils import _device_index, _device_t, current_device  # noqa: F401


def is_available() -> bool:
    """Whether dipu has a device to run on (starts no runtime)."""
    try:
        return _C._device_count_without_init() > 0
    except RuntimeError:
        return False


def is_initialized() -> bool:
    """Whether the dipu runtime exists in this process."""
    return _C._is_initialized()


def __getattr__(name: str) -> Any:
    # `torch.dipu._initialized`, read as torch.cuda's module flag: whether
    # the runtime exists. torch.utils.checkpoint stashes and replays a
    # device's generator states only when `getattr(device_module,
    # "_initialized", False)` is true, so without it a recomputation draws
    # dropout from the advanced generator. Computed on each read because
    # the runtime also starts from C++ (the first dipu tensor), not only
    # through _lazy_init.
    if name == "_initialized":
        return _C._is_initialized()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _lazy_init() -> None:
    """Creates the runtime (every call does so on first use); torch calls
    it before making a dipu tensor. In a child forked after the parent
    created the runtime it raises, as torch.cuda does."""
    if _is_in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize dipu in forked subprocess. To use dipu with "
            "multiprocessing, you must use the 'spawn' start method"
        )
    _C._device_count()


def init() -> None:
    """Creates the runtime now."""
    _lazy_init()


def _is_in_bad_fork() -> bool:
    """Whether this is a child forked after the runtime was created (which
    must not use dipu)."""
    return _C._is_in_bad_fork()


def device_count() -> int:
    """The number of dipu devices (starts no runtime)."""
    return _C._device_count_without_init()


def set_device(device: _device_t) -> None:
    """Makes `device` the current dipu device."""
    index = _device_index(device)
    if index >= 0:
        torch.accelerator.set_device_index(index)


class device:
    """Context manager that makes `device` current and restores the previous one."""

    def __init__(self, device: Any):
        self.idx = _device_index(device) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = current_device()
        if self.idx >= 0 and self.idx != self.prev_idx:
            set_device(self.idx)

    def __exit__(self, *args):
        if self.idx >= 0 and self.idx != self.prev_idx:
            set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of tensor `obj` current."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "dipu" else -1)


def synchronize(device: _device_t = None) -> None:
    """Waits until all work on every stream of `device` is done."""
    _C._synchronize(_device_index(device))


class _DeviceProperties:
    """What a dipu device is."""

    def __init__(self, name, total_memory, major, minor, multi_processor_count):
        self.name = name
        self.total_memory = total_memory
        self.major = major
        self.minor = minor
        self.multi_processor_count = multi_processor_count
        self.type = "dipu"

    def __repr__(self):
        return (
            f"_DeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count})"
        )


def get_device_properties(device: _device_t = None) -> _DeviceProperties:
    """The properties of `device`."""
    return _DeviceProperties(*_C._device_properties(_device_index(device)))


def get_device_name(device: _device_t = None) -> str:
    """The name of `device`."""
    return get_device_properties(device).name


def get_device_capability(device: _device_t = None) -> tuple:
    """(major, minor) of `device`."""
    p = get_device_properties(device)
    return (p.major, p.minor)


def get_amp_supported_dtype():
    """The dtypes torch.autocast("dipu") casts to."""
    return [torch.float16, torch.bfloat16]


def vendor_name() -> str:
    """The dipu-rs vendor in use (e.g. "host")."""
    return _C._vendor_name()


# The bits of dipu_vendor_capabilities (include/dipu_runtime.h).
_CAPABILITY_BITS = {
    "collectives": 1 << 0,
    "virtual-memory": 1 << 1,
    "host-accessible-memory": 1 << 2,
}


def vendor_capabilities() -> frozenset:
    """The optional capabilities of the vendor in use, by name:
    "collectives", "virtual-memory" (expandable segments) and
    "host-accessible-memory" (host code may read and write device memory
    in place once the work on it is done)."""
    bits = _C._vendor_capabilities()
    return frozenset(name for name, bit in _CAPABILITY_BITS.items() if bits & bit)


def is_bf16_supported() -> bool:
    """bfloat16 tensors work (ops fall back to the CPU)."""
    return True


__all__ = [
    "Event",
    "ExternalStream",
    "amp",
    "get_amp_supported_dtype",
    "Stream",
    "StreamContext",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "host_empty_cache",
    "host_memory_stats",
    "init",
    "initial_seed",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_host_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
    "vendor_name",
    "vendor_capabilities",
]
