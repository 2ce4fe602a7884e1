"""The "dicl" torch.distributed backend: dipu-rs's process group.

`import torch_dipu` registers it; then
`torch.distributed.init_process_group("dicl", ...)` works with any
init_method (env://, tcp://, file://) or store, under torchrun too, for
dipu tensors and for CPU tensors (staged through the current dipu device).
See docs/torch.md#distributed.
"""

import torch

from . import _C

BACKEND = "dicl"


def _create(store, rank, world_size, timeout):
    return _C._dicl_create(store, rank, world_size, timeout)


def _register():
    if not torch.distributed.is_available():
        return
    backend = torch.distributed.Backend
    if BACKEND.upper() in backend.backend_list or BACKEND in backend.backend_list:
        return
    backend.register_backend(BACKEND, _create, devices=["dipu", "cpu"])


_register()
