"""Shared parameters survive Module.to("dipu"): tied embeddings and a
parameter used by two modules stay one Parameter, and train as on the CPU."""

import torch
from dipu_tolerance import assert_close, assert_trained_close
from torch import nn


class TinyLM(nn.Module):
    """An embedding tied to the output layer, as GPT-2 ties wte and lm_head."""

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(32, 16)
        self.mid = nn.Linear(16, 16)
        self.lm_head = nn.Linear(16, 32, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        return self.lm_head(torch.tanh(self.mid(self.wte(idx))))


class TwoUsers(nn.Module):
    """One Linear registered under two names, and a bare Parameter in two modules."""

    def __init__(self):
        super().__init__()
        shared = nn.Linear(8, 8)
        self.a = shared
        self.b = shared
        self.scale = nn.Parameter(torch.ones(8))
        self.c = nn.Module()
        self.c.scale = self.scale

    def forward(self, x):
        return (self.b(torch.relu(self.a(x))) * self.scale * self.c.scale).sum()


def test_tied_embedding_stays_tied():
    m = TinyLM()
    before = m.wte.weight
    m.to("dipu")
    assert m.lm_head.weight is m.wte.weight
    assert m.wte.weight is before, "the Parameter object is kept, its data moved"
    assert m.wte.weight.device.type == "dipu"
    assert len(list(m.parameters())) == 3
    m.cpu()
    assert m.lm_head.weight is m.wte.weight and m.wte.weight.device.type == "cpu"


def test_parameter_used_by_two_modules_stays_shared():
    m = TwoUsers().to("dipu")
    assert m.a is m.b
    assert m.c.scale is m.scale
    assert m.scale.device.type == "dipu"
    # Gradients moved with the module stay on the kept Parameter too.
    m.cpu()
    m(torch.ones(2, 8)).backward()
    m.to("dipu")
    assert m.scale.grad is not None and m.scale.grad.device.type == "dipu"


def _train_lm(device):
    torch.manual_seed(0)
    m = TinyLM().to(device)
    initial = m.wte.weight.detach().cpu().clone()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 32, (4, 8), generator=g).to(device)
    target = torch.randint(0, 32, (4, 8), generator=g).to(device)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(m(idx).flatten(0, 1), target.flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert m.lm_head.weight is m.wte.weight
    return losses, m.wte.weight.detach().cpu(), initial


def test_tied_model_trains_as_on_cpu():
    cpu_losses, cpu_w, initial = _train_lm("cpu")
    dipu_losses, dipu_w, _ = _train_lm("dipu")
    assert cpu_losses[-1] < cpu_losses[0]
    # 5 steps, each a chain of two 16-term layers, a log-softmax over 32
    # classes and a mean over the 4 x 8 tokens (docs/tolerance.md).
    k = 5 * (16 + 16 + 32 + 4 * 8)
    assert_close(dipu_losses, cpu_losses, dtype="float32", reduction_len=k, msg="losses")
    assert_trained_close(dipu_w, cpu_w, initial, reduction_len=k, msg="tied weight")
