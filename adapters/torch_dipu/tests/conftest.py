"""Every test process sees two host devices and imports torch_dipu before
torch.testing._internal computes its device-type test bases; the
tolerance policy's helper (adapters/dipu_tolerance.py) is importable."""

import os
import sys

os.environ.setdefault("DIPU_HOST_DEVICES", "2")
ADAPTER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ADAPTER)
# adapters/: dipu_tolerance, the tolerance policy both adapters' suites use
# (docs/tolerance.md).
sys.path.append(os.path.dirname(ADAPTER))

import torch  # noqa: E402

import torch_dipu  # noqa: E402,F401
