"""Test 2 of issue 32: an MLP and a small CNN train 20 steps with SGD and
with Adam on dipu:0 and on the CPU from the same weights and batches, and
the losses and parameters agree under the tolerance policy
(docs/tolerance.md). The same CPU kernels run (by fallback), but on dipu
memory, whose other alignment can make oneDNN and MKL pick other inner
loops: the sums may round differently in their last bits."""

import numpy as np
import paddle
import pytest
from dipu_tolerance import assert_close, assert_trained_close

STEPS = 20
# One step is a chain of reductions, whose lengths add up
# (docs/tolerance.md). The MLP: fan-ins 16 and 32, the loss over 4 classes
# and 8 samples, the weight gradients over the batch of 8 (twice). The CNN:
# fan-ins 9, 36 and 32, the loss, the weight gradients over 8 x 8 x 8,
# 8 x 2 x 2 and 8 positions. A run chains its steps.
STEP_REDUCTION = {"mlp": 16 + 32 + 4 + 8 + 8 + 8, "cnn": 9 + 36 + 32 + 4 + 8 + 8 * 8 * 8 + 8 * 2 * 2 + 8}


def mlp():
    return paddle.nn.Sequential(paddle.nn.Linear(16, 32), paddle.nn.ReLU(), paddle.nn.Linear(32, 4))


def cnn():
    return paddle.nn.Sequential(
        paddle.nn.Conv2D(1, 4, 3, padding=1),
        paddle.nn.ReLU(),
        paddle.nn.MaxPool2D(2),
        paddle.nn.Conv2D(4, 8, 3),
        paddle.nn.ReLU(),
        paddle.nn.Flatten(),
        paddle.nn.Linear(8 * 2 * 2, 4),
    )


def batches(kind):
    rng = np.random.default_rng(7)
    shape = (8, 16) if kind == "mlp" else (8, 1, 8, 8)
    return [
        (rng.standard_normal(shape).astype("float32"), rng.integers(0, 4, (8, 1)).astype("int64"))
        for _ in range(STEPS)
    ]


def train(kind, opt_name, device, state, data, backward_twice=False):
    paddle.set_device(device)
    model = mlp() if kind == "mlp" else cnn()
    model.set_state_dict({k: paddle.to_tensor(v) for k, v in state.items()})
    params = model.parameters()
    if opt_name == "sgd":
        opt = paddle.optimizer.SGD(learning_rate=0.1, parameters=params)
    else:
        opt = paddle.optimizer.Adam(learning_rate=0.01, parameters=params)
    losses = []
    for x, y in data:
        loss = paddle.nn.functional.cross_entropy(model(paddle.to_tensor(x)), paddle.to_tensor(y))
        if backward_twice == "once":
            (loss * 0.5).backward()  # a deliberately wrong run: half the gradient
        elif backward_twice:
            # Gradients accumulate into the existing .grad on the device.
            half = loss * 0.5
            half.backward(retain_graph=True)
            half.backward()
        else:
            loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(loss.numpy())
    places = {str(p.place) for p in model.parameters()}
    return np.array(losses), {k: v.numpy() for k, v in model.state_dict().items()}, places


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_training_on_dipu_equals_cpu(kind, opt_name):
    paddle.seed(3)
    paddle.set_device("cpu")
    init = {k: v.numpy() for k, v in (mlp() if kind == "mlp" else cnn()).state_dict().items()}
    data = batches(kind)
    cpu_losses, cpu_params, cpu_places = train(kind, opt_name, "cpu", init, data)
    dipu_losses, dipu_params, dipu_places = train(kind, opt_name, "dipu:0", init, data)
    assert cpu_places == {"Place(cpu)"}
    assert dipu_places == {"Place(dipu:0)"}
    k = STEP_REDUCTION[kind] * STEPS
    assert_close(dipu_losses, cpu_losses, reduction_len=k, msg="losses")
    assert cpu_losses[-1] < cpu_losses[0]  # it learns
    for name in cpu_params:
        assert_trained_close(dipu_params[name], cpu_params[name], init[name], reduction_len=k, msg=name)
    assert any(not np.array_equal(cpu_params[name], init[name]) for name in init)


def test_gradient_accumulation_on_dipu():
    """Two backward passes of half the loss accumulate into .grad on the
    device (Paddle runs that add directly on dipu memory): the steps match
    one backward of the whole loss on the CPU. (Paddle 3.3.1's own CPU run
    of the two half passes drifts from that by ~1e-2 after a few steps,
    so the CPU's one-pass run is the reference.)"""
    paddle.seed(4)
    paddle.set_device("cpu")
    init = {k: v.numpy() for k, v in mlp().state_dict().items()}
    data = batches("mlp")[:5]
    cpu = train("mlp", "sgd", "cpu", init, data)
    dipu = train("mlp", "sgd", "dipu:0", init, data, backward_twice=True)
    k = STEP_REDUCTION["mlp"] * len(data)
    assert_close(dipu[0], cpu[0], reduction_len=k, msg="losses")
    for name in cpu[1]:
        assert_trained_close(dipu[1][name], cpu[1][name], init[name], reduction_len=k, msg=name)
    # The bound does not hide a lost accumulation: one backward of half the
    # loss (the second pass's gradient missing) fails it.
    half = train("mlp", "sgd", "dipu:0", init, data, backward_twice="once")
    for name in cpu[1]:
        with pytest.raises(AssertionError, match="elements differ"):
            assert_trained_close(half[1][name], cpu[1][name], init[name], reduction_len=k, msg=name)


def static_losses(place, steps=3):
    paddle.enable_static()
    try:
        main, startup = paddle.static.Program(), paddle.static.Program()
        main.random_seed = startup.random_seed = 5
        with paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [8, 16], "float32")
            y = paddle.static.data("y", [8, 1], "int64")
            h = paddle.nn.functional.relu(paddle.static.nn.fc(x, 32))
            loss = paddle.nn.functional.cross_entropy(paddle.static.nn.fc(h, 4), y).mean()
            paddle.optimizer.SGD(0.1).minimize(loss)
        exe = paddle.static.Executor(place)
        exe.run(startup)
        rng = np.random.default_rng(0)
        feed = {"x": rng.standard_normal((8, 16)).astype("float32"), "y": rng.integers(0, 4, (8, 1)).astype("int64")}
        return np.array([exe.run(main, feed=feed, fetch_list=[loss])[0] for _ in range(steps)])
    finally:
        paddle.disable_static()


@pytest.mark.xfail(strict=True, reason="static graph (PIR): the CPU fallback of the in-place sgd_ update "
                   "is not written back to the dipu parameter (docs/paddle.md, not supported)")
def test_static_graph_training_on_dipu_equals_cpu():
    cpu = static_losses(paddle.CPUPlace())
    assert cpu[1] < cpu[0]
    dipu = static_losses(paddle.CustomPlace("dipu", 0))
    assert_close(dipu, cpu, reduction_len=STEP_REDUCTION["mlp"] * 3, msg="losses")
