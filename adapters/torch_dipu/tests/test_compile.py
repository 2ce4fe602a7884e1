"""torch.compile on dipu: the aot_eager backend (AOTAutograd, no code
generation) compiles forward and backward and matches eager; the default
backend (Inductor, which has no code generator for dipu) fails with an
error naming the device instead of running wrong code."""

import pytest
import torch
from torch import nn


def test_aot_eager_forward_and_backward_match_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).to("dipu")
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(5, 8, device="dipu")
    out = compiled(x)
    ref = model(x)
    torch.testing.assert_close(out.cpu(), ref.cpu())
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    ref.sum().backward()
    for g, p in zip(grads, model.parameters()):
        assert g.device.type == "dipu"
        torch.testing.assert_close(g.cpu(), p.grad.cpu())


def test_default_backend_names_the_device():
    torch._dynamo.reset()
    f = torch.compile(lambda x: torch.sin(x) + x.sum())
    with pytest.raises(Exception, match="no scheduling registered for device dipu"):
        f(torch.randn(8, device="dipu"))
