"""A small CNN trained for 20 steps with AdamW on one synthetic batch: the
dipu run's losses and parameters match the CPU run's under the tolerance
policy (docs/tolerance.md)."""

import torch
from dipu_tolerance import assert_close, assert_trained_close
from torch import nn

STEPS = 20
# One step is a chain of reductions, whose lengths add up
# (docs/tolerance.md): forward, the fan-ins (27, 72, 16), the batch norm's
# statistics over 16 x 16 x 16 positions, the pooling over 8 x 8, the loss
# over 10 classes and 16 samples; backward, the weight gradients over
# 16 x 16 x 16 and 16 x 8 x 8 positions. The run chains STEPS steps.
STEP_REDUCTION = 27 + 72 + 16 + 16 * 16 * 16 + 8 * 8 + 10 + 16 + 16 * 16 * 16 + 16 * 8 * 8


def _train(device):
    torch.manual_seed(0)
    model = nn.Sequential(
        # No bias before the batch norm: its gradient is zero in exact
        # arithmetic, and AdamW turns rounding noise there (DIOPI kernels sum
        # in another order than the CPU's) into full-size steps.
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    ).to(device)
    initial = [p.detach().cpu().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
    data = torch.Generator().manual_seed(1)
    x = torch.randn(16, 3, 16, 16, generator=data).to(device)
    y = torch.randint(0, 10, (16,), generator=data).to(device)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()], initial


def test_training_loop_matches_cpu():
    cpu_losses, cpu_params, initial = _train("cpu")
    dipu_losses, dipu_params, _ = _train("dipu")
    assert len(dipu_losses) == STEPS
    assert cpu_losses[-1] < cpu_losses[0], "the model learns"
    k = STEP_REDUCTION * STEPS
    assert_close(dipu_losses, cpu_losses, dtype="float32", reduction_len=k, msg="losses")
    for i, (a, b, p0) in enumerate(zip(dipu_params, cpu_params, initial)):
        assert_trained_close(a, b, p0, reduction_len=k, msg=f"parameter {i}")
