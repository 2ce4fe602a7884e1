"""Helpers around the paddle_dipu CustomDevice plugin.

`import paddle` loads the plugin by itself (it is installed in
site-packages/paddle_custom_device); this module only locates it and reads
dipu-rs's own counters through its C API, for tests and benchmarks.
"""

import ctypes
import os
import sysconfig

__all__ = ["plugin_path", "runtime_path", "runtime", "plugin_counters", "memory_stats", "DEVICE_TYPE"]

DEVICE_TYPE = "dipu"


def plugin_path():
    """The installed plugin library, or the one CUSTOM_DEVICE_ROOT names."""
    root = os.environ.get("CUSTOM_DEVICE_ROOT")
    if root:
        return os.path.join(root, "libpaddle-dipu.so")
    return os.path.join(sysconfig.get_paths()["purelib"], "paddle_custom_device", "libpaddle-dipu.so")


def runtime_path():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libdipu_runtime.so")


_runtime = None


def runtime():
    """libdipu_runtime.so, the same instance the plugin uses."""
    global _runtime
    if _runtime is None:
        lib = ctypes.CDLL(runtime_path())
        lib.dipu_last_error_message.restype = ctypes.c_char_p
        lib.dipu_status_str.restype = ctypes.c_char_p
        _runtime = lib
    return _runtime


class _Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("current", "peak", "allocated", "freed")]


class _MemoryStats(ctypes.Structure):
    _fields_ = [
        (n, _Stat)
        for n in (
            "allocation",
            "segment",
            "active",
            "inactive_split",
            "allocated_bytes",
            "reserved_bytes",
            "active_bytes",
            "inactive_split_bytes",
            "requested_bytes",
        )
    ] + [
        (n, ctypes.c_uint64)
        for n in ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free")
    ]


def _check(status, what):
    if status != 0:
        lib = runtime()
        raise RuntimeError(f"{what}: {lib.dipu_status_str(status).decode()}: {lib.dipu_last_error_message().decode()}")


def memory_stats(device=0):
    """dipu-rs's caching-allocator statistics of `device`, as a dict."""
    s = _MemoryStats()
    _check(runtime().dipu_memory_get_stats(ctypes.c_int32(device), ctypes.byref(s)), "dipu_memory_get_stats")
    out = {}
    for name, typ in s._fields_:
        v = getattr(s, name)
        if typ is _Stat:
            for f in ("current", "peak", "allocated", "freed"):
                out[f"{name}.{f}"] = getattr(v, f)
        else:
            out[name] = v
    return out


def plugin_counters():
    """Live handles the plugin made: streams, events, comms, pending callbacks."""
    lib = ctypes.CDLL(plugin_path())
    out = (ctypes.c_int64 * 4)()
    lib.paddle_dipu_counters(out)
    return {"streams": out[0], "events": out[1], "comms": out[2], "callbacks": out[3]}
