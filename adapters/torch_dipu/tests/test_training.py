"""A small CNN trained for 20 steps with AdamW on one synthetic batch: the
dipu run's losses equal the CPU run's within 1e-5."""

import torch
from torch import nn


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
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
    data = torch.Generator().manual_seed(1)
    x = torch.randn(16, 3, 16, 16, generator=data).to(device)
    y = torch.randint(0, 10, (16,), generator=data).to(device)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_training_loop_matches_cpu():
    cpu_losses, cpu_params = _train("cpu")
    dipu_losses, dipu_params = _train("dipu")
    assert len(dipu_losses) == 20
    assert cpu_losses[-1] < cpu_losses[0], "the model learns"
    for a, b in zip(dipu_losses, cpu_losses):
        assert abs(a - b) <= 1e-5, (dipu_losses, cpu_losses)
    for a, b in zip(dipu_params, cpu_params):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
