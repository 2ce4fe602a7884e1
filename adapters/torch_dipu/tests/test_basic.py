"""torch_dipu's own tests: the backend's registrations, end to end.

The values compared with torch.equal are copies, views, replays of one
random stream and arithmetic on small integers: no rounding differs, so
the tolerance policy requires them bitwise (docs/tolerance.md)."""

import io
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from dipu_tolerance import assert_close

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)


def test_the_one_liner():
    x = torch.ones(4, device="dipu") + 1
    assert x.device == torch.device("dipu:0")
    assert x.is_dipu
    assert torch.equal(x.cpu(), torch.full((4,), 2.0))


def test_registration_names():
    assert torch._C._get_privateuse1_backend_name() == "dipu"
    assert torch.dipu.is_available()
    assert torch.dipu.device_count() == 2
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("dipu")
    assert torch.accelerator.device_count() == 2
    assert "host" in torch.dipu.get_device_name(0)
    assert torch.dipu.get_device_properties(0).total_memory > 0
    assert torch.dipu.vendor_name() == "host"


def test_devices_and_guards():
    assert torch.dipu.current_device() == 0
    with torch.dipu.device(1):
        assert torch.dipu.current_device() == 1
        y = torch.ones(2, device="dipu")
        assert y.device.index == 1
    assert torch.dipu.current_device() == 0
    z = torch.arange(3, device="dipu:1")
    assert z.get_device() == 1
    w = z.to("dipu:0")
    assert w.get_device() == 0 and torch.equal(w.cpu(), torch.arange(3))
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1
    torch.dipu.set_device(0)
    torch.dipu.synchronize()
    torch.accelerator.synchronize()


def test_memory_statistics_rise_and_fall_and_empty_cache_lowers_reserved():
    torch.dipu.empty_cache()
    base = torch.dipu.memory_allocated()
    torch.dipu.reset_peak_memory_stats()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="dipu")
    assert torch.dipu.memory_allocated() >= base + (1 << 20)
    assert torch.dipu.memory_reserved() >= torch.dipu.memory_allocated()
    del x
    assert torch.dipu.memory_allocated() == base
    assert torch.dipu.max_memory_allocated() >= base + (1 << 20)
    reserved = torch.dipu.memory_reserved()
    torch.dipu.empty_cache()
    assert torch.dipu.memory_reserved() < reserved
    stats = torch.dipu.memory_stats()
    assert stats["num_device_alloc"] >= 1
    torch.dipu.reset_accumulated_memory_stats()
    assert torch.dipu.memory_stats()["allocation.all.allocated"] == 0
    assert torch.accelerator.memory_allocated() == torch.dipu.memory_allocated()
    free, total = torch.dipu.mem_get_info()
    assert 0 < free <= total
    snapshot = torch.dipu.memory_snapshot()
    assert isinstance(snapshot, (list, dict))


def test_streams_events_and_elapsed_time():
    s = torch.dipu.Stream()
    assert s.device_index == 0 and s.priority == 0
    high = torch.dipu.Stream(priority=-1)
    assert high.priority <= 0
    with torch.dipu.stream(s):
        assert torch.dipu.current_stream() == s
        x = torch.ones(1 << 16, device="dipu")
        start = torch.dipu.Event(enable_timing=True)
        end = torch.dipu.Event(enable_timing=True)
        start.record()
        y = x * 2
        end.record()
    assert torch.dipu.current_stream() == torch.dipu.default_stream()
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) >= 0
    torch.dipu.current_stream().wait_stream(s)
    y.record_stream(torch.dipu.current_stream())
    assert torch.equal(y.cpu(), torch.full((1 << 16,), 2.0))
    s.synchronize()
    assert s.query()
    generic = torch.Stream(device="dipu")
    ev = torch.Event(device="dipu")
    ev.record(generic)
    ev.synchronize()


def test_manual_seed_is_repeatable():
    torch.manual_seed(1234)
    a = torch.randn(8, device="dipu")
    b = torch.rand(8, device="dipu")
    torch.manual_seed(1234)
    c = torch.randn(8, device="dipu")
    d = torch.rand(8, device="dipu")
    assert torch.equal(a.cpu(), c.cpu()) and torch.equal(b.cpu(), d.cpu())
    assert not torch.equal(a.cpu(), torch.randn(8, device="dipu").cpu()), "draws advance"
    torch.dipu.manual_seed(7)
    assert torch.dipu.initial_seed() == 7
    state = torch.dipu.get_rng_state()
    e = torch.randn(4, device="dipu")
    torch.dipu.set_rng_state(state)
    assert torch.equal(e.cpu(), torch.randn(4, device="dipu").cpu())
    g = torch.Generator(device="dipu")
    g.manual_seed(3)
    f1 = torch.randn(4, device="dipu", generator=g)
    g.manual_seed(3)
    assert torch.equal(f1.cpu(), torch.randn(4, device="dipu", generator=g).cpu())
    x = torch.ones(1000, device="dipu")
    torch.manual_seed(5)
    m1 = torch.nn.functional.dropout(x, 0.5)
    torch.manual_seed(5)
    assert torch.equal(m1.cpu(), torch.nn.functional.dropout(x, 0.5).cpu())


def test_views_out_and_in_place_on_slices():
    base = torch.arange(24, dtype=torch.float32)
    x = base.to("dipu").reshape(4, 6)
    assert torch.equal(x.t().cpu(), base.reshape(4, 6).t())
    x[1:3, ::2] += 100
    ref = base.reshape(4, 6).clone()
    ref[1:3, ::2] += 100
    assert torch.equal(x.cpu(), ref)
    col = x[:, 2]
    col.mul_(-1)
    ref[:, 2].mul_(-1)
    assert torch.equal(x.cpu(), ref)
    out = torch.empty(4, 6, device="dipu")
    torch.add(x, 1, out=out)
    assert torch.equal(out.cpu(), ref + 1)
    v = x.view(24)
    v[0] = 42
    assert x[0, 0].item() == 42
    assert x.unsqueeze(0).expand(2, 4, 6).sum().item() == pytest.approx(2 * x.sum().item())
    h = x.half()
    assert h.dtype == torch.float16 and torch.equal(h.cpu(), x.cpu().half())
    s = x.cpu().t().to("dipu")  # a strided source
    assert torch.equal(s.cpu(), x.cpu().t())
    r = torch.empty(0, device="dipu")
    r.resize_(5).fill_(3)
    r.resize_(10)
    assert torch.equal(r[:5].cpu(), torch.full((5,), 3.0))


def test_pin_memory_and_non_blocking_copies():
    host = torch.arange(1 << 16, dtype=torch.float32).pin_memory()
    assert host.is_pinned()
    assert not torch.ones(3).is_pinned()
    d = host.to("dipu", non_blocking=True)
    back = torch.empty_like(host).pin_memory()
    back.copy_(d, non_blocking=True)
    torch.dipu.synchronize()
    assert torch.equal(back, host)
    stats = torch.dipu.host_memory_stats()
    assert stats["active_requests"]["current"] >= 2
    assert stats["active_bytes"]["current"] >= 2 * host.nbytes
    assert stats["num_host_alloc"] >= 2
    del host, back
    assert torch.dipu.host_memory_stats()["active_requests"]["current"] == 0
    torch.dipu.synchronize()  # the freed blocks wait for the copies' events
    torch.dipu.host_empty_cache()
    assert torch.dipu.host_memory_stats()["allocated_bytes"]["current"] == 0
    torch.dipu.reset_accumulated_host_memory_stats()
    stats = torch.dipu.host_memory_stats()
    assert stats["active_requests"]["allocated"] == 0 and stats["num_host_alloc"] == 0
    torch.dipu.reset_peak_host_memory_stats()
    assert torch.dipu.host_memory_stats()["active_bytes"]["peak"] == 0


def test_save_and_load(tmp_path):
    x = torch.randn(3, 4).to("dipu")
    buf = io.BytesIO()
    torch.save({"x": x}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["x"].device.type == "dipu"
    assert torch.equal(loaded["x"].cpu(), x.cpu())
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    assert torch.equal(on_cpu["x"], x.cpu())


def test_two_devices():
    a = torch.ones(3, device="dipu:0")
    b = torch.full((3,), 2.0, device="dipu:1")
    c = a + b.to("dipu:0")
    assert torch.equal(c.cpu(), torch.full((3,), 3.0))
    assert (b * 2).device == torch.device("dipu:1")
    before = torch.dipu.memory_allocated(1)
    t = torch.empty(1024, device="dipu:1")
    assert torch.dipu.memory_allocated(1) > before
    del t


def test_a_tensor_of_another_device_is_an_error():
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(2, device="dipu") + torch.ones(2)
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(2, device="dipu:0") + torch.ones(2, device="dipu:1")
    # A CPU scalar tensor is allowed, as on CUDA.
    assert torch.equal((torch.ones(2, device="dipu") + torch.tensor(1.0)).cpu(), torch.full((2,), 2.0))


def test_a_device_index_past_the_count_is_an_error():
    with pytest.raises(RuntimeError, match="device"):
        torch.ones(1, device="dipu:7")
    with pytest.raises(RuntimeError, match="device"):
        torch.dipu.set_device(7)
    assert torch.dipu.current_device() == 0


def test_runtime_errors_are_runtime_errors_with_the_message():
    with pytest.raises(RuntimeError, match=r"not in \(0, 1\]"):
        torch.dipu.set_per_process_memory_fraction(2.0)


def test_out_of_memory_is_torch_out_of_memory_error():
    with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
        torch.empty(1 << 50, dtype=torch.uint8, device="dipu")
    # The device still works afterwards.
    assert torch.ones(2, device="dipu").sum().item() == 2


def _run(code, env=None):
    full_env = dict(os.environ, PYTHONPATH=PKG_ROOT, **(env or {}))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_under_another_torch_names_both_versions():
    """_C only loads with the torch it was built against: another torch
    gets an ImportError naming both versions and how to rebuild, before _C
    is loaded (not an undefined symbol)."""
    out = _run(
        """
        import sys, torch
        torch.__version__ = "1.0.0"
        try:
            import torch_dipu
        except ImportError as e:
            print(e)
        print("_C loaded" if "torch_dipu._C" in sys.modules else "_C not loaded")
        """
    )
    assert out.returncode == 0, out.stderr
    assert f"built against torch {torch.__version__}, but torch 1.0.0" in out.stdout, out.stdout
    assert "rebuild torch_dipu" in out.stdout and "_C not loaded" in out.stdout, out.stdout


def test_dataloader_with_workers_after_the_device_was_used():
    out = _run(
        """
        import torch, torch_dipu
        from torch.utils.data import DataLoader, TensorDataset
        x = torch.ones(4, device="dipu") * 3  # the device is in use
        data = TensorDataset(torch.arange(64, dtype=torch.float32))
        total = torch.zeros((), device="dipu")
        for (batch,) in DataLoader(data, batch_size=8, num_workers=2,
                                   multiprocessing_context="fork"):
            total += batch.to("dipu").sum()
        assert total.item() == sum(range(64)), total
        print("ok", x.sum().item())
        """
    )
    assert out.returncode == 0, out.stderr
    assert "ok 12.0" in out.stdout


def test_mock_cuda_runs_a_cuda_script_unchanged():
    script = """
        import torch
        assert torch.cuda.is_available()
        torch.cuda.manual_seed_all(0)
        x = torch.ones(3, device="cuda")
        y = torch.randn(3).cuda()
        z = (x + y).to("cuda:0")
        assert z.is_cuda and z.device.type == "dipu", z.device
        model = torch.nn.Linear(3, 2).cuda()
        out = model(z)
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() > 0
        from torch.cuda.amp import GradScaler
        with torch.cuda.amp.autocast():
            half = model(z)
        assert half.dtype == torch.float16 and half.device.type == "dipu"
        scaler = GradScaler()
        assert scaler._device == "dipu"
        assert scaler.scale(half.float().sum()).device.type == "dipu"
        print("mock ok", out.shape[0])
        """
    out = _run(
        "import runpy, sys, tempfile, os\n"
        "import torch, torch_dipu\n" + textwrap.dedent(script),
        env={"DIPU_MOCK_CUDA": "True"},
    )
    assert out.returncode == 0, out.stderr
    assert "mock ok 2" in out.stdout
    # And through `python -m torch_dipu`, with no import in the script.
    path = os.path.join(PKG_ROOT, "build", "mock_cuda_script.py")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(script))
    env = dict(os.environ, PYTHONPATH=PKG_ROOT, DIPU_MOCK_CUDA="True")
    run = subprocess.run(
        [sys.executable, "-m", "torch_dipu", path], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert "mock ok 2" in run.stdout


def test_fallback_logging_names_the_op():
    out = _run(
        """
        import torch, torch_dipu
        x = torch.ones(3, device="dipu")
        x.cumsum(0)[-1].item()
        """,
        env={"DIPU_LOG_FALLBACK_INFO": "1", "DIPU_DUMP_OP_ARGS": "2"},
    )
    assert out.returncode == 0, out.stderr
    # cumsum has no DIOPI function: it falls back (DIPU's line and the log's).
    assert "fallback to cpu: aten::cumsum" in out.stderr
    assert "[cumsum.out]: dipu_fallback" in out.stderr
    assert "self: dipu:0 Float[3]" in out.stderr


def test_mse_loss_matches_the_cpu_without_a_resize_warning():
    import warnings

    torch.manual_seed(0)
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    for reduction in ("mean", "sum", "none"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the CPU's mse_loss.out warns on a 0-dim out
            got = torch.nn.functional.mse_loss(a.to("dipu"), b.to("dipu"), reduction=reduction)
        want = torch.nn.functional.mse_loss(a, b, reduction=reduction)
        assert got.shape == want.shape
        assert_close(got.cpu(), want, reduction_len=12, msg=reduction)  # 4 x 3 squares summed
