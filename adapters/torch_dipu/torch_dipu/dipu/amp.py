"""torch.dipu.amp: mixed precision on dipu with torch.cuda.amp's names.

`autocast` is `torch.autocast("dipu")` (float16 by default, as CUDA's;
bfloat16 too), `GradScaler` is `torch.amp.GradScaler("dipu")`, and
`custom_fwd` / `custom_bwd` are torch.amp's for dipu. The op lists and
cast policies are CUDA's (csrc/autocast.cpp)."""

import functools
from typing import Any

import torch

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd"]


class autocast(torch.amp.autocast):
    """`torch.autocast("dipu", ...)`."""

    def __init__(
        self,
        enabled: bool = True,
        dtype: torch.dtype = torch.float16,
        cache_enabled: bool = True,
    ):
        super().__init__("dipu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """`torch.amp.GradScaler("dipu", ...)`."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        super().__init__(
            "dipu",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )


def custom_fwd(fwd: Any = None, **kwargs: Any) -> Any:
    """`torch.amp.custom_fwd(device_type="dipu", ...)`."""
    if fwd is None:
        return functools.partial(custom_fwd, **kwargs)
    return torch.amp.custom_fwd(fwd, device_type="dipu", **kwargs)


def custom_bwd(bwd: Any = None, **kwargs: Any) -> Any:
    """`torch.amp.custom_bwd(device_type="dipu")`."""
    if bwd is None:
        return functools.partial(custom_bwd, **kwargs)
    return torch.amp.custom_bwd(bwd, device_type="dipu", **kwargs)
