"""DIPU's variables beyond the ones docs/torch.md lists (docs/configuration.md,
"DIPU's other variables"): DIPU_WITH_DIOPI_LIBRARY=DISABLE runs with no
kernel library, DIPU_PYTHON_DEVICE_AS_CUDA makes a dipu tensor's device read
cuda under DIPU_MOCK_CUDA, DIPU_CHECK_TENSOR_DEVICE's check is always on,
and a set variable dipu-rs does not act on is named in one warning at
import. (DIPU_KEEP_TORCHOP_DEFAULT_IMPL_OPS: test_diopi.py's force-fallback
test.) One interpreter for all of them: the variables are read at import."""

import os
import subprocess
import sys
import textwrap

import pytest

from torch_dipu import _dipu_env

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_each_variable_not_acted_on_is_named_with_a_reason():
    for name in _dipu_env.NOT_APPLIED:
        with pytest.warns(UserWarning, match=name):
            found = _dipu_env.warn_unapplied({name: "1"})
        assert len(found) == 1 and found[0].startswith(name + " (")
    # Acted-on variables, and values that are what dipu-rs does anyway, are quiet.
    quiet = {"DIPU_CHECK_TENSOR_DEVICE": "1", "DIPU_WITH_DIOPI_LIBRARY": "DISABLE",
             "DIPU_KEEP_TORCHOP_DEFAULT_IMPL_OPS": "mul.out", "DIPU_MOCK_CUDA": "True",
             "DIPU_PYTHON_DEVICE_AS_CUDA": "true"}
    assert _dipu_env.warn_unapplied(quiet) == []
    # Values that cannot take effect are named.
    for env, name in [({"DIPU_CHECK_TENSOR_DEVICE": "0"}, "DIPU_CHECK_TENSOR_DEVICE=0"),
                      ({"DIPU_PYTHON_DEVICE_AS_CUDA": "True"}, "DIPU_PYTHON_DEVICE_AS_CUDA"),
                      ({"DIPU_WITH_DIOPI_LIBRARY": "/a.so", "DIPU_DIOPI_LIBRARY": "/b.so"},
                       "DIPU_WITH_DIOPI_LIBRARY=/a.so")]:
        with pytest.warns(UserWarning):
            found = _dipu_env.warn_unapplied(env)
        assert [f.split(" (")[0] for f in found] == [name]


def test_no_library_device_as_cuda_and_one_warning_at_import():
    code = """
        import warnings
        warnings.simplefilter("always")
        import torch, torch_dipu
        ops = torch_dipu._C._diopi_ops()
        print("paths", sorted({p for _a, _f, p in ops}), torch_dipu._C._diopi_library()[1])
        x = torch.arange(6.0, device="cuda").reshape(2, 3)
        y = (x * 2 + 1).sum(0)
        print("device", x.device, y.device.type, x.is_cuda, y.cpu().tolist())
        try:
            torch.mm(x, torch.ones(3, 2))
        except RuntimeError as e:
            print("check", "same device" in str(e))
    """
    env = dict(os.environ, PYTHONPATH=PKG, DIPU_MOCK_CUDA="True", DIPU_PYTHON_DEVICE_AS_CUDA="true",
               DIPU_WITH_DIOPI_LIBRARY="DISABLE", DIPU_CHECK_TENSOR_DEVICE="1",
               DIPU_CPU_AFFINITY="0", DIPU_MAX_EXTEND_SIZE="512")
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                         text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    out = dict(line.split(" ", 1) for line in run.stdout.splitlines())
    # No kernel library: every op of the YAML is left to the CPU fallback, which computes right.
    assert out["paths"] == "['no library'] DIPU_WITH_DIOPI_LIBRARY=DISABLE", run.stdout
    assert out["device"] == "cuda:0 cuda True [8.0, 12.0, 16.0]", run.stdout
    assert out["check"] == "True", run.stdout
    warned = [ln for ln in run.stderr.splitlines() if "DIPU variables set but not acted on" in ln]
    assert len(warned) == 1, run.stderr
    assert "DIPU_CPU_AFFINITY" in warned[0] and "DIPU_MAX_EXTEND_SIZE" in warned[0]
    for acted_on in ("DIPU_PYTHON_DEVICE_AS_CUDA", "DIPU_WITH_DIOPI_LIBRARY", "DIPU_CHECK_TENSOR_DEVICE"):
        assert acted_on not in warned[0]
