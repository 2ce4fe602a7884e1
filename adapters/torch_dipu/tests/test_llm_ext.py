"""DIOPI's fused LLM functions from torch: `F.rms_norm` / `nn.RMSNorm` on
dipu through `aten._fused_rms_norm` (one diopiRMSNorm forward, one
diopiRMSNormBackward backward), and `torch_dipu.ext`'s `rms_norm` and
`apply_rotary` (diopiRotaryEmbedding, its backward the conjugate rotation).

Results and gradients are compared with float64 CPU references built from
torch ops on the same (rounded) inputs, under the tolerance policy
(docs/tolerance.md); which ops ran is read from the profiler: the fused op
and no decomposition (pow/mean/rsqrt, which the CPU path and the composite
would run)."""

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import torch_dipu.ext as ext
from dipu_tolerance import assert_close

DEV = "dipu"
DTYPES = [torch.float32, torch.bfloat16]


def rand(*shape, dtype=torch.float32, seed=0, lo=-1.0, hi=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def ops_run(fn):
    """The names of the ATen/torch_dipu ops `fn` ran, in order."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return [e.name for e in prof.events()]


def rms_ref(x, w, eps):
    """float64 CPU reference with autograd."""
    x64 = x.detach().double().requires_grad_()
    w64 = None if w is None else w.detach().double().requires_grad_()
    y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    if w64 is not None:
        y = y * w64
    return x64, w64, y


DECOMPOSED = {"aten::pow", "aten::rsqrt", "aten::mean"}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("api", ["functional", "module", "ext"])
def test_rms_norm_matches_cpu_and_runs_fused(dtype, api):
    d, eps = 16, 1e-5
    x_cpu = rand(3, 5, d, dtype=dtype)
    w_cpu = rand(d, dtype=dtype, seed=1, lo=0.5, hi=1.5)
    g_cpu = rand(3, 5, d, dtype=dtype, seed=2)
    x = x_cpu.to(DEV).requires_grad_()
    if api == "module":
        mod = torch.nn.RMSNorm(d, eps=eps, device=DEV, dtype=dtype)
        with torch.no_grad():
            mod.weight.copy_(w_cpu.to(DEV))
        w, run = mod.weight, lambda: mod(x)
    else:
        w = w_cpu.to(DEV).requires_grad_()
        run = (lambda: F.rms_norm(x, (d,), w, eps)) if api == "functional" \
            else (lambda: ext.rms_norm(x, w, eps))
    out = {}
    fwd = ops_run(lambda: out.setdefault("y", run()))
    bwd = ops_run(lambda: out["y"].backward(g_cpu.to(DEV)))
    assert "aten::_fused_rms_norm" in fwd and not DECOMPOSED & set(fwd), fwd
    assert bwd.count("aten::_fused_rms_norm_backward") == 1 and not DECOMPOSED & set(bwd), bwd

    x64, w64, y64 = rms_ref(x_cpu, w_cpu, eps)
    y64.backward(g_cpu.double())
    y = out["y"]
    assert y.dtype == dtype and y.device.type == DEV
    assert_close(y.cpu().double(), y64.detach(), dtype, reduction_len=d, msg="rms_norm output")
    assert_close(x.grad.cpu().double(), x64.grad, dtype, reduction_len=2 * d, msg="grad input")
    assert_close(w.grad.cpu().double(), w64.grad, dtype, reduction_len=15, msg="grad weight")


def test_rms_norm_without_weight_and_default_eps():
    x_cpu = rand(4, 6, seed=3)
    x = x_cpu.to(DEV).requires_grad_()
    y = F.rms_norm(x, (6,))
    y.sum().backward()
    x64, _, y64 = rms_ref(x_cpu, None, torch.finfo(torch.float32).eps)
    y64.sum().backward()
    assert_close(y.cpu().double(), y64.detach(), torch.float32, reduction_len=6)
    assert_close(x.grad.cpu().double(), x64.grad, torch.float32, reduction_len=12)


def test_rms_norm_over_two_dims_of_a_strided_input():
    x_cpu = rand(3, 4, 2, seed=9).transpose(0, 2)  # [2, 4, 3], not contiguous
    w_cpu = rand(4, 3, seed=10, lo=0.5, hi=1.5)
    x = x_cpu.to(DEV).requires_grad_()
    w = w_cpu.to(DEV).requires_grad_()
    y = F.rms_norm(x, (4, 3), w, 1e-4)
    y.backward(torch.ones_like(y))
    x64 = x_cpu.double().requires_grad_()
    w64 = w_cpu.double().requires_grad_()
    y64 = x64 * torch.rsqrt(x64.pow(2).mean((-2, -1), keepdim=True) + 1e-4) * w64
    y64.backward(torch.ones_like(y64))
    assert_close(y.cpu().double(), y64.detach(), torch.float32, reduction_len=12)
    assert_close(x.grad.cpu().double(), x64.grad, torch.float32, reduction_len=24)
    assert_close(w.grad.cpu().double(), w64.grad, torch.float32, reduction_len=2)


def test_ext_rms_norm_rejects_a_mismatched_weight():
    with pytest.raises(ValueError, match="weight has shape"):
        ext.rms_norm(torch.ones(2, 4, device=DEV), torch.ones(3, device=DEV))


def rotary_ref(x, cos, sin, conj, interleaved):
    """float64 CPU reference: pairs as complex numbers times e^{±iθ}."""
    x64 = x.detach().double().requires_grad_()
    c, s = cos.double(), sin.double() * (-1 if conj else 1)
    if interleaved:
        pairs = x64.unflatten(-1, (-1, 2))
        a, b = pairs[..., 0], pairs[..., 1]
        y = torch.stack([a * c - b * s, a * s + b * c], -1).flatten(-2)
    else:
        a, b = x64.chunk(2, -1)
        y = torch.cat([a * c - b * s, a * s + b * c], -1)
    return x64, y


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("conj,interleaved", [(False, False), (True, False), (False, True),
                                              (True, True)])
def test_apply_rotary_matches_cpu_with_its_gradient(dtype, conj, interleaved):
    b, s, h, d = 2, 5, 3, 8
    theta = rand(s, 1, d // 2, seed=4, lo=-3, hi=3).double()
    cos_cpu, sin_cpu = theta.cos().to(dtype), theta.sin().to(dtype)
    x_cpu = rand(b, s, h, d, dtype=dtype, seed=5)
    g_cpu = rand(b, s, h, d, dtype=dtype, seed=6)
    x = x_cpu.to(DEV).requires_grad_()
    cos, sin = cos_cpu.to(DEV), sin_cpu.to(DEV)
    out = {}
    fwd = ops_run(lambda: out.setdefault("y", ext.apply_rotary(x, cos, sin, conj, interleaved)))
    bwd = ops_run(lambda: out["y"].backward(g_cpu.to(DEV)))
    assert fwd.count("torch_dipu::apply_rotary") == 1, fwd
    assert bwd.count("torch_dipu::apply_rotary") == 1, bwd

    x64, y64 = rotary_ref(x_cpu, cos_cpu, sin_cpu, conj, interleaved)
    y64.backward(g_cpu.double())
    assert_close(out["y"].cpu().double(), y64.detach(), dtype, reduction_len=2, msg="rotary output")
    assert_close(x.grad.cpu().double(), x64.grad, dtype, reduction_len=2, msg="rotary gradient")


def test_apply_rotary_of_a_strided_view():
    d = 8
    theta = rand(4, 1, d // 2, seed=7, lo=-3, hi=3).double()
    cos, sin = theta.cos().float(), theta.sin().float()
    base = rand(2, 4, 3, 2 * d, seed=8)
    x_cpu = base[..., :d]  # not contiguous
    y = ext.apply_rotary(base.to(DEV)[..., :d], cos.to(DEV), sin.to(DEV))
    _, y64 = rotary_ref(x_cpu, cos, sin, False, False)
    assert_close(y.cpu().double(), y64.detach(), torch.float32, reduction_len=2)


def test_apply_rotary_rejects_bad_input():
    x = torch.ones(2, 3, device=DEV)
    with pytest.raises(ValueError, match="even length"):
        ext.apply_rotary(x, torch.ones(1, device=DEV), torch.ones(1, device=DEV))
    x = torch.ones(2, 4, device=DEV)
    with pytest.raises(RuntimeError, match="sin does not broadcast|diopiRotaryEmbedding"):
        ext.apply_rotary(x, torch.ones(2, device=DEV), torch.ones(3, device=DEV))
