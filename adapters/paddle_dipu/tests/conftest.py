"""Shared set-up: one `import paddle` per pytest process (it takes ~10 s).

Views (slices, transposes) need FLAGS_use_stride_kernel=0 on a custom
device whose kernels all fall back to the CPU: Paddle's contiguous
transform knows only CPU, GPU and XPU places (docs/paddle.md).
"""

import ctypes
import os
import subprocess
import sys

# adapters/: dipu_tolerance, the tolerance policy both adapters' suites use
# (docs/tolerance.md).
sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("FLAGS_use_stride_kernel", "0")
os.environ.setdefault("GLOG_minloglevel", "2")

import paddle  # noqa: E402
import pytest  # noqa: E402

import paddle_dipu  # noqa: E402


class TraceEvent(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("category", ctypes.c_char_p),
        ("kind", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("track", ctypes.c_uint64),
        ("ts_ns", ctypes.c_uint64),
        ("dur_ns", ctypes.c_uint64),
        ("flow_id", ctypes.c_uint64),
    ]


class Trace:
    """dipu-rs's own profiler: the runtime calls made inside the block."""

    def __enter__(self):
        lib = paddle_dipu.runtime()
        assert lib.dipu_profiler_clear() == 0
        assert lib.dipu_profiler_start() == 0
        return self

    def __exit__(self, *exc):
        lib = paddle_dipu.runtime()
        lib.dipu_profiler_stop()
        n = ctypes.c_size_t()
        assert lib.dipu_profiler_events(ctypes.byref(n)) == 0
        arr = (TraceEvent * max(n.value, 1))()
        got = ctypes.c_size_t()
        assert lib.dipu_profiler_read(ctypes.c_size_t(0), arr, ctypes.c_size_t(n.value), ctypes.byref(got)) == 0
        self.names = [(e.category.decode(), e.name.decode()) for e in arr[: got.value]]
        return False

    def count(self, name):
        return sum(1 for _, n in self.names if n == name)


@pytest.fixture
def trace():
    return Trace


def run_python(code, env=None, timeout=120):
    """Starts `code` in a fresh interpreter of this venv (not waited for)."""
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-c", code], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.fixture
def python():
    """`run_python`, whose processes still running when the test ends
    (a failed test's too) are killed."""
    started = []

    def start(code, env=None, timeout=120):
        proc = run_python(code, env, timeout)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
