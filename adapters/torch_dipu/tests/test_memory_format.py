"""Ops on dipu keep the memory format the CPU gives: a channels_last input
through conv2d, batch_norm, relu, silu, max_pool2d, adaptive_avg_pool2d and
dropout gives outputs and gradients with the CPU's memory format and
strides, and values within the tolerance policy (docs/tolerance.md)."""

import pytest
import torch
import torch.nn.functional as F
from dipu_tolerance import assert_close

CL = torch.channels_last
G = torch.Generator().manual_seed(0)
W = torch.randn(4, 3, 3, 3, generator=G)
B = torch.randn(4, generator=G)
BN_W, BN_B = torch.rand(3, generator=G) + 0.5, torch.randn(3, generator=G)

# name: (f(x, device), reduction length of an output element, of an input
# gradient's element). The lengths: a convolution sums C*kh*kw = 27 terms
# per output and O*kh*kw = 36 per input gradient; a batch norm's statistics
# N*H*W = 60; pooling averages at most 3*3 (adaptive) windows.
OPS = {
    "conv2d": (lambda x, d: F.conv2d(x, W.to(d), B.to(d), padding=1), 27, 36),
    "conv2d_cl_weight": (
        lambda x, d: F.conv2d(x, W.to(d).to(memory_format=CL), B.to(d), stride=2), 27, 36),
    "batch_norm_train": (
        lambda x, d: F.batch_norm(x, torch.zeros(3, device=d), torch.ones(3, device=d),
                                  BN_W.to(d), BN_B.to(d), training=True), 60, 60),
    "batch_norm_eval": (
        lambda x, d: F.batch_norm(x, torch.zeros(3, device=d), torch.ones(3, device=d),
                                  BN_W.to(d), BN_B.to(d), training=False), 1, 1),
    "relu": (lambda x, d: F.relu(x), 1, 1),
    "silu": (lambda x, d: F.silu(x), 1, 1),
    "add": (lambda x, d: x + 1, 1, 1),
    "max_pool2d": (lambda x, d: F.max_pool2d(x, 2), 1, 1),
    "adaptive_avg_pool2d": (lambda x, d: F.adaptive_avg_pool2d(x, (2, 2)), 9, 1),
    "adaptive_avg_pool2d_1": (lambda x, d: F.adaptive_avg_pool2d(x, 1), 30, 1),
}


def _layout(t):
    return t.is_contiguous(memory_format=CL), t.is_contiguous(), t.stride()


def _run(f, x, device):
    xi = x.to(device).requires_grad_()
    y = f(xi, device)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    g = g.to(memory_format=CL).to(device)
    (gx,) = torch.autograd.grad(y, xi, g)
    return y, gx


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("fmt", [CL, torch.contiguous_format])
def test_memory_format_as_cpu(name, fmt):
    f, k_out, k_grad = OPS[name]
    x = torch.randn(2, 3, 6, 5, generator=torch.Generator().manual_seed(2))
    x = x.to(memory_format=fmt)
    y_cpu, gx_cpu = _run(f, x, "cpu")
    y, gx = _run(f, x, "dipu")
    assert _layout(y) == _layout(y_cpu), f"{name}: output layout"
    assert _layout(gx) == _layout(gx_cpu), f"{name}: input gradient layout"
    assert_close(y.cpu(), y_cpu, reduction_len=k_out, scale=3.0, msg=f"{name}: output")
    assert_close(gx.cpu(), gx_cpu, reduction_len=k_grad, scale=3.0, msg=f"{name}: input grad")


def test_channels_last_input_gives_channels_last_conv():
    """The case of the report, checked without the CPU: the layout test
    above could pass if the CPU changed."""
    x = torch.randn(2, 3, 6, 5).to(memory_format=CL).to("dipu")
    y = F.conv2d(x, W.to("dipu"), padding=1)
    assert y.is_contiguous(memory_format=CL) and not y.is_contiguous()


@pytest.mark.parametrize("fmt", [CL, torch.contiguous_format])
def test_conv2d_weight_and_bias_gradients_as_cpu(fmt):
    x = torch.randn(2, 3, 6, 5, generator=torch.Generator().manual_seed(3)).to(memory_format=fmt)
    grads = {}
    for d in ("cpu", "dipu"):
        w = W.to(d).requires_grad_()
        b = B.to(d).requires_grad_()
        y = F.conv2d(x.to(d), w, b, padding=1)
        g = torch.randn(y.shape, generator=torch.Generator().manual_seed(4)).to(d)
        grads[d] = torch.autograd.grad(y, (w, b), g.to(memory_format=fmt))
    for name, got, want in zip(("weight", "bias"), grads["dipu"], grads["cpu"]):
        assert _layout(got) == _layout(want), f"{name} gradient layout"
        # A weight gradient sums N*OH*OW = 60 positions, the bias the same.
        assert_close(got.cpu(), want, reduction_len=60, scale=3.0, msg=f"{name} gradient")


def test_dropout_keeps_channels_last():
    x = torch.randn(2, 3, 6, 5).to(memory_format=CL)
    xd = x.to("dipu").requires_grad_()
    y = F.dropout(xd, 0.5)
    assert _layout(y) == _layout(F.dropout(x, 0.5))
    (gx,) = torch.autograd.grad(y, xd, torch.ones_like(y))
    assert gx.is_contiguous(memory_format=CL)
    # The values: kept elements scaled by 2, the others zero, the gradient
    # the same mask times 2.
    kept = y.cpu() != 0
    assert kept.any() and (~kept).any()
    assert_close(y.cpu()[kept], x[kept] * 2)
    assert_close(gx.cpu(), kept.float() * 2)
