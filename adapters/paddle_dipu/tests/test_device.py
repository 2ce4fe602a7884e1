"""Tests 1, 3 and 4 of issue 32: loading, place round trips checked against
dipu-rs's own statistics, fallback ops, streams and events, memory
statistics and out of memory."""

import gc
import os

import numpy as np
import paddle
import paddle_dipu
import pytest
from dipu_tolerance import assert_close


def dipu_device_count():
    import ctypes

    n = ctypes.c_int32()
    assert paddle_dipu.runtime().dipu_device_count(ctypes.byref(n)) == 0
    return n.value


# Started at import, run while the in-process tests do: Paddle's loader
# skipping a plugin of too old a version or without a mandatory pointer, and
# out of memory with a small DIPU_HOST_MEMORY (each a fresh interpreter).
def _start(python):
    refused = (
        "import paddle\n"
        "assert paddle.device.get_all_custom_device_type() == [], paddle.device.get_all_custom_device_type()\n"
        "try:\n    paddle.set_device('dipu')\nexcept ValueError as e:\n    print('ValueError', e)\n"
    )
    oom = (
        "import paddle, paddle_dipu\n"
        "paddle.set_device('dipu:0')\n"
        "keep = paddle.ones([4 << 20])\n"  # 16 MiB
        "try:\n    big = paddle.empty([64 << 20])\n    big.fill_(1.0)\n    print('NO-OOM')\n"
        "except MemoryError as e:\n    print('OOM-ERROR', type(e).__name__, str(e)[:200].replace(chr(10), ' '))\n"
        "except Exception as e:\n    print('OOM-ERROR', type(e).__name__, str(e)[:200].replace(chr(10), ' '))\n"
        "x = paddle.ones([1 << 20]) * 2\n"
        "print('STILL-USABLE', float(x.sum()), float(keep.sum()))\n"
        "print('DIPU-OOMS', paddle_dipu.memory_stats(0)['num_ooms'])\n"
    )
    return {
        "old-version": python(refused, {"PADDLE_DIPU_TEST_LOAD": "old-version"}),
        "no-set-device": python(refused, {"PADDLE_DIPU_TEST_LOAD": "no-set-device"}),
        "oom": python(oom, {"DIPU_HOST_MEMORY": "64M"}),
    }


@pytest.fixture(scope="module")
def children():
    from conftest import run_python

    procs = _start(run_python)
    yield procs
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()


def finish(proc, timeout=120):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def test_child_processes_start(children):
    """Starts the fresh-interpreter checks first, to run beside the others."""
    assert all(p.pid for p in children.values())


def test_import_lists_dipu():
    assert paddle.device.get_all_custom_device_type() == ["dipu"]
    assert paddle.is_compiled_with_custom_device("dipu")
    n = dipu_device_count()
    assert n >= 2, "the tests need two dipu-rs devices (DIPU_HOST_DEVICES=2, the default)"
    assert paddle.device.device_count("dipu") == n
    assert paddle.device.get_available_custom_device() == [f"dipu:{i}" for i in range(n)]
    paddle.set_device("dipu")
    assert paddle.device.get_device() == "dipu:0"


def test_vendor():
    """The dipu-rs vendor under Paddle (PADDLE_DIPU_EXPECT_VENDOR names the
    one a run must have, as test_vendors.py sets it)."""
    import ctypes

    buf = ctypes.create_string_buffer(256)
    needed = ctypes.c_size_t()
    assert paddle_dipu.runtime().dipu_vendor_name(buf, ctypes.c_size_t(256), ctypes.byref(needed)) == 0
    want = os.environ.get("PADDLE_DIPU_EXPECT_VENDOR")
    if want:
        assert buf.value.decode() == want


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool", "float16", "uint8"])
def test_round_trip_cpu_dipu0_dipu1_cpu(dtype, trace):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((33, 17)) * 10).astype(dtype)
    before = paddle_dipu.memory_stats(0)["allocation.allocated"] + paddle_dipu.memory_stats(1)["allocation.allocated"]
    with trace() as t:
        x0 = paddle.to_tensor(a, place=paddle.CustomPlace("dipu", 0))
        assert x0.place.is_custom_place() and str(x0.place) == "Place(dipu:0)"
        x1 = x0._copy_to(paddle.CustomPlace("dipu", 1), True)
        assert str(x1.place) == "Place(dipu:1)"
        back = x1._copy_to(paddle.CPUPlace(), True)
    # Copies: bitwise (docs/tolerance.md).
    np.testing.assert_array_equal(back.numpy(), a)
    np.testing.assert_array_equal(x0.numpy(), a)
    # dipu-rs saw the copies: host->dipu:0, dipu:0->dipu:1, dipu:1->host.
    assert t.count("memcpy") >= 2, t.names
    assert t.count("memcpy_peer") >= 1, t.names
    after = paddle_dipu.memory_stats(0)["allocation.allocated"] + paddle_dipu.memory_stats(1)["allocation.allocated"]
    # Paddle's auto-growth allocator caches blocks: at least the first
    # dtype's tensors reached the runtime; the others may reuse them.
    assert after >= before
    assert paddle_dipu.memory_stats(0)["allocation.allocated"] >= 1
    assert paddle_dipu.memory_stats(1)["allocation.allocated"] >= 1


def test_zero_size_and_large_tensors():
    paddle.set_device("dipu:0")
    z = paddle.to_tensor(np.zeros((0, 3), "float32"))
    assert z.shape == [0, 3] and z.numpy().shape == (0, 3)
    big = np.arange(8 << 20, dtype="float32")  # 32 MiB
    t = paddle.to_tensor(big)
    np.testing.assert_array_equal(t._copy_to(paddle.CustomPlace("dipu", 1), True).numpy(), big)


def test_fallback_ops():
    paddle.set_device("dipu:0")
    a = np.arange(12, dtype="int16").reshape(3, 4)
    x = paddle.to_tensor(a)
    # Integer arithmetic, selections, views and casts round nothing: bitwise
    # (docs/tolerance.md); the product sums 4 terms per element.
    np.testing.assert_array_equal(paddle.add(x, x).numpy(), a + a)
    f = np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4)
    y = paddle.to_tensor(f)
    assert_close(paddle.matmul(y, y.T).numpy(), f @ f.T, reduction_len=4, msg="matmul")
    vals, idx = paddle.topk(y, 2)
    np.testing.assert_array_equal(vals.numpy(), np.sort(f, axis=1)[:, ::-1][:, :2])
    np.testing.assert_array_equal(y[:, 1:3].numpy(), f[:, 1:3])
    np.testing.assert_array_equal(paddle.transpose(y, [1, 0]).numpy(), f.T)
    np.testing.assert_array_equal(y.astype("int32").numpy(), f.astype("int32"))
    assert y.astype("int32").place.is_custom_place()


def test_streams_and_events():
    paddle.set_device("dipu:0")
    gc.collect()
    start = paddle_dipu.plugin_counters()
    paddle.device.synchronize("dipu:0")
    s = paddle.device.Stream("dipu:0")
    e = paddle.device.Event()
    x = paddle.ones([256, 256])
    s.wait_stream(paddle.device.current_stream())
    with paddle.device.stream_guard(s):
        y = x * 3
        s.record_event(e)
    e.synchronize()
    assert e.query()
    paddle.device.current_stream().wait_event(e)
    assert float(y.sum()) == 3 * 256 * 256
    s.synchronize()
    assert s.query()
    during = paddle_dipu.plugin_counters()
    assert during["streams"] >= start["streams"] + 1 and during["events"] >= start["events"] + 1
    del s, e, y
    gc.collect()
    end = paddle_dipu.plugin_counters()
    assert end["streams"] == start["streams"] and end["events"] == start["events"], (start, end)


def test_memory_statistics_match_dipu_rs():
    paddle.set_device("dipu:0")
    dev = "dipu:0"
    gc.collect()
    paddle.device.empty_cache()
    base_alloc = paddle.device.memory_allocated(dev)
    x = paddle.zeros([1024, 1024])
    allocated = paddle.device.memory_allocated(dev)
    assert allocated - base_alloc >= 4 << 20
    reserved = paddle.device.memory_reserved(dev)
    assert reserved >= allocated and paddle.device.max_memory_allocated(dev) >= allocated
    # Paddle's reserved bytes are its live device_memory_allocate requests:
    # exactly dipu-rs's requested bytes on the device.
    assert reserved == paddle_dipu.memory_stats(0)["requested_bytes.current"]
    del x
    gc.collect()
    assert paddle.device.memory_allocated(dev) == base_alloc
    assert paddle.device.memory_reserved(dev) == reserved
    paddle.device.empty_cache()
    assert paddle.device.memory_reserved(dev) == paddle_dipu.memory_stats(0)["requested_bytes.current"]
    assert paddle.device.memory_reserved(dev) < reserved


def test_loader_refuses_old_version_and_missing_pointer(children):
    for key in ("old-version", "no-set-device"):
        code, out, err = finish(children[key])
        assert code == 0, (key, out, err)
        assert "ValueError" in out, (key, out, err)
    _, _, err = finish(children["old-version"])


def test_out_of_memory_is_paddles_error(children):
    code, out, err = finish(children["oom"])
    assert code == 0, (out, err[-3000:])
    assert "OOM-ERROR" in out and "NO-OOM" not in out, (out, err[-3000:])
    assert "STILL-USABLE 2097152.0 4194304.0" in out, out
    assert "DIPU-OOMS 0" not in out, out
