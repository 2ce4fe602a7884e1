"""DIPU_MOCK_CUDA=True: a script written for CUDA runs on dipu.

`torch.cuda.*` becomes `torch.dipu.*` (`torch.cuda.amp` too), `Tensor.cuda()` / `Module.cuda()`
become `.dipu()`, `is_cuda` is true for dipu tensors, and a "cuda" device
given to a torch function (`device="cuda"`, `.to("cuda:0")`) means dipu.
The device mapping is a TorchFunctionMode entered on the importing
thread (threads started later get it through torch's thread hooks only if
they enter it themselves); `torch.device("cuda")` itself stays a CUDA
device object until a torch function receives it.
"""

import os
import sys

import torch
from torch.overrides import TorchFunctionMode

_installed = False


def _map(value):
    if isinstance(value, str) and (value == "cuda" or value.startswith("cuda:")):
        return "dipu" + value[4:]
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("dipu", value.index) if value.index is not None else torch.device("dipu")
    return value


_DEVICE = torch.Tensor.device  # the getset descriptor whose __get__ torch functions see


def _as_cuda(device):
    return torch.device("cuda", device.index) if device.type == "dipu" else device


class CudaAsDipu(TorchFunctionMode):
    """Maps "cuda" devices in torch functions' arguments to dipu; with
    `show_as_cuda`, a dipu tensor's `.device` reads as cuda."""

    def __init__(self, show_as_cuda=False):
        super().__init__()
        self.show_as_cuda = show_as_cuda

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.show_as_cuda and getattr(func, "__self__", None) is _DEVICE and func.__name__ == "__get__":
            return _as_cuda(func(*args, **kwargs))
        if "device" in kwargs:
            kwargs["device"] = _map(kwargs["device"])
        args = tuple(_map(a) for a in args)
        return func(*args, **kwargs)


def install() -> None:
    """Makes torch.cuda, .cuda() and "cuda" devices mean dipu (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    dipu = torch.dipu
    for name in dipu.__all__:
        setattr(torch.cuda, name, getattr(dipu, name))
    torch.cuda.is_available = dipu.is_available
    # torch.cuda.memory's history and snapshots (Python frames too) are dipu's.
    for name in ("_record_memory_history", "_snapshot", "_dump_snapshot"):
        setattr(torch.cuda.memory, name, getattr(dipu.memory, name))
    # torch.cuda.amp.autocast / GradScaler are dipu's.
    sys.modules["torch.cuda.amp"] = dipu.amp
    torch.cuda.amp = dipu.amp
    torch.cuda._lazy_init = dipu._lazy_init
    torch.cuda._is_in_bad_fork = dipu._is_in_bad_fork
    torch.Tensor.cuda = lambda self, device=None, non_blocking=False, **kw: self.dipu(
        device, non_blocking=non_blocking
    )
    torch.Tensor.is_cuda = property(lambda self: self.device.type in ("cuda", "dipu"))
    torch.nn.Module.cuda = lambda self, device=None: self.dipu(device)
    # DIPU_PYTHON_DEVICE_AS_CUDA=True (DIPU's default; here off unless set):
    # tensor.device reads "cuda", so `x.device.type == "cuda"` checks pass.
    as_cuda = os.environ.get("DIPU_PYTHON_DEVICE_AS_CUDA", "").lower() in ("1", "true", "on", "yes")
    CudaAsDipu(show_as_cuda=as_cuda).__enter__()
