"""Mixed precision on dipu: torch.autocast("dipu") with CUDA's op lists,
torch.dipu.amp, and torch.amp.GradScaler("dipu") (its unscale and
update-scale ops included), training the CNN of test_training.py against
the CPU's bfloat16 autocast."""

import pytest
import torch
from dipu_tolerance import assert_close
from torch import nn


def test_supported_dtypes_and_availability():
    assert torch.dipu.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.amp.is_autocast_available("dipu")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_casts_as_cuda_does(dtype):
    a = torch.randn(8, 8, device="dipu")
    b = torch.randn(8, 8, device="dipu")
    with torch.autocast("dipu", dtype=dtype):
        assert torch.is_autocast_enabled("dipu")
        assert torch.get_autocast_dtype("dipu") == dtype
        mm = a @ b  # lower-precision list
        lin = nn.functional.linear(a, b)
        soft = torch.softmax(mm, dim=1)  # fp32_set_opt_dtype list
        loss = nn.functional.mse_loss(mm, a)  # fp32 list
        summed = mm.sum()
        promoted = torch.addcmul(a, mm, b)  # promote list: widest input
    assert mm.dtype == dtype and lin.dtype == dtype
    assert soft.dtype == torch.float32
    assert loss.dtype == torch.float32
    assert summed.dtype == torch.float32
    assert promoted.dtype == torch.float32
    ref = (a.cpu().to(dtype) @ b.cpu().to(dtype)).float()
    # A product of 8 terms per element, rounded to `dtype` (docs/tolerance.md).
    assert_close(mm.float().cpu(), ref, dtype=dtype, reduction_len=8, msg="autocast matmul")
    assert not torch.is_autocast_enabled("dipu")
    assert (a @ b).dtype == torch.float32


def test_dipu_amp_names_and_banned_op():
    x = torch.randn(4, 4, device="dipu")
    with torch.dipu.amp.autocast():
        assert (x @ x).dtype == torch.float16
    with torch.dipu.amp.autocast(dtype=torch.bfloat16):
        assert (x @ x).dtype == torch.bfloat16
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            nn.functional.binary_cross_entropy(torch.sigmoid(x), torch.rand(4, 4, device="dipu"))
    assert isinstance(torch.dipu.amp.GradScaler(), torch.amp.GradScaler)


def test_grad_scaler_skips_a_step_with_inf_and_backs_off():
    p = nn.Parameter(torch.ones(4, device="dipu"))
    opt = torch.optim.SGD([p], lr=0.1)
    scaler = torch.amp.GradScaler("dipu", init_scale=1024.0, growth_interval=1)
    # A finite step: grads are unscaled before the step, the scale grows.
    scaler.scale((p * 2).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert_close(p.detach().cpu(), torch.full((4,), 0.8), msg="after the finite step")
    assert scaler.get_scale() == 2048.0
    after_first = p.detach().cpu().clone()
    # An inf gradient: the step is skipped, the scale halves.
    opt.zero_grad()
    scaler.scale((p * float("inf")).sum()).backward()
    scaler.step(opt)
    scaler.update()
    # The skipped step leaves the parameter's bytes as they were.
    assert torch.equal(p.detach().cpu(), after_first)
    assert scaler.get_scale() == 1024.0


def _cnn():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


def _train_amp(device, scaled):
    torch.manual_seed(0)
    model = _cnn().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(device, enabled=scaled)
    data = torch.Generator().manual_seed(1)
    x = torch.randn(16, 3, 16, 16, generator=data).to(device)
    y = torch.randint(0, 10, (16,), generator=data).to(device)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16):
            out = model(x)
            assert out.dtype == torch.bfloat16
            loss = nn.functional.cross_entropy(out, y)
        assert loss.dtype == torch.float32
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    return losses, scaler


def test_amp_training_with_grad_scaler_matches_cpu_autocast():
    cpu_losses, _ = _train_amp("cpu", scaled=False)
    dipu_losses, scaler = _train_amp("dipu", scaled=True)
    assert scaler.get_scale() == 2.0**16, "no step was skipped"
    assert cpu_losses[-1] < cpu_losses[0] and dipu_losses[-1] < dipu_losses[0]
    # bfloat16 keeps 8 bits of mantissa: autocast's tolerance (torch's
    # own tests use 1.6e-2 for bfloat16).
    for a, b in zip(dipu_losses, cpu_losses):
        assert abs(a - b) <= 1.6e-2 * max(1.0, abs(b)), (dipu_losses, cpu_losses)
