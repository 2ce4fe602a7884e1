"""Builds torch_dipu._C, the PrivateUse1 backend over dipu-rs's C ABI.

Use build.sh beside this file: it builds libdipu_runtime.so with cargo,
copies it into the package and runs `setup.py build_ext --inplace` with
the .venv-torch python. The extension finds the runtime through an
$ORIGIN rpath, so a process has one runtime, shared with any C user.
"""

import glob
import os
import subprocess
import sys

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = os.path.dirname(os.path.abspath(__file__))
include = os.path.normpath(os.path.join(here, "..", "..", "include"))
# kineto's headers, for the PrivateUse1 child profiler (csrc/kineto.cpp).
kineto = os.path.join(os.path.dirname(torch.__file__), "include", "kineto")

# The DIOPI registrations: csrc/gen/diopi_ops_*.cpp from diopi_functions.yaml
# (each rewritten only when it changes).
subprocess.check_call([sys.executable, os.path.join(here, "gen_diopi.py")])

setup(
    name="torch_dipu",
    version="0.1.0",
    packages=["torch_dipu"],
    ext_modules=[
        CppExtension(
            "torch_dipu._C",
            sorted(glob.glob(os.path.join("csrc", "*.cpp")) + glob.glob(os.path.join("csrc", "gen", "*.cpp"))),
            include_dirs=[include, os.path.join(here, "csrc"), kineto],
            library_dirs=[os.path.join(here, "torch_dipu")],
            libraries=["dipu_runtime"],
            extra_compile_args=["-std=c++20", "-O1", "-Wall", "-Wno-unused-parameter", "-Wno-interference-size", "-g0"],
            extra_link_args=["-Wl,-rpath,$ORIGIN"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
