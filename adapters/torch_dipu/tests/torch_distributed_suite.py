"""PyTorch's own distributed tests (torch.testing._internal.distributed.
distributed_test, shipped in the wheel) on the "dicl" backend, 2 ranks.

Each test forks its two ranks from the test process (torch's
MultiProcessTestCase supports fork as well as spawn): a forked rank
starts with torch and torch_dipu already imported, so a case costs a
fraction of a second instead of two fresh interpreters importing torch
(~40 s a case on the shared machine). The test process itself never
touches a device (the runtime starts lazily), so forking is safe.

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
        self._start_processes(torch.multiprocessing.get_context("fork").Process)
