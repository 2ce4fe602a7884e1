"""Paddle on dipu against Paddle on the CPU, in one run: paddle.empty + del
(4 KiB and 16 MiB) and one MLP training step (SGD), median of repeats.
Run with .venv-paddle/bin/python (the plugin installed by build.sh)."""

import os
import statistics
import time

os.environ.setdefault("FLAGS_use_stride_kernel", "0")
os.environ.setdefault("GLOG_minloglevel", "2")

import numpy as np  # noqa: E402
import paddle  # noqa: E402


def median_us(fn, n, repeats=7):
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(out)


def empty_del(numel):
    def f():
        x = paddle.empty([numel], dtype="float32")
        del x

    return f


def mlp_step():
    model = paddle.nn.Sequential(paddle.nn.Linear(256, 512), paddle.nn.ReLU(), paddle.nn.Linear(512, 10))
    opt = paddle.optimizer.SGD(learning_rate=0.01, parameters=model.parameters())
    rng = np.random.default_rng(0)
    x = paddle.to_tensor(rng.standard_normal((64, 256)).astype("float32"))
    y = paddle.to_tensor(rng.integers(0, 10, (64, 1)).astype("int64"))

    def f():
        loss = paddle.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        float(loss)

    return f


def main():
    rows = [
        ("`paddle.empty` + `del`, 4 KiB", lambda: empty_del(1024), 2000),
        ("`paddle.empty` + `del`, 16 MiB", lambda: empty_del(4 << 20), 2000),
        ("MLP training step (256-512-10, batch 64, SGD)", mlp_step, 30),
    ]
    print("| benchmark | dipu | CPU | dipu/CPU |")
    print("|---|---|---|---|")
    for name, make, n in rows:
        res = {}
        for dev in ("dipu:0", "cpu"):
            paddle.set_device(dev)
            res[dev] = median_us(make(), n)
        fmt = lambda us: f"{us:.1f} µs" if us < 1000 else f"{us / 1000:.2f} ms"  # noqa: E731
        print(f"| {name} | {fmt(res['dipu:0'])} | {fmt(res['cpu'])} | {res['dipu:0'] / res['cpu']:.2f} |")


if __name__ == "__main__":
    main()
