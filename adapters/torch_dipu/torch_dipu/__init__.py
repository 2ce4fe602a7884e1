"""torch_dipu: PyTorch on dipu-rs.

`import torch_dipu` after `import torch` registers the PrivateUse1
backend as `dipu`: `torch.ones(4, device="dipu")`, `Tensor.dipu()`,
`torch.dipu.*` (DIPU's names) and `torch.accelerator` all work on every
dipu-rs vendor. With DIPU_MOCK_CUDA=True a script written for CUDA runs
unchanged on dipu. See docs/torch.md.
"""

import atexit
import os
import sys

import torch


def _check_torch_version():
    """_C links against one torch's C++ symbols: with another torch it would
    fail to load with an undefined symbol, or worse. Say what to do instead."""
    try:
        from ._built_with import TORCH_VERSION
    except ImportError:
        raise ImportError(
            "torch_dipu is not built: run adapters/torch_dipu/build.sh, or "
            "pip install --no-build-isolation ./adapters/torch_dipu (docs/torch.md)"
        ) from None
    if torch.__version__ != TORCH_VERSION:
        raise ImportError(
            f"torch_dipu was built against torch {TORCH_VERSION}, but torch "
            f"{torch.__version__} is imported: rebuild torch_dipu against this torch "
            f"(adapters/torch_dipu/build.sh, or pip install --no-build-isolation "
            f"./adapters/torch_dipu)"
        )


_check_torch_version()

from . import _C  # noqa: F401,E402  (registers the kernels, guard, allocators and hooks)
from . import _dipu_env  # noqa: E402

# DIPU's variables that have no effect here are named, never ignored.
_dipu_env.warn_unapplied()

# Opens the DIOPI kernel library and registers the ops it has (docs/torch.md).
_C._diopi_init()
from . import _inductor, dipu
from . import distributed  # noqa: F401  (registers the "dicl" backend)
from . import ext  # noqa: F401,E402  (fused LLM functions: torch_dipu.ext)

__all__ = ["dipu"]
__version__ = _C._version()

torch.utils.rename_privateuse1_backend("dipu")
torch._register_device_module("dipu", dipu)
_inductor.install(dipu)  # torch.compile's default backend on dipu (lazy)
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
)



def _finish_autograd_at_exit():
    """Before the interpreter finalizes: waits until dipu's autograd threads
    have finished the backward passes they ran, so that none of them takes
    the GIL in a finalizing interpreter (which aborts the process with
    "terminate called without an active exception"; csrc/autograd_exit.cpp
    tells why). Waits at most TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT seconds
    (torch's limit for its own wait on these threads at exit; default 10,
    0 or less: no wait)."""
    try:
        limit = float(os.environ.get("TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT", "10"))
    except ValueError:
        limit = 10.0
    if limit <= 0:
        return
    outcome = _C._finish_autograd_threads(limit)
    if outcome not in ("idle", "drained"):
        print(f"torch_dipu: at exit, dipu's autograd threads did not finish ({outcome})",
              file=sys.stderr)


atexit.register(_finish_autograd_at_exit)

if os.environ.get("DIPU_MOCK_CUDA", "").lower() in ("1", "true", "on", "yes"):
    from . import mock_cuda

    mock_cuda.install()
