"""torch.compile on dipu.

On the host vendor (device memory is host memory) the default backend,
Inductor, generates C++ kernels for dipu tensors (torch_dipu/_inductor.py):
models train as eager on the CPU does, reductions fuse with pointwise ops,
dynamic shapes compile once, and the generated kernels wait for the
stream work that produces their inputs. On a vendor whose memory is not
host memory the default backend fails with an error naming aot_eager,
and aot_eager (AOTAutograd, no code generation) works everywhere.

Inductor compiles C++: the module uses its own cache directory, so every
run compiles from scratch and nothing leaks between runs."""

import pytest
import torch
from torch import nn
from torch._inductor import metrics
from torch._inductor.utils import run_and_get_code

import torch_dipu._inductor as dipu_inductor
from dipu_tolerance import assert_close, assert_trained_close


@pytest.fixture(scope="module", autouse=True)
def inductor_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
    yield
    mp.undo()
    torch._dynamo.reset()


def _train_like_cpu(make_model, make_batch, step_reduction, steps=3):
    """Trains a compiled copy of the model on dipu and the eager model on
    the CPU with the same batches; returns the first step's generated code.
    `step_reduction`: the longest reduction of one training step; after s
    steps the results carry s of them (docs/tolerance.md)."""
    torch.manual_seed(0)
    ref = make_model()
    model = make_model().to("dipu")
    model.load_state_dict(ref.state_dict())
    initial = [p.detach().clone() for p in ref.parameters()]
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    codes = []
    for step in range(steps):
        x, y = make_batch()

        def dipu_step():
            loss = nn.functional.cross_entropy(compiled(x.to("dipu")), y.to("dipu"))
            loss.backward()
            return loss

        if step == 0:
            loss, codes = run_and_get_code(dipu_step)
        else:
            loss = dipu_step()
        loss_ref = nn.functional.cross_entropy(ref(x), y)
        loss_ref.backward()
        k = step_reduction * (step + 1)
        assert_close(loss.cpu(), loss_ref.detach(), reduction_len=k, msg=f"loss {step}")
        for p, q in zip(model.parameters(), ref.parameters()):
            assert p.grad.device.type == "dipu"
            assert_close(p.grad.cpu(), q.grad, reduction_len=k, msg=f"grad {step}")
        opt.step()
        opt_ref.step()
        opt.zero_grad()
        opt_ref.zero_grad()
    for p, q, p0 in zip(model.parameters(), ref.parameters(), initial):
        assert_trained_close(p.detach().cpu(), q.detach(), p0, reduction_len=step_reduction * steps,
                             msg="params")
    return codes


def test_mlp_trains_like_cpu_with_generated_kernels():
    torch._dynamo.reset()
    metrics.reset()
    codes = _train_like_cpu(
        lambda: nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 5)),
        lambda: (torch.randn(8, 16), torch.randint(0, 5, (8,))),
        32,  # the second layer's fan-in
    )
    # Forward and backward were compiled by Inductor into C++ kernels that
    # run on dipu buffers, each run after a stream synchronization.
    assert len(codes) == 2
    assert metrics.generated_kernel_count >= 2
    for code in codes:
        assert "cpp_fused_" in code
        assert "device='dipu'" in code
        assert "torch_dipu._inductor.sync_before_host_kernel(0)" in code


def test_cnn_trains_like_cpu():
    torch._dynamo.reset()

    def make():
        return nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(4 * 4 * 4, 3),
        )

    # The convolution's weight gradient sums over 2 x 8 x 8 positions.
    codes = _train_like_cpu(make, lambda: (torch.randn(2, 3, 8, 8), torch.randint(0, 3, (2,))), 2 * 8 * 8)
    assert all("cpp_fused_" in code for code in codes)


def test_reduction_fuses_with_pointwise():
    torch._dynamo.reset()

    def f(x):
        return torch.relu(x) * 3 + x.mean(dim=1, keepdim=True)

    x = torch.randn(6, 40)
    out, (code,) = run_and_get_code(torch.compile(f), x.to("dipu"))
    assert_close(out.cpu(), f(x), reduction_len=40)
    # One kernel computes the mean and the pointwise ops that use it.
    assert code.count("= async_compile.cpp_pybinding(") == 1
    assert "cpp_fused_add_mean_mul_relu_0(" in code


def test_dynamic_shapes_compile_once():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()

    def f(x):
        return torch.softmax(x * 2, dim=-1).sum(0)

    compiled = torch.compile(f, dynamic=True)
    for n in (5, 11):
        x = torch.randn(n, 7)
        # softmax over 7, then a sum over n rows
        assert_close(compiled(x.to("dipu")).cpu(), f(x), reduction_len=7 + n)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_generated_kernel_waits_for_stream_work():
    # The matmuls run asynchronously on the stream; the fused kernel after
    # them reads their result on the calling thread, so it must wait.
    torch._dynamo.reset()

    def f(a, b):
        c = a @ b
        c = c @ b
        return torch.tanh(c) + c.sum()

    a, b = torch.randn(384, 384), torch.randn(384, 384) / 20
    compiled = torch.compile(f)
    da, db = a.to("dipu"), b.to("dipu")
    expected = f(a, b)
    # Two products of 384 terms, then a sum of all 384 x 384.
    k = 2 * 384 + 384 * 384
    for _ in range(3):
        assert_close(compiled(da, db).cpu(), expected, reduction_len=k)


def test_device_interface_is_dipu():
    from torch._dynamo.device_interface import get_interface_for_device

    dipu_inductor.register_device_interface()  # what the first compile does
    iface = get_interface_for_device("dipu")
    assert iface.current_device() == torch.dipu.current_device()
    assert iface.device_count() == torch.dipu.device_count()
    assert iface.get_raw_stream(0) == torch.dipu.current_stream(0).dipu_stream
    prev = iface.exchange_device(1)
    assert torch.dipu.current_device() == 1
    assert iface.maybe_exchange_device(prev) == 1
    assert torch.dipu.current_device() == prev
    assert isinstance(iface.Stream(), torch.Stream)
    assert iface.get_compute_capability() >= 0


def test_non_host_vendor_default_backend_fails_clearly(monkeypatch):
    def f(x):
        return torch.sin(x) + x.sum()

    x = torch.randn(8)
    torch._dynamo.reset()
    torch.compile(f)(x.to("dipu"))  # C++ code for the host vendor, now in the cache
    # A vendor whose memory is not host memory (as cuda, ascend and
    # cambricon): neither a new compile nor the cached module runs.
    # The vendor's capabilities without it (as DIPU_HOST_ACCESSIBLE_MEMORY=0
    # reports them), asked afresh.
    caps = torch.dipu.vendor_capabilities() - {"host-accessible-memory"}
    monkeypatch.setattr(torch.dipu, "vendor_capabilities", lambda: caps)
    monkeypatch.setattr(dipu_inductor, "_host_accessible", None)
    for cache in (True, False):
        monkeypatch.setattr(torch._inductor.config, "fx_graph_cache", cache)
        torch._dynamo.reset()
        with pytest.raises(Exception, match="no code generator for dipu vendor 'host'.*backend='aot_eager'"):
            torch.compile(f)(x.to("dipu"))
    torch._dynamo.reset()
    out = torch.compile(f, backend="aot_eager")(x.to("dipu"))
    assert_close(out.cpu(), f(x), reduction_len=8)
    # A graph without generated kernels (only ATen calls) needs no host memory.
    torch._dynamo.reset()
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    out = torch.compile(lambda a, b: a @ b)(a.to("dipu"), b.to("dipu"))
    assert_close(out.cpu(), a @ b, reduction_len=4)
    torch._dynamo.reset()


def test_the_rule_is_the_host_accessible_memory_capability():
    """The host vendor reports host-accessible memory through the C ABI
    (dipu_vendor_capabilities), and that capability, not the vendor's
    name, decides: the test above takes it away."""
    caps = torch.dipu.vendor_capabilities()
    assert {"collectives", "virtual-memory", "host-accessible-memory"} <= caps, caps
    dipu_inductor._host_accessible = None  # asked afresh
    assert dipu_inductor.vendor_memory_is_host_accessible()


def test_aot_eager_forward_and_backward_match_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).to("dipu")
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(5, 8, device="dipu")
    out = compiled(x)
    ref = model(x)
    # Compiled and eager on dipu: the same kernels, maybe other groupings;
    # the layers sum 8 and 16 terms, the weight gradients 5.
    assert_close(out.cpu(), ref.cpu(), reduction_len=8 + 16)
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    ref.sum().backward()
    for g, p in zip(grads, model.parameters()):
        assert g.device.type == "dipu"
        assert_close(g.cpu(), p.grad.cpu(), reduction_len=8 + 16 + 5)
