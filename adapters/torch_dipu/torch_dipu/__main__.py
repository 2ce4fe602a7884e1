"""`python -m torch_dipu script.py [args]`: runs a script with torch_dipu
imported first (with DIPU_MOCK_CUDA=True, a CUDA script runs unchanged)."""

import runpy
import sys

import torch  # noqa: F401

import torch_dipu  # noqa: F401

if len(sys.argv) < 2:
    sys.exit("usage: python -m torch_dipu script.py [args...]")
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
