"""Device arguments of torch.dipu's functions."""

from typing import Union

import torch

_device_t = Union[torch.device, str, int, None]


def current_device() -> int:
    """The calling thread's current dipu device."""
    return torch.accelerator.current_device_index()


def _device_index(device: _device_t = None) -> int:
    """The index of `device`: an int, "dipu:N", a torch.device, or None
    (the current device)."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "dipu":
        raise ValueError(f"expected a dipu device, got {device}")
    return current_device() if device.index is None else device.index
