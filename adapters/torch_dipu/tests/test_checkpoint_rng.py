"""Activation checkpointing replays dropout on dipu: the recomputation in
backward draws the forward's mask, so checkpointed and plain runs give the
same outputs and gradients (both checkpoint modes, devices 0 and 1, the
default and a non-default stream), and the generator state of a device can
be saved and restored from a thread that never chose its device (the
autograd engine's device thread recomputes there).

Bitwise comparison is right here: the checkpointed run executes the same
DIOPI kernels on the same device and stream with the same inputs and, once
the generator state is replayed, the same dropout mask, so no arithmetic
differs between the two runs; a wrong replay changes about half the mask
and the gradients by O(1)."""

import threading

import pytest
import torch
from dipu_tolerance import assert_equal
from torch.utils.checkpoint import checkpoint


def _model(device):
    torch.manual_seed(0)
    m = torch.nn.Sequential(
        torch.nn.Linear(32, 32), torch.nn.Dropout(0.5), torch.nn.Linear(32, 4)
    ).to(device)
    x = torch.randn(8, 32).to(device).requires_grad_()
    return m, x


def _plain_and_checkpointed(device, use_reentrant):
    """(out, input grad, weight grad) of a plain run and a checkpointed one
    from the same seed, on the current stream."""
    m, x = _model(device)
    runs = []
    for ckpt in (False, True):
        x.grad = None
        m.zero_grad(set_to_none=True)
        torch.manual_seed(1)
        y = checkpoint(m, x, use_reentrant=use_reentrant) if ckpt else m(x)
        y.backward(torch.linspace(-1, 1, y.numel(), device=device).view_as(y))
        runs.append((y.detach().cpu(), x.grad.cpu(), m[0].weight.grad.cpu()))
    return runs


def _check(runs, what):
    (y0, gx0, gw0), (y1, gx1, gw1) = runs
    # Gradients flow (test_checkpoint_differs_without_replay shows that a
    # wrong mask changes them).
    assert gx0.abs().sum() > 0, what
    assert_equal(y1, y0, msg=f"{what}: forward output")
    assert_equal(gx1, gx0, msg=f"{what}: input gradient")
    assert_equal(gw1, gw0, msg=f"{what}: first layer's weight gradient")


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("index,current", [(0, 0), (1, 1), (1, 0)])
def test_checkpoint_replays_dropout(use_reentrant, index, current):
    """Tensors on device `index` while `current` is the current device."""
    device = torch.device("dipu", index)
    with torch.dipu.device(current):
        runs = _plain_and_checkpointed(device, use_reentrant)
    _check(runs, f"{device} (current {current}), use_reentrant={use_reentrant}")


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("index", [0, 1])
def test_checkpoint_replays_dropout_on_a_side_stream(use_reentrant, index):
    device = torch.device("dipu", index)
    with torch.dipu.device(index):
        side = torch.dipu.Stream(device=device)
        side.wait_stream(torch.dipu.current_stream(device))
        with torch.dipu.stream(side):
            runs = _plain_and_checkpointed(device, use_reentrant)
        torch.dipu.current_stream(device).wait_stream(side)
    _check(runs, f"{device} on a side stream, use_reentrant={use_reentrant}")


def test_checkpoint_differs_without_replay():
    """The comparison above can fail: the same model run twice without
    replaying the generator gives other gradients."""
    m, x = _model("dipu")
    torch.manual_seed(1)
    m(x).sum().backward()
    first = x.grad.cpu()
    x.grad = None
    m(x).sum().backward()
    assert not torch.equal(x.grad.cpu(), first)


def test_dipu_module_reports_initialized():
    """torch.utils.checkpoint stashes a device's generator states only when
    the device module's `_initialized` is true."""
    torch.empty(1, device="dipu")
    assert torch.dipu._initialized is True
    assert getattr(torch.dipu, "_initialized", False) is True
    with pytest.raises(AttributeError):
        torch.dipu._no_such_attribute


@pytest.mark.parametrize("index", [0, 1])
def test_rng_state_replay_from_a_fresh_thread(index):
    """A thread that never set its device saves and restores device
    `index`'s state (with torch.dipu.device, as checkpoint does) and
    dropout draws the same mask after the restore."""
    device = torch.device("dipu", index)
    x = torch.ones(64, 64, device=device)
    result = {}

    def work():
        try:
            result["current"] = torch.dipu.current_device()
            with torch.dipu.device(index):
                state = torch.dipu.get_rng_state()
                a = torch.nn.functional.dropout(x, 0.5).cpu()
                torch.dipu.set_rng_state(state)
                b = torch.nn.functional.dropout(x, 0.5).cpu()
                c = torch.nn.functional.dropout(x, 0.5).cpu()
            with torch.random.fork_rng(devices=[index], device_type="dipu"):
                d = torch.nn.functional.dropout(x, 0.5).cpu()
            e = None
            with torch.dipu.device(index):
                e = torch.nn.functional.dropout(x, 0.5).cpu()
            result["masks"] = (a, b, c, d, e)
        except BaseException as err:  # reported on the test's thread
            result["error"] = err

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert "error" not in result, result.get("error")
    assert result["current"] == 0
    a, b, c, d, e = result["masks"]
    assert_equal(b, a, msg="mask after set_rng_state")
    assert not torch.equal(c, a), "the generator did not advance"
    # fork_rng restored the state it saved: d and e draw the same numbers.
    assert_equal(e, d, msg="mask after fork_rng")
