"""The plugin's side of Paddle's C interface, without Paddle's loader:
the wheel's header layout, what InitPlugin fills, and its refusals."""

import ctypes
import os
import subprocess
import tempfile
import threading

import paddle
import paddle_dipu

SLOT = 8
INTERFACE_SIZE = 1128
PARAMS_SIZE = 96

# Slot indices (8-byte words) of C_DeviceInterface in paddlepaddle 3.3.1.
SLOTS = {
    "size": 0, "initialize": 1, "finalize": 2, "init_device": 3, "set_device": 4, "get_device": 5,
    "deinit_device": 6, "create_stream": 7, "destroy_stream": 8, "query_stream": 9,
    "stream_add_callback": 10, "create_event": 11, "record_event": 12, "destroy_event": 13,
    "query_event": 14, "synchronize_device": 15, "synchronize_stream": 16, "synchronize_event": 17,
    "stream_wait_event": 18, "device_memory_allocate": 27, "device_memory_deallocate": 28,
    "device_memory_set": 29, "host_memory_allocate": 30, "host_memory_deallocate": 31,
    "unified_memory_allocate": 32, "unified_memory_deallocate": 33, "memory_copy_h2d": 34,
    "memory_copy_d2h": 35, "memory_copy_d2d": 36, "memory_copy_p2p": 37, "async_memory_copy_h2d": 38,
    "async_memory_copy_d2h": 39, "async_memory_copy_d2d": 40, "async_memory_copy_p2p": 41,
    "get_device_count": 50, "get_device_list": 51, "device_memory_stats": 52,
    "device_min_chunk_size": 53, "device_max_chunk_size": 54, "device_max_alloc_size": 55,
    "device_extra_padding_size": 56, "device_init_alloc_size": 57, "device_realloc_size": 58,
    "get_compute_capability": 59, "get_device_properties": 60, "get_runtime_version": 61,
    "get_driver_version": 62, "get_multi_process": 63, "get_max_threads_per_mp": 64,
    "get_max_threads_per_block": 65, "get_max_grid_dim_size": 66, "is_float16_supported": 67,
    "is_bfloat16_supported": 68, "is_dnn_supported": 69, "init_eigen_device": 70,
    "destroy_eigen_device": 71, "xccl_get_comm_name": 80, "xccl_get_unique_id_size": 81,
    "xccl_get_unique_id": 82, "xccl_comm_init_rank": 83, "xccl_destroy_comm": 84,
    "xccl_all_reduce": 85, "xccl_broadcast": 86, "xccl_reduce": 87, "xccl_all_gather": 88,
    "xccl_reduce_scatter": 89, "xccl_group_start": 90, "xccl_group_end": 91, "xccl_send": 92,
    "xccl_recv": 93, "xccl_all_to_all": 94, "profiler_initialize": 103, "profiler_finalize": 104,
    "profiler_prepare_tracing": 105, "profiler_start_tracing": 106, "profiler_stop_tracing": 107,
    "profiler_collect_trace_data": 108, "init_blas_handle": 117, "blas_set_math_mode": 118,
    "init_blaslt_handle": 119, "destroy_blas_handle": 120, "destroy_blaslt_handle": 121,
    "cuda_stream_begin_capture": 122, "cuda_stream_end_captrue": 123, "cuda_graph_launch": 124,
    "cuda_graph_destroy": 125, "cuda_graph_exec_destroy": 126, "cuda_graph_instantiate": 127,
    "cuda_graph_get_nodes": 128, "cuda_stream_capture_info": 129,
    "get_parameter_setter_for_exec_graph": 130, "cuda_graph_debug_dot_print": 131,
    "cuda_thread_exchange_stream_capthure_mode": 132, "blas_axpby": 133,
}
# What the plugin leaves NULL (Paddle's fallback applies: docs/paddle.md).
UNSET = {
    "unified_memory_allocate", "unified_memory_deallocate", "device_max_chunk_size",
    "device_init_alloc_size", "device_realloc_size", "get_device_properties",
    "get_max_threads_per_mp", "get_max_threads_per_block", "get_max_grid_dim_size",
    "init_eigen_device", "destroy_eigen_device", "xccl_all_to_all", "init_blas_handle",
    "blas_set_math_mode", "init_blaslt_handle", "destroy_blas_handle", "destroy_blaslt_handle",
    "cuda_stream_begin_capture", "cuda_stream_end_captrue", "cuda_graph_launch",
    "cuda_graph_destroy", "cuda_graph_exec_destroy", "cuda_graph_instantiate",
    "cuda_graph_get_nodes", "cuda_stream_capture_info", "get_parameter_setter_for_exec_graph",
    "cuda_graph_debug_dot_print", "cuda_thread_exchange_stream_capthure_mode", "blas_axpby",
}
MANDATORY = [
    "set_device", "get_device", "create_event", "record_event", "destroy_event", "synchronize_event",
    "device_memory_allocate", "device_memory_deallocate", "get_device_count", "get_device_list",
]


def test_header_layout_matches_the_table():
    """Offsets, sizes and enum values of the wheel's own device_ext.h."""
    header = os.path.join(paddle.sysconfig.get_include(), "paddle/phi/backends/device_ext.h")
    assert os.path.isfile(header), header
    lines = ['#include "paddle/phi/backends/device_ext.h"', "#include <cstdio>", "#include <cstddef>", "int main() {"]
    lines.append('printf("sizeof %zu %zu\\n", sizeof(C_DeviceInterface), sizeof(CustomRuntimeParams));')
    for name in SLOTS:
        lines.append(f'printf("{name} %zu\\n", offsetof(C_DeviceInterface, {name}));')
    for name in ("size", "interface", "version", "device_type", "sub_device_type", "pir_default_passes", "reserved"):
        lines.append(f'printf("params.{name} %zu\\n", offsetof(CustomRuntimeParams, {name}));')
    enums = ["C_SUCCESS", "C_WARNING", "C_FAILED", "C_ERROR", "C_INTERNAL_ERROR", "BOOL", "UINT8", "UINT16",
             "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FLOAT16", "FLOAT32", "FLOAT64", "BFLOAT16",
             "COMPLEX64", "COMPLEX128", "SUM", "AVG", "MAX", "MIN", "PRODUCT"]
    for e in enums:
        lines.append(f'printf("enum.{e} %d\\n", (int){e});')
    lines.append('printf("version %d.%d.%d\\n", PADDLE_CUSTOM_RUNTIME_MAJOR_VERSION, '
                 'PADDLE_CUSTOM_RUNTIME_MINOR_VERSION, PADDLE_CUSTOM_RUNTIME_PATCH_VERSION);')
    lines.append("return 0; }")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "layout.cc"), os.path.join(tmp, "layout")
        with open(src, "w") as f:
            f.write("\n".join(lines))
        subprocess.run(["g++", "-std=c++17", "-I", paddle.sysconfig.get_include(), src, "-o", exe], check=True)
        out = dict(line.split(" ", 1) for line in subprocess.run([exe], check=True, capture_output=True,
                                                                   text=True).stdout.splitlines())
    assert out["sizeof"] == f"{INTERFACE_SIZE} {PARAMS_SIZE}"
    for name, slot in SLOTS.items():
        assert int(out[name]) == slot * SLOT, name
    assert [int(out[f"params.{n}"]) for n in ("size", "interface", "version", "device_type", "sub_device_type",
                                               "pir_default_passes", "reserved")] == [0, 8, 16, 40, 48, 56, 64]
    assert [int(out[f"enum.{e}"]) for e in enums] == [0, 1, 2, 3, 4] + list(range(1, 16)) + [0, 1, 2, 3, 4]
    assert out["version"] == "0.1.1"


class Params(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("interface", ctypes.c_void_p),
        ("version", ctypes.c_size_t * 3),
        ("device_type", ctypes.c_char_p),
        ("sub_device_type", ctypes.c_char_p),
        ("pir_default_passes", ctypes.c_void_p),
        ("reserved", ctypes.c_char * 32),
    ]


assert ctypes.sizeof(Params) == PARAMS_SIZE


def init_plugin(params_size=PARAMS_SIZE, interface_size=INTERFACE_SIZE):
    lib = ctypes.CDLL(paddle_dipu.plugin_path())
    iface = (ctypes.c_uint64 * (INTERFACE_SIZE // SLOT))()
    iface[0] = interface_size
    p = Params(size=params_size, interface=ctypes.addressof(iface))
    lib.InitPlugin(ctypes.byref(p))
    return p, iface


def test_init_plugin_fills_every_slot_it_serves():
    p, iface = init_plugin()
    assert p.device_type == b"dipu"
    assert list(p.version) == [0, 1, 1]
    assert iface[0] == INTERFACE_SIZE
    for name in MANDATORY:
        assert iface[SLOTS[name]], name
    for name, slot in SLOTS.items():
        if name == "size":
            continue
        assert bool(iface[slot]) == (name not in UNSET), name
    # Reserved words stay zero.
    named = set(SLOTS.values())
    assert all(iface[i] == 0 for i in range(INTERFACE_SIZE // SLOT) if i not in named)


def test_init_plugin_refuses_other_layouts(capfd):
    for params_size, interface_size in ((PARAMS_SIZE, 904), (88, INTERFACE_SIZE), (88, 904)):
        p, iface = init_plugin(params_size, interface_size)
        assert p.device_type is None
        assert list(p.version) == [0, 0, 0]
        assert not any(iface[1:])
        err = capfd.readouterr().err
        assert "paddle_dipu: refusing to load" in err and f"{interface_size} bytes" in err, err


def slot_fn(iface, name, *argtypes):
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(iface[SLOTS[name]])


class RootId(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("data", ctypes.c_void_p)]


def test_bad_input_is_an_error_not_a_crash(capfd):
    """Entry points called directly with bad arguments answer a C_Status."""
    _, iface = init_plugin()
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    dev = ctypes.c_int(0)
    dev_bad = ctypes.c_int(999)
    C_SUCCESS, C_ERROR = 0, 3

    get_device = slot_fn(iface, "get_device", vp)
    assert get_device(None) == C_ERROR
    set_device = slot_fn(iface, "set_device", vp)
    assert set_device(ctypes.addressof(dev_bad)) == C_ERROR
    assert "paddle_dipu: set_device" in capfd.readouterr().err

    # Out of memory: success with a NULL pointer (Paddle's contract).
    alloc = slot_fn(iface, "device_memory_allocate", vp, ctypes.POINTER(vp), sz)
    ptr = vp(1)
    assert alloc(ctypes.addressof(dev), ctypes.byref(ptr), sz(1 << 60)) == C_SUCCESS
    assert ptr.value is None
    # A real block, freed once; a second free is an error.
    assert alloc(ctypes.addressof(dev), ctypes.byref(ptr), sz(4096)) == C_SUCCESS and ptr.value
    free = slot_fn(iface, "device_memory_deallocate", vp, vp, sz)
    assert free(ctypes.addressof(dev), ptr, sz(4096)) == C_SUCCESS
    assert free(ctypes.addressof(dev), ptr, sz(4096)) == C_ERROR
    # A copy into memory dipu-rs did not hand out.
    h2d = slot_fn(iface, "memory_copy_h2d", vp, vp, vp, sz)
    buf = ctypes.create_string_buffer(16)
    assert h2d(ctypes.addressof(dev), ctypes.addressof(buf), ctypes.addressof(buf), sz(16)) == C_ERROR
    assert "paddle_dipu: memory_copy_h2d" in capfd.readouterr().err

    # A unique id that is not dipu's, too small a buffer, a NULL comm.
    init_rank = slot_fn(iface, "xccl_comm_init_rank", sz, ctypes.POINTER(RootId), sz, ctypes.POINTER(vp))
    junk = ctypes.create_string_buffer(b"not a dipu id", 128)
    rid = RootId(128, ctypes.addressof(junk))
    comm = vp()
    assert init_rank(sz(2), ctypes.byref(rid), sz(0), ctypes.byref(comm)) == C_ERROR
    assert init_rank(sz(2), ctypes.byref(rid), sz(5), ctypes.byref(comm)) == C_ERROR
    assert "not a dipu unique id" in capfd.readouterr().err
    get_id = slot_fn(iface, "xccl_get_unique_id", ctypes.POINTER(RootId))
    small = ctypes.create_string_buffer(8)
    assert get_id(ctypes.byref(RootId(8, ctypes.addressof(small)))) == C_ERROR
    all_reduce = slot_fn(iface, "xccl_all_reduce", vp, vp, sz, ctypes.c_int, ctypes.c_int, vp, vp)
    assert all_reduce(None, None, sz(0), 11, 0, None, None) == C_ERROR
    group_end = slot_fn(iface, "xccl_group_end")
    assert group_end() == C_ERROR
    assert "xccl_group_end without xccl_group_start" in capfd.readouterr().err


def test_streams_callbacks_pinned_memory_and_every_copy_direction():
    """Driven through the interface's own slots, as Paddle's C++ calls them."""
    _, iface = init_plugin()
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    d0, d1 = ctypes.c_int(0), ctypes.c_int(1)
    D0, D1 = ctypes.addressof(d0), ctypes.addressof(d1)
    n = 1 << 16
    f = lambda name, *a: slot_fn(iface, name, *a)  # noqa: E731

    create_stream = f("create_stream", vp, ctypes.POINTER(vp))
    s0, s1 = vp(), vp()
    assert create_stream(D0, ctypes.byref(s0)) == 0 and create_stream(D1, ctypes.byref(s1)) == 0
    alloc = f("device_memory_allocate", vp, ctypes.POINTER(vp), sz)
    free = f("device_memory_deallocate", vp, vp, sz)
    halloc = f("host_memory_allocate", vp, ctypes.POINTER(vp), sz)
    hfree = f("host_memory_deallocate", vp, vp, sz)
    a0, b0, a1, pin_in, pin_out = vp(), vp(), vp(), vp(), vp()
    for dev, p in ((D0, a0), (D0, b0), (D1, a1)):
        assert alloc(dev, ctypes.byref(p), sz(n)) == 0 and p.value
    for p in (pin_in, pin_out):
        assert halloc(D0, ctypes.byref(p), sz(n)) == 0 and p.value
    attrs = (ctypes.c_int32 * 8)()
    assert paddle_dipu.runtime().dipu_pointer_get_attributes(pin_in, attrs) == 0 and attrs[0] == 2  # pinned

    src = bytes(range(256)) * (n // 256)
    ctypes.memmove(pin_in.value, src, n)
    a_h2d = f("async_memory_copy_h2d", vp, vp, vp, vp, sz)
    a_d2d = f("async_memory_copy_d2d", vp, vp, vp, vp, sz)
    a_p2p = f("async_memory_copy_p2p", vp, vp, vp, vp, vp, sz)
    a_d2h = f("async_memory_copy_d2h", vp, vp, vp, vp, sz)
    sync_stream = f("synchronize_stream", vp, vp)
    # pinned -> dipu:0 -> dipu:0 -> dipu:1 -> pinned, all queued on streams.
    assert a_h2d(D0, s0, a0, pin_in, sz(n)) == 0
    assert a_d2d(D0, s0, b0, a0, sz(n)) == 0
    assert sync_stream(D0, s0) == 0
    assert a_p2p(D1, D0, s1, a1, b0, sz(n)) == 0
    assert a_d2h(D1, s1, pin_out, a1, sz(n)) == 0

    # A callback after the copies on s1.
    seen = []
    called = threading.Event()
    CB = ctypes.CFUNCTYPE(None, vp, vp, vp, ctypes.POINTER(ctypes.c_int))
    cb = CB(lambda dev, stream, user, status: (seen.append(user), called.set()))
    add_cb = f("stream_add_callback", vp, vp, CB, vp)
    assert add_cb(D1, s1, cb, vp(42)) == 0
    assert sync_stream(D1, s1) == 0
    # The limit only tells a callback that never comes from a slow one.
    assert called.wait(timeout=120), "the stream callback never ran"
    assert seen == [42]
    assert ctypes.string_at(pin_out.value, n) == src

    # Synchronous copies, every direction, and a peer copy, from pageable memory.
    h2d = f("memory_copy_h2d", vp, vp, vp, sz)
    d2h = f("memory_copy_d2h", vp, vp, vp, sz)
    d2d = f("memory_copy_d2d", vp, vp, vp, sz)
    p2p = f("memory_copy_p2p", vp, vp, vp, vp, sz)
    memset = f("device_memory_set", vp, vp, ctypes.c_ubyte, sz)
    page_in = ctypes.create_string_buffer(src[::-1], n)
    page_out = ctypes.create_string_buffer(n)
    assert h2d(D0, a0, page_in, sz(n)) == 0
    assert d2d(D0, b0, a0, sz(n)) == 0
    assert p2p(D1, D0, a1, b0, sz(n)) == 0
    assert d2h(D1, page_out, a1, sz(n)) == 0
    assert page_out.raw == src[::-1]
    assert memset(D0, a0, 7, sz(n)) == 0
    assert d2h(D0, page_out, a0, sz(n)) == 0
    assert page_out.raw == b"\x07" * n

    # Events: record after work, query, synchronize, make another stream wait.
    create_event = f("create_event", vp, ctypes.POINTER(vp))
    record = f("record_event", vp, vp, vp)
    query = f("query_event", vp, vp)
    sync_event = f("synchronize_event", vp, vp)
    wait = f("stream_wait_event", vp, vp, vp)
    destroy_event = f("destroy_event", vp, vp)
    e = vp()
    assert create_event(D0, ctypes.byref(e)) == 0
    assert a_h2d(D0, s0, a0, pin_in, sz(n)) == 0
    assert record(D0, s0, e) == 0
    assert wait(D1, s1, e) == 0
    assert sync_event(D0, e) == 0 and query(D0, e) == 0
    assert f("query_stream", vp, vp)(D0, s0) == 0
    assert destroy_event(D0, e) == 0

    # Memory statistics and sizes.
    total, free_b = sz(), sz()
    assert f("device_memory_stats", vp, ctypes.POINTER(sz), ctypes.POINTER(sz))(D0, ctypes.byref(total), ctypes.byref(free_b)) == 0
    assert total.value >= free_b.value > 0
    chunk = sz()
    assert f("device_min_chunk_size", vp, ctypes.POINTER(sz))(D0, ctypes.byref(chunk)) == 0 and chunk.value == 512

    for dev, p in ((D0, a0), (D0, b0), (D1, a1)):
        assert free(dev, p, sz(n)) == 0
    for p in (pin_in, pin_out):
        assert hfree(D0, p, sz(n)) == 0
    destroy_stream = f("destroy_stream", vp, vp)
    assert destroy_stream(D0, s0) == 0 and destroy_stream(D1, s1) == 0


def test_one_rank_comm_with_a_group_batch():
    """xccl_* on a one-rank communicator made in-process: the unique id,
    comm init, collectives inside xccl_group_start/end and alone."""
    _, iface = init_plugin()
    vp, sz, ci = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    f = lambda name, *a: slot_fn(iface, name, *a)  # noqa: E731
    FLOAT32, SUM = 11, 0
    d0 = ctypes.c_int(0)
    D0 = ctypes.addressof(d0)

    size = sz()
    assert f("xccl_get_unique_id_size", ctypes.POINTER(sz))(ctypes.byref(size)) == 0
    buf = ctypes.create_string_buffer(size.value)
    rid = RootId(size.value, ctypes.addressof(buf))
    assert f("xccl_get_unique_id", ctypes.POINTER(RootId))(ctypes.byref(rid)) == 0
    assert buf.value.startswith(b"dipu-xccl1 127.0.0.1 ")
    comm = vp()
    init_rank = f("xccl_comm_init_rank", sz, ctypes.POINTER(RootId), sz, ctypes.POINTER(vp))
    assert init_rank(sz(1), ctypes.byref(rid), sz(0), ctypes.byref(comm)) == 0 and comm.value
    name = ctypes.create_string_buffer(128)
    assert f("xccl_get_comm_name", vp, ctypes.c_char_p)(comm, name) == 0 and name.value.startswith(b"dipu-")

    s = vp()
    assert f("create_stream", vp, ctypes.POINTER(vp))(D0, ctypes.byref(s)) == 0
    alloc = f("device_memory_allocate", vp, ctypes.POINTER(vp), sz)
    free = f("device_memory_deallocate", vp, vp, sz)
    h2d = f("memory_copy_h2d", vp, vp, vp, sz)
    d2h = f("memory_copy_d2h", vp, vp, vp, sz)
    n = 8
    x, y, g = vp(), vp(), vp()
    for p, count in ((x, n), (y, n), (g, n)):
        assert alloc(D0, ctypes.byref(p), sz(4 * count)) == 0
    host = (ctypes.c_float * n)(*[float(i) + 0.5 for i in range(n)])
    assert h2d(D0, x, host, sz(4 * n)) == 0

    all_reduce = f("xccl_all_reduce", vp, vp, sz, ci, ci, vp, vp)
    broadcast = f("xccl_broadcast", vp, sz, ci, sz, vp, vp)
    all_gather = f("xccl_all_gather", vp, vp, sz, ci, vp, vp)
    assert f("xccl_group_start")() == 0
    assert all_reduce(x, y, sz(n), FLOAT32, SUM, comm, s) == 0  # x -> y, then reduced in place
    assert broadcast(y, sz(n), FLOAT32, sz(0), comm, s) == 0
    assert f("xccl_group_end")() == 0
    assert all_gather(y, g, sz(n), FLOAT32, comm, s) == 0
    assert f("synchronize_stream", vp, vp)(D0, s) == 0
    out = (ctypes.c_float * n)()
    assert d2h(D0, out, g, sz(4 * n)) == 0
    assert list(out) == list(host)
    # An unsupported data type and reduce op are errors.
    assert all_reduce(x, x, sz(n), 3, SUM, comm, s) == 3  # UINT16
    assert all_reduce(x, x, sz(n), FLOAT32, 9, comm, s) == 3

    for p, count in ((x, n), (y, n), (g, n)):
        assert free(D0, p, sz(4 * count)) == 0
    assert f("xccl_destroy_comm", vp)(comm) == 0
    assert f("destroy_stream", vp, vp)(D0, s) == 0
