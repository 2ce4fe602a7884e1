"""PyTorch's own distributed tests (torch.testing._internal.distributed.
distributed_test, shipped in the wheel) on the "dicl" backend, 2 ranks.

Each test forks its two ranks from the test process (torch's
MultiProcessTestCase supports fork as well as spawn): a forked rank
starts with torch and torch_dipu already imported, so a case costs a
fraction of a second instead of two fresh interpreters importing torch
(~40 s a case on the shared machine). Forking is safe only while the
test process has not started the runtime (a child forked after that is
in a "bad fork" and sees no device). torch's test modules ask
`torch.dipu.is_available()` at import (common_utils' TEST_PRIVATEUSE1),
which counts devices and so starts the runtime: in the test process it
answers from DIPU_HOST_DEVICES instead. Its setUp seeds every device
(torch.manual_seed), which would start it too: there the dipu seeding is
left out (the ranks never saw the test process's device seeds anyway,
forked or spawned). Each rank puts both back as it starts, and every
case checks that the runtime is still not started before it forks.

Two modes, chosen by DICL_SUITE_MODE before the suite is imported (its
skips are decided at import time):

- `shipped` (default): the suite as torch ships it. Many cases name the
  backends they run on (nccl, gloo, ...) and skip for any other.
- `accel`: dicl is also entered in the suite's feature sets "gpu", "ddp"
  and "subgroup" (what ProcessGroupNCCL and gloo claim) and "plugin" (a
  backend registered from outside torch counts as available), so the cases
  that put tensors on an accelerator run on dipu devices too, and in its
  lists of backends whose profiler events it checks. "cuda"
  (CUDA-specific APIs) is left out.

    DIPU_HOST_DEVICES=2 PYTHONPATH=adapters/torch_dipu .venv-torch/bin/python -m pytest -q \\
      adapters/torch_dipu/tests/torch_distributed_suite.py -k "test_all_reduce_sum or test_broadcast"

`torch_distributed_report.py` runs both modes and writes
docs/torch-distributed-results.md (every case, its outcome and reason).
The file's name matches neither `test_*.py` nor `*_test.py`, so
`pytest tests` (CI) leaves it out; naming it on the command line runs it.
"""

import os
import sys

os.environ.setdefault("BACKEND", "dicl")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("DIPU_HOST_DEVICES", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch_dipu  # noqa: E402,F401  (registers "dicl" before the ranks fork)

# The test process must not start the runtime (see above): while it runs,
# is_available answers from DIPU_HOST_DEVICES and the device seeding of
# torch.manual_seed is left out. A forked rank puts both back (_run).
_is_available = torch.dipu.is_available
_manual_seed_all = torch.dipu.manual_seed_all
torch.dipu.is_available = lambda: int(os.environ["DIPU_HOST_DEVICES"]) > 0
torch.dipu.manual_seed_all = lambda seed: None

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

MODE = os.environ.get("DICL_SUITE_MODE", "shipped")
if MODE not in ("shipped", "accel"):
    raise ValueError(f"DICL_SUITE_MODE must be 'shipped' or 'accel', not {MODE!r}")
if MODE == "accel":
    for feature in ("gpu", "ddp", "subgroup", "plugin"):
        DistTestCases.backend_feature[feature].add("dicl")

from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

if MODE == "accel":
    # Read when a case runs, so entering dicl after the import is enough.
    for backends in (
        distributed_test.PROFILING_SUPPORTED_BACKENDS,
        distributed_test.CUDA_PROFILING_SUPPORTED_BACKENDS,
        distributed_test.SEND_RECV_PROFILING_SUPPORTED_BACKENDS,
    ):
        backends.append("dicl")


class TestDiclWithFork(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        if torch_dipu._C._is_initialized():
            raise RuntimeError(
                "the dipu runtime started in the test process: forked ranks would see no "
                "device (run cases through this file, which keeps it unstarted)"
            )
        self._start_processes(torch.multiprocessing.get_context("fork").Process)

    @classmethod
    def _run(cls, rank, test_name, file_name, pipe, **kwargs):
        torch.dipu.is_available = _is_available
        torch.dipu.manual_seed_all = _manual_seed_all
        super()._run(rank, test_name, file_name, pipe, **kwargs)
