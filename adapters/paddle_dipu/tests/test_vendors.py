"""Test 6 of issue 32: tests 1 and 2 (loading, the round trip, training equal
to the CPU) under the CUDA, Ascend and Cambricon vendors on their fake
libraries, laid out as scripts/test.sh lays them out. The three runs go in
parallel, each a pytest of its own (a vendor is chosen per process)."""

import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
TARGET = os.environ.get("DIPU_TARGET_DIR", os.path.join(REPO, "target", "debug"))
SELECTION = [
    os.path.join(HERE, "test_device.py::test_import_lists_dipu"),
    os.path.join(HERE, "test_device.py::test_vendor"),
    os.path.join(HERE, "test_device.py::test_round_trip_cpu_dipu0_dipu1_cpu"),
    os.path.join(HERE, "test_device.py::test_fallback_ops"),
    os.path.join(HERE, "test_train.py"),
]


def link(dir_, names, target):
    os.makedirs(dir_, exist_ok=True)
    for n in names:
        path = os.path.join(dir_, n)
        if os.path.lexists(path):
            os.remove(path)
        os.symlink(target, path)


def vendor_env(name, root):
    lib = lambda n: os.path.join(TARGET, n)  # noqa: E731
    if name == "cuda":
        home = os.path.join(root, "fake-cuda")
        link(os.path.join(home, "lib64"), ["libcudart.so.13", "libcuda.so.1", "libnccl.so.2"], lib("libdipu_fake_cuda.so"))
        return {"DIPU_CUDA_HOME": home, "LD_LIBRARY_PATH": os.path.join(home, "lib64"),
                "DIPU_VENDOR": lib("libdipu_vendor_cuda.so")}
    if name == "ascend":
        home = os.path.join(root, "fake-cann")
        link(os.path.join(home, "lib64"), ["libascendcl.so", "libhccl.so"], lib("libdipu_fake_ascend.so"))
        return {"ASCEND_HOME_PATH": home, "DIPU_VENDOR": "ascend", "DIPU_VENDOR_PATH": TARGET}
    home = os.path.join(root, "fake-neuware")
    link(os.path.join(home, "lib64"), ["libcnrt.so", "libcncl.so", "libcndrv.so"], lib("libdipu_fake_cambricon.so"))
    return {"NEUWARE_HOME": home, "DIPU_VENDOR": "cambricon", "DIPU_VENDOR_PATH": TARGET}


VENDORS = ["cuda", "ascend", "cambricon"]
NEEDED = {
    "cuda": ["libdipu_fake_cuda.so", "libdipu_vendor_cuda.so"],
    "ascend": ["libdipu_fake_ascend.so", "libdipu_vendor_ascend.so"],
    "cambricon": ["libdipu_fake_cambricon.so", "libdipu_vendor_cambricon.so"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    missing = [n for v in VENDORS for n in NEEDED[v] if not os.path.isfile(os.path.join(TARGET, n))]
    if missing:
        pytest.fail(f"build the workspace first (cargo build --workspace): missing {missing} in {TARGET}")
    procs = {}
    for v in VENDORS:
        env = dict(os.environ)
        env.update(vendor_env(v, str(tmp_path_factory.mktemp(v))))
        env.update({"DIPU_FAKE_DEVICES": "2", "PADDLE_DIPU_EXPECT_VENDOR": v, "FLAGS_use_stride_kernel": "0",
                    "GLOG_minloglevel": "2"})
        procs[v] = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SELECTION],
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    yield procs
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("vendor", VENDORS)
def test_tests_1_and_2_on_the_fake(vendor, runs):
    out, _ = runs[vendor].communicate(timeout=300)
    assert runs[vendor].returncode == 0, out[-5000:]
    assert re.search(r"\b\d+ passed", out) and not re.search(r"\b\d+ failed", out), out[-3000:]
