"""Every test process sees two host devices and imports torch_dipu before
torch.testing._internal computes its device-type test bases."""

import os
import sys

os.environ.setdefault("DIPU_HOST_DEVICES", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import torch_dipu  # noqa: E402,F401
