"""Paddle on the OpenCL vendor (PoCL): test_train's MLP, trained with Adam
on dipu:0 in a child process with DIPU_VENDOR naming the OpenCL plugin
cargo built in target/debug, matches the same training on the CPU under
the tolerance policy (docs/tolerance.md). The plugin's kernels fall back
to the CPU on the vendor's memory (fine-grained SVM on PoCL), so what
runs on OpenCL is the memory, the copies, the streams and the events.

Skipped, saying why, where PoCL is not installed (scripts/setup.sh
installs it); the plugin must be built (`cargo build --workspace`)."""

import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PLUGIN = os.path.join(ROOT, "target", "debug", "libdipu_vendor_opencl.so")
POCL_ICD = "/etc/OpenCL/vendors/pocl.icd"
# A hung child is a failure.
LIMIT = 180


def child(init_path, out_path):
    """Trains the MLP from `init_path`'s weights on dipu:0 and saves the
    vendor's name, the losses, the parameters and their places."""
    import ctypes

    import paddle  # noqa: F401  (loads the plugin)
    import paddle_dipu
    from test_train import batches, train

    init = dict(np.load(init_path))
    losses, params, places = train("mlp", "adam", "dipu:0", init, batches("mlp"))
    buf = ctypes.create_string_buffer(64)
    needed = ctypes.c_size_t()
    assert paddle_dipu.runtime().dipu_vendor_name(buf, len(buf), ctypes.byref(needed)) == 0
    np.savez(out_path, vendor=buf.value.decode(), losses=losses, places=sorted(places),
             **{"param." + k: v for k, v in params.items()})


def test_mlp_training_on_opencl_matches_cpu(tmp_path):
    if not os.path.exists(POCL_ICD):
        pytest.skip(f"PoCL is not installed ({POCL_ICD} is missing): scripts/setup.sh installs it")
    assert os.path.exists(PLUGIN), f"{PLUGIN} is missing: run `cargo build --workspace`"
    import paddle
    from dipu_tolerance import assert_close, assert_trained_close
    from test_train import STEP_REDUCTION, STEPS, batches, mlp, train

    paddle.seed(3)
    paddle.set_device("cpu")
    init = {k: v.numpy() for k, v in mlp().state_dict().items()}
    np.savez(tmp_path / "init.npz", **init)
    out = tmp_path / "dipu.npz"
    env = dict(os.environ)
    env.update({
        "DIPU_VENDOR": PLUGIN,
        "PYTHONPATH": os.pathsep.join([HERE, os.path.dirname(os.path.dirname(HERE))]),
    })
    env.setdefault("POCL_DEVICES", "pthread pthread")
    env.setdefault("POCL_MAX_PTHREAD_COUNT", "2")
    env.setdefault("POCL_CACHE_DIR", os.path.join(ROOT, "target", "pocl-cache"))
    env.pop("DIPU_HOST_DEVICES", None)
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), str(tmp_path / "init.npz"), str(out)],
        env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=LIMIT,
    )
    assert proc.returncode == 0, f"the OpenCL run failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    got = np.load(out)
    assert str(got["vendor"]) == "opencl", "the child did not run on the OpenCL vendor"
    assert list(got["places"]) == ["Place(dipu:0)"]

    cpu_losses, cpu_params, _ = train("mlp", "adam", "cpu", init, batches("mlp"))
    k = STEP_REDUCTION["mlp"] * STEPS
    assert_close(got["losses"], cpu_losses, reduction_len=k, msg="losses")
    assert cpu_losses[-1] < cpu_losses[0]  # it learns
    for name in cpu_params:
        assert_trained_close(got["param." + name], cpu_params[name], init[name], reduction_len=k, msg=name)


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2])
