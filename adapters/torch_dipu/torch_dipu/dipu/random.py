"""torch.dipu's random-number functions, over the runtime's per-device
default generators (Philox seed and offset)."""

from typing import List

import torch

from .. import _C
from ._utils import _device_index, _device_t


def _generator(device: _device_t = None) -> torch.Generator:
    return _C._get_default_generator(_device_index(device))


def _count() -> int:
    return 0 if _C._is_in_bad_fork() else _C._device_count_without_init()


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seeds every device's default generator; before the runtime exists,
    the seed is kept for it and no runtime is started (torch.manual_seed
    calls this, and a process may fork afterwards)."""
    _C._manual_seed_all(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def seed() -> None:
    """Seeds the current device's generator from entropy."""
    _generator().seed()


def seed_all() -> None:
    """Seeds one random number into every device's generator."""
    s = _generator(0).seed()
    for d in range(1, _count()):
        _generator(d).manual_seed(s)


def initial_seed() -> int:
    """The seed of the current device's generator."""
    return _generator().initial_seed()


def get_rng_state(device: _device_t = "dipu") -> torch.Tensor:
    """The state of `device`'s generator (16 bytes: seed, offset)."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _device_t = "dipu") -> None:
    """Restores a state from get_rng_state."""
    _generator(device).set_state(new_state.cpu())


def get_rng_state_all() -> List[torch.Tensor]:
    """Every device's generator state."""
    return [get_rng_state(d) for d in range(_count())]


def set_rng_state_all(new_states: List[torch.Tensor]) -> None:
    """Restores every device's generator state."""
    for d, state in enumerate(new_states):
        set_rng_state(state, d)
